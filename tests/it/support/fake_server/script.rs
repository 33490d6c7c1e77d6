//! The script: [`Reply`]s queued per agent, and how each becomes an answer
//! on the wire (a completion, an error status, SSE chunks, a stall, a cut).

use super::hostile::Hostile;
use super::http::{Answer, SseEnd};
use super::server::Shared;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with a chat completion holding `message` (an assistant message) and
    /// `usage` (omitted from the body when `None`).
    Message {
        /// The assistant message, e.g. `{"role":"assistant","content":"hi"}`.
        message: Value,
        /// The `usage` object, if any.
        usage: Option<Value>,
    },
    /// Any status with this body.
    Status(u16, String),
    /// 200 with this raw body (for garbage, empty, HTML …).
    Raw(String),
    /// This status (usually 429) with `Retry-After: secs`.
    RetryAfter(u16, u64),
    /// Close the connection without answering.
    Close,
    /// Wait, then give the inner reply (for latency and timeout tests).
    Delayed(Duration, Box<Reply>),
    /// Send SIGKILL to the process named by the request's `X-Orch-Pid`
    /// header (a crashing client), then close the connection.
    KillSender,
    /// Hold this request until `n` requests are held at once (or `timeout`
    /// passes), then give the inner reply. [`FakeServer::peers_met`] tells
    /// whether `n` were ever in flight together: the proof of concurrency.
    AwaitPeers {
        /// How many requests must be held at the same time.
        n: usize,
        /// The bounded wait.
        timeout: Duration,
        /// What to answer afterwards.
        then: Box<Reply>,
    },
    /// Send `signal` to the process whose pid is in `pid` (set by the test
    /// after spawning it), then close the connection without answering.
    Signal {
        /// The target process id (0 = not set yet: nothing is sent).
        pid: Arc<std::sync::atomic::AtomicU32>,
        /// e.g. `libc::SIGKILL`.
        signal: i32,
    },
    // --- Streaming (SSE) replies (issue #6, model client) ---
    /// 200 `text/event-stream` whatever the request asked: each element is
    /// written verbatim (give the `data: ` prefix and the blank line yourself)
    /// as its own HTTP chunk and flushed; then the body ends properly.
    RawSse(Vec<String>),
    /// [`Reply::RawSse`] with raw bytes, to split a multi-byte character
    /// between two writes.
    RawSseBytes(Vec<Vec<u8>>),
    /// The inner reply's SSE chunks ([`Reply::Message`] streamed, or a raw SSE
    /// reply), but after the first `n` chunks the server goes silent and holds
    /// the connection open until the client leaves; a client still there
    /// after [`STALL_LIMIT`] gets the rest of the stream.
    StallAfter(usize, Box<Reply>),
    /// The inner reply's SSE chunks, but after the first `n` chunks the
    /// connection is closed without ending the chunked body (a cut stream).
    CutAfter(usize, Box<Reply>),
    /// The inner reply's SSE chunks, the headers at once and the first chunk
    /// only after the delay (a CPU server evaluating a long prompt).
    FirstByteAfter(Duration, Box<Reply>),
    // --- Hostile servers (issue 12): each ends when the client hangs up,
    // or after `HOSTILE_LIMIT` ---
    /// 200 `text/event-stream`, then a `: keep-alive` comment every 100 ms
    /// and never any data.
    KeepAliveFlood,
    /// 200 with a text reply of `bytes` bytes of content, generated while it
    /// is written: as SSE events of 64 KiB of text each when `sse`, else as
    /// one JSON completion in a chunked body (no `Content-Length`, so the
    /// client cannot refuse it before reading).
    Huge {
        /// Bytes of content.
        bytes: usize,
        /// Streamed as server-sent events.
        sse: bool,
    },
    /// 200 `application/json` with these bytes as the body (noise: see
    /// [`super::noise`]).
    RawBytes(Vec<u8>),
    /// The connection is accepted, the request read, and nothing is ever
    /// answered (a stall before the headers).
    Silent,
    /// The inner reply with one more response header (plain answers only,
    /// e.g. LiteLLM's `x-litellm-response-cost`).
    WithHeader(String, String, Box<Reply>),
}

impl Reply {
    /// An assistant text answer.
    pub fn text(s: &str) -> Reply {
        Reply::Message {
            message: json!({"role": "assistant", "content": s}),
            usage: None,
        }
    }

    /// An assistant message with one tool call.
    pub fn tool_call(id: &str, name: &str, args: Value) -> Reply {
        Reply::tool_calls(&[(id, name, args)])
    }

