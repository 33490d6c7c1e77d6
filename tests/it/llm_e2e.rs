//! The model client's quirk handling seen through the real `orch` binary:
//! an agent whose server answers the streamed request with an empty body
//! still finishes (the turn is re-sent once without streaming, and the
//! client stays non-streaming), no request carries `"content": null`, and a
//! context-length 400 naming the server's window makes compaction target it
//! — or, when nothing can be condensed, fails with the numbers unsent.

use crate::support::{FakeServer, Reply, Script, TestRepo, assert_exit, orch, stage_events};
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

/// llama.cpp's answer to a request longer than its 4096-token slot.
fn llama_context_400() -> Reply {
    Reply::Status(
        400,
        json!({"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it",
               "type": "exceed_context_size_error", "n_prompt_tokens": 9000, "n_ctx": 4096}})
        .to_string(),
    )
}

fn explore(server: &FakeServer, repo: &TestRepo) -> std::process::Output {
    orch()
        .current_dir(&repo.path)
        .args([
            "agent",
            "--json",
            "--role",
            "explore",
            "--task",
            "Summarise the notes.",
            "--base-url",
            &server.base_url,
            "--model",
            "m",
        ])
        .output()
        .unwrap()
}

#[test]
fn llm_e2e_a_context_length_400_naming_4096_makes_compaction_target_4096() {
    let files: Vec<(String, String)> = (1..=6)
        .map(|i| {
            (
                format!("notes{i}.txt"),
                format!("note {i}: a line of plain text to read\n").repeat(160),
            )
        })
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let repo = TestRepo::with_commit(&refs, "notes");
    let mut replies: Vec<Reply> = (1..=6)
        .map(|i| {
            Reply::tool_call(
                &format!("r{i}"),
                "read_file",
                json!({"path": format!("notes{i}.txt")}),
            )
        })
        .collect();
    replies.push(llama_context_400());
    replies.push(Reply::finish(
        "f",
        "The notes are six files of plain text.",
        None,
    ));
    let server = FakeServer::start(Script::new().agent("explore", replies).agent(
        "explore/compact",
        vec![Reply::text("Read notes1..6: plain text lines.")],
    ));
    let out = explore(&server, &repo);
    assert_exit(&out, 0);
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let record = std::path::Path::new(result["transcript"].as_str().unwrap())
        .ancestors()
        .nth(3)
        .unwrap()
        .to_path_buf();
    let compactions = stage_events(&record, "explore", "compaction");
    let after_error: Vec<&serde_json::Value> = compactions
        .iter()
        .filter(|e| e["trigger"] == "context_length_error")
        .collect();
    assert_eq!(after_error.len(), 1, "{compactions:?}");
    assert_eq!(after_error[0]["context_window"], 4096);
    assert_eq!(after_error[0]["trigger_tokens"], 2867);
    let reqs = server.requests_for("explore");
    assert_eq!(reqs.len(), 8);
    let size = |i: usize| reqs[i].body["messages"].to_string().len();
    assert!(size(7) < size(6), "the retried turn is smaller");
}

#[test]
fn llm_e2e_an_unshrinkable_request_fails_with_the_numbers_and_is_not_resent() {
    let repo = TestRepo::with_commit(&[("a.txt", "a\n")], "a");
    let server = FakeServer::start(Script::new().agent(
        "explore",
        vec![llama_context_400(), Reply::finish("f", "never sent", None)],
    ));
    let out = explore(&server, &repo);
    assert_exit(&out, 3); // a model error
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reason = result["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("compaction could not shrink") && reason.contains("4096 tokens"),
        "{reason}"
    );
    assert_eq!(server.requests_for("explore").len(), 1, "not re-sent");
    assert_eq!(server.remaining("explore"), 1);
}

/// LiteLLM's streaming path that drops tool calls: HTTP 200, a stream with
/// an empty reply and `finish_reason: stop`.
fn empty_stream() -> Reply {
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        format!(
            "data: {}\n\n",
            json!({"object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    Reply::RawSse(vec![
        chunk(json!({"role": "assistant", "content": ""}), json!(null)),
        chunk(json!({}), json!("stop")),
        "data: [DONE]\n\n".to_owned(),
    ])
}

#[test]
fn llm_e2e_an_empty_streamed_reply_is_fetched_once_without_streaming() {
    // issue 26.8: the same request without streaming carries the tool call.
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            empty_stream(),
            crate::support::fix_add("c1"),
            Reply::finish("c2", "add() adds.", None),
        ],
    ));
    let (out, repo) = run_solo(&server, "m", &[]);
    assert_exit(&out, 0);
    let reqs = server.requests_for("code");
    let streamed: Vec<bool> = reqs.iter().map(|r| r.body["stream"] == true).collect();
    assert_eq!(streamed, [true, false, false]);
    assert_eq!(reqs[0].body["messages"], reqs[1].body["messages"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the streamed reply was empty") && stderr.contains("without streaming"),
        "{stderr}"
    );
    let run_id = crate::support::only_run_id(&repo.path);
    let record = crate::support::record_dir(&repo, &run_id);
    let notes = stage_events(&record, "code", "stream_fallback");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0]["reason"]
            .as_str()
            .unwrap()
            .contains("the streamed reply was empty"),
        "{notes:?}"
    );
    assert!(
        repo.git(&["show", &format!("orch/{run_id}/code:calc.py")])
            .contains("a + b")
    );
}

