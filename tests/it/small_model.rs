//! What a small local model meant, recovered and no more (issue 28, point
//! 4), end to end through the real binary against the scripted server: a
//! bare arguments object without a tool name is the call of the one offered
//! tool whose schema it fits exactly (`recovered_from: schema_fit`); a
//! call naming a tool that does not exist, native or written as text, gets
//! a tool error listing the offered tools with their required arguments.

use crate::support::{
    FakeServer, Reply, Script, TestRepo, record_dir, stage_events, stage_record, state_json,
    tool_results,
};
use serde_json::json;

fn repo() -> TestRepo {
    crate::support::median_stub_repo()
}

/// Runs a one-stage `code` pipeline (role `coder`) against `server`; the
/// exit code and the run id.
fn run(repo: &TestRepo, server: &FakeServer) -> (i32, String) {
    crate::support::run_median_stage(repo, server, "coder")
}

const SOLVED: &str = "def median(xs):\n    s = sorted(xs)\n    n = len(s)\n    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\n";

/// A native `write_file` of [`SOLVED`] to `solution.py`.
fn write_solved() -> Reply {
    Reply::tool_call(
        "w1",
        "write_file",
        json!({"path": "solution.py", "content": SOLVED}),
    )
}

#[test]
fn finish_arguments_without_the_tool_name_finish_the_stage() {
    let repo = repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            write_solved(),
            // What Qwen2.5-Coder-1.5B wrote: finish's arguments, no name.
            Reply::text(
                r#"{"summary": "Resolved the issue by implementing median.", "verdict": "approve"}"#,
            ),
        ],
    ));
    let (code, run_id) = run(&repo, &server);
    assert_eq!(code, 0);
    assert_eq!(server.requests_for("code").len(), 2, "no nudge");
    let state = state_json(&repo, &run_id);
    let stage = stage_record(&state, "code");
    assert_eq!(stage["status"], "succeeded", "{stage}");
    assert_eq!(
        stage["summary"],
        "Resolved the issue by implementing median."
    );
    let record = record_dir(&repo, &run_id);
    let recovered = stage_events(&record, "code", "tool_calls_recovered");
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert_eq!(recovered[0]["recovered_from"], "schema_fit");
    assert_eq!(recovered[0]["format"], "bare_json");
    assert_eq!(recovered[0]["tool_calls"][0]["name"], "finish");
    let file = repo.git(&["show", &format!("orch/{run_id}/code:solution.py")]);
    assert_eq!(file, SOLVED);
}

#[test]
fn a_nameless_object_that_fits_no_tool_stays_text() {
    let repo = repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text(r#"{"summary": "done", "confidence": 0.9}"#),
            Reply::text(r#"{"summary": "done", "confidence": 0.9}"#),
        ],
    ));
    let (code, run_id) = run(&repo, &server);
    assert_eq!(code, 1);
    let record = record_dir(&repo, &run_id);
    assert!(stage_events(&record, "code", "tool_calls_recovered").is_empty());
    assert_eq!(stage_events(&record, "code", "nudge").len(), 1);
}

#[test]
fn a_tool_that_does_not_exist_gets_the_offered_tools_with_their_arguments() {
    let repo = repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            // Native, then written as text: the function's name as the tool's.
            Reply::tool_call(
                "u1",
                "digitSum",
                json!({"solution.py": {"content": "def digitSum(n): ..."}}),
            ),
            Reply::text(
                r#"{"name": "median", "arguments": {"solution.py": {"content": "def median(xs): ..."}}}"#,
            ),
            write_solved(),
            Reply::finish("f1", "Implemented median.", None),
        ],
    ));
    let (code, run_id) = run(&repo, &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 4);
    for (i, name) in [(1, "digitSum"), (2, "median")] {
        let result = tool_results(&reqs[i]).pop().unwrap();
        assert!(
            result.starts_with(&format!("error: {name}: unknown tool")),
            "{result}"
        );
        for tool in [
            "read_file(path)",
            "write_file(path, content)",
            "finish(summary)",
        ] {
            assert!(result.contains(tool), "{tool} in {result}");
        }
    }
    let record = record_dir(&repo, &run_id);
    assert!(stage_events(&record, "code", "nudge").is_empty());
    let recovered = stage_events(&record, "code", "tool_calls_recovered");
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert_eq!(recovered[0]["tool_calls"][0]["name"], "median");
}

#[test]
fn writing_a_tool_result_back_into_the_file_is_refused() {
    let repo = repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            write_solved(),
            // The first line of the result it just got, as the file's content.
            Reply::tool_call(
                "w2",
                "write_file",
                json!({"path": "solution.py", "content": "updated solution.py (+3 −1)"}),
            ),
            Reply::finish("f1", "Implemented median.", None),
        ],
    ));
    let (code, run_id) = run(&repo, &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    let first = tool_results(&reqs[1]).pop().unwrap();
    assert!(first.starts_with("updated solution.py (+3 −1)"), "{first}");
    let second = tool_results(&reqs[2]).pop().unwrap();
    assert!(
        second.starts_with(
            "error: write_file: refused: the content is the text of the previous tool result"
        ),
        "{second}"
    );
    let file = repo.git(&["show", &format!("orch/{run_id}/code:solution.py")]);
    assert_eq!(file, SOLVED);
}
