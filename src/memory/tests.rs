use super::distill::{StageFacts, detect, parse_reply};
use super::*;
use crate::llm::{ChatMessage, FunctionCall, MessageRole, ToolCall};
use crate::runlog::{VerifyReport, VerifyRun};

fn lesson(id: &str, summary: &str, paths: &[&str]) -> Lesson {
    Lesson {
        id: id.into(),
        title: format!("title of {id}"),
        kind: Kind::Pitfall,
        scope: Scope {
            paths: paths.iter().map(|s| s.to_string()).collect(),
            tags: vec![],
        },
        evidence: Some(Evidence {
            run: "r1".into(),
            stage: "code".into(),
            commit: "abc".into(),
            event: "manual".into(),
        }),
        created: "2026-01-01T00:00:00Z".into(),
        expires: None,
        status: Status::Accepted,
        uses: 0,
        failed_uses: 0,
        summary: summary.into(),
        body: "Body: \"quoted\"\nsecond line".into(),
        origin: Origin::Ref,
    }
}

#[test]
fn render_then_parse_is_the_same_lesson() {
    let mut l = lesson(
        "tests-need-fixture",
        "tests need `ORCH_FIXTURE=1`: \"x\" ü",
        &["src/**"],
    );
    l.expires = Some("2027-01-01".into());
    let back = Lesson::parse(&l.render(), "x.md", Origin::Ref).unwrap();
    assert_eq!(back, l);
    let crlf = Lesson::parse(&l.render().replace('\n', "\r\n"), "x.md", Origin::Ref).unwrap();
    assert_eq!(crlf, l);
}

#[test]
fn a_bad_lesson_names_file_line_and_column() {
    let e = Lesson::parse(
        "---\nid: a\ntitle: t\nkind: nope\nsummary: s\n---\n",
        "m.md",
        Origin::Ref,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("m.md:4:"), "{e}");
    // The value is the file's content: named by position, never quoted.
    assert!(!e.contains("nope"), "{e}");
    let e = Lesson::parse(
        "---\nid: a\ntitle: t\nkind: pitfall\nsummary: s\nsk-secret-key: 1\n---\n",
        "m.md",
        Origin::Ref,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("m.md:6:") && !e.contains("sk-secret"), "{e}");
    assert!(
        e.contains("unknown field `…`, expected one of id, title"),
        "{e}"
    );
    let e = Lesson::parse("no front matter", "m.md", Origin::Ref)
        .unwrap_err()
        .to_string();
    assert!(e.contains("m.md:1:1"), "{e}");
}

#[test]
fn globs_match_like_gitignore_paths() {
    assert!(glob_match("src/parser/**", "src/parser/a/b.rs"));
    assert!(glob_match("src/parser/**", "src/parser/x.rs"));
    assert!(!glob_match("src/parser/**", "src/lexer/x.rs"));
    assert!(glob_match("**/*.py", "a/b/c.py"));
    assert!(glob_match("**/*.py", "c.py"));
    assert!(!glob_match("*.py", "a/c.py"));
    assert!(glob_match("calc.?y", "calc.py"));
}

#[test]
fn scoped_lessons_need_a_matching_path_and_others_need_shared_words() {
    let lessons = vec![
        lesson(
            "parser-tabs",
            "the parser rejects tabs in grammar files",
            &["src/parser/**"],
        ),
        lesson("fixture-env", "pytest needs ORCH_FIXTURE=1 set", &[]),
        lesson("unrelated", "docs are built with mdbook", &[]),
    ];
    let q = Query {
        text: "make pytest pass for calc.py; the parser is not involved",
        paths: &["calc.py".to_owned()],
    };
    let ids: Vec<&str> = select(&lessons, &q, "2026-06-01")
        .iter()
        .map(|l| l.id.as_str())
        .collect();
    assert_eq!(ids, ["fixture-env"]);
    let q = Query {
        text: "tabs",
        paths: &["src/parser/grammar.rs".to_owned()],
    };
    let ids: Vec<&str> = select(&lessons, &q, "2026-06-01")
        .iter()
        .map(|l| l.id.as_str())
        .collect();
    assert_eq!(ids, ["parser-tabs"]);
}

#[test]
fn only_accepted_unexpired_unflagged_lessons_are_selected() {
    let mut rejected = lesson("a", "pytest fixture", &[]);
    rejected.status = Status::Rejected;
    let mut expired = lesson("b", "pytest fixture", &[]);
    expired.expires = Some("2026-01-01".into());
    let mut flagged = lesson("c", "pytest fixture", &[]);
    (flagged.uses, flagged.failed_uses) = (3, 2);
    let ok = lesson("d", "pytest fixture", &[]);
    let all = [rejected, expired, flagged, ok];
    let q = Query {
        text: "pytest",
        paths: &[],
    };
    let ids: Vec<&str> = select(&all, &q, "2026-06-01")
        .iter()
        .map(|l| l.id.as_str())
        .collect();
    assert_eq!(ids, ["d"]);
}

#[test]
fn notes_list_ids_in_the_heading_and_stay_within_budget() {
    let long = "x".repeat(290);
    let ls: Vec<Lesson> = (0..9)
        .map(|i| lesson(&format!("l{i}"), &long, &[]))
        .collect();
    let refs: Vec<&Lesson> = ls.iter().collect();
    let (text, ids) = render_notes(&refs);
    assert!(text.len() <= INJECT_BUDGET, "{}", text.len());
    assert!(!ids.is_empty() && ids.len() < 9);
    assert!(
        text.contains(&format!("# Memory ({})", ids.join(", "))),
        "{text}"
    );
    assert_eq!(render_notes(&[]), (String::new(), vec![]));
}

