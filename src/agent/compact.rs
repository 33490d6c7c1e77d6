//! Compaction: keeping a long conversation inside the model's context window.
//!
//! The agent loop keeps the whole conversation (`full`, saved as the stage's
//! transcript); what is sent each turn is a *view* of it built here. While
//! the view's estimated size stays under `compact_at × context_window` the
//! view is the conversation itself. When it passes that share, older tool
//! results are condensed, in two steps, down to a low-water mark
//! ([`LOW_WATER`] of the trigger) so compaction does not run every turn:
//!
//! 1. **Stubs.** Old tool results are replaced by a one-line stub such as
//!    `[compacted: read_file src/x.rs, 230 lines, 9.1 KB — re-run the tool if
//!    needed]`. The tool message stays, so every tool call is still answered.
//! 2. **Summary.** If that is not enough, the model is asked (no tools, agent
//!    path `<agent>/compact`) to summarise the older part of the
//!    conversation, which is replaced by one user message holding the summary.
//!
//! Always kept: the system prompt, the task (first user message), the last
//! [`DEFAULT_KEEP_TURNS`] assistant turns and their results (fewer only when
//! those alone do not fit, down to the latest turn), and every result still
//! *referenced*: its call id, its file path, or a distinctive token of it (a
//! word of 5+ characters with letters and digits, like `FACT-7731` or a SHA)
//! appears in a later assistant message's text or tool arguments. A result
//! superseded by a later call of the same tool on the same path is not
//! protected by references. Protection is recomputed every turn, so a stubbed
//! result that becomes referenced is shown whole again; referenced results
//! inside a summarised range are carried verbatim in the summary message.
//!
//! Size estimate: the bytes of the serialized request (messages and tool
//! definitions, as JSON, plus a fixed overhead) × tokens per byte — 1/4 until
//! a response reports `prompt_tokens`, then calibrated on the last one.
//!
//! The window used is the smallest one known: the configured one, the one
//! the server reports ([`crate::llm::ChatModel::probe_context_window`],
//! asked on the first turn), and what a context-length error taught — the
//! window the server named in it, and the refused request's size. After
//! such an error the conversation is compacted and the turn retried once;
//! a request compaction could not shrink is not sent again but fails with
//! the numbers ([`send_turn`]).
//! Every compaction is an action-log event `compaction` (stubbed call ids,
//! summarised messages, protected ids, bytes and estimated tokens before and
//! after, the estimate's method).

use super::budget::Tracker;
use crate::llm::{ChatMessage, ChatModel, ChatRequest, MessageRole, ToolCall};
use crate::runlog::{ActionEvent, ActionLog, RecordError, TokenCount, event};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::ops::Range;

/// The context window assumed when none is configured (the model settings' one).
pub(crate) use crate::llm::settings::DEFAULT_CONTEXT_WINDOW;
/// Compaction condenses down to this share of the trigger size, so the
/// next one is some turns away.
pub(crate) const LOW_WATER: f64 = 0.75;
/// Results smaller than this are not worth a stub.
const STUB_MIN_BYTES: usize = 256;
/// Bytes of a request body outside `messages` and `tools` (model name,
/// `tool_choice`, braces), counted generously.
const REQUEST_OVERHEAD_BYTES: usize = 256;
/// Tokens per byte before any response has reported `prompt_tokens`.
const DEFAULT_TOKENS_PER_BYTE: f64 = 0.25;
/// Room kept for the summary message when deciding whether one would help.
const SUMMARY_RESERVE_BYTES: usize = 2048;
impl Compactor {
    /// A compactor with nothing condensed yet.
    pub(crate) fn new(cfg: CompactConfig) -> Self {
        Compactor {
            cfg,
            stubbed: HashSet::new(),
            summary: None,
            tokens_per_byte: None,
            window_cap: None,
            probed: false,
            stream_fallback_logged: false,
            result_tokens: HashMap::new(),
            summary_tokens: TokenCount::default(),
        }
    }

    /// Tokens spent on summary requests (not counted as turns).
    pub(crate) fn summary_tokens(&self) -> TokenCount {
        self.summary_tokens
    }

    fn active(&self) -> bool {
        !self.stubbed.is_empty() || self.summary.is_some()
    }

    fn tpb(&self) -> f64 {
        self.tokens_per_byte.unwrap_or(DEFAULT_TOKENS_PER_BYTE)
    }

    fn est(&self, bytes: usize) -> u64 {
        (bytes as f64 * self.tpb()).ceil() as u64
    }

    fn window(&self) -> u64 {
        self.window_cap
            .map_or(self.cfg.context_window, |c| c.min(self.cfg.context_window))
    }

    /// Learns a context window (from the server, or from a refused request):
    /// compaction uses the smallest one known.
    pub(crate) fn learn_window(&mut self, tokens: u64) {
        let tokens = tokens.max(1);
        self.window_cap = Some(self.window_cap.map_or(tokens, |c| c.min(tokens)));
    }

    /// The size at which compaction starts, in estimated tokens.
    pub(crate) fn trigger_tokens(&self) -> u64 {
        (self.window() as f64 * self.cfg.compact_at) as u64
    }

