//! A scripted forge on 127.0.0.1:0 that speaks the few documented GitHub
//! (REST v3) and GitLab (REST v4, under `/api/v4`) endpoints orch uses:
//! an issue and its comments (notes), the repository's default branch, and
//! list / create / update of pull (merge) requests. It records every
//! request (method, target, headers, JSON body) and keeps the requests it
//! created, so a test can check that a second publish updated, not created.
//!
//! Fixtures: GitHub `o/r` issue 7 and GitLab `grp/sub/proj` issue 3 (see the
//! constants). Anything else is a 404 with a GitHub-like error body.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Title of the GitHub fixture issue `o/r#7`.
pub const GH_ISSUE_TITLE: &str = "add() subtracts instead of adding";
/// Body of `o/r#7`.
pub const GH_ISSUE_BODY: &str = "`calc.add(2, 3)` returns -1; it should return 5.";
/// The one comment of `o/r#7`.
pub const GH_COMMENT: &str = "Also please keep `add` a one-liner.";
/// Title of the GitHub fixture issue `o/r#66`: terminal escapes (clear the
/// screen, set the window title) and a NUL, as a hostile issue may carry.
pub const GH_HOSTILE_TITLE: &str = "\u{1b}[2J\u{1b}]0;t\u{7}add() subtracts\0 again";
/// Title of the GitLab fixture issue `grp/sub/proj#3`.
pub const GL_ISSUE_TITLE: &str = "add() subtracts on GitLab too";
/// The one user note of `grp/sub/proj#3` (a system note is served too).
pub const GL_NOTE: &str = "Reproduced on main.";

/// One request as the forge saw it.
#[derive(Debug, Clone)]
pub struct ForgeRequest {
    /// `GET`, `POST`, …
    pub method: String,
    /// The request target as sent (path and query, still encoded).
    pub target: String,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`Null` when empty or not JSON).
    pub body: Value,
    /// The raw head and body, for leak checks.
    pub raw: String,
}

impl ForgeRequest {
    /// The first header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    requests: Vec<ForgeRequest>,
    /// Created pull requests (GitHub) and merge requests (GitLab), in order.
    pulls: Vec<Value>,
    mrs: Vec<Value>,
    /// Reviews, threads, checks and comments of the requests (`orch react`).
    pr: super::forge_pr::PrFixture,
}

