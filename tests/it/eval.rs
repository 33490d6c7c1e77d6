//! `orch eval` through the real binary: the shipped task set with its
//! scripted models (perfect → every task solved, broken → none), the JSON
//! and JSONL results, where results go, malformed tasks, bundles, check
//! timeouts, and a model reached by `--base-url` (the fake server).

use crate::support::{
    FAKE_API_KEY, FakeServer, Reply, Script, TestRepo, assert_exit, orch, output_logged,
    read_jsonl, signal_reply, stdout_json, tool_results,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/eval")
}

/// `orch eval --tasks <tasks> args…` run from `cwd`.
pub(crate) fn eval(cwd: &Path, tasks: &Path, args: &[&str]) -> Command {
    let mut cmd = orch();
    cmd.current_dir(cwd)
        .arg("eval")
        .arg("--tasks")
        .arg(tasks)
        .args(args);
    cmd
}

pub(crate) fn rows(report: &Value) -> &Vec<Value> {
    report["results"].as_array().expect("results array")
}

fn task_names(report: &Value) -> Vec<String> {
    rows(report)
        .iter()
        .map(|r| r["task"].as_str().unwrap().to_owned())
        .collect()
}

/// Copies `from` into `to` recursively (test set-up only).
pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

#[test]
fn the_perfect_scripts_solve_every_shipped_task() {
    let cwd = tempfile::tempdir().unwrap();
    let out = cwd.path().join("results");
    let before = std::fs::read_dir(fixtures()).unwrap().count();
    let run = output_logged(&mut eval(
        cwd.path(),
        &fixtures(),
        &[
            "--scripted",
            "perfect",
            "--json",
            "--out",
            out.to_str().unwrap(),
        ],
    ));
    assert_exit(&run, 0);
    let report = stdout_json(&run);
    assert_eq!(report["format"], "orch-eval/1");
    let names = task_names(&report);
    assert!(names.len() >= 8, "{names:?}");
    assert!(names.iter().any(|n| n.contains("-py-")) && names.iter().any(|n| n.contains("-sh-")));
    for row in rows(&report) {
        assert_eq!(row["solved"], true, "{row:#}");
        assert_eq!(row["run_status"], "succeeded", "{row:#}");
        assert_eq!(row["check"]["exit_code"], 0, "{row:#}");
        assert_eq!(row["stages"][0]["id"], "code");
        assert_eq!(row["stages"][0]["status"], "succeeded");
        assert!(row["turns"].as_u64().unwrap() >= 3, "{row:#}");
        assert!(row["tokens"]["total"].as_u64().unwrap() > 0);
        assert!(row["wall_secs"].as_f64().unwrap() > 0.0);
        assert!(row["final_branch"].as_str().unwrap().starts_with("orch/"));
        // The work directories are gone (no --keep).
        assert!(row["workdir"].is_null());
    }
    let total = &report["total"];
    assert_eq!(total["runs"].as_u64(), Some(names.len() as u64));
    assert_eq!(total["solved"], total["runs"]);
    assert_eq!(total["solved_pct"], 100.0);
    assert!(
        report["model"]
            .as_str()
            .unwrap()
            .contains("replay.perfect.json")
    );

    // Results file: one line per task run, then the total; all versioned.
    let lines = read_jsonl(&out.join("evals.jsonl"));
    assert_eq!(lines.len(), names.len() + 1);
    for l in &lines {
        assert_eq!(l["format"], "orch-eval/1");
        assert_eq!(l["eval_id"], report["eval_id"]);
    }
    assert!(lines[..names.len()].iter().all(|l| l["kind"] == "run"));
    assert_eq!(lines[names.len()]["kind"], "total");
    assert_eq!(lines[names.len()]["total"]["solved_pct"], 100.0);
    // The hidden checks never reach a task's repository, and the task set is untouched.
    assert_eq!(std::fs::read_dir(fixtures()).unwrap().count(), before);
}

