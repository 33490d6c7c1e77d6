//! `orch ui` (issue 33, points 2–3): the local web page of a repository's
//! runs, driven in headless Chromium over WebDriver (chromedriver; `.ci/run`
//! installs Debian's `chromium` and `chromium-driver`). Where no browser
//! is installed the browser tests print why they skip; the HTTP checks
//! (token, Host, path ids, POST rules) run everywhere.

use crate::support::{
    AWAIT_LIMIT, FakeServer, OrchRun, Reply, Script, TestRepo, fix_add, only_run_id, orch,
    write_issue, write_pipeline,
};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What the model writes into a summary to attack the page.
const HOSTILE: &str = "Fixed add(). <script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">";

// ---------------------------------------------------------------- HTTP

/// One HTTP/1.1 request over a fresh connection; the status, the headers
/// (lowercased names) and the body.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(AWAIT_LIMIT)).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    // Read the head, then `Content-Length` bytes (chromedriver keeps the
    // connection open whatever `Connection: close` says).
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut buf).unwrap_or(0);
        if n == 0 {
            break raw.len();
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    let mut body = raw.get(head_end + 4..).unwrap_or_default().to_vec();
    match length {
        Some(len) => {
            while body.len() < len {
                let n = s.read(&mut buf).unwrap_or(0);
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&buf[..n]);
            }
        }
        None => {
            let _ = s.read_to_end(&mut body);
        }
    }
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head, String::from_utf8_lossy(&body).into_owned())
}

/// `orch ui` on a repository, killed when dropped.
struct UiServer {
    child: Child,
    /// `http://127.0.0.1:<port>/?token=<token>`
    url: String,
    addr: String,
    token: String,
}

impl UiServer {
    fn start(repo: &Path) -> UiServer {
        let mut child = orch()
            .args(["ui", "--repo"])
            .arg(repo)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line.trim().to_owned();
        assert!(
            url.starts_with("http://127.0.0.1:"),
            "orch ui printed {line:?}"
        );
        let addr = url["http://".len()..].split('/').next().unwrap().to_owned();
        let token = url.split("token=").nth(1).unwrap().to_owned();
        assert_eq!(token.len(), 32, "{url}");
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{url}");
        UiServer {
            child,
            url,
            addr,
            token,
        }
    }

