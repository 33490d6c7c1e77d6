//! The DAG runtime end to end: concurrency, isolation, fan-in merges and
//! conflicts, kill -9 and resume, Ctrl-C, rollback and resume, and the
//! review commands.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, assert_exit, orch, read_jsonl, record_dir,
    resume, signal_reply, state_json, stdout_json, tool_results, write_issue,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Bounded wait for the concurrency barrier.
const PEERS_WAIT: Duration = Duration::from_secs(30);

fn repo_with(files: &[(&str, &str)]) -> TestRepo {
    TestRepo::with_commit(files, "base")
}

fn write_pipeline(dir: &Path, yaml: &str) -> PathBuf {
    crate::support::write_pipeline(dir, "p", yaml)
}

/// `orch run <pipeline> --issue <issue_dir>/ISSUE.md --base-url … --model m`, not yet run.
fn orch_run(repo: &TestRepo, pipeline: &Path, issue_dir: &Path, server: &FakeServer) -> OrchRun {
    let issue = write_issue(issue_dir, "# do the thing\n");
    OrchRun::new(pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "m")
}

fn run(
    repo: &TestRepo,
    pipeline: &Path,
    issue_dir: &Path,
    server: &FakeServer,
    extra: &[&str],
) -> Output {
    orch_run(repo, pipeline, issue_dir, server)
        .json()
        .args(extra)
        .output()
}

fn write(id: &str, path: &str, content: &str) -> Reply {
    Reply::tool_call(id, "write_file", json!({"path": path, "content": content}))
}

const WIDE: &str = "name: p\nstages:\n  a:\n    role: coder\n  b:\n    role: coder\n  c:\n    role: coder\n  join:\n    role: coder\n    needs: [a, b, c]\n";

#[test]
fn independent_stages_run_concurrently_in_isolated_lanes_and_merge_at_the_fan_in() {
    let repo = repo_with(&[("README.md", "base\n")]);
    let before = repo.snapshot();
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(tmp.path(), WIDE);
    let lane = |x: &str| {
        vec![
            write("w", &format!("{x}.txt"), &format!("from {x}\n")),
            // Every lane lists its tree while all three are in flight.
            Reply::tool_call("l", "bash", json!({"command": "ls"})).await_peers(3, PEERS_WAIT),
            Reply::finish("f", &format!("{x} done"), None),
        ]
    };
    let server = FakeServer::start(
        Script::new()
            .agent("a", lane("a"))
            .agent("b", lane("b"))
            .agent("c", lane("c"))
            .agent(
                "join",
                vec![
                    Reply::tool_call("l", "bash", json!({"command": "ls"})),
                    Reply::finish("f", "joined", None),
                ],
            ),
    );
    let out = run(
        &repo,
        &pipeline,
        tmp.path(),
        &server,
        &["--max-parallel", "4"],
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(
        server.peers_met(),
        "the three stages were never in flight together"
    );
    // Isolation: no lane saw another lane's uncommitted file.
    for (x, others) in [
        ("a", ["b.txt", "c.txt"]),
        ("b", ["a.txt", "c.txt"]),
        ("c", ["a.txt", "b.txt"]),
    ] {
        let ls = &tool_results(&server.requests_for(x)[2])[1];
        assert!(
            ls.contains(&format!("{x}.txt")),
            "{x} sees its own file: {ls}"
        );
        for o in others {
            assert!(!ls.contains(o), "{x} saw {o}: {ls}");
        }
    }
    // The fan-in stage starts from a merge of all three.
    let ls = &tool_results(&server.requests_for("join")[1])[0];
    for f in ["a.txt", "b.txt", "c.txt", "README.md"] {
        assert!(ls.contains(f), "join sees {f}: {ls}");
    }
    let j = stdout_json(&out);
    let run_id = j["run_id"].as_str().unwrap();
    let files = repo.git(&["ls-tree", "--name-only", &format!("orch/{run_id}/pr")]);
    assert_eq!(
        files.lines().collect::<Vec<_>>(),
        ["README.md", "a.txt", "b.txt", "c.txt"]
    );
    // join's parent is a merge commit that has the stage commits among its ancestors.
    for x in ["a", "b", "c"] {
        let ok = repo
            .git_command()
            .args([
                "merge-base",
                "--is-ancestor",
                &format!("orch/{run_id}/{x}"),
                &format!("orch/{run_id}/join"),
            ])
            .status()
            .unwrap();
        assert!(ok.success(), "{x} is in join's history");
    }
    let parents = repo.git(&[
        "rev-list",
        "--parents",
        "-n1",
        &format!("orch/{run_id}/join^"),
    ]);
    assert_eq!(
        parents.split_whitespace().count(),
        3,
        "join starts from a two-parent merge: {parents}"
    );
    // Lanes are cleaned up after success; the user's repo is untouched.
    assert!(
        repo.git(&["branch", "--list", "orch-lanes/*"])
            .trim()
            .is_empty()
    );
    assert!(!repo.path.join(".git/orch/worktrees").join(run_id).exists());
    assert_eq!(repo.snapshot(), before);
    assert!(server.violations().is_empty());
}

#[test]
fn a_fan_in_conflict_fails_the_stage_naming_paths_and_branches() {
    let repo = repo_with(&[("shared.txt", "one\ntwo\nthree\n")]);
    let before = repo.snapshot();
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        tmp.path(),
        "name: p\nstages:\n  left:\n    role: coder\n  right:\n    role: coder\n  join:\n    role: coder\n    needs: [left, right]\n",
    );
    let edit = |to: &str| {
        vec![
            Reply::tool_call(
                "e",
                "edit_file",
                json!({"path": "shared.txt", "old_string": "two", "new_string": to}),
            ),
            Reply::finish("f", "edited", None),
        ]
    };
    let server = FakeServer::start(
        Script::new()
            .agent("left", edit("TWO (left)"))
            .agent("right", edit("TWO (right)")),
    );
    let out = run(&repo, &pipeline, tmp.path(), &server, &[]);
    assert_eq!(out.status.code(), Some(1));
    let j = stdout_json(&out);
    let run_id = j["run_id"].as_str().unwrap();
    assert_eq!(j["status"], "failed");
    let join = &j["stages"][2];
    assert_eq!(join["id"], "join");
    assert_eq!(join["status"], "failed");
    let reason = join["reason"].as_str().unwrap();
    assert!(reason.contains("shared.txt"), "{reason}");
    assert!(
        reason.contains(&format!("orch/{run_id}/left"))
            && reason.contains(&format!("orch/{run_id}/right")),
        "{reason}"
    );
    assert!(
        server.requests_for("join").is_empty(),
        "a conflicted stage never calls the model"
    );
    // Both sides are kept.
    for side in ["left", "right"] {
        let text = repo.git(&["show", &format!("orch/{run_id}/{side}:shared.txt")]);
        assert!(text.contains(&format!("TWO ({side})")), "{text}");
    }
    assert_eq!(repo.snapshot(), before);
}

