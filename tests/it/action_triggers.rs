//! The GitHub Action's pull-request triggers (issue 31, point 3): which
//! events start a react round, and that the job running the model holds no
//! write permission whatever the trigger. The workflow and action files are
//! parsed as YAML and their `trigger` script runs with bash as a runner
//! would (`forge::action_step`); actionlint itself runs in
//! `forge::the_action_and_the_example_workflow_pass_actionlint`.

use crate::forge::action_step;
use crate::support::assert_exit;
use serde_json::Value;
use std::path::Path;

fn yaml(rel: &str) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    serde_saphyr::from_str(&std::fs::read_to_string(root.join(rel)).unwrap()).unwrap()
}

/// The `with:` of the step of `job` that uses orch's action.
fn orch_step(job: &Value) -> &Value {
    job["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["uses"].as_str().is_some_and(|u| u.contains("/orch@")))
        .map(|s| &s["with"])
        .expect("the job uses orch's action")
}

#[test]
fn every_trigger_of_the_example_reaches_only_a_read_only_agent_job() {
    let wf = yaml("examples/github/orch.yml");
    let events: Vec<&String> = wf["on"].as_object().unwrap().keys().collect();
    for pr_event in ["pull_request_review", "check_suite", "workflow_run"] {
        assert!(events.iter().any(|e| *e == pr_event), "on: {events:?}");
    }
    let jobs = wf["jobs"].as_object().unwrap();
    for event in &events {
        // The jobs this event starts: those whose `if:` names it.
        let started: Vec<(&String, &Value)> = jobs
            .iter()
            .filter(|(_, j)| {
                j["if"]
                    .as_str()
                    .is_some_and(|c| c.contains(&format!("github.event_name == '{event}'")))
            })
            .collect();
        assert_eq!(started.len(), 1, "{event} starts exactly one job");
        let (name, job) = started[0];
        assert_eq!(orch_step(job)["mode"], "run", "{event} → {name}");
        let perms = job["permissions"].as_object().unwrap();
        for (scope, level) in perms {
            assert_eq!(level, "read", "{event} → {name}: {scope}: {level}");
        }
        assert_eq!(perms["contents"], "read");
        assert_eq!(
            job["steps"][0]["with"]["persist-credentials"],
            false,
            "{event} → {name}: the checkout keeps no credentials"
        );
        // What writes runs after it and runs no model.
        let writers: Vec<(&String, &Value)> = jobs
            .iter()
            .filter(|(_, j)| {
                j["permissions"]
                    .as_object()
                    .is_some_and(|p| p.values().any(|v| v == "write"))
            })
            .collect();
        for (w, wjob) in writers {
            assert_eq!(wjob["needs"], name.as_str(), "{w} runs after {name}");
            assert_eq!(orch_step(wjob)["mode"], "publish");
            assert!(orch_step(wjob).get("api-key").is_none(), "{w} holds no model key");
        }
    }
    // The conditions say what the issue asks.
    let cond = jobs["agent"]["if"].as_str().unwrap();
    for needed in [
        "github.event.review.state == 'changes_requested'",
        "startsWith(github.event.pull_request.head.ref, 'orch/')",
        "github.event.check_suite.conclusion == 'failure'",
        "startsWith(github.event.check_suite.head_branch, 'orch/')",
        "github.event.workflow_run.conclusion == 'failure'",
        "startsWith(github.event.workflow_run.head_branch, 'orch/')",
        r#"fromJSON('["OWNER", "MEMBER", "COLLABORATOR"]')"#,
    ] {
        assert!(cond.contains(needed), "missing `{needed}` in {cond}");
    }
    assert_eq!(wf["permissions"], serde_json::json!({}));
}

#[test]
fn no_expression_reaches_a_script_of_the_action() {
    let action = yaml("action.yml");
    for step in action["runs"]["steps"].as_array().unwrap() {
        if let Some(script) = step["run"].as_str() {
            assert!(
                !script.contains("${{"),
                "step {}: event text must come through env:, not ${{{{ }}}}",
                step["id"]
            );
        }
    }
}

/// The `trigger` step of action.yml for one event: (triggered, kind, pr).
fn trigger(event: &str, fields: &[(&str, &str)]) -> (String, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut env = vec![
        ("MODE", "run"),
        ("EVENT", event),
        ("ACTION", ""),
        ("LABEL", ""),
        ("COMMENT", ""),
        ("ASSOCIATION", ""),
        ("ON_PR", ""),
        ("ISSUE_NUMBER", ""),
        ("REVIEW_STATE", ""),
        ("HEAD_REF", ""),
        ("CONCLUSION", ""),
        ("PR_NUMBER", ""),
        ("ISSUE", ""),
        ("TRIGGER_LABEL", "orch"),
        ("TRIGGER_COMMAND", "/orch"),
        ("GITHUB_REPOSITORY", "o/r"),
    ];
    for (k, v) in fields {
        env.iter_mut().find(|(key, _)| key == k).unwrap().1 = v;
    }
    let (out, outputs) = action_step("trigger", dir.path(), &env);
    assert_exit(&out, 0);
    assert!(!dir.path().join("pwned").exists(), "event text ran as code");
    (
        outputs["triggered"].clone(),
        outputs["kind"].clone(),
        outputs["pr"].clone(),
    )
}

fn yes(pr: &str) -> (String, String, String) {
    ("true".into(), "pr".into(), pr.into())
}

fn no() -> (String, String, String) {
    ("false".into(), "issue".into(), String::new())
}

#[test]
fn the_action_starts_a_react_round_for_each_pr_trigger_and_for_nothing_else() {
    let on_pr = "https://api.github.com/repos/o/r/pulls/12";
    // A review requesting changes on an orch branch; not an approval, not
    // someone else's branch.
    let review = |state: &str, head: &str| {
        trigger(
            "pull_request_review",
            &[
                ("ACTION", "submitted"),
                ("REVIEW_STATE", state),
                ("HEAD_REF", head),
                ("PR_NUMBER", "12"),
            ],
        )
    };
    assert_eq!(review("changes_requested", "orch/7-add"), yes("12"));
    assert_eq!(review("approved", "orch/7-add"), no());
    assert_eq!(review("commented", "orch/7-add"), no());
    assert_eq!(review("changes_requested", "feature/x"), no());

    // `/orch` on a pull request by someone with write access; a stranger's
    // does nothing, and comment text is data.
    let comment = |body: &str, who: &str| {
        trigger(
            "issue_comment",
            &[
                ("ACTION", "created"),
                ("COMMENT", body),
                ("ASSOCIATION", who),
                ("ON_PR", on_pr),
                ("ISSUE_NUMBER", "12"),
            ],
        )
    };
    assert_eq!(comment("/orch please address the review", "MEMBER"), yes("12"));
    assert_eq!(comment("/orch", "COLLABORATOR"), yes("12"));
    assert_eq!(comment("/orch $(touch pwned)", "OWNER"), yes("12"));
    assert_eq!(comment("/orch", "CONTRIBUTOR"), no());
    assert_eq!(comment("/orch", "NONE"), no());
    assert_eq!(comment("looks good", "OWNER"), no());

    // A failed check suite or workflow run on an orch branch with a PR.
    for event in ["check_suite", "workflow_run"] {
        let done = |conclusion: &str, head: &str, pr: &str| {
            trigger(
                event,
                &[
                    ("ACTION", "completed"),
                    ("CONCLUSION", conclusion),
                    ("HEAD_REF", head),
                    ("PR_NUMBER", pr),
                ],
            )
        };
        assert_eq!(done("failure", "orch/7-add", "12"), yes("12"), "{event}");
        assert_eq!(done("success", "orch/7-add", "12"), no(), "{event}");
        assert_eq!(done("cancelled", "orch/7-add", "12"), no(), "{event}");
        assert_eq!(done("failure", "main", "12"), no(), "{event}");
        assert_eq!(done("failure", "orch/7-add", ""), no(), "{event}: no PR");
    }

    // The issue paths are unchanged: `/orch` on an issue is a run.
    let issue = trigger(
        "issue_comment",
        &[
            ("ACTION", "created"),
            ("COMMENT", "/orch"),
            ("ASSOCIATION", "MEMBER"),
            ("ISSUE_NUMBER", "7"),
        ],
    );
    assert_eq!(issue, ("true".into(), "issue".into(), String::new()));
}