    /// An assistant message with several tool calls.
    pub fn tool_calls(calls: &[(&str, &str, Value)]) -> Reply {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| wire_call(id, name, &args.to_string()))
            .collect();
        Reply::Message {
            message: json!({"role": "assistant", "content": null, "tool_calls": calls}),
            usage: None,
        }
    }

    /// A tool call whose `arguments` text is sent verbatim (e.g. malformed JSON).
    pub fn raw_tool_call(id: &str, name: &str, raw_arguments: &str) -> Reply {
        Reply::Message {
            message: json!({"role": "assistant", "content": null, "tool_calls": [wire_call(id, name, raw_arguments)]}),
            usage: None,
        }
    }

    /// A `finish` tool call with `summary` and an optional `verdict`.
    pub fn finish(id: &str, summary: &str, verdict: Option<&str>) -> Reply {
        let mut args = json!({"summary": summary});
        if let Some(verdict) = verdict {
            args["verdict"] = json!(verdict);
        }
        Reply::tool_call(id, "finish", args)
    }

    /// The same reply with `usage` reported (no effect on non-message replies).
    pub fn with_usage(self, prompt_tokens: u64, completion_tokens: u64) -> Reply {
        match self {
            Reply::Message { message, .. } => Reply::Message {
                message,
                usage: Some(json!({
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                })),
            },
            Reply::Delayed(d, inner) => Reply::Delayed(
                d,
                Box::new(inner.with_usage(prompt_tokens, completion_tokens)),
            ),
            other => other,
        }
    }

    /// The same reply, held until `n` requests are in flight together
    /// (bounded by `timeout`).
    pub fn await_peers(self, n: usize, timeout: Duration) -> Reply {
        Reply::AwaitPeers {
            n,
            timeout,
            then: Box::new(self),
        }
    }

    /// The same reply streamed, its headers at once and its first chunk after `delay`.
    pub fn first_byte_after(self, delay: Duration) -> Reply {
        Reply::FirstByteAfter(delay, Box::new(self))
    }

    /// The same reply, given after `delay`.
    pub fn after(self, delay: Duration) -> Reply {
        Reply::Delayed(delay, Box::new(self))
    }

    /// The same reply streamed, going silent after `n` chunks.
    pub fn stall_after(self, n: usize) -> Reply {
        Reply::StallAfter(n, Box::new(self))
    }

    /// The same reply streamed, cut after `n` chunks.
    pub fn cut_after(self, n: usize) -> Reply {
        Reply::CutAfter(n, Box::new(self))
    }
}