const LINEAR: &str = "name: p\nstages:\n  one:\n    role: coder\n  two:\n    role: coder\n    needs: [one]\n  three:\n    role: coder\n    needs: [two]\n";

fn stage_script(x: &str) -> Vec<Reply> {
    vec![
        write("w", &format!("{x}.txt"), &format!("written by {x}\n")),
        Reply::finish("f", &format!("{x} done"), None),
    ]
}

fn full_script() -> Script {
    Script::new()
        .agent("one", stage_script("one"))
        .agent("two", stage_script("two"))
        .agent("three", stage_script("three"))
}

/// The script of [`LINEAR`] after stage one, for a resumed run.
fn stages_two_and_three() -> Script {
    Script::new()
        .agent("two", stage_script("two"))
        .agent("three", stage_script("three"))
}

fn pr_tree(repo: &TestRepo, run_id: &str) -> String {
    repo.git(&["rev-parse", &format!("orch/{run_id}/pr^{{tree}}")])
        .trim()
        .to_owned()
}

#[test]
fn kill_9_mid_stage_then_resume_finishes_without_rerunning_finished_stages() {
    // The reference: the same pipeline and script, uninterrupted.
    let reference = repo_with(&[("README.md", "base\n")]);
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(tmp.path(), LINEAR);
    let server = FakeServer::start(full_script());
    let out = run(&reference, &pipeline, tmp.path(), &server, &[]);
    assert_eq!(out.status.code(), Some(0));
    let reference_tree = pr_tree(&reference, stdout_json(&out)["run_id"].as_str().unwrap());

    let repo = repo_with(&[("README.md", "base\n")]);
    let before = repo.snapshot();
    let (pid, kill) = signal_reply(libc::SIGKILL);
    // Stage two is killed on its second request: mid-turn, after a write.
    let server = FakeServer::start(
        Script::new()
            .agent("one", stage_script("one"))
            .agent("two", vec![write("w", "two.txt", "half-written\n"), kill]),
    );
    let mut child = orch_run(&repo, &pipeline, tmp.path(), &server).spawn_quiet();
    pid.store(child.id(), Ordering::SeqCst);
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "orch was killed: {status:?}"
    );
    let run_id = crate::support::only_run_id(&repo.path);
    let state = state_json(&repo, &run_id);
    assert_eq!(
        state["status"], "running",
        "the killed run's state is as it was"
    );
    assert_eq!(state["stages"][0]["status"], "succeeded");
    assert_eq!(state["stages"][1]["status"], "running");

    let server2 = FakeServer::start(stages_two_and_three());
    let out = resume(&repo, &run_id, &server2, &[]);
    assert_eq!(out.status.code(), Some(0));
    let j = stdout_json(&out);
    assert_eq!(j["status"], "succeeded");
    assert!(
        server2.requests_for("one").is_empty(),
        "the finished stage did not run again"
    );
    assert_eq!(
        server2.requests_for("two").len(),
        2,
        "the interrupted stage restarted from its start"
    );
    assert_eq!(
        pr_tree(&repo, &run_id),
        reference_tree,
        "same final tree as the uninterrupted run"
    );
    assert_eq!(
        repo.git(&["show", &format!("orch/{run_id}/pr:two.txt")]),
        "written by two\n"
    );
    assert_eq!(repo.snapshot(), before);
}

