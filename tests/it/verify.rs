//! Verify gates end to end: `verify:` commands run in the lane after the
//! agent finishes; a failure goes back to the same agent with its output;
//! the stage succeeds only when verify passes, and says so in its record,
//! action log, commit trailers, the reviewer's hand-off and the PR body.

use crate::support::{
    FakeServer, Reply, Script, TestRepo, record_dir, stage_events, state_json, user_text,
    write_pipeline,
};
use serde_json::{Value, json};

const ISSUE: &str = "# add() subtracts\n\n`calc.add(2, 3)` returns -1; it should return 5.\n";
const CHECK: &str =
    "grep -q 'a + b' calc.py || { echo 'FAIL: add(2, 3) still returns -1'; exit 1; }";

fn buggy_repo() -> TestRepo {
    TestRepo::with_commit(
        &[("calc.py", "def add(a, b):\n    return a - b\n")],
        "calc 0.1",
    )
}

fn run(repo: &TestRepo, yaml: &str, server: &FakeServer) -> (i32, String) {
    let scratch = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(scratch.path(), "gated", yaml);
    crate::support::run_on_fake(repo, &pipeline, ISSUE, server)
}

fn code_stage(state: &Value) -> &Value {
    &state["stages"][0]
}

#[test]
fn a_failed_verify_goes_back_to_the_agent_and_the_second_finish_passes() {
    let repo = buggy_repo();
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    Reply::finish("c1", "Looked at it; all good.", None),
                    crate::support::fix_add("c2"),
                    Reply::finish("c3", "add() now adds.", None),
                ],
            )
            .agent(
                "review",
                vec![Reply::finish("r1", "Tests pass; fine.", Some("approve"))],
            ),
    );
    let yaml = format!(
        "stages:\n  code:\n    role: coder\n    verify: \"{CHECK}\"\n  review:\n    role: reviewer\n    needs: [code]\n"
    );
    let (code, run_id) = run(&repo, &yaml, &server);
    assert_eq!(code, 0);

    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 3);
    // The request after the first finish carries the failing output.
    let told = user_text(&reqs[1]);
    assert!(told.contains("FAIL: add(2, 3) still returns -1"), "{told}");
    assert!(told.contains("exited 1"), "{told}");

    let state = state_json(&repo, &run_id);
    let code = code_stage(&state);
    assert_eq!(code["status"], "succeeded");
    assert_eq!(code["summary"], "add() now adds.");
    let verify = &code["verify"];
    assert_eq!(verify["passed"], true);
    assert_eq!(verify["commands"], json!([CHECK]));
    let exits: Vec<Value> = verify["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0]["exit_code"].clone())
        .collect();
    assert_eq!(exits, [json!(1), json!(0)]);

    let record = record_dir(&repo, &run_id);
    let events = stage_events(&record, "code", "verify");
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["passed"], false);
    assert_eq!(events[1]["passed"], true);

    let msg = repo.git(&["log", "-1", "--format=%B", &format!("orch/{run_id}/code")]);
    assert!(msg.contains("Orch-Verify: pass"), "{msg}");
    // The reviewer is told the tests pass.
    let review_task = user_text(&server.requests_for("review")[0]);
    assert!(review_task.contains("Verify: pass"), "{review_task}");
    let pr = std::fs::read_to_string(record.join("pr.md")).unwrap();
    assert!(pr.contains("- **code**: pass"), "{pr}");
}

#[test]
fn a_verify_that_never_passes_fails_the_stage_and_keeps_its_work() {
    let repo = buggy_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call(
                "c1",
                "write_file",
                json!({"path": "NOTES.md", "content": "tried something\n"}),
            ),
            Reply::finish("c2", "Done.", None),
            Reply::finish("c3", "Still done.", None),
            Reply::finish("c4", "never served", None),
        ],
    ));
    let yaml = format!(
        "stages:\n  code:\n    role: coder\n    verify:\n      - \"true\"\n      - \"{CHECK}\"\n    verify_rounds: 1\n"
    );
    let (code, run_id) = run(&repo, &yaml, &server);
    assert_eq!(code, 1);
    assert_eq!(server.requests_for("code").len(), 3);
    assert_eq!(server.remaining("code"), 1);

    let state = state_json(&repo, &run_id);
    let code = code_stage(&state);
    assert_eq!(code["status"], "failed");
    let reason = code["reason"].as_str().unwrap();
    assert!(reason.contains("verify failed"), "{reason}");
    assert_eq!(code["verify"]["passed"], false);
    assert_eq!(code["verify"]["rounds"].as_array().unwrap().len(), 2);
    // Both commands ran each round; the first passed.
    assert_eq!(code["verify"]["rounds"][1][0]["exit_code"], 0);
    assert_eq!(code["verify"]["rounds"][1][1]["exit_code"], 1);

    let branch = format!("orch/{run_id}/code");
    assert_eq!(
        repo.git(&["show", &format!("{branch}:NOTES.md")]),
        "tried something\n"
    );
    let msg = repo.git(&["log", "-1", "--format=%B", &branch]);
    assert!(msg.contains("Orch-Verify: fail"), "{msg}");
    assert!(msg.contains("[failed]"), "{msg}");
}

