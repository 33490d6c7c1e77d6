//! Fault-proof runs (issue 12), one test per failure, through the real
//! binary: debris a kill leaves in git (a lane-ref `.lock`, a half-made
//! worktree admin dir) does not stop `resume`; a run killed right after it
//! started is listed and resumable; a `running` run nobody drives shows as
//! interrupted; an interrupted stage keeps its tokens; an over-long stage id
//! is refused up front; six runs at once on one repository all succeed.
//!
//! Kills are injected at named steps (`ORCH_TEST_KILL_AT`, debug builds
//! only), never by timing.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, orch, output_logged, resume, signal_reply,
    state_json, stdout_json, write_issue,
};
use serde_json::{Value, json};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::Ordering;

pub(crate) const LINEAR: &str = "name: p\nstages:\n  one:\n    role: coder\n  two:\n    role: coder\n    needs: [one]\n  three:\n    role: coder\n    needs: [two]\n";

pub(crate) fn write(id: &str, path: &str, content: &str) -> Reply {
    Reply::tool_call(id, "write_file", json!({"path": path, "content": content}))
}

pub(crate) fn stage_script(x: &str) -> Vec<Reply> {
    vec![
        write("w", &format!("{x}.txt"), &format!("written by {x}\n")),
        Reply::finish("f", &format!("{x} done"), None),
    ]
}

pub(crate) fn script_for(stages: &[&str]) -> Script {
    stages
        .iter()
        .fold(Script::new(), |s, x| s.agent(x, stage_script(x)))
}

pub(crate) fn pipeline(dir: &Path, yaml: &str) -> PathBuf {
    crate::support::write_pipeline(dir, "p", yaml)
}

/// `orch run <pipeline> --json` against `server`, not yet run.
pub(crate) fn orch_run(repo: &TestRepo, pipeline: &Path, server: &FakeServer) -> OrchRun {
    let issue_dir = pipeline.parent().unwrap();
    let issue = write_issue(issue_dir, "# do the thing\n");
    OrchRun::new(pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
}

/// `orch <cmd> <args…> --repo <repo> --json`, parsed.
pub(crate) fn inspect_json(repo: &TestRepo, args: &[&str]) -> Value {
    let out =
        output_logged(
            orch()
                .args(args)
                .args(["--repo", repo.path.to_str().unwrap(), "--json"]),
        );
    assert_eq!(out.status.code(), Some(0), "orch {args:?}");
    stdout_json(&out)
}

pub(crate) fn killed(out: &Output) -> bool {
    out.status.signal() == Some(libc::SIGKILL)
}

/// The final tree of a run's PR branch.
pub(crate) fn pr_tree(repo: &TestRepo, run_id: &str) -> String {
    repo.git(&["rev-parse", &format!("orch/{run_id}/pr^{{tree}}")])
        .trim()
        .to_owned()
}

fn walk_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            walk_files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// What a finished run must not leave behind: `.lock` files anywhere in
/// `.git`, `.git/worktrees/orch-*` entries (but whole pooled lanes, which
/// outlive runs by design), `orch-lanes/*` refs, lane directories. Empty
/// when clean.
pub(crate) fn leftovers(repo: &TestRepo) -> Vec<String> {
    let git = repo.path.join(".git");
    let mut found = Vec::new();
    let mut files = Vec::new();
    walk_files(&git, &mut files);
    found.extend(
        files
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "lock"))
            .map(|p| format!("lock file {}", p.display())),
    );
    for entry in std::fs::read_dir(git.join("worktrees"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        // A pooled lane outlives runs by design; it must be whole: its
        // admin dir names its directory, which names it back.
        if let Some(n) = name.strip_prefix("orch-pool-") {
            let lane = git.join("orch/pool").join(format!("lane-{n}"));
            let gitdir = std::fs::read_to_string(entry.path().join("gitdir")).unwrap_or_default();
            let back = std::fs::read_to_string(lane.join(".git")).unwrap_or_default();
            if Path::new(gitdir.trim()) != lane.join(".git") || !back.contains(&*name) {
                found.push(format!("broken pooled lane {name}"));
            }
        } else if name.starts_with("orch-") {
            found.push(format!("worktree admin dir {name}"));
        }
    }
    let lanes = repo.git(&[
        "for-each-ref",
        "--format=%(refname)",
        "refs/heads/orch-lanes/",
    ]);
    found.extend(lanes.lines().map(|r| format!("lane ref {r}")));
    for entry in std::fs::read_dir(git.join("orch/worktrees"))
        .into_iter()
        .flatten()
        .flatten()
    {
        found.push(format!("lane directory {}", entry.path().display()));
    }
    found
}

