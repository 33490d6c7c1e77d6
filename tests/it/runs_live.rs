//! A live run is left alone (issue 26.1): while `orch run` is in the middle
//! of a stage (its model request held by the fake server), every form of
//! `orch gc` keeps its worktree, lane branch and record, names it as
//! running, and the run then finishes; `resume` and `rollback` of the live
//! run are refused with a message that says it is running.

use crate::support::{
    AWAIT_LIMIT, FakeServer, OrchRun, Reply, Script, TestRepo, fix_add, only_run_id, orch,
    run_text, state_json, write_issue, write_pipeline,
};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Sends one chat request as agent `gate` to the fake server: its
/// `await_peers` reply meets the held request of the run, so both go on.
fn open_gate(base_url: &str) {
    let answer = send_gate(base_url);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

fn send_gate(base_url: &str) -> String {
    let addr = base_url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let body = r#"{"model":"m","messages":[{"role":"user","content":"go"}]}"#;
    let Ok(mut s) = std::net::TcpStream::connect(&addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(AWAIT_LIMIT));
    let _ = write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nX-Orch-Agent: gate\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
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

/// orch's worktrees (`git worktree list` but the main one).
fn lane_paths(repo: &TestRepo) -> Vec<PathBuf> {
    let main = repo.path.canonicalize().unwrap();
    repo.git(&["worktree", "list", "--porcelain"])
        .lines()
        .filter_map(|l| l.strip_prefix("worktree "))
        .map(PathBuf::from)
        .filter(|p| p.canonicalize().ok().as_ref() != Some(&main))
        .collect()
}

/// The background run, killed if the test fails before it ends (and the
/// gate opened, so the fake server lets its held request go).
struct Background(Option<std::process::Child>, String);

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
            send_gate(&self.1);
        }
    }
}

fn orch_in(repo: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    run_text(orch().current_dir(repo).args(args))
}

#[test]
fn gc_in_every_form_leaves_a_live_run_alone_and_resume_and_rollback_refuse_it() {
    let repo = TestRepo::new();
    repo.write("calc.py", "def add(a, b):\n    return a - b\n");
    repo.commit_all("base");
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        tmp.path(),
        "p",
        "name: p\nstages:\n  code:\n    role: coder\n",
    );
    let issue = write_issue(tmp.path(), "# add subtracts\n");
    // The stage edits calc.py, then its second request is held until the
    // test opens the gate: the run is live, in the middle of its stage.
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    fix_add("e").with_usage(100, 20),
                    Reply::finish("f", "add() adds now.", None).await_peers(2, AWAIT_LIMIT * 3),
                ],
            )
            .agent(
                "gate",
                vec![Reply::text("go").await_peers(2, AWAIT_LIMIT * 3)],
            ),
    );
    let mut run = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .command();
    let mut child = Background(
        Some(
            run.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        ),
        server.base_url.clone(),
    );
    wait_for_requests(&server, "code", 2);
    let run_id = only_run_id(&repo.path);
    let record = repo.path.join(".git/orch/runs").join(&run_id);
    let lanes = lane_paths(&repo);
    assert!(
        lanes
            .iter()
            .any(|l| std::fs::read_to_string(l.join("calc.py")).is_ok_and(|t| t.contains("a + b"))),
        "the live run's lane holds its edit: {lanes:?}"
    );
    let branches = |repo: &TestRepo| repo.git(&["branch", "--list", "--all"]);
    let branches_before = branches(&repo);
    let record_files = [
        "state.json",
        "issue.md",
        "plan.json",
        "stages/code/actions.jsonl",
    ];

    let repo_arg = repo.path.to_str().unwrap();
    let forms: [&[&str]; 7] = [
        &["gc"],
        &["gc", "--dry-run"],
        &["gc", "--json"],
        &["gc", "--older-than", "1s"],
        &["gc", "--older-than", "0s"],
        &["gc", "--older-than", "0s", "--include-pr"],
        &[
            "gc",
            "--older-than",
            "0s",
            "--include-pr",
            "--dry-run",
            "--json",
        ],
    ];
    for form in forms {
        let mut args = form.to_vec();
        args.extend(["--repo", repo_arg]);
        let (code, out, err) = orch_in(&repo.path, &args);
        assert_eq!(code, Some(0), "{form:?}: {err}");
        if form.contains(&"--json") {
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["running"], serde_json::json!([run_id]), "{form:?}: {out}");
        } else {
            assert!(
                out.contains(&format!("kept run {run_id}: it is running")),
                "{form:?} names the live run: {out}"
            );
        }
        for lane in &lanes {
            assert!(
                lane.is_dir(),
                "{form:?} removed the live lane {}",
                lane.display()
            );
        }
        assert_eq!(
            branches(&repo),
            branches_before,
            "{form:?} touched branches"
        );
        for f in record_files {
            assert!(record.join(f).is_file(), "{form:?} removed {f}");
        }
    }
    assert!(
        lanes
            .iter()
            .any(|l| std::fs::read_to_string(l.join("calc.py")).is_ok_and(|t| t.contains("a + b"))),
        "the lane still holds the edit"
    );

    // `runs` and `show` call it running; resume and rollback refuse it.
    let (_, runs, _) = orch_in(&repo.path, &["runs"]);
    assert!(
        runs.lines()
            .any(|l| l.starts_with(&run_id) && l.contains("running")),
        "{runs}"
    );
    let (_, show, _) = orch_in(&repo.path, &["show", &run_id]);
    assert!(show.contains(": running"), "{show}");
    // The running stage's numbers so far, from its action log.
    let code = show
        .lines()
        .find(|l| l.starts_with("code "))
        .unwrap_or_else(|| panic!("{show}"));
    let cols: Vec<&str> = code.split_whitespace().collect();
    assert_eq!(
        (cols[1], cols[5], cols[6]),
        ("running", "1", "120"),
        "{code}"
    );
    assert!(
        show.contains("tokens 120 (prompt 100, completion 20)"),
        "{show}"
    );
    assert!(!show.contains("$0.0000"), "{show}");
    let (_, json, _) = orch_in(&repo.path, &["show", &run_id, "--json"]);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["stages"][0]["turns"], 1, "{json}");
    assert_eq!(json["stages"][0]["tokens"]["completion"], 20, "{json}");
    for args in [
        vec!["resume", run_id.as_str(), "--replay", "/nonexistent"],
        vec!["rollback", run_id.as_str(), "--to", "code"],
    ] {
        let (code, out, err) = orch_in(&repo.path, &args);
        assert_eq!(code, Some(2), "{args:?} refused as bad usage: {out}{err}");
        assert!(
            err.contains(&run_id) && err.contains("is running") && err.contains("pid"),
            "{args:?}: {err}"
        );
    }

    open_gate(&server.base_url);
    let out = child.0.take().unwrap().wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "the run finished: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let state = state_json(&repo, &run_id);
    assert_eq!(state["status"], "succeeded");
    assert!(
        repo.git(&["show", &format!("orch/{run_id}/pr:calc.py")])
            .contains("a + b"),
        "the PR branch holds the stage's work"
    );
}