#[test]
fn a_verify_command_runs_inside_the_stage_sandbox() {
    // What a verify command runs (tests, scripts) is the agent's work, so it
    // gets the bash tool's kernel sandbox: a write outside the lane fails.
    if orch::sandbox::availability().abi().is_none() {
        eprintln!("skipped: this kernel has no Landlock");
        return;
    }
    let repo = buggy_repo();
    let outside = tempfile::tempdir().unwrap();
    let canary = outside.path().join("escaped");
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            crate::support::fix_add("c1"),
            Reply::finish("c2", "add() now adds.", None),
        ],
    ));
    // The command ends with `true` so the gate passes either way: the
    // canary alone tells whether the write got out.
    let check = format!("touch {} ; {CHECK} ; true", canary.display());
    let yaml = format!("stages:\n  code:\n    role: coder\n    verify: \"{check}\"\n");
    let (code, run_id) = run(&repo, &yaml, &server);
    assert_eq!(code, 0);
    let events = stage_events(&record_dir(&repo, &run_id), "code", "verify");
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(!canary.exists(), "a verify command wrote outside the lane");
    let sandbox = events[0]["sandbox"].as_str().unwrap_or_default();
    assert!(sandbox.contains("landlock"), "{:?}", events[0]);
    assert_eq!(events[0]["passed"], true);
}

/// A repository whose `add` subtracts, with a Python test of it.
fn python_repo() -> TestRepo {
    TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            (
                "test_calc.py",
                "import calc\nassert calc.add(2, 3) == 5, 'add(2, 3) == %d' % calc.add(2, 3)\nprint('ok')\n",
            ),
        ],
        "calc 0.1",
    )
}

#[test]
fn a_same_size_edit_right_after_the_baseline_is_verified_from_source() {
    // issue 26.10: the baseline imports the buggy `calc.py`; the agent's fix
    // `a - b` → `a + b` keeps the file's size and lands within the same
    // second, so bytecode cached by the baseline would still look fresh to
    // Python and the gate would test the old code.
    let repo = python_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            crate::support::fix_add("c1"),
            Reply::finish("c2", "add() adds.", None),
        ],
    ));
    let yaml = "stages:\n  code:\n    role: coder\n    verify: python3 test_calc.py\n";
    let (code, run_id) = run(&repo, yaml, &server);
    let state = state_json(&repo, &run_id);
    let rec = code_stage(&state);
    assert_eq!(rec["baseline"]["runs"][0]["exit_code"], 1, "{rec}");
    assert_eq!(code, 0, "{rec}");
    assert_eq!(rec["verify"]["passed"], true, "{rec}");
    assert_eq!(
        rec["verify"]["rounds"].as_array().unwrap().len(),
        1,
        "{rec}"
    );
    // Neither the baseline nor the gate left a cache in the lane (its
    // commit holds every file there).
    let files = repo.git(&[
        "ls-tree",
        "-r",
        "--name-only",
        &format!("orch/{run_id}/code"),
    ]);
    assert!(!files.contains("__pycache__"), "{files}");
}

#[test]
fn the_gate_does_not_read_bytecode_the_agent_cached_before_its_edit() {
    // The agent runs the test itself (its bash writes `__pycache__`), then
    // makes the same-size fix within the same second: the gate still tests
    // the source.
    let repo = python_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call("c1", "bash", json!({"command": "python3 test_calc.py"})),
            crate::support::fix_add("c2"),
            Reply::finish("c3", "add() adds.", None),
        ],
    ));
    let yaml = "stages:\n  code:\n    role: coder\n    verify: python3 test_calc.py\n";
    let (code, run_id) = run(&repo, yaml, &server);
    let state = state_json(&repo, &run_id);
    let rec = code_stage(&state);
    assert_eq!(code, 0, "{rec}");
    assert_eq!(rec["verify"]["passed"], true, "{rec}");
    assert_eq!(
        rec["verify"]["rounds"].as_array().unwrap().len(),
        1,
        "{rec}"
    );
}
