//! Escalation (issue 28, point 9), through the real binary against the
//! scripted server: a stage with `escalate_to: <profile>` whose first
//! attempt fails (here: prose twice, no result after the nudge) runs once
//! more from its start commit with that profile; both attempts are in the
//! action log, `state.json`, `orch show`, the commit trailers and `pr.md`.
//! Two `orch.toml` profiles point at the same fake server with different
//! model names, so the recorded requests say which model was asked.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, assert_exit, output_logged, record_dir,
    stage_events, stage_record, state_json, write_issue, write_pipeline,
};
use serde_json::{Value, json};

const ISSUE: &str = "# greet\n\nAdd a greeting file.\n";

/// A repository whose `orch.toml` makes `weak` (model `weak-model`) the
/// run's profile and defines `strong` (model `strong-model`), both at
/// `server`.
fn repo(server: &FakeServer) -> TestRepo {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    repo.write(
        ".orch/orch.toml",
        format!(
            "default_profile = \"weak\"\n\n[profiles.weak]\nbase_url = \"{0}\"\nmodel = \"weak-model\"\n\n[profiles.strong]\nbase_url = \"{0}\"\nmodel = \"strong-model\"\n",
            server.base_url
        ),
    );
    repo.commit_all("profiles");
    repo
}

/// Runs the pipeline `yaml` (no `--model`: the profiles decide); the exit
/// code, stderr and the run id.
fn run(repo: &TestRepo, yaml: &str) -> (Option<i32>, String, String) {
    run_with(repo, yaml, &[])
}

/// [`run`] with more arguments.
fn run_with(repo: &TestRepo, yaml: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let (out, run_id) = run_output(repo, yaml, args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        run_id,
    )
}

/// [`run_with`]'s whole output, and the run id.
fn run_output(repo: &TestRepo, yaml: &str, args: &[&str]) -> (std::process::Output, String) {
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let pipeline = write_pipeline(scratch.path(), "solo", yaml);
    let out = OrchRun::new(&pipeline, repo)
        .issue(&issue)
        .args(args)
        .output();
    (out, crate::support::only_run_id(&repo.path))
}

const ESCALATING: &str =
    "stages:\n  code:\n    role: coder\n    task: Add hello.txt.\n    escalate_to: strong\n";

/// The weak model's attempt: it writes `junk.txt`, then answers in prose
/// twice (the nudge in between): no result.
fn weak_fails() -> Vec<Reply> {
    vec![
        write("w1", "junk.txt", "half-done\n"),
        Reply::text("I added the greeting."),
        Reply::text("The greeting is there now."),
    ]
}

/// The strong model's attempt: `hello.txt`, then `finish`.
fn strong_succeeds() -> Vec<Reply> {
    vec![
        write("s1", "hello.txt", "hello\n"),
        Reply::finish("f1", "added hello.txt", None),
    ]
}

/// A native `write_file` of `content` to `path`.
fn write(id: &str, path: &str, content: &str) -> Reply {
    Reply::tool_call(id, "write_file", json!({"path": path, "content": content}))
}

/// The models [`weak_fails`] then [`strong_succeeds`] (or two prose
/// replies) ask, in order.
const WEAK_THEN_STRONG: [&str; 5] = [
    "weak-model",
    "weak-model",
    "weak-model",
    "strong-model",
    "strong-model",
];

/// The `model` of each request the stage sent, in order.
fn models_asked(server: &FakeServer) -> Vec<String> {
    models_asked_by(server, "code")
}

