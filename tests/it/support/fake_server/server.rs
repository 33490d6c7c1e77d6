//! The server itself: the listener, one thread per connection, the shared
//! record of requests and violations, and the choice of each answer.

use super::checks::tool_pairing_violations;
use super::http::{Answer, Request, plain, read_request, write_answer};
use super::script::{Reply, Script, render};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::io::BufReader;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// How long a connection may stay silent before the server gives up on it.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// The body's bytes as sent (key order and spacing included).
    pub raw: Vec<u8>,
    /// When the request had been read completely.
    pub at: Instant,
    /// The same moment as wall-clock time (to compare with other processes).
    pub received: SystemTime,
    /// How many answers (to any path) the server had begun writing when
    /// this request was read: requests a client sent in parallel share it
    /// (with a [`Script::latency`] longer than the client's spread).
    pub answered_before: usize,
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
pub(super) struct State {
    script: HashMap<String, VecDeque<Reply>>,
    requests: Vec<Recorded>,
    violations: Vec<String>,
    /// How many violations the test has read through [`FakeServer::violations`].
    violations_read: usize,
    /// Requests to paths other than `…/chat/completions`.
    side_requests: Vec<Recorded>,
    /// Fixed replies for other paths, by path suffix.
    routes: Vec<(String, Reply)>,
}

pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    pub(super) stop: AtomicBool,
    /// (requests held right now, whether `n` were ever held together)
    pub(super) peers: Mutex<(usize, bool)>,
    pub(super) peers_cv: std::sync::Condvar,
    /// [`Script::latency`]: the wait before every answer.
    pub(super) latency: Duration,
    /// Answers begun so far (see [`Recorded::answered_before`]).
    pub(super) answered: AtomicUsize,
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
                routes: script.routes,
                ..State::default()
            }),
            stop: AtomicBool::new(false),
            peers: Mutex::new((0, false)),
            peers_cv: std::sync::Condvar::new(),
            latency: script.latency,
            answered: AtomicUsize::new(0),
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
    ///
    /// Reading them hands their checking to the test: the server no longer
    /// fails the test on drop for the ones returned (a test that provokes a
    /// breach on purpose asserts on it instead).
    pub fn violations(&self) -> Vec<String> {
        let mut state = self.shared.state();
        state.violations_read = state.violations.len();
        state.violations.clone()
    }

    /// Requests to paths other than `…/chat/completions` (e.g. the client
    /// asking `GET /props` for the context window), in arrival order.
    pub fn side_requests(&self) -> Vec<Recorded> {
        self.shared.state().side_requests.clone()
    }

    /// The paths of [`FakeServer::side_requests`], in arrival order.
    pub fn side_paths(&self) -> Vec<String> {
        self.side_requests().into_iter().map(|r| r.path).collect()
    }

    /// How many requests (chat or side) had a path ending with `suffix`.
    pub fn count_path(&self, suffix: &str) -> usize {
        let state = self.shared.state();
        state
            .requests
            .iter()
            .chain(&state.side_requests)
            .filter(|r| r.path.ends_with(suffix))
            .count()
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
        // The harness enforces what review does: a breach nobody looked at
        // fails the test (unless it is failing already: a second panic aborts).
        if !std::thread::panicking() {
            let state = self.shared.state();
            let unread = &state.violations[state.violations_read.min(state.violations.len())..];
            assert!(
                unread.is_empty(),
                "the fake server saw protocol violations the test never checked: {unread:?}"
            );
        }
    }
}

pub(super) fn accept_loop(
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

pub(super) fn handle_connection(stream: TcpStream, shared: &Shared) {
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
    if !shared.latency.is_zero() {
        std::thread::sleep(shared.latency);
    }
    // Counted before the first byte goes out: a client that read this
    // answer and sent its next request always finds it counted.
    shared.answered.fetch_add(1, Ordering::SeqCst);
    write_answer(stream, answer, shared);
}

/// Records the request, checks it, and picks the answer (sleeping for delays).
pub(super) fn answer_for(request: Request, shared: &Shared) -> Answer {
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
    let messages_api = super::anthropic::is_messages(&request.path);
    let responses = super::responses::is_responses(&request.path);
    let reply = {
        let mut state = shared.state();
        let recorded = Recorded {
            agent: agent.clone(),
            path: request.path.clone(),
            headers: request.headers,
            body: body.clone(),
            raw: request.body.clone(),
            at: Instant::now(),
            received: SystemTime::now(),
            answered_before: shared.answered.load(Ordering::SeqCst),
        };
        if !request.path.ends_with("/chat/completions") && !messages_api && !responses {
            state.side_requests.push(recorded);
            let route = state
                .routes
                .iter()
                .find(|(suffix, _)| request.path.ends_with(suffix.as_str()))
                .map(|(_, reply)| reply.clone());
            drop(state);
            return match route {
                Some(reply) => render(reply, &body, shared),
                None => plain(404, format!("fake server: no route for {}", request.path)),
            };
        }
        state.requests.push(recorded);
        let number = state.requests.len();
        let mut problems = match &parsed {
            Ok(_) if responses => tool_pairing_violations(&super::responses::chat_messages(&body)),
            Ok(_) if messages_api => {
                let mut p = super::anthropic::api_violations(&body);
                p.extend(tool_pairing_violations(
                    &super::anthropic::as_chat_messages(&body),
                ));
                p
            }
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
        (
            state.script.get_mut(&agent).and_then(VecDeque::pop_front),
            responses,
        )
    };
    // In the Anthropic mode the body is marked, so every reply (also one
    // wrapped in a delay or a cut) is rendered as a Messages reply.
    let body = if messages_api {
        super::anthropic::marked(&body)
    } else {
        body
    };
    match reply {
        (Some(reply), true) => special(reply, shared, &agent, pid)
            .unwrap_or_else(|r| super::responses::render(r, &body, shared)),
        (Some(reply), false) => {
            special(reply, shared, &agent, pid).unwrap_or_else(|r| render(r, &body, shared))
        }
        (None, _) => plain(
            500,
            format!("fake server: script exhausted for agent {agent:?}"),
        ),
    }
}

/// Handles the replies that need the request's headers; any other reply
/// comes back as `Err` for [`render`].
pub(super) fn special(
    reply: Reply,
    shared: &Shared,
    agent: &str,
    pid: Option<i32>,
) -> Result<Answer, Reply> {
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