#[test]
fn the_broken_scripts_solve_nothing_although_every_run_succeeds() {
    let cwd = tempfile::tempdir().unwrap();
    let out = cwd.path().join("results");
    let run = output_logged(&mut eval(
        cwd.path(),
        &fixtures(),
        &[
            "--scripted",
            "broken",
            "--json",
            "--fail-under",
            "50",
            "--out",
            out.to_str().unwrap(),
        ],
    ));
    // Under --fail-under 50 the eval exits 1, still with its report.
    assert_exit(&run, 1);
    let report = stdout_json(&run);
    assert!(rows(&report).len() >= 8);
    for row in rows(&report) {
        // orch itself calls each run a success: only the hidden check tells.
        assert_eq!(row["run_status"], "succeeded", "{row:#}");
        assert_eq!(row["solved"], false, "{row:#}");
        assert_eq!(row["check"]["exit_code"], 1, "{row:#}");
        assert_eq!(row["reason"], "check.sh exited 1");
        assert!(!row["check"]["output"].as_str().unwrap().is_empty());
    }
    assert_eq!(report["total"]["solved"], 0);
    assert_eq!(report["total"]["solved_pct"], 0.0);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("under --fail-under 50"), "{stderr}");
}

#[test]
fn the_table_names_each_task_and_the_total() {
    let cwd = tempfile::tempdir().unwrap();
    let out = cwd.path().join("results");
    let run = output_logged(&mut eval(
        cwd.path(),
        &fixtures(),
        &[
            "--scripted",
            "broken",
            "--task",
            "06-sh-rename",
            "--out",
            out.to_str().unwrap(),
        ],
    ));
    assert_exit(&run, 0);
    let stdout = String::from_utf8_lossy(&run.stdout);
    let row = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("06-sh-rename"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        row.contains(" no ") && row.contains("code:succeeded"),
        "{row}"
    );
    // The check's own last words explain the failure.
    assert!(
        stdout.contains("check.sh exited 1: log_msg is still used"),
        "{stdout}"
    );
    assert!(
        stdout.contains("total: 0/1 runs solved (0.0%) over 1 task;"),
        "{stdout}"
    );
}

#[test]
fn a_task_without_check_sh_is_rejected_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks");
    copy_dir(&fixtures().join("01-py-one-line"), &tasks.join("a"));
    copy_dir(&fixtures().join("02-py-off-by-one"), &tasks.join("b"));
    std::fs::remove_file(tasks.join("b/check.sh")).unwrap();
    let out = dir.path().join("results");
    let run = output_logged(&mut eval(
        dir.path(),
        &tasks,
        &["--scripted", "perfect", "--out", out.to_str().unwrap()],
    ));
    assert_exit(&run, 2);
    let stderr = String::from_utf8_lossy(&run.stderr);
    let path = tasks.join("b/check.sh");
    assert!(
        stderr.contains(&format!("{}: it is missing", path.display())),
        "{stderr}"
    );
    assert!(run.stdout.is_empty());
    // Nothing ran, so nothing was recorded.
    assert!(!out.exists());

    // A missing scripted replay is named the same way.
    let run = output_logged(&mut eval(
        dir.path(),
        &tasks.join("a"),
        &["--scripted", "nope"],
    ));
    assert_exit(&run, 2);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("replay.nope.json"), "{stderr}");
}

#[test]
fn bad_pipelines_and_run_flags_stop_the_eval_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let task = fixtures().join("01-py-one-line");
    let out = dir.path().join("results");
    let run = output_logged(&mut eval(
        dir.path(),
        &task,
        &["--scripted", "perfect", "--pipeline", "no-such-pipeline"],
    ));
    assert_exit(&run, 2);
    assert!(String::from_utf8_lossy(&run.stderr).contains("no-such-pipeline"));

    // Flags after `--` go to every `orch run`; one it rejects ends the eval.
    let run = output_logged(
        eval(
            dir.path(),
            &task,
            &["--scripted", "perfect", "--out", out.to_str().unwrap()],
        )
        .args(["--", "--max-parallel", "0"]),
    );
    assert_exit(&run, 2);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("rejected its input") && stderr.contains("max-parallel"),
        "{stderr}"
    );
}