#[test]
fn ctrl_c_interrupts_cleanly_and_the_run_resumes() {
    let repo = repo_with(&[("README.md", "base\n")]);
    let before = repo.snapshot();
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(tmp.path(), LINEAR);
    let (pid, sigint) = signal_reply(libc::SIGINT);
    let server = FakeServer::start(Script::new().agent("one", stage_script("one")).agent(
        "two",
        vec![
            Reply::tool_call("s", "bash", json!({"command": "sleep 30 & echo started"})),
            sigint,
        ],
    ));
    let mut child = orch_run(&repo, &pipeline, tmp.path(), &server).spawn_quiet();
    pid.store(child.id(), Ordering::SeqCst);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "interrupted exit code");
    let run_id = crate::support::only_run_id(&repo.path);
    let state = state_json(&repo, &run_id);
    assert_eq!(state["status"], "interrupted");
    assert_eq!(state["stages"][1]["status"], "pending");
    let server2 = FakeServer::start(stages_two_and_three());
    let out = resume(&repo, &run_id, &server2, &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(server2.requests_for("one").is_empty());
    assert_eq!(repo.snapshot(), before);
}

#[test]
fn rollback_then_resume_reruns_only_the_later_stages_and_keeps_old_branches() {
    let repo = repo_with(&[("README.md", "base\n")]);
    let before = repo.snapshot();
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(tmp.path(), LINEAR);
    let server = FakeServer::start(full_script());
    let out = run(&repo, &pipeline, tmp.path(), &server, &[]);
    assert_eq!(out.status.code(), Some(0));
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let sha = |b: &str| {
        repo.git(&["rev-parse", &format!("orch/{run_id}/{b}")])
            .trim()
            .to_owned()
    };
    let (one, two_old, three_old) = (sha("one"), sha("two"), sha("three"));
    assert_eq!(sha("pr"), three_old);
    // A chain of stages reuses one lane without any checkout between stages.
    let checkout = |stage: &str| -> Value {
        let log = record_dir(&repo, &run_id).join(format!("stages/{stage}/actions.jsonl"));
        read_jsonl(&log)[0]["lane_checkout"].clone()
    };
    assert_eq!(checkout("one"), "created");
    assert_eq!(checkout("two"), "clean");
    assert_eq!(checkout("three"), "clean");

    let out = orch()
        .args([
            "rollback",
            &run_id,
            "--to",
            "one",
            "--repo",
            repo.path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("two, three"));
    assert_eq!(sha("pr"), one, "the final branch moved back");
    let state = state_json(&repo, &run_id);
    assert_eq!(state["status"], "rolled_back");
    assert_eq!(state["stages"][1]["status"], "rolled_back");
    assert_eq!(state["stages"][2]["status"], "rolled_back");

    let redo = |x: &str| {
        vec![
            write("w", &format!("{x}.txt"), &format!("redone by {x}\n")),
            Reply::finish("f", "redone", None),
        ]
    };
    let server2 = FakeServer::start(
        Script::new()
            .agent("two", redo("two"))
            .agent("three", redo("three")),
    );
    let out = resume(&repo, &run_id, &server2, &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        server2.requests_for("one").is_empty(),
        "stage one is not run again"
    );
    assert_eq!(server2.requests_for("two").len(), 2);
    assert_eq!(server2.requests_for("three").len(), 2);
    assert_eq!(sha("one"), one);
    assert_ne!(sha("two"), two_old);
    assert_eq!(
        sha("pr"),
        sha("three"),
        "the final branch moved to the new end"
    );
    assert_eq!(
        repo.git(&["show", &format!("orch/{run_id}/pr:three.txt")]),
        "redone by three\n"
    );
    // The old attempts are still there.
    assert_eq!(sha("two.v1"), two_old);
    assert_eq!(sha("three.v1"), three_old);
    assert_eq!(repo.snapshot(), before);
}

#[test]
fn resume_refuses_failed_stages_without_retry() {
    let repo = repo_with(&[("README.md", "base\n")]);
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(tmp.path(), LINEAR);
    let server =
        FakeServer::start(Script::new().agent("one", vec![Reply::Status(401, "no".into())]));
    let out = run(&repo, &pipeline, tmp.path(), &server, &[]);
    assert_eq!(out.status.code(), Some(3));
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let server2 = FakeServer::start(full_script());
    let out = resume(&repo, &run_id, &server2, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--retry"));
    let out = resume(&repo, &run_id, &server2, &["--retry"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout_json(&out)["status"], "succeeded");
}

#[test]
fn resume_reuses_the_recorded_model_settings_but_not_secrets() {
    let repo = repo_with(&[("README.md", "base\n")]);
    let before = repo.snapshot();
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(tmp.path(), LINEAR);
    // One server for both processes: stage two fails once (401), then the
    // resumed run finds the rest of the script there.
    let server = FakeServer::start(
        Script::new()
            .agent("one", stage_script("one"))
            .agent("two", vec![Reply::Status(401, "bad key".into())])
            .agent("two", stage_script("two"))
            .agent("three", stage_script("three")),
    );
    let issue = write_issue(tmp.path(), "# do the thing\n");
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "recorded-model")
        .json()
        .env("ORCH_API_KEY", "sk-first-key-123456")
        .output();
    assert_eq!(out.status.code(), Some(3));
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let state = std::fs::read_to_string(record_dir(&repo, &run_id).join("state.json")).unwrap();
    assert!(
        !state.contains("sk-first-key-123456"),
        "no secret in the record"
    );
    // No model flags: the recorded base URL and model are used; the key
    // comes from this process's environment.
    let out = orch()
        .args([
            "resume",
            &run_id,
            "--retry",
            "--repo",
            repo.path.to_str().unwrap(),
            "--json",
        ])
        .env("ORCH_API_KEY", "sk-second-key-654321")
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let two = server.requests_for("two");
    assert_eq!(
        two.len(),
        3,
        "one failed request, then the retried stage's two"
    );
    assert_eq!(two[1].body["model"], "recorded-model");
    assert_eq!(
        two[1].header("authorization"),
        Some("Bearer sk-second-key-654321")
    );
    assert_eq!(server.requests_for("one").len(), 2, "stage one ran once");
    // The failed attempt's branch is kept beside the new one.
    assert!(
        !repo
            .git(&["rev-parse", &format!("orch/{run_id}/two.v1")])
            .trim()
            .is_empty()
    );
    assert_eq!(repo.snapshot(), before);
}

#[test]
fn a_run_in_progress_cannot_be_resumed_or_rolled_back_by_another_process() {
    let repo = repo_with(&[("README.md", "base\n")]);
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(tmp.path(), LINEAR);
    let mut slow = stage_script("one");
    slow[0] = write("w", "one.txt", "written by one\n").after(Duration::from_secs(4));
    let server = FakeServer::start(
        Script::new()
            .agent("one", slow)
            .agent("two", stage_script("two"))
            .agent("three", stage_script("three")),
    );
    let mut child = orch_run(&repo, &pipeline, tmp.path(), &server).spawn_quiet();
    // Wait (bounded) until the run exists and its first request is in flight.
    let mut waited = 0;
    while server.requests_for("one").is_empty() && waited < 200 {
        std::thread::sleep(Duration::from_millis(50));
        waited += 1;
    }
    let run_id = crate::support::only_run_id(&repo.path);
    for args in [
        vec!["resume", run_id.as_str()],
        vec!["rollback", run_id.as_str(), "--to", "one"],
    ] {
        let out = orch()
            .args(&args)
            .args(["--repo", repo.path.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("another orch process") && err.contains(&child.id().to_string()),
            "{err}"
        );
    }
    assert_eq!(
        child.wait().unwrap().code(),
        Some(0),
        "the running run was not disturbed"
    );
}

/// Whether process `pid` still exists (a zombie counts as gone).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// Starts a one-stage run whose tool command writes its pid and sleeps;
/// returns orch and the command's pid once it runs.
fn run_with_a_sleeping_command(
    repo: &TestRepo,
    tmp: &Path,
    server: &FakeServer,
) -> (std::process::Child, i32) {
    let pipeline = write_pipeline(tmp, LINEAR);
    let pidfile = tmp.join("sleeper.pid");
    // The pid file is outside the lane, which the kernel sandbox keeps
    // read-only; these tests are about process clean-up, not the sandbox.
    let child = orch_run(repo, &pipeline, tmp, server)
        .env("ORCH_SANDBOX_DISABLE", "1")
        .spawn_quiet();
    // Wait (bounded) until the tool command runs.
    let mut waited = 0;
    while std::fs::read_to_string(&pidfile).map_or(true, |t| t.trim().is_empty()) && waited < 400 {
        std::thread::sleep(Duration::from_millis(25));
        waited += 1;
    }
    let sleeper: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (child, sleeper)
}

fn sleeping_command(tmp: &Path) -> FakeServer {
    let pidfile = tmp.join("sleeper.pid");
    FakeServer::start(Script::new().agent(
        "one",
        vec![Reply::tool_call(
            "s",
            "bash",
            json!({"command": format!("echo $$ > {} && exec sleep 300", pidfile.display()), "timeout_secs": 600}),
        )],
    ))
}

/// Waits (bounded, 5 s) until `pid` is gone.
fn gone(pid: i32) -> bool {
    let mut waited = 0;
    while alive(pid) && waited < 200 {
        std::thread::sleep(Duration::from_millis(25));
        waited += 1;
    }
    !alive(pid)
}

#[test]
fn a_killed_orchs_running_tool_command_goes_with_it() {
    // The command's reaper sees orch go (its control pipe closes) and kills
    // the command's tree at once: nothing waits for a resume.
    let repo = repo_with(&[("README.md", "base\n")]);
    let tmp = tempfile::tempdir().unwrap();
    let server = sleeping_command(tmp.path());
    let (mut child, sleeper) = run_with_a_sleeping_command(&repo, tmp.path(), &server);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(gone(sleeper), "the tool command outlived a SIGKILLed orch");
}

#[test]
fn resume_stops_the_tool_processes_a_killed_orch_left_running() {
    let repo = repo_with(&[("README.md", "base\n")]);
    let before = repo.snapshot();
    let tmp = tempfile::tempdir().unwrap();
    let server = sleeping_command(tmp.path());
    let (mut child, sleeper) = run_with_a_sleeping_command(&repo, tmp.path(), &server);
    // What resume's scan for the run marker is for: a command that escaped
    // even its reaper, as when the reaper is killed with orch (an OOM kill,
    // a kill of every process). The command's parent is its reaper.
    let stat = std::fs::read_to_string(format!("/proc/{sleeper}/stat")).unwrap();
    let reaper: i32 = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .unwrap();
    // Orch is stopped first, so both die as in one kill of every process:
    // a running orch that saw its reaper die before its own kill came
    // would clean the command up itself (a loaded machine can deschedule
    // this thread between the two kills).
    // SAFETY: plain syscall on orch's pid, our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGSTOP) }, 0);
    // SAFETY: plain syscall on the reaper's pid, read from /proc.
    assert_eq!(unsafe { libc::kill(reaper, libc::SIGKILL) }, 0);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        alive(sleeper),
        "the tool command outlives a SIGKILLed orch and reaper"
    );

    let run_id = crate::support::only_run_id(&repo.path);
    let server2 = FakeServer::start(full_script());
    let out = resume(&repo, &run_id, &server2, &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stopped 1 process(es) left running"));
    assert!(gone(sleeper), "resume stopped the orphaned tool command");
    assert_eq!(repo.snapshot(), before);
}
