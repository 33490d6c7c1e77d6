//! The OpenAI-compatible Chat Completions client.
//!
//! Talks to any server that speaks `POST {base_url}/chat/completions` (OpenAI,
//! DeepSeek, vLLM, Ollama, llama.cpp's server, LiteLLM, OpenRouter, …) without
//! streaming.
//!
//! Invariants:
//! - Every `reqwest::Client` in the process is built by [`http_client`] (or
//!   [`http_client_with`]), which installs the `ring` TLS provider first:
//!   reqwest is built with `rustls-no-provider` and panics without one.
//! - The API key only ever travels in the `Authorization` header (marked
//!   sensitive). Error messages carry the endpoint URL and a trimmed snippet of
//!   the server's body with any echo of the key masked; `Debug` of
//!   [`ModelSettings`] hides it.
//! - Transient failures (429, 408, 409, 5xx, connection errors and timeouts) are
//!   retried with capped exponential backoff and jitter, honouring `Retry-After`;
//!   everything else fails at once with an error that says what to fix.

use super::{
    BoxFuture, ChatMessage, ChatModel, ChatRequest, ChatResponse, FunctionCall, LlmError,
    MessageRole, ToolCall, ToolDef, Usage,
};
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Default limit on one whole request (connect, send, wait, read).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// Default limit on establishing a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default number of retries after the first attempt.
pub const DEFAULT_MAX_RETRIES: u32 = 4;
/// Default first backoff delay; doubled on every retry.
pub const DEFAULT_RETRY_BASE_DELAY: Duration = Duration::from_millis(500);
/// Default cap on one backoff delay (also caps `Retry-After`).
pub const DEFAULT_RETRY_MAX_DELAY: Duration = Duration::from_secs(30);

/// Longest snippet of a server body quoted in an error.
const SNIPPET_CHARS: usize = 200;
/// Header naming the agent that sends a request (used by fake servers and proxies).
pub const AGENT_HEADER: &str = "x-orch-agent";
/// Header carrying the sending process's id (subagents are processes; handy
/// for debugging and for test servers that simulate a crash).
pub const PID_HEADER: &str = "x-orch-pid";

/// Where and how to reach a model.
#[derive(Clone)]
pub struct ModelSettings {
    /// API root, e.g. `http://127.0.0.1:8080/v1`; requests go to
    /// `{base_url}/chat/completions` (a trailing slash is tolerated).
    pub base_url: String,
    /// Model name sent in every request.
    pub model: String,
    /// Bearer token; `None` sends no `Authorization` header (local servers).
    pub api_key: Option<String>,
    /// Limit on one whole request.
    pub request_timeout: Duration,
    /// Limit on establishing a connection.
    pub connect_timeout: Duration,
    /// Retries after the first attempt for transient failures.
    pub max_retries: u32,
    /// First backoff delay; the n-th retry waits up to `base * 2^n`.
    pub retry_base_delay: Duration,
    /// Cap on one backoff delay and on an honoured `Retry-After`.
    pub retry_max_delay: Duration,
}

impl fmt::Debug for ModelSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelSettings")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_base_delay", &self.retry_base_delay)
            .field("retry_max_delay", &self.retry_max_delay)
            .finish()
    }
}

impl ModelSettings {
    /// Settings for `model` at `base_url` with no key and default timeouts and retries.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        ModelSettings {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            retry_base_delay: DEFAULT_RETRY_BASE_DELAY,
            retry_max_delay: DEFAULT_RETRY_MAX_DELAY,
        }
    }

    /// Resolves settings from command-line flags and the environment.
    ///
    /// Flags win over env. The environment is read through `env` so callers
    /// (and tests) decide where it comes from: `ORCH_BASE_URL`, `ORCH_MODEL`,
    /// `ORCH_API_KEY` (fallback `OPENAI_API_KEY`). Empty values count as unset.
    pub fn resolve(
        base_url: Option<String>,
        model: Option<String>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ModelSettings, LlmError> {
        let non_empty =
            |v: Option<String>| v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
        let base_url = non_empty(base_url)
            .or_else(|| non_empty(env("ORCH_BASE_URL")))
            .ok_or_else(|| {
                LlmError::Config(
                    "no model server is set: pass --base-url URL or set ORCH_BASE_URL \
                 (e.g. https://api.openai.com/v1, or http://localhost:11434/v1 for Ollama)"
                        .to_owned(),
                )
            })?;
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(LlmError::Config(format!(
                "the base URL `{base_url}` (from --base-url or ORCH_BASE_URL) must start with http:// or https://"
            )));
        }
        let model = non_empty(model)
            .or_else(|| non_empty(env("ORCH_MODEL")))
            .ok_or_else(|| {
                LlmError::Config(
                    "no model name is set: pass --model NAME or set ORCH_MODEL (e.g. gpt-4o-mini)"
                        .to_owned(),
                )
            })?;
        let api_key = non_empty(env("ORCH_API_KEY")).or_else(|| non_empty(env("OPENAI_API_KEY")));
        Ok(ModelSettings {
            api_key,
            ..ModelSettings::new(base_url, model)
        })
    }

    /// The full Chat Completions URL.
    pub fn endpoint(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }
}

