//! `orch ui` (issue 33, points 2–3): the local web page of a repository's
//! runs, driven in headless Chromium over WebDriver (chromedriver; `.ci/run`
//! installs Debian's `chromium` and `chromium-driver`). Where no browser
//! is installed the browser tests print why they skip; the HTTP checks
//! (token, Host, path ids, POST rules) run everywhere.

mod driver;

use crate::support::{
    AWAIT_LIMIT, FakeServer, OrchRun, Reply, Script, TestRepo, fix_add, only_run_id, orch,
    write_issue, write_pipeline,
};
use driver::{Browser, http};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What the model writes into a summary to attack the page.
const HOSTILE: &str = "Fixed add(). <script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">";

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

/// What the selecting reviewer gives as its reason: markup the page must
/// show as text.
const HOSTILE_REASON: &str = "three <b>reads</b> best <script>document.title='pwned'</script>";

#[test]
fn ui_shows_best_of_n_replicas_their_diffs_and_the_selection_escaped() {
    use crate::best_of_n;
    // The reviewer strategy of tests/it/best_of_n.rs: three replicas write
    // `wrong one`, `right`, `wrong two`; the reviewer chooses #3.
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = best_of_n::pipeline(tmp.path(), "      strategy: reviewer");
    let server = FakeServer::start(
        best_of_n::script(false)
            .agent(
                "code",
                vec![Reply::tool_call(
                    "f",
                    "finish",
                    json!({"summary": HOSTILE_REASON, "choice": 3}),
                )],
            )
            .agent("after", best_of_n::after()),
    );
    let out = best_of_n::run(&repo, &p, &server);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = best_of_n::run_id(&out);
    let ui = UiServer::start(&repo.path);
    let a = ui.addr.as_str();
    let cookie = format!("orch_ui={}", ui.token);
    let get = |path: &str| {
        let (s, _, body) = http(a, "GET", path, &[("Cookie", &cookie)], "");
        (s, body)
    };

    // The run page: every replica, linked with `#` encoded, labelled as a
    // replica of `code`; the selection says what it chose; #3 is marked.
    let (s, page) = get(&format!("/run/{run}"));
    assert_eq!(s, 200, "{page}");
    for k in 1..=3 {
        let href = format!("href=\"/run/{run}/stage/code%23{k}\"");
        assert!(page.contains(&href), "a link {href}: {page}");
        assert!(page.contains(&format!("code #{k} of 3")), "{page}");
        assert!(page.contains(&format!("data-stage=\"code#{k}\"")), "{page}");
    }
    assert!(
        !page.contains("/stage/code#"),
        "a raw `#` in a link: {page}"
    );
    assert!(page.contains("class=\"replica-group\""), "{page}");
    assert!(page.contains("selected 3 of 3 (reviewer)"), "{page}");
    assert!(
        page.contains("class=\"node st-succeeded replica chosen\" id=\"node-code#3\""),
        "#3 is marked chosen: {page}"
    );
    assert!(
        page.contains("class=\"node st-succeeded replica\" id=\"node-code#1\""),
        "{page}"
    );

    // A replica's page is its own: its diff, its place among the replicas.
    let (s, third) = get(&format!("/run/{run}/stage/code%233"));
    assert_eq!(s, 200, "{third}");
    assert!(third.contains("<h1>Stage <code>code#3</code>"), "{third}");
    assert!(third.contains("answer.txt"), "{third}");
    assert!(third.contains("wrong two"), "replica 3's diff: {third}");
    assert!(!third.contains("wrong one"), "{third}");
    assert!(third.contains("replica #3 of 3 of stage"), "{third}");
    assert!(third.contains(">chosen</b>"), "{third}");
    let (s, first) = get(&format!("/run/{run}/stage/code%231"));
    assert_eq!(s, 200, "{first}");
    assert!(
        first.contains("wrong one") && !first.contains("wrong two"),
        "{first}"
    );
    assert!(first.contains("not chosen (#3 was)"), "{first}");

    // The selecting stage's page: the choice, every candidate, the reason
    // as text.
    let (s, code) = get(&format!("/run/{run}/stage/code"));
    assert_eq!(s, 200, "{code}");
    assert!(code.contains("id=\"selection\""), "{code}");
    assert!(code.contains("#3 of 3</b> (reviewer)"), "{code}");
    for k in 1..=3 {
        assert!(
            code.contains(&format!(
                "href=\"/run/{run}/stage/code%23{k}\">#{k} code#{k}</a>"
            )),
            "candidate {k}: {code}"
        );
    }
    assert!(
        code.contains(
            "three &lt;b&gt;reads&lt;/b&gt; best &lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;"
        ),
        "the reason escaped: {code}"
    );
    assert!(
        !code.contains("<b>reads</b>") && !code.contains("<script>document"),
        "{code}"
    );

    // Only the ids the pipeline allows: no other `#` form, no raw `#`
    // (which the browser never sends) reaching another page.
    for bad in [
        "code%230",
        "code%239",
        "code%23x",
        "code%2301",
        "code%23",
        "%231",
        "code%233%231",
    ] {
        let (s, body) = get(&format!("/run/{run}/stage/{bad}"));
        assert_eq!(s, 404, "{bad}: {body}");
    }
    let (s, _) = get(&format!("/run/{run}/stage/code%2"));
    assert_eq!(s, 404, "a malformed escape");
    // An action's stage segment is decoded too: guidance to `code%231`
    // reaches replica `code#1` (refused only because the run has ended).
    let (s, _, body) = http(
        a,
        "POST",
        &format!("/run/{run}/stage/code%231/guide"),
        &[("X-Orch-Token", &ui.token)],
        r#"{"text":"look again"}"#,
    );
    assert_eq!(s, 409, "{body}");
    assert!(body.contains("code#1"), "{body}");

    // In a browser: clicking replica #3's box opens its page (the browser
    // sends `%23`, not a fragment), and the chosen box is framed green.
    let Some(b) = Browser::start() else { return };
    b.goto(&ui.url);
    b.goto(&ui.page(&format!("/run/{run}")));
    b.wait_for("the run page", |b| !b.find_all("svg#dag g.node").is_empty());
    let chosen = b.find("svg#dag g.node.chosen");
    assert_eq!(b.attr(&chosen, "data-stage"), "code#3");
    assert_eq!(
        b.css(&b.find("svg#dag g.node.chosen rect"), "stroke-width"),
        "3px"
    );
    assert_eq!(b.find_all("svg#dag rect.replica-group").len(), 1);
    b.screenshot(&shot_dir().join("best-of-n.png"));
    b.click(&chosen);
    b.wait_for("replica 3's page", |b| !b.find_all("#replica").is_empty());
    assert!(b.text(&b.find("h1")).contains("code#3"));
    let diff = b.text(&b.find("#diff"));
    assert!(
        diff.contains("wrong two") && !diff.contains("wrong one"),
        "{diff}"
    );
    b.click(&b.find("#replica a"));
    b.wait_for("the selection", |b| !b.find_all("#selection").is_empty());
    let reason = b.text(&b.find("#selection-reason"));
    assert_eq!(reason, HOSTILE_REASON);
    assert!(
        b.find_all("#selection-reason b, #selection-reason script")
            .is_empty()
    );
    assert_ne!(b.title(), "pwned");
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
    // Each stage waits in a `bash` call until the test creates its gate
    // file (the fake server's own hold is one rendezvous per server, and
    // this test needs two: the run must still be live after `code` ends).
    let gates = tempfile::tempdir_in(&repo.path).unwrap();
    let wait = |gate: &str| {
        let path = gates.path().join(gate);
        Reply::tool_call(
            gate,
            "bash",
            json!({
                "command": format!("for i in $(seq 1 2400); do [ -e '{}' ] && exit 0; sleep 0.05; done; exit 1", path.display()),
                "timeout_secs": 150,
            }),
        )
    };
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    fix_add("e"),
                    wait("go1"),
                    Reply::finish("f", "add() adds.", None),
                ],
            )
            .agent(
                "review",
                vec![wait("go2"), Reply::finish("r", "ok", Some("approve"))],
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
    // The second request answered with the waiting `bash` call.
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

    std::fs::write(gates.path().join("go1"), "").unwrap();
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

    std::fs::write(gates.path().join("go2"), "").unwrap();
    let status = run.0.take().unwrap().wait().unwrap();
    assert_eq!(status.code(), Some(0));
    // The page learns the run ended and shows it.
    b.wait_for("the run shows succeeded", |b| {
        b.find_all("#node-review")
            .first()
            .is_some_and(|n| b.attr(n, "data-status") == "succeeded")
    });
}

