//! `orch setup`: checks that verify something. Each step's check runs
//! before the step too — when the plan is made (also under `--plan-only`,
//! read-only) and again right before the step — so a check that already
//! passes is caught: a step whose check was seen failing and now passes is
//! skipped as already satisfied; a check that passes before its step is
//! sent back to the model once, and if the model keeps it, the step runs and
//! is reported as not verified. The real binary against the scripted fake
//! model, real commands in temp dirs.

use crate::setup::{Scratch, plan_call, stdout, step};
use crate::support::{FakeServer, Reply, Script, assert_exit, tool_results};
use serde_json::{Value, json};

/// A fake model that answers each request with the next plan.
fn planner(plans: Vec<Vec<Value>>) -> FakeServer {
    let replies = plans
        .into_iter()
        .enumerate()
        .map(|(i, steps)| plan_call(&format!("p{}", i + 1), steps, &[]))
        .collect();
    FakeServer::start(Script::new().agent("setup", replies))
}

/// The `log.jsonl` events of the only setup recorded, as JSON.
fn log_events(s: &Scratch) -> Vec<Value> {
    let log = std::fs::read_to_string(s.records.join(s.only_id()).join("log.jsonl")).unwrap();
    log.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_step_whose_check_already_passes_before_it_is_skipped_as_satisfied() {
    let s = Scratch::new();
    // At plan time neither check passes (no `a` yet); step 1 makes step
    // 2's check pass, so step 2 is already satisfied when its turn comes.
    let steps = vec![
        step("touch a", "install", "test -f a"),
        step("touch a; echo ran >> second.log", "install", "test -f a"),
    ];
    let server = planner(vec![steps]);
    let out = s.run(&server, &["the file a", "--yes"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert_eq!(server.requests().len(), 1, "no send-back: {text}");
    assert!(
        text.contains(
            "step 2 already satisfied: its check `test -f a` passed before the step ran; not run"
        ),
        "{text}"
    );
    assert!(!s.work.join("second.log").exists(), "step 2 ran: {text}");
    let report = &text[text.find("Report: setup").unwrap()..];
    assert!(
        report.contains("Already satisfied (not run: the check passed before the step):\n  2. touch a; echo ran >> second.log"),
        "{report}"
    );
    let state = s.record_json("state.json");
    assert_eq!(state["status"], "done");
    assert_eq!(state["steps"][0]["status"], "verified", "{state}");
    assert_eq!(state["steps"][1]["status"], "satisfied", "{state}");
    // The record has the check runs before each step: at plan time both
    // failed, before step 2 its check passed.
    let before: Vec<(u64, String, Option<i64>)> = log_events(&s)
        .iter()
        .filter(|e| e["event"] == "check_before")
        .map(|e| {
            (
                e["step"].as_u64().unwrap(),
                e["when"].as_str().unwrap().to_owned(),
                e["exit_code"].as_i64(),
            )
        })
        .collect();
    assert_eq!(
        before,
        [
            (1, "plan".to_owned(), Some(1)),
            (2, "plan".to_owned(), Some(1)),
            (1, "step".to_owned(), Some(1)),
            (2, "step".to_owned(), Some(0)),
        ]
    );
    assert!(server.violations().is_empty(), "{:?}", server.violations());
}

#[test]
fn a_check_that_passes_before_its_step_sends_the_plan_back_once_and_the_report_says_it() {
    let s = Scratch::new();
    // `true` and `ls` exit 0 whatever the step did (as `pip list
    // --format=freeze` does): they verify nothing.
    let server = planner(vec![
        vec![step("echo x > deps.txt", "install", "true")],
        vec![step("echo x > deps.txt", "install", "ls")],
    ]);
    let out = s.run(&server, &["the project's dependencies", "--yes"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2, "sent back once, not twice: {text}");
    let back = &tool_results(&reqs[1])[0];
    assert!(
        back.contains(
            "plan sent back: the check of step 1 (`true`) already passes before the step ran"
        ),
        "{back}"
    );
    assert!(
        back.contains("A check must fail now and pass only after its step"),
        "{back}"
    );
    assert!(
        text.contains("plan sent back: the check of step 1"),
        "{text}"
    );
    // The model kept a check that passes before: the step runs (it is what
    // the plan says) and is reported as not verified.
    assert_eq!(
        std::fs::read_to_string(s.work.join("deps.txt")).unwrap(),
        "x\n"
    );
    assert!(
        text.contains("step 1 ran, but its check `ls` passed before the step too: it verifies nothing (not verified)"),
        "{text}"
    );
    let report = &text[text.find("Report: setup").unwrap()..];
    assert!(
        report.contains("Not verified (the check passed before the step too, so it shows nothing; the plan was sent back once for such checks):\n  1. echo x > deps.txt   (check: ls)"),
        "{report}"
    );
    assert!(!report.contains("Changed:\n  1."), "{report}");
    let state = s.record_json("state.json");
    assert_eq!(state["steps"][0]["status"], "unverified", "{state}");
    let events = log_events(&s);
    let sent: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "plan_sent_back")
        .collect();
    assert_eq!(sent.len(), 1, "{events:?}");
    assert_eq!(sent[0]["steps"], json!([1]));
}

#[test]
fn a_check_that_fails_before_and_passes_after_its_step_is_accepted() {
    let s = Scratch::new();
    let server = planner(vec![vec![step(
        "echo x > deps.txt",
        "install",
        "test -f deps.txt",
    )]]);
    let out = s.run(&server, &["the project's dependencies", "--yes"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert_eq!(server.requests().len(), 1, "{text}");
    assert!(text.contains("check before $ test -f deps.txt"), "{text}");
    assert!(text.contains("step 1 verified"), "{text}");
    assert!(!text.contains("Not verified"), "{text}");
    assert!(!text.contains("sent back"), "{text}");
    assert_eq!(
        s.record_json("state.json")["steps"][0]["status"],
        "verified"
    );
    let plan_time: Vec<Value> = log_events(&s)
        .into_iter()
        .filter(|e| e["event"] == "check_before" && e["when"] == "plan")
        .collect();
    assert_eq!(plan_time.len(), 1);
    assert_eq!(plan_time[0]["exit_code"], 1);
}

#[test]
fn plan_only_runs_checks_before_read_only_and_flags_one_that_already_passes() {
    let s = Scratch::new();
    let server = planner(vec![
        vec![
            step("touch made", "install", "true"),
            // A check that would write: before its step it runs read-only
            // (or not at all), so nothing is created.
            step("touch other", "install", "touch canary-check"),
        ],
        vec![step("touch made", "install", "true")],
    ]);
    let out = s.run(&server, &["a file", "--plan-only"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert_eq!(server.requests().len(), 2, "{text}");
    assert!(
        text.contains("plan sent back: the check of step 1 (`true`)"),
        "{text}"
    );
    assert!(
        text.contains(
            "warning: step 1's check `true` already passes before the step: it verifies nothing"
        ),
        "{text}"
    );
    assert!(text.contains("plan only: nothing was changed"), "{text}");
    for f in ["made", "other", "canary-check"] {
        assert!(!s.work.join(f).exists(), "{f} was created: {text}");
    }
    assert_eq!(s.record_json("state.json")["status"], "planned");
}

#[test]
fn an_unknown_setup_tool_gets_the_tools_with_their_required_arguments() {
    let s = Scratch::new();
    let server = FakeServer::start(Script::new().agent(
        "setup",
        vec![
            Reply::tool_call(
                "u1",
                "install_deps",
                json!({"requirements.txt": "requests"}),
            ),
            plan_call("p1", vec![], &[]),
        ],
    ));
    let out = s.run(&server, &["nothing", "--plan-only"]);
    assert_exit(&out, 0);
    let result = &tool_results(&server.requests()[1])[0];
    assert!(
        result.contains(
            "unknown tool `install_deps`; call one of the offered tools by name, with its required arguments: detect_system(), check_command(command), run_command(command), ask_user(question), plan(steps)"
        ),
        "{result}"
    );
}

#[test]
fn a_pip_step_sent_back_is_offered_pip_show_of_its_own_packages_run_first() {
    // The 1.5B model kept `pip list --outdated` after the generic advice
    // (docs/setup.md, 2026-12-06). For a pip install, orch builds the check
    // from the step's own packages — `python3 -m pip show NAME…` — runs it
    // (read-only) and says what it does now: it fails for a package that
    // is missing, and passes for one that is installed (the step is done).
    let s = Scratch::new();
    std::fs::write(
        s.work.join("requirements.txt"),
        "orch-canary-not-installed>=1  # never on any index\n",
    )
    .unwrap();
    let server = planner(vec![
        vec![
            step(
                "python3 -m pip install -r requirements.txt",
                "install",
                "true",
            ),
            step("python3 -m pip install pip", "install", "true"),
        ],
        vec![step(
            "python3 -m pip install -r requirements.txt",
            "install",
            "python3 -m pip show orch-canary-not-installed",
        )],
    ]);
    let out = s.run(&server, &["the test dependencies", "--plan-only"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2, "{text}");
    let back = &tool_results(&reqs[1])[0];
    assert!(
        back.contains("Checked by orch: for step 1, `python3 -m pip show orch-canary-not-installed` fails now (exit 1) and passes once orch-canary-not-installed is installed: use it as step 1's check."),
        "{back}"
    );
    assert!(
        back.contains("Checked by orch: for step 2, `python3 -m pip show pip` already passes: pip is installed, so the step is done; leave it out of the plan."),
        "{back}"
    );
    assert!(
        text.contains("offered check $ python3 -m pip show orch-canary-not-installed"),
        "{text}"
    );
    // The plan the model made with it: a check that fails before its step.
    let before: Vec<(String, Option<i64>)> = log_events(&s)
        .iter()
        .filter(|e| e["event"] == "check_before")
        .map(|e| {
            (
                e["when"].as_str().unwrap().to_owned(),
                e["exit_code"].as_i64(),
            )
        })
        .collect();
    let at = |when: &str, code| (when.to_owned(), Some(code));
    assert_eq!(
        before,
        [
            at("plan", 0),
            at("plan", 0),
            at("offered", 1),
            at("offered", 0),
            at("plan", 1)
        ],
        "{text}"
    );
    assert!(!text.contains("warning: step 1's check"), "{text}");
}

#[test]
fn a_pip_steps_check_kept_after_the_send_back_is_replaced_by_orchs_failing_one() {
    // The 1.5B model, told why and offered a check, may still keep its
    // own: after the one send-back, a check that passes before its step is
    // replaced by orch's check of the step's own packages when that one
    // fails now — the plan shown (and confirmed) then verifies something.
    let s = Scratch::new();
    std::fs::write(
        s.work.join("requirements.txt"),
        // One installed, one missing: `pip show pip orch-canary-…` would
        // exit 0 (pip answers for the one it finds), so each gets its own.
        "pip\norch-canary-not-installed\n",
    )
    .unwrap();
    let kept = || {
        vec![step(
            "python3 -m pip install --upgrade -r requirements.txt",
            "install",
            "true",
        )]
    };
    let server = planner(vec![kept(), kept()]);
    let out = s.run(&server, &["the test dependencies", "--plan-only"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert_eq!(server.requests().len(), 2, "{text}");
    assert!(
        text.contains("step 1's check `true` passed before the step again; orch checks it with `python3 -m pip show pip && python3 -m pip show orch-canary-not-installed` instead (it fails now, exit 1, and passes once the step installed pip, orch-canary-not-installed)"),
        "{text}"
    );
    assert!(!text.contains("warning: step 1's check"), "{text}");
    let plan = s.record_json("plan.json");
    assert_eq!(
        plan["steps"][0]["check"],
        "python3 -m pip show pip && python3 -m pip show orch-canary-not-installed"
    );
    let replaced: Vec<Value> = log_events(&s)
        .into_iter()
        .filter(|e| e["event"] == "check_replaced")
        .collect();
    assert_eq!(replaced.len(), 1);
    assert_eq!(replaced[0]["was"], "true");
    assert_eq!(replaced[0]["exit_code"], 1);
}

#[test]
fn a_pip_steps_check_that_does_not_parse_is_replaced_and_another_is_refused() {
    // The 1.5B model (docs/setup.md, 2026-12-06 10:46): its check ended in
    // a stray quote, and it sent the same after the refusal. For a pip
    // step orch has a check of its own that fails now: it takes that one.
    // A check with no such replacement is refused as before.
    let s = Scratch::new();
    std::fs::write(
        s.work.join("requirements.txt"),
        "orch-canary-not-installed\n",
    )
    .unwrap();
    let stray = "python3 -c 'import orch_canary' && pip show orch-canary-not-installed'";
    let server = planner(vec![
        vec![step("touch made", "install", "test -f made'")],
        vec![step(
            "python3 -m pip install -r requirements.txt",
            "install",
            stray,
        )],
    ]);
    let out = s.run(&server, &["the test dependencies", "--plan-only"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2, "{text}");
    let refused = &tool_results(&reqs[1])[0];
    assert!(
        refused.contains("error: the plan is refused: step 1 `touch made`: its check `test -f made'` does not parse as a shell command"),
        "{refused}"
    );
    assert!(
        text.contains(&format!("step 1's check `{stray}` does not parse as a shell command (`bash -n`: line 1: unexpected EOF while looking for matching")),
        "{text}"
    );
    assert!(
        text.contains("orch checks it with `python3 -m pip show orch-canary-not-installed` instead (it fails now, exit 1"),
        "{text}"
    );
    let plan = s.record_json("plan.json");
    assert_eq!(
        plan["steps"][0]["check"],
        "python3 -m pip show orch-canary-not-installed"
    );
    let replaced: Vec<Value> = log_events(&s)
        .into_iter()
        .filter(|e| e["event"] == "check_replaced")
        .collect();
    assert_eq!(replaced.len(), 1, "{replaced:?}");
    assert_eq!(replaced[0]["was"], stray);
}
