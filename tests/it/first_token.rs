//! The wait for a stream's first token allows for prompt evaluation (issue
//! 28, point 7): a CPU server streams nothing while it evaluates the prompt,
//! so before the first `data` line orch waits `first_token_timeout` plus the
//! prompt's estimated tokens at `prompt_eval_rate` (at least
//! `stream_idle_timeout`); after it, the idle timeout as configured. A
//! first-token timeout is retried once, logged as a retry with its reason,
//! then reported naming the wait. Through the real binary against the
//! scripted server, with small configured values.

use crate::support::{
    FakeServer, Reply, Script, TestRepo, record_dir, run_on_fake, stage_events, write_pipeline,
};
use std::time::Duration;

/// A repository whose `orch.toml` profile holds `profile`.
fn repo(profile: &str) -> TestRepo {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    repo.write(
        ".orch/orch.toml",
        format!("default_profile = \"p\"\n[profiles.p]\n{profile}"),
    );
    repo.commit_all("orch config");
    repo
}

fn run(repo: &TestRepo, server: &FakeServer) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        dir.path(),
        "solo",
        "stages:\n  work:\n    role: coder\n    task: Fix the README.\n",
    );
    run_on_fake(repo, &pipeline, "Fix the README.\n", server)
}

#[test]
fn a_first_token_later_than_the_idle_timeout_but_within_the_prompt_allowance_arrives() {
    // The first request is ~3.5 KB: ~870 tokens at 200 tokens/s is ~4.4 s
    // on top of the 1 s base; the first byte comes after 2.5 s, past the
    // 1 s idle timeout (and the base alone).
    let repo = repo("stream_idle_timeout = 1\nfirst_token_timeout = 1\nprompt_eval_rate = 200\n");
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![Reply::finish("f1", "Read it.", None).first_byte_after(Duration::from_millis(2500))],
    ));
    let (code, run_id) = run(&repo, &server);
    assert_eq!(code, 0);
    assert_eq!(server.requests_for("work").len(), 1, "no retry");
    let retries = stage_events(&record_dir(&repo, &run_id), "work", "retry");
    assert!(retries.is_empty(), "{retries:?}");
}

#[test]
fn a_first_token_timeout_is_retried_once_then_reported_naming_the_wait() {
    // The wait is ~1 s (a fast assumed rate); the server sends its first
    // byte only after 20 s, twice.
    let repo =
        repo("stream_idle_timeout = 1\nfirst_token_timeout = 1\nprompt_eval_rate = 1000000\n");
    let late = || Reply::text("too late").first_byte_after(Duration::from_secs(20));
    let server = FakeServer::start(Script::new().agent("work", vec![late(), late()]));
    let dir = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        dir.path(),
        "solo",
        "stages:\n  work:\n    role: coder\n    task: Fix the README.\n",
    );
    let issue = crate::support::write_issue(dir.path(), "Fix the README.\n");
    let out = crate::support::OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .output();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("after 2 attempts"), "{err}");
    assert!(err.contains("no first token within 1s"), "{err}");
    assert!(err.contains("first_token_timeout"), "{err}");
    assert!(err.contains("prompt_eval_rate"), "{err}");
    assert_eq!(server.requests_for("work").len(), 2, "retried once");
    let run_id = crate::support::only_run_id(&repo.path);
    let retries = stage_events(&record_dir(&repo, &run_id), "work", "retry");
    assert_eq!(retries.len(), 1, "{retries:?}");
    let reason = retries[0]["reason"].as_str().unwrap();
    assert!(reason.contains("no first token within 1s"), "{reason}");
}
