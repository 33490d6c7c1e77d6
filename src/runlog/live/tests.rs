use super::*;
use crate::runlog::state::StageRecord;
use std::io::Write;

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

#[test]
fn a_tail_reads_only_complete_lines_and_a_log_that_appears_later() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("actions.jsonl");
    let mut tail = LineTail::new(path.clone());
    assert!(tail.read_new().unwrap().is_empty(), "no file yet: no lines");
    append(&path, "one\ntw");
    assert_eq!(tail.read_new().unwrap(), vec!["one"]);
    assert!(tail.read_new().unwrap().is_empty(), "the half line waits");
    append(&path, "o\n\nthree\n");
    assert_eq!(tail.read_new().unwrap(), vec!["two", "three"]);
    assert!(tail.read_new().unwrap().is_empty());
    // Shorter than what was read (never, for an append-only log): read on
    // from its new end, nothing twice.
    std::fs::write(&path, "x\n").unwrap();
    assert!(tail.read_new().unwrap().is_empty());
    append(&path, "four\n");
    assert_eq!(tail.read_new().unwrap(), vec!["four"]);
}

fn line(v: serde_json::Value) -> String {
    format!("{v}\n")
}

/// A run record with one finished stage `a` and a running stage `b`.
fn record(tmp: &Path) -> (PathBuf, RunState) {
    let root = tmp.join("run");
    std::fs::create_dir_all(root.join("stages/a")).unwrap();
    std::fs::create_dir_all(root.join("stages/b")).unwrap();
    let mut state = RunState::new_for_test("r1");
    state.model = "gpt-4o-mini".into();
    let mut a = StageRecord::pending("a", "coder");
    a.status = StageStatus::Succeeded;
    a.turns = 2;
    a.tokens = TokenCount::new(1000, 100);
    let mut b = StageRecord::pending("b", "reviewer");
    b.status = StageStatus::Running;
    state.stages = vec![a, b];
    std::fs::write(
        root.join("state.json"),
        serde_json::to_vec_pretty(&state).unwrap(),
    )
    .unwrap();
    (root, state)
}

#[test]
fn a_running_stage_counts_its_turns_tokens_cost_and_current_call_from_its_log() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, mut state) = record(tmp.path());
    let log = root.join("stages/b/actions.jsonl");
    let _lock = crate::runlog::lock_run(&root, "r1").unwrap();
    let mut watch = RunWatch::open(&root, PriceTable::builtin()).unwrap();
    assert!(watch.poll().unwrap().is_empty());
    assert_eq!(watch.view().stage("b").unwrap().activity, None);

    append(
        &log,
        &line(serde_json::json!({"event": "stage_start", "stage": "b", "model": "gpt-4o-mini"})),
    );
    append(
        &log,
        &line(serde_json::json!({"event": "request", "turn": 1})),
    );
    let new = watch.poll().unwrap();
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].0, "b");
    assert_eq!(new[0].1.len(), 2);
    let b = watch.view().stage("b").unwrap().clone();
    assert_eq!(b.activity, Some(Activity::Model { turn: 1 }));
    assert_eq!(b.turns, 0);

    append(
        &log,
        &line(serde_json::json!({"event": "response", "turn": 1,
            "prompt_tokens": 1_000_000, "completion_tokens": 0,
            "tool_calls": [{"id": "c1", "name": "bash", "arguments": "{\"command\": \"cargo  test\"}"},
                           {"id": "c2", "name": "read_file", "arguments": "{}"}]})),
    );
    // A torn line: not read until it is whole.
    append(&log, r#"{"event": "tool", "call_id": "c1""#);
    watch.poll().unwrap();
    let view = watch.view();
    let b = view.stage("b").unwrap();
    assert_eq!((b.turns, b.tokens.total()), (1, 1_000_000));
    // gpt-4o-mini: $0.15 per 1M prompt tokens.
    assert!((b.cost_usd.unwrap() - 0.15).abs() < 1e-9, "{b:?}");
    assert_eq!(
        b.activity.as_ref().unwrap().label(),
        r#"bash {"command": "cargo test"}"#
    );
    assert_eq!(view.status, RunStatus::Running);
    assert_eq!(view.tokens.total(), 1_000_000 + 1100);
    assert_eq!(view.cost_usd, None, "stage a's cost is not recorded");

    append(&log, ",\"name\": \"bash\"}\n");
    append(
        &log,
        &line(
            serde_json::json!({"event": "response", "turn": 2, "prompt_tokens": 10, "completion_tokens": 0, "cost_usd": 0.5}),
        ),
    );
    watch.poll().unwrap();
    let b = watch.view().stage("b").unwrap().clone();
    assert_eq!(b.turns, 2);
    assert!(
        (b.cost_usd.unwrap() - 0.65).abs() < 1e-9,
        "a reported cost is taken as it is: {b:?}"
    );
    assert_eq!(b.activity, Some(Activity::Working));
    assert!(!watch.ended());
    assert_eq!(watch.exit_code(), None);

    // The stage and the run end: the state is replaced.
    append(
        &log,
        &line(serde_json::json!({"event": "agent_end", "end": "ModelError"})),
    );
    append(
        &log,
        &line(serde_json::json!({"event": "stage_end", "status": "failed"})),
    );
    state.stages[1].status = StageStatus::Failed;
    state.stages[1].turns = 2;
    state.status = RunStatus::Failed;
    crate::runlog::write_atomic(
        &root.join("state.json"),
        &serde_json::to_vec_pretty(&state).unwrap(),
    )
    .unwrap();
    watch.poll().unwrap();
    assert!(watch.ended(), "the state says it ended");
    let b = watch.view().stage("b").unwrap().clone();
    assert_eq!((b.status, b.activity), (StageStatus::Failed, None));
    assert_eq!(watch.exit_code(), Some(crate::exit::MODEL));
}

#[test]
fn a_run_no_process_drives_has_ended_interrupted() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, _) = record(tmp.path());
    append(
        &root.join("stages/b/actions.jsonl"),
        &line(serde_json::json!({"event": "stage_start", "stage": "b", "model": "m"})),
    );
    let view = read_run(&root, PriceTable::new()).unwrap();
    assert_eq!(view.status, RunStatus::Interrupted);
    let b = view.stage("b").unwrap();
    assert_eq!(
        (b.status, b.activity.as_ref()),
        (StageStatus::Pending, None)
    );
    assert_eq!(exit_code(&view), crate::exit::INTERRUPTED);
}

#[test]
fn exit_codes_follow_orch_runs_mapping() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, _) = record(tmp.path());
    let mut view = read_run(&root, PriceTable::new()).unwrap();
    view.status = RunStatus::Succeeded;
    assert_eq!(exit_code(&view), crate::exit::OK);
    view.stages[1].status = StageStatus::NoChange;
    assert_eq!(exit_code(&view), crate::exit::OPTIONAL_NOT_DONE);
    view.status = RunStatus::Failed;
    view.stages[1].status = StageStatus::Failed;
    assert_eq!(exit_code(&view), crate::exit::STAGE_FAILED);
    view.stages[1].agent_end = Some("ToolFault".into());
    assert_eq!(exit_code(&view), crate::exit::INTERNAL);
}
