//! Memory end to end: a stage whose tests fail twice and then pass makes
//! exactly one distill call, whose lesson lands `proposed` on
//! `refs/orch/memory` with its evidence (the user's branches, index and tree
//! untouched); no key event, no call; only accepted lessons are injected,
//! with `memory_used` in the action log and an `Orch-Memory` trailer; a
//! rejected or forgotten one is not; secrets are redacted; scopes hold.

use crate::support::{
    FAKE_API_KEY, FakeServer, OrchRun, Reply, Script, TestRepo, orch, record_dir, run_text,
    stage_events, user_text, write_issue, write_pipeline,
};
use serde_json::{Value, json};
use std::path::Path;

const ISSUE: &str =
    "# add() subtracts\n\n`calc.add(2, 3)` returns -1 in calc.py; it should return 5.\n";
const CHECK: &str = "grep -q 'a + b' calc.py || { echo 'FAIL: add(2, 3) still returns -1; set ORCH_FIXTURE=1'; exit 1; }";
const LESSON_SUMMARY: &str = "The calc tests need ORCH_FIXTURE=1 exported before they run";

fn buggy_repo() -> TestRepo {
    TestRepo::with_commit(
        &[("calc.py", "def add(a, b):\n    return a - b\n")],
        "calc 0.1",
    )
}

fn distill_reply() -> Reply {
    let lessons = json!({"lessons": [{
        "title": "calc tests need ORCH_FIXTURE",
        "kind": "environment",
        "summary": LESSON_SUMMARY,
        "body": "Seen when add() was fixed: the check failed twice first.",
        "paths": ["calc.py"],
        "tags": []
    }]});
    Reply::text(&format!("```json\n{lessons}\n```"))
}