/// `git fsck` exits 0 (dangling objects of moved-aside attempts are fine).
pub(crate) fn assert_fsck_clean(repo: &TestRepo) {
    let out = repo
        .git_command()
        .args(["fsck", "--no-progress"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git fsck: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The tree an uninterrupted run of `yaml` with [`stage_script`] replies makes.
pub(crate) fn reference_tree(yaml: &str, stages: &[&str]) -> String {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(tmp.path(), yaml);
    let server = FakeServer::start(script_for(stages));
    let out = orch_run(&repo, &p, &server).output();
    assert_eq!(out.status.code(), Some(0));
    pr_tree(&repo, stdout_json(&out)["run_id"].as_str().unwrap())
}

// ---------------------------------------------------------------- failure 1

#[test]
fn a_stale_lane_ref_lock_and_a_half_made_admin_dir_do_not_stop_resume() {
    let reference = reference_tree(LINEAR, &["one", "two", "three"]);
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let before = repo.snapshot();
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(tmp.path(), LINEAR);
    let server = FakeServer::start(script_for(&["one", "two", "three"]));
    // Killed once stage one is recorded: the run keeps its lane.
    let out = orch_run(&repo, &p, &server)
        .env("ORCH_TEST_KILL_AT", "stage-recorded")
        .output();
    assert!(killed(&out), "{:?}", out.status);
    let run_id = crate::support::only_run_id(&repo.path);
    // What a kill mid-update and mid-`worktree add` leave behind.
    let git = repo.path.join(".git");
    // Lanes are detached now; older versions kept a lane branch, whose
    // stale lock a resume must still clear.
    let lane_ref = git.join(format!("refs/heads/orch-lanes/{run_id}/1"));
    std::fs::create_dir_all(lane_ref.parent().unwrap()).unwrap();
    std::fs::write(lane_ref.with_extension("lock"), "").unwrap();
    let stage_ref_dir = git.join(format!("refs/heads/orch/{run_id}"));
    std::fs::create_dir_all(&stage_ref_dir).unwrap();
    std::fs::write(stage_ref_dir.join("two.lock"), "").unwrap();
    // Killed while recording the run on its ref (issue 17).
    let run_ref_lock = git.join(format!("refs/orch/runs/{run_id}.lock"));
    std::fs::create_dir_all(run_ref_lock.parent().unwrap()).unwrap();
    std::fs::write(&run_ref_lock, "").unwrap();
    let half = git.join(format!("worktrees/orch-{run_id}-3"));
    std::fs::create_dir_all(&half).unwrap();
    std::fs::write(
        half.join("HEAD"),
        format!("ref: refs/heads/orch-lanes/{run_id}/3\n"),
    )
    .unwrap();
    std::fs::write(half.join("commondir"), "../..\n").unwrap();
    std::fs::write(half.join("index"), "").unwrap();
    // Another run's half-made admin dir and the user's own worktree lock are
    // not this run's to touch.
    let other = git.join("worktrees/orch-20000101-000000-0000000000000000-1");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("HEAD"), "ref: refs/heads/x\n").unwrap();

    let server2 = FakeServer::start(script_for(&["two", "three"]));
    let out = resume(&repo, &run_id, &server2, &[]);
    assert_eq!(out.status.code(), Some(0), "resume heals the debris");
    assert_eq!(stdout_json(&out)["status"], "succeeded");
    assert!(
        server2.requests_for("one").is_empty(),
        "stage one is not re-run"
    );
    assert_eq!(pr_tree(&repo, &run_id), reference);
    assert!(
        other.join("HEAD").is_file(),
        "another run's admin dir is left alone"
    );
    std::fs::remove_dir_all(&other).unwrap();
    assert_eq!(leftovers(&repo), Vec::<String>::new());
    assert_fsck_clean(&repo);
    assert_eq!(repo.snapshot(), before);
}

#[test]
fn a_run_killed_right_after_it_started_is_listed_and_resumable() {
    let reference = reference_tree(LINEAR, &["one", "two", "three"]);
    for step in [
        "state-starting",
        "lane-branch-created",
        "worktree-added",
        "state-running",
    ] {
        let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
        let tmp = tempfile::tempdir().unwrap();
        let p = pipeline(tmp.path(), LINEAR);
        let server = FakeServer::start(Script::new());
        let out = orch_run(&repo, &p, &server)
            .env("ORCH_TEST_KILL_AT", step)
            .output();
        assert!(killed(&out), "killed at {step}: {:?}", out.status);
        let runs = inspect_json(&repo, &["runs"]);
        let runs = runs.as_array().unwrap();
        assert_eq!(
            runs.len(),
            1,
            "the run killed at {step} is listed: {runs:?}"
        );
        assert_eq!(runs[0]["status"], "interrupted", "{step}");
        let run_id = runs[0]["run_id"].as_str().unwrap().to_owned();
        let server2 = FakeServer::start(script_for(&["one", "two", "three"]));
        let out = resume(&repo, &run_id, &server2, &[]);
        assert_eq!(out.status.code(), Some(0), "resumed from {step}");
        assert_eq!(pr_tree(&repo, &run_id), reference, "{step}");
        assert_eq!(leftovers(&repo), Vec::<String>::new(), "{step}");
        assert_fsck_clean(&repo);
    }
}

#[test]
fn a_run_killed_before_its_first_state_write_leaves_nothing_a_later_run_keeps() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(tmp.path(), LINEAR);
    let out = orch_run(&repo, &p, &FakeServer::start(Script::new()))
        .env("ORCH_TEST_KILL_AT", "run-dir-created")
        .output();
    assert!(killed(&out), "{:?}", out.status);
    let dead = crate::support::only_run_id(&repo.path);
    assert_eq!(
        leftovers(&repo),
        Vec::<String>::new(),
        "no lane, ref or worktree yet"
    );
    assert!(
        inspect_json(&repo, &["runs"])
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Age the debris past the sweep's grace period, then start a run.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let root = repo.path.join(".git/orch/runs").join(&dead);
    std::fs::File::open(&root)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let out = orch_run(
        &repo,
        &p,
        &FakeServer::start(script_for(&["one", "two", "three"])),
    )
    .output();
    assert_eq!(out.status.code(), Some(0));
    assert!(!root.exists(), "the dead start was swept");
}

// ---------------------------------------------------------------- failure 2

#[test]
fn a_running_run_whose_lock_is_free_shows_as_interrupted_and_resumes() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(tmp.path(), LINEAR);
    let server = FakeServer::start(script_for(&["one", "two", "three"]));
    let out = orch_run(&repo, &p, &server)
        .env("ORCH_TEST_KILL_AT", "stage-branch-set:2")
        .output();
    assert!(killed(&out), "{:?}", out.status);
    let run_id = crate::support::only_run_id(&repo.path);
    assert_eq!(
        state_json(&repo, &run_id)["status"],
        "running",
        "as the dead process left it"
    );
    let runs = inspect_json(&repo, &["runs"]);
    assert_eq!(runs[0]["status"], "interrupted");
    let show = inspect_json(&repo, &["show", &run_id]);
    assert_eq!(show["status"], "interrupted");
    assert_eq!(show["stages"][0]["status"], "succeeded");
    assert_eq!(
        show["stages"][1]["status"], "pending",
        "its stage is not `running`"
    );
    assert!(
        show["stages"][1]["reason"]
            .as_str()
            .unwrap()
            .contains("interrupted"),
        "{}",
        show["stages"][1]
    );
    let text = output_logged(orch().args(["show", &run_id, "--repo", repo.path.to_str().unwrap()]));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(": interrupted"), "{text}");
    let out = resume(
        &repo,
        &run_id,
        &FakeServer::start(script_for(&["two", "three"])),
        &[],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(leftovers(&repo), Vec::<String>::new());
}

#[test]
fn an_internal_error_mid_run_leaves_the_run_failed_not_running() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(tmp.path(), LINEAR);
    let out = orch_run(
        &repo,
        &p,
        &FakeServer::start(script_for(&["one", "two", "three"])),
    )
    .env("ORCH_TEST_KILL_AT", "stage-recorded")
    .output();
    assert!(killed(&out), "{:?}", out.status);
    let run_id = crate::support::only_run_id(&repo.path);
    // Stage two's record directory cannot be made: a file is in the way.
    let blocker = crate::support::record_dir(&repo, &run_id).join("stages/two");
    std::fs::write(&blocker, "in the way\n").unwrap();
    let out = resume(
        &repo,
        &run_id,
        &FakeServer::start(script_for(&["two", "three"])),
        &[],
    );
    assert_eq!(out.status.code(), Some(5), "orch's own fault");
    let state = state_json(&repo, &run_id);
    assert_eq!(state["status"], "failed", "a terminal state, not `running`");
    assert_eq!(state["stages"][1]["status"], "failed");
    let reason = state["stages"][1]["reason"].as_str().unwrap();
    assert!(
        reason.contains("orch stopped on an error") && reason.contains("stages/two"),
        "{reason}"
    );
    std::fs::remove_file(&blocker).unwrap();
    let out = resume(
        &repo,
        &run_id,
        &FakeServer::start(script_for(&["two", "three"])),
        &["--retry"],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(leftovers(&repo), Vec::<String>::new());
}

#[test]
fn sigterm_interrupts_like_ctrl_c_and_the_run_resumes() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(tmp.path(), LINEAR);
    let (pid, term) = signal_reply(libc::SIGTERM);
    let server = FakeServer::start(
        Script::new()
            .agent("one", stage_script("one"))
            .agent("two", vec![write("w", "two.txt", "half\n"), term]),
    );
    let mut child = orch_run(&repo, &p, &server).spawn_quiet();
    pid.store(child.id(), Ordering::SeqCst);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    let run_id = crate::support::only_run_id(&repo.path);
    let state = state_json(&repo, &run_id);
    assert_eq!(state["status"], "interrupted");
    assert_eq!(state["stages"][1]["status"], "pending");
    assert_eq!(
        state["stages"][1]["turns"], 1,
        "the stopped attempt keeps its turn"
    );
    let out = resume(
        &repo,
        &run_id,
        &FakeServer::start(script_for(&["two", "three"])),
        &[],
    );
    assert_eq!(out.status.code(), Some(0));
}