#[test]
fn results_go_to_the_current_repository_or_the_user_state_dir() {
    // Inside a repository: its .git/orch/evals; the repository is not touched otherwise.
    let repo = TestRepo::with_commit(&[("a.txt", "a\n")], "init");
    let before = repo.snapshot();
    let run = output_logged(&mut eval(
        &repo.path,
        &fixtures(),
        &[
            "--scripted",
            "perfect",
            "--task",
            "01-py-one-line",
            "--runs",
            "2",
            "--json",
        ],
    ));
    assert_exit(&run, 0);
    let report = stdout_json(&run);
    assert_eq!(rows(&report).len(), 2);
    assert_eq!(report["tasks"][0]["runs"], 2);
    assert_eq!(report["tasks"][0]["solved"], 2);
    let runs: Vec<u64> = rows(&report)
        .iter()
        .map(|r| r["run"].as_u64().unwrap())
        .collect();
    assert_eq!(runs, [1, 2]);
    // Each run gets a fresh repository: two different runs, two final branches.
    assert_ne!(rows(&report)[0]["run_id"], rows(&report)[1]["run_id"]);
    let file = repo.path.join(".git/orch/evals/evals.jsonl");
    assert_eq!(report["results_file"], file.display().to_string());
    assert_eq!(read_jsonl(&file).len(), 3);
    before.assert_unchanged(&repo.snapshot());

    // Outside any repository: the user state dir under HOME.
    let plain = tempfile::tempdir().unwrap();
    let mut cmd = eval(
        plain.path(),
        &fixtures(),
        &[
            "--scripted",
            "perfect",
            "--task",
            "01-py-one-line",
            "--json",
        ],
    );
    let home = tempfile::tempdir().unwrap();
    cmd.env("HOME", home.path());
    let run = output_logged(&mut cmd);
    assert_exit(&run, 0);
    let file = home.path().join(".local/state/orch/evals/evals.jsonl");
    assert_eq!(
        stdout_json(&run)["results_file"],
        file.display().to_string()
    );
    assert_eq!(read_jsonl(&file).len(), 2);
}

/// A task whose repository is a bundle with history, solved by a script that
/// writes a file, next to a task whose check hangs.
#[test]
fn bundles_work_and_a_hanging_check_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks");
    let src = TestRepo::with_commit(&[("README.md", "v1\n")], "one");
    src.write("README.md", "v2\n");
    src.commit_all("two");
    let bundled = tasks.join("bundled");
    std::fs::create_dir_all(&bundled).unwrap();
    src.git(&[
        "bundle",
        "create",
        bundled.join("repo.bundle").to_str().unwrap(),
        "--all",
    ]);
    std::fs::write(bundled.join("issue.md"), "# Add fixed.txt saying yes\n").unwrap();
    // The check sees the history and the base commit it was given.
    std::fs::write(
        bundled.join("check.sh"),
        "set -eu\n[ \"$(cat fixed.txt)\" = yes ]\n[ \"$(git rev-list --count HEAD)\" = 3 ]\n[ \"$(git rev-parse HEAD~1)\" = \"$ORCH_EVAL_BASE\" ]\ngrep -q v2 README.md\n",
    )
    .unwrap();
    let replay = serde_json::json!({
        "format": "orch-replay/1",
        "agents": {"code": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "fixed.txt", "content": "yes\n"}}]},
            {"tool_calls": [{"name": "finish", "arguments": {"summary": "wrote fixed.txt"}}]}
        ]}
    });
    std::fs::write(bundled.join("replay.ok.json"), replay.to_string()).unwrap();
    let hangs = tasks.join("hangs");
    copy_dir(&bundled, &hangs);
    std::fs::remove_file(hangs.join("repo.bundle")).unwrap();
    std::fs::create_dir_all(hangs.join("repo")).unwrap();
    std::fs::write(hangs.join("repo/README.md"), "x\n").unwrap();
    std::fs::write(hangs.join("check.sh"), "sleep 60\n").unwrap();

    let run = output_logged(&mut eval(
        dir.path(),
        &tasks,
        &[
            "--scripted",
            "ok",
            "--pipeline",
            fixtures().join("eval.yaml").to_str().unwrap(),
            "--check-timeout",
            "1",
            "--keep",
            "--json",
            "--out",
            dir.path().join("results").to_str().unwrap(),
        ],
    ));
    assert_exit(&run, 0);
    let report = stdout_json(&run);
    assert_eq!(task_names(&report), ["bundled", "hangs"]);
    let (bundled_row, hangs_row) = (&rows(&report)[0], &rows(&report)[1]);
    assert_eq!(bundled_row["solved"], true, "{bundled_row:#}");
    assert_eq!(hangs_row["solved"], false);
    assert_eq!(hangs_row["check"]["timed_out"], true);
    assert_eq!(hangs_row["reason"], "check.sh timed out after 1s");
    assert_eq!(report["total"]["solved_pct"], 50.0);
    // --keep leaves the repository with its run record and the checkout.
    let work = PathBuf::from(bundled_row["workdir"].as_str().unwrap());
    let run_id = bundled_row["run_id"].as_str().unwrap();
    assert!(work.join("repo/.git/orch/runs").join(run_id).is_dir());
    assert_eq!(
        std::fs::read_to_string(work.join("check/fixed.txt")).unwrap(),
        "yes\n"
    );
    // The agents' repository never held the check.
    assert!(!work.join("repo/check.sh").exists());
    for row in rows(&report) {
        std::fs::remove_dir_all(row["workdir"].as_str().unwrap()).unwrap();
    }
}

