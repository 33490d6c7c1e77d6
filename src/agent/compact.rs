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
//! A context-length error from the model lowers the assumed window to the
//! refused request's size, compacts, and retries once ([`send_turn`]).
//! Every compaction is an action-log event `compaction` (stubbed call ids,
//! summarised messages, protected ids, bytes and estimated tokens before and
//! after, the estimate's method).

use super::budget::Tracker;
use crate::llm::{
    ChatMessage, ChatModel, ChatRequest, ChatResponse, LlmError, MessageRole, ToolCall,
};
use crate::runlog::{ActionLog, RecordError, TokenCount};
use serde_json::json;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::ops::Range;

/// The context window assumed when none is configured, in tokens.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;
/// The share of the context window at which compaction starts.
pub const DEFAULT_COMPACT_AT: f64 = 0.7;
/// Assistant turns (with their results) always kept whole when they fit.
pub const DEFAULT_KEEP_TURNS: usize = 4;
/// Compaction condenses down to this share of the trigger size, so the
/// next one is some turns away.
pub const LOW_WATER: f64 = 0.75;
/// Results smaller than this are not worth a stub.
const STUB_MIN_BYTES: usize = 256;
/// Bytes of a request body outside `messages` and `tools` (model name,
/// `tool_choice`, braces), counted generously.
const REQUEST_OVERHEAD_BYTES: usize = 128;
/// Tokens per byte before any response has reported `prompt_tokens`.
const DEFAULT_TOKENS_PER_BYTE: f64 = 0.25;
/// Room kept for the summary message when deciding whether one would help.
const SUMMARY_RESERVE_BYTES: usize = 2048;
/// Cap on one message's text in the summary request.
const SUMMARY_MESSAGE_CAP: usize = 2048;
/// Appended to the agent path of summary requests (`code/compact`).
pub const SUMMARY_AGENT_SUFFIX: &str = "/compact";

const SUMMARY_PROMPT: &str = "You condense the history of a coding agent's session so it can continue with less context. Summarise the conversation you are given for the agent itself: what it was asked, what it did, what it found (files, functions, facts, numbers, error messages), what it changed, and what is still open. Be specific and brief (at most 300 words). Do not call tools; answer with the summary only.";

/// When and how to compact.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactConfig {
    /// The model's context window in tokens.
    pub context_window: u64,
    /// Compact when the request passes this share of the window (0 < x ≤ 1).
    pub compact_at: f64,
    /// Assistant turns always kept whole when they fit.
    pub keep_turns: usize,
}

impl Default for CompactConfig {
    fn default() -> Self {
        CompactConfig {
            context_window: DEFAULT_CONTEXT_WINDOW,
            compact_at: DEFAULT_COMPACT_AT,
            keep_turns: DEFAULT_KEEP_TURNS,
        }
    }
}

/// The older part of the conversation, replaced by a summary.
#[derive(Debug)]
struct Summary {
    /// Index in the full conversation of the first message not summarised
    /// (always an assistant message).
    upto: usize,
    /// The model's summary.
    text: String,
}

/// Builds the request sent each turn from the full conversation.
#[derive(Debug)]
pub struct Compactor {
    cfg: CompactConfig,
    /// Indices (in the full conversation) of tool results shown as stubs.
    stubbed: HashSet<usize>,
    summary: Option<Summary>,
    tokens_per_byte: Option<f64>,
    /// A window below the configured one, learned from a context-length error.
    window_cap: Option<u64>,
    /// Distinctive tokens of each tool result, by index (results never change).
    result_tokens: HashMap<usize, Vec<String>>,
    summary_tokens: TokenCount,
}

/// What sending one turn came to.
#[derive(Debug)]
pub enum Sent {
    /// The model answered; `bytes` is the size of the request it answered.
    Reply(ChatResponse),
    /// The model failed (after its own retries, and after one compaction
    /// retry for a context-length error).
    Failed(LlmError),
    /// The time budget ran out while waiting.
    OutOfBudget(String),
}

/// Why compaction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    Threshold,
    ContextLengthError,
}

