//! What orch writes to its two streams when they are not a terminal: a
//! reader that closes stdout early (`orch log last | head -1`) ends orch
//! quietly with exit 0, and stderr redirected to a file gets no ANSI colour.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, assert_exit, orch, record_dir, stdout_json,
    write_issue, write_pipeline,
};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Output that cannot fit in a pipe (64 KiB on Linux) plus what `head` reads
/// at once, so the writer really meets a closed pipe.
const LONG_OUTPUT: usize = 1 << 20;

/// How many times each pipeline is run: the failure this guards against was
/// a race that showed in 1 to 4 of 10 tries.
const TRIES: usize = 50;

/// A repository with one finished single-stage run; returns it and the run id.
fn repo_with_a_run() -> (TestRepo, String) {
    let repo = TestRepo::new();
    repo.write("notes.txt", "one\n");
    repo.commit_all("base");
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        tmp.path(),
        "p",
        "name: p\nstages:\n  code:\n    role: coder\n",
    );
    let issue = write_issue(tmp.path(), "# add a line\n");
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call(
                "e",
                "edit_file",
                json!({"path": "notes.txt", "old_string": "one", "new_string": "one\ntwo"}),
            ),
            Reply::finish("f", "Added a line.", None),
        ],
    ));
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .output();
    assert_exit(&out, 0);
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    (repo, run_id)
}

/// Runs `orch <args>` in `repo` as `orch <args> | head -1` under bash with
/// `pipefail`, so the exit status is orch's own (head exits 0). The
/// environment is the one [`orch`] gives the binary.
fn piped_to_head(repo: &Path, args: &[&str]) -> Output {
    let template = orch();
    let mut sh = Command::new("bash");
    sh.env_clear();
    for (k, v) in template.get_envs() {
        if let Some(v) = v {
            sh.env(k, v);
        }
    }
    sh.arg("-c")
        .arg(r#"set -o pipefail; "$0" "$@" | head -1"#)
        .arg(template.get_program())
        .args(args)
        .current_dir(repo)
        .stdin(Stdio::null());
    sh.output().expect("run bash")
}

/// Runs the pipeline [`TRIES`] times; each must exit 0 with nothing on
/// stderr and exactly `first_line` on stdout.
fn assert_quiet_end_every_time(repo: &Path, args: &[&str], first_line: &str) {
    for i in 0..TRIES {
        let out = piped_to_head(repo, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "try {i}: `orch {}` | head -1 exit status; stderr: {stderr}",
            args.join(" ")
        );
        assert!(stderr.is_empty(), "try {i}: nothing on stderr: {stderr}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{first_line}\n")
        );
    }
}

#[test]
fn log_and_runs_piped_into_head_end_with_exit_0_and_nothing_on_stderr() {
    let (repo, run_id) = repo_with_a_run();
    let record = record_dir(&repo, &run_id);

    // A long action log: the stage's own events, repeated.
    let log = record.join("stages/code/actions.jsonl");
    let events = std::fs::read_to_string(&log).unwrap();
    assert!(!events.is_empty(), "the run logged actions");
    let long = events.repeat(LONG_OUTPUT / events.len() + 1);
    std::fs::write(&log, &long).unwrap();
    let full = orch()
        .current_dir(&repo.path)
        .args(["log", "last"])
        .output()
        .unwrap();
    assert_exit(&full, 0);
    // Well past a pipe's 64 KiB buffer, so `head -1` really closes it early
    // (the readable form is shorter than the raw events it renders).
    assert!(full.stdout.len() > LONG_OUTPUT / 8, "the log is long");
    assert_quiet_end_every_time(&repo.path, &["log", "last"], "=== code (coder)");
    // The raw events too (written as one block, not line by line).
    assert_quiet_end_every_time(
        &repo.path,
        &["log", "last", "--json"],
        events.lines().next().unwrap(),
    );

    // Many runs: copies of the run's state under older ids (so `last` is
    // still the real run).
    let state: Value =
        serde_json::from_slice(&std::fs::read(record.join("state.json")).unwrap()).unwrap();
    let runs = record.parent().unwrap();
    let copies = 3000;
    for n in 0..copies {
        let id = format!("19990101-000000-{n:04}");
        let mut copy = state.clone();
        copy["run_id"] = json!(id);
        std::fs::create_dir(runs.join(&id)).unwrap();
        std::fs::write(
            runs.join(&id).join("state.json"),
            serde_json::to_vec(&copy).unwrap(),
        )
        .unwrap();
    }
    let limit = (copies + 1).to_string();
    let full = orch()
        .current_dir(&repo.path)
        .args(["runs", "--limit", &limit])
        .output()
        .unwrap();
    assert_exit(&full, 0);
    let table = String::from_utf8_lossy(&full.stdout).into_owned();
    assert_eq!(table.lines().count(), copies + 2, "a header and every run");
    assert!(
        table.len() > 64 * 1024 + 8 * 1024,
        "the table overflows a pipe"
    );
    assert_quiet_end_every_time(
        &repo.path,
        &["runs", "--limit", &limit],
        table.lines().next().unwrap(),
    );
}

#[test]
fn stderr_redirected_to_a_file_holds_no_escape_byte() {
    let repo = TestRepo::new();
    repo.write("notes.txt", "one\n");
    repo.commit_all("base");
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        tmp.path(),
        "p",
        "name: p\nstages:\n  code:\n    role: coder\n",
    );
    let issue = write_issue(tmp.path(), "# add a line\n");
    // A failing first reply makes the client log a retry warning.
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::Status(500, "try again".into()),
            Reply::tool_call(
                "e",
                "edit_file",
                json!({"path": "notes.txt", "old_string": "one", "new_string": "one\ntwo"}),
            ),
            Reply::finish("f", "Added a line.", None),
        ],
    ));
    let log_path = tmp.path().join("stderr.log");
    let log_file = std::fs::File::create(&log_path).unwrap();
    let mut cmd = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .env("ORCH_LOG", "debug")
        .env("ORCH_RETRY_BASE_MS", "1")
        .command();
    let status = cmd.stderr(log_file).stdout(Stdio::null()).status().unwrap();
    assert_eq!(status.code(), Some(0));
    let bytes = std::fs::read(&log_path).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains("WARN") && text.contains("DEBUG"),
        "the run logged warnings and debug lines: {text}"
    );
    assert!(
        text.contains("orch: stage code (coder) started"),
        "progress lines: {text}"
    );
    assert!(
        !bytes.contains(&0x1b),
        "no ESC byte in a redirected stderr: {text:?}"
    );
}