/// The `model` of each request agent `agent` sent, in order.
fn models_asked_by(server: &FakeServer, agent: &str) -> Vec<String> {
    server
        .requests_for(agent)
        .iter()
        .map(|r| r.body["model"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn orch_show(repo: &TestRepo, run_id: &str) -> String {
    let out = output_logged(crate::support::orch().args([
        "show",
        run_id,
        "--repo",
        repo.path.to_str().unwrap(),
    ]));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn trailer(repo: &TestRepo, rev: &str, key: &str) -> Option<String> {
    let msg = repo.git(&["log", "-1", "--format=%B", rev]);
    msg.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")).map(str::to_owned))
}

#[test]
fn a_failed_stage_is_retried_once_with_the_stronger_profile_from_its_start_commit() {
    let mut replies = weak_fails();
    replies.extend(strong_succeeds());
    let server = FakeServer::start(Script::new().agent("code", replies));
    let repo = repo(&server);
    let (code, stderr, run_id) = run(&repo, ESCALATING);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(server.violations().is_empty(), "{:?}", server.violations());

    // Three requests to the weak model (write, prose, prose after the
    // nudge), then two to the strong one, whose conversation starts afresh.
    assert_eq!(models_asked(&server), WEAK_THEN_STRONG);
    let fourth = &server.requests_for("code")[3];
    assert_eq!(
        fourth.messages().len(),
        2,
        "a fresh conversation: system + task"
    );
    assert!(
        stderr.contains("retrying once from its start commit with profile `strong`"),
        "{stderr}"
    );

    // The commit: the second attempt's work on the start commit; the
    // first attempt's file is not in it, but kept on `code.v1`.
    let branch = format!("orch/{run_id}/code");
    let files = repo.git(&["ls-tree", "--name-only", "-r", &branch]);
    assert!(files.lines().any(|f| f == "hello.txt"), "{files}");
    assert!(!files.lines().any(|f| f == "junk.txt"), "{files}");
    let parent = repo.git(&["rev-parse", &format!("{branch}^")]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    assert_eq!(
        parent.trim(),
        base.trim(),
        "attempt 2 starts at the stage's start commit"
    );
    let first = repo.git(&["ls-tree", "--name-only", "-r", &format!("{branch}.v1")]);
    assert!(
        first.lines().any(|f| f == "junk.txt"),
        "attempt 1 is kept: {first}"
    );
    assert_eq!(
        trailer(&repo, &format!("{branch}.v1"), "Orch-Model").as_deref(),
        Some("weak-model")
    );
    assert_eq!(
        trailer(&repo, &branch, "Orch-Model").as_deref(),
        Some("strong-model")
    );
    assert_eq!(
        trailer(&repo, &branch, "Orch-Attempt").as_deref(),
        Some("2")
    );
    let from = trailer(&repo, &branch, "Orch-Escalated-From").unwrap_or_default();
    assert!(from.starts_with("weak-model (attempt 1 failed: "), "{from}");

    // The action log: two attempts, the `escalated` event between them.
    let record = record_dir(&repo, &run_id);
    let starts = stage_events(&record, "code", "stage_start");
    assert_eq!(starts.len(), 2);
    assert_eq!(starts[0]["model"], "weak-model");
    assert_eq!(starts[1]["model"], "strong-model");
    let source = starts[1]["model_source"].as_str().unwrap();
    assert!(
        source.starts_with("escalate_to: profile `strong` (stage `code` of "),
        "{source}"
    );
    let escalated = stage_events(&record, "code", "escalated");
    assert_eq!(escalated.len(), 1, "{escalated:?}");
    let e = &escalated[0];
    assert_eq!(e["attempt"], 1);
    assert_eq!(e["from_model"], "weak-model");
    assert_eq!(e["from_source"], "run model");
    assert_eq!(e["to_profile"], "strong");
    assert_eq!(e["to_model"], "strong-model");
    assert_eq!(e["cause"], "no_result");
    assert_eq!(e["restart_from"].as_str().unwrap(), base.trim());
    let ends = stage_events(&record, "code", "stage_end");
    assert_eq!(ends[0]["status"], "failed");
    assert_eq!(ends[1]["status"], "succeeded");

    // state.json: the stage's model, and its first attempt with why.
    let state = state_json(&repo, &run_id);
    let stage = stage_record(&state, "code");
    assert_eq!(stage["status"], "succeeded");
    assert_eq!(stage["model"], "strong-model");
    let attempts = stage["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{stage}");
    assert_eq!(attempts[0]["status"], "failed");
    assert_eq!(attempts[0]["model"], "weak-model");
    assert_eq!(attempts[0]["escalated_to"], "strong");
    assert_eq!(attempts[0]["turns"], 3);
    assert_eq!(attempts[0]["reason"], e["reason"]);

    // `orch show`: which model did the work, and why attempt 1 failed.
    let show = orch_show(&repo, &run_id);
    assert!(show.contains("attempt 1 (failed): 3 turns"), "{show}");
    assert!(
        show.contains("attempt 1 with weak-model failed because: "),
        "{show}"
    );
    assert!(show.contains("escalated to profile `strong`"), "{show}");
    assert!(show.contains("attempt 2 (this one): 2 turns"), "{show}");
    assert!(show.contains("model strong-model"), "{show}");

    // pr.md's provenance row names both models.
    let pr = std::fs::read_to_string(record.join("pr.md")).unwrap();
    let row = pr
        .lines()
        .find(|l| l.starts_with("| code |"))
        .unwrap_or_else(|| panic!("{pr}"));
    assert!(
        row.contains("strong-model, escalated from weak-model (attempt 1 failed: "),
        "{row}"
    );
}

#[test]
fn a_stage_that_succeeds_first_time_does_not_escalate() {
    let server = FakeServer::start(Script::new().agent("code", strong_succeeds()));
    let repo = repo(&server);
    let (code, stderr, run_id) = run(&repo, ESCALATING);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(models_asked(&server), ["weak-model", "weak-model"]);
    let record = record_dir(&repo, &run_id);
    assert!(stage_events(&record, "code", "escalated").is_empty());
    assert_eq!(stage_events(&record, "code", "stage_start").len(), 1);
    let state = state_json(&repo, &run_id);
    let stage = stage_record(&state, "code");
    assert_eq!(stage["model"], "weak-model");
    assert!(stage.get("attempts").is_none(), "{stage}");
    let branch = format!("orch/{run_id}/code");
    assert_eq!(trailer(&repo, &branch, "Orch-Escalated-From"), None);
    assert_eq!(
        repo.git(&["branch", "--list", &format!("{branch}.v1")])
            .trim(),
        ""
    );
}

#[test]
fn an_escalated_attempt_that_fails_too_fails_the_stage_with_both_attempts_reported() {
    let mut replies = weak_fails();
    replies.extend([
        Reply::text("Strongly done."),
        Reply::text("Really, it is done."),
    ]);
    let server = FakeServer::start(Script::new().agent("code", replies));
    let repo = repo(&server);
    let (out, run_id) = run_output(&repo, ESCALATING, &["--events", "jsonl"]);
    // A failed stage: exit 1, as without escalation; no third attempt.
    assert_exit(&out, 1);
    assert_eq!(models_asked(&server), WEAK_THEN_STRONG);
    // The event stream (every line valid against its schema) says so.
    let events = crate::events::events_of(&out);
    let escalated: Vec<&Value> = events.iter().filter(|e| e["type"] == "escalated").collect();
    assert_eq!(escalated.len(), 1, "{events:#?}");
    assert_eq!(escalated[0]["stage"], "code");
    assert_eq!(escalated[0]["from_model"], "weak-model");
    assert_eq!(escalated[0]["to_profile"], "strong");
    assert_eq!(escalated[0]["to_model"], "strong-model");
    assert_eq!(escalated[0]["cause"], "no_result");
    let record = record_dir(&repo, &run_id);
    assert_eq!(stage_events(&record, "code", "escalated").len(), 1);
    let state = state_json(&repo, &run_id);
    let stage = stage_record(&state, "code");
    assert_eq!(stage["status"], "failed");
    assert_eq!(stage["model"], "strong-model");
    let reason = stage["reason"].as_str().unwrap_or_default();
    assert!(!reason.is_empty(), "{stage}");
    assert_eq!(stage["attempts"][0]["model"], "weak-model");
    assert_eq!(stage["attempts"][0]["status"], "failed");
    let show = orch_show(&repo, &run_id);
    assert!(
        show.contains("attempt 1 with weak-model failed because: "),
        "{show}"
    );
    assert!(show.contains("attempt 2 (this one): 2 turns"), "{show}");
    assert!(show.contains("model strong-model"), "{show}");
    // Both attempts' commits are kept: the failed escalated one on the
    // stage's branch, the first on `.v1`.
    let branch = format!("orch/{run_id}/code");
    assert_eq!(
        trailer(&repo, &branch, "Orch-Model").as_deref(),
        Some("strong-model")
    );
    assert_eq!(
        trailer(&repo, &format!("{branch}.v1"), "Orch-Model").as_deref(),
        Some("weak-model")
    );
}

#[test]
fn a_model_error_is_not_escalated() {
    // The weak server answers 400 (not retried): exit 3, the strong model is
    // never asked — a failing server is reported, not hidden.
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::Status(
            400,
            "{\"error\":{\"message\":\"bad\"}}".into(),
        )],
    ));
    let repo = repo(&server);
    let (code, stderr, run_id) = run(&repo, ESCALATING);
    assert_eq!(code, Some(3), "{stderr}");
    assert_eq!(models_asked(&server), ["weak-model"]);
    assert!(stage_events(&record_dir(&repo, &run_id), "code", "escalated").is_empty());
}

#[test]
fn a_role_file_names_the_escalation_profile() {
    let mut replies = weak_fails();
    replies.extend(strong_succeeds());
    let server = FakeServer::start(Script::new().agent("code", replies));
    let repo = repo(&server);
    // The stage says nothing: its role's `escalate_to` applies.
    repo.write(
        ".orch/roles/worker.md",
        "---\nname: worker\nescalate_to: strong\n---\nYou work in the worktree; call finish when done.\n",
    );
    repo.commit_all("role");
    let (code, stderr, run_id) = run(
        &repo,
        "stages:\n  code:\n    role: worker\n    task: Add hello.txt.\n",
    );
    assert_eq!(code, Some(0), "{stderr}");
    let record = record_dir(&repo, &run_id);
    let e = stage_events(&record, "code", "escalated");
    assert_eq!(e.len(), 1);
    let starts = stage_events(&record, "code", "stage_start");
    let source = starts[1]["model_source"].as_str().unwrap();
    assert!(source.contains("(role `worker` of "), "{source}");
}

fn assert_load_error(out: &std::process::Output, repo: &TestRepo, names: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for n in names {
        assert!(stderr.contains(n), "{n:?} not in {stderr}");
    }
    assert!(
        !repo.path.join(".git/orch/runs").exists()
            || std::fs::read_dir(repo.path.join(".git/orch/runs"))
                .unwrap()
                .next()
                .is_none(),
        "no run is created"
    );
}

#[test]
fn an_unknown_escalation_profile_is_a_load_error_naming_the_file_and_the_name() {
    let server = FakeServer::start(Script::new());
    let repo = repo(&server);
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let pipeline = write_pipeline(
        scratch.path(),
        "solo",
        "stages:\n  code:\n    role: coder\n    escalate_to: strnog\n",
    );
    let out = OrchRun::new(&pipeline, &repo).issue(&issue).output();
    let path = pipeline.display().to_string();
    assert_load_error(
        &out,
        &repo,
        &["`escalate_to: strnog`", "stage `code`", &path],
    );
    assert!(server.requests().is_empty());

    // The same in a role file.
    repo.write(
        ".orch/roles/worker.md",
        "---\nname: worker\nescalate_to: mighty\n---\nWork.\n",
    );
    repo.commit_all("role");
    let pipeline = write_pipeline(
        scratch.path(),
        "solo",
        "stages:\n  code:\n    role: worker\n",
    );
    let out = OrchRun::new(&pipeline, &repo).issue(&issue).output();
    assert_load_error(
        &out,
        &repo,
        &["`escalate_to: mighty`", "role `worker`", "worker.md"],
    );
    assert!(server.requests().is_empty());

    // A stage's own `escalate_to` wins over its role's: the run loads.
    let pipeline = write_pipeline(
        scratch.path(),
        "solo",
        "stages:\n  code:\n    role: worker\n    escalate_to: strong\n",
    );
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .args(["--dry-run"])
        .output();
    assert_exit(&out, 0);
    // `--dry-run` says where a failed first attempt would go.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("escalates to: profile `strong` (model strong-model) if attempt 1 fails, from stage `code` of "),
        "{stdout}"
    );
}

#[test]
fn a_run_killed_during_the_escalated_attempt_resumes_as_the_escalated_attempt() {
    let mut replies = weak_fails();
    // Attempt 2's first request kills orch (SIGKILL, mid-request).
    replies.push(Reply::KillSender);
    replies.extend(strong_succeeds());
    let server = FakeServer::start(Script::new().agent("code", replies));
    let repo = repo(&server);
    let (code, _stderr, run_id) = run(&repo, ESCALATING);
    assert_ne!(code, Some(0));
    let out = output_logged(crate::support::orch().args([
        "resume",
        &run_id,
        "--repo",
        repo.path.to_str().unwrap(),
        "--json",
    ]));
    assert_exit(&out, 0);
    // After the kill only the strong model is asked: the weak attempt is
    // not run again.
    assert_eq!(
        models_asked(&server),
        [&WEAK_THEN_STRONG[..], &["strong-model"]].concat()
    );
    let record = record_dir(&repo, &run_id);
    assert_eq!(stage_events(&record, "code", "escalated").len(), 1);
    let branch = format!("orch/{run_id}/code");
    assert_eq!(
        trailer(&repo, &branch, "Orch-Model").as_deref(),
        Some("strong-model")
    );
    assert!(trailer(&repo, &branch, "Orch-Escalated-From").is_some());
    let files = repo.git(&["ls-tree", "--name-only", "-r", &branch]);
    assert!(!files.lines().any(|f| f == "junk.txt"), "{files}");
    let state = state_json(&repo, &run_id);
    let stage = stage_record(&state, "code");
    let attempts: Vec<&Value> = stage["attempts"].as_array().unwrap().iter().collect();
    assert_eq!(attempts[0]["model"], "weak-model", "{stage}");
    assert_eq!(attempts[0]["escalated_to"], "strong");
    assert_eq!(attempts[1]["status"], "interrupted");
    assert_eq!(attempts[1]["model"], "strong-model");
}

#[test]
fn a_stage_rolled_back_after_an_escalation_runs_again_from_attempt_one() {
    let mut two = weak_fails();
    two.extend(strong_succeeds());
    // After the rollback: the weak model is asked first again, and succeeds.
    two.extend([
        write("w2", "again.txt", "again\n"),
        Reply::finish("f2", "two again", None),
    ]);
    let one = vec![
        write("w0", "one.txt", "1\n"),
        Reply::finish("f0", "one done", None),
    ];
    let server = FakeServer::start(Script::new().agent("one", one).agent("two", two));
    let repo = repo(&server);
    let (code, stderr, run_id) = run(
        &repo,
        "stages:\n  one:\n    role: coder\n  two:\n    role: coder\n    needs: [one]\n    escalate_to: strong\n",
    );
    assert_eq!(code, Some(0), "{stderr}");
    let path = repo.path.to_str().unwrap();
    let out = output_logged(
        crate::support::orch().args(["rollback", &run_id, "--to", "one", "--repo", path]),
    );
    assert_exit(&out, 0);
    let out = output_logged(crate::support::orch().args(["resume", &run_id, "--repo", path]));
    assert_exit(&out, 0);
    assert_eq!(
        models_asked_by(&server, "two"),
        [&WEAK_THEN_STRONG[..], &["weak-model", "weak-model"]].concat()
    );
    let branch = format!("orch/{run_id}/two");
    assert_eq!(
        trailer(&repo, &branch, "Orch-Model").as_deref(),
        Some("weak-model")
    );
    assert_eq!(trailer(&repo, &branch, "Orch-Escalated-From"), None);
    let state = state_json(&repo, &run_id);
    assert_eq!(stage_record(&state, "two")["model"], "weak-model");
}

#[test]
fn a_verify_gate_that_never_passes_escalates_and_the_stronger_attempt_passes_it() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            // Weak: a wrong file, `finish`; the gate fails (no rounds left).
            write("w1", "junk.txt", "x\n"),
            Reply::finish("f0", "done", None),
            // Strong: the right file; the gate passes.
            write("s1", "hello.txt", "hello\n"),
            Reply::finish("f1", "added hello.txt", None),
        ],
    ));
    let repo = repo(&server);
    let (code, stderr, run_id) = run(
        &repo,
        "stages:\n  code:\n    role: coder\n    verify: test -f hello.txt\n    verify_rounds: 0\n    escalate_to: strong\n",
    );
    assert_eq!(code, Some(0), "{stderr}");
    let record = record_dir(&repo, &run_id);
    let e = stage_events(&record, "code", "escalated");
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0]["cause"], "verify_failed");
    let branch = format!("orch/{run_id}/code");
    assert_eq!(
        trailer(&repo, &branch, "Orch-Verify").as_deref(),
        Some("pass")
    );
    assert_eq!(
        trailer(&repo, &branch, "Orch-Model").as_deref(),
        Some("strong-model")
    );
}

