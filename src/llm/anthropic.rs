//! The native Anthropic Messages API (`provider = "anthropic"`), one
//! [`WireFormat`] of the HTTP client.
//!
//! - **Endpoint**: `POST {base}/v1/messages`, `{base}` the base URL without
//!   a trailing `/v1` (so both `https://api.anthropic.com`, as
//!   `ANTHROPIC_BASE_URL` is written, and `…/v1`, as OpenAI-style base URLs
//!   are, work).
//! - **Auth**: the key in `x-api-key` (marked sensitive), with
//!   `anthropic-version: 2023-06-01`: what Anthropic's API reference
//!   documents for API keys and its SDKs send for one (`Authorization:
//!   Bearer` is for OAuth tokens, which orch does not hold).
//! - **Body** and **prompt caching**: [`request`]; **replies**, plain and
//!   streamed: [`reply`].
//! - **Errors**: the client's rules ([`OpenAiClient::classify_status`]) fit
//!   Anthropic's statuses: `overloaded_error` (529) and `api_error` (500)
//!   are retried, `rate_limit_error` (429) too, after `retry-after`; an
//!   `invalid_request_error` (400) saying the prompt is too long is the
//!   context-length error (the window taken from its `tokens > N maximum`);
//!   401/403 name `ANTHROPIC_API_KEY`. An `error` event inside a stream is
//!   retried unless it is a context-length one.
//! - **Context window**: `GET {base}/v1/models/{model}` when it gives one
//!   (`max_input_tokens` or `context_window`), else [`context_window_of`]'s
//!   table; a configured `context_window` caps both.

use super::openai::{Attempt, OpenAiClient, StreamDecoder, WireFormat, secret_header};
use super::stream::{Assembled, ChunkError};
use super::{BoxFuture, ChatRequest, LlmError};
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue};
use std::time::Duration;

pub mod reply;
pub mod request;

pub use reply::EventAssembler;
pub use request::min_cacheable_tokens;

/// The `anthropic-version` every request carries.
pub const API_VERSION: &str = "2023-06-01";

/// Where the key of the Anthropic provider is read from, for the message of
/// an authentication failure.
pub const KEY_VARS: &str =
    "ANTHROPIC_API_KEY (or ORCH_API_KEY, or the env var named by the profile's api_key_env)";

/// The context window of a Claude model when the Models API does not say:
/// 200,000 tokens for every Claude model orch knows (the 1M-token window of
/// some models needs a beta header orch does not send); `None` for other
/// names (a proxy serving another model under the Messages API).
pub fn context_window_of(model: &str) -> Option<u64> {
    model
        .to_ascii_lowercase()
        .starts_with("claude")
        .then_some(200_000)
}

/// The API root: the base URL without a trailing `/` or `/v1`.
fn root(base_url: &str) -> &str {
    let base = base_url.trim_end_matches('/');
    base.strip_suffix("/v1").unwrap_or(base)
}

/// The Messages wire format.
pub(crate) struct Messages;

impl WireFormat for Messages {
    fn endpoint(&self, base_url: &str) -> String {
        format!("{}/v1/messages", root(base_url))
    }

    fn auth_headers(&self, client: &OpenAiClient, headers: &mut HeaderMap) -> Result<(), LlmError> {
        headers.insert("anthropic-version", HeaderValue::from_static(API_VERSION));
        if let Some(key) = &client.settings().api_key {
            headers.insert("x-api-key", secret_header(key)?);
        }
        Ok(())
    }

    fn request_body(
        &self,
        client: &OpenAiClient,
        req: &ChatRequest,
        stream: bool,
    ) -> Result<Vec<u8>, LlmError> {
        let settings = client.settings();
        let cache = settings.prompt_cache.caches();
        serde_json::to_vec(&request::body(settings, req, stream, cache)).map_err(|e| {
            LlmError::Config(format!(
                "the request to {} could not be encoded: {e}",
                client.endpoint()
            ))
        })
    }

    fn parse_completion(&self, client: &OpenAiClient, bytes: &[u8]) -> Result<Assembled, Attempt> {
        let bad = |what: &str| {
            Attempt::Fatal(client.bad(format!(
                "{what}; the body starts with: {}",
                client.redact(&super::openai::snippet_of(bytes))
            )))
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(Attempt::Fatal(client.bad("the body is empty".to_owned())));
        }
        let v: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| bad(&format!("not a Messages reply ({e})")))?;
        if v["type"] == "error" {
            return Err(self.stream_error(client, &v["error"]));
        }
        reply::parse_message(&v, client.settings().max_reply_bytes).map_err(|why| bad(&why))
    }

    fn stream_decoder(&self, limit: usize) -> Box<dyn StreamDecoder> {
        Box::new(EventAssembler::with_limit(limit))
    }

    fn classify_status(
        &self,
        client: &OpenAiClient,
        status: StatusCode,
        retry_after: Option<Duration>,
        bytes: &[u8],
    ) -> Attempt {
        client.classify_status(status, retry_after, bytes, KEY_VARS)
    }

    fn stream_error(&self, client: &OpenAiClient, err: &serde_json::Value) -> Attempt {
        client.stream_error(err)
    }

    fn probe_window<'a>(&self, client: &'a OpenAiClient) -> BoxFuture<'a, Option<u64>> {
        Box::pin(ask_window(client))
    }
}

impl StreamDecoder for EventAssembler {
    fn push(&mut self, data: &str) -> Result<bool, ChunkError> {
        EventAssembler::push(self, data)
    }

    fn chars(&self) -> usize {
        EventAssembler::chars(self)
    }

    fn chunks(&self) -> usize {
        self.events()
    }

    fn ended(&self) -> bool {
        EventAssembler::ended(self)
    }

    fn finish(self: Box<Self>) -> Assembled {
        EventAssembler::finish(*self)
    }
}

/// The model's context window from `GET {base}/v1/models/{model}` when it
/// gives one, else [`context_window_of`]; never fails (a failure is "not
/// said").
async fn ask_window(client: &OpenAiClient) -> Option<u64> {
    let settings = client.settings();
    let url = format!("{}/v1/models/{}", root(&settings.base_url), settings.model);
    let mut headers = HeaderMap::new();
    if Messages.auth_headers(client, &mut headers).is_err() {
        return context_window_of(&settings.model);
    }
    let said = client
        .get_json_with(&url, headers)
        .await
        .and_then(|v| {
            ["max_input_tokens", "context_window"]
                .iter()
                .find_map(|k| v.get(*k).and_then(serde_json::Value::as_u64))
        })
        .filter(|n| *n > 0);
    match said {
        Some(n) => {
            tracing::info!(url = %url, tokens = n, "the Models API reports the context window");
            Some(n)
        }
        None => context_window_of(&settings.model),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_takes_either_form_of_the_base_url() {
        for base in [
            "https://api.anthropic.com",
            "https://api.anthropic.com/",
            "https://api.anthropic.com/v1",
            "https://api.anthropic.com/v1/",
        ] {
            assert_eq!(
                Messages.endpoint(base),
                "https://api.anthropic.com/v1/messages"
            );
        }
    }

    #[test]
    fn the_window_table_knows_claude_only() {
        assert_eq!(context_window_of("claude-sonnet-4-5"), Some(200_000));
        assert_eq!(context_window_of("Claude-3-5-Haiku"), Some(200_000));
        assert_eq!(context_window_of("qwen2.5-coder"), None);
    }
}