/// The running forge; stopped (port closed) by [`ForgeServer::stop`] or on drop.
pub struct ForgeServer {
    /// `http://127.0.0.1:<port>`: the GitHub API base.
    pub github_url: String,
    /// `http://127.0.0.1:<port>/api/v4`: the GitLab API base.
    pub gitlab_url: String,
    addr: std::net::SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ForgeServer {
    /// Starts the forge on a free port.
    pub fn start() -> ForgeServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind forge");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let base = format!("http://{addr}");
        let thread = {
            let (state, stop, base) = (Arc::clone(&state), Arc::clone(&stop), base.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(stream) = conn {
                        serve(stream, &state, &base);
                    }
                }
            })
        };
        ForgeServer {
            github_url: base.clone(),
            gitlab_url: format!("{base}/api/v4"),
            addr,
            state,
            stop,
            thread: Some(thread),
        }
    }

    /// `orch.toml` text pointing both forges at this server.
    pub fn orch_toml(&self) -> String {
        format!(
            "[forge.github]\napi_url = \"{}\"\n\n[forge.gitlab]\napi_url = \"{}\"\n",
            self.github_url, self.gitlab_url
        )
    }

    /// What the forge answers to `GET <path>` (e.g. whether a pull request
    /// merges, in the forge's view), as a client would see it. Bounded by a
    /// read timeout.
    pub fn get_json(&self, path: &str) -> Value {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(self.addr).unwrap();
        conn.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        write!(
            conn,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut text = String::new();
        conn.read_to_string(&mut text).unwrap();
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        serde_json::from_str(body).unwrap_or_else(|e| panic!("GET {path}: {e}: {text}"))
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<ForgeRequest> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The pull requests created so far (as updated since).
    pub fn pulls(&self) -> Vec<Value> {
        self.state.lock().unwrap().pulls.clone()
    }

    /// The merge requests created so far (as updated since).
    pub fn merge_requests(&self) -> Vec<Value> {
        self.state.lock().unwrap().mrs.clone()
    }

    /// Reads or changes what the forge says about its requests (reviews,
    /// threads, checks, permissions, posted comments; see `forge_pr`).
    pub fn pr<T>(&self, f: impl FnOnce(&mut super::forge_pr::PrFixture) -> T) -> T {
        f(&mut self.state.lock().unwrap().pr)
    }

    /// Stops serving and closes the port: later requests are refused.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag and drops the listener.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for ForgeServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve(stream: TcpStream, state: &Mutex<State>, base: &str) {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let Some(req) = read_request(&mut reader) else {
        return;
    };
    let (status, body) = {
        let mut st = state.lock().unwrap();
        st.requests.push(req.clone());
        route(&req, &mut st, base)
    };
    // A log is text, not JSON.
    let (text, kind) = match body["__text"].as_str() {
        Some(t) => (t.to_owned(), "text/plain"),
        None => (body.to_string(), "application/json"),
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.flush();
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<ForgeRequest> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut raw = line.clone();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        raw.push_str(&h);
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (n, v) = h.split_once(':')?;
        headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    let body_text = String::from_utf8_lossy(&body).into_owned();
    raw.push_str(&body_text);
    Some(ForgeRequest {
        method,
        target,
        headers,
        body: serde_json::from_str(&body_text).unwrap_or(Value::Null),
        raw,
    })
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        if bytes[i] == b'%'
            && let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query<'a>(q: &'a str, key: &str) -> Option<String> {
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v): (&'a str, &'a str)| decode(v))
}

/// Sets `fields` of the request whose `key` is `n` from `body`.
fn update(list: &mut [Value], key: &str, n: &str, body: &Value, fields: &[&str]) -> (u16, Value) {
    let Some(item) = list
        .iter_mut()
        .find(|p| n.parse::<u64>().ok() == p[key].as_u64())
    else {
        return not_found();
    };
    for k in fields {
        if !body[k].is_null() {
            item[k] = body[k].clone();
        }
    }
    (200, item.clone())
}

fn not_found() -> (u16, Value) {
    (404, json!({"message": "Not Found"}))
}

