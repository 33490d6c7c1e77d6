//! What shaped a run survives its resume (issue 26.4), through the real
//! binary: a run that failed on `--max-tokens` fails on the same budget
//! after `orch resume --retry`, and `orch resume --profile strong` sends its
//! requests to that profile's server and model; both are recorded.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, orch, output_logged, state_json, stdout_json,
    write_issue, write_pipeline,
};
use serde_json::json;

/// A model turn that writes a file and reports 900 + 100 tokens.
fn costly_turn(i: usize) -> Reply {
    Reply::tool_call(
        &format!("c{i}"),
        "write_file",
        json!({"path": format!("f{i}.txt"), "content": "x\n"}),
    )
    .with_usage(900, 100)
}

struct Scratch {
    _dir: tempfile::TempDir,
    issue: std::path::PathBuf,
    pipeline: std::path::PathBuf,
}

fn scratch() -> Scratch {
    let dir = tempfile::tempdir().unwrap();
    let issue = write_issue(dir.path(), "# files\n\nWrite some files.\n");
    let pipeline = write_pipeline(dir.path(), "solo", "stages:\n  work:\n    role: coder\n");
    Scratch {
        _dir: dir,
        issue,
        pipeline,
    }
}

#[test]
fn resume_retry_keeps_the_token_budget_the_run_was_started_with() {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let s = scratch();
    // Three turns pass 2500 tokens; had the resume no budget, the script's
    // finish would end it as a success.
    let mut replies: Vec<Reply> = (1..=3).map(costly_turn).collect();
    replies.extend((4..=6).map(costly_turn));
    replies.push(Reply::finish("f", "done", None));
    let server = FakeServer::start(Script::new().agent("work", replies));
    let out = OrchRun::new(&s.pipeline, &repo)
        .issue(&s.issue)
        .model(&server.base_url, "m")
        .json()
        .args(["--max-tokens", "2500"])
        .output();
    assert_eq!(out.status.code(), Some(1));
    let j = stdout_json(&out);
    let run_id = j["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        j["stages"][0]["reason"],
        "token budget exceeded: 3000 of the run's 2500 tokens"
    );
    assert_eq!(server.requests_for("work").len(), 3);

    // No flag: the model and the budget are the recorded ones.
    let out = output_logged(
        orch()
            .args(["resume", &run_id, "--retry", "--json", "--repo"])
            .arg(&repo.path),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let j = stdout_json(&out);
    let reason = j["stages"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("the run's 2500-token budget was used up")
            || reason.contains("of the run's 2500 tokens"),
        "{reason}"
    );
    assert!(
        server.requests_for("work").len() <= 4,
        "the resumed stage stopped on the budget: {} requests",
        server.requests_for("work").len()
    );
    let st = state_json(&repo, &run_id);
    assert_eq!(st["stages"][0]["status"], "failed");
    assert_eq!(st["settings"]["max_tokens"], 2500);
}

#[test]
fn resume_with_a_profile_sends_to_that_profiles_server_and_model_and_records_it() {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let weak = FakeServer::start(Script::new().agent("work", vec![costly_turn(1)]));
    let strong = FakeServer::start(Script::new().agent(
        "work",
        vec![Reply::finish("f", "done by the strong one", None)],
    ));
    repo.write(
        ".orch/orch.toml",
        format!(
            "default_profile = \"weak\"\n\n[profiles.weak]\nbase_url = \"{}\"\nmodel = \"weak-model\"\n\n[profiles.strong]\nbase_url = \"{}\"\nmodel = \"strong-model\"\n",
            weak.base_url, strong.base_url
        ),
    );
    repo.commit_all("profiles");
    let s = scratch();
    let out = OrchRun::new(&s.pipeline, &repo)
        .issue(&s.issue)
        .json()
        .args(["--max-tokens", "500"])
        .output();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    assert_eq!(weak.requests_for("work")[0].body["model"], "weak-model");

    let out = output_logged(
        orch()
            .args(["resume", &run_id, "--retry", "--profile", "strong"])
            .args(["--max-tokens", "100000", "--json", "--repo"])
            .arg(&repo.path),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        weak.requests_for("work").len(),
        1,
        "nothing more to the weak server"
    );
    let reqs = strong.requests_for("work");
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].body["model"], "strong-model");
    let st = state_json(&repo, &run_id);
    assert_eq!(st["model"], "strong-model");
    assert_eq!(st["base_url"], strong.base_url.as_str());
    // What the resume was given is recorded in turn.
    assert_eq!(st["settings"]["profile"], "strong");
    assert_eq!(st["settings"]["max_tokens"], 100000);
}

#[test]
fn replay_runs_under_the_recorded_limits() {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "calc");
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            crate::support::fix_add("c1"),
            Reply::finish("c2", "add() adds.", None),
        ],
    ));
    let s = scratch();
    let out = OrchRun::new(&s.pipeline, &repo)
        .issue(&s.issue)
        .model(&server.base_url, "m")
        .json()
        .args(["--max-tokens", "90000", "--compact-at", "0.5"])
        .output();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let out = output_logged(
        orch()
            .args(["replay", &run_id, "--json", "--repo"])
            .arg(&repo.path),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let st = state_json(&repo, &replayed);
    assert_eq!(st["settings"]["max_tokens"], 90000);
    assert_eq!(st["settings"]["compact_at"], 0.5);
    assert_eq!(st["stages"][0]["budget"]["limits"]["tokens"], 90000);
}