/// Builds an HTTP client with `timeout` per request and a connect timeout of
/// at most [`DEFAULT_CONNECT_TIMEOUT`].
///
/// Use this (or [`http_client_with`]) for every `reqwest::Client`: it installs
/// the TLS provider the build relies on.
pub fn http_client(timeout: Duration) -> Result<reqwest::Client, LlmError> {
    http_client_with(timeout, DEFAULT_CONNECT_TIMEOUT.min(timeout))
}

/// Builds an HTTP client with explicit request and connect timeouts.
pub fn http_client_with(
    request_timeout: Duration,
    connect_timeout: Duration,
) -> Result<reqwest::Client, LlmError> {
    // reqwest is built with `rustls-no-provider`: without a process-wide
    // provider the first client panics, even for plain http://. Installing is
    // idempotent; an `Err` only means one is already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(request_timeout)
        .connect_timeout(connect_timeout)
        .user_agent(concat!("orch/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| {
            LlmError::Config(format!(
                "the HTTP client could not be built: {}",
                error_chain(&e)
            ))
        })
}

/// A [`ChatModel`] that calls an OpenAI-compatible Chat Completions endpoint.
pub struct OpenAiClient {
    settings: ModelSettings,
    endpoint: String,
    http: reqwest::Client,
}

impl fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl OpenAiClient {
    /// A client for `settings`; fails on a malformed base URL.
    pub fn new(settings: ModelSettings) -> Result<Self, LlmError> {
        let endpoint = settings.endpoint();
        match reqwest::Url::parse(&endpoint) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            Ok(_) => {
                return Err(LlmError::Config(format!(
                    "the base URL `{}` must start with http:// or https://",
                    settings.base_url
                )));
            }
            Err(e) => {
                return Err(LlmError::Config(format!(
                    "the base URL `{}` is not a valid URL ({e}); check --base-url or ORCH_BASE_URL",
                    settings.base_url
                )));
            }
        }
        let http = http_client_with(settings.request_timeout, settings.connect_timeout)?;
        Ok(OpenAiClient {
            settings,
            endpoint,
            http,
        })
    }

    /// The settings this client was built with.
    pub fn settings(&self) -> &ModelSettings {
        &self.settings
    }

    async fn complete_with_retries(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let body = self.request_body(req)?;
        let headers = self.headers(&req.agent_path)?;
        let mut attempt: u32 = 0;
        loop {
            let failure = match self.attempt(&headers, body.clone()).await {
                Ok(resp) => return Ok(resp),
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Transient(f)) => f,
            };
            if attempt >= self.settings.max_retries {
                return Err(LlmError::Exhausted {
                    url: self.endpoint.clone(),
                    attempts: attempt + 1,
                    last: failure.reason,
                });
            }
            let delay = match failure.retry_after {
                Some(after) => after.min(self.settings.retry_max_delay),
                None => backoff(
                    attempt,
                    self.settings.retry_base_delay,
                    self.settings.retry_max_delay,
                ),
            };
            tracing::warn!(
                url = %self.endpoint,
                agent = %req.agent_path,
                attempt = attempt + 1,
                of = self.settings.max_retries + 1,
                delay_ms = delay.as_millis() as u64,
                "model request failed, retrying: {}",
                failure.reason
            );
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    fn request_body(&self, req: &ChatRequest) -> Result<Vec<u8>, LlmError> {
        let wire = WireRequest {
            model: &self.settings.model,
            messages: &req.messages,
            tools: &req.tools,
            tool_choice: (!req.tools.is_empty()).then_some("auto"),
        };
        serde_json::to_vec(&wire).map_err(|e| {
            LlmError::Config(format!(
                "the request to {} could not be encoded: {e}",
                self.endpoint
            ))
        })
    }

    fn headers(&self, agent_path: &str) -> Result<HeaderMap, LlmError> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(AGENT_HEADER, agent_header_value(agent_path));
        headers.insert(PID_HEADER, HeaderValue::from(std::process::id()));
        if let Some(key) = &self.settings.api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                LlmError::Config(
                    "the API key (ORCH_API_KEY or OPENAI_API_KEY) contains characters not allowed in an HTTP header"
                        .to_owned(),
                )
            })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        Ok(headers)
    }

    async fn attempt(&self, headers: &HeaderMap, body: Vec<u8>) -> Result<ChatResponse, Attempt> {
        let sent = self
            .http
            .post(&self.endpoint)
            .headers(headers.clone())
            .body(body)
            .send()
            .await;
        let resp = match sent {
            Ok(resp) => resp,
            Err(e) => return Err(self.transport_failure(e)),
        };
        let status = resp.status();
        let retry_after = resp.headers().get(RETRY_AFTER).and_then(parse_retry_after);
        let bytes = match resp.bytes().await {
            Ok(bytes) => bytes,
            Err(e) => return Err(self.transport_failure(e)),
        };
        if status.is_success() {
            return self.parse_completion(&bytes).map_err(Attempt::Fatal);
        }
        let body = self.redact(&snippet(&bytes));
        let url = self.endpoint.clone();
        Err(match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Attempt::Fatal(LlmError::Auth {
                url,
                status: status.as_u16(),
                body,
            }),
            StatusCode::NOT_FOUND => Attempt::Fatal(LlmError::NotFound { url, body }),
            StatusCode::REQUEST_TIMEOUT | StatusCode::CONFLICT | StatusCode::TOO_MANY_REQUESTS => {
                Attempt::Transient(Transient {
                    reason: format!("HTTP {}: {body}", status.as_u16()),
                    retry_after,
                })
            }
            s if s.is_server_error() => Attempt::Transient(Transient {
                reason: format!("HTTP {}: {body}", status.as_u16()),
                retry_after,
            }),
            s => Attempt::Fatal(LlmError::Rejected {
                url,
                status: s.as_u16(),
                body,
            }),
        })
    }

    fn transport_failure(&self, e: reqwest::Error) -> Attempt {
        let (builder, timeout, connect) = (e.is_builder(), e.is_timeout(), e.is_connect());
        let reason = self.redact(&error_chain(&e.without_url()));
        if builder {
            return Attempt::Fatal(LlmError::Config(format!(
                "the request to {} could not be built: {reason}",
                self.endpoint
            )));
        }
        let reason = if timeout {
            format!("timed out ({reason})")
        } else if connect {
            format!("could not connect ({reason})")
        } else {
            reason
        };
        Attempt::Transient(Transient {
            reason,
            retry_after: None,
        })
    }

    fn parse_completion(&self, bytes: &[u8]) -> Result<ChatResponse, LlmError> {
        let bad = |what: &str| LlmError::BadResponse {
            url: self.endpoint.clone(),
            reason: format!(
                "{what}; the body starts with: {}",
                self.redact(&snippet(bytes))
            ),
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(LlmError::BadResponse {
                url: self.endpoint.clone(),
                reason: "the body is empty".to_owned(),
            });
        }
        let wire: WireResponse = serde_json::from_slice(bytes)
            .map_err(|e| bad(&format!("not a chat completion ({e})")))?;
        if let Some(err) = wire.error {
            return Err(bad(&format!(
                "the server reported an error: {}",
                self.redact(&compact(&err))
            )));
        }
        let choice = wire
            .choices
            .and_then(|c| c.into_iter().next())
            .ok_or_else(|| bad("it has no choices"))?;
        let message = choice
            .message
            .ok_or_else(|| bad("its first choice has no message"))?;
        let content = match message.content {
            serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(s),
            // Some servers send content parts; keep their text.
            serde_json::Value::Array(parts) => Some(
                parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(|t| t.as_str()))
                    .collect::<Vec<_>>()
                    .join(""),
            ),
            _ => return Err(bad("its message content is neither text nor null")),
        };
        let tool_calls = message
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, call)| ToolCall {
                // A few local servers omit ids; the agent loop still needs one to answer.
                id: call
                    .id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| format!("call_{i}")),
                kind: "function".to_owned(),
                function: FunctionCall {
                    name: call.function.name,
                    arguments: match call.function.arguments {
                        serde_json::Value::String(s) => s,
                        serde_json::Value::Null => String::new(),
                        other => other.to_string(),
                    },
                },
            })
            .collect();
        let usage = wire.usage.map(WireUsage::into_usage).unwrap_or_default();
        Ok(ChatResponse {
            message: ChatMessage {
                role: MessageRole::Assistant,
                content,
                tool_calls,
                tool_call_id: None,
            },
            usage,
            finish_reason: choice.finish_reason,
        })
    }

    /// Masks any echo of the API key (some servers quote the key they rejected).
    fn redact(&self, text: &str) -> String {
        match &self.settings.api_key {
            Some(key) if !key.is_empty() && text.contains(key.as_str()) => {
                text.replace(key.as_str(), "<redacted>")
            }
            _ => text.to_owned(),
        }
    }
}

