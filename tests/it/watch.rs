//! Following a live run (issue 33.1): while `orch run` is in the middle of
//! a stage (its second model request held by the fake server until the
//! test opens a gate), `orch log --follow` and `orch watch` (piped) have
//! already printed the stage's first turn, `orch show` counts the running
//! stage's turns, tokens and cost from its live log; once the gate opens,
//! the next stage's log (which did not exist when they started) is
//! followed too, and when the run ends both followers exit with the run's
//! exit code — 0 for a run that succeeded, 1 and 3 for runs that failed.

use crate::support::{
    AWAIT_LIMIT, FakeServer, OrchRun, Reply, Script, TestRepo, fix_add, only_run_id, orch,
    run_text, write_issue, write_pipeline,
};
use std::io::{BufRead, Read, Write};
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;

/// Sends one chat request as agent `gate`: its `await_peers` reply meets
/// the run's held request, so both go on.
fn open_gate(base_url: &str) {
    let addr = base_url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let body = r#"{"model":"m","messages":[{"role":"user","content":"go"}]}"#;
    let Ok(mut s) = std::net::TcpStream::connect(&addr) else {
        return;
    };
    let _ = s.set_read_timeout(Some(AWAIT_LIMIT));
    let _ = write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nX-Orch-Agent: gate\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
}

/// Waits (bounded) until `agent` has sent `n` requests to `server`.
fn wait_for_requests(server: &FakeServer, agent: &str, n: usize) {
    let started = Instant::now();
    while server.requests_for(agent).len() < n {
        assert!(
            started.elapsed() < AWAIT_LIMIT,
            "the run never sent request {n} of `{agent}`"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A child process whose stdout is read line by line as it comes; killed
/// (and the gate opened, so the fake server lets its held request go) if
/// the test fails first.
struct Follower {
    child: Option<Child>,
    lines: Receiver<String>,
    seen: Vec<String>,
    gate: String,
}

impl Follower {
    fn spawn(mut cmd: std::process::Command, gate: &str) -> Follower {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Follower {
            child: Some(child),
            lines: rx,
            seen: Vec::new(),
            gate: gate.to_owned(),
        }
    }

    /// Reads lines (each within [`AWAIT_LIMIT`]) until one satisfies
    /// `wanted`; fails naming `what` and every line seen.
    fn expect(&mut self, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            let left = AWAIT_LIMIT.saturating_sub(started.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if wanted(&line) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "no line with {what} within {AWAIT_LIMIT:?}: {:#?}",
                        self.seen
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the output ended without {what}: {:#?}", self.seen)
                }
            }
        }
    }

    /// Waits (bounded) for the process to exit; its exit code, the rest of
    /// its stdout and its stderr.
    fn finish(&mut self) -> (Option<i32>, Vec<String>, String) {
        let mut child = self.child.take().unwrap();
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(
                started.elapsed() < AWAIT_LIMIT,
                "the follower did not exit after the run ended: {:#?}",
                self.seen
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut rest = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(AWAIT_LIMIT) {
            rest.push(line);
        }
        let mut err = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        (status.code(), rest, err)
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            open_gate(&self.gate);
        }
    }
}

/// A run of `code` (max 2 turns) then `review`: the first turn of `code`
/// edits calc.py and its second reply, `second`, is held until the gate
/// opens; `review` (whose log appears only then) approves in one turn.
struct LiveRun {
    repo: TestRepo,
    server: FakeServer,
    run: Follower,
    run_id: String,
    _tmp: tempfile::TempDir,
}

fn live_run(second: Reply) -> LiveRun {
    let repo = TestRepo::new();
    repo.write("calc.py", "def add(a, b):\n    return a - b\n");
    repo.commit_all("base");
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        tmp.path(),
        "p",
        "name: p\nstages:\n  code:\n    role: coder\n    max_turns: 2\n  review:\n    role: reviewer\n    needs: [code]\n",
    );
    let issue = write_issue(tmp.path(), "# add subtracts\n");
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    fix_add("e").with_usage(100_000, 20_000),
                    second.await_peers(2, AWAIT_LIMIT * 3),
                ],
            )
            .agent(
                "review",
                vec![Reply::finish("v", "It adds.", Some("approve")).with_usage(10, 5)],
            )
            .agent(
                "gate",
                vec![Reply::text("go").await_peers(2, AWAIT_LIMIT * 3)],
            ),
    );
    // gpt-4o-mini is in the built-in price table: the cost is known.
    let cmd = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "gpt-4o-mini")
        .command();
    let run = Follower::spawn(cmd, &server.base_url);
    wait_for_requests(&server, "code", 2);
    let run_id = only_run_id(&repo.path);
    LiveRun {
        repo,
        server,
        run,
        run_id,
        _tmp: tmp,
    }
}

