//! The OpenAI-compatible Chat Completions client.
//!
//! Talks to any server that speaks `POST {base_url}/chat/completions` (OpenAI,
//! DeepSeek, vLLM, Ollama, llama.cpp's server, LiteLLM, OpenRouter, …), by
//! default streaming (`stream: true`, server-sent events, assembled by
//! [`super::stream`]); `stream = false` in a profile or `--no-stream` sends
//! plain requests for servers that cannot stream. A server that answers a
//! streaming request with a plain JSON completion is understood too.
//!
//! Invariants:
//! - Every `reqwest::Client` in the process is built by [`http_client`] (or
//!   [`http_client_with`], or the client's own builder), which installs the
//!   `ring` TLS provider first: reqwest is built with `rustls-no-provider` and
//!   panics without one.
//! - The API key only ever travels in the `Authorization` header (marked
//!   sensitive). Error messages carry the endpoint URL and a trimmed snippet of
//!   the server's body with any echo of the key masked; `Debug` of
//!   [`ModelSettings`] hides it.
//! - Transient failures (429, 408, 409, 5xx, connection errors, timeouts,
//!   stalled or cut streams) are retried by the schedule in [`super::retry`];
//!   everything else fails at once with an error that says what to fix. A
//!   context-length error is [`LlmError::ContextLength`] and never retried here.
//! - Usage comes from the server when it reports it, else it is estimated
//!   (bytes / 4) and marked [`Usage::estimated`].

pub use super::settings::*;

use super::price::cost_usd;
use super::retry::{GiveUp, is_context_length_message, parse_retry_after};
use super::stream::{Assembled, ChunkError, StreamAssembler, usage_of};
use super::{
    BoxFuture, ChatMessage, ChatModel, ChatRequest, ChatResponse, DeltaFn, FunctionCall, LlmError,
    MessageRole, ToolCall, ToolDef, Usage, estimate_usage,
};
use eventsource_stream::{EventStreamError, Eventsource};
use futures_util::StreamExt;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Longest snippet of a server body quoted in an error.
const SNIPPET_CHARS: usize = 200;
/// Header naming the agent that sends a request (used by fake servers and proxies).
pub const AGENT_HEADER: &str = "x-orch-agent";
/// Header carrying the sending process's id (subagents are processes; handy
/// for debugging and for test servers that simulate a crash).
pub const PID_HEADER: &str = "x-orch-pid";

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
    build_client(Some(request_timeout), connect_timeout, false)
}

