//! `--events jsonl` end to end: the real binary against the scripted fake
//! server; every stdout line validates against `docs/events.schema.json`
//! (and, when Python's `jsonschema` is installed, against it too), and the
//! sequence makes sense: `run_started` first, `run_finished` last with the
//! process's exit code, stage events inside their stage's start and finish.

use crate::support::schema::validate;
use crate::support::{
    FAKE_API_KEY, FakeServer, OrchRun, Reply, Script, TestRepo, orch, orch_with_model,
    output_logged, signal_reply, write_issue, write_pipeline,
};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::atomic::Ordering;

const ISSUE: &str = "# add() subtracts\n\n`calc.add(2, 3)` returns -1; it should return 5.\n";

fn schema_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/events.schema.json")
}

pub(crate) fn schema() -> Value {
    serde_json::from_str(&std::fs::read_to_string(schema_path()).unwrap()).unwrap()
}

fn buggy_repo() -> TestRepo {
    TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            ("README.md", "# calc\n"),
        ],
        "calc 0.1",
    )
}

/// The events `out` printed: every stdout line is one event that validates
/// against the schema, and the sequence holds together (see the module
/// doc). Returns them.
pub(crate) fn events_of(out: &Output) -> Vec<Value> {
    let text = String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8");
    assert!(
        text.ends_with('\n'),
        "stdout ends with a whole line: {text}"
    );
    let schema = schema();
    let events: Vec<Value> = text
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let ev: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("stdout line {} is not JSON ({e}): {line}", i + 1));
            let errors = validate(&schema, &ev);
            assert!(
                errors.is_empty(),
                "line {} does not validate: {errors:#?}\n{line}",
                i + 1
            );
            ev
        })
        .collect();
    python_validate(&text);
    assert_sequence(&events, out.status.code().expect("exited"));
    events
}

fn assert_sequence(events: &[Value], exit_code: i32) {
    let last = events.last().expect("at least one event");
    assert_eq!(last["type"], "run_finished", "the last event: {last}");
    assert_eq!(
        last["exit_code"], exit_code,
        "run_finished has the real exit code"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "run_finished")
            .count(),
        1
    );
    // Times never go back (RFC 3339 UTC with millis sorts as text).
    for w in events.windows(2) {
        assert!(
            w[0]["ts"].as_str() <= w[1]["ts"].as_str(),
            "{} then {}",
            w[0],
            w[1]
        );
    }
    if last["status"] == "error" {
        assert_eq!(events.len(), 1, "no run, no other event");
        assert!(last["run_id"].is_null());
        return;
    }
    assert_eq!(events[0]["type"], "run_started", "the first event");
    let run_id = &events[0]["run_id"];
    assert!(run_id.is_string());
    assert!(events.iter().all(|e| &e["run_id"] == run_id), "one run id");
    // Stage events pair, and a stage's own events lie between its start and finish.
    let mut open: HashMap<String, usize> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        let stage = e["stage"].as_str().map(str::to_owned);
        match e["type"].as_str().unwrap() {
            "stage_started" => {
                assert!(
                    open.insert(stage.unwrap(), i).is_none(),
                    "started twice: {e}"
                );
            }
            "stage_finished" => {
                let s = stage.unwrap();
                // Only a stage whose inputs could not be merged finishes unstarted.
                assert!(
                    open.remove(&s).is_some() || e["status"] == "failed",
                    "finished without a start: {e}"
                );
            }
            "run_started" | "run_finished" | "stage_skipped" => {}
            _ => {
                let s = stage.expect("a stage event names its stage");
                assert!(open.contains_key(&s), "{e} outside its stage");
            }
        }
    }
    assert!(open.is_empty(), "stages never finished: {open:?}");
}