    fn method(&self) -> String {
        match self.tokens_per_byte {
            None => "serialized request bytes / 4".to_owned(),
            Some(t) => format!(
                "serialized request bytes × {t:.3} tokens/byte (calibrated on the last response's prompt_tokens)"
            ),
        }
    }

    /// Learns tokens per byte from a response to a request of `bytes`.
    pub(crate) fn calibrate(&mut self, bytes: usize, prompt_tokens: u64) {
        if prompt_tokens > 0 && bytes > 0 {
            self.tokens_per_byte = Some((prompt_tokens as f64 / bytes as f64).clamp(0.05, 1.0));
        }
    }

    /// The request to send for `full`, compacting first when it is too large
    /// (or when `trigger` says so). Returns the request and its size in bytes.
    async fn prepare<'a>(
        &mut self,
        model: &dyn ChatModel,
        full: &'a ChatRequest,
        turn: u32,
        trigger: Trigger,
        tracker: &mut Tracker,
        log: &mut ActionLog,
    ) -> Result<(Cow<'a, ChatRequest>, usize), RecordError> {
        let tools_bytes = json_len(&full.tools) + REQUEST_OVERHEAD_BYTES;
        let mut pinned = if self.active() {
            self.pinned(&full.messages)
        } else {
            HashSet::new()
        };
        let mut view = self.view(full, &pinned);
        let mut bytes = json_len(view.messages.as_slice()) + tools_bytes;
        if trigger == Trigger::Threshold && self.est(bytes) <= self.trigger_tokens() {
            return Ok((view, bytes));
        }
        if !self.active() {
            pinned = self.pinned(&full.messages);
        }
        self.compact(
            model,
            full,
            turn,
            trigger,
            &pinned,
            bytes,
            tools_bytes,
            tracker,
            log,
        )
        .await?;
        view = self.view(full, &pinned);
        bytes = json_len(view.messages.as_slice()) + tools_bytes;
        Ok((view, bytes))
    }

    /// Condenses older results (stubs, then a summary) down to the low-water
    /// mark, and logs what was done.
    #[allow(clippy::too_many_arguments)]
    async fn compact(
        &mut self,
        model: &dyn ChatModel,
        full: &ChatRequest,
        turn: u32,
        trigger: Trigger,
        pinned: &HashSet<usize>,
        bytes_before: usize,
        tools_bytes: usize,
        tracker: &mut Tracker,
        log: &mut ActionLog,
    ) -> Result<(), RecordError> {
        let msgs = &full.messages;
        let goal = self.trigger_tokens();
        let low = (goal as f64 * LOW_WATER) as u64;
        let mut bytes = bytes_before;
        let mut stubbed_now: Vec<usize> = Vec::new();
        let mut summarized: Option<(Range<usize>, usize)> = None;
        let mut summary_error: Option<String> = None;
        let mut keep = self.cfg.keep_turns.max(1);
        loop {
            let live = self.live_start(msgs);
            let tail = tail_start(msgs, live, keep);
            for i in live..tail {
                if self.est(bytes) <= low {
                    break;
                }
                let m = &msgs[i];
                let content = m.content.as_deref().unwrap_or("");
                if m.role != MessageRole::Tool
                    || self.stubbed.contains(&i)
                    || pinned.contains(&i)
                    || content.len() < STUB_MIN_BYTES
                {
                    continue;
                }
                let stub = stub_text(call_of(msgs, i), content);
                bytes = bytes + json_len(&stub) - json_len(content);
                self.stubbed.insert(i);
                stubbed_now.push(i);
            }
            if self.est(bytes) <= goal {
                break;
            }
            // A summary is a model call and loses detail: ask for one only
            // when replacing the older part could bring the request under
            // the trigger (otherwise the kept turns themselves are too big),
            // or as the last resort.
            let floor = bytes.saturating_sub(self.older_bytes(msgs, live..tail, pinned))
                + SUMMARY_RESERVE_BYTES;
            if summarized.is_none()
                && summary_error.is_none()
                && tail > live + 1
                && (self.est(floor) <= goal || keep == 1)
            {
                match self.summarize(model, full, live..tail, tracker).await {
                    Ok(len) => {
                        summarized = Some((live..tail, len));
                        let view = self.view(full, pinned);
                        bytes = json_len(view.messages.as_slice()) + tools_bytes;
                        if self.est(bytes) <= goal {
                            break;
                        }
                    }
                    Err(e) => summary_error = Some(e),
                }
            }
            if keep == 1 {
                break;
            }
            keep -= 1;
        }

        let method = match (stubbed_now.is_empty(), summarized.is_some()) {
            (false, false) => "stub",
            (true, true) => "summary",
            (false, true) => "stub+summary",
            (true, false) => "none",
        };
        let ids = |idx: &mut dyn Iterator<Item = usize>| -> Vec<String> {
            idx.filter_map(|i| msgs[i].tool_call_id.clone()).collect()
        };
        let live = self.live_start(msgs);
        let mut pinned_sorted: Vec<usize> = pinned.iter().copied().collect();
        pinned_sorted.sort_unstable();
        log.append(&ActionEvent::Compaction(event::Compaction {
            turn,
            trigger: match trigger {
                Trigger::Threshold => "threshold",
                Trigger::ContextLengthError => "context_length_error",
            }
            .to_owned(),
            method: method.to_owned(),
            stubbed: ids(&mut stubbed_now.iter().copied()),
            summarized: summarized.as_ref().map(|(r, len)| event::Summarized {
                messages: r.len(),
                call_ids: ids(&mut r.clone().filter(|&i| msgs[i].role == MessageRole::Tool)),
                summary_bytes: *len,
            }),
            summary_error,
            kept: ids(&mut pinned_sorted.into_iter()),
            kept_turns: keep,
            live_from: live,
            bytes_before,
            bytes_after: bytes,
            est_tokens_before: self.est(bytes_before),
            est_tokens_after: self.est(bytes),
            trigger_tokens: goal,
            context_window: self.window(),
            estimate: self.method(),
            under_trigger: self.est(bytes) <= goal,
        }))?;
        if self.est(bytes) > goal {
            tracing::warn!(
                turn,
                est_tokens = self.est(bytes),
                trigger_tokens = goal,
                "compaction could not bring the request under the trigger size"
            );
        }
        Ok(())
    }

    /// Bytes the messages of `range` take in the view, minus referenced
    /// results (a summary would carry those along).
    fn older_bytes(
        &self,
        msgs: &[ChatMessage],
        range: Range<usize>,
        pinned: &HashSet<usize>,
    ) -> usize {
        range
            .filter(|i| !pinned.contains(i))
            .map(|i| {
                let m = &msgs[i];
                if m.role == MessageRole::Tool && self.stubbed.contains(&i) {
                    json_len(&stub_text(
                        call_of(msgs, i),
                        m.content.as_deref().unwrap_or(""),
                    )) + 40
                } else {
                    json_len(m) + 1
                }
            })
            .sum()
    }

    /// Index of the first message after the summary (or after the task).
    fn live_start(&self, msgs: &[ChatMessage]) -> usize {
        self.summary.as_ref().map_or(msgs.len().min(2), |s| s.upto)
    }

    /// The conversation as sent: head, summary message, then the live part
    /// with stubs for condensed results that are not referenced.
    fn view<'a>(&self, full: &'a ChatRequest, pinned: &HashSet<usize>) -> Cow<'a, ChatRequest> {
        if !self.active() {
            return Cow::Borrowed(full);
        }
        let msgs = &full.messages;
        let head = msgs.len().min(2);
        let mut out: Vec<ChatMessage> = Vec::with_capacity(msgs.len());
        out.extend_from_slice(&msgs[..head]);
        let mut start = head;
        if let Some(s) = &self.summary {
            out.push(ChatMessage::user(summary_message(s, msgs, pinned)));
            start = s.upto;
        }
        for (i, m) in msgs.iter().enumerate().skip(start) {
            match &m.tool_call_id {
                Some(id)
                    if m.role == MessageRole::Tool
                        && self.stubbed.contains(&i)
                        && !pinned.contains(&i) =>
                {
                    let content = m.content.as_deref().unwrap_or("");
                    out.push(ChatMessage::tool(
                        id.clone(),
                        stub_text(call_of(msgs, i), content),
                    ));
                }
                _ => out.push(m.clone()),
            }
        }
        Cow::Owned(ChatRequest {
            messages: out,
            tools: full.tools.clone(),
            agent_path: full.agent_path.clone(),
            call_mode: full.call_mode,
        })
    }
}