/// A client with an optional whole-request timeout (streams have none: they
/// are bounded by the idle timeout between reads instead).
///
/// `plain_http`: the client only talks to an `http://` endpoint, so it gets
/// no TLS trust roots. Loading the system's roots (rustls-platform-verifier
/// reads and parses every certificate under /etc/ssl/certs) is the largest
/// single cost of orch's start (several ms); a local model server over plain
/// HTTP never needs it. Such a client cannot follow a redirect to https.
fn build_client(
    request_timeout: Option<Duration>,
    connect_timeout: Duration,
    plain_http: bool,
) -> Result<reqwest::Client, LlmError> {
    // reqwest is built with `rustls-no-provider`: without a process-wide
    // provider the first client panics, even for plain http://. Installing is
    // idempotent; an `Err` only means one is already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .user_agent(concat!("orch/", env!("CARGO_PKG_VERSION")));
    if let Some(timeout) = request_timeout {
        builder = builder.timeout(timeout);
    }
    if plain_http {
        builder = builder.tls_certs_only(std::iter::empty::<reqwest::Certificate>());
    }
    builder.build().map_err(|e| {
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
        let plain_http = match reqwest::Url::parse(&endpoint) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => url.scheme() == "http",
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
        };
        // Timeouts are set per request (see `attempt`), so one client serves
        // both modes.
        let http = build_client(None, settings.connect_timeout, plain_http)?;
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

    async fn complete_with_retries(
        &self,
        req: &ChatRequest,
        on_delta: Option<&DeltaFn<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        let body = self.request_body(req)?;
        let headers = self.headers(&req.agent_path)?;
        let policy = self.settings.retry_policy();
        let started = Instant::now();
        let mut retry: u32 = 0;
        loop {
            let failure = match self.attempt(&headers, body.clone(), on_delta).await {
                Ok(assembled) => return Ok(finalize(req, assembled)),
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Transient(f)) => f,
            };
            let delay = match policy.next_delay(retry, started.elapsed(), failure.retry_after) {
                Ok(delay) => delay,
                Err(why) => {
                    let mut hint = failure.kind.hint().to_owned();
                    if why == GiveUp::TotalTime {
                        hint = format!(
                            "{hint} (stopped retrying: the next wait would pass retry_max_total of {}s)",
                            policy.max_total.as_secs()
                        );
                    }
                    return Err(LlmError::Exhausted {
                        url: self.endpoint.clone(),
                        attempts: retry + 1,
                        last: failure.reason,
                        hint,
                    });
                }
            };
            tracing::warn!(
                url = %self.endpoint,
                agent = %req.agent_path,
                attempt = retry + 1,
                of = policy.max_retries + 1,
                delay_ms = delay.as_millis() as u64,
                "model request failed, retrying: {}",
                failure.reason
            );
            tokio::time::sleep(delay).await;
            retry += 1;
        }
    }

    fn request_body(&self, req: &ChatRequest) -> Result<Vec<u8>, LlmError> {
        let wire = WireRequest {
            model: &self.settings.model,
            messages: &req.messages,
            tools: &req.tools,
            tool_choice: (!req.tools.is_empty()).then_some("auto"),
            stream: self.settings.stream,
            stream_options: self.settings.stream.then_some(StreamOptions {
                include_usage: true,
            }),
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
        if self.settings.stream {
            headers.insert(
                ACCEPT,
                HeaderValue::from_static("text/event-stream, application/json"),
            );
        }
        headers.insert(AGENT_HEADER, agent_header_value(agent_path));
        headers.insert(PID_HEADER, HeaderValue::from(std::process::id()));
        if let Some(key) = &self.settings.api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                LlmError::Config(
                    "the API key contains characters not allowed in an HTTP header".to_owned(),
                )
            })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        Ok(headers)
    }

    /// One request. Non-streamed: bounded by `request_timeout` as a whole.
    /// Streamed: `request_timeout` bounds the wait for the headers, then
    /// `stream_idle_timeout` bounds every silence.
    async fn attempt(
        &self,
        headers: &HeaderMap,
        body: Vec<u8>,
        on_delta: Option<&DeltaFn<'_>>,
    ) -> Result<Assembled, Attempt> {
        let timeout = self.settings.request_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut builder = self
            .http
            .post(&self.endpoint)
            .headers(headers.clone())
            .body(body);
        if !self.settings.stream {
            builder = builder.timeout(timeout);
        }
        let resp = match tokio::time::timeout_at(deadline, builder.send()).await {
            Ok(Ok(resp)) => resp,
            Ok(Err(e)) => return Err(self.transport_failure(e, None)),
            Err(_) => return Err(timed_out(timeout, "waiting for the response")),
        };
        let status = resp.status();
        let retry_after = resp.headers().get(RETRY_AFTER).and_then(parse_retry_after);
        let is_sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if status.is_success() && is_sse {
            return self.read_stream(resp, on_delta).await;
        }
        // Error bodies, and plain completions (also when a server ignored
        // `stream: true`), are read whole within the request's time.
        let bytes = match tokio::time::timeout_at(deadline, resp.bytes()).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(e)) => return Err(self.transport_failure(e, None)),
            Err(_) => return Err(timed_out(timeout, "reading the response")),
        };
        if status.is_success() {
            return self.parse_completion(&bytes);
        }
        Err(self.classify_status(status, retry_after, &bytes))
    }

    /// Reads an SSE response to its end (`[DONE]` or the end of the body).
    async fn read_stream(
        &self,
        resp: reqwest::Response,
        on_delta: Option<&DeltaFn<'_>>,
    ) -> Result<Assembled, Attempt> {
        let idle = self.settings.stream_idle_timeout;
        // Bytes count as life even when they complete no event (keep-alive
        // comments), so the idle timer watches bytes, not events.
        let received = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&received);
        let mut events = resp
            .bytes_stream()
            .inspect(move |chunk| {
                if let Ok(bytes) = chunk {
                    counter.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                }
            })
            .eventsource();
        let mut assembler = StreamAssembler::new();
        loop {
            let seen = received.load(Ordering::Relaxed);
            // `next()` only borrows the stream: dropping it on timeout loses nothing.
            let next = match tokio::time::timeout(idle, events.next()).await {
                Ok(next) => next,
                Err(_) if received.load(Ordering::Relaxed) != seen => continue,
                Err(_) => {
                    return Err(Attempt::Transient(Transient {
                        reason: format!(
                            "the stream stalled: nothing received for {} after {} chunks",
                            human_duration(idle),
                            assembler.chunks()
                        ),
                        retry_after: None,
                        kind: Kind::Stall,
                    }));
                }
            };
            let event = match next {
                None => break,
                Some(Ok(event)) => event,
                Some(Err(EventStreamError::Transport(e))) => {
                    return Err(self.transport_failure(e, Some(assembler.chunks())));
                }
                Some(Err(EventStreamError::Utf8(e))) => {
                    return Err(Attempt::Fatal(
                        self.bad(format!("the stream is not valid UTF-8 ({e})")),
                    ));
                }
                Some(Err(EventStreamError::Parser(e))) => {
                    return Err(Attempt::Fatal(
                        self.bad(format!("the stream is not valid server-sent events ({e})")),
                    ));
                }
            };
            let data = event.data.trim();
            if data == "[DONE]" {
                break;
            }
            match assembler.push(data) {
                Ok(true) => {
                    if let Some(on_delta) = on_delta {
                        on_delta(assembler.chars());
                    }
                }
                Ok(false) => {}
                Err(ChunkError::Malformed(what)) => {
                    return Err(Attempt::Fatal(self.bad(format!(
                        "{what}; it starts with: {}",
                        self.redact(&snippet(data.as_bytes()))
                    ))));
                }
                Err(ChunkError::Server(err)) => return Err(self.stream_error(&err)),
            }
        }
        if assembler.chunks() == 0 {
            return Err(Attempt::Fatal(
                self.bad("the stream ended before any chunk".to_owned()),
            ));
        }
        Ok(assembler.finish())
    }

    /// An `{"error": …}` chunk inside a 200 stream.
    fn stream_error(&self, err: &serde_json::Value) -> Attempt {
        let text = self.redact(&compact(err));
        if is_context_length_message(&err.to_string()) {
            return Attempt::Fatal(LlmError::ContextLength {
                url: self.endpoint.clone(),
                status: 200,
                body: text,
            });
        }
        // Mid-stream errors are overloads and internal errors in practice.
        Attempt::Transient(Transient {
            reason: format!("the server reported an error mid-stream: {text}"),
            retry_after: None,
            kind: Kind::Server,
        })
    }

    fn classify_status(
        &self,
        status: StatusCode,
        retry_after: Option<Duration>,
        bytes: &[u8],
    ) -> Attempt {
        let body = self.redact(&snippet(bytes));
        let url = self.endpoint.clone();
        let code = status.as_u16();
        match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Attempt::Fatal(LlmError::Auth {
                url,
                status: code,
                body,
            }),
            StatusCode::NOT_FOUND => Attempt::Fatal(LlmError::NotFound { url, body }),
            StatusCode::TOO_MANY_REQUESTS => Attempt::Transient(Transient {
                reason: format!("HTTP 429: {body}"),
                retry_after,
                kind: Kind::RateLimit,
            }),
            StatusCode::REQUEST_TIMEOUT | StatusCode::CONFLICT => Attempt::Transient(Transient {
                reason: format!("HTTP {code}: {body}"),
                retry_after,
                kind: Kind::Server,
            }),
            s if s.is_server_error() => Attempt::Transient(Transient {
                reason: format!("HTTP {code}: {body}"),
                retry_after,
                kind: Kind::Server,
            }),
            StatusCode::BAD_REQUEST
            | StatusCode::PAYLOAD_TOO_LARGE
            | StatusCode::UNPROCESSABLE_ENTITY
                if is_context_length_message(&String::from_utf8_lossy(bytes)) =>
            {
                Attempt::Fatal(LlmError::ContextLength {
                    url,
                    status: code,
                    body,
                })
            }
            _ => Attempt::Fatal(LlmError::Rejected {
                url,
                status: code,
                body,
            }),
        }
    }

    /// A reqwest failure; `chunks` is set when it happened inside a stream.
    fn transport_failure(&self, e: reqwest::Error, chunks: Option<usize>) -> Attempt {
        let (builder, timeout, connect) = (e.is_builder(), e.is_timeout(), e.is_connect());
        let reason = self.redact(&error_chain(&e.without_url()));
        if builder {
            return Attempt::Fatal(LlmError::Config(format!(
                "the request to {} could not be built: {reason}",
                self.endpoint
            )));
        }
        let (reason, kind) = if let Some(chunks) = chunks {
            (
                format!("the stream was cut after {chunks} chunks ({reason})"),
                Kind::Network,
            )
        } else if timeout {
            (format!("timed out ({reason})"), Kind::Timeout)
        } else if connect {
            (format!("could not connect ({reason})"), Kind::Connect)
        } else {
            (reason, Kind::Network)
        };
        Attempt::Transient(Transient {
            reason,
            retry_after: None,
            kind,
        })
    }

    fn bad(&self, reason: String) -> LlmError {
        LlmError::BadResponse {
            url: self.endpoint.clone(),
            reason,
        }
    }

    fn parse_completion(&self, bytes: &[u8]) -> Result<Assembled, Attempt> {
        let bad = |what: &str| {
            Attempt::Fatal(self.bad(format!(
                "{what}; the body starts with: {}",
                self.redact(&snippet(bytes))
            )))
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(Attempt::Fatal(self.bad("the body is empty".to_owned())));
        }
        let wire: WireResponse = serde_json::from_slice(bytes)
            .map_err(|e| bad(&format!("not a chat completion ({e})")))?;
        if let Some(err) = wire.error {
            if is_context_length_message(&err.to_string()) {
                return Err(Attempt::Fatal(LlmError::ContextLength {
                    url: self.endpoint.clone(),
                    status: 200,
                    body: self.redact(&compact(&err)),
                }));
            }
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
        Ok(Assembled {
            message: ChatMessage {
                role: MessageRole::Assistant,
                content,
                tool_calls,
                tool_call_id: None,
            },
            finish_reason: choice.finish_reason,
            usage: wire.usage.filter(|u| u.is_object()).map(|u| usage_of(&u)),
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

/// The response for the agent loop; usage estimated when the server sent none.
fn finalize(req: &ChatRequest, assembled: Assembled) -> ChatResponse {
    let usage = match assembled.usage {
        Some(usage) => usage,
        None => estimate_usage(req, &assembled.message),
    };
    ChatResponse {
        message: assembled.message,
        usage,
        finish_reason: assembled.finish_reason,
    }
}

fn timed_out(limit: Duration, what: &str) -> Attempt {
    Attempt::Transient(Transient {
        reason: format!(
            "timed out after {} {what} (request_timeout)",
            human_duration(limit)
        ),
        retry_after: None,
        kind: Kind::Timeout,
    })
}

/// `1.5s`, `250ms`.
fn human_duration(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{}s", d.as_secs_f64())
    } else {
        format!("{}ms", d.as_millis())
    }
}

impl ChatModel for OpenAiClient {
    fn complete<'a>(
        &'a self,
        req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        Box::pin(self.complete_with_retries(req, None))
    }

    fn complete_with_progress<'a>(
        &'a self,
        req: &'a ChatRequest,
        on_delta: &'a DeltaFn<'a>,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        Box::pin(self.complete_with_retries(req, Some(on_delta)))
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

    fn context_window(&self) -> Option<u64> {
        Some(self.settings.context_window)
    }

    fn cost_usd(&self, usage: &Usage) -> Option<f64> {
        cost_usd(&self.settings.model, usage, &self.settings.prices)
    }

    fn with_model(&self, model: &str) -> Option<std::sync::Arc<dyn ChatModel>> {
        let mut settings = self.settings.clone();
        settings.model = model.to_owned();
        OpenAiClient::new(settings)
            .ok()
            .map(|c| std::sync::Arc::new(c) as std::sync::Arc<dyn ChatModel>)
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
    kind: Kind,
}

/// What kind of transient failure, for the advice when retries run out.
#[derive(Debug, Clone, Copy)]
enum Kind {
    RateLimit,
    Server,
    Connect,
    Timeout,
    Stall,
    Network,
}

impl Kind {
    fn hint(self) -> &'static str {
        match self {
            Kind::RateLimit => {
                "; the server is rate-limiting: wait and run again, or raise your quota"
            }
            Kind::Server => "; the server is failing: try again later or use another provider",
            Kind::Connect => {
                "; check --base-url (or the profile's base_url) and that the server is up"
            }
            Kind::Timeout => {
                "; the server is too slow: raise request_timeout in orch.toml, or try again later"
            }
            Kind::Stall => {
                "; the stream stalled: raise stream_idle_timeout in orch.toml for slow models, or try --no-stream"
            }
            Kind::Network => "; the connection broke: check the network, or try --no-stream",
        }
    }
}

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    messages: &'a [ChatMessage],
    #[serde(skip_serializing_if = "<[ToolDef]>::is_empty")]
    tools: &'a [ToolDef],
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// A completion as servers actually send it: lenient about nulls and omissions.
#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    choices: Option<Vec<WireChoice>>,
    #[serde(default)]
    usage: Option<serde_json::Value>,
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

    fn parse(c: &OpenAiClient, bytes: &[u8]) -> Result<Assembled, LlmError> {
        match c.parse_completion(bytes) {
            Ok(a) => Ok(a),
            Err(Attempt::Fatal(e)) => Err(e),
            Err(Attempt::Transient(t)) => panic!("transient: {}", t.reason),
        }
    }

    #[test]
    fn parses_lenient_completions() {
        let c = client();
        let r = parse(
            &c,
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
            Some(Usage {
                prompt_tokens: 3,
                completion_tokens: 4,
                total_tokens: 7,
                estimated: false,
            })
        );
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));

        let r = parse(
            &c,
            br#"{"choices":[{"message":{"content":"hi","tool_calls":null}}]}"#,
        )
        .unwrap();
        assert_eq!(r.message.content.as_deref(), Some("hi"));
        assert_eq!(r.usage, None);
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
            let err = parse(&c, body).unwrap_err();
            assert!(matches!(err, LlmError::BadResponse { .. }), "{err}");
            assert!(!err.to_string().contains("sk-secret"), "{err}");
        }
    }
}