/// Validates every line with Python's `jsonschema` (the reference
/// implementation) too, when it is installed; says so when it is not.
fn python_validate(lines: &str) {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import jsonschema"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!(
            "SKIPPED: Python's jsonschema check (python3 with the `jsonschema` package not found; `pip install jsonschema`); the test's own validator still ran"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    std::fs::write(&file, lines).unwrap();
    let script = r#"
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
v = jsonschema.Draft202012Validator(schema)
for n, line in enumerate(open(sys.argv[2]), 1):
    errors = list(v.iter_errors(json.loads(line)))
    if errors:
        sys.exit(f"line {n}: {errors[0].message}: {line}")
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(schema_path())
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python jsonschema: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

#[test]
fn issue_to_pr_streams_valid_events_from_start_to_finish() {
    let repo = buggy_repo();
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    Reply::tool_call("c1", "read_file", json!({"path": "calc.py"}))
                        .with_usage(120, 8),
                    crate::support::fix_add("c2"),
                    Reply::tool_call(
                        "c3",
                        "bash",
                        json!({"command": format!("echo {FAKE_API_KEY}; cat calc.py")}),
                    ),
                    Reply::finish("c4", "add() now adds.", None),
                ],
            )
            .agent(
                "review",
                vec![Reply::finish("r1", "Add a test.", Some("request_changes"))],
            )
            .agent(
                "code.r2",
                vec![
                    Reply::tool_call(
                        "c1",
                        "write_file",
                        json!({"path": "test_calc.py", "content": "from calc import add\nassert add(2, 3) == 5\n"}),
                    ),
                    Reply::finish("c2", "Added test_calc.py.", None),
                ],
            )
            .agent(
                "review.r2",
                vec![Reply::finish("r1", "Looks right.", Some("approve"))],
            )
            .agent(
                "docs",
                vec![Reply::finish("d1", "Nothing to document.", None)],
            ),
    );
    let out = OrchRun::with_model_env(&server.base_url, "issue-to-pr", &repo)
        .issue(&issue)
        .args(["--events", "jsonl"])
        .output();
    assert_eq!(out.status.code(), Some(0));
    let events = events_of(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains(FAKE_API_KEY), "the key is redacted");
    assert!(stdout.contains("[REDACTED]"));
    // stderr keeps its progress lines; stdout has no human summary.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("stage code (coder) started"), "{stderr}");

    let started: Vec<&str> = of_type(&events, "stage_started")
        .iter()
        .map(|e| e["stage"].as_str().unwrap())
        .collect();
    assert_eq!(started, ["code", "review", "code.r2", "review.r2", "docs"]);
    let skipped: Vec<&str> = of_type(&events, "stage_skipped")
        .iter()
        .map(|e| e["stage"].as_str().unwrap())
        .collect();
    assert_eq!(skipped, ["code.r3", "review.r3"]);
    let review = of_type(&events, "stage_finished")
        .into_iter()
        .find(|e| e["stage"] == "review")
        .unwrap();
    assert_eq!(review["verdict"], "request_changes");
    assert_eq!(review["status"], "succeeded");

    // One turn event per model reply, with its tokens.
    let turns: Vec<&Value> = of_type(&events, "turn")
        .into_iter()
        .filter(|e| e["stage"] == "code")
        .collect();
    assert_eq!(turns.len(), 4);
    assert_eq!(turns[0]["prompt_tokens"], 120);
    assert_eq!(turns[0]["completion_tokens"], 8);
    assert_eq!(
        turns[0]["tool_calls"],
        json!([{"id": "c1", "name": "read_file"}])
    );
    // Every tool call, with a bounded summary.
    let tools: Vec<(&str, &str)> = of_type(&events, "tool_call")
        .iter()
        .map(|e| (e["stage"].as_str().unwrap(), e["name"].as_str().unwrap()))
        .collect();
    assert_eq!(
        tools,
        [
            ("code", "read_file"),
            ("code", "edit_file"),
            ("code", "bash"),
            ("code", "finish"),
            ("review", "finish"),
            ("code.r2", "write_file"),
            ("code.r2", "finish"),
            ("review.r2", "finish"),
            ("docs", "finish"),
        ]
    );
    let bash = of_type(&events, "tool_call")
        .into_iter()
        .find(|e| e["name"] == "bash")
        .unwrap();
    assert_eq!(bash["exit_code"], 0);
    assert!(
        bash["preview"].as_str().unwrap().contains("a + b"),
        "{bash}"
    );
    // Each agent's budget report.
    assert_eq!(
        of_type(&events, "budget")
            .iter()
            .filter(|e| e["kind"] == "report")
            .count(),
        5
    );
    // The final event carries what --json prints.
    let fin = events.last().unwrap();
    assert_eq!(fin["status"], "succeeded");
    assert_eq!(fin["summary"]["run_id"], events[0]["run_id"]);
    assert_eq!(
        fin["summary"]["final_branch"],
        format!("orch/{}/pr", events[0]["run_id"].as_str().unwrap())
    );
}

