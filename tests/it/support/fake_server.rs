//! A scripted fake OpenAI-compatible Chat Completions server for tests.
//!
//! It listens on `127.0.0.1:0`, speaks plain HTTP/1.1 (one request per
//! connection, answered with `Content-Length` and `Connection: close`) and
//! serves replies per agent — by the `X-Orch-Agent` header — in script order.
//! An unknown agent, or one whose replies are used up, gets HTTP 500 with
//! `fake server: script exhausted for agent "X"`.
//!
//! Every request is recorded (before it is answered, so a client that got its
//! answer always finds its request in [`FakeServer::requests`]). Every request
//! is also checked the way real servers check it: each `role: tool` message
//! must answer a tool call of the latest assistant message, and every tool call
//! must be answered before the next non-tool message. A breach is recorded in
//! [`FakeServer::violations`] and answered with HTTP 400 without consuming a
//! reply. Tests should assert `server.violations()` is empty. A request to any
//! path other than `…/chat/completions` is recorded and answered 404.
//!
//! Streaming: a request whose body has `"stream": true` gets a
//! [`Reply::Message`] as server-sent events (`Transfer-Encoding: chunked`,
//! one HTTP chunk per event, each flushed): a role delta, the content in
//! pieces of a few characters, each tool call as a first delta with id and
//! name followed by its arguments in several pieces, a finish chunk, a usage
//! chunk (only when the reply has usage) and `data: [DONE]`. See the SSE
//! variants of [`Reply`] for raw chunks, stalls and cut streams.
//!
//! Threads: one accept thread plus one per connection. Drop stops the accept
//! loop (flag + a connection to itself) and joins every thread; connection
//! threads are bounded by a read timeout and their scripted delays.

use serde_json::{Value, json};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// How long a connection may stay silent before the server gives up on it.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request body accepted (a runaway client should fail, not eat memory).
const MAX_BODY_BYTES: usize = 64 << 20;
/// Longest a [`Reply::StallAfter`] holds a connection whose client stays.
pub const STALL_LIMIT: Duration = Duration::from_secs(20);

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

fn wire_call(id: &str, name: &str, arguments: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

/// Replies per agent path, served in order.
#[derive(Debug, Clone, Default)]
pub struct Script {
    agents: HashMap<String, VecDeque<Reply>>,
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
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The `X-Orch-Agent` header, `""` if absent.
    pub agent: String,
    /// The request target, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Headers in order, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Null` if it was not JSON).
    pub body: Value,
    /// When the request had been read completely.
    pub at: Instant,
    /// The same moment as wall-clock time (to compare with other processes).
    pub received: SystemTime,
}

impl Recorded {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The request's `messages` (empty if there are none).
    pub fn messages(&self) -> &[Value] {
        self.body["messages"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

#[derive(Default)]
struct State {
    script: HashMap<String, VecDeque<Reply>>,
    requests: Vec<Recorded>,
    violations: Vec<String>,
}

struct Shared {
    state: Mutex<State>,
    stop: AtomicBool,
    /// (requests held right now, whether `n` were ever held together)
    peers: Mutex<(usize, bool)>,
    peers_cv: std::sync::Condvar,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panicking connection thread must not hide what was recorded.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running fake server; stops and joins its threads on drop.
pub struct FakeServer {
    /// `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    workers: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl FakeServer {
    /// Starts serving `script` on a free port.
    pub fn start(script: Script) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind fake server");
        let addr = listener.local_addr().expect("fake server address");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                script: script.agents,
                ..State::default()
            }),
            stop: AtomicBool::new(false),
            peers: Mutex::new((0, false)),
            peers_cv: std::sync::Condvar::new(),
        });
        let workers: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = {
            let shared = Arc::clone(&shared);
            let workers = Arc::clone(&workers);
            std::thread::Builder::new()
                .name("fake-server-accept".into())
                .spawn(move || accept_loop(listener, shared, workers))
                .expect("spawn fake server")
        };
        FakeServer {
            base_url: format!("http://{addr}/v1"),
            addr,
            shared,
            accept: Some(accept),
            workers,
        }
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.state().requests.clone()
    }

    /// The requests sent by `agent`.
    pub fn requests_for(&self, agent: &str) -> Vec<Recorded> {
        self.shared
            .state()
            .requests
            .iter()
            .filter(|r| r.agent == agent)
            .cloned()
            .collect()
    }

    /// Protocol breaches seen so far (tool results without a matching call, …).
    pub fn violations(&self) -> Vec<String> {
        self.shared.state().violations.clone()
    }

    /// Whether some [`Reply::AwaitPeers`] saw its `n` requests in flight at once.
    pub fn peers_met(&self) -> bool {
        self.shared
            .peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
    }

    /// How many scripted replies are still queued for `agent`.
    pub fn remaining(&self, agent: &str) -> usize {
        self.shared
            .state()
            .script
            .get(agent)
            .map_or(0, VecDeque::len)
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept() so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        let workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|e| e.into_inner()));
        for worker in workers {
            let _ = worker.join();
        }
    }
}

fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    workers: Arc<Mutex<Vec<JoinHandle<()>>>>,
) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let conn_shared = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("fake-server-conn".into())
            .spawn(move || handle_connection(stream, &conn_shared));
        if let Ok(handle) = spawned {
            let mut workers = workers.lock().unwrap_or_else(|e| e.into_inner());
            workers.retain(|h| !h.is_finished());
            workers.push(handle);
        }
    }
}

struct Request {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

enum Answer {
    Send {
        status: u16,
        content_type: &'static str,
        extra: Vec<(String, String)>,
        body: String,
    },
    Close,
    Sse {
        chunks: Vec<Vec<u8>>,
        end: SseEnd,
    },
}

/// How an SSE answer ends.
#[derive(Clone, Copy)]
enum SseEnd {
    /// The terminating chunk, then close.
    Finish,
    /// After this many chunks, silence until the client leaves.
    Stall(usize),
    /// After this many chunks, close without the terminating chunk.
    Cut(usize),
}

fn handle_connection(stream: TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
    let _ = stream.set_write_timeout(Some(READ_TIMEOUT));
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let request = match read_request(&mut reader) {
        Ok(Some(request)) => request,
        // EOF before a request line: the drop wake-up, or a client that gave up.
        Ok(None) => return,
        Err(e) => {
            let answer = plain(400, format!("fake server: unreadable request: {e}"));
            write_answer(stream, answer, shared);
            return;
        }
    };
    let answer = answer_for(request, shared);
    write_answer(stream, answer, shared);
}

fn read_request(reader: &mut impl BufRead) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(_method), Some(path)) = (parts.next(), parts.next()) else {
        return Err(invalid(format!("bad request line {line:?}")));
    };
    let path = path.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 {
            return Err(invalid("connection closed inside the headers".into()));
        }
        let header = header.trim_end_matches(['\r', '\n']);
        if header.is_empty() {
            break;
        }
        let (name, value) = header
            .split_once(':')
            .ok_or_else(|| invalid(format!("bad header line {header:?}")))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let body = if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        read_chunked(reader)?
    } else {
        let len: usize = find("content-length")
            .map(|v| {
                v.parse()
                    .map_err(|_| invalid(format!("bad content-length {v:?}")))
            })
            .transpose()?
            .unwrap_or(0);
        if len > MAX_BODY_BYTES {
            return Err(invalid(format!("body of {len} bytes is too large")));
        }
        let mut body = vec![0; len];
        reader.read_exact(&mut body)?;
        body
    };
    Ok(Some(Request {
        path,
        headers,
        body,
    }))
}

fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        reader.read_line(&mut size_line)?;
        let size_text = size_line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| invalid(format!("bad chunk size {size_line:?}")))?;
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                let mut trailer = String::new();
                if reader.read_line(&mut trailer)? == 0 || trailer.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        if body.len() + size > MAX_BODY_BYTES {
            return Err(invalid("chunked body is too large".into()));
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = String::new();
        reader.read_line(&mut crlf)?;
    }
}

fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

/// Records the request, checks it, and picks the answer (sleeping for delays).
fn answer_for(request: Request, shared: &Shared) -> Answer {
    let agent = request
        .headers
        .iter()
        .find(|(n, _)| n == "x-orch-agent")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let pid = request
        .headers
        .iter()
        .find(|(n, _)| n == "x-orch-pid")
        .and_then(|(_, v)| v.parse::<i32>().ok());
    let parsed = serde_json::from_slice::<Value>(&request.body);
    let body = parsed.as_ref().cloned().unwrap_or(Value::Null);
    let reply = {
        let mut state = shared.state();
        let number = state.requests.len() + 1;
        state.requests.push(Recorded {
            agent: agent.clone(),
            path: request.path.clone(),
            headers: request.headers,
            body: body.clone(),
            at: Instant::now(),
            received: SystemTime::now(),
        });
        if !request.path.ends_with("/chat/completions") {
            return plain(404, format!("fake server: no route for {}", request.path));
        }
        let mut problems = match &parsed {
            Ok(_) => tool_pairing_violations(&body["messages"]),
            Err(e) => vec![format!("the body is not JSON ({e})")],
        };
        if !problems.is_empty() {
            for problem in &mut problems {
                *problem = format!("request {number} (agent {agent:?}): {problem}");
            }
            state.violations.extend(problems.iter().cloned());
            let message = problems.join("; ");
            return Answer::Send {
                status: 400,
                content_type: "application/json",
                extra: Vec::new(),
                body: json!({"error": {"message": message, "type": "invalid_request_error"}})
                    .to_string(),
            };
        }
        state.script.get_mut(&agent).and_then(VecDeque::pop_front)
    };
    match reply {
        Some(reply) => {
            special(reply, shared, &agent, pid).unwrap_or_else(|r| render(r, &body, shared))
        }
        None => plain(
            500,
            format!("fake server: script exhausted for agent {agent:?}"),
        ),
    }
}

/// Handles the replies that need the request's headers; any other reply
/// comes back as `Err` for [`render`].
fn special(reply: Reply, shared: &Shared, agent: &str, pid: Option<i32>) -> Result<Answer, Reply> {
    match reply {
        Reply::KillSender => {
            match pid {
                // SAFETY: plain syscall; the pid comes from the client's own header.
                Some(pid) if pid > 0 => unsafe {
                    libc::kill(pid, libc::SIGKILL);
                },
                _ => shared.state().violations.push(format!(
                    "KillSender: agent {agent:?} sent no X-Orch-Pid header"
                )),
            }
            Ok(Answer::Close)
        }
        other => Err(other),
    }
}

fn render(reply: Reply, request: &Value, shared: &Shared) -> Answer {
    match reply {
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
        Reply::KillSender => Answer::Close,
    }
}

/// The inner reply rendered as SSE (streamed even if the request did not ask), ending `end`.
fn with_sse_end(inner: Reply, request: &Value, end: SseEnd, shared: &Shared) -> Answer {
    let mut streaming = request.clone();
    streaming["stream"] = json!(true);
    match render(inner, &streaming, shared) {
        Answer::Sse { chunks, .. } => Answer::Sse { chunks, end },
        other => other,
    }
}

/// A message as OpenAI streams it: see the module docs.
fn sse_chunks(message: &Value, usage: Option<&Value>, request: &Value) -> Vec<Vec<u8>> {
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
fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(size.max(1))
        .map(|c| c.iter().collect())
        .collect()
}

fn plain(status: u16, body: String) -> Answer {
    Answer::Send {
        status,
        content_type: "text/plain; charset=utf-8",
        extra: Vec::new(),
        body,
    }
}

fn write_answer(mut stream: TcpStream, answer: Answer, shared: &Shared) {
    match answer {
        Answer::Close => {
            let _ = stream.shutdown(Shutdown::Both);
        }
        Answer::Sse { chunks, end } => write_sse(stream, chunks, end, shared),
        Answer::Send {
            status,
            content_type,
            extra,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
                reason(status),
                body.len()
            );
            for (name, value) in extra {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
            let _ = stream.flush();
            let _ = stream.shutdown(Shutdown::Write);
        }
    }
}

