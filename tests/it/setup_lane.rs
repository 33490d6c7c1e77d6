//! `orch setup --lane` end to end: the setup agent (scripted fake model)
//! prepares a scratch lane of a real repository, its verified install steps
//! are saved as `.orch/setup.sh`, and the next `orch run` prepares its lane
//! with them through the cached lane setup; an explicit `setup:` wins, and
//! without `--lane` nothing is saved.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, assert_exit, only_run_id, orch_with_model,
    record_dir, stage_events, stage_record, state_json, tool_results, write_issue, write_pipeline,
};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;

/// The install step: a marker inside the directory it runs in.
const INSTALL: &str = "mkdir -p .deps && echo ok > .deps/ready && echo \"setup in $PWD\"";
const ONE_STAGE: &str = "stages:\n  code:\n    role: coder\n";

fn step(command: &str, risk: &str, check: &str) -> Value {
    json!({"command": command, "why": format!("why: {command}"), "risk": risk, "check": check})
}

fn repo() -> TestRepo {
    TestRepo::with_commit(
        &[
            (".gitignore", ".deps/\n.orch/\n"),
            ("package-lock.json", "{\"lockfileVersion\": 3}\n"),
        ],
        "app",
    )
}

/// A setup model whose plan is `steps` (then `more` replies).
fn setup_server(steps: Vec<Value>, more: Vec<Reply>) -> FakeServer {
    let mut replies = vec![
        Reply::tool_call("s1", "run_command", json!({"command": "ls -a"})),
        Reply::tool_call("s2", "plan", json!({"steps": steps, "next": []})),
    ];
    replies.extend(more);
    FakeServer::start(Script::new().agent("setup", replies))
}

/// `orch setup <args>` in `dir`, records under `scratch`.
fn setup(dir: &Path, scratch: &Path, server: &FakeServer, args: &[&str]) -> Output {
    let out = orch_with_model(&server.base_url)
        .current_dir(dir)
        .env("ORCH_SETUP_DIR", scratch.join("records"))
        .env("ORCH_CONFIG_DIR", scratch.join("config"))
        .arg("setup")
        .args(args)
        .output()
        .unwrap();
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    out
}

/// A one-stage `orch run` whose agent reads the marker; the exit code, the
/// stage's setup record and what `cat .deps/ready` showed.
fn run_reading_marker(repo: &TestRepo, yaml: &str) -> (i32, Value, String) {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call("c1", "bash", json!({"command": "cat .deps/ready"})),
            Reply::finish("c2", "Read it.", None),
        ],
    ));
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# Look\n\nRead the marker.\n");
    let pipeline = write_pipeline(scratch.path(), "lane", yaml);
    let out = OrchRun::with_model_env(&server.base_url, &pipeline, repo)
        .issue(&issue)
        .output();
    let run_id = only_run_id(&repo.path);
    let state = state_json(repo, &run_id);
    let seen = tool_results(&server.requests_for("code")[1]).join("\n");
    let setup = stage_record(&state, "code")["setup"].clone();
    let record = record_dir(repo, &run_id);
    let log = std::fs::read_to_string(record.join("stages/code/setup.log")).unwrap_or_default();
    let origin = stage_events(&record, "code", "lane_setup")
        .first()
        .map(|e| e["origin"].to_string())
        .unwrap_or_default();
    let seen = format!("{seen}\n{log}\norigin: {origin}");
    (out.status.code().unwrap_or(-1), setup, seen)
}

