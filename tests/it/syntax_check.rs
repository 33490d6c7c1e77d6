//! Edits that do not parse are caught at once, and a writing stage that
//! changed nothing is told so (issue 28, points 5 and 4), end to end
//! through the real binary against the scripted server: a `write_file` of
//! a file that does not parse gets the checker's error in its result; a
//! `finish` while a changed file does not parse is refused once, and a
//! second one is accepted with `syntax_errors` in the record; a writing
//! stage's `finish` with nothing changed in the lane is recorded as
//! `no_change: true`, and refused once first when its model writes its
//! calls as text (a small model); a read-only role's `finish` is untouched;
//! the checks leave nothing in the lane (no `__pycache__`).

use crate::support::{
    FakeServer, Reply, Script, TestRepo, record_dir, stage_events, stage_record, state_json,
    tool_results, walk,
};
use serde_json::{Value, json};

/// Does not parse: `(` never closed on line 2.
const BROKEN: &str = "def median(xs):\n    return sorted(xs\n";
const FIXED: &str = "def median(xs):\n    return sorted(xs)[len(xs) // 2]\n";

fn repo() -> TestRepo {
    crate::support::median_stub_repo()
}

/// Runs a one-stage pipeline whose stage `code` has role `role`; the exit
/// code and the run id.
fn run_role(repo: &TestRepo, server: &FakeServer, role: &str) -> (i32, String) {
    crate::support::run_median_stage(repo, server, role)
}

fn run(repo: &TestRepo, server: &FakeServer) -> (i32, String) {
    run_role(repo, server, "coder")
}

/// Runs stage `code` (role `coder`) with `replies` scripted; the
/// repository, the server, the exit code and the run id.
fn run_script(replies: Vec<Reply>) -> (TestRepo, FakeServer, i32, String) {
    let repo = repo();
    let server = FakeServer::start(Script::new().agent("code", replies));
    let (code, run_id) = run(&repo, &server);
    (repo, server, code, run_id)
}

fn write(id: &str, path: &str, content: &str) -> Reply {
    Reply::tool_call(id, "write_file", json!({"path": path, "content": content}))
}

/// The last tool result of request `i` to stage `code`.
/// What the model was told in request `i`: its last tool result, or, for a
/// request answering orch's ask for the whole file (no tool results: see
/// tests/it/whole_file_ask.rs), the ask.
fn result_of(server: &FakeServer, i: usize) -> String {
    let req = &server.requests_for("code")[i];
    tool_results(req).pop().unwrap_or_else(|| {
        req.messages()
            .last()
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned()
    })
}

/// The stage's `stage_end` event.
fn stage_end(repo: &TestRepo, run_id: &str) -> Value {
    let ends = stage_events(&record_dir(repo, run_id), "code", "stage_end");
    assert_eq!(ends.len(), 1, "{ends:?}");
    ends[0].clone()
}

/// No bytecode cache anywhere in the repository, its lanes or the stage's
/// commit: the checks wrote nothing.
fn assert_no_bytecode(repo: &TestRepo, run_id: &str) {
    let lanes = repo.path.join(".git/orch/pool");
    let mut files = walk(&lanes);
    files.extend(walk(&repo.path).into_iter().filter(|p| {
        !p.strip_prefix(&repo.path)
            .is_ok_and(|r| r.starts_with(".git"))
    }));
    assert!(!files.is_empty() || !lanes.exists(), "walked nothing");
    for f in &files {
        let s = f.to_string_lossy();
        assert!(
            !s.contains("__pycache__") && !s.ends_with(".pyc"),
            "bytecode left: {s}"
        );
    }
    let tree = repo.git(&[
        "ls-tree",
        "-r",
        "--name-only",
        &format!("orch/{run_id}/code"),
    ]);
    assert!(!tree.contains("__pycache__"), "{tree}");
}

