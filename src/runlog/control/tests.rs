use super::*;
use crate::runlog::{RunState, StageRecord, lock_run};

/// A run record at `<tmp>/run1` with stages `code` (running) and
/// `review` (succeeded); live while the returned lock is held.
fn run(tmp: &tempfile::TempDir) -> (PathBuf, Option<crate::runlog::RunLock>) {
    let root = tmp.path().join("20260101-000000-000-abcd");
    std::fs::create_dir_all(&root).unwrap();
    let mut state = RunState::new_for_test("20260101-000000-000-abcd");
    state.stages.push(StageRecord {
        status: StageStatus::Running,
        ..StageRecord::pending("code", "coder")
    });
    state.stages.push(StageRecord {
        status: StageStatus::Succeeded,
        ..StageRecord::pending("review", "reviewer")
    });
    RunDir::at(root.clone()).write_state(&state).unwrap();
    let lock = lock_run(&root, "r").unwrap();
    (root, Some(lock))
}

#[test]
fn an_ask_is_pending_until_its_first_answer_which_is_final() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, _lock) = run(&tmp);
    assert!(pending_asks(&root).is_empty());
    let a = post_ask(
        &root,
        "code",
        "bash",
        "touch x",
        "role ask rule `touch*`",
        None,
    )
    .unwrap();
    let b = post_ask(
        &root,
        "code",
        "bash",
        "touch y",
        "role ask rule `touch*`",
        None,
    )
    .unwrap();
    assert_eq!((a.id.as_str(), b.id.as_str()), ("1", "2"));
    let pending = pending_asks(&root);
    assert_eq!(pending, vec![a.clone(), b.clone()]);

    let answer = answer_ask(&root, "1", true, "alice").unwrap();
    assert!(answer.allow);
    assert_eq!(answer.by, "alice");
    assert_eq!(read_answer(&root, "1"), Some(answer.clone()));
    assert_eq!(pending_asks(&root), vec![b]);

    // A second answer, the same or not, is refused and names the first.
    for allow in [true, false] {
        let err = answer_ask(&root, "1", allow, "bob")
            .unwrap_err()
            .to_string();
        assert!(err.contains("already answered (allowed) by alice"), "{err}");
    }
    // The run settling it later keeps the user's answer.
    let kept = settle_ask(&root, "1", false, "orch", Some("timeout".into())).unwrap();
    assert_eq!(kept, answer);

    let err = answer_ask(&root, "7", true, "cli").unwrap_err().to_string();
    assert!(err.contains("no such ask (pending: 2)"), "{err}");
    let err = answer_ask(&root, "../x", true, "cli")
        .unwrap_err()
        .to_string();
    assert!(err.contains("no such ask"), "{err}");
}

#[test]
fn a_run_no_process_drives_has_no_pending_asks_and_takes_no_answer_or_note() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, lock) = run(&tmp);
    post_ask(&root, "code", "bash", "touch x", "why", None).unwrap();
    drop(lock);
    crate::runlog::lock::wait_released(&root);
    assert!(pending_asks(&root).is_empty());
    let err = answer_ask(&root, "1", true, "cli").unwrap_err().to_string();
    assert!(err.contains("it is not running"), "{err}");
    let err = send_guidance(&root, "code", "hi", "cli")
        .unwrap_err()
        .to_string();
    assert!(err.contains("it is not running"), "{err}");
    assert!(read_answer(&root, "1").is_none());
}

#[test]
fn guidance_goes_to_a_running_stage_once_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, _lock) = run(&tmp);
    let g1 = send_guidance(&root, "code", "use the helper\nin util.py", "alice").unwrap();
    let g2 = send_guidance(&root, "code", "and add a test", "ui").unwrap();
    assert_eq!((g1.id.as_str(), g2.id.as_str()), ("1", "2"));
    assert_eq!(
        unconsumed_guidance(&root, "code"),
        vec![g1.clone(), g2.clone()]
    );
    assert!(unconsumed_guidance(&root, "review").is_empty());
    mark_consumed(&root, "code", "1", 3).unwrap();
    assert_eq!(unconsumed_guidance(&root, "code"), vec![g2]);
    assert_eq!(
        guidance_message(&g1),
        "Guidance from alice (sent while you work; take it into account from now on):\n> use the helper\n> in util.py"
    );

    let err = |stage: &str, text: &str| {
        send_guidance(&root, stage, text, "cli")
            .unwrap_err()
            .to_string()
    };
    assert!(
        err("review", "x").contains("the stage is succeeded"),
        "{}",
        err("review", "x")
    );
    assert!(err("docs", "x").contains("no such stage (its stages: code, review)"));
    assert!(err("code", "  \n").contains("the note is empty"));
    assert!(err("code", &"x".repeat(MAX_GUIDANCE_BYTES + 1)).contains("at most"));
}

#[test]
fn asks_a_dead_process_left_are_denied_when_their_stage_starts_again() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, _lock) = run(&tmp);
    post_ask(&root, "code", "bash", "touch x", "why", None).unwrap();
    post_ask(&root, "code", "bash", "touch y", "why", None).unwrap();
    post_ask(&root, "review", "bash", "touch z", "why", None).unwrap();
    answer_ask(&root, "2", true, "alice").unwrap();
    assert_eq!(settle_stale_asks(&root, "code"), 1);
    let a = read_answer(&root, "1").unwrap();
    assert_eq!((a.allow, a.by.as_str()), (false, "orch"));
    assert!(read_answer(&root, "2").unwrap().allow, "an answer stands");
    let pending: Vec<String> = pending_asks(&root).into_iter().map(|a| a.id).collect();
    assert_eq!(pending, ["3"], "another stage's ask is its own");
}

#[test]
fn who_answers_is_one_short_line() {
    assert_eq!(clean_by("a\nb"), "a b");
    assert_eq!(clean_by("  "), "cli");
    assert_eq!(clean_by(&"x".repeat(100)).len(), MAX_BY_CHARS);
}

#[test]
#[ignore = "a measurement, not a test"]
fn measure_the_per_turn_guidance_check() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, _lock) = run(&tmp);
    let n = 10_000;
    let t = std::time::Instant::now();
    for _ in 0..n {
        assert!(unconsumed_guidance(&root, "code").is_empty());
    }
    eprintln!("MEASURE none: {:?} per check", t.elapsed() / n);
    send_guidance(&root, "code", "x", "cli").unwrap();
    mark_consumed(&root, "code", "1", 1).unwrap();
    let t = std::time::Instant::now();
    for _ in 0..n {
        assert!(unconsumed_guidance(&root, "code").is_empty());
    }
    eprintln!("MEASURE one consumed: {:?} per check", t.elapsed() / n);
}