fn follower(repo: &TestRepo, args: &[&str], gate: &str) -> Follower {
    let mut cmd = orch();
    cmd.current_dir(&repo.path).args(args);
    Follower::spawn(cmd, gate)
}

/// Runs `live`'s run to its end with followers `log --follow [stage]`
/// and `watch` started while its second turn is held; asserts both printed
/// turn 1 before the gate opened and exit with `code`, as the run does.
/// Returns what each printed after the gate opened.
fn follow_to_the_end(
    mut live: LiveRun,
    stage: Option<&str>,
    code: i32,
    last_log_line: &str,
) -> (Vec<String>, Vec<String>) {
    let gate = live.server.base_url.clone();
    let mut log_args = vec!["log", "--follow", live.run_id.as_str()];
    log_args.extend(stage);
    let mut log = follower(&live.repo, &log_args, &gate);
    // No run named: the running one.
    let mut watch = follower(&live.repo, &["watch"], &gate);

    // Turn 1 shows while turn 2 is held by the server.
    log.expect("the stage's header", |l| l == "=== code (coder)");
    log.expect("turn 1's answer", |l| {
        l.contains("← model turn 1") && l.contains("100000+20000 tokens") && l.contains("edit_file")
    });
    log.expect("turn 2's request", |l| l.contains("→ model turn 2"));
    watch.expect("the run's header", |l| {
        *l == format!("run {} (p): running", live.run_id)
    });
    // gpt-4o-mini: $0.15 and $0.60 per 1M prompt and completion tokens.
    watch.expect("turn 1's counts, cost and the held request", |l| {
        l == "code (coder): running, 1 turn, 120000 tokens, cost $0.0270, now: model turn 2"
    });
    assert!(
        live.server.requests_for("gate").is_empty(),
        "the gate is still closed"
    );

    // `orch show` counts the running stage from its live log.
    let (_, show, err) = run_text(
        orch()
            .current_dir(&live.repo.path)
            .args(["show", &live.run_id]),
    );
    let row = show
        .lines()
        .find(|l| l.starts_with("code "))
        .unwrap_or_else(|| panic!("{show}{err}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        (cols[1], cols[5], cols[6]),
        ("running", "1", "120000"),
        "{row}"
    );
    assert!(show.contains(", cost $0.0270 so far"), "{show}");

    open_gate(&gate);
    let (run_code, _, run_err) = live.run.finish();
    assert_eq!(run_code, Some(code), "the run's own exit code: {run_err}");
    let (log_code, log_rest, err) = log.finish();
    let rest = &log_rest;
    assert_eq!(log_code, Some(code), "log --follow exits as the run: {err}");
    assert!(
        rest.iter()
            .any(|l| l.contains("← model turn 2") || l.contains("turn 2: model error")),
        "turn 2 followed: {rest:#?}"
    );
    assert!(
        rest.iter().any(|l| l.contains(last_log_line)),
        "`{last_log_line}` followed: {rest:#?}"
    );
    let (watch_code, watch_rest, err) = watch.finish();
    let rest = &watch_rest;
    assert_eq!(watch_code, Some(code), "watch exits as the run: {err}");
    let end = rest.last().cloned().unwrap_or_default();
    assert!(
        end.starts_with(&format!("run {}: ", live.run_id))
            && end.ends_with(&format!("(exit {code})")),
        "{rest:#?}"
    );
    (log_rest, watch_rest)
}

#[test]
fn log_follow_and_watch_show_turns_as_they_happen_and_exit_with_the_runs_code() {
    let live = live_run(Reply::finish("f", "add() adds now.", None));
    let (log, watch) = follow_to_the_end(live, None, 0, "end: succeeded");
    // The review's log appeared after the followers started: followed too.
    let review = log
        .iter()
        .position(|l| l == "=== review (reviewer)")
        .unwrap_or_else(|| panic!("{log:#?}"));
    assert!(
        log[review..]
            .iter()
            .any(|l| l.contains("← model turn 1") && l.contains("10+5 tokens")),
        "{log:#?}"
    );
    assert!(
        watch
            .iter()
            .any(|l| l.starts_with("review (reviewer): succeeded, 1 turn, 15 tokens")),
        "{watch:#?}"
    );
}

#[test]
fn followers_of_a_failing_run_exit_with_its_code() {
    // Turn 2 is the last the stage may take and does not finish: the
    // stage fails on its turn limit (exit 1).
    let live = live_run(Reply::tool_call(
        "r",
        "read_file",
        serde_json::json!({"path": "calc.py"}),
    ));
    follow_to_the_end(live, Some("code"), 1, "end: failed");
}

#[test]
fn followers_of_a_run_the_model_failed_exit_3() {
    // The server refuses the key on turn 2: the provider failed (exit 3).
    let live = live_run(Reply::Status(
        401,
        r#"{"error":{"message":"bad key"}}"#.into(),
    ));
    follow_to_the_end(live, Some("code"), 3, "end: failed");
}