#[test]
fn sanitize_redacts_and_caps() {
    let mut l = lesson("a", &"s".repeat(400), &[]);
    l.body = format!("key is sk-secret-value-123 {}", "b".repeat(2000));
    l.sanitize(&["sk-secret-value-123".to_owned()]);
    assert!(l.summary.chars().count() <= MAX_SUMMARY_CHARS);
    assert!(!l.body.contains("sk-secret-value-123") && l.body.contains("[REDACTED]"));
    assert!(l.body.len() <= MAX_BODY_BYTES + 64);
}

fn call(id: &str, cmd: &str) -> ChatMessage {
    ChatMessage {
        role: MessageRole::Assistant,
        content: None,
        tool_calls: vec![ToolCall {
            id: id.into(),
            kind: "function".into(),
            function: FunctionCall {
                name: "bash".into(),
                arguments: serde_json::json!({ "command": cmd }).to_string(),
            },
        }],
        tool_call_id: None,
    }
}

fn facts(transcript: &[ChatMessage], verify: Option<&VerifyReport>) -> Option<&'static str> {
    detect(&StageFacts {
        transcript,
        verify,
        succeeded: true,
        retried_after_failure: false,
        approved_after_changes: false,
    })
    .map(|e| e.kind)
}

#[test]
fn key_events_are_failing_twice_then_passing_or_a_denial_worked_around() {
    let base = vec![ChatMessage::system("s"), ChatMessage::user("task")];
    let mut t = base.clone();
    for (i, exit) in [1, 1, 0].iter().enumerate() {
        t.push(call(&format!("c{i}"), "pytest -q"));
        t.push(ChatMessage::tool(
            format!("c{i}"),
            format!("out\n[exit {exit}, 0.1s]"),
        ));
    }
    assert_eq!(facts(&t, None), Some("tests_fixed"));
    // Once failing is not enough; a non-test command is not a test.
    assert_eq!(facts(&[&base[..], &t[4..]].concat(), None), None);
    let mut t2 = base.clone();
    t2.push(call("d", "rm -rf /"));
    t2.push(ChatMessage::tool(
        "d",
        "error: bash: command not run: denied by policy: no",
    ));
    t2.push(call("e", "ls"));
    t2.push(ChatMessage::tool("e", "a\n[exit 0, 0.0s]"));
    assert_eq!(facts(&t2, None), Some("denial_worked_around"));
    let run = |code| VerifyRun {
        command: "make test".into(),
        exit_code: Some(code),
        timed_out: false,
        duration_ms: 1,
    };
    let v = VerifyReport {
        commands: vec!["make test".into()],
        max_rounds: 2,
        rounds: vec![vec![run(1)], vec![run(1)], vec![run(0)]],
        passed: true,
        output_tail: String::new(),
    };
    assert_eq!(facts(&base, Some(&v)), Some("verify_fixed"));
    let once = VerifyReport {
        rounds: v.rounds[1..].to_vec(),
        ..v.clone()
    };
    assert_eq!(facts(&base, Some(&once)), None);
}

#[test]
fn replies_parse_wrapped_bare_or_fenced_and_keep_three() {
    let one = r#"{"title":"t","summary":"s","kind":"environment","paths":["a/**"]}"#;
    let got = parse_reply(&format!("```json\n{{\"lessons\": [{one}]}}\n```")).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].kind, Some(Kind::Environment));
    let five = format!("[{one},{one},{one},{one},{one}]");
    assert_eq!(parse_reply(&five).unwrap().len(), 3);
    assert!(parse_reply("no json").is_err());
    assert!(parse_reply(r#"{"lessons": []}"#).unwrap().is_empty());
}

#[test]
fn test_commands_are_runners_and_test_files_not_any_mention_of_one() {
    let verify = ["./ci/check-all".to_owned()];
    for cmd in [
        "python3 test_calc.py",
        "python test_calc.py -v",
        "python3.12 tests/calc_test.py",
        "pytest -q",
        ".venv/bin/pytest tests/",
        "python -m pytest -x",
        "python3 -m unittest discover",
        "go test ./...",
        "cargo test --lib",
        "cargo nextest run",
        "npm test",
        "npm run test:unit",
        "yarn test",
        "node src/calc.spec.ts",
        "node calc.test.js",
        "make check",
        "make test",
        "make -C build test",
        "tox -e py312",
        "nox -s tests",
        "sh test.sh",
        "ORCH_FIXTURE=1 sh test.sh",
        "./run_tests.sh",
        "bash run_tests.sh --fast",
        "cd sub && pytest",
        "timeout 60 go test ./pkg/...",
        "bash -c \"pytest -q\"",
        "go run calc_test.go",
        "./ci/check-all",
    ] {
        assert!(super::distill::is_test_command(cmd, &verify), "{cmd}");
    }
    for cmd in [
        "cat test_calc.py",
        "vim test_x.py",
        "sed -n 1,20p calc_test.go",
        "ls tests/",
        "grep -r test src",
        "python3 calc.py",
        "cargo build",
        "cargo check",
        "go build ./...",
        "npm install",
        "make",
        "make install",
        "echo test",
        "git commit -m 'add a test'",
        "rm test_calc.py",
        "cp test_calc.py /tmp",
    ] {
        assert!(!super::distill::is_test_command(cmd, &verify), "{cmd}");
    }
}