#[test]
fn llm_e2e_five_server_errors_without_an_api_key_say_no_key_was_sent() {
    // issue 26.8: LiteLLM answers a request without a key with HTTP 500.
    let repo = TestRepo::with_commit(&[("a.txt", "a\n")], "one");
    let server = FakeServer::start(
        Script::new().agent(
            "explore",
            (0..5)
                .map(|_| {
                    Reply::Status(
                        500,
                        r#"{"error":{"message":"Internal Server Error"}}"#.into(),
                    )
                })
                .collect(),
        ),
    );
    let out = explore(&server, &repo);
    assert_exit(&out, 3);
    assert_eq!(server.requests_for("explore").len(), 5);
    assert!(server.requests()[0].header("authorization").is_none());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("after 5 attempts"), "{err}");
    assert!(err.contains("no API key was sent"), "{err}");

    // With a key configured, the hint would mislead: it is not given.
    let server = FakeServer::start(
        Script::new().agent(
            "explore",
            (0..5)
                .map(|_| Reply::Status(500, "Internal Server Error".into()))
                .collect(),
        ),
    );
    let mut cmd = orch();
    cmd.current_dir(&repo.path)
        .env("ORCH_API_KEY", crate::support::FAKE_API_KEY)
        .args([
            "agent",
            "--role",
            "explore",
            "--task",
            "Look.",
            "--base-url",
            &server.base_url,
            "--model",
            "m",
        ]);
    let out = cmd.output().unwrap();
    assert_exit(&out, 3);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("no API key was sent"), "{err}");
}

/// A tool-call reply whose `usage` carries `extra` (e.g. OpenRouter's `cost`).
fn with_usage_cost(reply: Reply, cost: f64) -> Reply {
    let Reply::Message { message, .. } = reply else {
        panic!("a message reply")
    };
    Reply::Message {
        message,
        usage: Some(json!({
            "prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100,
            "cost": cost,
        })),
    }
}

/// `orch run --json` of a one-stage coder pipeline on a buggy calc repo with
/// `model` at `server` (and `extra` flags); what it printed, and the repo.
fn run_solo(server: &FakeServer, model: &str, extra: &[&str]) -> (std::process::Output, TestRepo) {
    let repo = TestRepo::with_commit(
        &[("calc.py", "def add(a, b):\n    return a - b\n")],
        "calc 0.1",
    );
    let scratch = tempfile::tempdir().unwrap();
    let pipeline = crate::support::write_pipeline(
        scratch.path(),
        "solo",
        "stages:\n  code:\n    role: coder\n    task: Make add() add.\n",
    );
    let issue = crate::support::write_issue(scratch.path(), "# add() subtracts\n");
    let out = crate::support::OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, model)
        .args(extra)
        .json()
        .output();
    (out, repo)
}

/// [`run_solo`], which must succeed: its JSON summary and the repo.
fn summary_of_solo(
    server: &FakeServer,
    model: &str,
    extra: &[&str],
) -> (serde_json::Value, TestRepo) {
    let (out, repo) = run_solo(server, model, extra);
    assert_exit(&out, 0);
    (crate::support::stdout_json(&out), repo)
}

#[test]
fn llm_e2e_the_cost_openrouter_reports_in_usage_is_the_cost() {
    // issue 26.8: a model in no price table, whose server reports each
    // call's cost in `usage.cost`, streamed (last chunk) and not streamed.
    for flags in [&[][..], &["--no-stream"][..]] {
        let server = FakeServer::start(Script::new().agent(
            "code",
            vec![
                with_usage_cost(crate::support::fix_add("c1"), 0.0012),
                with_usage_cost(Reply::finish("c2", "add() adds.", None), 0.0003),
            ],
        ));
        let (summary, repo) = summary_of_solo(&server, "vendor/unpriced-model", flags);
        let cost = summary["cost_usd"]
            .as_f64()
            .unwrap_or_else(|| panic!("{summary}"));
        assert!((cost - 0.0015).abs() < 1e-12, "{flags:?}: {summary}");
        let streamed = server.requests_for("code")[0].body["stream"] == true;
        assert_eq!(streamed, flags.is_empty());
        let run_id = crate::support::only_run_id(&repo.path);
        let record = crate::support::record_dir(&repo, &run_id);
        let turns = stage_events(&record, "code", "response");
        assert_eq!(turns[0]["cost_usd"], 0.0012, "{turns:?}");
    }
}

#[test]
fn llm_e2e_the_cost_litellm_reports_in_a_header_is_the_cost() {
    // issue 26.8: LiteLLM's proxy reports the call's cost in
    // `x-litellm-response-cost` (the usage has tokens only).
    let costed = |reply: Reply, cost: &str| {
        Reply::WithHeader(
            "x-litellm-response-cost".to_owned(),
            cost.to_owned(),
            Box::new(reply.with_usage(1000, 100)),
        )
    };
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            costed(crate::support::fix_add("c1"), "0.002"),
            costed(Reply::finish("c2", "add() adds.", None), "0.0005"),
        ],
    ));
    let (summary, _repo) = summary_of_solo(&server, "unpriced-model", &["--no-stream"]);
    let cost = summary["cost_usd"]
        .as_f64()
        .unwrap_or_else(|| panic!("{summary}"));
    assert!((cost - 0.0025).abs() < 1e-12, "{summary}");
}
