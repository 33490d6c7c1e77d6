//! A tiny W3C WebDriver client for the `orch ui` tests and `examples/ui_bench.rs`:
//! one HTTP/1.1 request per command to chromedriver (JSON in, JSON out), and
//! a raw HTTP client the tests also use to send what a browser would not
//! (a foreign `Host`, no token).

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The bound of any one wait (a loaded 2-core machine is slow; a hang fails).
pub const AWAIT_LIMIT: Duration = Duration::from_secs(60);

/// One HTTP/1.1 request over a fresh connection; the status, the headers
/// (lowercased names) and the body.
pub fn http(
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

/// A tiny W3C WebDriver client (HTTP/1.1 JSON over a socket to
/// chromedriver): new session, navigate, find, click, text, CSS value,
/// title, execute, screenshot.
pub struct Browser {
    driver: Child,
    addr: String,
    session: String,
}

impl Browser {
    /// Headless Chromium, or `None` (with the reason printed) when this
    /// machine has none.
    pub fn start() -> Option<Browser> {
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

    pub fn goto(&self, url: &str) {
        self.call("POST", &self.s("/url"), &json!({"url": url}));
    }

    pub fn find_all(&self, css: &str) -> Vec<String> {
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

    pub fn find(&self, css: &str) -> String {
        let all = self.find_all(css);
        assert!(
            !all.is_empty(),
            "no element `{css}` on the page: {}",
            self.source_head()
        );
        all[0].clone()
    }

    pub fn text(&self, el: &str) -> String {
        self.call("GET", &self.s(&format!("/element/{el}/text")), &Value::Null)
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    pub fn attr(&self, el: &str, name: &str) -> String {
        self.call(
            "GET",
            &self.s(&format!("/element/{el}/attribute/{name}")),
            &Value::Null,
        )
        .as_str()
        .unwrap_or("")
        .to_owned()
    }

    pub fn css(&self, el: &str, prop: &str) -> String {
        self.call(
            "GET",
            &self.s(&format!("/element/{el}/css/{prop}")),
            &Value::Null,
        )
        .as_str()
        .unwrap_or("")
        .to_owned()
    }

    pub fn click(&self, el: &str) {
        self.call("POST", &self.s(&format!("/element/{el}/click")), &json!({}));
    }

    pub fn title(&self) -> String {
        self.call("GET", &self.s("/title"), &Value::Null)
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    pub fn execute(&self, script: &str) -> Value {
        self.call(
            "POST",
            &self.s("/execute/sync"),
            &json!({"script": script, "args": []}),
        )
    }

    /// The text of the first element `css` selects, read in one script
    /// (no element reference that a reload could make stale); `None` when
    /// there is none.
    pub fn text_of(&self, css: &str) -> Option<String> {
        let v = self.call(
            "POST",
            &self.s("/execute/sync"),
            &json!({"script": "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;", "args": [css]}),
        );
        v.as_str().map(str::to_owned)
    }

    /// Types `text` into element `el`.
    pub fn type_into(&self, el: &str, text: &str) {
        self.call(
            "POST",
            &self.s(&format!("/element/{el}/value")),
            &json!({ "text": text }),
        );
    }

    pub fn source_head(&self) -> String {
        let v = self.call("GET", &self.s("/source"), &Value::Null);
        v.as_str().unwrap_or("").chars().take(2000).collect()
    }

    /// A PNG of the page, decoded from WebDriver's base64.
    pub fn screenshot(&self, path: &Path) {
        let v = self.call("GET", &self.s("/screenshot"), &Value::Null);
        std::fs::write(path, base64_decode(v.as_str().unwrap())).unwrap();
    }

    /// Polls `cond` (bounded by [`AWAIT_LIMIT`]) until it holds.
    pub fn wait_for(&self, what: &str, cond: impl Fn(&Browser) -> bool) {
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