// ---------------------------------------------------------------- failure 4

#[test]
fn an_interrupted_stage_keeps_its_tokens_and_every_attempt_is_counted() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(tmp.path(), LINEAR);
    let (pid, kill) = signal_reply(libc::SIGKILL);
    let server = FakeServer::start(Script::new().agent("one", stage_script("one")).agent(
        "two",
        vec![write("w", "two.txt", "half\n").with_usage(1000, 200), kill],
    ));
    let mut child = orch_run(&repo, &p, &server).spawn_quiet();
    pid.store(child.id(), Ordering::SeqCst);
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let run_id = crate::support::only_run_id(&repo.path);
    let show = inspect_json(&repo, &["show", &run_id]);
    assert_eq!(
        show["stages"][1]["tokens"]["prompt"], 1000,
        "the interrupted stage keeps what its log shows: {}",
        show["stages"][1]
    );
    let text = output_logged(orch().args(["show", &run_id, "--repo", repo.path.to_str().unwrap()]));
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(!text.contains("-0.0000"), "{text}");

    let server2 = FakeServer::start(
        Script::new()
            .agent(
                "two",
                vec![
                    write("w", "two.txt", "written by two\n").with_usage(10, 1),
                    Reply::finish("f", "two done", None).with_usage(10, 1),
                ],
            )
            .agent("three", stage_script("three")),
    );
    let out = resume(&repo, &run_id, &server2, &[]);
    assert_eq!(out.status.code(), Some(0));
    let state = state_json(&repo, &run_id);
    let two = &state["stages"][1];
    assert_eq!(two["attempts"].as_array().unwrap().len(), 1, "{two}");
    assert_eq!(two["attempts"][0]["status"], "interrupted");
    assert_eq!(two["attempts"][0]["tokens"]["prompt"], 1000);
    assert_eq!(two["attempts"][0]["turns"], 1);
    let show = output_logged(orch().args(["show", &run_id, "--repo", repo.path.to_str().unwrap()]));
    let text = String::from_utf8_lossy(&show.stdout).into_owned();
    assert!(
        text.contains("attempt 1 (interrupted): 1 turn, 1200 tokens"),
        "{text}"
    );
    assert!(
        text.contains("attempt 2 (this one): 2 turns, 22 tokens"),
        "{text}"
    );
    let runs = inspect_json(&repo, &["runs"]);
    let total = runs[0]["tokens"].as_u64().unwrap();
    assert!(total >= 1222, "the run total counts every attempt: {total}");
}