/// Writes the head of an SSE answer, then its chunks.
fn write_sse(mut stream: TcpStream, chunks: Vec<Vec<u8>>, end: SseEnd, shared: &Shared) {
    // Small writes must leave at once, not wait to be coalesced.
    let _ = stream.set_nodelay(true);
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    if stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.flush())
        .is_err()
    {
        return;
    }
    write_sse_body(stream, chunks, end, shared);
}

/// Writes SSE chunks as HTTP chunks, one write and flush each, then ends as `end` says.
fn write_sse_body(mut stream: TcpStream, chunks: Vec<Vec<u8>>, end: SseEnd, shared: &Shared) {
    let limit = match end {
        SseEnd::Finish => chunks.len(),
        SseEnd::Stall(n) | SseEnd::Cut(n) => n.min(chunks.len()),
    };
    for chunk in &chunks[..limit] {
        let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
        framed.extend_from_slice(chunk);
        framed.extend_from_slice(b"\r\n");
        if stream
            .write_all(&framed)
            .and_then(|()| stream.flush())
            .is_err()
        {
            return;
        }
    }
    match end {
        SseEnd::Finish => {
            let _ = stream.write_all(b"0\r\n\r\n");
            let _ = stream.flush();
            let _ = stream.shutdown(Shutdown::Write);
        }
        SseEnd::Cut(_) => {
            let _ = stream.shutdown(Shutdown::Both);
        }
        SseEnd::Stall(n) => {
            // Silent until the client hangs up (read sees EOF or an error) or
            // the server stops. A client still there after STALL_LIMIT gets
            // the rest of the stream, so a client without an idle timeout
            // ends up with the stalled answer and its test fails.
            let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
            let started = Instant::now();
            let mut buf = [0u8; 256];
            loop {
                if shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                if started.elapsed() >= STALL_LIMIT {
                    let rest = chunks[n.min(chunks.len())..].to_vec();
                    write_sse_body(stream, rest, SseEnd::Finish, shared);
                    return;
                }
                match stream.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        409 => "Conflict",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// What a real server would reject about the tool-call pairing in `messages`:
/// a tool result must answer a call of the latest assistant message, and every
/// call must be answered before the next non-tool message (or the end).
pub fn tool_pairing_violations(messages: &Value) -> Vec<String> {
    let Some(messages) = messages.as_array() else {
        return vec!["the request has no `messages` array".to_owned()];
    };
    let mut problems = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut pending: Vec<String> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or("");
        if role == "tool" {
            let Some(id) = message["tool_call_id"].as_str() else {
                problems.push(format!(
                    "message {i} is a tool result without `tool_call_id`"
                ));
                continue;
            };
            if let Some(pos) = pending.iter().position(|p| p == id) {
                pending.remove(pos);
            } else if seen.contains(id) {
                problems.push(format!(
                    "message {i} answers tool call `{id}`, which was already answered or belongs to an older assistant message"
                ));
            } else {
                problems.push(format!(
                    "message {i} answers tool call `{id}`, which no earlier assistant message made"
                ));
            }
            continue;
        }
        if !pending.is_empty() {
            problems.push(format!(
                "message {i} ({role}) comes before tool call(s) {pending:?} were answered"
            ));
            pending.clear();
        }
        if role == "assistant" {
            for call in message["tool_calls"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
            {
                let id = call["id"].as_str().unwrap_or("").to_owned();
                if id.is_empty() || !seen.insert(id.clone()) {
                    problems.push(format!(
                        "message {i} has a tool call with a missing or repeated id {id:?}"
                    ));
                }
                pending.push(id);
            }
        }
    }
    if !pending.is_empty() {
        problems.push(format!(
            "the request ends before tool call(s) {pending:?} were answered"
        ));
    }
    problems
}