/// Bytes of `v` serialized as JSON.
fn json_len<T: serde::Serialize + ?Sized>(v: &T) -> usize {
    serde_json::to_vec(v).map_or(0, |b| b.len())
}

/// Index of the `keep`-th last assistant message at or after `live`, or
/// `live` when there are fewer (nothing before it may be condensed).
fn tail_start(msgs: &[ChatMessage], live: usize, keep: usize) -> usize {
    let mut seen = 0;
    for i in (live..msgs.len()).rev() {
        if msgs[i].role == MessageRole::Assistant {
            seen += 1;
            if seen == keep {
                return i;
            }
        }
    }
    live
}

fn size(bytes: usize) -> String {
    if bytes < 1024 {
        format!("{bytes} B")
    } else {
        format!("{:.1} KB", bytes as f64 / 1024.0)
    }
}

/// The one-line stand-in for a condensed tool result.
fn stub_text(call: Option<&ToolCall>, content: &str) -> String {
    format!(
        "[compacted: {}, {} lines, {} — re-run the tool if needed]",
        describe(call),
        content.lines().count(),
        size(content.len())
    )
}

mod refs;
mod state;
mod summary;
mod turn;

use refs::call_of;
pub(crate) use state::CompactConfig;
pub(crate) use state::{Compactor, DEFAULT_COMPACT_AT};
use state::{Trigger, describe};
use summary::summary_message;
pub(crate) use turn::{Sent, send_turn};

#[cfg(test)]
mod tests;