impl ChatModel for OpenAiClient {
    fn complete<'a>(
        &'a self,
        req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        Box::pin(self.complete_with_retries(req))
    }

    fn label(&self) -> String {
        format!("{} at {}", self.settings.model, self.settings.base_url)
    }

    fn model_name(&self) -> String {
        self.settings.model.clone()
    }

    fn is_replay(&self) -> bool {
        false
    }

    fn spawn_settings(&self) -> Option<super::ModelSpawn> {
        Some(super::ModelSpawn::Http {
            base_url: self.settings.base_url.clone(),
            model: self.settings.model.clone(),
            api_key: self.settings.api_key.clone(),
        })
    }
}

/// Outcome of one failed attempt.
enum Attempt {
    /// Retrying will not help.
    Fatal(LlmError),
    /// Worth another try.
    Transient(Transient),
}

struct Transient {
    reason: String,
    retry_after: Option<Duration>,
}

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    messages: &'a [ChatMessage],
    #[serde(skip_serializing_if = "<[ToolDef]>::is_empty")]
    tools: &'a [ToolDef],
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
}

/// A completion as servers actually send it: lenient about nulls and omissions.
#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    choices: Option<Vec<WireChoice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct WireChoice {
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: serde_json::Value,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    id: Option<String>,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: serde_json::Value,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
}

