//! Edit formats a small model can produce (issue 28, point 3), end to end
//! through the real binary against the scripted server: Aider-style
//! search/replace blocks and whole-file fenced blocks with a path, written
//! as the reply's text, edit the lane through `edit_file`/`write_file`
//! (logged `recovered_from: search_replace | whole_file`); a read-only role
//! and `text_edits: false` leave them as text; `edit_file`'s `old_string`
//! (and a SEARCH) that only matches after whitespace normalisation is
//! applied when exactly one place matches, and says so.

use crate::support::{FakeServer, Reply, Script, TestRepo, record_dir, stage_events, tool_results};
use serde_json::json;

const STUB: &str =
    "def median(xs):\n    \"\"\"The median of xs.\"\"\"\n    raise NotImplementedError\n";

const SOLVED: &str = "def median(xs):\n    \"\"\"The median of xs.\"\"\"\n    s = sorted(xs)\n    n = len(s)\n    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\n";

fn repo() -> TestRepo {
    TestRepo::with_commit(&[("solution.py", STUB)], "stub")
}

/// Runs a one-stage pipeline (stage `code`, role `role`) against `server`;
/// the exit code and the run id.
fn run_role(repo: &TestRepo, server: &FakeServer, role: &str) -> (i32, String) {
    crate::support::run_median_stage(repo, server, role)
}

/// `solution.py` on the stage's branch.
fn committed(repo: &TestRepo, run_id: &str, path: &str) -> String {
    repo.git(&["show", &format!("orch/{run_id}/code:{path}")])
}

/// Runs a `coder` stage whose model sends `first`, then `finish`; the run
/// id and the results of `first`'s calls (what the model saw next).
fn then_finish(repo: &TestRepo, first: Reply) -> (String, Vec<String>) {
    let server = FakeServer::start(
        Script::new().agent("code", vec![first, Reply::finish("f1", "Done.", None)]),
    );
    let (code, run_id) = run_role(repo, &server, "coder");
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 2, "no nudge");
    (run_id, tool_results(&reqs[1]))
}

/// What Aider's `diff` format looks like, with a line of prose before it.
const SEARCH_REPLACE: &str = "I will implement it.\n\nsolution.py\n```python\n<<<<<<< SEARCH\n    raise NotImplementedError\n=======\n    s = sorted(xs)\n    n = len(s)\n    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\n>>>>>>> REPLACE\n```\n";

#[test]
fn a_search_replace_reply_edits_the_lane() {
    let repo = repo();
    let (run_id, results) = then_finish(&repo, Reply::text(SEARCH_REPLACE));
    assert_eq!(committed(&repo, &run_id, "solution.py"), SOLVED);
    let result = &results[0];
    assert!(
        result.starts_with("updated solution.py (+3 −1); 1 replacement\n"),
        "{result}"
    );
    let record = record_dir(&repo, &run_id);
    let recovered = stage_events(&record, "code", "tool_calls_recovered");
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert_eq!(recovered[0]["recovered_from"], "search_replace");
    assert_eq!(recovered[0]["tool_calls"][0]["name"], "edit_file");
    let tools = stage_events(&record, "code", "tool");
    assert_eq!(tools[0]["name"], "edit_file");
    assert_eq!(tools[0]["changed_path"], "solution.py");
    assert!(stage_events(&record, "code", "nudge").is_empty());
}

#[test]
fn a_whole_file_reply_writes_the_files() {
    let repo = repo();
    let test_file =
        "from solution import median\n\n\ndef test_median():\n    assert median([3, 1, 2]) == 2\n";
    let reply = format!(
        "solution.py\n```python\n{SOLVED}```\n\n```python test_solution.py\n{test_file}```\n"
    );
    let (run_id, results) = then_finish(&repo, Reply::text(&reply));
    assert_eq!(committed(&repo, &run_id, "solution.py"), SOLVED);
    assert_eq!(committed(&repo, &run_id, "test_solution.py"), test_file);
    assert!(results[0].starts_with("updated solution.py"), "{results:?}");
    assert!(
        results[1].starts_with("created test_solution.py (+5)"),
        "{results:?}"
    );
    let record = record_dir(&repo, &run_id);
    let recovered = stage_events(&record, "code", "tool_calls_recovered");
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert_eq!(recovered[0]["recovered_from"], "whole_file");
    assert_eq!(recovered[0]["tool_calls"][0]["name"], "write_file");
    assert_eq!(recovered[0]["tool_calls"][1]["name"], "write_file");
}

