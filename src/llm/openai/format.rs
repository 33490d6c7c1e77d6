//! The seam between the HTTP client and a wire format.
//!
//! The client ([`OpenAiClient`]) owns everything that does not depend on
//! the format: the retry loop and its schedule, deadlines and timeouts, the
//! body and reply caps, the SSE framing, the stream-to-plain fallback,
//! progress, usage estimation, call-id uniqueness and text-call recovery
//! (which work on the internal [`ChatRequest`] / [`Assembled`]). A
//! [`WireFormat`] only says what differs between APIs: where a request goes,
//! how it is authenticated, its body, how a plain reply and a stream's events
//! are read back into the same [`Assembled`], and what a failed answer means.
//!
//! Adding a wire format:
//! 1. a variant of [`Provider`] (`src/llm/settings.rs`), with its name;
//! 2. a type implementing [`WireFormat`] in its own module under `src/llm/`
//!    (see `src/llm/anthropic.rs`), with a [`StreamDecoder`] for its events;
//! 3. one arm in [`wire_format`].
//!
//! The format's methods get the client to read its settings (model, key,
//! sampling, caps) and to build errors that quote the endpoint and mask the
//! key ([`OpenAiClient::bad`], [`OpenAiClient::redact`]); the generic status
//! rules ([`OpenAiClient::classify_status`]) are there to reuse.

use super::classify::{Attempt, OPENAI_KEY_VARS};
use super::client::OpenAiClient;
use crate::llm::settings::Provider;
use crate::llm::stream::{Assembled, ChunkError, StreamAssembler};
use crate::llm::{BoxFuture, ChatRequest, LlmError};
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use std::time::Duration;

/// One wire format: see the module docs.
pub(crate) trait WireFormat: Send + Sync {
    /// The URL requests go to, for a configured `base_url`.
    fn endpoint(&self, base_url: &str) -> String;

    /// Adds the authentication (and any version) headers; the client has
    /// already set the content type, `Accept` and orch's own headers.
    fn auth_headers(&self, client: &OpenAiClient, headers: &mut HeaderMap) -> Result<(), LlmError>;

    /// The JSON body of a request for `req`, streamed or not.
    fn request_body(
        &self,
        client: &OpenAiClient,
        req: &ChatRequest,
        stream: bool,
    ) -> Result<Vec<u8>, LlmError>;

    /// A non-streamed (plain JSON) reply.
    fn parse_completion(&self, client: &OpenAiClient, bytes: &[u8]) -> Result<Assembled, Attempt>;

    /// A fresh decoder for one streamed reply whose text may hold at most
    /// `limit` bytes ([`crate::llm::stream::reply_bytes`]).
    fn stream_decoder(&self, limit: usize) -> Box<dyn StreamDecoder>;

    /// A non-2xx answer: retry or not, and with which error.
    fn classify_status(
        &self,
        client: &OpenAiClient,
        status: StatusCode,
        retry_after: Option<Duration>,
        bytes: &[u8],
    ) -> Attempt;

    /// An error the server sent inside a 200 stream.
    fn stream_error(&self, client: &OpenAiClient, err: &serde_json::Value) -> Attempt;

    /// The model's context window where this API says it (never fails:
    /// `None` is "not said"). Default: the OpenAI-compatible servers' own
    /// endpoints (`window.rs`).
    fn probe_window<'a>(&self, client: &'a OpenAiClient) -> BoxFuture<'a, Option<u64>> {
        Box::pin(client.ask_context_window())
    }
}

/// Reads one streamed reply's events (each event's `data`, SSE framing
/// removed) into an [`Assembled`].
pub(crate) trait StreamDecoder: Send {
    /// Adds one event's data; true when it carried text (content or call
    /// arguments), i.e. progress should be reported.
    fn push(&mut self, data: &str) -> Result<bool, ChunkError>;
    /// Characters of content and arguments received so far.
    fn chars(&self) -> usize;
    /// Events accepted so far (0 at the end: the stream was empty).
    fn chunks(&self) -> usize;
    /// Whether the format's own end-of-reply event arrived (Chat
    /// Completions ends with `[DONE]`, which the client handles itself).
    fn ended(&self) -> bool {
        false
    }
    /// The reply.
    fn finish(self: Box<Self>) -> Assembled;
}

/// The wire format of `provider`; `None` for one this build cannot speak yet.
pub(crate) fn wire_format(provider: Provider) -> Option<&'static dyn WireFormat> {
    match provider {
        Provider::OpenAiChat => Some(&ChatCompletions),
        Provider::Anthropic => Some(&crate::llm::anthropic::Messages),
        Provider::OpenAiResponses => Some(&crate::llm::responses::Responses),
    }
}

/// OpenAI Chat Completions (`wire.rs`, `classify.rs`, [`StreamAssembler`]).
pub(crate) struct ChatCompletions;

impl WireFormat for ChatCompletions {
    fn endpoint(&self, base_url: &str) -> String {
        format!("{}/chat/completions", base_url.trim_end_matches('/'))
    }

    fn auth_headers(&self, client: &OpenAiClient, headers: &mut HeaderMap) -> Result<(), LlmError> {
        if let Some(key) = &client.settings.api_key {
            headers.insert(AUTHORIZATION, secret_header(&format!("Bearer {key}"))?);
        }
        Ok(())
    }

    fn request_body(
        &self,
        client: &OpenAiClient,
        req: &ChatRequest,
        stream: bool,
    ) -> Result<Vec<u8>, LlmError> {
        client.request_body(req, stream)
    }

    fn parse_completion(&self, client: &OpenAiClient, bytes: &[u8]) -> Result<Assembled, Attempt> {
        client.parse_completion(bytes)
    }

    fn stream_decoder(&self, limit: usize) -> Box<dyn StreamDecoder> {
        Box::new(StreamAssembler::with_limit(limit))
    }

    fn classify_status(
        &self,
        client: &OpenAiClient,
        status: StatusCode,
        retry_after: Option<Duration>,
        bytes: &[u8],
    ) -> Attempt {
        client.classify_status(status, retry_after, bytes, OPENAI_KEY_VARS)
    }

    fn stream_error(&self, client: &OpenAiClient, err: &serde_json::Value) -> Attempt {
        client.stream_error(err)
    }
}

impl StreamDecoder for StreamAssembler {
    fn push(&mut self, data: &str) -> Result<bool, ChunkError> {
        StreamAssembler::push(self, data)
    }

    fn chars(&self) -> usize {
        StreamAssembler::chars(self)
    }

    fn chunks(&self) -> usize {
        StreamAssembler::chunks(self)
    }

    fn finish(self: Box<Self>) -> Assembled {
        StreamAssembler::finish(*self)
    }
}

/// A header value holding a secret (marked sensitive, so it is never logged).
pub(crate) fn secret_header(value: &str) -> Result<HeaderValue, LlmError> {
    let mut value = HeaderValue::from_str(value).map_err(|_| {
        LlmError::Config("the API key contains characters not allowed in an HTTP header".to_owned())
    })?;
    value.set_sensitive(true);
    Ok(value)
}