    fn page(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for UiServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ----------------------------------------------------------- WebDriver

/// A tiny W3C WebDriver client (HTTP/1.1 JSON over a socket to
/// chromedriver): new session, navigate, find, click, text, CSS value,
/// title, execute, screenshot.
struct Browser {
    driver: Child,
    addr: String,
    session: String,
}

impl Browser {
    /// Headless Chromium, or `None` (with the reason printed) when this
    /// machine has none.
    fn start() -> Option<Browser> {
        let (Some(chromium), Some(driver)) = (
            which(&["chromium", "chromium-browser", "google-chrome"]),
            which(&["chromedriver"]),
        ) else {
            eprintln!(
                "SKIPPED: no chromium/chromedriver on PATH (`.ci/run` installs Debian's chromium and chromium-driver)"
            );
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr = format!("127.0.0.1:{port}");
        let started = Instant::now();
        while TcpStream::connect(&addr).is_err() {
            assert!(
                started.elapsed() < AWAIT_LIMIT,
                "chromedriver never listened on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut b = Browser {
            driver: child,
            addr,
            session: String::new(),
        };
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900", "--no-first-run"],
        }}}});
        let v = b.call("POST", "/session", &caps);
        b.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_owned();
        Some(b)
    }

    fn call(&self, method: &str, path: &str, body: &Value) -> Value {
        let body = if method == "GET" {
            String::new()
        } else {
            body.to_string()
        };
        let (status, _, text) = http(
            &self.addr,
            method,
            path,
            &[("Content-Type", "application/json")],
            &body,
        );
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert!(status == 200, "webdriver {method} {path}: {status} {text}");
        v["value"].clone()
    }

    fn s(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    fn goto(&self, url: &str) {
        self.call("POST", &self.s("/url"), &json!({"url": url}));
    }

    fn find_all(&self, css: &str) -> Vec<String> {
        let v = self.call(
            "POST",
            &self.s("/elements"),
            &json!({"using": "css selector", "value": css}),
        );
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| {
                e.as_object()
                    .unwrap()
                    .values()
                    .next()
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    fn find(&self, css: &str) -> String {
        let all = self.find_all(css);
        assert!(
            !all.is_empty(),
            "no element `{css}` on the page: {}",
            self.source_head()
        );
        all[0].clone()
    }

    fn text(&self, el: &str) -> String {
        self.call("GET", &self.s(&format!("/element/{el}/text")), &Value::Null)
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    fn attr(&self, el: &str, name: &str) -> String {
        self.call(
            "GET",
            &self.s(&format!("/element/{el}/attribute/{name}")),
            &Value::Null,
        )
        .as_str()
        .unwrap_or("")
        .to_owned()
    }

    fn css(&self, el: &str, prop: &str) -> String {
        self.call(
            "GET",
            &self.s(&format!("/element/{el}/css/{prop}")),
            &Value::Null,
        )
        .as_str()
        .unwrap_or("")
        .to_owned()
    }

    fn click(&self, el: &str) {
        self.call("POST", &self.s(&format!("/element/{el}/click")), &json!({}));
    }

    fn title(&self) -> String {
        self.call("GET", &self.s("/title"), &Value::Null)
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    fn execute(&self, script: &str) -> Value {
        self.call(
            "POST",
            &self.s("/execute/sync"),
            &json!({"script": script, "args": []}),
        )
    }

    fn source_head(&self) -> String {
        let v = self.call("GET", &self.s("/source"), &Value::Null);
        v.as_str().unwrap_or("").chars().take(2000).collect()
    }

    /// A PNG of the page, decoded from WebDriver's base64.
    fn screenshot(&self, path: &Path) {
        let v = self.call("GET", &self.s("/screenshot"), &Value::Null);
        std::fs::write(path, base64_decode(v.as_str().unwrap())).unwrap();
    }

    /// Polls `cond` (bounded by [`AWAIT_LIMIT`]) until it holds.
    fn wait_for(&self, what: &str, cond: impl Fn(&Browser) -> bool) {
        let started = Instant::now();
        while !cond(self) {
            assert!(
                started.elapsed() < AWAIT_LIMIT,
                "never happened: {what}\n{}",
                self.source_head()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = http(
                &self.addr,
                "DELETE",
                &format!("/session/{}", self.session),
                &[],
                "",
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn which(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|n| {
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|p| p.is_file())
    })
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let bytes: Vec<u8> = s
        .bytes()
        .filter(|c| !matches!(c, b'=' | b'\n' | b'\r'))
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= u32::from(val(*c)) << (18 - 6 * i);
        }
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

/// Where screenshots go: `docs/ui/` when `ORCH_UI_SCREENSHOTS` is set
/// (to refresh the docs), else a temp dir.
fn shot_dir() -> PathBuf {
    if std::env::var_os("ORCH_UI_SCREENSHOTS").is_some() {
        let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ui");
        std::fs::create_dir_all(&d).unwrap();
        d
    } else {
        tempfile::tempdir().unwrap().keep()
    }
}

// ------------------------------------------------------------- runs

const TWO_STAGES: &str = "name: p\nstages:\n  code:\n    role: coder\n  review:\n    role: reviewer\n    needs: [code]\n";

/// A finished two-stage run (code → review) whose coder's summary holds
/// [`HOSTILE`].
fn finished_run() -> (TestRepo, String) {
    let repo = TestRepo::new();
    repo.write("calc.py", "def add(a, b):\n    # adds\n    return a - b\n");
    repo.commit_all("base");
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(tmp.path(), "p", TWO_STAGES);
    let issue = write_issue(tmp.path(), "# add subtracts\n");
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    fix_add("e").with_usage(120, 30),
                    Reply::finish("f", HOSTILE, None).with_usage(150, 20),
                ],
            )
            .agent(
                "review",
                vec![
                    Reply::finish("r", "Looks right: `a + b`.", Some("approve")).with_usage(90, 10),
                ],
            ),
    );
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .output();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = only_run_id(&repo.path);
    (repo, id)
}

#[test]
fn ui_refuses_requests_without_the_token_a_foreign_host_and_bad_ids() {
    let (repo, run) = finished_run();
    let ui = UiServer::start(&repo.path);
    let a = ui.addr.as_str();
    let tok = format!("/?token={}", ui.token);

    let (s, _, body) = http(a, "GET", "/", &[], "");
    assert_eq!(s, 403, "no token: {body}");
    let (s, _, _) = http(
        a,
        "GET",
        "/?token=00000000000000000000000000000000",
        &[],
        "",
    );
    assert_eq!(s, 403, "a wrong token");
    let (s, _, _) = http(a, "GET", &format!("/run/{run}"), &[], "");
    assert_eq!(s, 403, "a run page without the token");
    let (s, _, _) = http(a, "GET", "/assets/app.js", &[], "");
    assert_eq!(s, 403, "an asset without the token");

    let (s, head, body) = http(a, "GET", &tok, &[], "");
    assert_eq!(s, 200, "{body}");
    assert!(body.contains(&run), "the runs page lists the run: {body}");
    assert!(head.contains("set-cookie: orch_ui="), "{head}");
    assert!(
        head.contains("httponly") && head.contains("samesite=strict"),
        "{head}"
    );
    assert!(!head.contains("access-control-"), "no CORS header: {head}");
    assert!(
        head.contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{head}"
    );
    let cookie = format!("orch_ui={}", ui.token);
    let (s, _, _) = http(a, "GET", &format!("/run/{run}"), &[("Cookie", &cookie)], "");
    assert_eq!(s, 200, "the cookie carries the token");

    // DNS rebinding: a page of another name resolving to 127.0.0.1.
    let (s, _, _) = http(a, "GET", &tok, &[("Host", "evil.example:80")], "");
    assert_eq!(s, 403, "a foreign Host");

    // Ids from the URL never reach the file system unchecked.
    for path in [
        "/run/..".to_owned(),
        "/run/..%2F..%2F..%2Fetc%2Fpasswd".to_owned(),
        "/run/%2e%2e/stage/x".to_owned(),
        format!("/run/{run}/stage/..%2F..%2Fstate.json"),
        format!("/run/{run}/stage/..%2Fcode"),
        format!("/run/{run}/stage/nope"),
        "/run/20990101-000000-000-0000000000000000".to_owned(),
        "/../../etc/passwd".to_owned(),
        "/assets/../../Cargo.toml".to_owned(),
    ] {
        let (s, _, body) = http(a, "GET", &path, &[("Cookie", &cookie)], "");
        assert_eq!(s, 404, "{path}: {body}");
        assert!(!body.contains("root:"), "{path}");
    }

    // A POST needs the token in its header (a cookie is not enough: no
    // other page can make the browser act), and a same-origin Origin.
    let rollback = format!("/run/{run}/rollback");
    let stage = r#"{"stage":"code"}"#;
    let (s, _, _) = http(a, "POST", &rollback, &[("Cookie", &cookie)], stage);
    assert_eq!(s, 403, "POST with the cookie only");
    let (s, _, _) = http(
        a,
        "POST",
        &rollback,
        &[
            ("X-Orch-Token", &ui.token),
            ("Origin", "http://evil.example"),
        ],
        stage,
    );
    assert_eq!(s, 403, "POST from another origin");
    let (s, _, _) = http(a, "GET", &format!("{rollback}?token={}", ui.token), &[], "");
    assert_eq!(s, 404, "actions are POST only");
    let branch = format!("orch/{run}/pr");
    let before = repo.git(&["rev-parse", &branch]);
    let (s, _, body) = http(
        a,
        "POST",
        &rollback,
        &[
            ("X-Orch-Token", &ui.token),
            ("Origin", &format!("http://{a}")),
        ],
        stage,
    );
    assert_eq!(s, 200, "{body}");
    let code_commit = repo.git(&["rev-parse", &format!("orch/{run}/code")]);
    assert_eq!(
        repo.git(&["rev-parse", &branch]),
        code_commit,
        "rolled back like `orch rollback`"
    );
    assert_ne!(before, code_commit);
    let (_, _, run_page) = http(a, "GET", &format!("/run/{run}"), &[("Cookie", &cookie)], "");
    assert!(
        run_page.contains("data-status=\"rolled_back\""),
        "the review is rolled back"
    );
}

#[test]
fn ui_listens_on_loopback_only() {
    let repo = TestRepo::new();
    repo.commit_all("base");
    let ui = UiServer::start(&repo.path);
    let port = ui.addr.rsplit(':').next().unwrap();
    // Every address of this machine but loopback: nothing listens there.
    let out = Command::new("hostname").arg("-I").output();
    let ips: Vec<String> = out
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    for ip in ips
        .iter()
        .filter(|ip| !ip.starts_with("127.") && !ip.contains(':'))
    {
        assert!(
            TcpStream::connect(format!("{ip}:{port}")).is_err(),
            "orch ui answers on {ip}"
        );
    }
    let (s, _, _) = http(&ui.addr, "GET", &format!("/?token={}", ui.token), &[], "");
    assert_eq!(s, 200);
}

#[test]
fn ui_in_a_browser_shows_every_stage_a_diff_and_a_model_script_as_text() {
    let (repo, run) = finished_run();
    let Some(b) = Browser::start() else { return };
    let ui = UiServer::start(&repo.path);
    let shots = shot_dir();

    b.goto(&ui.url);
    let link = b.find("a.run-link");
    assert_eq!(b.text(&link), run);
    b.click(&link);
    b.wait_for("the run page", |b| !b.find_all("svg#dag g.node").is_empty());
    let nodes = b.find_all("svg#dag g.node");
    let ids: Vec<String> = nodes.iter().map(|n| b.attr(n, "data-stage")).collect();
    assert_eq!(ids, ["code", "review"], "every stage is drawn");
    for n in &nodes {
        assert_eq!(b.attr(n, "data-status"), "succeeded");
    }
    let succeeded = b.css(&b.find("#node-code rect"), "fill");
    assert_eq!(succeeded, "rgb(74, 194, 107)", "a succeeded stage is green");
    assert_eq!(b.find_all("svg#dag path.edge").len(), 1, "code → review");
    let table = b.text(&b.find("#stages"));
    assert!(
        table.contains("code") && table.contains("review") && table.contains("approve"),
        "{table}"
    );
    b.screenshot(&shots.join("run.png"));

    b.click(&b.find("#stages a.stage-link"));
    b.wait_for("the stage page", |b| !b.find_all("#diff").is_empty());
    let diff = b.text(&b.find("#diff"));
    assert!(diff.contains("calc.py"), "{diff}");
    assert!(
        diff.contains("+    return a + b") && diff.contains("-    return a - b"),
        "{diff}"
    );
    assert!(
        !b.find_all("#diff .l.add .kw").is_empty(),
        "the diff is highlighted"
    );

    // The model's markup is shown as the text it is, and none of it ran.
    let summary = b.text(&b.find("#summary"));
    assert!(
        summary.contains("<script>document.title='pwned'</script>"),
        "{summary}"
    );
    assert!(summary.contains("<img src=x onerror="), "{summary}");
    assert!(
        b.find_all("#summary script, #summary img").is_empty(),
        "no element from the model"
    );
    assert_ne!(b.title(), "pwned");
    assert!(b.title().starts_with("code · run"), "{}", b.title());
    let timeline = b.text(&b.find("#timeline"));
    assert!(
        timeline.contains("edit_file") && timeline.contains("turn 1"),
        "{timeline}"
    );
    b.screenshot(&shots.join("stage.png"));
}

/// Sends one chat request as agent `gate`: its `await_peers` reply meets
/// a held request of the run, so both go on.
fn open_gate(base_url: &str) {
    let addr = base_url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap();
    let body = r#"{"model":"m","messages":[{"role":"user","content":"go"}]}"#;
    let (s, _, text) = http(
        addr,
        "POST",
        "/v1/chat/completions",
        &[
            ("X-Orch-Agent", "gate"),
            ("Content-Type", "application/json"),
        ],
        body,
    );
    assert_eq!(s, 200, "{text}");
}

fn wait_for_requests(server: &FakeServer, agent: &str, n: usize) {
    let started = Instant::now();
    while server.requests_for(agent).len() < n {
        assert!(
            started.elapsed() < AWAIT_LIMIT,
            "the run never sent request {n} of `{agent}`"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The background run, killed if the test fails before it ends.
struct Background(Option<Child>);

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn ui_in_a_browser_recolours_a_live_stage_without_a_reload() {
    let Some(b) = Browser::start() else { return };
    let repo = TestRepo::new();
    repo.write("calc.py", "def add(a, b):\n    return a - b\n");
    repo.commit_all("base");
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(tmp.path(), "p", TWO_STAGES);
    let issue = write_issue(tmp.path(), "# add subtracts\n");
    // Each stage's last request is held until the test opens a gate.
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    fix_add("e"),
                    Reply::finish("f", "add() adds.", None).await_peers(2, AWAIT_LIMIT * 3),
                ],
            )
            .agent(
                "review",
                vec![Reply::finish("r", "ok", Some("approve")).await_peers(2, AWAIT_LIMIT * 3)],
            )
            .agent(
                "gate",
                vec![
                    Reply::text("go").await_peers(2, AWAIT_LIMIT * 3),
                    Reply::text("go").await_peers(2, AWAIT_LIMIT * 3),
                ],
            ),
    );
    let mut run = Background(Some(
        OrchRun::new(&pipeline, &repo)
            .issue(&issue)
            .model(&server.base_url, "m")
            .command()
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    wait_for_requests(&server, "code", 2);
    let run_id = only_run_id(&repo.path);
    let ui = UiServer::start(&repo.path);
    b.goto(&ui.url);
    b.goto(&ui.page(&format!("/run/{run_id}")));
    let node = b.find("#node-code");
    assert_eq!(b.attr(&node, "data-status"), "running");
    let running = b.css(&b.find("#node-code rect"), "fill");
    assert_eq!(running, "rgb(84, 174, 255)", "a running stage is blue");
    assert_eq!(b.attr(&b.find("#node-review"), "data-status"), "pending");
    // A mark in the page's memory: a reload would lose it.
    b.execute("window.orchMark = 7;");

    open_gate(&server.base_url);
    wait_for_requests(&server, "review", 1);
    b.wait_for("the code stage turns succeeded on the open page", |b| {
        b.attr(&b.find("#node-code"), "data-status") == "succeeded"
    });
    let done = b.css(&b.find("#node-code rect"), "fill");
    assert_ne!(done, running, "the stage changed colour");
    assert_eq!(done, "rgb(74, 194, 107)");
    b.wait_for("the review stage turns running", |b| {
        b.attr(&b.find("#node-review"), "data-status") == "running"
    });
    assert_eq!(
        b.execute("return window.orchMark;"),
        json!(7),
        "updated live, not reloaded"
    );

    open_gate(&server.base_url);
    let status = run.0.take().unwrap().wait().unwrap();
    assert_eq!(status.code(), Some(0));
    // The page learns the run ended and shows it.
    b.wait_for("the run shows succeeded", |b| {
        b.find_all("#node-review")
            .first()
            .is_some_and(|n| b.attr(n, "data-status") == "succeeded")
    });
}