impl Compactor {
    /// A compactor with nothing condensed yet.
    pub fn new(cfg: CompactConfig) -> Self {
        Compactor {
            cfg,
            stubbed: HashSet::new(),
            summary: None,
            tokens_per_byte: None,
            window_cap: None,
            result_tokens: HashMap::new(),
            summary_tokens: TokenCount::default(),
        }
    }

    /// Tokens spent on summary requests (not counted as turns).
    pub fn summary_tokens(&self) -> TokenCount {
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

    /// The size at which compaction starts, in estimated tokens.
    pub fn trigger_tokens(&self) -> u64 {
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
    pub fn calibrate(&mut self, bytes: usize, prompt_tokens: u64) {
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
        log.append(
            "compaction",
            json!({
                "turn": turn,
                "trigger": match trigger {
                    Trigger::Threshold => "threshold",
                    Trigger::ContextLengthError => "context_length_error",
                },
                "method": method,
                "stubbed": ids(&mut stubbed_now.iter().copied()),
                "summarized": summarized.as_ref().map(|(r, len)| json!({
                    "messages": r.len(),
                    "call_ids": ids(&mut r.clone().filter(|&i| msgs[i].role == MessageRole::Tool)),
                    "summary_bytes": len,
                })),
                "summary_error": summary_error,
                "kept": ids(&mut pinned_sorted.into_iter()),
                "kept_turns": keep,
                "live_from": live,
                "bytes_before": bytes_before,
                "bytes_after": bytes,
                "est_tokens_before": self.est(bytes_before),
                "est_tokens_after": self.est(bytes),
                "trigger_tokens": goal,
                "context_window": self.window(),
                "estimate": self.method(),
                "under_trigger": self.est(bytes) <= goal,
            }),
        )?;
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

    /// Asks the model to summarise `range` of the conversation; on success
    /// the range is replaced by the summary. Returns the summary's length.
    async fn summarize(
        &mut self,
        model: &dyn ChatModel,
        full: &ChatRequest,
        range: Range<usize>,
        tracker: &mut Tracker,
    ) -> Result<usize, String> {
        let msgs = &full.messages;
        // The summary request must itself fit: share the trigger size out
        // among the messages to summarise.
        let budget_bytes = (self.trigger_tokens() as f64 / self.tpb() * 0.8) as usize;
        let per_message = (budget_bytes / range.len().max(1)).clamp(160, SUMMARY_MESSAGE_CAP);
        let mut text = String::new();
        if let Some(s) = &self.summary {
            text.push_str("Summary of what came before:\n");
            text.push_str(&s.text);
            text.push_str("\n\n");
        }
        text.push_str("The conversation to summarise:\n");
        for i in range.clone() {
            text.push_str(&render_for_summary(msgs, i, per_message));
            text.push('\n');
        }
        let req = ChatRequest {
            messages: vec![ChatMessage::system(SUMMARY_PROMPT), ChatMessage::user(text)],
            tools: Vec::new(),
            agent_path: format!("{}{SUMMARY_AGENT_SUFFIX}", full.agent_path),
        };
        let resp = match tracker.bounded(model.complete(&req)).await {
            Err(why) => return Err(why),
            Ok(Err(e)) => return Err(format!("failed to {e}")),
            Ok(Ok(r)) => r,
        };
        tracker.record_usage(resp.usage.prompt_tokens, resp.usage.completion_tokens);
        self.summary_tokens.add(TokenCount {
            prompt: resp.usage.prompt_tokens,
            completion: resp.usage.completion_tokens,
        });
        let summary = resp.message.content.unwrap_or_default().trim().to_owned();
        if summary.is_empty() {
            return Err("the model answered the summary request without text".to_owned());
        }
        let len = summary.len();
        self.summary = Some(Summary {
            upto: range.end,
            text: summary,
        });
        Ok(len)
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
        })
    }

    /// Indices of the tool results a later assistant message refers to (see
    /// the module docs).
    fn pinned(&mut self, msgs: &[ChatMessage]) -> HashSet<usize> {
        let mut later_distinct: HashSet<String> = HashSet::new();
        let mut later_all: HashSet<String> = HashSet::new();
        let mut later_calls: HashSet<(String, String)> = HashSet::new();
        let mut pinned = HashSet::new();
        for i in (msgs.len().min(2)..msgs.len()).rev() {
            let m = &msgs[i];
            match m.role {
                MessageRole::Assistant => {
                    let texts = m
                        .content
                        .iter()
                        .map(String::as_str)
                        .chain(m.tool_calls.iter().map(|c| c.function.arguments.as_str()));
                    for text in texts {
                        for t in tokens(text) {
                            if is_distinctive(t) {
                                later_distinct.insert(t.to_owned());
                            }
                            later_all.insert(normalize_path(t).to_owned());
                        }
                    }
                }
                MessageRole::Tool => {
                    let call = call_of(msgs, i);
                    let name = call.map_or("", |c| c.function.name.as_str());
                    let path = call.and_then(path_arg);
                    let key = path.as_ref().map(|p| (name.to_owned(), p.clone()));
                    if key.as_ref().is_some_and(|k| later_calls.contains(k)) {
                        // Superseded by a later call of the same tool on the same path.
                        continue;
                    }
                    let content = m.content.as_deref().unwrap_or("");
                    let own = self
                        .result_tokens
                        .entry(i)
                        .or_insert_with(|| distinctive_tokens(content));
                    let referenced = own.iter().any(|t| later_distinct.contains(t))
                        || m.tool_call_id
                            .as_ref()
                            .is_some_and(|id| later_all.contains(id.as_str()))
                        || path
                            .as_ref()
                            .is_some_and(|p| later_all.contains(p.as_str()));
                    if referenced {
                        pinned.insert(i);
                    }
                    if let Some(k) = key {
                        later_calls.insert(k);
                    }
                }
                _ => {}
            }
        }
        pinned
    }
}

/// Sends one turn: builds the request from `full` (compacting when needed),
/// waits for the model within the time budget, and on a context-length
/// error compacts harder and retries once. Logs the `request` event.
pub async fn send_turn(
    model: &dyn ChatModel,
    full: &ChatRequest,
    turn: u32,
    compactor: &mut Compactor,
    tracker: &mut Tracker,
    log: &mut ActionLog,
) -> Result<Sent, RecordError> {
    let mut trigger = Trigger::Threshold;
    loop {
        let (req, bytes) = compactor
            .prepare(model, full, turn, trigger, tracker, log)
            .await?;
        log.append(
            "request",
            json!({"turn": turn, "messages": req.messages.len(), "approx_bytes": bytes}),
        )?;
        match tracker.bounded(model.complete(&req)).await {
            Err(why) => return Ok(Sent::OutOfBudget(why)),
            Ok(Ok(resp)) => {
                compactor.calibrate(bytes, resp.usage.prompt_tokens);
                return Ok(Sent::Reply(resp));
            }
            Ok(Err(e)) if trigger == Trigger::Threshold && is_context_length(&e) => {
                log.append(
                    "model_error",
                    json!({"turn": turn, "error": format!("failed to {e}"), "retry": "compacting the conversation and retrying once"}),
                )?;
                // The server refused this size: the real window is smaller.
                compactor.window_cap = Some(compactor.est(bytes).max(1));
                trigger = Trigger::ContextLengthError;
            }
            Ok(Err(e)) => return Ok(Sent::Failed(e)),
        }
    }
}

/// Whether a model error says the request was longer than the context window.
///
/// The model client does not classify this yet; until it does
/// (`LlmError::is_context_length()`), this matches the servers' wording
/// (OpenAI and vLLM: "maximum context length", `context_length_exceeded`;
/// llama.cpp: "context size"; others: "context window").
pub fn is_context_length(e: &LlmError) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    text.contains("context")
        && (text.contains("length")
            || text.contains("maximum context")
            || text.contains("context size")
            || text.contains("context window"))
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

/// The tool call that the tool result at `i` answers.
fn call_of(msgs: &[ChatMessage], i: usize) -> Option<&ToolCall> {
    let id = msgs[i].tool_call_id.as_deref()?;
    msgs[..i]
        .iter()
        .rev()
        .find(|m| m.role == MessageRole::Assistant)?
        .tool_calls
        .iter()
        .find(|c| c.id == id)
}

/// The `path` argument of a call, normalised (`./a.py` → `a.py`).
fn path_arg(call: &ToolCall) -> Option<String> {
    let args: serde_json::Value = serde_json::from_str(&call.function.arguments).ok()?;
    let p = args.get("path")?.as_str()?;
    let p = normalize_path(p);
    (!p.is_empty() && p != ".").then(|| p.to_owned())
}

fn normalize_path(p: &str) -> &str {
    p.trim_start_matches("./")
}

/// Words for reference matching: runs of letters, digits and `_-./`.
fn tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "_-./".contains(c)))
        .map(|t| t.trim_matches(|c: char| c == '.' || c == '-'))
        .filter(|t| !t.is_empty())
}