/// The path a real model takes: `--base-url`/`--model` are passed to each
/// run, and the tools' real output goes back to the server.
#[test]
fn a_model_behind_base_url_is_measured_the_same_way() {
    let script: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("01-py-one-line/replay.perfect.json")).unwrap(),
    )
    .unwrap();
    let replies = replies_of(&script["agents"]["code"], (100, 10));
    let turns = replies.len();
    let server = FakeServer::start(Script::new().agent("code", replies));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let run = eval_task_one_on_fake_model(&server, dir.path(), &fixtures(), &[]);
    let report = stdout_json(&run);
    let row = &rows(&report)[0];
    assert_eq!(row["solved"], true, "{row:#}");
    assert_eq!(row["tokens"]["prompt"], 100 * turns as u64);
    assert_eq!(row["tokens"]["completion"], 10 * turns as u64);
    assert!(
        row["model"].as_str().unwrap().contains("fake-model"),
        "{row:#}"
    );
    let requests = server.requests_for("code");
    assert_eq!(requests.len(), turns);
    assert!(requests.iter().all(|r| r.body["model"] == "fake-model"));
    // The bash call's real output (the fixed conversion) reached the model.
    let results = tool_results(&requests[3]);
    assert!(
        results.iter().any(|t| t.contains("212.0 32.0")),
        "{results:?}"
    );
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    // The key is not in anything eval wrote.
    let text = std::fs::read_to_string(out.join("evals.jsonl")).unwrap();
    assert!(!text.contains(FAKE_API_KEY));
    assert!(!String::from_utf8_lossy(&run.stdout).contains(FAKE_API_KEY));
}

/// `orch eval` of task `01-py-one-line` of `tasks` (and the tasks `extra`
/// names) with `--json` against the fake server's model, results in
/// `dir/results`; exit 0 is asserted.
pub(crate) fn eval_task_one_on_fake_model(
    server: &FakeServer,
    dir: &Path,
    tasks: &Path,
    extra: &[&str],
) -> std::process::Output {
    let out = dir.join("results");
    let mut args = vec![
        "--task",
        "01-py-one-line",
        "--base-url",
        &server.base_url,
        "--model",
        "fake-model",
        "--no-stream",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let mut cmd = eval(dir, tasks, &args);
    cmd.env("ORCH_API_KEY", FAKE_API_KEY);
    let run = output_logged(&mut cmd);
    assert_exit(&run, 0);
    run
}

/// The fake server's replies for one agent's turns of a replay file, each
/// reporting `usage` (prompt, completion tokens).
pub(crate) fn replies_of(turns: &Value, usage: (u64, u64)) -> Vec<Reply> {
    turns
        .as_array()
        .unwrap()
        .iter()
        .map(|turn| {
            let calls: Vec<(String, String, Value)> = turn["tool_calls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    (
                        c["id"].as_str().unwrap().to_owned(),
                        c["name"].as_str().unwrap().to_owned(),
                        c["arguments"].clone(),
                    )
                })
                .collect();
            let borrowed: Vec<(&str, &str, Value)> = calls
                .iter()
                .map(|(i, n, a)| (i.as_str(), n.as_str(), a.clone()))
                .collect();
            Reply::tool_calls(&borrowed).with_usage(usage.0, usage.1)
        })
        .collect()
}

