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
use std::time::Duration;

/// `orch run` of a one-stage pipeline whose stage `work` runs the coder.
fn run_solo(repo: &TestRepo, server: &FakeServer) -> Output {
    run_issue(repo, server, "# Add a note\n\nWrite NOTE.md.\n")
}

/// [`run_solo`] with the issue `text`.
fn run_issue(repo: &TestRepo, server: &FakeServer, text: &str) -> Output {
    run_issue_with(repo, server, text, |r| r)
}

/// [`run_issue`] with more settings of the `orch run` command.
fn run_issue_with(
    repo: &TestRepo,
    server: &FakeServer,
    text: &str,
    with: impl FnOnce(OrchRun) -> OrchRun,
) -> Output {
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), text);
    let pipeline = write_pipeline(
        scratch.path(),
        "solo",
        "name: solo\nstages:\n  work:\n    role: coder\n    task: \"{{ issue }}\"\n",
    );
    with(
        OrchRun::new(&pipeline, repo)
            .issue(&issue)
            .model(&server.base_url, "m")
            .json(),
    )
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
    // A llama.cpp server whose /props says the context is 8192 tokens (no
    // `context_window` configured: the default would be 128000), and
    // answers 600 ms late; each request takes at least 100 ms.
    let files: Vec<String> = (0..12).map(|i| format!("notes/f{i:02}.txt")).collect();
    let mut tree: Vec<(&str, &str)> = vec![("README.md", "# app\n")];
    tree.extend(files.iter().map(|f| (f.as_str(), "a line\n")));
    let repo = TestRepo::with_commit(&tree, "init");
    let cache = tempfile::tempdir().unwrap();
    // One run: 12 reads, the note, finish (at least 1.4 s: the late window
    // arrives during it, and is cached). The same script twice.
    let mut turns: Vec<Reply> = files
        .iter()
        .enumerate()
        .map(|(i, f)| Reply::tool_call(&format!("r{i}"), "read_file", json!({ "path": f })))
        .collect();
    turns.extend(coder_writing_a_note(None));
    let props = Reply::Raw(json!({"default_generation_settings": {"n_ctx": 8192}}).to_string());
    let list = json!({"object": "list", "data": [{"id": "q.gguf", "owned_by": "llamacpp"}]});
    let server = FakeServer::start(
        Script::new()
            .latency(Duration::from_millis(100))
            .route("/v1/models", Reply::Raw(list.to_string()))
            .route(
                "/props",
                Reply::Delayed(Duration::from_millis(600), Box::new(props)),
            )
            .agent("work", [turns.clone(), turns].concat()),
    );
    // Issue 29 (point 4): the first request never waits for the server's
    // window, even when it is large enough (~9 KB, ~2,300 estimated
    // tokens) for the window to matter from the start: the window applies
    // from the turn after it arrives, and a first request the server
    // refuses as too long is compacted and sent again.
    let body: String = (0..200)
        .map(|i| format!("- requirement {i}: keep the note short\n"))
        .collect();
    let issue = format!("# Add a note\n\n{body}");
    let run = |cache: &std::path::Path| {
        let out = run_issue_with(&repo, &server, &issue, |r| r.env("XDG_CACHE_HOME", cache));
        assert_ok(&out);
        let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
        record_dir(&repo, &run_id)
    };

    let dir = run(cache.path());
    let first = &stage_events(&dir, "work", "request")[0];
    assert!(
        first["approx_bytes"].as_u64().unwrap() > 4 * 1433,
        "{first}"
    );
    // It did not wait: only the preflight was answered when the first
    // chat request came (before this change: the preflight and /props).
    assert_eq!(server.side_paths(), ["/v1/models", "/props"]);
    assert_eq!(server.requests()[0].answered_before, 1);
    // agent_start logs the window known then: the configured default's.
    let start = &stage_events(&dir, "work", "agent_start")[0];
    assert_eq!(start["compact_at_tokens"], 89600, "{start}");
    // The server's window, logged by the turn that first used it.
    let window = &stage_events(&dir, "work", "context_window")[0];
    assert_eq!(window["used"], 8192, "{window}");
    assert!(window["turn"].as_u64().unwrap() > 1, "{window}");

    // A second run finds the window in the cache: no probe, and
    // agent_start logs 0.7 × the server's 8192, rounded down.
    let dir = run(cache.path());
    assert_eq!(server.side_paths(), ["/v1/models", "/props", "/v1/models"]);
    let start = &stage_events(&dir, "work", "agent_start")[0];
    assert_eq!(start["compact_at_tokens"], 5734, "{start}");
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

#[test]
fn a_python_import_by_the_agent_leaves_no_bytecode_in_the_stage_commit() {
    // Issue 28 (noticed with the real model): the model runs its own test,
    // Python caches the imported module's bytecode in `__pycache__/`, and a
    // repository that does not ignore it got it committed with the stage.
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a + b\n")], "init");
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_call(
                "b1",
                "bash",
                json!({"command": "python3 -c 'import calc; print(calc.add(2, 3))'"}),
            ),
            Reply::tool_call(
                "w1",
                "write_file",
                json!({"path": "NOTE.md", "content": "add works\n"}),
            ),
            Reply::finish("f1", "Checked add and wrote NOTE.md.", None),
        ],
    ));
    let out = run_solo(&repo, &server);
    assert_ok(&out);
    // The command ran (its output reached the model) ...
    let second = &server.requests()[1];
    let result = second.messages().last().unwrap()["content"].to_string();
    assert!(result.contains("5\\n[exit 0"), "{result}");
    // ... and the stage's commit holds the note and no bytecode.
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let tree = repo.git(&[
        "ls-tree",
        "-r",
        "--name-only",
        &format!("orch/{run_id}/work"),
    ]);
    assert!(tree.contains("NOTE.md"), "{tree}");
    assert!(!tree.contains("__pycache__"), "{tree}");
}
