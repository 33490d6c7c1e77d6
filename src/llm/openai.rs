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
//!   the server's body with any echo of the key masked and no control
//!   characters (see `snippet::snippet`); `Debug` of
//!   [`ModelSettings`] hides it.
//! - Bounded in time: only `data` lines of a stream reset the idle timer
//!   (keep-alive comments do not), a timeout or a stall is retried once (not
//!   a stream of nothing but keep-alives: that server is busy), and
//!   `request_deadline` ends the whole completion — attempts and waits.
//! - Bounded in memory: bodies are read in chunks and refused at
//!   `max_reply_bytes` (streamed) or [`ModelSettings::max_body_bytes`]
//!   (plain), never held whole; error bodies are read up to 64 KiB.
//! - Transient failures (429, 408, 409, 5xx, connection errors, timeouts,
//!   stalled or cut streams) are retried by the schedule in [`super::retry`];
//!   everything else fails at once with an error that says what to fix. A
//!   failure whose body shows the request itself is invalid (a validation
//!   error, whatever the status) is retried at most once. A context-length
//!   error is [`LlmError::ContextLength`] (with the window the server named,
//!   if any) and never retried here.
//! - Stream-only failures — an empty SSE body, `finish_reason: tool_calls`
//!   with no call in the stream, a streamed reply with neither text nor a
//!   call (LiteLLM dropping tool calls; an empty plain reply then is the
//!   model's, and streaming stays on), a second 5xx in a row (or an invalid-request
//!   5xx) to a streamed request — re-send the turn once without streaming;
//!   when that works the client stops streaming for good and says why
//!   ([`OpenAiClient::stream_fallback`]).
//! - Sent bodies never carry `"content": null` (see `wire`), carry
//!   `temperature`, `seed`, `max_tokens` and `tool_choice` only as the
//!   settings say, and every returned tool call has an id unique in the
//!   conversation.
//! - A request's [`super::CallMode`] shapes it: `Native` (the default) is
//!   the body as always; `Constrained` and `Text` send no `tools`, describe
//!   them in the system prompt, and `Constrained` adds the call schema and
//!   takes the reply's JSON as the call ([`super::constrained`]).
//! - Usage comes from the server when it reports it, else it is estimated
//!   (bytes / 4) and marked [`Usage::estimated`].
//!
//! Split by job: `http` builds `reqwest` clients, `wire` encodes requests
//! and decodes completions, `classify` turns failures into retry decisions,
//! `window` asks the server for its context window; the client and its
//! retry loop are here.

pub use super::settings::*;

use super::price::cost_usd;
use super::retry::{GiveUp, parse_retry_after};
use super::sse::SseDecoder;
use super::stream::{Assembled, ChunkError};
use super::{BoxFuture, ChatModel, ChatRequest, ChatResponse, DeltaFn, LlmError, Usage};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::time::{Duration, Instant};

/// Header naming the agent that sends a request (used by fake servers and proxies).
pub const AGENT_HEADER: &str = "x-orch-agent";
/// Header carrying the sending process's id (subagents are processes; handy
/// for debugging and for test servers that simulate a crash).
pub const PID_HEADER: &str = "x-orch-pid";

mod classify;
mod client;
mod format;
mod http;
mod snippet;
mod window;
mod wire;

pub(crate) use classify::{Attempt, Kind, OPENAI_KEY_VARS, Transient};
use classify::{human_duration, timed_out};
pub use client::OpenAiClient;
pub(crate) use format::{ChatCompletions, StreamDecoder, WireFormat, secret_header, wire_format};
use http::{BodyError, build_client, read_capped};
use snippet::snippet;
use wire::{agent_header_value, finalize};

pub use http::{http_client, http_client_for, http_client_with};

