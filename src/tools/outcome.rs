//! What a tool call gives back: its outcome, the two kinds of tool error,
//! and the limits every tool shares (a leaf of `tools`).

use crate::budget::TokenCount;
use crate::ids::Verdict;
use crate::text::one_line;

/// Every tool name orch knows, in the order they are offered
/// ([`crate::toolname::ToolName::ALL`]).
pub const ALL_TOOLS: &[&str] = &crate::toolname::NAMES;

/// Largest `arguments` text accepted from the model.
pub const MAX_ARGUMENT_BYTES: usize = 1 << 20;

/// Longest one-line summary.
pub(super) const SUMMARY_CHARS: usize = 120;

/// Why a tool call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// The model's call was wrong, or the work failed in a way the model can
    /// act on: an `error: <tool>: …` result, and the loop goes on.
    RespondToModel(String),
    /// orch's own fault: the stage ends as an internal error and nothing
    /// reaches the model.
    Fatal(String),
}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        ToolError::RespondToModel(message)
    }
}

/// A tool fault that is orch's own (see [`ToolError::Fatal`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("run the tool `{tool}`: {reason}")]
pub struct FatalToolError {
    /// The tool.
    pub tool: String,
    /// What went wrong.
    pub reason: String,
}

/// A `finish` call: the stage is over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishCall {
    /// The agent's final report.
    pub summary: String,
    /// The reviewer's verdict, when given.
    pub verdict: Option<Verdict>,
    /// A best-of-N reviewer's choice (1-based), when given.
    pub choice: Option<u64>,
}

/// The result of one tool call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolOutcome {
    /// What goes back to the model.
    pub content: String,
    /// A tool error the model should see and recover from.
    pub is_error: bool,
    /// One line (≤ 120 chars) for digests, e.g. "bash `cargo test` → exit 0 (1.2s)".
    pub summary: String,
    /// Exit code (bash only).
    pub exit_code: Option<i32>,
    /// Wall time of the call.
    pub duration_ms: u64,
    /// Set by `finish`.
    pub finish: Option<FinishCall>,
    /// Bash policy decision, e.g. `allow` or `deny: recursive delete of / (built-in deny list)`.
    pub policy: Option<String>,
    /// `write_file`/`edit_file`: the path written, relative to the root.
    pub changed_path: Option<String>,
    /// `spawn_agent`: tokens the subagent (and its own subagents) used; they
    /// count towards the caller's tokens (its budget was already charged by
    /// the [`super::Spawner`]).
    pub child_tokens: Option<TokenCount>,
    /// `bash`: what the sandbox enforced for this call, e.g.
    /// `workspace-write, network on: landlock ABI 7: writable …` or
    /// `off, network on: sandbox off`.
    pub sandbox: Option<String>,
    /// `load_skill`: the skill file read, for the action log.
    pub(crate) skill: Option<crate::skills::Loaded>,
    /// An MCP tool's call: server, tool, duration, bytes (the `mcp_call` event).
    pub mcp: Option<crate::mcp::McpCallInfo>,
}

impl ToolOutcome {
    /// A successful result.
    pub(crate) fn ok(content: String, summary: String) -> Self {
        ToolOutcome {
            content,
            summary: one_line(&summary, SUMMARY_CHARS),
            ..Default::default()
        }
    }

    /// A tool error: `error: <tool>: <message>`.
    pub(crate) fn error(tool: &str, message: &str) -> Self {
        let content = format!("error: {tool}: {message}");
        ToolOutcome {
            summary: one_line(&content, SUMMARY_CHARS),
            content,
            is_error: true,
            ..Default::default()
        }
    }
}

/// A failed blocking task, in words.
pub(crate) fn join_failure(e: &tokio::task::JoinError) -> String {
    if e.is_panic() {
        format!("the tool's task panicked: {e}")
    } else {
        format!("the tool's task was cancelled: {e}")
    }
}