#[test]
fn a_whole_file_block_outside_the_lane_is_refused_by_the_fence() {
    let repo = repo();
    let (run_id, results) = then_finish(
        &repo,
        Reply::text("../escape.py\n```python\nprint('out')\n```\n"),
    );
    let result = &results[0];
    assert!(
        result.starts_with("error: write_file: path `../escape.py` escapes the worktree root"),
        "{result}"
    );
    assert!(!repo.path.parent().unwrap().join("escape.py").exists());
    assert_eq!(committed(&repo, &run_id, "solution.py"), STUB);
}

#[test]
fn a_read_only_role_gets_no_edits_from_text() {
    let repo = repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text(SEARCH_REPLACE),
            Reply::finish("f1", "Looks fine.", Some("approve")),
        ],
    ));
    let (code, run_id) = run_role(&repo, &server, "reviewer");
    assert_eq!(code, 0);
    assert_eq!(committed(&repo, &run_id, "solution.py"), STUB);
    let record = record_dir(&repo, &run_id);
    assert!(stage_events(&record, "code", "tool_calls_recovered").is_empty());
    let tools = stage_events(&record, "code", "tool");
    assert!(tools.iter().all(|t| t["name"] == "finish"), "{tools:?}");
    assert_eq!(stage_events(&record, "code", "nudge").len(), 1);
}

#[test]
fn text_edits_false_leaves_the_blocks_as_text() {
    let repo = repo();
    repo.write(
        ".orch/roles/plain.md",
        "---\nname: plain\ndescription: A coder without text edits.\ntext_edits: false\n---\nYou write code.\n",
    );
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text(SEARCH_REPLACE),
            Reply::finish("f1", "Did nothing.", None),
            Reply::finish("f2", "Did nothing.", None),
        ],
    ));
    let (code, run_id) = run_role(&repo, &server, "plain");
    // The blocks stay text (nudged); the model, switched to constrained
    // calls by that nudge, finishes twice without a change: no result.
    assert_eq!(code, 1);
    assert_eq!(committed(&repo, &run_id, "solution.py"), STUB);
    let record = record_dir(&repo, &run_id);
    assert!(stage_events(&record, "code", "tool_calls_recovered").is_empty());
    assert_eq!(stage_events(&record, "code", "nudge").len(), 1);
}

#[test]
fn a_native_tool_calling_role_gets_no_edits_from_text_unless_it_asks() {
    // `text_edits` defaults on unless the model's `tool_calling` is
    // `native`: a model set to call tools only natively keeps its blocks
    // as text (one nudge), and `text_edits: true` turns them on again.
    for (extra, applied) in [("", false), ("text_edits: true\n", true)] {
        let repo = repo();
        repo.write(
            ".orch/roles/native.md",
            format!(
                "---\nname: native\ndescription: A native coder.\ntool_calling: native\n{extra}---\nYou write code.\n"
            ),
        );
        let server = FakeServer::start(Script::new().agent(
            "code",
            vec![
                Reply::text(SEARCH_REPLACE),
                Reply::finish("f1", "Done.", None),
            ],
        ));
        let (code, run_id) = run_role(&repo, &server, "native");
        assert_eq!(code, 0, "{extra:?}");
        let record = record_dir(&repo, &run_id);
        let recovered = stage_events(&record, "code", "tool_calls_recovered");
        assert_eq!(!recovered.is_empty(), applied, "{extra:?}");
        assert_eq!(
            committed(&repo, &run_id, "solution.py") != STUB,
            applied,
            "{extra:?}"
        );
    }
}