/// Ctrl-C reaches `orch run` (in its own process group) through eval: the
/// run records itself as interrupted, eval writes its total and exits 130.
#[test]
fn ctrl_c_is_passed_on_to_the_current_run() {
    let (pid, sigint) = signal_reply(libc::SIGINT);
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            sigint,
            // A retry after the dropped connection waits here until the
            // interruption ends the run.
            Reply::text("late").after(std::time::Duration::from_secs(20)),
        ],
    ));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let mut cmd = eval(
        dir.path(),
        &fixtures(),
        &[
            "--base-url",
            &server.base_url,
            "--model",
            "fake-model",
            "--no-stream",
            "--keep",
            "--json",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    cmd.env("ORCH_API_KEY", FAKE_API_KEY)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    pid.store(child.id(), std::sync::atomic::Ordering::SeqCst);
    let run = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(130), "{stderr}");
    let report = stdout_json(&run);
    assert_eq!(report["interrupted"], true);
    assert!(rows(&report).is_empty());
    let lines = read_jsonl(&out.join("evals.jsonl"));
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["kind"], "total");
    assert_eq!(lines[0]["interrupted"], true);
    // The kept run says it was interrupted (so `orch resume` could go on).
    let kept = stderr
        .lines()
        .find_map(|l| l.strip_prefix("orch eval: kept "))
        .unwrap_or_else(|| panic!("{stderr}"));
    let runs = PathBuf::from(kept).join("repo/.git/orch/runs");
    let run_dir = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("state.json")).unwrap())
            .unwrap();
    assert_eq!(state["status"], "interrupted", "{state:#}");
    std::fs::remove_dir_all(kept).unwrap();
}

/// The same scripts serve the built-in issue-to-pr pipeline: a reviewer's
/// approval does not make a broken fix solved.
#[test]
fn the_built_in_issue_to_pr_pipeline_is_measured_by_the_same_checks() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    for (script, solved) in [("perfect", true), ("broken", false)] {
        let run = output_logged(&mut eval(
            dir.path(),
            &fixtures(),
            &[
                "--scripted",
                script,
                "--pipeline",
                "issue-to-pr",
                "--task",
                "04-py-two-files",
                "--json",
                "--out",
                out.to_str().unwrap(),
            ],
        ));
        assert_exit(&run, 0);
        let report = stdout_json(&run);
        assert_eq!(report["pipeline"], "issue-to-pr");
        let row = &rows(&report)[0];
        assert_eq!(row["solved"], solved, "{row:#}");
        assert_eq!(row["run_status"], "succeeded");
        let stage = |id: &str| {
            row["stages"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["id"] == id)
                .cloned()
                .unwrap_or_else(|| panic!("no stage {id}: {row:#}"))
        };
        assert_eq!(stage("review")["verdict"], "approve");
        assert_eq!(stage("docs")["status"], "succeeded");
        assert_eq!(stage("code.r2")["status"], "skipped");
    }
}

/// A model that fails makes the run unsolved, without a check, and the eval
/// goes on to the next task.
#[test]
fn a_failing_model_leaves_the_task_unsolved_and_the_eval_goes_on() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::Status(401, r#"{"error":{"message":"bad key"}}"#.to_owned()),
            Reply::Status(401, r#"{"error":{"message":"bad key"}}"#.to_owned()),
        ],
    ));
    let dir = tempfile::tempdir().unwrap();
    let run = eval_task_one_on_fake_model(
        &server,
        dir.path(),
        &fixtures(),
        &["--task", "02-py-off-by-one"],
    );
    let report = stdout_json(&run);
    assert_eq!(task_names(&report), ["01-py-one-line", "02-py-off-by-one"]);
    for row in rows(&report) {
        assert_eq!(row["solved"], false);
        assert_eq!(row["orch_exit"], 3, "{row:#}");
        assert!(row["check"].is_null(), "{row:#}");
        let reason = row["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("the run did not succeed (exit 3)"),
            "{reason}"
        );
    }
    assert_eq!(report["total"]["solved_pct"], 0.0);
}