impl WireUsage {
    fn into_usage(self) -> Usage {
        let prompt_tokens = self.prompt_tokens.unwrap_or(0);
        let completion_tokens = self.completion_tokens.unwrap_or(0);
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: self
                .total_tokens
                .unwrap_or(prompt_tokens + completion_tokens),
        }
    }
}

/// Backoff before retry number `attempt + 1`: equal jitter over
/// `min(max, base * 2^attempt)`, i.e. between half and all of it.
fn backoff(attempt: u32, base: Duration, max: Duration) -> Duration {
    let ceiling = base
        .saturating_mul(2u32.saturating_pow(attempt.min(30)))
        .min(max);
    let half = ceiling / 2;
    let span = (ceiling - half).as_nanos() as u64;
    let jitter = if span == 0 {
        0
    } else {
        random_u64() % (span + 1)
    };
    half + Duration::from_nanos(jitter)
}

/// Cheap randomness without a dependency: `RandomState` is seeded per process
/// and advanced per instance, which is plenty for spreading retries.
fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// `Retry-After` in seconds (the HTTP-date form is not used by model servers).
fn parse_retry_after(value: &HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    text.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| Duration::from_secs_f64(s.min(86_400.0)))
}

/// The agent path as a header value; characters a header cannot carry become `_`.
fn agent_header_value(agent_path: &str) -> HeaderValue {
    let clean: String = agent_path
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    HeaderValue::from_str(&clean).unwrap_or_else(|_| HeaderValue::from_static("_"))
}

/// The first [`SNIPPET_CHARS`] characters of a body, whitespace collapsed.
fn snippet(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.is_empty() {
        return "(empty body)".to_owned();
    }
    let mut out: String = collapsed.chars().take(SNIPPET_CHARS).collect();
    if collapsed.chars().count() > SNIPPET_CHARS {
        out.push('…');
    }
    out
}

fn compact(value: &serde_json::Value) -> String {
    let text = match value.get("message").and_then(|m| m.as_str()) {
        Some(message) => message.to_owned(),
        None => value.to_string(),
    };
    snippet(text.as_bytes())
}