#[test]
fn a_failing_verify_and_a_denied_command_stream_valid_events_and_the_real_exit_code() {
    let repo = buggy_repo();
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let pipeline = write_pipeline(
        scratch.path(),
        "gated",
        "stages:\n  code:\n    role: coder\n    verify: \"grep -q 'a + b' calc.py\"\n    verify_rounds: 0\n  docs:\n    role: docs\n    needs: [code]\n",
    );
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call("c1", "bash", json!({"command": "rm -rf /"})),
            Reply::finish("c2", "Done (not really).", None),
        ],
    ));
    let out = OrchRun::with_model_env(&server.base_url, &pipeline, &repo)
        .issue(&issue)
        .args(["--events", "jsonl"])
        .output();
    assert_eq!(out.status.code(), Some(1), "a failed stage");
    let events = events_of(&out);

    let policy = of_type(&events, "policy");
    assert_eq!(policy.len(), 1, "{policy:?}");
    assert_eq!(policy[0]["decision"], "deny");
    assert_eq!(policy[0]["call_id"], "c1");
    assert!(
        policy[0]["reason"]
            .as_str()
            .unwrap()
            .contains("recursive delete"),
        "{}",
        policy[0]
    );
    let verify = of_type(&events, "verify");
    assert_eq!(verify.len(), 1);
    assert_eq!(verify[0]["passed"], false);
    assert_eq!(verify[0]["exit_code"], 1);
    let gate = of_type(&events, "verify_gate");
    assert_eq!(gate.len(), 1);
    assert_eq!(gate[0]["passed"], false);
    let finished = of_type(&events, "stage_finished");
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0]["status"], "failed");
    assert!(
        finished[0]["reason"]
            .as_str()
            .unwrap()
            .contains("verify failed")
    );
    // `docs` never starts: the run stops at the failed stage.
    assert_eq!(of_type(&events, "stage_started").len(), 1);
    let fin = events.last().unwrap();
    assert_eq!(fin["status"], "failed");
    assert_eq!(fin["summary"]["stages"][1]["status"], "pending");
}

#[test]
fn a_stage_without_finish_and_a_command_error_end_with_run_finished() {
    // The model answers in text only: the coder stage fails without finish.
    let repo = buggy_repo();
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let pipeline = write_pipeline(
        scratch.path(),
        "solo",
        "stages:\n  code:\n    role: coder\n",
    );
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text("I think it is fine."),
            Reply::text("Really fine."),
        ],
    ));
    let out = OrchRun::with_model_env(&server.base_url, &pipeline, &repo)
        .issue(&issue)
        .args(["--events", "jsonl"])
        .output();
    let code = out.status.code().unwrap();
    assert_ne!(code, 0);
    let events = events_of(&out);
    let fin = of_type(&events, "stage_finished");
    assert_eq!(fin[0]["status"], "failed");
    assert!(fin[0]["reason"].is_string());

    // A command that fails before any run exists: one event, no run id.
    let mut cmd = orch();
    cmd.args(["resume", "no-such-run", "--repo"])
        .arg(&repo.path)
        .args(["--events", "jsonl"]);
    let out = output_logged(&mut cmd);
    assert_eq!(out.status.code(), Some(2));
    let events = events_of(&out);
    assert_eq!(events[0]["status"], "error");
    assert!(
        events[0]["error"].as_str().unwrap().contains("no-such-run"),
        "{}",
        events[0]
    );
    // --json and --events both want stdout.
    let out = OrchRun::with_model_env(&server.base_url, &pipeline, &repo)
        .issue(&issue)
        .args(["--events", "jsonl", "--json"])
        .output();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        events_of(&out)[0]["error"]
            .as_str()
            .unwrap()
            .contains("--json")
    );
}

