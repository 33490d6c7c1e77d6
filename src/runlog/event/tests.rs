use super::*;

/// Lines written by orch before the log was typed: the demo's `code` stage
/// and one line of every shape the integration tests produced (taken from
/// their `actions.jsonl` files).
const BEFORE_TYPED: &str = include_str!("before-typed.jsonl");

/// Shapes no test above logged, written as the untyped code wrote them
/// (its `json!` objects, keys sorted).
const HAND_WRITTEN: &[&str] = &[
    r#"{"agent":"code/1","depth":1,"elapsed_ms":0,"event":"child_start","max_depth":2,"pid":4242,"role":"explore","time_budget_secs":null,"token_budget":5000,"ts":"2026-12-05T18:54:05.754Z"}"#,
    r#"{"configured":128000,"elapsed_ms":3,"event":"context_window","source":"server","tokens":8192,"ts":"2026-12-05T18:54:05.754Z","turn":1,"used":8192}"#,
    r#"{"elapsed_ms":9,"event":"killed","signal":"SIGTERM","ts":"2026-12-05T18:54:05.754Z"}"#,
    r#"{"elapsed_ms":9,"error":"write the memory ref: locked","event":"memory_uses","ts":"2026-12-05T18:54:05.754Z"}"#,
    r#"{"elapsed_ms":9,"error":"read lessons: bad tree","event":"memory","memory_used":[],"ts":"2026-12-05T18:54:05.754Z"}"#,
    r#"{"elapsed_ms":1,"error":"copy .env: permission denied","event":"worktree_include","ts":"2026-12-05T18:54:05.754Z"}"#,
    r#"{"bytes":180,"elapsed_ms":2,"enabled":true,"event":"context_files","files":[{"bytes":120,"included":150,"path":"solution.py","truncated":false}],"skipped":[{"path":".env","reason":"a secret file (`.env`)"}],"ts":"2026-12-05T18:54:05.754Z"}"#,
    r#"{"command":"false","commit":"abc","duration_ms":0,"elapsed_ms":1,"event":"baseline","exit_code":null,"output":"orch could not run it: x","passed":false,"timed_out":false,"ts":"2026-12-05T18:54:05.754Z"}"#,
    r#"{"changed_paths":1,"elapsed_ms":9,"event":"finish_from_text","ts":"2026-12-05T18:54:05.754Z","turn":2}"#,
    r#"{"command":"./no-rm.sh","decision":"block","duration_ms":4,"elapsed_ms":9,"event":"hook_run","exit_code":2,"hook_event":"PreToolUse","matcher":"Bash","reason":"rm is not allowed","source":".claude/settings.json","timed_out":false,"tool":"bash","ts":"2026-12-05T18:54:05.754Z","turn":1}"#,
    r#"{"bytes":120,"elapsed_ms":9,"event":"mcp_servers","servers":["fx"],"tools":[{"description":"d","name":"mcp__fx__shout","parameters":{"type":"object"}}],"ts":"2026-12-05T18:54:05.754Z"}"#,
    r#"{"bytes":5,"call_id":"c1","duration_ms":3,"elapsed_ms":9,"event":"mcp_call","is_error":false,"server":"fx","tool":"shout","ts":"2026-12-05T18:54:05.754Z","turn":1}"#,
    r#"{"call_id":"c1","command":"touch made","elapsed_ms":9,"event":"ask","expires":null,"id":"1","tool":"bash","ts":"2026-12-05T18:54:05.754Z","turn":1,"via":"control","why":"role ask rule `touch*`"}"#,
    r#"{"allow":false,"by":"orch","call_id":"c1","elapsed_ms":9,"event":"ask_answer","id":"1","reason":"no answer within 5s (--ask-timeout)","ts":"2026-12-05T18:54:05.754Z","turn":1,"waited_ms":5003}"#,
    r#"{"by":"alice","bytes":14,"elapsed_ms":9,"event":"guidance","id":"1","text":"add a test too","ts":"2026-12-05T18:54:05.754Z","turn":2}"#,
];
/// Every line: (its `ts`, its `elapsed_ms`, the line).
fn lines() -> Vec<(String, u64, &'static str)> {
    BEFORE_TYPED
        .lines()
        .chain(HAND_WRITTEN.iter().copied())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["ts"].as_str().unwrap().to_owned(),
                v["elapsed_ms"].as_u64().unwrap(),
                l,
            )
        })
        .collect()
}

#[test]
fn lines_written_before_the_log_was_typed_read_as_events_and_write_back_byte_for_byte() {
    let all = lines();
    let mut names = std::collections::BTreeSet::new();
    for (ts, ms, line) in &all {
        let read = parse_line(line).unwrap();
        assert_eq!(read.elapsed_ms, *ms);
        let Logged::Known(event) = read.event else {
            panic!("not read as a known event: {line}");
        };
        let again = event.to_line(ts, *ms).unwrap().to_string();
        assert_eq!(&again, line, "written back differently");
        names.insert(
            serde_json::to_value(&event).unwrap()["event"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    // Every event name orch wrote before the log was typed is among them,
    // and those added since with a hand-written line (`context_files`,
    // `finish_from_text`, `ask`, `ask_answer`, `guidance`); events first written by typed code
    // (`escalated`, `tool_calling_switch`) are checked by their own tests.
    assert_eq!(names.len(), 42, "{names:?}");
}

#[test]
fn an_unknown_or_misfit_line_is_kept_whole_and_a_torn_one_skipped() {
    let newer = r#"{"elapsed_ms":5,"event":"novel","a":{"b":1}}"#;
    let read = parse_line(newer).unwrap();
    assert_eq!(read.elapsed_ms, 5);
    assert_eq!(
        read.event,
        Logged::Unknown {
            name: "novel".into(),
            line: serde_json::from_str(newer).unwrap()
        }
    );
    // A known name whose fields do not fit is kept as it is too.
    let misfit = r#"{"event":"response","turn":"one"}"#;
    assert!(matches!(
        parse_line(misfit).unwrap().event,
        Logged::Unknown { ref name, .. } if name == "response"
    ));
    // A field an older orch did not write takes its default.
    let older = r#"{"event":"response","turn":2,"prompt_tokens":7}"#;
    let Logged::Known(ActionEvent::Response(r)) = parse_line(older).unwrap().event else {
        panic!("an older response line is a response");
    };
    assert_eq!((r.turn, r.prompt_tokens, r.completion_tokens), (2, 7, 0));
    assert!(parse_line(r#"{"event":"resp"#).is_none());
    assert!(matches!(
        parse_line("[1]").unwrap().event,
        Logged::Unknown { ref name, .. } if name == "?"
    ));
    assert_eq!(parse_log(&format!("{newer}\n\n{older}\n{{")).count(), 2);
}