#[test]
fn a_stage_budget_escalates_with_a_fresh_budget_but_the_run_budget_does_not() {
    let over = |r: Reply| r.with_usage(300, 10);
    let under = |r: Reply| r.with_usage(20, 1);
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            // Weak: one turn spends more than the stage's 200 tokens.
            over(write("w1", "junk.txt", "x\n")),
            // Strong: a fresh 200 for its two cheap turns.
            under(write("s1", "hello.txt", "hello\n")),
            under(Reply::finish("f1", "added hello.txt", None)),
        ],
    ));
    let repo = repo(&server);
    let (code, stderr, run_id) = run(
        &repo,
        "stages:\n  code:\n    role: coder\n    budget: { tokens: 200 }\n    escalate_to: strong\n",
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        models_asked(&server),
        ["weak-model", "strong-model", "strong-model"]
    );
    let e = stage_events(&record_dir(&repo, &run_id), "code", "escalated");
    assert_eq!(e[0]["cause"], "budget");

    // The run's own budget (`--max-tokens`) ran out: nothing is left to
    // spend, so no escalation; the stage fails (exit 1).
    let server =
        FakeServer::start(Script::new().agent("code", vec![over(write("w1", "junk.txt", "x\n"))]));
    let repo = self::repo(&server);
    let (code, stderr, run_id) = run_with(&repo, ESCALATING, &["--max-tokens", "200"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(models_asked(&server), ["weak-model"]);
    assert!(stage_events(&record_dir(&repo, &run_id), "code", "escalated").is_empty());
}
