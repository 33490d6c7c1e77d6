//! The compactor's state and settings, and what its parts share.

use crate::llm::ToolCall;
use crate::llm::settings::DEFAULT_CONTEXT_WINDOW;
use crate::runlog::TokenCount;
use crate::text::cap_bytes as cap;
use std::collections::{HashMap, HashSet};

/// The share of the context window at which compaction starts.
pub(crate) const DEFAULT_COMPACT_AT: f64 = 0.7;

/// Assistant turns (with their results) always kept whole when they fit.
pub(crate) const DEFAULT_KEEP_TURNS: usize = 4;

/// Appended to the agent path of summary requests (`code/compact`).
pub(crate) const SUMMARY_AGENT_SUFFIX: &str = "/compact";

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

/// Builds the request sent each turn from the full conversation.
#[derive(Debug)]
pub(crate) struct Compactor {
    pub(super) cfg: CompactConfig,
    /// Indices (in the full conversation) of tool results shown as stubs.
    pub(super) stubbed: HashSet<usize>,
    pub(super) summary: Option<Summary>,
    pub(super) tokens_per_byte: Option<f64>,
    /// A window below the configured one, learned from a context-length error.
    pub(super) window_cap: Option<u64>,
    /// Whether the server was asked for its window ([`send_turn`]).
    pub(super) probed: bool,
    /// Whether the client's switch away from streaming was logged.
    pub(super) stream_fallback_logged: bool,
    /// Distinctive tokens of each tool result, by index (results never change).
    pub(super) result_tokens: HashMap<usize, Vec<String>>,
    pub(super) summary_tokens: TokenCount,
}

/// Why compaction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trigger {
    Threshold,
    ContextLengthError,
}

/// `read_file src/x.rs`, `bash \`cargo test\``, …: a call in a few words.
pub(super) fn describe(call: Option<&ToolCall>) -> String {
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
            format!("`{}`", cap(&c, 60))
        }),
        "grep" => arg("pattern").map(|p| {
            let at = arg("path").map_or(String::new(), |p| format!(" in {p}"));
            format!("`{}`{at}", cap(&p, 40))
        }),
        "list_files" => arg("path").or_else(|| arg("pattern")),
        _ => arg("path"),
    };
    match detail {
        Some(d) => format!("{name} {d}"),
        None => name.to_owned(),
    }
}

/// The older part of the conversation, replaced by a summary.
#[derive(Debug)]
pub(super) struct Summary {
    /// Index in the full conversation of the first message not summarised
    /// (always an assistant message).
    pub(super) upto: usize,
    /// The model's summary.
    pub(super) text: String,
}