/// A word specific enough that mentioning it means referring to the result
/// holding it: 5+ characters with both letters and digits (ids, SHAs,
/// error codes, `FACT-7731`), but not plain words or numbers.
fn is_distinctive(t: &str) -> bool {
    (5..=128).contains(&t.len())
        && t.bytes().any(|b| b.is_ascii_digit())
        && t.bytes().any(|b| b.is_ascii_alphabetic())
}

fn distinctive_tokens(text: &str) -> Vec<String> {
    let set: HashSet<&str> = tokens(text).filter(|t| is_distinctive(t)).collect();
    set.into_iter().map(str::to_owned).collect()
}

/// `read_file src/x.rs`, `bash \`cargo test\``, …: a call in a few words.
fn describe(call: Option<&ToolCall>) -> String {
    let Some(call) = call else {
        return "a tool call".to_owned();
    };
    let name = call.function.name.as_str();
    let args: serde_json::Value =
        serde_json::from_str(&call.function.arguments).unwrap_or_default();
    let arg = |k: &str| args.get(k).and_then(|v| v.as_str()).map(str::to_owned);
    let detail = match name {
        "bash" => arg("command").map(|c| {
            let c = c.replace('\n', " ");
            format!("`{}`", super::cap(&c, 60))
        }),
        "grep" => arg("pattern").map(|p| {
            let at = arg("path").map_or(String::new(), |p| format!(" in {p}"));
            format!("`{}`{at}", super::cap(&p, 40))
        }),
        "list_files" => arg("path").or_else(|| arg("pattern")),
        _ => arg("path"),
    };
    match detail {
        Some(d) => format!("{name} {d}"),
        None => name.to_owned(),
    }
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

/// The user message standing for a summarised range: the summary, then the
/// referenced results from that range, verbatim.
fn summary_message(s: &Summary, msgs: &[ChatMessage], pinned: &HashSet<usize>) -> String {
    let mut text = format!(
        "[Summary of the earlier conversation, condensed to save context; the full transcript is kept on disk. Earlier tool results are gone unless kept below: re-run a tool if you need its output again.]\n\n{}",
        s.text
    );
    let mut kept: Vec<usize> = pinned
        .iter()
        .copied()
        .filter(|&i| i < s.upto && msgs[i].role == MessageRole::Tool)
        .collect();
    kept.sort_unstable();
    for i in kept {
        text.push_str(&format!(
            "\n\n[kept: result of {} (call {})]\n{}",
            describe(call_of(msgs, i)),
            msgs[i].tool_call_id.as_deref().unwrap_or("?"),
            msgs[i].content.as_deref().unwrap_or("")
        ));
    }
    text
}

/// One message of the range to summarise, as plain text.
fn render_for_summary(msgs: &[ChatMessage], i: usize, cap: usize) -> String {
    let m = &msgs[i];
    let content = m.content.as_deref().unwrap_or("");
    match m.role {
        MessageRole::Assistant => {
            let mut s = format!("assistant: {}", super::cap(content, cap));
            for c in &m.tool_calls {
                s.push_str(&format!(
                    "\n  calls {}({})",
                    c.function.name,
                    super::cap(&c.function.arguments, 300)
                ));
            }
            s
        }
        MessageRole::Tool => format!(
            "result of {}: {}",
            describe(call_of(msgs, i)),
            super::cap(content, cap)
        ),
        MessageRole::User => format!("user: {}", super::cap(content, cap)),
        MessageRole::System => format!("system: {}", super::cap(content, cap)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{BoxFuture, FunctionCall, Usage};
    use std::sync::Mutex;

    fn call(id: &str, name: &str, args: serde_json::Value) -> ChatMessage {
        ChatMessage {
            role: MessageRole::Assistant,
            content: None,
            tool_calls: vec![ToolCall {
                id: id.into(),
                kind: "function".into(),
                function: FunctionCall {
                    name: name.into(),
                    arguments: args.to_string(),
                },
            }],
            tool_call_id: None,
        }
    }

    fn say(mut m: ChatMessage, text: &str) -> ChatMessage {
        m.content = Some(text.into());
        m
    }

    /// A conversation of `n` turns each reading a 6 KB file; turn 2's file
    /// holds FACT-7731, which turn 3's assistant message mentions.
    fn conversation(n: usize) -> ChatRequest {
        let mut messages = vec![ChatMessage::system("sys"), ChatMessage::user("task")];
        for t in 1..=n {
            let id = format!("c{t}");
            let path = format!("f{t}.txt");
            let mut m = call(&id, "read_file", json!({ "path": path }));
            if t == 3 {
                m = say(m, "Noted: the rotation period is FACT-7731.");
            }
            messages.push(m);
            let body = if t == 2 {
                "the rotation period is FACT-7731 days\n".to_owned()
            } else {
                format!("line of file {t}: some text here\n").repeat(180)
            };
            messages.push(ChatMessage::tool(id, body));
        }
        ChatRequest {
            messages,
            tools: Vec::new(),
            agent_path: "code".into(),
        }
    }

    /// Answers every request with a fixed summary and records requests.
    #[derive(Default)]
    struct Summarizer {
        seen: Mutex<Vec<ChatRequest>>,
        fail: bool,
    }

    impl ChatModel for Summarizer {
        fn complete<'a>(
            &'a self,
            req: &'a ChatRequest,
        ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
            self.seen.lock().unwrap().push(req.clone());
            let out = if self.fail {
                Err(LlmError::Config("down".into()))
            } else {
                Ok(ChatResponse {
                    message: ChatMessage {
                        role: MessageRole::Assistant,
                        content: Some("Read f1..fN; nothing changed.".into()),
                        tool_calls: vec![],
                        tool_call_id: None,
                    },
                    usage: Usage {
                        prompt_tokens: 100,
                        completion_tokens: 10,
                        total_tokens: 110,
                    },
                    finish_reason: None,
                })
            };
            Box::pin(std::future::ready(out))
        }
        fn label(&self) -> String {
            "summarizer".into()
        }
        fn model_name(&self) -> String {
            "s".into()
        }
        fn is_replay(&self) -> bool {
            false
        }
    }

    fn log() -> (tempfile::TempDir, ActionLog) {
        let dir = tempfile::tempdir().unwrap();
        let log = ActionLog::open(&dir.path().join("a.jsonl"), vec![]).unwrap();
        (dir, log)
    }

    fn events(dir: &tempfile::TempDir, kind: &str) -> Vec<serde_json::Value> {
        std::fs::read_to_string(dir.path().join("a.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|e| e["event"] == kind)
            .collect()
    }

    fn tracker() -> Tracker {
        Tracker::new(super::super::budget::StageBudget::default(), 100)
    }

    #[tokio::test]
    async fn small_conversations_are_sent_as_they_are() {
        let model = Summarizer::default();
        let (_d, mut log) = log();
        let mut c = Compactor::new(CompactConfig::default());
        let full = conversation(3);
        let (req, bytes) = c
            .prepare(
                &model,
                &full,
                1,
                Trigger::Threshold,
                &mut tracker(),
                &mut log,
            )
            .await
            .unwrap();
        assert!(matches!(req, Cow::Borrowed(_)));
        assert_eq!(bytes, json_len(&full.messages) + 2 + REQUEST_OVERHEAD_BYTES);
        assert!(model.seen.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn old_results_become_stubs_and_referenced_and_recent_ones_stay() {
        let model = Summarizer::default();
        let (dir, mut log) = log();
        // 10 turns of ~6 KB ≈ 60 KB ≈ 15k tokens; trigger at 0.7 × 16000 = 11200.
        let mut c = Compactor::new(CompactConfig {
            context_window: 16_000,
            ..CompactConfig::default()
        });
        let full = conversation(10);
        let (req, bytes) = c
            .prepare(
                &model,
                &full,
                10,
                Trigger::Threshold,
                &mut tracker(),
                &mut log,
            )
            .await
            .unwrap();
        assert!(c.est(bytes) <= c.trigger_tokens(), "{bytes}");
        assert_eq!(bytes, json_len(&req.messages) + 2 + REQUEST_OVERHEAD_BYTES);
        let tool = |id: &str| {
            req.messages
                .iter()
                .find(|m| m.tool_call_id.as_deref() == Some(id))
                .and_then(|m| m.content.clone())
                .unwrap()
        };
        assert_eq!(
            tool("c1"),
            "[compacted: read_file f1.txt, 180 lines, 5.4 KB — re-run the tool if needed]"
        );
        assert!(tool("c2").contains("FACT-7731 days"), "referenced: kept");
        for id in ["c7", "c8", "c9", "c10"] {
            assert!(!tool(id).starts_with("[compacted"), "{id} is recent");
        }
        // Every call is still answered, in order.
        assert_eq!(req.messages.len(), full.messages.len());
        assert!(model.seen.lock().unwrap().is_empty(), "stubs were enough");
        let ev = &events(&dir, "compaction")[0];
        assert_eq!(ev["method"], "stub");
        assert_eq!(ev["trigger"], "threshold");
        let stubbed: Vec<&str> = ev["stubbed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(
            stubbed.contains(&"c1") && !stubbed.contains(&"c2"),
            "{stubbed:?}"
        );
        assert!(ev["kept"].as_array().unwrap().contains(&json!("c2")));
        assert!(ev["bytes_after"].as_u64() < ev["bytes_before"].as_u64());
        assert_eq!(ev["estimate"], "serialized request bytes / 4");
    }

    #[tokio::test]
    async fn a_summary_replaces_the_older_part_when_stubs_are_not_enough() {
        let model = Summarizer::default();
        let (dir, mut log) = log();
        // 60 turns: even stubbed, the calls alone pass 0.7 × 6000 tokens.
        let mut c = Compactor::new(CompactConfig {
            context_window: 8_000,
            ..CompactConfig::default()
        });
        let full = conversation(60);
        let mut t = tracker();
        let (req, bytes) = c
            .prepare(&model, &full, 60, Trigger::Threshold, &mut t, &mut log)
            .await
            .unwrap();
        assert!(c.est(bytes) <= c.trigger_tokens(), "{bytes}");
        let seen = model.seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].agent_path, "code/compact");
        assert!(seen[0].tools.is_empty());
        // The summary message follows the task; the referenced fact is carried.
        let summary = req.messages[2].content.as_deref().unwrap();
        assert!(summary.contains("Read f1..fN"), "{summary}");
        assert!(summary.contains("the rotation period is FACT-7731 days"));
        assert_eq!(req.messages[3].role, MessageRole::Assistant);
        let pairing = serde_json::to_value(&req.messages).unwrap();
        assert!(pairing.as_array().unwrap().len() < full.messages.len());
        assert_eq!(c.summary_tokens().total(), 110);
        assert_eq!(
            t.used().tokens,
            110,
            "summary tokens count toward the budget"
        );
        let ev = &events(&dir, "compaction")[0];
        assert!(ev["method"].as_str().unwrap().contains("summary"));
        assert!(ev["summarized"]["messages"].as_u64().unwrap() > 10);
    }

    #[tokio::test]
    async fn a_failed_summary_falls_back_to_stubs() {
        let model = Summarizer {
            fail: true,
            ..Summarizer::default()
        };
        let (dir, mut log) = log();
        let mut c = Compactor::new(CompactConfig {
            context_window: 8_000,
            ..CompactConfig::default()
        });
        let full = conversation(60);
        let (req, _) = c
            .prepare(
                &model,
                &full,
                60,
                Trigger::Threshold,
                &mut tracker(),
                &mut log,
            )
            .await
            .unwrap();
        assert_eq!(req.messages.len(), full.messages.len());
        let ev = &events(&dir, "compaction")[0];
        assert!(ev["summary_error"].as_str().unwrap().contains("down"));
    }

    #[tokio::test]
    async fn a_stub_is_lifted_when_a_later_turn_refers_to_the_result() {
        let model = Summarizer::default();
        let (_d, mut log) = log();
        let mut c = Compactor::new(CompactConfig {
            context_window: 16_000,
            ..CompactConfig::default()
        });
        let mut full = conversation(10);
        c.prepare(
            &model,
            &full,
            10,
            Trigger::Threshold,
            &mut tracker(),
            &mut log,
        )
        .await
        .unwrap();
        assert!(c.stubbed.contains(&3), "c1's result (index 3) was stubbed");
        full.messages.push(say(
            call(
                "c11",
                "edit_file",
                json!({"path": "f1.txt", "old_string": "a", "new_string": "b"}),
            ),
            "",
        ));
        full.messages.push(ChatMessage::tool("c11", "ok"));
        let (req, _) = c
            .prepare(
                &model,
                &full,
                11,
                Trigger::Threshold,
                &mut tracker(),
                &mut log,
            )
            .await
            .unwrap();
        assert!(
            req.messages[3]
                .content
                .as_deref()
                .unwrap()
                .starts_with("line of file 1")
        );
    }

    #[test]
    fn references_by_token_id_and_path_and_superseded_reads() {
        let mut c = Compactor::new(CompactConfig::default());
        let msgs = vec![
            ChatMessage::system("s"),
            ChatMessage::user("t"),
            call("a1", "read_file", json!({"path": "x.rs"})),
            ChatMessage::tool("a1", "fn main() { let sha = \"9f3ab21\"; }"),
            call("a2", "read_file", json!({"path": "./x.rs"})),
            ChatMessage::tool("a2", "fn main() {}"),
            call("a3", "bash", json!({"command": "ls"})),
            ChatMessage::tool("a3", "plain words only"),
            call("a4", "grep", json!({"pattern": "zzz"})),
            ChatMessage::tool("a4", "nothing"),
            say(
                call("a5", "bash", json!({"command": "git show 9f3ab21"})),
                "See a4.",
            ),
            ChatMessage::tool("a5", "done"),
        ];
        let p = c.pinned(&msgs);
        // a1 mentions 9f3ab21 (referenced later) but was superseded by a2's re-read.
        assert!(!p.contains(&3));
        assert!(!p.contains(&5), "x.rs is not mentioned after a2");
        assert!(!p.contains(&7));
        assert!(p.contains(&9), "a4 is named by a later message");
        assert!(!p.contains(&11));
        let mut msgs2 = msgs.clone();
        msgs2.push(call("a6", "edit_file", json!({"path": "x.rs"})));
        msgs2.push(ChatMessage::tool("a6", "ok"));
        let p = c.pinned(&msgs2);
        assert!(
            p.contains(&5),
            "the latest read of x.rs is referenced by the edit"
        );
    }

    #[test]
    fn stubs_describe_the_call() {
        let m = call("b", "bash", json!({"command": "cargo test\n--all"}));
        let msgs = vec![m, ChatMessage::tool("b", "ok\nfine\n")];
        assert_eq!(
            stub_text(call_of(&msgs, 1), "ok\nfine\n"),
            "[compacted: bash `cargo test --all`, 2 lines, 8 B — re-run the tool if needed]"
        );
        let g = call("g", "grep", json!({"pattern": "fn main", "path": "src"}));
        assert_eq!(describe(g.tool_calls.first()), "grep `fn main` in src");
        assert_eq!(describe(None), "a tool call");
    }

    #[test]
    fn context_length_errors_are_recognised_by_their_wording() {
        let e = LlmError::Rejected {
            url: "u".into(),
            status: 400,
            body: "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.".into(),
        };
        assert!(is_context_length(&e));
        let e = LlmError::Rejected {
            url: "u".into(),
            status: 400,
            body: "the request exceeds the available context size".into(),
        };
        assert!(is_context_length(&e));
        let e = LlmError::Rejected {
            url: "u".into(),
            status: 400,
            body: "invalid tool schema".into(),
        };
        assert!(!is_context_length(&e));
    }

    #[test]
    fn calibration_replaces_the_bytes_over_four_rule() {
        let mut c = Compactor::new(CompactConfig::default());
        assert_eq!(c.est(4000), 1000);
        c.calibrate(4000, 1200);
        assert_eq!(c.est(4000), 1200);
        assert!(c.method().contains("0.300"));
        c.calibrate(4000, 0);
        assert_eq!(
            c.est(4000),
            1200,
            "a response without usage keeps the calibration"
        );
    }
}