/// Runs a one-stage pipeline (`code`, with `verify` when `gated`) and
/// returns (exit code, run id).
fn run(repo: &TestRepo, server: &FakeServer, gated: bool, extra: &[&str]) -> (i32, String) {
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let yaml = if gated {
        format!(
            "stages:\n  code:\n    role: coder\n    verify: \"{CHECK}\"\n    verify_rounds: 2\n"
        )
    } else {
        "stages:\n  code:\n    role: coder\n".to_owned()
    };
    let pipeline = write_pipeline(scratch.path(), "mem", &yaml);
    let before = run_ids(&repo.path);
    let out = OrchRun::new(&pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .args(extra)
        .output();
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let after = run_ids(&repo.path);
    let new: Vec<&String> = after.iter().filter(|r| !before.contains(r)).collect();
    assert_eq!(new.len(), 1, "one new run: {new:?}");
    (out.status.code().unwrap_or(-1), new[0].clone())
}

fn run_ids(repo: &Path) -> Vec<String> {
    std::fs::read_dir(repo.join(".git/orch/runs"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The replies of a coder that fixes the bug only after verify failed twice.
fn fails_twice_then_fixes() -> Vec<Reply> {
    vec![
        Reply::finish("c1", "Looked at it; all good.", None),
        Reply::finish("c2", "Still fine, I think.", None),
        crate::support::fix_add("c3"),
        Reply::finish("c4", "add() now adds.", None),
    ]
}

fn memory(repo: &TestRepo, args: &[&str]) -> (Option<i32>, String, String) {
    run_text(
        orch()
            .arg("memory")
            .args(args)
            .arg("--repo")
            .arg(&repo.path),
    )
}

fn lessons_json(repo: &TestRepo) -> Vec<Value> {
    let (code, out, err) = memory(repo, &["list", "--status", "all", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    serde_json::from_str::<Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn user_branches(repo: &TestRepo) -> String {
    repo.git(&[
        "for-each-ref",
        "--format=%(refname) %(objectname)",
        "refs/heads/",
    ])
    .lines()
    .filter(|l| !l.starts_with("refs/heads/orch/"))
    .collect::<Vec<_>>()
    .join("\n")
}

fn distill_calls(server: &FakeServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.agent.ends_with("/distill"))
        .count()
}

#[test]
fn failing_twice_then_passing_distills_one_proposed_lesson_on_the_memory_ref() {
    let repo = buggy_repo();
    let snapshot = repo.snapshot();
    let branches = user_branches(&repo);
    let server = FakeServer::start(
        Script::new()
            .agent("code", fails_twice_then_fixes())
            .agent("code/distill", vec![distill_reply()]),
    );
    let (code, run_id) = run(&repo, &server, true, &[]);
    assert_eq!(code, 0);
    assert_eq!(distill_calls(&server), 1);
    // The distiller saw the event and the slice, not the whole transcript.
    let asked = user_text(&server.requests_for("code/distill")[0]);
    assert!(asked.contains("verify_fixed"), "{asked}");
    assert!(asked.contains("FAIL: add(2, 3)"), "{asked}");
    let asked_tools = &server.requests_for("code/distill")[0].body["tools"];
    assert!(asked_tools.is_null() || asked_tools.as_array().is_some_and(Vec::is_empty));

    let lessons = lessons_json(&repo);
    assert_eq!(lessons.len(), 1, "{lessons:?}");
    let l = &lessons[0];
    assert_eq!(l["status"], "proposed");
    assert_eq!(l["summary"], LESSON_SUMMARY);
    assert_eq!(l["evidence"]["run"], run_id.as_str());
    assert_eq!(l["evidence"]["stage"], "code");
    assert_eq!(l["evidence"]["event"], "verify_fixed");
    let stage_commit = repo.git(&["rev-parse", &format!("orch/{run_id}/code")]);
    assert_eq!(l["evidence"]["commit"], stage_commit.trim());

    let log = repo.git(&["log", "--format=%s%n%b", "refs/orch/memory"]);
    assert!(
        log.contains("memory: propose calc-tests-need-orch-fixture"),
        "{log}"
    );
    assert!(log.contains(&format!("Orch-Run: {run_id}")), "{log}");
    let file = repo.git(&[
        "show",
        "refs/orch/memory:lessons/calc-tests-need-orch-fixture.md",
    ]);
    assert!(
        file.starts_with("---\nid: \"calc-tests-need-orch-fixture\""),
        "{file}"
    );

    // Nothing of the user's changed: HEAD, index, tree, branches.
    snapshot.assert_unchanged(&repo.snapshot());
    assert_eq!(user_branches(&repo), branches);
    let events = stage_events(&record_dir(&repo, &run_id), "code", "distill");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["key_event"], "verify_fixed");
    assert_eq!(
        events[0]["lessons"],
        json!(["calc-tests-need-orch-fixture"])
    );
}

#[test]
fn a_stage_without_a_key_event_makes_no_distill_call() {
    let repo = buggy_repo();
    // Verify fails once, then passes: not a key event.
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::finish("c1", "Looked.", None),
            crate::support::fix_add("c2"),
            Reply::finish("c3", "Fixed.", None),
        ],
    ));
    let (code, run_id) = run(&repo, &server, true, &[]);
    assert_eq!(code, 0);
    assert_eq!(distill_calls(&server), 0);
    let events = stage_events(&record_dir(&repo, &run_id), "code", "distill");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["skipped"], true);
    assert!(
        repo.git_command()
            .args(["rev-parse", "-q", "--verify", "refs/orch/memory"])
            .output()
            .unwrap()
            .stdout
            .is_empty()
    );
}

/// One run of the quick coder; its first request's user text and the run id.
fn quick_run(repo: &TestRepo) -> (String, String) {
    let server = FakeServer::start(
        Script::new().agent("code", vec![Reply::finish("q1", "Nothing to do.", None)]),
    );
    let (code, run_id) = run(repo, &server, false, &[]);
    assert_eq!(code, 0);
    (user_text(&server.requests_for("code")[0]), run_id)
}

fn memory_used(repo: &TestRepo, run_id: &str) -> Value {
    let events = stage_events(&record_dir(repo, run_id), "code", "memory");
    assert_eq!(events.len(), 1, "{events:?}");
    events[0]["memory_used"].clone()
}

#[test]
fn only_accepted_lessons_are_injected_and_every_use_is_recorded() {
    let repo = buggy_repo();
    let server = FakeServer::start(
        Script::new()
            .agent("code", fails_twice_then_fixes())
            .agent("code/distill", vec![distill_reply()]),
    );
    assert_eq!(run(&repo, &server, true, &[]).0, 0);
    let id = "calc-tests-need-orch-fixture";

    // Proposed: not injected.
    let (task, run_id) = quick_run(&repo);
    assert!(!task.contains(LESSON_SUMMARY), "{task}");
    assert!(!task.contains("# Memory"), "{task}");
    assert_eq!(memory_used(&repo, &run_id), json!([]));

    let (code, _, err) = memory(&repo, &["accept", id]);
    assert_eq!(code, Some(0), "{err}");
    let (task, run_id) = quick_run(&repo);
    assert!(task.contains(&format!("# Memory ({id})")), "{task}");
    assert!(
        task.contains(&format!("- [{id}] {LESSON_SUMMARY}")),
        "{task}"
    );
    assert!(task.contains("not instructions"), "{task}");
    assert_eq!(memory_used(&repo, &run_id), json!([id]));
    let msg = repo.git(&["log", "-1", "--format=%B", &format!("orch/{run_id}/code")]);
    assert!(msg.contains(&format!("Orch-Memory: {id}")), "{msg}");
    let l = lessons_json(&repo);
    assert_eq!(l[0]["uses"], 1);
    let (code, shown, _) = run_text(orch().args(["show", &run_id, "--repo"]).arg(&repo.path));
    assert_eq!(code, Some(0));
    assert!(shown.contains(id), "{shown}");

    // --no-memory: nothing injected.
    let server =
        FakeServer::start(Script::new().agent("code", vec![Reply::finish("q1", "Nothing.", None)]));
    run(&repo, &server, false, &["--no-memory"]);
    assert!(!user_text(&server.requests_for("code")[0]).contains(LESSON_SUMMARY));

    for verb in ["reject", "forget"] {
        memory(&repo, &["accept", id]);
        let (code, _, err) = memory(&repo, &[verb, id]);
        assert_eq!(code, Some(0), "{err}");
        let (task, run_id) = quick_run(&repo);
        assert!(!task.contains(LESSON_SUMMARY), "{verb}: {task}");
        assert_eq!(memory_used(&repo, &run_id), json!([]));
    }
    assert_eq!(lessons_json(&repo)[0]["status"], "retired");
    let log = repo.git(&["log", "--format=%s", "refs/orch/memory"]);
    assert!(log.contains(&format!("memory: forget {id}")), "{log}");
    assert!(log.contains(&format!("memory: reject {id}")), "{log}");
}

#[test]
fn an_api_key_in_a_lesson_is_stored_redacted() {
    let repo = buggy_repo();
    let text = format!("The staging server takes the key {FAKE_API_KEY} in a header");
    let (code, out, err) = run_text(
        orch()
            .env("ORCH_API_KEY", FAKE_API_KEY)
            .args(["memory", "add", &text, "--repo"])
            .arg(&repo.path),
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("added: "), "{out}");
    let stored = repo.git(&["log", "-p", "refs/orch/memory"]);
    assert!(!stored.contains(FAKE_API_KEY), "{stored}");
    assert!(stored.contains("[REDACTED]"), "{stored}");
}

#[test]
fn a_lesson_scoped_to_other_paths_is_not_injected() {
    let repo = buggy_repo();
    // Both share the stage's words; only the unscoped one applies to it.
    for (text, scope) in [
        (
            "calc add returns must be checked with the parser grammar",
            Some("src/parser/**"),
        ),
        ("calc add fixes need a test in test_calc.py", None),
    ] {
        let mut args = vec!["add", text];
        if let Some(s) = scope {
            args.extend(["--scope", s]);
        }
        let (code, _, err) = memory(&repo, &args);
        assert_eq!(code, Some(0), "{err}");
    }
    let (task, run_id) = quick_run(&repo);
    assert!(!task.contains("parser grammar"), "{task}");
    assert!(task.contains("need a test in test_calc.py"), "{task}");
    let used = memory_used(&repo, &run_id);
    assert_eq!(used.as_array().unwrap().len(), 1, "{used}");
}

/// A task whose tests need `ORCH_FIXTURE=1`: the first run learns it the
/// hard way (two failing test runs), the second is told by its memory.
fn fixture_task(dir: &Path) -> std::path::PathBuf {
    let task = dir.join("tasks/env-fixture");
    std::fs::create_dir_all(task.join("repo")).unwrap();
    std::fs::write(
        task.join("repo/calc.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    std::fs::write(
        task.join("repo/test.sh"),
        "[ \"$ORCH_FIXTURE\" = 1 ] || { echo 'fixtures missing: export ORCH_FIXTURE=1'; exit 1; }\ngrep -q 'a + b' calc.py\n",
    )
    .unwrap();
    std::fs::write(task.join("issue.md"), ISSUE).unwrap();
    std::fs::write(task.join("check.sh"), "grep -q 'a + b' calc.py\n").unwrap();
    std::fs::write(
        dir.join("tasks/code.yaml"),
        "name: code\nstages:\n  code:\n    role: coder\n",
    )
    .unwrap();
    dir.join("tasks")
}

fn bash(id: &str, command: &str) -> Reply {
    Reply::tool_call(id, "bash", json!({ "command": command }))
}

fn fix() -> Reply {
    crate::support::fix_add("fix")
}

#[test]
fn eval_with_memory_the_second_run_uses_the_first_runs_lesson_in_fewer_turns() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = fixture_task(dir.path());
    let lesson = json!({"lessons": [{
        "title": "tests need ORCH_FIXTURE",
        "kind": "environment",
        "summary": "Run the tests as `ORCH_FIXTURE=1 sh test.sh`: without it they fail on missing fixtures",
        "paths": [], "tags": []
    }]});
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    // Run 1: learns it the hard way.
                    fix(),
                    bash("t1", "sh test.sh"),
                    bash("t2", "sh test.sh"),
                    bash("t3", "ORCH_FIXTURE=1 sh test.sh"),
                    Reply::finish("f1", "Fixed add().", None),
                    // Run 2: the lesson is in its task; it sets the variable first.
                    fix(),
                    bash("t4", "ORCH_FIXTURE=1 sh test.sh"),
                    Reply::finish("f2", "Fixed add().", None),
                ],
            )
            .agent("code/distill", vec![Reply::text(&lesson.to_string())]),
    );
    let out = dir.path().join("results");
    let mut cmd = orch();
    cmd.current_dir(dir.path())
        .arg("eval")
        .arg("--tasks")
        .arg(&tasks)
        .arg("--pipeline")
        .arg(tasks.join("code.yaml"))
        .args([
            "--runs",
            "2",
            "--memory",
            "auto-accept",
            "--json",
            "--base-url",
        ])
        .arg(&server.base_url)
        .args(["--model", "fake-model", "--no-stream", "--out"])
        .arg(&out)
        .env("ORCH_API_KEY", FAKE_API_KEY);
    let run = crate::support::output_logged(&mut cmd);
    crate::support::assert_exit(&run, 0);
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let report = crate::support::stdout_json(&run);
    let rows = report["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r["solved"] == true), "{rows:#?}");
    let turns: Vec<u64> = rows.iter().map(|r| r["turns"].as_u64().unwrap()).collect();
    assert_eq!(turns, [5, 3], "{rows:#?}");
    assert_eq!(distill_calls(&server), 1);
    // The second run's first request carried the lesson; the first's did not.
    let firsts: Vec<String> = server
        .requests_for("code")
        .iter()
        .filter(|r| r.messages().len() == 2)
        .map(user_text)
        .collect();
    assert_eq!(firsts.len(), 2);
    assert!(!firsts[0].contains("# Memory"), "{}", firsts[0]);
    assert!(
        firsts[1].contains("# Memory (tests-need-orch-fixture)"),
        "{}",
        firsts[1]
    );
    assert!(
        firsts[1].contains("ORCH_FIXTURE=1 sh test.sh"),
        "{}",
        firsts[1]
    );
}

#[test]
fn a_review_that_approves_after_requesting_changes_is_a_key_event() {
    let repo = buggy_repo();
    let lesson = json!({"lessons": [{
        "title": "add needs a regression test",
        "kind": "convention",
        "summary": "Reviews here ask for a regression test with every fix to calc.py",
        "paths": ["calc.py"], "tags": []
    }]});
    let server = FakeServer::start(
        Script::new()
            .agent("code", vec![Reply::finish("c1", "Changed add().", None)])
            .agent(
                "review",
                vec![Reply::finish(
                    "r1",
                    "Add a regression test.",
                    Some("request_changes"),
                )],
            )
            .agent(
                "code.r2",
                vec![Reply::finish("c2", "Added the test.", None)],
            )
            .agent(
                "review.r2",
                vec![Reply::finish("r2", "Good now.", Some("approve"))],
            )
            .agent("review.r2/distill", vec![Reply::text(&lesson.to_string())])
            .agent(
                "docs",
                vec![Reply::finish("d1", "Nothing to document.", None)],
            ),
    );
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let out = OrchRun::new("issue-to-pr", &repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .output();
    assert_eq!(out.status.code(), Some(0));
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    assert_eq!(distill_calls(&server), 1);
    let lessons = lessons_json(&repo);
    assert_eq!(lessons.len(), 1);
    assert_eq!(lessons[0]["evidence"]["stage"], "review.r2");
    assert_eq!(
        lessons[0]["evidence"]["event"],
        "review_approved_after_changes"
    );
    // `orch review` shows what the run proposed.
    let run_id = crate::support::only_run_id(&repo.path);
    let (code, shown, _) = run_text(orch().args(["review", &run_id, "--repo"]).arg(&repo.path));
    assert_eq!(code, Some(0));
    assert!(shown.contains("lessons proposed by this run"), "{shown}");
    assert!(
        shown.contains("add-needs-a-regression-test [proposed]"),
        "{shown}"
    );
}

#[test]
fn a_stage_that_succeeds_on_retry_after_failing_is_a_key_event() {
    let repo = buggy_repo();
    let lesson = json!([{
        "title": "calc add uses plus",
        "kind": "fix-pattern",
        "summary": "add() in calc.py must return a + b; the check greps for it",
        "paths": ["calc.py"]
    }]);
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    // First attempt: finishes without a fix; verify fails; no rounds left.
                    Reply::finish("c1", "Looks fine.", None),
                    // The --retry attempt fixes it.
                    fix(),
                    Reply::finish("c2", "add() now adds.", None),
                ],
            )
            .agent("code/distill", vec![Reply::text(&lesson.to_string())]),
    );
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let yaml = format!(
        "stages:\n  code:\n    role: coder\n    verify: \"{CHECK}\"\n    verify_rounds: 0\n"
    );
    let pipeline = write_pipeline(scratch.path(), "mem", &yaml);
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .output();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        distill_calls(&server),
        0,
        "a failed stage alone is no key event"
    );
    let run_id = crate::support::only_run_id(&repo.path);
    let out = crate::support::resume(&repo, &run_id, &server, &["--retry"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(distill_calls(&server), 1);
    let lessons = lessons_json(&repo);
    assert_eq!(lessons[0]["evidence"]["event"], "retry_succeeded");
    assert_eq!(lessons[0]["id"], "calc-add-uses-plus");
}

#[test]
fn checked_in_lessons_are_injected_and_read_only_and_edit_goes_through_the_editor() {
    let lesson = "---\nid: \"calc-style\"\ntitle: \"calc style\"\nkind: convention\nsummary: \"calc.py functions keep one-line bodies\"\n---\nOur style.\n";
    let repo = TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            (".orch/memory/calc-style.md", lesson),
        ],
        "calc with a lesson",
    );
    let (task, _) = quick_run(&repo);
    assert!(
        task.contains("- [calc-style] calc.py functions keep one-line bodies"),
        "{task}"
    );
    // --dry-run shows the same notes in the first message it would send.
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let pipeline = write_pipeline(scratch.path(), "mem", "stages:\n  code:\n    role: coder\n");
    let dry = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model("http://127.0.0.1:9/v1", "m")
        .args(["--dry-run", "--json"])
        .output();
    let plan = String::from_utf8_lossy(&dry.stdout);
    assert!(
        plan.contains("[calc-style] calc.py functions keep one-line bodies"),
        "{plan}"
    );
    let (code, _, err) = memory(&repo, &["forget", "calc-style"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("read-only"), "{err}");

    let (code, out, err) = memory(&repo, &["add", "calc add must stay pure"]);
    assert_eq!(code, Some(0), "{err}");
    let id = out.trim().strip_prefix("added: ").unwrap().to_owned();
    let (code, _, err) = run_text(
        orch()
            .env("EDITOR", "sed -i /^summary/s/pure/pure-and-total/")
            .args(["memory", "edit", &id, "--repo"])
            .arg(&repo.path),
    );
    assert_eq!(code, Some(0), "{err}");
    let (_, shown, _) = memory(&repo, &["show", &id]);
    assert!(
        shown.contains("summary: \"calc add must stay pure-and-total\""),
        "{shown}"
    );
    let (_, log, _) = memory(&repo, &["log"]);
    assert!(log.contains(&format!("memory: edit {id}")), "{log}");
    assert!(log.contains(&format!("memory: add {id}")), "{log}");
}

#[test]
fn the_distill_calls_tokens_count_against_the_runs_budget() {
    // code: 4 turns × 60 tokens; its distill call: 1000 tokens. With a run
    // budget of 1000 the next stage starts with nothing left only if the
    // distiller's tokens were charged.
    let repo = buggy_repo();
    let code: Vec<Reply> = fails_twice_then_fixes()
        .into_iter()
        .map(|r| r.with_usage(50, 10))
        .collect();
    let server = FakeServer::start(
        Script::new()
            .agent("code", code)
            .agent("code/distill", vec![distill_reply().with_usage(900, 100)])
            .agent(
                "after",
                vec![Reply::finish("a1", "Nothing to add.", None).with_usage(50, 10)],
            ),
    );
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let yaml = format!(
        "stages:\n  code:\n    role: coder\n    verify: \"{CHECK}\"\n    verify_rounds: 2\n  after:\n    role: coder\n    needs: [code]\n"
    );
    let pipeline = write_pipeline(scratch.path(), "mem", &yaml);
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .args(["--max-tokens", "1000"])
        .output();
    assert_eq!(distill_calls(&server), 1);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        server.requests_for("after").is_empty(),
        "the next stage ran on a budget the distiller had used up"
    );
}