impl OpenAiClient {
    /// A client for `settings`; fails on a malformed base URL.
    pub fn new(settings: ModelSettings) -> Result<Self, LlmError> {
        let format = wire_format(settings.provider).ok_or_else(|| {
            LlmError::Config(format!(
                "provider `{}` is not supported by this build of orch",
                settings.provider
            ))
        })?;
        let endpoint = format.endpoint(&settings.base_url);
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
            format,
            endpoint,
            http,
            stream_off: OnceLock::new(),
            probed_window: tokio::sync::OnceCell::new(),
            max_completion_tokens: AtomicBool::new(false),
            llama_cpp: AtomicBool::new(false),
            retries: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The settings this client was built with.
    pub fn settings(&self) -> &ModelSettings {
        &self.settings
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// `GET url` with `headers` (and orch's user agent), bounded like the
    /// window probes: a short timeout, the body cap; `None` on any failure
    /// or a non-JSON answer.
    pub(crate) async fn get_json_with(
        &self,
        url: &str,
        headers: HeaderMap,
    ) -> Option<serde_json::Value> {
        let limit = PROBE_TIMEOUT.min(self.settings.request_timeout);
        let send = self.http.get(url).headers(headers).timeout(limit).send();
        let mut resp = send.await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let deadline = Instant::now() + limit;
        let bytes = read_capped(&mut resp, self.settings.max_body_bytes(), deadline, false)
            .await
            .ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Whether the next request is streamed: as configured, until a
    /// stream-only failure switched streaming off ([`Self::stream_fallback`]).
    pub fn streaming(&self) -> bool {
        self.settings.stream && self.stream_off.get().is_none()
    }

    /// Whether the reply cap goes out as `max_completion_tokens` (after the
    /// server refused `max_tokens`).
    fn wants_max_completion_tokens(&self) -> bool {
        self.max_completion_tokens.load(Ordering::Relaxed)
    }

    /// Why this client stopped streaming, if it did (see
    /// [`ChatModel::stream_fallback`]).
    pub fn stream_fallback(&self) -> Option<String> {
        self.stream_off.get().cloned()
    }

    async fn complete_with_retries(
        &self,
        req: &ChatRequest,
        on_delta: Option<&DeltaFn<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        let policy = self.settings.retry_policy();
        let started = Instant::now();
        // The whole completion, every attempt and wait, ends by this.
        let deadline = started + self.settings.request_deadline;
        let mut retry: u32 = 0;
        // Why this turn went on without streaming, once it did.
        let mut fallback: Option<String> = None;
        let mut invalid_seen = false;
        let mut slow_seen = false;
        let mut last_was_5xx = false;
        loop {
            let stream = self.streaming() && fallback.is_none();
            let body = self.format.request_body(self, req, stream)?;
            let headers = self.headers(&req.agent_path, stream)?;
            let failure = match self
                .attempt(&headers, body, on_delta, stream, deadline)
                .await
            {
                Ok(assembled) => {
                    if assembled.llama_cpp {
                        self.llama_cpp.store(true, Ordering::Relaxed);
                    }
                    // An empty reply again without streaming is the model's
                    // own answer: the stream was not at fault, it stays on.
                    if let Some(why) = fallback
                        && !(why == EMPTY_STREAM && is_empty(&assembled))
                    {
                        self.switch_off_streaming(req, why);
                    }
                    return Ok(finalize(req, assembled));
                }
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::StreamOnly(why)) if stream => {
                    // Retried at once, and not counted as a retry: the
                    // server answered; it is the stream that failed.
                    tracing::warn!(
                        url = %self.endpoint,
                        agent = %req.agent_path,
                        "the streamed request failed ({why}); retrying it once without streaming"
                    );
                    fallback = Some(why);
                    continue;
                }
                Err(Attempt::StreamOnly(why)) => return Err(self.bad(why)),
                Err(Attempt::WantsMaxCompletionTokens(e)) => {
                    if self.settings.sampling.max_tokens.is_none()
                        || self.max_completion_tokens.swap(true, Ordering::Relaxed)
                    {
                        return Err(e);
                    }
                    tracing::warn!(
                        url = %self.endpoint,
                        "the server wants `max_completion_tokens` instead of `max_tokens`; retrying with it"
                    );
                    continue;
                }
                Err(Attempt::Transient(f)) => f,
            };
            let exhausted = |hint: String| LlmError::Exhausted {
                url: self.endpoint.clone(),
                attempts: retry + 1,
                last: failure.reason.clone(),
                hint: self.with_key_hint(hint, failure.status),
            };
            if let Some(body) = &failure.invalid_request {
                if invalid_seen {
                    return Err(LlmError::Rejected {
                        url: self.endpoint.clone(),
                        status: failure.status.unwrap_or(0),
                        body: format!(
                            "{body} (the server rejected the request as invalid twice; not retried again)"
                        ),
                    });
                }
                invalid_seen = true;
            }
            // A timeout or a stall costs a whole timeout each time: the
            // second one ends the request, so the configured value bounds
            // the wait (twice it, plus one backoff), not 5 times it.
            if matches!(failure.kind, Kind::KeepAlivesOnly) {
                tracing::warn!(url = %self.endpoint, agent = %req.agent_path, "{}; not retried", failure.reason);
                return Err(exhausted(failure.kind.hint().to_owned()));
            }
            if matches!(failure.kind, Kind::Timeout | Kind::Stall | Kind::FirstToken) {
                if slow_seen {
                    return Err(exhausted(format!(
                        "{} (stopped retrying: the server timed out twice)",
                        failure.kind.hint()
                    )));
                }
                slow_seen = true;
            }
            let is_5xx = failure.status.is_some_and(|s| s >= 500);
            // A 5xx to a streamed request may be the stream's fault (LiteLLM
            // fails only when streaming): the second one in a row, or one
            // that looks deterministic, is retried without streaming.
            if stream && is_5xx && (last_was_5xx || failure.invalid_request.is_some()) {
                fallback = Some(format!(
                    "the server answered streamed requests with HTTP {}",
                    failure.status.unwrap_or(500)
                ));
            }
            last_was_5xx = is_5xx;
            let delay = match policy.next_delay(retry, started.elapsed(), failure.retry_after) {
                Ok(delay) if Instant::now() + delay < deadline => delay,
                Ok(_) => {
                    return Err(exhausted(format!(
                        "{} (stopped retrying: the request_deadline of {} has passed or would pass during the next wait)",
                        failure.kind.hint(),
                        human_duration(self.settings.request_deadline)
                    )));
                }
                Err(why) => {
                    let mut hint = failure.kind.hint().to_owned();
                    if why == GiveUp::TotalTime {
                        hint = format!(
                            "{hint} (stopped retrying: the next wait would pass retry_max_total of {}s)",
                            policy.max_total.as_secs()
                        );
                    }
                    return Err(exhausted(hint));
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
            self.note_retry(
                req,
                super::RetryNote {
                    attempt: retry + 1,
                    of: policy.max_retries + 1,
                    wait_ms: delay.as_millis() as u64,
                    status: failure.status,
                    reason: failure.reason.clone(),
                },
            );
            tokio::time::sleep(delay).await;
            retry += 1;
        }
    }

    /// Keeps a retry for [`ChatModel::take_retries`] (a poisoned lock only
    /// loses the note: the retry itself goes on).
    fn note_retry(&self, req: &ChatRequest, note: super::RetryNote) {
        if let Ok(mut all) = self.retries.lock() {
            all.push((req.agent_path.clone(), note));
        }
    }

    /// The retries made for `agent_path`'s requests and not yet taken.
    pub fn take_retries(&self, agent_path: &str) -> Vec<super::RetryNote> {
        let Ok(mut all) = self.retries.lock() else {
            return Vec::new();
        };
        let (mine, rest): (Vec<_>, Vec<_>) =
            all.drain(..).partition(|(path, _)| path == agent_path);
        *all = rest;
        mine.into_iter().map(|(_, note)| note).collect()
    }

    /// `hint`, and when no API key was configured and the server kept
    /// answering with a 5xx, that none was sent: some servers (LiteLLM)
    /// answer a missing key with HTTP 500 rather than 401.
    fn with_key_hint(&self, hint: String, status: Option<u16>) -> String {
        if self.settings.api_key.is_some() || status.is_none_or(|s| s < 500) {
            return hint;
        }
        format!(
            "{hint}; note: no API key was sent, and some servers (LiteLLM) answer a missing key with HTTP 500: set ORCH_API_KEY (or the profile's api_key_env) if this server needs one"
        )
    }

    /// A plain request succeeded after a stream-only failure: this client
    /// does not stream any more.
    fn switch_off_streaming(&self, req: &ChatRequest, why: String) {
        tracing::warn!(
            url = %self.endpoint,
            agent = %req.agent_path,
            "{why}; the request succeeded without streaming, so this client no longer streams"
        );
        let _ = self.stream_off.set(why);
    }

    fn headers(&self, agent_path: &str, stream: bool) -> Result<HeaderMap, LlmError> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if stream {
            headers.insert(
                ACCEPT,
                HeaderValue::from_static("text/event-stream, application/json"),
            );
        }
        headers.insert(AGENT_HEADER, agent_header_value(agent_path));
        headers.insert(PID_HEADER, HeaderValue::from(std::process::id()));
        self.format.auth_headers(self, &mut headers)?;
        Ok(headers)
    }

    /// One request, ending by `call_deadline` at the latest. Non-streamed:
    /// bounded by `request_timeout` as a whole. Streamed: `request_timeout`
    /// bounds the wait for the headers, then `stream_idle_timeout` every
    /// stretch without a `data` line. Bodies are read in chunks and refused
    /// past [`ModelSettings::max_body_bytes`].
    async fn attempt(
        &self,
        headers: &HeaderMap,
        body: Vec<u8>,
        on_delta: Option<&DeltaFn<'_>>,
        stream: bool,
        call_deadline: Instant,
    ) -> Result<Assembled, Attempt> {
        let limit = Deadline::earlier(
            Deadline {
                at: Instant::now() + self.settings.request_timeout,
                after: self.settings.request_timeout,
                setting: "request_timeout",
            },
            self.call_deadline_of(call_deadline),
        );
        let request_bytes = body.len();
        let builder = self
            .http
            .post(&self.endpoint)
            .headers(headers.clone())
            .body(body);
        let mut resp = match tokio::time::timeout_at(limit.at, builder.send()).await {
            Ok(Ok(resp)) => resp,
            Ok(Err(e)) => return Err(self.transport_failure(e, None)),
            Err(_) => return Err(limit.timed_out("waiting for the response")),
        };
        let status = resp.status();
        let retry_after = resp.headers().get(RETRY_AFTER).and_then(parse_retry_after);
        let header_cost = resp
            .headers()
            .get(COST_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .and_then(super::reported_cost);
        let is_sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if status.is_success() && is_sse {
            let first = self.settings.first_token_wait(request_bytes);
            let assembled = self
                .read_stream(resp, on_delta, call_deadline, first)
                .await?;
            // finish_reason is advisory, but `tool_calls` with none arrived
            // means the stream lost them (LiteLLM's streaming path).
            if stream
                && assembled.message.tool_calls.is_empty()
                && assembled.finish_reason.as_deref() == Some("tool_calls")
            {
                return Err(Attempt::StreamOnly(
                    "the stream ended with finish_reason `tool_calls` but carried no tool call"
                        .to_owned(),
                ));
            }
            // No text and no call, and not cut off: LiteLLM's streaming
            // path drops tool calls this way (HTTP 200, `stop`), while the
            // same request without streaming carries them.
            if stream && is_empty(&assembled) {
                return Err(Attempt::StreamOnly(EMPTY_STREAM.to_owned()));
            }
            return Ok(Assembled {
                header_cost,
                ..assembled
            });
        }
        // Error bodies, and plain completions (also when a server ignored
        // `stream: true`), are read within the request's time: a completion
        // up to the body cap, an error body only as far as it is quoted.
        let cap = self.settings.max_body_bytes();
        if status.is_success()
            && let Some(len) = resp.content_length().filter(|len| *len > cap as u64)
        {
            return Err(Attempt::Fatal(self.bad(format!(
                "the body is {len} bytes, more than the cap of {cap} (twice max_reply_bytes of {} plus 64 KiB); not read",
                self.settings.max_reply_bytes
            ))));
        }
        let (cap, truncate) = if status.is_success() {
            (cap, false)
        } else {
            (ERROR_BODY_BYTES, true)
        };
        let bytes = match read_capped(&mut resp, cap, limit.at, truncate).await {
            Ok(bytes) => bytes,
            Err(BodyError::Transport(e)) => return Err(self.transport_failure(e, None)),
            Err(BodyError::TimedOut) => return Err(limit.timed_out("reading the response")),
            Err(BodyError::TooLarge { read }) => {
                return Err(Attempt::Fatal(self.bad(format!(
                    "the body is larger than the cap of {cap} bytes (twice max_reply_bytes of {} plus 64 KiB): refused after reading {read} bytes",
                    self.settings.max_reply_bytes
                ))));
            }
        };
        if status.is_success() {
            return self
                .format
                .parse_completion(self, &bytes)
                .map(|a| Assembled { header_cost, ..a });
        }
        Err(self
            .format
            .classify_status(self, status, retry_after, &bytes))
    }

    /// The completion's own deadline.
    fn call_deadline_of(&self, call_deadline: Instant) -> Deadline {
        Deadline {
            at: call_deadline,
            after: self.settings.request_deadline,
            setting: "request_deadline",
        }
    }

    /// Reads an SSE response to its end (`[DONE]` or the end of the body):
    /// `first.wait` for its first `data` line (the server may still be
    /// evaluating the prompt), then `stream_idle_timeout` between them.
    async fn read_stream(
        &self,
        mut resp: reqwest::Response,
        on_delta: Option<&DeltaFn<'_>>,
        call_deadline: Instant,
        first: FirstTokenWait,
    ) -> Result<Assembled, Attempt> {
        let idle = self.settings.stream_idle_timeout;
        let call = self.call_deadline_of(call_deadline);
        let mut decoder = SseDecoder::new(self.settings.max_body_bytes());
        let mut assembler = self.format.stream_decoder(self.settings.max_reply_bytes);
        // Only `data` lines are life: a server that sends nothing but
        // keep-alive comments is silent as far as this timer goes.
        let mut last_data = Instant::now();
        let mut comments = 0usize;
        let mut seen_data = false;
        loop {
            let idle_at = last_data + if seen_data { idle } else { first.wait };
            let chunk = match tokio::time::timeout_at(idle_at.min(call.at), resp.chunk()).await {
                Ok(Ok(Some(chunk))) => chunk,
                Ok(Ok(None)) => break,
                Ok(Err(e)) => return Err(self.transport_failure(e, Some(assembler.chunks()))),
                Err(_) if call.at < idle_at => return Err(call.timed_out("reading the stream")),
                Err(_) => {
                    let keep_alives = if comments > 0 {
                        format!(" ({comments} keep-alive comments do not count)")
                    } else {
                        String::new()
                    };
                    // Only keep-alives, never a data line: the server is
                    // busy, not gone; a retry would queue the same work.
                    let (kind, reason) = match (seen_data, comments > 0) {
                        (true, _) => (
                            Kind::Stall,
                            format!(
                                "the stream stalled: no data for {} after {} chunks{keep_alives}",
                                human_duration(idle),
                                assembler.chunks()
                            ),
                        ),
                        (false, busy) => (
                            if busy {
                                Kind::KeepAlivesOnly
                            } else {
                                Kind::FirstToken
                            },
                            format!(
                                "the stream stalled before its first token: no first token within {} ({}){keep_alives}",
                                first.shown(),
                                first
                            ),
                        ),
                    };
                    return Err(Attempt::Transient(Transient::new(reason, kind)));
                }
            };
            let fed = decoder
                .feed(&chunk)
                .map_err(|e| Attempt::Fatal(self.bad(e.to_string())))?;
            if fed.data {
                seen_data = true;
                last_data = Instant::now();
                comments = 0;
            }
            comments += fed.comments;
            for data in &fed.events {
                if self.take_event(assembler.as_mut(), data, on_delta)? {
                    return self.stream_end(assembler);
                }
            }
        }
        let last = decoder
            .finish()
            .map_err(|e| Attempt::Fatal(self.bad(e.to_string())))?;
        if let Some(data) = last {
            self.take_event(assembler.as_mut(), &data, on_delta)?;
        }
        self.stream_end(assembler)
    }

    /// Adds one event's data to `assembler`; true at `[DONE]` or the
    /// format's own end event.
    fn take_event(
        &self,
        assembler: &mut dyn StreamDecoder,
        data: &str,
        on_delta: Option<&DeltaFn<'_>>,
    ) -> Result<bool, Attempt> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        match assembler.push(data) {
            Ok(true) => {
                if let Some(on_delta) = on_delta {
                    on_delta(assembler.chars());
                }
                Ok(assembler.ended())
            }
            Ok(false) => Ok(assembler.ended()),
            Err(ChunkError::Malformed(what)) => Err(Attempt::Fatal(self.bad(format!(
                "{what}; it starts with: {}",
                self.redact(&snippet(data.as_bytes()))
            )))),
            Err(ChunkError::Server(err)) => Err(self.format.stream_error(self, &err)),
            Err(ChunkError::TooLarge(why)) => Err(Attempt::Fatal(self.bad(why))),
        }
    }

    fn stream_end(&self, assembler: Box<dyn StreamDecoder>) -> Result<Assembled, Attempt> {
        if assembler.chunks() == 0 {
            // llama-cpp-python answers tools + stream with an empty 200.
            return Err(Attempt::StreamOnly(
                "the stream ended before any chunk".to_owned(),
            ));
        }
        Ok(assembler.finish())
    }
}

/// The response header in which LiteLLM's proxy reports the call's cost in
/// US dollars.
const COST_HEADER: &str = "x-litellm-response-cost";

/// Why a streamed reply with neither text nor a tool call is re-sent once
/// without streaming.
const EMPTY_STREAM: &str = "the streamed reply was empty (no text and no tool call)";

/// A reply with neither text nor a tool call that was not cut off by the
/// reply cap (`finish_reason: length` is the model's own empty answer).
fn is_empty(reply: &Assembled) -> bool {
    reply.message.tool_calls.is_empty()
        && reply
            .message
            .content
            .as_deref()
            .is_none_or(|c| c.trim().is_empty())
        && reply.finish_reason.as_deref() != Some("length")
}

/// Bound on a request that asks the server about the model (answered at
/// once by servers that have the endpoint).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// A trimmed, control-character-free start of a server's body, for a
/// message (mask the key with [`OpenAiClient::redact`]).
pub(crate) fn snippet_of(bytes: &[u8]) -> String {
    snippet(bytes)
}

/// Most bytes of an error body read (it is only quoted in part).
const ERROR_BODY_BYTES: usize = 64 << 10;

/// A point in time some setting puts a deadline at (the budget's caps are
/// [`crate::budget::Limit`]; this is a timeout's moment, not a budget).
#[derive(Clone, Copy)]
struct Deadline {
    at: Instant,
    /// The setting's value.
    after: Duration,
    /// Its name, for the message.
    setting: &'static str,
}

impl Deadline {
    fn earlier(a: Deadline, b: Deadline) -> Deadline {
        if b.at < a.at { b } else { a }
    }

    fn timed_out(&self, what: &str) -> Attempt {
        timed_out(self.after, what, self.setting)
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
        match self.settings.provider {
            super::Provider::OpenAiChat => {
                format!("{} at {}", self.settings.model, self.settings.base_url)
            }
            other => format!(
                "{} at {} ({other})",
                self.settings.model, self.settings.base_url
            ),
        }
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

    fn with_sampling(&self, sampling: &super::Sampling) -> Option<std::sync::Arc<dyn ChatModel>> {
        let mut settings = self.settings.clone();
        sampling.apply(&mut settings);
        OpenAiClient::new(settings)
            .ok()
            .map(|c| std::sync::Arc::new(c) as std::sync::Arc<dyn ChatModel>)
    }

    fn probe_context_window(&self) -> BoxFuture<'_, Option<u64>> {
        Box::pin(async {
            *self
                .probed_window
                .get_or_init(|| self.format.probe_window(self))
                .await
        })
    }

    fn stream_fallback(&self) -> Option<String> {
        OpenAiClient::stream_fallback(self)
    }

    fn take_retries(&self, agent_path: &str) -> Vec<super::RetryNote> {
        OpenAiClient::take_retries(self, agent_path)
    }

    fn tool_calling(&self) -> super::ToolCalling {
        self.settings.tool_calling
    }

    fn constrained_max_tokens(&self) -> Option<u64> {
        let cap = self.settings.constrained_cap();
        (cap != self.settings.sampling.max_tokens)
            .then_some(cap)
            .flatten()
    }

    fn with_tool_calling(
        &self,
        setting: super::ToolCalling,
    ) -> Option<std::sync::Arc<dyn ChatModel>> {
        let mut settings = self.settings.clone();
        settings.tool_calling = setting;
        OpenAiClient::new(settings)
            .ok()
            .map(|c| std::sync::Arc::new(c) as std::sync::Arc<dyn ChatModel>)
    }

    fn with_prompt_cache(&self, role: super::PromptCache) -> Option<std::sync::Arc<dyn ChatModel>> {
        let wanted = self.settings.prompt_cache.with_role(role);
        if wanted == self.settings.prompt_cache {
            return None;
        }
        let mut settings = self.settings.clone();
        settings.prompt_cache = wanted;
        OpenAiClient::new(settings)
            .ok()
            .map(|c| std::sync::Arc::new(c) as std::sync::Arc<dyn ChatModel>)
    }

    fn spawn_settings(&self) -> Option<super::ModelSpawn> {
        Some(super::ModelSpawn::Http {
            provider: self.settings.provider,
            base_url: self.settings.base_url.clone(),
            model: self.settings.model.clone(),
            api_key: self.settings.api_key.clone(),
        })
    }
}