pub(super) fn wire_call(id: &str, name: &str, arguments: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

/// Replies per agent path, served in order.
#[derive(Debug, Clone, Default)]
pub struct Script {
    pub(super) agents: HashMap<String, VecDeque<Reply>>,
    pub(super) routes: Vec<(String, Reply)>,
}

impl Script {
    /// An empty script: every request gets the "script exhausted" 500.
    pub fn new() -> Self {
        Script::default()
    }

    /// Appends `replies` for the agent whose `X-Orch-Agent` header is `path`.
    pub fn agent(mut self, path: &str, replies: Vec<Reply>) -> Self {
        self.agents
            .entry(path.to_owned())
            .or_default()
            .extend(replies);
        self
    }

    /// Answers every request whose path ends with `suffix` (and is not a chat
    /// completion) with `reply`, e.g. `route("/props", Reply::Raw(…))` for a
    /// llama.cpp server's properties. Other paths get 404.
    pub fn route(mut self, suffix: &str, reply: Reply) -> Self {
        self.routes.push((suffix.to_owned(), reply));
        self
    }
}

pub(super) fn render(reply: Reply, request: &Value, shared: &Shared) -> Answer {
    match reply {
        Reply::Message { message, usage } if super::anthropic::wants_messages(request) => {
            super::anthropic::render_message(&message, usage.as_ref(), request)
        }
        Reply::Message { message, usage } if request["stream"] == json!(true) => Answer::Sse {
            chunks: sse_chunks(&message, usage.as_ref(), request),
            end: SseEnd::Finish,
        },
        Reply::Message { message, usage } => {
            let has_calls = message["tool_calls"].as_array().is_some_and(|c| !c.is_empty());
            let mut completion = json!({
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": 0,
                "model": request["model"].clone(),
                "choices": [{
                    "index": 0,
                    "message": message,
                    "finish_reason": if has_calls { "tool_calls" } else { "stop" },
                }],
            });
            if let Some(usage) = usage {
                completion["usage"] = usage;
            }
            Answer::Send {
                status: 200,
                content_type: "application/json",
                extra: Vec::new(),
                body: completion.to_string(),
            }
        }
        Reply::Status(status, body) => {
            let content_type = if serde_json::from_str::<Value>(&body).is_ok() {
                "application/json"
            } else {
                "text/plain; charset=utf-8"
            };
            Answer::Send { status, content_type, extra: Vec::new(), body }
        }
        Reply::WithHeader(name, value, inner) => match render(*inner, request, shared) {
            Answer::Send { status, content_type, mut extra, body } => {
                extra.push((name, value));
                Answer::Send { status, content_type, extra, body }
            }
            other => panic!("fake server: WithHeader wraps a plain answer, not {}", kind(&other)),
        },
        Reply::Raw(body) => Answer::Send { status: 200, content_type: "application/json", extra: Vec::new(), body },
        Reply::RetryAfter(status, secs) => Answer::Send {
            status,
            content_type: "application/json",
            extra: vec![("Retry-After".to_owned(), secs.to_string())],
            body: json!({"error": {"message": "fake server: rate limited", "type": "rate_limit_error"}}).to_string(),
        },
        Reply::Close => Answer::Close,
        Reply::Delayed(delay, inner) => {
            std::thread::sleep(delay);
            render(*inner, request, shared)
        }
        Reply::AwaitPeers { n, timeout, then } => {
            let deadline = Instant::now() + timeout;
            let mut peers = shared.peers.lock().unwrap_or_else(|e| e.into_inner());
            peers.0 += 1;
            if peers.0 >= n {
                peers.1 = true;
                shared.peers_cv.notify_all();
            }
            while !peers.1 {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                peers = shared
                    .peers_cv
                    .wait_timeout(peers, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            peers.0 -= 1;
            drop(peers);
            render(*then, request, shared)
        }
        Reply::Signal { pid, signal } => {
            let pid = pid.load(Ordering::SeqCst);
            if pid != 0 {
                // SAFETY: kill(2) with a pid the test owns; no memory is touched.
                unsafe {
                    libc::kill(pid as libc::pid_t, signal);
                }
            }
            Answer::Close
        }
        Reply::RawSse(chunks) => Answer::Sse {
            chunks: chunks.into_iter().map(String::into_bytes).collect(),
            end: SseEnd::Finish,
        },
        Reply::RawSseBytes(chunks) => Answer::Sse {
            chunks,
            end: SseEnd::Finish,
        },
        Reply::StallAfter(n, inner) => with_sse_end(*inner, request, SseEnd::Stall(n), shared),
        Reply::CutAfter(n, inner) => with_sse_end(*inner, request, SseEnd::Cut(n), shared),
        Reply::FirstByteAfter(d, inner) => with_sse_end(*inner, request, SseEnd::After(d), shared),
        Reply::KillSender => Answer::Close,
        Reply::KeepAliveFlood => Answer::Hostile(Hostile::KeepAlives),
        Reply::Huge { bytes, sse } => Answer::Hostile(Hostile::Huge { bytes, sse }),
        Reply::RawBytes(body) => Answer::Hostile(Hostile::Bytes(body)),
        Reply::Silent => Answer::Hostile(Hostile::Silent),
    }
}

/// The inner reply rendered as SSE (streamed even if the request did not ask), ending `end`.
pub(super) fn with_sse_end(inner: Reply, request: &Value, end: SseEnd, shared: &Shared) -> Answer {
    let mut streaming = request.clone();
    streaming["stream"] = json!(true);
    match render(inner, &streaming, shared) {
        Answer::Sse { chunks, .. } => Answer::Sse { chunks, end },
        other => other,
    }
}

/// A message as OpenAI streams it: see the module docs.
pub(super) fn sse_chunks(message: &Value, usage: Option<&Value>, request: &Value) -> Vec<Vec<u8>> {
    let model = request["model"].clone();
    let chunk = |choices: Value| {
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
               "model": model, "choices": choices})
    };
    let delta = |d: Value| chunk(json!([{"index": 0, "delta": d, "finish_reason": null}]));
    let mut events = vec![delta(json!({"role": "assistant", "content": ""}))];
    if let Some(content) = message["content"].as_str() {
        for piece in pieces(content, 3) {
            events.push(delta(json!({"content": piece})));
        }
    }
    let calls = message["tool_calls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (index, call) in calls.iter().enumerate() {
        events.push(delta(json!({"tool_calls": [{
            "index": index, "id": call["id"], "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""}}]})));
        let arguments = call["function"]["arguments"].as_str().unwrap_or("");
        let size = arguments.chars().count().div_ceil(3).max(1);
        for piece in pieces(arguments, size) {
            events.push(delta(json!({"tool_calls": [{
                "index": index, "function": {"arguments": piece}}]})));
        }
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    events.push(chunk(
        json!([{"index": 0, "delta": {}, "finish_reason": finish}]),
    ));
    if let Some(usage) = usage {
        let mut last = chunk(json!([]));
        last["usage"] = usage.clone();
        events.push(last);
    }
    let mut out: Vec<Vec<u8>> = events
        .iter()
        .map(|e| format!("data: {e}\n\n").into_bytes())
        .collect();
    out.push(b"data: [DONE]\n\n".to_vec());
    out
}

/// `text` in pieces of `size` characters.
pub(super) fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(size.max(1))
        .map(|c| c.iter().collect())
        .collect()
}

/// What kind of answer `a` is, for a panic message.
fn kind(a: &Answer) -> &'static str {
    match a {
        Answer::Send { .. } => "a plain answer",
        Answer::Close => "a closed connection",
        Answer::Sse { .. } => "a stream",
        Answer::Hostile(_) => "a hostile answer",
    }
}
