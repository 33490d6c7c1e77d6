//! Summary requests: asking the model (no tools, agent path
//! `<agent>/compact`) to condense the older part of the conversation, and the
//! user message that stands for it in the view.

use super::refs::call_of;
use super::state::{Compactor, SUMMARY_AGENT_SUFFIX, Summary, describe};
use crate::agent::budget::Tracker;
use crate::llm::{ChatMessage, ChatModel, ChatRequest, MessageRole};
use std::collections::HashSet;
use std::ops::Range;

/// Cap on one message's text in the summary request.
pub(super) const SUMMARY_MESSAGE_CAP: usize = 2048;
pub(super) const SUMMARY_PROMPT: &str = "You condense the history of a coding agent's session so it can continue with less context. Summarise the conversation you are given for the agent itself: what it was asked, what it did, what it found (files, functions, facts, numbers, error messages), what it changed, and what is still open. Be specific and brief (at most 300 words). Do not call tools; answer with the summary only.";

impl Compactor {
    /// Asks the model to summarise `range` of the conversation; on success
    /// the range is replaced by the summary. Returns the summary's length.
    pub(super) async fn summarize(
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
            call_mode: crate::llm::CallMode::Native,
        };
        let resp = match tracker.bounded(model.complete(&req)).await {
            Err(why) => return Err(why),
            Ok(Err(e)) => return Err(format!("failed to {e}")),
            Ok(Ok(r)) => r,
        };
        let tokens = resp.usage.tokens();
        tracker.record_usage(tokens, resp.usage.cost_usd);
        self.summary_tokens.add(tokens);
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
}

/// The user message standing for a summarised range: the summary, then the
/// referenced results from that range, verbatim.
pub(super) fn summary_message(
    s: &Summary,
    msgs: &[ChatMessage],
    pinned: &HashSet<usize>,
) -> String {
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
pub(super) fn render_for_summary(msgs: &[ChatMessage], i: usize, cap: usize) -> String {
    let m = &msgs[i];
    let content = m.content.as_deref().unwrap_or("");
    match m.role {
        MessageRole::Assistant => {
            let mut s = format!("assistant: {}", crate::text::cap_bytes(content, cap));
            for c in &m.tool_calls {
                s.push_str(&format!(
                    "\n  calls {}({})",
                    c.function.name,
                    crate::text::cap_bytes(&c.function.arguments, 300)
                ));
            }
            s
        }
        MessageRole::Tool => format!(
            "result of {}: {}",
            describe(call_of(msgs, i)),
            crate::text::cap_bytes(content, cap)
        ),
        MessageRole::User => format!("user: {}", crate::text::cap_bytes(content, cap)),
        MessageRole::System => format!("system: {}", crate::text::cap_bytes(content, cap)),
    }
}