#[test]
fn a_run_killed_before_any_model_turn_costs_zero_not_negative_zero() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(tmp.path(), LINEAR);
    let out = orch_run(&repo, &p, &FakeServer::start(Script::new()))
        .env("ORCH_TEST_KILL_AT", "state-running")
        .output();
    assert!(killed(&out), "{:?}", out.status);
    let run_id = crate::support::only_run_id(&repo.path);
    let show = output_logged(orch().args(["show", &run_id, "--repo", repo.path.to_str().unwrap()]));
    let text = String::from_utf8_lossy(&show.stdout).into_owned();
    assert!(!text.contains("-0.0000"), "{text}");
    assert!(text.contains("cost $0.0000"), "{text}");
}

// ---------------------------------------------------------------- failure 5

#[test]
fn a_stage_id_over_100_bytes_is_refused_naming_it_and_the_limit() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let long = "a".repeat(300);
    let p = pipeline(
        tmp.path(),
        &format!("name: p\nstages:\n  {long}:\n    role: coder\n"),
    );
    let out = orch_run(&repo, &p, &FakeServer::start(Script::new())).output();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&long) && err.contains("100 bytes"), "{err}");
    assert!(
        !repo.path.join(".git/orch/runs").exists()
            || crate::support::walk(&repo.path.join(".git/orch/runs")).is_empty()
    );
    // Exactly 100 bytes is fine.
    let ok = "b".repeat(100);
    let p = pipeline(
        tmp.path(),
        &format!("name: p\nstages:\n  {ok}:\n    role: coder\n"),
    );
    let server = FakeServer::start(script_for(&[ok.as_str()]));
    let out = orch_run(&repo, &p, &server).output();
    assert_eq!(out.status.code(), Some(0));
}