#[test]
fn an_old_string_that_matches_once_after_whitespace_normalisation_is_applied_and_said() {
    let repo = TestRepo::with_commit(
        &[(
            "calc.py",
            "class Calc:\r\n    def add(self, a, b):  \r\n        return a - b\r\n",
        )],
        "crlf, trailing spaces, a method",
    );
    let (run_id, results) = then_finish(
        &repo,
        // LF, no trailing spaces, written at column 0.
        Reply::tool_call(
            "e1",
            "edit_file",
            json!({"path": "calc.py",
            "old_string": "def add(self, a, b):\n    return a - b\n",
            "new_string": "def add(self, a, b):\n    return a + b\n"}),
        ),
    );
    let result = &results[0];
    assert!(
        result.starts_with(
            "updated calc.py (+2 −2); 1 replacement; matched after whitespace normalisation at line 2\n"
        ),
        "{result}"
    );
    // The file keeps its line endings, the replacement the file's indentation.
    assert_eq!(
        committed(&repo, &run_id, "calc.py"),
        "class Calc:\r\n    def add(self, a, b):\r\n        return a + b\r\n"
    );
}

#[test]
fn an_old_string_that_matches_twice_after_normalisation_is_an_error_naming_both_lines() {
    let original = "class A:\n    def f(self):\n        return 1\n\nclass B:\n    def f(self):\n        return 1\n";
    let repo = TestRepo::with_commit(&[("ab.py", original)], "two fs");
    let (run_id, results) = then_finish(
        &repo,
        Reply::tool_call(
            "e1",
            "edit_file",
            json!({"path": "ab.py",
            "old_string": "def f(self):\n    return 1\n",
            "new_string": "def f(self):\n    return 2\n"}),
        ),
    );
    let result = &results[0];
    assert!(
        result.starts_with("error: edit_file: `old_string` was not found in ab.py"),
        "{result}"
    );
    assert!(
        result.contains("after whitespace normalisation it matches 2 places (lines 2 and 6)"),
        "{result}"
    );
    assert_eq!(committed(&repo, &run_id, "ab.py"), original);
}

#[test]
fn a_search_that_matches_nothing_is_an_error_the_model_sees() {
    let repo = repo();
    let (run_id, results) = then_finish(
        &repo,
        Reply::text(
            "solution.py\n<<<<<<< SEARCH\n    return None\n=======\n    return 0\n>>>>>>> REPLACE\n",
        ),
    );
    let result = &results[0];
    assert!(
        result.starts_with("error: edit_file: `old_string` was not found in solution.py"),
        "{result}"
    );
    assert_eq!(committed(&repo, &run_id, "solution.py"), STUB);
    let record = record_dir(&repo, &run_id);
    let recovered = stage_events(&record, "code", "tool_calls_recovered");
    assert_eq!(recovered[0]["recovered_from"], "search_replace");
}

#[test]
fn a_search_block_written_without_the_files_indentation_applies_once_and_says_so() {
    let original = "class Stats:\n    def median(self, xs):\n        raise NotImplementedError\n";
    let repo = TestRepo::with_commit(&[("solution.py", original)], "a method");
    let (run_id, results) = then_finish(
        &repo,
        // The method as the model remembers it: at column 0.
        Reply::text(
            "solution.py\n```python\n<<<<<<< SEARCH\ndef median(self, xs):\n    raise NotImplementedError\n=======\ndef median(self, xs):\n    return sorted(xs)[len(xs) // 2]\n>>>>>>> REPLACE\n```\n",
        ),
    );
    let result = &results[0];
    assert!(
        result.contains("; matched after whitespace normalisation at line 2\n"),
        "{result}"
    );
    assert_eq!(
        committed(&repo, &run_id, "solution.py"),
        "class Stats:\n    def median(self, xs):\n        return sorted(xs)[len(xs) // 2]\n"
    );
}