/// `orch agent --role explore --task … --events jsonl [extra…]` on `repo`.
fn explore(server: &FakeServer, repo: &TestRepo, extra: &[&str]) -> std::process::Command {
    let mut cmd = orch_with_model(&server.base_url);
    cmd.args(["agent", "--role", "explore", "--task", "Where is add?"])
        .arg("--repo")
        .arg(&repo.path)
        .args(["--events", "jsonl"])
        .args(extra);
    cmd
}

fn grep() -> Reply {
    Reply::tool_call("e1", "grep", json!({"pattern": "def add"}))
}

/// The explorer's script: `first`, then `middle`, then its finish.
fn explore_script(first: Reply, middle: Vec<Reply>) -> Script {
    let mut replies = vec![first];
    replies.extend(middle);
    replies.push(Reply::finish("e2", "add() is in calc.py.", None));
    Script::new().agent("explore", replies)
}

#[test]
fn orch_agent_streams_its_events_and_its_report_in_the_last() {
    let repo = buggy_repo();
    let server = FakeServer::start(explore_script(grep(), vec![]));
    let out = output_logged(&mut explore(&server, &repo, &[]));
    assert_eq!(out.status.code(), Some(0));
    let events = events_of(&out);
    assert_eq!(of_type(&events, "stage_started").len(), 1);
    assert_eq!(of_type(&events, "tool_call")[0]["name"], "grep");
    let fin = events.last().unwrap();
    assert_eq!(fin["status"], "succeeded");
    assert_eq!(fin["summary"]["report"], "add() is in calc.py.");
}

#[test]
fn an_interrupted_run_and_its_resume_stream_paired_events() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "Write two files.\n");
    let pipeline = write_pipeline(
        scratch.path(),
        "linear",
        "stages:\n  one:\n    role: coder\n  two:\n    role: coder\n    needs: [one]\n",
    );
    let (pid, sigint) = signal_reply(libc::SIGINT);
    let server = FakeServer::start(
        Script::new()
            .agent("one", vec![Reply::finish("f", "one done", None)])
            .agent(
                "two",
                vec![
                    Reply::tool_call("s", "bash", json!({"command": "echo started"})),
                    sigint,
                ],
            ),
    );
    let mut cmd = OrchRun::with_model_env(&server.base_url, &pipeline, &repo)
        .issue(&issue)
        .args(["--events", "jsonl"])
        .command();
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    pid.store(child.id(), Ordering::SeqCst);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = events_of(&out);
    let run_id = events[0]["run_id"].as_str().unwrap().to_owned();
    let two = of_type(&events, "stage_finished")
        .into_iter()
        .find(|e| e["stage"] == "two")
        .unwrap()
        .clone();
    assert_eq!(two["status"], "pending", "interrupted: restarts on resume");
    assert_eq!(events.last().unwrap()["status"], "interrupted");

    let server2 =
        FakeServer::start(Script::new().agent("two", vec![Reply::finish("f", "two done", None)]));
    // Resume goes back to the recorded server unless a flag names another.
    let mut cmd = orch_with_model(&server2.base_url);
    cmd.args(["resume", &run_id, "--repo"])
        .arg(&repo.path)
        .args(["--base-url", &server2.base_url, "--model", "fake-model"])
        .args(["--events", "jsonl"]);
    let out = output_logged(&mut cmd);
    assert_eq!(out.status.code(), Some(0));
    let events = events_of(&out);
    assert_eq!(events[0]["run_id"], run_id.as_str());
    let started: Vec<&str> = of_type(&events, "stage_started")
        .iter()
        .map(|e| e["stage"].as_str().unwrap())
        .collect();
    assert_eq!(started, ["two"], "only what was left runs");
    assert_eq!(events.last().unwrap()["status"], "succeeded");
}

