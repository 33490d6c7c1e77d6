//! The client's state (a leaf of `openai`: the files that build requests,
//! classify failures and probe the window add `impl` blocks to it).

use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;

use crate::llm::settings::ModelSettings;

/// A [`crate::llm::ChatModel`] that calls an OpenAI-compatible Chat Completions endpoint.
///
/// Despite its name it is the HTTP client of every wire format: the
/// settings' [`crate::llm::settings::Provider`] picks its [`super::WireFormat`].
pub struct OpenAiClient {
    pub(super) settings: ModelSettings,
    /// The wire format requests are written and read in.
    pub(super) format: &'static dyn super::WireFormat,
    pub(super) endpoint: String,
    pub(super) http: reqwest::Client,
    /// Set once a stream-only failure was answered by a plain request: why.
    /// From then on this client does not stream.
    pub(super) stream_off: OnceLock<String>,
    /// The server's context window, once asked (`window.rs`).
    pub(super) probed_window: tokio::sync::OnceCell<Option<u64>>,
    /// Send the reply cap as `max_completion_tokens` (the server refused
    /// `max_tokens`, as OpenAI's reasoning models do).
    pub(super) max_completion_tokens: AtomicBool,
    /// A reply carried llama.cpp's `timings`: the server is llama.cpp, and
    /// later requests ask it to keep the slot's prompt cache (`cache_prompt`).
    pub(super) llama_cpp: AtomicBool,
    /// Retries made and not yet taken ([`crate::llm::ChatModel::take_retries`]), by
    /// agent path: stages running at once share one client.
    pub(super) retries: std::sync::Mutex<Vec<(String, crate::llm::RetryNote)>>,
}

impl fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("settings", &self.settings)
            .field("stream_off", &self.stream_off.get())
            .finish_non_exhaustive()
    }
}
