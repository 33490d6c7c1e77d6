//! Stage outcomes that cannot lie, end to end through the real binary: a
//! stage succeeds by `finish`, or by a text answer only for roles whose
//! result is text; empty, cut-off and text-only replies get one nudge and
//! then fail the stage (exit 1); a reviewer's verdict is read from its text
//! only when unambiguous. Tool calls written as text run like native ones;
//! repeated calls are caught.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, assert_exit, only_run_id, read_jsonl, record_dir,
    stage_events, state_json, tool_results, user_text, write_issue, write_pipeline,
};
use serde_json::{Value, json};
use std::path::PathBuf;

const ISSUE: &str = "# add() subtracts\n\n`calc.add(2, 3)` returns -1; it should return 5.\n";

fn buggy_repo() -> TestRepo {
    TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            ("README.md", "# calc\n"),
        ],
        "calc 0.1",
    )
}

/// A one-stage pipeline `solo` whose only stage `code` runs `role`.
fn solo_pipeline(dir: &std::path::Path, role: &str, extra: &str) -> PathBuf {
    write_pipeline(
        dir,
        "solo",
        &format!("stages:\n  code:\n    role: {role}\n    task: Fix it.\n{extra}"),
    )
}

/// Runs `pipeline` against `server` and returns the exit code and the run id.
fn run(
    repo: &TestRepo,
    pipeline: impl AsRef<std::ffi::OsStr>,
    server: &FakeServer,
) -> (i32, String) {
    crate::support::run_on_fake(repo, pipeline, ISSUE, server)
}

fn stage<'a>(state: &'a Value, id: &str) -> &'a Value {
    crate::support::stage_record(state, id)
}

#[test]
fn a_coder_answering_in_text_is_nudged_once_then_fails() {
    let repo = buggy_repo();
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text("I fixed add()."),
            Reply::text("Really, it is fixed now."),
        ],
    ));
    let (code, run_id) = run(&repo, solo_pipeline(dir.path(), "coder", ""), &server);
    assert_eq!(code, 1);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 2);
    assert!(
        user_text(&reqs[1]).contains("Call `finish` with a summary, or a tool"),
        "{}",
        user_text(&reqs[1])
    );
    let state = state_json(&repo, &run_id);
    let code_stage = stage(&state, "code");
    assert_eq!(code_stage["status"], "failed");
    assert!(
        code_stage["reason"]
            .as_str()
            .unwrap()
            .contains("without calling `finish`"),
        "{code_stage}"
    );
    let msg = repo.git(&["log", "-1", "--format=%s", &format!("orch/{run_id}/code")]);
    assert!(msg.contains("[failed]"), "{msg}");
}

#[test]
fn an_empty_reply_is_nudged_once_then_fails() {
    let repo = buggy_repo();
    let dir = tempfile::tempdir().unwrap();
    // Each empty streamed reply is fetched once more without streaming
    // (issue 26.8); empty there too, it is the model's answer.
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text(""),
            Reply::text(""),
            Reply::text(" \n"),
            Reply::text(" \n"),
        ],
    ));
    let (code, run_id) = run(&repo, solo_pipeline(dir.path(), "coder", ""), &server);
    assert_eq!(code, 1);
    let reqs = server.requests_for("code");
    let streamed: Vec<bool> = reqs.iter().map(|r| r.body["stream"] == true).collect();
    assert_eq!(streamed, [true, false, true, false], "streaming stays on");
    assert!(user_text(&reqs[2]).contains("Your reply was empty"));
    let state = state_json(&repo, &run_id);
    assert_eq!(stage(&state, "code")["status"], "failed");
    assert!(
        stage(&state, "code")["reason"]
            .as_str()
            .unwrap()
            .contains("empty reply")
    );
    assert_eq!(state["status"], "failed");
}