#[test]
fn ui_in_a_browser_sends_guidance_and_approves_an_ask_and_the_command_runs() {
    let Some(b) = Browser::start() else { return };
    let repo = TestRepo::new();
    repo.write("calc.py", "def add(a, b):\n    return a - b\n");
    // The coder's bash policy asks before `touch`.
    repo.write(
        ".orch/roles/coder.md",
        "---\nname: coder\ndescription: Writes code; asks before touch.\ntools: [bash, read_file, write_file, edit_file, finish]\nbash: {ask: [\"touch *\"]}\n---\nYou write code.\n",
    );
    repo.commit_all("base");
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        tmp.path(),
        "p",
        "name: p\nstages:\n  code:\n    role: coder\n",
    );
    let issue = write_issue(tmp.path(), "# mark it\n");
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call("c1", "bash", json!({"command": "touch approved.txt"})),
            Reply::finish("c2", "Marked.", None),
        ],
    ));
    // Without a terminal the ask waits for a control answer (`orch answer`
    // or this page) instead of being denied at once.
    let mut run = Background(Some(
        OrchRun::new(&pipeline, &repo)
            .issue(&issue)
            .model(&server.base_url, "m")
            .args(["--ask-via", "control"])
            .command()
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    wait_for_requests(&server, "code", 1);
    let run_id = only_run_id(&repo.path);
    let ui = UiServer::start(&repo.path);
    b.goto(&ui.url);
    b.goto(&ui.page(&format!("/run/{run_id}")));
    // The page learns of the ask by itself (its event stream) and shows it.
    b.wait_for("the ask is shown with its buttons", |b| {
        !b.find_all("li.ask button.allow").is_empty()
    });
    let ask = b.text(&b.find("li.ask"));
    assert!(
        ask.contains("touch approved.txt") && ask.contains("code"),
        "{ask}"
    );
    // While the stage waits, a note for its next turn.
    b.type_into(
        &b.find("form.guide input[name=text]"),
        "Keep the marker file empty.",
    );
    b.click(&b.find("form.guide button"));
    b.wait_for("the guidance is confirmed", |b| {
        b.text_of("#action-result")
            .is_some_and(|t| t.contains("guidance sent to stage `code`"))
    });
    b.click(&b.find("li.ask button.allow"));
    b.wait_for("the answer is confirmed", |b| {
        b.text_of("#action-result")
            .is_some_and(|t| t.contains("allowed"))
    });
    let status = run.0.take().unwrap().wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let show = repo.git(&[
        "show",
        "--stat",
        "--format=",
        &format!("orch/{run_id}/code"),
    ]);
    assert!(
        show.contains("approved.txt"),
        "the approved command ran: {show}"
    );
    let answer = std::fs::read_to_string(
        repo.path
            .join(".git/orch/runs")
            .join(&run_id)
            .join("control/asks/1.answer.json"),
    )
    .unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["allow"], json!(true));
    assert_eq!(answer["by"], json!("ui"));
    // The next model turn received the note as a user message.
    let second = &server.requests_for("code")[1];
    let said = serde_json::to_string(second.messages()).unwrap();
    assert!(said.contains("Keep the marker file empty."), "{said}");
}
