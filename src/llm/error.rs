//! The error of a model call (below every file of `llm` but `retry`).

use super::retry;

/// Errors from a model backend.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// 401/403: the key is missing or wrong.
    #[error("authenticate with the model server at {url} (HTTP {status}): {body}; set {key_vars}")]
    Auth {
        /// The variables the key is read from, as the message names them
        /// (they differ by provider).
        key_vars: &'static str,
        /// Endpoint URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// Server's message (trimmed).
        body: String,
    },
    /// 404: wrong base URL or unknown model.
    #[error("find the model or endpoint at {url} (HTTP 404): {body}; check --base-url and --model")]
    NotFound {
        /// Endpoint URL.
        url: String,
        /// Server's message (trimmed).
        body: String,
    },
    /// The request does not fit the model's context window (HTTP 400/413 with
    /// `context_length_exceeded`, "maximum context length", "too many tokens",
    /// …). Not retried by the client: the agent loop compacts and retries.
    #[error("fit the conversation into the model's context window ({url}, HTTP {status}): {body}")]
    ContextLength {
        /// Endpoint URL.
        url: String,
        /// HTTP status (200 when the error came inside a stream).
        status: u16,
        /// Server's message (trimmed).
        body: String,
        /// The context window the server named in its message (llama.cpp's
        /// `n_ctx`, "maximum context length is N tokens", …), if it did.
        window: Option<u64>,
    },
    /// Another 4xx that retrying will not fix.
    #[error("get a completion from {url}: HTTP {status}: {body}")]
    Rejected {
        /// Endpoint URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// Server's message (trimmed).
        body: String,
    },
    /// 429/5xx, connection errors, timeouts, stalled or cut streams that
    /// persisted through every retry.
    #[error("get a completion from {url} after {attempts} attempts: {last}{hint}")]
    Exhausted {
        /// Endpoint URL.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// The last error seen.
        last: String,
        /// What to do about it, starting with `; ` (may be empty).
        hint: String,
    },
    /// The server answered 200 with something that is not a completion.
    #[error("understand the reply from {url}: {reason}")]
    BadResponse {
        /// Endpoint URL.
        url: String,
        /// What was wrong, with a snippet of the body.
        reason: String,
    },
    /// The replay file has no more responses for this agent.
    #[error(
        "replay the next response for agent `{agent}`: the replay file {file} has only {available} for it"
    )]
    ReplayExhausted {
        /// Agent path.
        agent: String,
        /// Replay file.
        file: String,
        /// How many responses it had.
        available: usize,
    },
    /// The replay file could not be read or parsed.
    #[error("load the replay file {file}: {reason}")]
    ReplayFile {
        /// Replay file.
        file: String,
        /// What went wrong.
        reason: String,
    },
    /// No base URL / model was configured.
    #[error("configure a model: {0}")]
    Config(String),
}

impl LlmError {
    /// True when the conversation must shrink before the request can
    /// succeed: [`LlmError::ContextLength`], or a rejection whose body uses
    /// the servers' context-length wording (the one classifier,
    /// [`retry::is_context_length_message`]).
    pub fn is_context_length(&self) -> bool {
        match self {
            LlmError::ContextLength { .. } => true,
            LlmError::Rejected { body, .. } => retry::is_context_length_message(body),
            _ => false,
        }
    }

    /// True for errors a retry at a later time might fix (what was left after
    /// the client's own retries): [`LlmError::Exhausted`].
    pub fn is_transient(&self) -> bool {
        matches!(self, LlmError::Exhausted { .. })
    }
}