#[test]
fn a_reply_cut_off_at_the_output_limit_is_nudged_once_then_fails() {
    let repo = buggy_repo();
    let dir = tempfile::tempdir().unwrap();
    let cut = |text: &str| {
        Reply::Raw(
            json!({
                "id": "x", "object": "chat.completion", "created": 0, "model": "fake-model",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
            })
            .to_string(),
        )
    };
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![cut("I will now explain at len"), cut("Again I expl")],
    ));
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let out = OrchRun::new(solo_pipeline(dir.path(), "explore", ""), &repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .args(["--no-stream"])
        .output();
    assert_exit(&out, 1);
    let run_id = only_run_id(&repo.path);
    assert!(
        user_text(&server.requests_for("code")[1]).contains("cut off at the output token limit")
    );
    let state = state_json(&repo, &run_id);
    let reason = stage(&state, "code")["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("finish_reason: length"), "{reason}");
}

#[test]
fn an_explore_role_answers_in_text() {
    let repo = buggy_repo();
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::text("add() is in calc.py:1 and subtracts.")],
    ));
    let (code, run_id) = run(&repo, solo_pipeline(dir.path(), "explore", ""), &server);
    assert_eq!(code, 0);
    let state = state_json(&repo, &run_id);
    assert_eq!(stage(&state, "code")["status"], "succeeded");
    assert_eq!(
        stage(&state, "code")["summary"],
        "add() is in calc.py:1 and subtracts."
    );
}

#[test]
fn a_reviewer_without_a_verdict_fails_the_run() {
    let repo = buggy_repo();
    let server = FakeServer::start(
        Script::new()
            .agent("code", vec![Reply::finish("c1", "Fixed add().", None)])
            .agent(
                "review",
                vec![
                    Reply::text("The change looks fine to me."),
                    Reply::text("Yes, it is fine."),
                ],
            ),
    );
    let (code, run_id) = run(&repo, "issue-to-pr", &server);
    assert_eq!(code, 1);
    assert!(user_text(&server.requests_for("review")[1]).contains("a verdict"));
    let state = state_json(&repo, &run_id);
    let review = stage(&state, "review");
    assert_eq!(review["status"], "failed");
    assert_eq!(review["verdict"], Value::Null);
    assert!(
        review["reason"].as_str().unwrap().contains("no verdict"),
        "{review}"
    );
    assert_ne!(stage(&state, "docs")["status"], "succeeded");
    assert!(server.requests_for("docs").is_empty());
}

#[test]
fn a_verdict_in_the_reviewers_text_is_accepted_and_recorded_as_from_text() {
    let repo = buggy_repo();
    let server = FakeServer::start(
        Script::new()
            .agent("code", vec![Reply::finish("c1", "Fixed add().", None)])
            .agent(
                "review",
                // Prose: a bare `{"verdict", "summary"}` object is now a
                // `finish` call (schema fit, tests/it/small_model.rs).
                vec![Reply::text("add() is right now.\n\nVERDICT: approve")],
            )
            .agent(
                "docs",
                vec![Reply::finish("d1", "Nothing to document.", None)],
            ),
    );
    let (code, run_id) = run(&repo, "issue-to-pr", &server);
    assert_eq!(code, 0);
    // One review request: the verdict was read without a nudge.
    assert_eq!(server.requests_for("review").len(), 1);
    // The reviewer was told no verify command ran.
    assert!(user_text(&server.requests_for("review")[0]).contains("Verify: none set"));
    let state = state_json(&repo, &run_id);
    let review = stage(&state, "review");
    assert_eq!(review["status"], "succeeded");
    assert_eq!(review["verdict"], "approve");
    assert_eq!(review["verdict_from_text"], true);
    assert_eq!(stage(&state, "code")["verdict_from_text"], Value::Null);
    let record = record_dir(&repo, &run_id);
    let ev = stage_events(&record, "review", "verdict_from_text");
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0]["verdict"], "approve");
    let pr = std::fs::read_to_string(record.join("pr.md")).unwrap();
    assert!(pr.contains("No verify command was set"), "{pr}");
    assert!(pr.contains("read from the reviewer's text"), "{pr}");
}

/// The `read_file`/`bash` results of the tool messages in a request.
fn results_of(server: &FakeServer, i: usize) -> Vec<String> {
    tool_results(&server.requests_for("code")[i])
}