/// Runs `git args…` in `dir` with a hermetic environment; its stdout.
fn git_in(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Task Author")
        .env("GIT_AUTHOR_EMAIL", "author@example.invalid")
        .env("GIT_COMMITTER_NAME", "Task Author")
        .env("GIT_COMMITTER_EMAIL", "author@example.invalid")
        .env("GIT_AUTHOR_DATE", "2024-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2024-01-01T00:00:00Z")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Issue 26.11: a task's `repo/` may be a git repository with history (not
/// only plain files or a bundle); the run starts from its `HEAD`, and the
/// check sees that history.
#[test]
fn a_task_whose_repo_is_a_git_repository_is_solved_from_its_head() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks");
    let task = tasks.join("01-py-one-line");
    copy_dir(&fixtures().join("01-py-one-line"), &task);
    let repo = task.join("repo");
    // Two commits: the task's files, then one more that the run must start from.
    std::fs::write(repo.join("NOTES.md"), "draft\n").unwrap();
    git_in(&repo, &["init", "-q", "-b", "trunk"]);
    git_in(&repo, &["add", "-A"]);
    git_in(&repo, &["commit", "-q", "-m", "one"]);
    std::fs::write(repo.join("NOTES.md"), "final\n").unwrap();
    git_in(&repo, &["commit", "-q", "-am", "two"]);
    let head = git_in(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    let mut check = std::fs::read_to_string(task.join("check.sh")).unwrap();
    check.push_str(
        "grep -q final NOTES.md\n[ \"$(git rev-list --count \"$ORCH_EVAL_BASE\")\" = 2 ]\n",
    );
    std::fs::write(task.join("check.sh"), check).unwrap();

    let run = output_logged(&mut eval(
        dir.path(),
        &tasks,
        &[
            "--scripted",
            "perfect",
            "--pipeline",
            fixtures().join("eval.yaml").to_str().unwrap(),
            "--keep",
            "--json",
            "--out",
            dir.path().join("results").to_str().unwrap(),
        ],
    ));
    assert_exit(&run, 0);
    let report = stdout_json(&run);
    let row = &rows(&report)[0];
    assert_eq!(row["solved"], true, "{row:#}");
    let work = PathBuf::from(row["workdir"].as_str().unwrap());
    let run_id = row["run_id"].as_str().unwrap();
    // The run's final branch sits on top of the task repository's HEAD.
    let checkout = work.join("check");
    assert_eq!(
        git_in(&checkout, &["rev-list", "--count", "HEAD"]).trim(),
        "3",
        "{row:#}"
    );
    assert!(
        git_in(
            &work.join("repo"),
            &["rev-list", &format!("orch/{run_id}/pr")]
        )
        .contains(&head)
    );
    // The task's own repository is left as it was.
    assert_eq!(git_in(&repo, &["rev-parse", "HEAD"]).trim(), head);
    assert_eq!(git_in(&repo, &["status", "--porcelain"]), "");
    std::fs::remove_dir_all(work).unwrap();
}

/// A task repository with uncommitted work is refused before anything runs
/// (the run starts from its `HEAD`; the change would be silently left out).
#[test]
fn a_task_repository_with_uncommitted_changes_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("tasks/dirty");
    copy_dir(&fixtures().join("01-py-one-line"), &task);
    let repo = task.join("repo");
    git_in(&repo, &["init", "-q"]);
    git_in(&repo, &["add", "-A"]);
    git_in(&repo, &["commit", "-q", "-m", "one"]);
    std::fs::write(repo.join("convert.py"), "# edited, not committed\n").unwrap();
    let run = output_logged(&mut eval(
        dir.path(),
        &dir.path().join("tasks"),
        &["--scripted", "perfect", "--json"],
    ));
    assert_exit(&run, 2);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains(&repo.display().to_string()), "{err}");
    assert!(err.contains("uncommitted changes (convert.py)"), "{err}");
}
