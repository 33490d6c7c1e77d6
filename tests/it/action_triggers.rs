//! The GitHub Action's pull-request triggers (issue 31, point 3): which
//! events start a react round, and that the job running the model holds no
//! write permission whatever the trigger. The workflow and action files are
//! parsed as YAML and their `trigger` script runs with bash as a runner
//! would (`forge::action_step`); actionlint itself runs in
//! `forge::the_action_and_the_example_workflow_pass_actionlint`.

use crate::forge::action_step;
use crate::support::{
    AWAIT_LIMIT, FakeServer, Reply, Script, TestRepo, assert_exit, fix_add, run_on_fake,
    write_pipeline,
};
use serde_json::{Value, json};
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
            job["steps"][0]["with"]["persist-credentials"], false,
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
            assert!(
                orch_step(wjob).get("api-key").is_none(),
                "{w} holds no model key"
            );
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
    assert_eq!(
        comment("/orch please address the review", "MEMBER"),
        yes("12")
    );
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

/// A stand-in for GitHub's REST API on 127.0.0.1, for the publish job's
/// two calls: the pull request (its head branch) and the comment. Records
/// (method, path, authorization, body) of every request.
struct MiniApi {
    url: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<[String; 4]>>>,
}

impl MiniApi {
    fn start(head_ref: &'static str) -> MiniApi {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = std::sync::Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { break };
                stream.set_read_timeout(Some(AWAIT_LIMIT)).unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let mut parts = line.split_whitespace();
                let method = parts.next().unwrap_or_default().to_owned();
                let path = parts.next().unwrap_or_default().to_owned();
                let (mut len, mut auth) = (0usize, String::new());
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    if let Some((k, v)) = h.split_once(':') {
                        match k.to_ascii_lowercase().as_str() {
                            "content-length" => len = v.trim().parse().unwrap_or(0),
                            "authorization" => auth = v.trim().to_owned(),
                            _ => {}
                        }
                    }
                }
                let mut body = vec![0; len];
                reader.read_exact(&mut body).unwrap();
                let (status, answer) = match (method.as_str(), path.as_str()) {
                    ("GET", "/repos/o/r/pulls/12") => {
                        (200, json!({"number": 12, "head": {"ref": head_ref}}))
                    }
                    ("POST", "/repos/o/r/issues/12/comments") => (201, json!({"id": 1})),
                    _ => (404, json!({"message": "Not Found"})),
                };
                log.lock().unwrap().push([
                    method,
                    path,
                    auth,
                    String::from_utf8_lossy(&body).into_owned(),
                ]);
                let answer = answer.to_string();
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            }
        });
        MiniApi { url, seen }
    }
}

/// What `orch react --no-publish` leaves, played by a script: one new
/// commit on the run's final branch and a round branch, and the summary
/// comment in the record. It writes its arguments to `$STUB_ARGS`.
const REACT_STUB: &str = r#"#!/bin/bash
set -euo pipefail
printf '%s\n' "$@" > "$STUB_ARGS"
run="$2"
tip=$(git rev-parse "orch/$run/pr")
index="$(mktemp)"; rm -f "$index"
GIT_INDEX_FILE="$index" git read-tree "$tip"
blob=$(echo "the reviewer's point, addressed" | git hash-object -w --stdin)
GIT_INDEX_FILE="$index" git update-index --add --cacheinfo "100644,$blob,ROUND.md"
tree=$(GIT_INDEX_FILE="$index" git write-tree)
new=$(git -c user.name=orch -c user.email=orch@localhost commit-tree "$tree" -p "$tip" -m "round" -m "Orch-Run: $run")
git update-ref "refs/heads/orch/$run/pr" "$new"
git update-ref "refs/heads/orch/$run/code.r2" "$new"
echo "One summary for run $run." > "$(git rev-parse --git-common-dir)/orch/runs/$run/react-comment.md"
echo '{"action":"pushed","message":"react round 1 of 3"}'
"#;