// ---------------------------------------------------------------- failure 6

const FAN: &str = "name: p\nstages:\n  a:\n    role: coder\n  b:\n    role: coder\n  join:\n    role: coder\n    needs: [a, b]\n";

#[test]
fn six_concurrent_runs_on_one_repository_all_succeed() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(tmp.path(), FAN);
    let finish = |x: &str| {
        (0..6)
            .map(|_| Reply::finish("f", &format!("{x} done"), None))
            .collect()
    };
    let server = FakeServer::start(
        Script::new()
            .agent("a", finish("a"))
            .agent("b", finish("b"))
            .agent("join", finish("join")),
    );
    // Built first (each writes the issue file), then started together.
    let mut commands: Vec<_> = (0..6)
        .map(|_| orch_run(&repo, &p, &server).command())
        .collect();
    let children: Vec<_> = commands
        .iter_mut()
        .map(|c| {
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for out in &outs {
        assert_eq!(
            out.status.code(),
            Some(0),
            "every run succeeds: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let ids: std::collections::HashSet<String> = outs
        .iter()
        .map(|o| stdout_json(o)["run_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 6);
    assert_eq!(leftovers(&repo), Vec::<String>::new());
    assert_fsck_clean(&repo);
}

/// A run killed while recording its ref after its final state write is
/// never resumed: the next run in the repository heals the lock it left
/// (its run lock is free) and records that run's ref again.
#[test]
fn the_next_run_heals_a_finished_runs_stale_run_ref_lock() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(tmp.path(), LINEAR);
    let server = FakeServer::start(script_for(&["one", "two", "three"]));
    let out = orch_run(&repo, &p, &server).output();
    assert_eq!(out.status.code(), Some(0));
    let first = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let lock = repo.path.join(format!(".git/refs/orch/runs/{first}.lock"));
    std::fs::write(&lock, "").unwrap();
    let server = FakeServer::start(script_for(&["one", "two", "three"]));
    let out = orch_run(&repo, &p, &server).output();
    assert_eq!(out.status.code(), Some(0));
    assert!(!lock.exists(), "the stale run-ref lock was healed");
    assert_eq!(leftovers(&repo), Vec::<String>::new());
    repo.git(&["rev-parse", "--verify", &format!("refs/orch/runs/{first}")]);
}
