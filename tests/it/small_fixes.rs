//! Small defects seen with small local models (issue 28, point 7): the
//! compaction threshold `agent_start` logs, and the PR body of a pipeline
//! without a reviewer. The real `orch` binary against the scripted fake
//! model server, on real git repositories.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, record_dir, stage_events, stdout_json,
    write_issue, write_pipeline,
};
use serde_json::json;
use std::process::Output;

/// `orch run` of a one-stage pipeline whose stage `work` runs the coder.
fn run_solo(repo: &TestRepo, server: &FakeServer) -> Output {
    run_issue(repo, server, "# Add a note\n\nWrite NOTE.md.\n")
}

/// [`run_solo`] with the issue `text`.
fn run_issue(repo: &TestRepo, server: &FakeServer, text: &str) -> Output {
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), text);
    let pipeline = write_pipeline(
        scratch.path(),
        "solo",
        "name: solo\nstages:\n  work:\n    role: coder\n    task: \"{{ issue }}\"\n",
    );
    OrchRun::new(&pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .output()
}

fn coder_writing_a_note(verdict: Option<&str>) -> Vec<Reply> {
    vec![
        Reply::tool_call(
            "w1",
            "write_file",
            json!({"path": "NOTE.md", "content": "a note\n"}),
        ),
        Reply::finish("f1", "Wrote NOTE.md.", verdict),
    ]
}

fn assert_ok(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn agent_start_logs_the_compaction_threshold_of_the_servers_window() {
    // llama.cpp's /props says the context is 8192 tokens (no
    // `context_window` configured: the default would be 128000).
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    // With latency, so the window is not there by chance at agent_start.
    let server = FakeServer::start(
        Script::new()
            .latency(std::time::Duration::from_millis(300))
            .route(
                "/props",
                Reply::Raw(json!({"default_generation_settings": {"n_ctx": 8192}}).to_string()),
            )
            .agent("work", coder_writing_a_note(None)),
    );
    // Issue 29 (point 4): the first request waits for the server's window
    // only when it could matter for turn 1, i.e. when it is larger than
    // `compact_at` × 2048 tokens (the smallest window orch expects); a small
    // one goes at once and the window applies from a later turn. So the
    // task here is large enough (~9 KB, ~2,300 estimated tokens) for the
    // window to matter from the start: agent_start must log the server's.
    let body: String = (0..200)
        .map(|i| format!("- requirement {i}: keep the note short\n"))
        .collect();
    let out = run_issue(&repo, &server, &format!("# Add a note\n\n{body}"));
    assert_ok(&out);
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let dir = record_dir(&repo, &run_id);
    let first = &stage_events(&dir, "work", "request")[0];
    assert!(
        first["approx_bytes"].as_u64().unwrap() > 4 * 1433,
        "{first}"
    );
    // It waited: every side request (the preflight, the probes of a server
    // of unknown kind) was answered before the first chat request came.
    let sides = server.side_requests().len();
    assert_eq!(
        server.requests()[0].answered_before,
        sides,
        "{:?}",
        server.side_paths()
    );
    let start = &stage_events(&dir, "work", "agent_start")[0];
    // 0.7 (the default `compact_at`) × 8192, rounded down.
    assert_eq!(start["compact_at_tokens"], 5734, "{start}");
    let window = &stage_events(&dir, "work", "context_window")[0];
    assert_eq!(window["used"], 8192, "{window}");
}

#[test]
fn a_pipeline_without_a_reviewer_shows_no_review_verdict_in_the_pr_body() {
    // The coder's own `finish` says `verdict: approve`: that is no review.
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let server =
        FakeServer::start(Script::new().agent("work", coder_writing_a_note(Some("approve"))));
    let out = run_solo(&repo, &server);
    assert_ok(&out);
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let pr = std::fs::read_to_string(record_dir(&repo, &run_id).join("pr.md")).unwrap();
    assert!(!pr.contains("Final verdict"), "{pr}");
    assert!(pr.contains("No reviewer stage"), "{pr}");
    // The coder's summary is in the Summary, as without a verdict.
    assert!(pr.contains("- **work** (coder): Wrote NOTE.md."), "{pr}");
}