fn route(req: &ForgeRequest, st: &mut State, base: &str) -> (u16, Value) {
    let (path, q) = req.target.split_once('?').unwrap_or((&req.target, ""));
    let page: u64 = query(q, "page").and_then(|p| p.parse().ok()).unwrap_or(1);
    let segs: Vec<String> = path.split('/').skip(1).map(decode).collect();
    let mut segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    // `GL` stands for the one GitLab project, `/api/v4/projects/grp%2Fsub%2Fproj`.
    if segs.starts_with(&["api", "v4", "projects", "grp/sub/proj"]) {
        segs.splice(..4, ["GL"]);
    }
    // Every list fits on its first page.
    if page > 1 {
        return (200, json!([]));
    }
    let m = req.method.as_str();
    let State { pr, pulls, mrs, .. } = st;
    if let Some(answer) = super::forge_pr::route(m, &segs, &req.body, pr, pulls, mrs, base) {
        return answer;
    }
    match (m, segs.as_slice()) {
        // ---- GitHub ----
        ("GET", ["repos", "o", "r"]) => {
            (200, json!({"full_name": "o/r", "default_branch": "main"}))
        }
        ("GET", ["repos", "o", "r", "issues", "7"]) => (
            200,
            json!({
                "number": 7, "title": GH_ISSUE_TITLE, "body": GH_ISSUE_BODY, "state": "open",
                "html_url": "https://github.com/o/r/issues/7", "user": {"login": "alice"},
                "labels": [{"name": "bug"}, {"name": "orch"}],
            }),
        ),
        ("GET", ["repos", "o", "r", "issues", "66"]) => (
            200,
            json!({
                "number": 66, "title": GH_HOSTILE_TITLE, "body": "It \u{1b}[31mstill\u{1b}[0m subtracts.",
                "state": "open", "html_url": "https://github.com/o/r/issues/66",
                "user": {"login": "mallory"}, "labels": [],
            }),
        ),
        ("GET", ["repos", "o", "r", "issues", "66", "comments"]) => (200, json!([])),
        ("GET", ["repos", "o", "r", "issues", "7", "comments"]) => (
            200,
            json!([{ "user": {"login": "bob"}, "body": GH_COMMENT, "created_at": "2026-01-02T03:04:05Z" }]),
        ),
        ("GET", ["repos", "o", "r", "pulls"]) => {
            let head = query(q, "head").unwrap_or_default();
            let open: Vec<Value> = st
                .pulls
                .iter()
                .filter(|p| format!("o:{}", p["head"]["ref"].as_str().unwrap_or("")) == head)
                .cloned()
                .collect();
            (200, Value::Array(open))
        }
        ("POST", ["repos", "o", "r", "pulls"]) => {
            let n = st.pulls.len() as u64 + 1;
            let b = &req.body;
            let pr = json!({
                "number": n, "html_url": format!("{base}/o/r/pull/{n}"), "state": "open",
                "title": b["title"], "body": b["body"], "draft": b["draft"],
                "head": {"ref": b["head"]}, "base": {"ref": b["base"]},
            });
            st.pulls.push(pr.clone());
            (201, pr)
        }
        ("PATCH", ["repos", "o", "r", "pulls", n]) => {
            update(&mut st.pulls, "number", n, &req.body, &["title", "body"])
        }
        // ---- GitLab ----
        ("GET", ["GL"]) => (
            200,
            json!({"path_with_namespace": "grp/sub/proj", "default_branch": "main"}),
        ),
        ("GET", ["GL", "issues", "3"]) => (
            200,
            json!({
                "iid": 3, "title": GL_ISSUE_TITLE, "description": "Same bug: add(2, 3) is -1.",
                "state": "opened", "web_url": "https://gitlab.example.com/grp/sub/proj/-/issues/3",
                "author": {"username": "carol"}, "labels": ["bug"],
            }),
        ),
        ("GET", ["GL", "issues", "3", "notes"]) => (
            200,
            json!([
                {"author": {"username": "gitlab-bot"}, "body": "added ~bug label", "system": true, "created_at": "2026-01-01T00:00:00Z"},
                {"author": {"username": "dave"}, "body": GL_NOTE, "system": false, "created_at": "2026-01-02T00:00:00Z"},
            ]),
        ),
        ("GET", ["GL", "merge_requests"]) => {
            let source = query(q, "source_branch").unwrap_or_default();
            let open: Vec<Value> = st
                .mrs
                .iter()
                .filter(|mr| mr["source_branch"] == json!(source))
                .cloned()
                .collect();
            (200, Value::Array(open))
        }
        ("POST", ["GL", "merge_requests"]) => {
            let iid = st.mrs.len() as u64 + 1;
            let b = &req.body;
            let title = b["title"].as_str().unwrap_or("");
            let mr = json!({
                "iid": iid, "web_url": format!("{base}/grp/sub/proj/-/merge_requests/{iid}"),
                "title": title, "description": b["description"], "draft": title.starts_with("Draft: "),
                "source_branch": b["source_branch"], "target_branch": b["target_branch"], "state": "opened",
            });
            st.mrs.push(mr.clone());
            (201, mr)
        }
        ("PUT", ["GL", "merge_requests", iid]) => update(
            &mut st.mrs,
            "iid",
            iid,
            &req.body,
            &["title", "description"],
        ),
        _ => not_found(),
    }
}
