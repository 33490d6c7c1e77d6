//! `orch log` end to end: a run whose model server fails once with HTTP 500,
//! whose context is compacted and which spawns a subagent shows each of them
//! as one readable line, and `orch log <run> <stage>/<agent>` shows the
//! subagent's own log.

use crate::support::{
    AWAIT_LIMIT, FakeServer, OrchRun, Reply, Script, TestRepo, orch, read_jsonl, run_text,
    stdout_json, write_issue, write_pipeline,
};
use orch::llm::openai::{ModelSettings, OpenAiClient};
use orch::llm::{ChatMessage, ChatModel, ChatRequest, RetryNote};
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

#[tokio::test]
async fn the_client_reports_each_retry_to_the_agent_that_sent_the_request() {
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    Reply::Status(500, "upstream exploded".into()),
                    Reply::text("recovered"),
                ],
            )
            .agent("review", vec![Reply::text("fine")]),
    );
    let mut s = ModelSettings::new(server.base_url.clone(), "fake-model");
    s.max_retries = 3;
    s.retry_base_delay = Duration::from_millis(10);
    let client = OpenAiClient::new(s).unwrap();
    let request = |agent: &str| ChatRequest {
        messages: vec![ChatMessage::system("Be terse."), ChatMessage::user("Hi.")],
        tools: Vec::new(),
        agent_path: agent.to_owned(),
        call_mode: orch::llm::CallMode::Native,
    };
    let model: &dyn ChatModel = &client;
    for agent in ["code", "review"] {
        tokio::time::timeout(AWAIT_LIMIT, model.complete(&request(agent)))
            .await
            .expect("completion timed out")
            .unwrap();
    }
    assert_eq!(model.take_retries("review"), Vec::<RetryNote>::new());
    let notes = model.take_retries("code");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!((notes[0].attempt, notes[0].of), (1, 4));
    assert_eq!(notes[0].status, Some(500));
    assert!(notes[0].wait_ms <= 10, "{notes:?}");
    assert!(notes[0].reason.contains("upstream exploded"), "{notes:?}");
    assert!(!notes[0].reason.contains("127.0.0.1"), "{notes:?}");
    assert!(model.take_retries("code").is_empty(), "taken once");
}

/// A file of about 6 KB whose lines do not mention its name.
fn filler(i: usize) -> String {
    format!("alpha beta gamma delta epsilon zeta eta theta iota kappa {i}\n").repeat(100)
}