#[test]
fn a_react_round_goes_from_the_read_only_agent_job_to_the_publish_job() {
    let token = "ghp_actionReactTokenMustNotPersist01";
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "init");
    let scratch = tempfile::tempdir().unwrap();
    let origin = scratch.path().join("origin.git");
    repo.git(&[
        "init",
        "-q",
        "--bare",
        "-b",
        "main",
        origin.to_str().unwrap(),
    ]);
    repo.git(&["remote", "add", "origin", origin.to_str().unwrap()]);
    repo.git(&["push", "-q", "origin", "main"]);
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![fix_add("c1"), Reply::finish("c2", "add adds", None)],
    ));
    let pipeline = write_pipeline(scratch.path(), "fix", "stages:\n  code:\n    role: coder\n");
    let (code, run) = run_on_fake(&repo, &pipeline, "# add subtracts\n", &server);
    assert_eq!(code, 0);
    let tip = repo
        .git(&["rev-parse", &format!("orch/{run}/pr")])
        .trim()
        .to_owned();
    // What the run's publish job left on the remote: the PR branch (GitHub
    // also shows it as refs/pull/12/head), the record and the run's
    // branches under refs/orch/.
    repo.git(&[
        "push",
        "-q",
        "origin",
        &format!("orch/{run}/pr:refs/heads/orch/7-add"),
        &format!("orch/{run}/pr:refs/pull/12/head"),
        &format!("refs/orch/runs/{run}:refs/orch/runs/{run}"),
        &format!("refs/heads/orch/{run}/*:refs/orch/branches/{run}/*"),
    ]);
    let clone = |name: &str| {
        let dir = scratch.path().join(name);
        repo.git(&[
            "clone",
            "-q",
            origin.to_str().unwrap(),
            dir.to_str().unwrap(),
        ]);
        dir
    };
    let bin = scratch.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("orch"), REACT_STUB).unwrap();
    std::fs::set_permissions(
        bin.join("orch"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let home = scratch.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let home = home.to_str().unwrap();

    // The agent job: a checkout of main without credentials.
    let agent = clone("agent");
    let agent_tmp = scratch.path().join("agent-runner");
    std::fs::create_dir_all(&agent_tmp).unwrap();
    let args_file = scratch.path().join("react-args");
    let (out, outputs) = action_step(
        "react",
        &agent,
        &[
            ("PR", "12"),
            ("ORCH_BASE_URL", ""),
            ("ORCH_MODEL", ""),
            ("ORCH_API_KEY", ""),
            ("GH_TOKEN", token),
            ("EXTRA_ARGS", ""),
            ("RUNNER_TEMP", agent_tmp.to_str().unwrap()),
            ("HOME", home),
            ("PATH", &path),
            ("STUB_ARGS", args_file.to_str().unwrap()),
            ("GITHUB_REPOSITORY", "o/r"),
            ("GITHUB_SERVER_URL", "https://github.com"),
        ],
    );
    assert_exit(&out, 0);
    assert_eq!(
        outputs["run-id"], run,
        "the run is found from the branch's Orch-Run trailer"
    );
    assert_eq!(outputs["status"], "succeeded");
    let argv = std::fs::read_to_string(&args_file).unwrap();
    assert_eq!(
        argv.lines().collect::<Vec<_>>(),
        [
            "react",
            run.as_str(),
            "--repo",
            ".",
            "--from",
            "github:o/r#12",
            "--no-publish",
            "--json"
        ]
    );
    // The record was restored from refs/orch/runs/<run>, and the token was
    // never written into the clone's config.
    assert!(
        agent
            .join(format!(".git/orch/runs/{run}/state.json"))
            .is_file()
    );
    let config = std::fs::read_to_string(agent.join(".git/config")).unwrap();
    assert!(
        !config.contains("extraheader") && !config.contains(token),
        "{config}"
    );
    let artifact = agent_tmp.join("orch-artifact");
    assert_eq!(
        std::fs::read_to_string(artifact.join("pr")).unwrap().trim(),
        "12"
    );
    assert!(
        artifact
            .join(format!("record/{run}/react-comment.md"))
            .is_file()
    );
    let round = String::from_utf8(
        std::process::Command::new("git")
            .arg("-C")
            .arg(&agent)
            .args(["rev-parse", &format!("orch/{run}/pr")])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_owned();
    assert_ne!(round, tip);

    // The publish job: another checkout, the artifact, the API.
    let api = MiniApi::start("orch/7-add");
    let publish = clone("publish");
    let publish_tmp = scratch.path().join("publish-runner");
    std::fs::create_dir_all(&publish_tmp).unwrap();
    let st = std::process::Command::new("cp")
        .arg("-R")
        .arg(&artifact)
        .arg(publish_tmp.join("orch-artifact"))
        .status()
        .unwrap();
    assert!(st.success());
    let (out, outputs) = action_step(
        "publish",
        &publish,
        &[
            ("GH_TOKEN", token),
            ("DRAFT", "true"),
            ("STAGES", "false"),
            ("RUNNER_TEMP", publish_tmp.to_str().unwrap()),
            ("HOME", home),
            ("GITHUB_REPOSITORY", "o/r"),
            ("GITHUB_API_URL", &api.url),
            ("GITHUB_SERVER_URL", "https://github.com"),
        ],
    );
    assert_exit(&out, 0);
    assert_eq!(outputs["pr-url"], "https://github.com/o/r/pull/12");
    let remote = |r: &str| repo.git(&["ls-remote", origin.to_str().unwrap(), r]);
    // The PR branch moved forward to the round's commit (a plain push: a
    // fast-forward), the round's branch waits under refs/orch/.
    assert!(remote("refs/heads/orch/7-add").starts_with(&round));
    assert!(remote(&format!("refs/orch/branches/{run}/code.r2")).starts_with(&round));
    repo.git(&["fetch", "-q", "origin", "refs/heads/orch/7-add"]);
    repo.git(&["merge-base", "--is-ancestor", &tip, &round]);
    // Exactly one comment: the round's summary, with the job's token.
    let seen = api.seen.lock().unwrap().clone();
    let posts: Vec<_> = seen.iter().filter(|r| r[0] == "POST").collect();
    assert_eq!(posts.len(), 1, "{seen:?}");
    assert_eq!(posts[0][1], "/repos/o/r/issues/12/comments");
    assert_eq!(posts[0][2], format!("Bearer {token}"));
    let body: Value = serde_json::from_str(&posts[0][3]).unwrap();
    assert_eq!(body["body"], format!("One summary for run {run}.\n"));
}
