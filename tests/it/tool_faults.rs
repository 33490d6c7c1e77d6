//! Fatal tool errors end to end: a tool fault that is orch's own (here a
//! tool task that panics, through the debug-build trigger
//! `ORCH_TEST_PANIC_TOOL`) ends the stage as an internal error with exit 5,
//! and the model is never told.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, record_dir, stage_events, stdout_json,
    write_issue, write_pipeline,
};
use serde_json::json;

#[test]
fn a_panicking_tool_task_fails_the_stage_with_exit_5_and_the_model_never_sees_it() {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let before = repo.snapshot();
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# Read\n\nRead the README.\n");
    let pipeline = write_pipeline(
        scratch.path(),
        "solo",
        "name: solo\nstages:\n  work:\n    role: coder\n    task: \"{{ issue }}\"\n",
    );
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_call("c1", "read_file", json!({"path": "README.md"})),
            Reply::finish("c2", "read it", None),
        ],
    ));
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .env("ORCH_TEST_PANIC_TOOL", "read_file")
        .json()
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(5),
        "internal error exit code: {stderr}"
    );
    assert_eq!(server.violations(), Vec::<String>::new());
    // One request: the tool's result (or any word of the panic) never went back.
    let reqs = server.requests_for("work");
    assert_eq!(reqs.len(), 1, "the model was asked again after the fault");

    let j = stdout_json(&out);
    assert_eq!(j["status"], "failed");
    assert_eq!(j["stages"][0]["status"], "failed");
    let reason = j["stages"][0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with(
            "internal error: failed to run the tool `read_file`: the tool's task panicked"
        ),
        "{reason}"
    );
    let run_id = j["run_id"].as_str().unwrap();
    let record = record_dir(&repo, run_id);
    let faults = stage_events(&record, "work", "tool_fault");
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0]["call_id"], "c1");
    assert!(
        stage_events(&record, "work", "tool").is_empty(),
        "a faulted call is not a tool result"
    );
    assert_eq!(repo.snapshot(), before);
}
