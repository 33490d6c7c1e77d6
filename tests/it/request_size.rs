//! Bytes per request: the first request of the built-in `issue-to-pr`'s coder
//! stage (all tools offered, no project instructions, no memory) stays within
//! the budget of issue 14 (≤ 3.4 KB), as the fake server receives it.

use crate::support::{FakeServer, OrchRun, Reply, Script, TestRepo, write_issue};
use serde_json::json;

/// The issue `examples/perf_probe.rs` uses (98 bytes), so the two agree.
const ISSUE: &str = "# Off-by-one in range_sum\n\n`range_sum(1, 3)` returns 3; it should include both ends and return 6.\n";

#[test]
fn the_first_coder_request_with_all_tools_is_at_most_3400_bytes() {
    let repo = TestRepo::with_commit(
        &[(
            "ops.py",
            "def range_sum(a, b):\n    return sum(range(a, b))\n",
        )],
        "base",
    );
    let tmp = tempfile::tempdir().unwrap();
    let issue = write_issue(tmp.path(), ISSUE);
    let server = FakeServer::start(
        Script::new()
            .agent("code", vec![Reply::finish("a", "Nothing to change.", None)])
            .agent("review", vec![Reply::finish("b", "Fine.", Some("approve"))])
            .agent("docs", vec![Reply::finish("c", "Nothing.", None)]),
    );
    let out = OrchRun::new("issue-to-pr", &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .output();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = &server.requests_for("code")[0];
    let tools = first.body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 8, "all tools offered: {tools:?}");
    let body = first.body.to_string().len();
    let length: usize = first
        .header("content-length")
        .map_or(body, |v| v.parse().unwrap());
    let system = first.messages()[0]["content"].as_str().unwrap().len();
    let schemas = json!(tools).to_string().len();
    println!(
        "first coder request: {length} B (system prompt {system} B, tool schemas {schemas} B)"
    );
    assert!(
        length <= 3400,
        "first coder request is {length} B (system prompt {system} B, tool schemas {schemas} B), budget 3400 B"
    );
}