#[test]
fn a_write_that_does_not_parse_gets_the_error_and_finish_waits_for_the_fix() {
    let (repo, server, code, run_id) = run_script(vec![
        write("w1", "solution.py", BROKEN),
        Reply::finish("f1", "Implemented median.", None),
        write("w2", "solution.py", FIXED),
        Reply::finish("f2", "Implemented median.", None),
    ]);
    assert_eq!(code, 0);
    assert_eq!(server.requests_for("code").len(), 4);
    // The write's own result names the error and its line.
    let written = result_of(&server, 1);
    assert!(written.starts_with("updated solution.py"), "{written}");
    assert!(written.contains("solution.py:2"), "{written}");
    assert!(written.contains("SyntaxError"), "{written}");
    // The first finish is refused with the errors.
    let refused = result_of(&server, 2);
    assert!(refused.starts_with("error: finish:"), "{refused}");
    assert!(refused.contains("do not parse"), "{refused}");
    assert!(refused.contains("solution.py:2"), "{refused}");
    // The fixed write says nothing more; the second finish is accepted.
    let fixed = result_of(&server, 3);
    assert!(!fixed.contains("SyntaxError"), "{fixed}");
    let end = stage_end(&repo, &run_id);
    assert_eq!(end["status"], "succeeded", "{end}");
    assert!(end.get("syntax_errors").is_none(), "{end}");
    assert!(end.get("no_change").is_none(), "{end}");
    let file = repo.git(&["show", &format!("orch/{run_id}/code:solution.py")]);
    assert_eq!(file, FIXED);
    assert_no_bytecode(&repo, &run_id);
}

#[test]
fn a_second_finish_with_a_broken_file_is_accepted_and_the_record_says_so() {
    let (repo, server, code, run_id) = run_script(vec![
        write("w1", "solution.py", BROKEN),
        Reply::finish("f1", "Implemented median.", None),
        Reply::finish("f2", "Implemented median.", None),
    ]);
    assert_eq!(code, 0);
    assert_eq!(server.requests_for("code").len(), 3, "refused once only");
    assert!(result_of(&server, 2).contains("do not parse"));
    let end = stage_end(&repo, &run_id);
    let errors = end["syntax_errors"].as_array().expect("syntax_errors");
    assert_eq!(errors.len(), 1, "{end}");
    assert!(
        errors[0].as_str().unwrap().starts_with("solution.py:2"),
        "{end}"
    );
    let state = state_json(&repo, &run_id);
    let summary = stage_record(&state, "code")["summary"].as_str().unwrap();
    assert!(
        summary.contains("the changed files do not parse"),
        "{summary}"
    );
    let pr = std::fs::read_to_string(record_dir(&repo, &run_id).join("pr.md")).unwrap();
    assert!(pr.contains("do not parse"), "{pr}");
    assert_no_bytecode(&repo, &run_id);
}

/// Runs a stage that writes `path` as `broken`, then as `fixed`, then
/// finishes (accepted at once); the results of the two writes.
fn broken_then_fixed(path: &str, broken: &str, fixed: &str) -> (String, String) {
    let (_repo, server, code, _) = run_script(vec![
        write("w1", path, broken),
        write("w2", path, fixed),
        Reply::finish("f1", "Done.", None),
    ]);
    assert_eq!(code, 0);
    assert_eq!(
        server.requests_for("code").len(),
        3,
        "finish accepted at once"
    );
    (result_of(&server, 1), result_of(&server, 2))
}

#[test]
fn a_broken_json_file_is_caught_in_process() {
    let (broken, fixed) = broken_then_fixed("config.json", "{\"a\": 1,\n}\n", "{\"a\": 1}\n");
    assert!(broken.contains("config.json:2:"), "{broken}");
    assert!(broken.contains("does not parse"), "{broken}");
    assert!(!fixed.contains("parse"), "{fixed}");
}

#[test]
fn a_broken_javascript_file_is_caught_by_node() {
    if std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: node is not installed");
        return;
    }
    let (broken, fixed) = broken_then_fixed(
        "lib/a.js",
        "function f( {\n  return 1;\n}\n",
        "function f() {\n  return 1;\n}\n",
    );
    assert!(broken.contains("lib/a.js:2"), "{broken}");
    assert!(broken.contains("SyntaxError"), "{broken}");
    assert!(!fixed.contains("SyntaxError"), "{fixed}");
}