#[test]
fn log_shows_a_retry_a_compaction_and_a_subagent_readably() {
    let repo = TestRepo::with_commit(
        &[
            ("a.txt", &filler(1)),
            ("b.txt", &filler(2)),
            ("calc.py", "def add(a, b):\n    return a - b\n"),
        ],
        "files",
    );
    let scratch = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        scratch.path(),
        "solo",
        "stages:\n  code:\n    role: coder\n    task: \"{{ issue }}\"\n",
    );
    let issue = write_issue(
        scratch.path(),
        "# Look around\n\nFind where add is defined.\n",
    );
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    Reply::Status(500, "upstream exploded".into()),
                    Reply::tool_call("r1", "read_file", json!({"path": "a.txt"})),
                    Reply::tool_call("r2", "read_file", json!({"path": "b.txt"})),
                    Reply::tool_call(
                        "s1",
                        "spawn_agent",
                        json!({"role": "explore", "task": "Where is add defined?"}),
                    ),
                    Reply::finish("f", "add is in calc.py.", None),
                ],
            )
            .agent(
                "code/compact",
                std::iter::once(Reply::Status(503, "summarizer busy".into()))
                    .chain(
                        (0..4).map(|k| Reply::text(&format!("Summary {k}: two files were read."))),
                    )
                    .collect(),
            )
            .agent(
                "code/explore-1",
                vec![
                    Reply::tool_call("g1", "grep", json!({"pattern": "def add"})),
                    Reply::finish("e", "add is defined in calc.py:1.", None),
                ],
            ),
    );
    let out = OrchRun::with_model_env(&server.base_url, &pipeline, &repo)
        .issue(&issue)
        .json()
        .args(["--context-window", "2000"])
        .output();
    let j = stdout_json(&out);
    assert_eq!(
        j["status"],
        "succeeded",
        "{j}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let run_id = j["run_id"].as_str().unwrap().to_owned();
    let record = PathBuf::from(j["record"].as_str().unwrap());

    // Both retries (a turn's, a compaction summary's) are in the stage's
    // action log, without the server's URL.
    let events = read_jsonl(&record.join("stages/code/actions.jsonl"));
    let retries: Vec<_> = events.iter().filter(|e| e["event"] == "retry").collect();
    assert_eq!(retries.len(), 2, "{events:?}");
    assert_eq!(retries[0]["request"], "turn");
    assert_eq!(retries[0]["attempt"], 1);
    assert_eq!(retries[0]["status"], 500);
    assert_eq!(retries[1]["request"], "summary");
    assert_eq!(retries[1]["status"], 503);
    assert!(
        retries[0]["reason"]
            .as_str()
            .unwrap()
            .contains("upstream exploded")
    );
    assert!(!retries.iter().any(|r| r.to_string().contains("127.0.0.1")));
    assert!(
        events.iter().any(|e| e["event"] == "compaction"),
        "{events:?}"
    );

    let (code, log, err) = run_text(orch().current_dir(&repo.path).args(["log", "last"]));
    assert_eq!(code, Some(0), "{err}");
    for line in log.lines() {
        assert!(!line.trim_start().starts_with('{'), "raw JSON line: {line}");
    }
    let has = |text: &str, needle: &str| text.lines().any(|l| l.contains(needle));
    assert!(
        has(&log, "retry: attempt 1/")
            && has(&log, "failed with HTTP 500 (HTTP 500: upstream exploded"),
        "{log}"
    );
    assert!(
        has(&log, "retry of a compaction summary: attempt 1/")
            && has(&log, "failed with HTTP 503 (HTTP 503: summarizer busy"),
        "{log}"
    );
    assert!(has(&log, "compaction (threshold, "), "{log}");
    assert!(has(&log, "spawn_agent"), "{log}");
    assert!(
        has(&log, "subagent code/explore-1 (explore) succeeded, 2 turns")
            && has(&log, &format!("orch log {run_id} code/explore-1")),
        "{log}"
    );
    assert!(has(&log, "agent code starts: "), "{log}");
    assert!(has(&log, "agent code ends: "), "{log}");
    assert!(has(&log, "end: succeeded"), "{log}");

    let (code, child, err) =
        run_text(
            orch()
                .current_dir(&repo.path)
                .args(["log", &run_id, "code/explore-1"]),
        );
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = child.lines().collect();
    assert_eq!(lines[0], "=== code/explore-1 (explore)", "{child}");
    assert!(
        has(&child, "subagent code/explore-1 (explore) starts: depth 1/"),
        "{child}"
    );
    assert!(has(&child, "grep"), "{child}");
    assert!(has(&child, "agent code/explore-1 ends: "), "{child}");
    for line in &lines {
        assert!(!line.trim_start().starts_with('{'), "raw JSON line: {line}");
    }
    // --json gives the child's raw events.
    let (_, raw, _) =
        run_text(
            orch()
                .current_dir(&repo.path)
                .args(["log", &run_id, "code/explore-1", "--json"]),
        );
    assert!(
        raw.lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
    );
    assert!(raw.contains("\"child_start\""), "{raw}");

    // An unknown subagent path names the ones there are.
    let (code, _, err) =
        run_text(
            orch()
                .current_dir(&repo.path)
                .args(["log", &run_id, "code/explore-9"]),
        );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("code/explore-9") && err.contains("subagents: code/explore-1"),
        "{err}"
    );

    // --follow (the run has ended: what it logged, then its exit code)
    // shows the subagent's lines too, under its own header; given the
    // subagent's path, only those.
    let (code, all, err) = run_text(
        orch()
            .current_dir(&repo.path)
            .args(["log", "--follow", &run_id]),
    );
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = all.lines().collect();
    let header = lines
        .iter()
        .position(|l| *l == "=== code/explore-1 (explore)")
        .unwrap_or_else(|| panic!("{all}"));
    assert!(lines[..header].contains(&"=== code (coder)"), "{all}");
    assert!(
        lines[header + 1..]
            .iter()
            .any(|l| l.contains("agent code/explore-1 ends: ")),
        "{all}"
    );
    let (code, child_only, err) = run_text(orch().current_dir(&repo.path).args([
        "log",
        "--follow",
        &run_id,
        "code/explore-1",
    ]));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        child_only.lines().next(),
        Some("=== code/explore-1 (explore)"),
        "{child_only}"
    );
    assert!(!child_only.contains("=== code (coder)"), "{child_only}");
    assert!(has(&child_only, "grep"), "{child_only}");
}