#[test]
fn setup_lane_saves_the_verified_install_steps_and_the_next_lane_runs_them() {
    let repo = repo();
    let scratch = tempfile::tempdir().unwrap();
    let server = setup_server(
        vec![
            step("ls", "read", "true"),
            step(INSTALL, "install", "test -f .deps/ready"),
        ],
        vec![],
    );
    let out = setup(&repo.path, scratch.path(), &server, &["--lane", "--yes"]);
    assert_exit(&out, 0);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let saved_at = repo.path.join(".orch/setup.sh");
    assert!(
        text.contains(&format!(
            "lane setup saved to {}: {INSTALL}",
            saved_at.display()
        )),
        "{text}"
    );
    // The agent worked in a scratch lane, told so, with the default goal;
    // the user's tree got no marker and the lane is gone.
    let reqs = server.requests();
    let system = reqs[0].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(system.contains("fresh git worktree (a lane)"), "{system}");
    let goal = reqs[0].messages()[1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        goal.contains("Goal: install this project's dependencies"),
        "{goal}"
    );
    assert!(goal.contains(".git/orch/pool/lane-"), "{goal}");
    assert!(!repo.path.join(".deps").exists());
    let worktrees = repo.worktrees_but_pool();
    assert_eq!(worktrees.lines().count(), 1, "{worktrees}");
    let saved = std::fs::read_to_string(&saved_at).unwrap();
    assert!(
        saved.starts_with("# Saved by `orch setup --lane`"),
        "{saved}"
    );
    assert!(saved.ends_with(&format!("\n{INSTALL}\n")), "{saved}");

    // The next run's lane runs the saved command through the cached setup.
    let (code, setup, seen) = run_reading_marker(&repo, ONE_STAGE);
    assert_eq!(code, 0);
    assert_eq!(setup["ran"], json!(true), "{setup}");
    assert_eq!(setup["passed"], json!(true), "{setup}");
    assert_eq!(setup["command"], json!(saved.trim()), "{setup}");
    assert_eq!(setup["lockfiles"], json!(["package-lock.json"]), "{setup}");
    assert!(seen.contains("ok") && seen.contains("setup in "), "{seen}");
    assert!(
        seen.contains("/.orch/setup.sh (saved by `orch setup --lane`)"),
        "{seen}"
    );
}

#[test]
fn an_explicit_setup_wins_over_the_saved_one() {
    let repo = repo();
    repo.write(".orch/setup.sh", format!("# saved\n{INSTALL}\n"));
    let yaml = format!("setup: \"echo explicit\"\n{ONE_STAGE}");
    let (code, setup, seen) = run_reading_marker(&repo, &yaml);
    assert_eq!(code, 0);
    assert_eq!(setup["command"], json!("echo explicit"), "{setup}");
    assert!(seen.contains("No such file"), "{seen}");
}

#[test]
fn without_lane_nothing_is_saved_and_the_next_lane_has_no_setup() {
    let repo = repo();
    let scratch = tempfile::tempdir().unwrap();
    let server = setup_server(
        vec![step(INSTALL, "install", "test -f .deps/ready")],
        vec![],
    );
    // In a subdirectory: the root of a main worktree takes no new entries
    // under the sandbox (its `.git` stays read-only), see docs/sandbox.md.
    let sub = repo.path.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let out = setup(&sub, scratch.path(), &server, &["deps", "--yes"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains("lane setup"), "{text}");
    // It ran where it was started, and saved nothing.
    assert!(sub.join(".deps/ready").exists());
    assert!(!repo.path.join(".orch").exists());
    let system = server.requests()[0].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!system.contains("fresh git worktree"), "{system}");
    let (code, setup, seen) = run_reading_marker(&repo, ONE_STAGE);
    assert_eq!(code, 0);
    assert_eq!(setup, Value::Null);
    assert!(seen.contains("No such file"), "{seen}");
}

/// In a lane an install step may write only the lane: one that writes
/// outside fails (under Landlock), the model's next plan is what is saved.
#[test]
fn a_lane_install_step_cannot_write_outside_the_lane() {
    let repo = repo();
    let scratch = tempfile::tempdir().unwrap();
    let outside = scratch.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let escape = format!("touch {}/escaped", outside.display());
    let server = setup_server(
        vec![step(
            &escape,
            "install",
            &format!("test -f {}/escaped", outside.display()),
        )],
        vec![Reply::tool_call(
            "s3",
            "plan",
            json!({"steps": [step(INSTALL, "install", "test -f .deps/ready")], "next": []}),
        )],
    );
    let out = setup(&repo.path, scratch.path(), &server, &["--lane", "--yes"]);
    let records = scratch.path().join("records");
    let id = std::fs::read_dir(&records)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .file_name();
    let log = std::fs::read_to_string(records.join(id).join("log.jsonl")).unwrap();
    if !log.contains("\"sandbox\":\"landlock") {
        eprintln!("skipped: Landlock is not enforced here");
        return;
    }
    assert_exit(&out, 0);
    assert!(!outside.join("escaped").exists());
    let saved = std::fs::read_to_string(repo.path.join(".orch/setup.sh")).unwrap();
    assert!(saved.ends_with(&format!("\n{INSTALL}\n")), "{saved}");
    assert!(!saved.contains("escaped"), "{saved}");
}
