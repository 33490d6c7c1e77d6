//! The model client's quirk handling seen through the real `orch` binary:
//! an agent whose server answers the streamed request with an empty body
//! still finishes (the turn is re-sent once without streaming, and the
//! client stays non-streaming), and no request carries `"content": null`.

use crate::support::{FakeServer, Reply, Script, TestRepo, assert_exit, orch};
use serde_json::json;

#[test]
fn llm_e2e_empty_stream_is_resent_without_streaming_and_the_run_succeeds() {
    let repo = TestRepo::with_commit(
        &[("calc.py", "def add(a, b):\n    return a - b\n")],
        "calc 0.1",
    );
    let server = FakeServer::start(Script::new().agent(
        "explore",
        vec![
            // llama-cpp-python: tools + stream → HTTP 200, empty body.
            Reply::RawSse(Vec::new()),
            Reply::tool_call("e1", "grep", json!({"pattern": "def add"})),
            Reply::finish("e2", "add() is defined in calc.py line 1.", None),
        ],
    ));
    let out = orch()
        .current_dir(&repo.path)
        .args([
            "agent",
            "--role",
            "explore",
            "--task",
            "Where is add defined?",
            "--base-url",
            &server.base_url,
            "--model",
            "m",
        ])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "add() is defined in calc.py line 1."
    );
    let reqs = server.requests_for("explore");
    let streamed: Vec<bool> = reqs.iter().map(|r| r.body["stream"] == true).collect();
    assert_eq!(
        streamed,
        [true, false, false],
        "one streamed try, then plain for the rest of the client's life"
    );
    assert_eq!(
        reqs[0].body["messages"], reqs[1].body["messages"],
        "the same turn re-sent"
    );
    for r in &reqs {
        assert!(
            !r.body.to_string().contains(r#""content":null"#),
            "{}",
            r.body
        );
        assert_eq!(r.body["max_tokens"], 4096);
    }
}