#[test]
fn tool_calls_written_as_text_run_like_native_ones() {
    let repo = buggy_repo();
    // Text recovery itself: a `native` profile, so no turn switches to
    // constrained calls (`tool_calling` defaults to `auto`; tests/it/constrained.rs).
    repo.write(
        ".orch/orch.toml",
        "default_profile = \"p\"\n\n[profiles.p]\ntool_calling = \"native\"\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text(r#"<tool_call>{"name": "read_file", "arguments": {"path": "calc.py"}}</tool_call>"#),
            Reply::text(r#"<tools>{"name": "read_file", "arguments": {"path": "README.md"}}</tools>"#),
            Reply::text("```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"echo from-fenced-$((6*7))\"}}\n```"),
            Reply::text(r#"{"name": "write_file", "arguments": {"path": "NOTE.txt", "content": "bare json\n"}}"#),
            Reply::text(r#"<tool_call>{"name": "finish", "arguments": {"summary": "Read and wrote."}}</tool_call>"#),
        ],
    ));
    let (code, run_id) = run(&repo, solo_pipeline(dir.path(), "coder", ""), &server);
    assert_eq!(code, 0);
    // Each tool's real output reaches the next request.
    assert!(
        results_of(&server, 1)[0].contains("return a - b"),
        "{:?}",
        results_of(&server, 1)
    );
    assert!(results_of(&server, 2)[1].contains("# calc"));
    assert!(results_of(&server, 3)[2].contains("from-fenced-42"));
    assert!(results_of(&server, 4)[3].contains("NOTE.txt"));
    let note = repo.git(&["show", &format!("orch/{run_id}/code:NOTE.txt")]);
    assert_eq!(note, "bare json\n");
    let state = state_json(&repo, &run_id);
    assert_eq!(stage(&state, "code")["status"], "succeeded");
    assert_eq!(stage(&state, "code")["summary"], "Read and wrote.");
    let record = record_dir(&repo, &run_id);
    let recovered = stage_events(&record, "code", "tool_calls_recovered");
    let formats: Vec<&str> = recovered
        .iter()
        .map(|e| e["format"].as_str().unwrap())
        .collect();
    assert_eq!(
        formats,
        [
            "tool_call_tags",
            "tools_tags",
            "fenced_json",
            "bare_json",
            "tool_call_tags"
        ]
    );
    assert!(recovered.iter().all(|e| e["recovered_from"] == "text"));
}

/// Prose around a call is not run; a call of a tool that is not offered
/// is recovered only to get the tool error (nothing runs).
#[test]
fn prose_with_a_json_example_and_unoffered_tools_are_not_run() {
    let repo = buggy_repo();
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text("To run a command you would send:\n```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"touch pwned\"}}\n```\nThat is how it works."),
            Reply::text(r#"<tool_call>{"name": "delete_repo", "arguments": {"path": "."}}</tool_call>"#),
            Reply::text("I cannot do it."),
            Reply::text("I still cannot do it."),
        ],
    ));
    let (code, run_id) = run(&repo, solo_pipeline(dir.path(), "coder", ""), &server);
    assert_eq!(code, 1);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 4);
    assert!(tool_results(&reqs[1]).is_empty());
    let results = tool_results(&reqs[2]);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        results[0].starts_with("error: delete_repo: unknown tool"),
        "{results:?}"
    );
    let record = record_dir(&repo, &run_id);
    let recovered = stage_events(&record, "code", "tool_calls_recovered");
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0]["tool_calls"][0]["name"], "delete_repo");
    let files = repo.git(&[
        "ls-tree",
        "-r",
        "--name-only",
        &format!("orch/{run_id}/code"),
    ]);
    assert!(!files.contains("pwned"), "{files}");
}

#[test]
fn text_tool_calls_off_leaves_the_text_a_text_answer() {
    let repo = buggy_repo();
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::text(
            r#"<tool_call>{"name": "read_file", "arguments": {"path": "calc.py"}}</tool_call>"#,
        )],
    ));
    let pipeline = solo_pipeline(dir.path(), "explore", "    text_tool_calls: false\n");
    let (code, run_id) = run(&repo, pipeline, &server);
    // explore's result is text: the call text is its (useless) answer.
    assert_eq!(code, 0);
    assert_eq!(server.requests_for("code").len(), 1);
    let record = record_dir(&repo, &run_id);
    assert!(stage_events(&record, "code", "tool_calls_recovered").is_empty());
}