/// An error with its sources, which is where reqwest and hyper put the cause.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn flags_win_over_env_and_key_falls_back() {
        let env = env_of(&[
            ("ORCH_BASE_URL", "http://env/v1"),
            ("ORCH_MODEL", "env-model"),
            ("OPENAI_API_KEY", "sk-openai"),
        ]);
        let s = ModelSettings::resolve(Some("http://flag/v1/".into()), None, &env).unwrap();
        assert_eq!(s.base_url, "http://flag/v1/");
        assert_eq!(s.model, "env-model");
        assert_eq!(s.api_key.as_deref(), Some("sk-openai"));
        assert_eq!(s.endpoint(), "http://flag/v1/chat/completions");
        assert!(!format!("{s:?}").contains("sk-openai"));

        let env = env_of(&[("ORCH_API_KEY", "sk-orch"), ("OPENAI_API_KEY", "sk-openai")]);
        let s =
            ModelSettings::resolve(Some("https://x/v1".into()), Some("m".into()), &env).unwrap();
        assert_eq!(s.api_key.as_deref(), Some("sk-orch"));
        assert_eq!(s.max_retries, DEFAULT_MAX_RETRIES);
    }

    #[test]
    fn missing_settings_name_flag_and_env() {
        let none = |_: &str| None;
        let err = ModelSettings::resolve(None, Some("m".into()), &none)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--base-url") && err.contains("ORCH_BASE_URL"),
            "{err}"
        );
        let err = ModelSettings::resolve(Some("http://x/v1".into()), Some("  ".into()), &none)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--model") && err.contains("ORCH_MODEL"),
            "{err}"
        );
        let err = ModelSettings::resolve(Some("localhost:8080".into()), Some("m".into()), &none)
            .unwrap_err()
            .to_string();
        assert!(err.contains("http://"), "{err}");
    }

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(1);
        for attempt in 0..12 {
            let ceiling = (base * 2u32.pow(attempt.min(20))).min(max);
            let d = backoff(attempt, base, max);
            assert!(
                d >= ceiling / 2 && d <= ceiling,
                "attempt {attempt}: {d:?} vs {ceiling:?}"
            );
        }
        assert_eq!(backoff(3, Duration::ZERO, max), Duration::ZERO);
        assert!(backoff(u32::MAX, base, max) <= max);
    }

    #[test]
    fn retry_after_parses_seconds() {
        assert_eq!(
            parse_retry_after(&HeaderValue::from_static("2")),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            parse_retry_after(&HeaderValue::from_static(" 0.5 ")),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_retry_after(&HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT")),
            None
        );
    }

    #[test]
    fn snippet_is_short_and_collapsed() {
        let long = "x".repeat(500);
        let s = snippet(long.as_bytes());
        assert_eq!(s.chars().count(), SNIPPET_CHARS + 1);
        assert_eq!(
            snippet(b"<html>\n  <body>oops</body>\n</html>"),
            "<html> <body>oops</body> </html>"
        );
        assert_eq!(snippet(b"  "), "(empty body)");
    }

    #[test]
    fn agent_header_survives_odd_paths() {
        assert_eq!(agent_header_value("code/explore-1"), "code/explore-1");
        assert_eq!(agent_header_value("cödé\n"), "c_d__");
    }

    fn client() -> OpenAiClient {
        let mut s = ModelSettings::new("http://127.0.0.1:9/v1", "m");
        s.api_key = Some("sk-secret".into());
        OpenAiClient::new(s).unwrap()
    }

    #[test]
    fn parses_lenient_completions() {
        let c = client();
        let r = c
            .parse_completion(
                br#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
                {"id":"a","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}},
                {"function":{"name":"finish","arguments":{"summary":"ok"}}}]},"finish_reason":"tool_calls"}],
                "usage":{"prompt_tokens":3,"completion_tokens":4}}"#,
            )
            .unwrap();
        assert_eq!(r.message.content, None);
        assert_eq!(r.message.tool_calls.len(), 2);
        assert_eq!(
            r.message.tool_calls[0].function.arguments,
            r#"{"command":"ls"}"#
        );
        assert_eq!(r.message.tool_calls[1].id, "call_1");
        assert_eq!(
            r.message.tool_calls[1].function.arguments,
            r#"{"summary":"ok"}"#
        );
        assert_eq!(
            r.usage,
            Usage {
                prompt_tokens: 3,
                completion_tokens: 4,
                total_tokens: 7
            }
        );
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));

        let r = c
            .parse_completion(br#"{"choices":[{"message":{"content":"hi","tool_calls":null}}]}"#)
            .unwrap();
        assert_eq!(r.message.content.as_deref(), Some("hi"));
        assert_eq!(r.usage, Usage::default());
    }

    #[test]
    fn bad_completions_are_bad_responses_without_the_key() {
        let c = client();
        for body in [
            &b""[..],
            b"<html><body>502 Bad Gateway</body></html>",
            b"{}",
            b"{\"choices\":[]}",
            b"[1,2]",
            b"{\"error\":{\"message\":\"bad key sk-secret\"}}",
        ] {
            let err = c.parse_completion(body).unwrap_err();
            assert!(matches!(err, LlmError::BadResponse { .. }), "{err}");
            assert!(!err.to_string().contains("sk-secret"), "{err}");
        }
    }
}