#[test]
fn a_broken_file_written_by_bash_is_caught_at_finish() {
    let (repo, server, code, run_id) = run_script(vec![
        Reply::tool_call(
            "b1",
            "bash",
            json!({"command": "printf 'def f(:\\n' > helper.py"}),
        ),
        Reply::finish("f1", "Added a helper.", None),
        Reply::tool_call("b2", "bash", json!({"command": "rm helper.py"})),
        write("w1", "solution.py", FIXED),
        Reply::finish("f2", "Implemented median.", None),
    ]);
    assert_eq!(code, 0);
    let refused = result_of(&server, 2);
    assert!(refused.contains("helper.py:1"), "{refused}");
    assert!(
        !refused.contains("nothing in the lane changed"),
        "{refused}"
    );
    let end = stage_end(&repo, &run_id);
    assert!(end.get("syntax_errors").is_none(), "{end}");
    assert_no_bytecode(&repo, &run_id);
}

/// `finish` as a small model writes it: its arguments as bare JSON, no
/// tool name (recovered as `finish`, `recovered_from: schema_fit`).
fn text_finish(summary: &str) -> Reply {
    Reply::text(&json!({ "summary": summary }).to_string())
}

#[test]
fn a_writing_stage_whose_model_writes_calls_as_text_and_changed_nothing_is_told_once() {
    let (repo, server, code, run_id) = run_script(vec![
        text_finish("Resolved the issue by implementing median."),
        text_finish("Nothing to change: median already works."),
    ]);
    // Told once, it finished again without a change: no result (exit 1),
    // never a success.
    assert_eq!(code, 1);
    assert_eq!(server.requests_for("code").len(), 2, "told once only");
    let told = result_of(&server, 1);
    assert!(
        told.to_lowercase().contains("nothing in the lane changed")
            && told.contains("the task asks for a change"),
        "{told}"
    );
    let end = stage_end(&repo, &run_id);
    assert_eq!(end["no_change"], json!(true), "{end}");
    assert_eq!(end["status"], "failed", "{end}");
    assert!(
        end["reason"]
            .as_str()
            .is_some_and(|r| r.contains("after it was told the task asks for a change")),
        "{end}"
    );
    let agent_end = &stage_events(&record_dir(&repo, &run_id), "code", "agent_end")[0];
    assert_eq!(agent_end["no_change"], json!(true), "{agent_end}");
}

#[test]
fn a_writing_stage_told_it_changed_nothing_can_still_make_the_change() {
    let (repo, server, code, run_id) = run_script(vec![
        text_finish("Resolved the issue by implementing median."),
        write("w1", "solution.py", FIXED),
        text_finish("Implemented median."),
    ]);
    assert_eq!(code, 0);
    assert!(
        result_of(&server, 1)
            .to_lowercase()
            .contains("nothing in the lane changed")
    );
    let end = stage_end(&repo, &run_id);
    assert!(end.get("no_change").is_none(), "{end}");
    assert_eq!(end["files_changed"], json!(1), "{end}");
}

#[test]
fn a_native_finish_without_a_change_is_taken_at_its_word_and_recorded() {
    let repo = repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::finish("f1", "Nothing to change.", None)],
    ));
    let (code, run_id) = run(&repo, &server);
    assert_eq!(code, 0);
    assert_eq!(server.requests_for("code").len(), 1);
    let end = stage_end(&repo, &run_id);
    assert_eq!(end["no_change"], json!(true), "{end}");
}

#[test]
fn a_read_only_roles_finish_is_unaffected() {
    let repo = repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::finish("f1", "Looks fine.", Some("approve"))],
    ));
    let (code, run_id) = run_role(&repo, &server, "reviewer");
    assert_eq!(code, 0);
    assert_eq!(server.requests_for("code").len(), 1);
    let end = stage_end(&repo, &run_id);
    assert_eq!(end["status"], "succeeded", "{end}");
    assert!(end.get("no_change").is_none(), "{end}");
}