#[test]
fn the_test_validator_accepts_and_rejects_what_the_schema_says() {
    let schema = schema();
    let ok = json!({"v": 1, "type": "stage_started", "run_id": "r", "ts": "2026-01-01T00:00:00.000Z", "stage": "code", "role": "coder"});
    assert!(validate(&schema, &ok).is_empty());
    let mut bad = Vec::new();
    for (k, v) in [
        ("v", json!(2)),
        ("type", json!("nope")),
        ("stage", json!(3)),
        ("extra", json!(true)),
        ("run_id", Value::Null),
    ] {
        let mut e = ok.clone();
        e[k] = v;
        bad.push(e);
    }
    let mut missing = ok.clone();
    missing.as_object_mut().unwrap().remove("role");
    bad.push(missing);
    let fin = json!({"v": 1, "type": "run_finished", "run_id": null, "ts": "t", "status": "error", "exit_code": 2, "error": "x", "summary": null});
    assert!(validate(&schema, &fin).is_empty());
    let mut neg = json!({"v": 1, "type": "turn", "run_id": "r", "ts": "t", "stage": "s", "turn": 1, "prompt_tokens": -1, "completion_tokens": 0, "latency_ms": 0, "finish_reason": null, "tool_calls": []});
    assert!(!validate(&schema, &neg).is_empty(), "minimum");
    neg["prompt_tokens"] = json!(1);
    assert!(validate(&schema, &neg).is_empty());
    for e in bad {
        assert!(!validate(&schema, &e).is_empty(), "{e} must fail");
    }
}

#[test]
fn each_event_is_on_the_pipe_while_the_run_is_still_going() {
    // The second model request stops orch (SIGSTOP): what it printed before
    // can only be read if each line was flushed as it was written.
    let repo = buggy_repo();
    let (pid, stop) = signal_reply(libc::SIGSTOP);
    let server = FakeServer::start(explore_script(grep(), vec![stop]));
    let mut child = explore(&server, &repo, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    pid.store(child.id(), Ordering::SeqCst);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    // Wait until orch is stopped (not reaped: WUNTRACED reports the stop).
    let mut wstatus = 0;
    // SAFETY: waits for the child this test started.
    let waited = unsafe { libc::waitpid(child.id() as i32, &mut wstatus, libc::WUNTRACED) };
    assert_eq!(waited, child.id() as i32);
    assert!(libc::WIFSTOPPED(wstatus), "orch is stopped, not gone");
    let mut seen = Vec::new();
    loop {
        let line = rx
            .recv_timeout(crate::support::AWAIT_LIMIT)
            .expect("the tool_call event arrives while orch is stopped");
        let ev: Value = serde_json::from_str(&line).unwrap();
        seen.push(ev["type"].as_str().unwrap().to_owned());
        if ev["type"] == "tool_call" {
            break;
        }
    }
    assert_eq!(seen[0], "run_started");
    // SAFETY: a plain signal to the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
    let status = child.wait().unwrap();
    reader.join().unwrap();
    let rest: Vec<Value> = rx
        .try_iter()
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect();
    assert_eq!(status.code(), Some(0));
    let last = rest.last().unwrap();
    assert_eq!(last["type"], "run_finished");
    assert_eq!(last["exit_code"], 0);
}

#[test]
fn a_spent_token_budget_is_a_budget_event() {
    let repo = buggy_repo();
    let server = FakeServer::start(explore_script(grep().with_usage(900, 20), vec![]));
    let out = output_logged(&mut explore(&server, &repo, &["--max-tokens", "500"]));
    let events = events_of(&out);
    assert_eq!(out.status.code(), Some(1), "the stage failed on its budget");
    let exceeded: Vec<&Value> = of_type(&events, "budget")
        .into_iter()
        .filter(|e| e["kind"] == "exceeded")
        .collect();
    assert_eq!(exceeded.len(), 1, "{events:#?}");
    assert!(
        exceeded[0]["reason"].as_str().unwrap().contains("token"),
        "{}",
        exceeded[0]
    );
    assert_eq!(exceeded[0]["turn"], 1);
}
