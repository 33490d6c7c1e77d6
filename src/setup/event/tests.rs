use super::*;

/// Lines written by orch before the log was typed: one of every shape the
/// setup integration tests (`cargo test --test it setup`) wrote, taken from
/// their `log.jsonl` files.
const BEFORE_TYPED: &str = include_str!("before-typed.jsonl");

/// Shapes no integration test logged, written as the untyped code wrote
/// them (its `json!` objects, keys sorted).
const HAND_WRITTEN: &[&str] = &[
    r#"{"check":null,"check_exit_code":null,"check_output":null,"command":"sleep 9","event":"step","exit_code":null,"output":"","risk":"read","sandbox":"no_new_privs","step":1,"timed_out":true,"ts":"2026-12-05T19:35:07.170Z","verified":false}"#,
    r#"{"completion_tokens":0,"event":"response","finish_reason":null,"latency_ms":5,"prompt_tokens":0,"round":3,"tool_calls":0,"ts":"2026-12-05T19:35:07.170Z"}"#,
    r#"{"event":"tool_calls_recovered","format":"ToolCallTags","recovered_from":"text","ts":"2026-12-05T19:35:07.170Z"}"#,
    r#"{"event":"plan","from_step":2,"plan":{"next":["open a new shell"],"steps":[{"command":"apt-get install -y jq","risk":"system","sudo":true,"timeout_secs":600,"why":"jq"}]},"ts":"2026-12-05T19:35:07.170Z","version":2}"#,
];

/// Shapes added after the log was typed (checks run before their steps),
/// as the integration tests `setup_checks::*` write them.
const CHECKS_BEFORE: &[&str] = &[
    r#"{"check":"test -f a","event":"check_before","exit_code":1,"outcome":"failed","output":"","step":1,"ts":"2026-12-05T22:05:07.170Z","when":"plan"}"#,
    r#"{"check":"touch x","event":"check_before","exit_code":null,"outcome":"not_run","output":"not run before the step: …","step":2,"ts":"2026-12-05T22:05:07.170Z","when":"plan"}"#,
    r#"{"event":"plan_sent_back","message":"plan sent back: …","steps":[1],"ts":"2026-12-05T22:05:07.170Z"}"#,
    r#"{"event":"check_replaced","exit_code":1,"now":"pip show requests pytest","step":1,"ts":"2026-12-06T10:40:07.170Z","was":"pip list --outdated"}"#,
    r#"{"check":"test -f a","check_output":"","event":"step","status":"satisfied","step":2,"ts":"2026-12-05T22:05:07.170Z"}"#,
    r#"{"event":"tool_calling_switch","from":"native","reason":"the model answered in text instead of a native tool call; the following requests ask for one call under a JSON schema","round":1,"to":"constrained","ts":"2026-12-06T07:30:07.170Z"}"#,
    r#"{"event":"request","messages":4,"round":2,"sampling":{},"tool_calls":"constrained","tool_choice":"auto","tool_choice_from":"default","ts":"2026-12-06T07:30:07.170Z"}"#,
    r#"{"check":"ls","check_exit_code":0,"check_output":"deps.txt\n","check_passed_before":true,"command":"echo x > deps.txt","event":"step","exit_code":0,"output":"","risk":"install","sandbox":"landlock","step":1,"timed_out":false,"ts":"2026-12-05T22:05:07.170Z","verified":false}"#,
];

/// Reads one line of a setup log: the event, or the JSON value of a line
/// this orch does not know (an event a newer orch writes, or fields that
/// do not fit), kept whole; `None` when it is not JSON (a torn last line
/// left by a kill mid-write).
fn parse_line(line: &str) -> Option<Result<SetupEvent, Value>> {
    let value: Value = serde_json::from_str(line).ok()?;
    Some(SetupEvent::deserialize(&value).map_err(|_| value))
}

/// The event's name, by an exhaustive match: a new variant must be named
/// here (and gets its line in docs/setup.md).
fn name(event: &SetupEvent) -> &'static str {
    match event {
        SetupEvent::Start(_) => "start",
        SetupEvent::Resume(_) => "resume",
        SetupEvent::Request(_) => "request",
        SetupEvent::Response(_) => "response",
        SetupEvent::ToolCallsRecovered(_) => "tool_calls_recovered",
        SetupEvent::ToolCallingSwitch(_) => "tool_calling_switch",
        SetupEvent::ModelText(_) => "model_text",
        SetupEvent::Tool(_) => "tool",
        SetupEvent::AskUser(_) => "ask_user",
        SetupEvent::Plan(_) => "plan",
        SetupEvent::CheckBefore(_) => "check_before",
        SetupEvent::PlanSentBack(_) => "plan_sent_back",
        SetupEvent::CheckReplaced(_) => "check_replaced",
        SetupEvent::Step(_) => "step",
        SetupEvent::End(_) => "end",
    }
}

#[test]
fn setup_log_lines_written_before_the_log_was_typed_read_as_events_and_write_back_byte_for_byte() {
    let mut names = std::collections::BTreeSet::new();
    for line in BEFORE_TYPED
        .lines()
        .chain(HAND_WRITTEN.iter().copied())
        .chain(CHECKS_BEFORE.iter().copied())
    {
        let v: Value = serde_json::from_str(line).unwrap();
        let ts = v["ts"].as_str().unwrap();
        let Some(Ok(event)) = parse_line(line) else {
            panic!("not read as a known event: {line}");
        };
        assert_eq!(
            event.to_line(ts).unwrap().to_string(),
            line,
            "written back differently"
        );
        assert_eq!(v["event"], name(&event));
        names.insert(name(&event));
    }
    // Every event name orch setup writes is among them.
    assert_eq!(names.len(), 15, "{names:?}");
}

#[test]
fn an_unknown_or_misfit_setup_log_line_is_kept_whole_and_a_torn_one_skipped() {
    let newer = r#"{"event":"novel","a":{"b":1}}"#;
    assert_eq!(
        parse_line(newer),
        Some(Err(serde_json::from_str(newer).unwrap()))
    );
    // A known name whose fields do not fit is kept as it is too.
    let misfit = r#"{"event":"step","step":"one","status":"skipped"}"#;
    assert_eq!(
        parse_line(misfit),
        Some(Err(serde_json::from_str(misfit).unwrap()))
    );
    // A field an older orch did not write takes its default.
    let older = r#"{"event":"response","round":2,"prompt_tokens":7}"#;
    let Some(Ok(SetupEvent::Response(r))) = parse_line(older) else {
        panic!("an older response line is a response");
    };
    assert_eq!((r.round, r.prompt_tokens, r.tool_calls), (2, 7, 0));
    // `error` is left out when there is none.
    let ended = r#"{"event":"end","status":"done"}"#;
    assert_eq!(
        parse_line(ended),
        Some(Ok(SetupEvent::End(End {
            status: "done".into(),
            error: None
        })))
    );
    assert_eq!(
        parse_line(r#"{"event":"step","status":"skipped","step":2}"#),
        Some(Ok(SetupEvent::Step(StepEvent::Skipped {
            step: 2,
            status: StepStatus::Skipped
        })))
    );
    assert!(parse_line(r#"{"event":"resp"#).is_none());
    assert_eq!(parse_line("[1]"), Some(Err(serde_json::json!([1]))));
}