#[test]
fn three_identical_successful_calls_are_told_then_the_stage_stops() {
    let repo = buggy_repo();
    let dir = tempfile::tempdir().unwrap();
    let log = |id: &str| Reply::tool_call(id, "bash", json!({"command": "git log --oneline"}));
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            log("a"),
            log("b"),
            log("c"),
            log("d"),
            Reply::finish("e", "never", None),
        ],
    ));
    let (code, run_id) = run(&repo, solo_pipeline(dir.path(), "coder", ""), &server);
    assert_eq!(code, 1);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 4, "the 4th identical call stops the stage");
    assert_eq!(server.remaining("code"), 1);
    let results = tool_results(&reqs[3]);
    assert!(!results[1].contains("repeating yourself"));
    assert!(
        results[2].contains("calc 0.1"),
        "the 3rd call still ran: {}",
        results[2]
    );
    assert!(
        results[2].contains("you are repeating yourself"),
        "{}",
        results[2]
    );
    let state = state_json(&repo, &run_id);
    let reason = stage(&state, "code")["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("same `bash` call 4 times"), "{reason}");
    let record = record_dir(&repo, &run_id);
    assert_eq!(stage_events(&record, "code", "stuck").len(), 1);
}

#[test]
fn the_same_call_twice_in_one_turn_runs_once() {
    let repo = buggy_repo();
    let dir = tempfile::tempdir().unwrap();
    let append = json!({"command": "echo once >> log.txt"});
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_calls(&[("a", "bash", append.clone()), ("b", "bash", append)]),
            Reply::finish("c", "Appended.", None),
        ],
    ));
    let (code, run_id) = run(&repo, solo_pipeline(dir.path(), "coder", ""), &server);
    assert_eq!(code, 0);
    let results = tool_results(&server.requests_for("code")[1]);
    assert!(
        results[1].contains("not run: you are repeating yourself"),
        "{results:?}"
    );
    assert_eq!(
        repo.git(&["show", &format!("orch/{run_id}/code:log.txt")]),
        "once\n"
    );
}

/// Runs a coder whose first three calls are `calls` (each `exit 3`), then a
/// `finish` that must never be reached: the stage stops as stuck after the
/// third identical failure. The run's record, for more checks.
fn stuck_on_three_failures(calls: [Reply; 3]) -> (TestRepo, String) {
    let repo = buggy_repo();
    let dir = tempfile::tempdir().unwrap();
    let mut replies = Vec::from(calls);
    replies.push(Reply::finish("d", "never", None));
    let server = FakeServer::start(Script::new().agent("code", replies));
    let (code, run_id) = run(&repo, solo_pipeline(dir.path(), "coder", ""), &server);
    assert_eq!(code, 1);
    assert_eq!(server.requests_for("code").len(), 3);
    let state = state_json(&repo, &run_id);
    let reason = stage(&state, "code")["reason"].as_str().unwrap().to_owned();
    assert!(
        reason.contains("same failing `bash` call 3 times"),
        "{reason}"
    );
    (repo, run_id)
}

#[test]
fn a_failing_bash_exit_counts_for_the_identical_failure_rule() {
    let fail = |id: &str| Reply::tool_call(id, "bash", json!({"command": "exit 3"}));
    let (repo, run_id) = stuck_on_three_failures([fail("a"), fail("b"), fail("c")]);
    let record = record_dir(&repo, &run_id);
    let tools = read_jsonl(&record.join("stages/code/actions.jsonl"));
    assert_eq!(
        tools
            .iter()
            .filter(|e| e["event"] == "tool" && e["exit_code"] == 3)
            .count(),
        3
    );
}

#[test]
fn the_identical_failure_rule_ignores_spacing_in_the_arguments() {
    // issue 26.7: the same failing call written with different JSON spacing
    // is the same call, as for the repeat rule.
    stuck_on_three_failures([
        Reply::raw_tool_call("a", "bash", r#"{"command":"exit 3"}"#),
        Reply::raw_tool_call("b", "bash", r#"{ "command": "exit 3" }"#),
        Reply::raw_tool_call("c", "bash", "{\n  \"command\" :  \"exit 3\"\n}"),
    ]);
}
