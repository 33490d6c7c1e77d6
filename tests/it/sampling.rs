//! Sampling and tool-choice controls through the real binary against the
//! fake server: `temperature`, `seed`, `max_tokens` and `tool_choice` appear
//! in the requests exactly when configured (by flag or by profile, flags
//! winning), they are recorded in `state.json`, and `orch resume` sends the
//! recorded values again unless a flag overrides one.

use crate::support::{
    FakeServer, Recorded, Reply, Script, TestRepo, assert_exit, only_run_id, orch, orch_with_model,
    output_logged, state_json, stdout_json, write_issue, write_pipeline,
};
use serde_json::{Value, json};

/// The four sampling fields of one request body (absent ones as `null`,
/// with `max_tokens` taken from `max_completion_tokens` when that was sent).
fn sampling_of(r: &Recorded) -> Value {
    let field = |k: &str| r.body.get(k).cloned().unwrap_or(Value::Null);
    json!({
        "temperature": field("temperature"),
        "seed": field("seed"),
        "max_tokens": field("max_tokens"),
        "tool_choice": field("tool_choice"),
    })
}

/// Runs `orch agent --role explore` with `args` against a fresh server
/// scripted to finish at once; returns the one request's sampling fields.
fn explore_request(repo: &TestRepo, args: &[&str]) -> Value {
    let server = FakeServer::start(
        Script::new().agent("explore", vec![Reply::finish("f1", "nothing here", None)]),
    );
    let out = output_logged(
        orch_with_model(&server.base_url)
            .current_dir(&repo.path)
            .args(["agent", "--role", "explore", "--task", "Look around."])
            .args(args),
    );
    assert_exit(&out, 0);
    let reqs = server.requests_for("explore");
    assert_eq!(reqs.len(), 1);
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    for key in ["temperature", "seed", "max_tokens", "tool_choice"] {
        if let Some(v) = reqs[0].body.get(key) {
            assert!(!v.is_null(), "`{key}` is sent with a value or not at all");
        }
    }
    sampling_of(&reqs[0])
}

fn repo_with(toml: Option<&str>) -> TestRepo {
    let repo = TestRepo::new();
    repo.write("a.txt", "a\n");
    if let Some(toml) = toml {
        repo.write(".orch/orch.toml", toml);
    }
    repo.commit_all("init");
    repo
}

#[test]
fn sampling_flags_appear_in_requests_exactly_when_given() {
    let repo = repo_with(None);
    // Nothing configured: only the bounded default cap, and `auto` with tools.
    assert_eq!(
        explore_request(&repo, &[]),
        json!({"temperature": null, "seed": null, "max_tokens": 4096, "tool_choice": "auto"})
    );
    assert_eq!(
        explore_request(
            &repo,
            &[
                "--temperature",
                "0",
                "--seed",
                "7",
                "--max-output-tokens",
                "300",
                "--tool-choice",
                "required",
            ],
        ),
        json!({"temperature": 0.0, "seed": 7, "max_tokens": 300, "tool_choice": "required"})
    );
    // Each alone; 0 sends no cap at all.
    assert_eq!(
        explore_request(&repo, &["--max-output-tokens", "0"]),
        json!({"temperature": null, "seed": null, "max_tokens": null, "tool_choice": "auto"})
    );
    assert_eq!(
        explore_request(&repo, &["--temperature", "1.5"]),
        json!({"temperature": 1.5, "seed": null, "max_tokens": 4096, "tool_choice": "auto"})
    );
    assert_eq!(
        explore_request(&repo, &["--seed", "42"]),
        json!({"temperature": null, "seed": 42, "max_tokens": 4096, "tool_choice": "auto"})
    );
    assert_eq!(
        explore_request(&repo, &["--tool-choice", "auto"]),
        json!({"temperature": null, "seed": null, "max_tokens": 4096, "tool_choice": "auto"})
    );
}

#[test]
fn sampling_profile_keys_appear_in_requests_and_flags_win() {
    let repo = repo_with(Some(
        "default_profile = \"small\"\n\n[profiles.small]\ntemperature = 0.5\nseed = 3\nmax_tokens = 0\ntool_choice = \"required\"\n",
    ));
    assert_eq!(
        explore_request(&repo, &[]),
        json!({"temperature": 0.5, "seed": 3, "max_tokens": null, "tool_choice": "required"})
    );
    assert_eq!(
        explore_request(
            &repo,
            &[
                "--temperature",
                "0.1",
                "--max-output-tokens",
                "64",
                "--tool-choice",
                "auto",
            ],
        ),
        json!({"temperature": 0.1, "seed": 3, "max_tokens": 64, "tool_choice": "auto"})
    );
    // A profile setting only one key sends only that one (and the default cap).
    let repo = repo_with(Some(
        "default_profile = \"seeded\"\n\n[profiles.seeded]\nseed = 9\n",
    ));
    assert_eq!(
        explore_request(&repo, &[]),
        json!({"temperature": null, "seed": 9, "max_tokens": 4096, "tool_choice": "auto"})
    );
}

#[test]
fn bad_sampling_values_are_invalid_input_naming_where() {
    let repo = repo_with(Some(
        "default_profile = \"hot\"\n\n[profiles.hot]\ntemperature = 2.5\n",
    ));
    let server = FakeServer::start(Script::new());
    let run = |args: &[&str]| {
        output_logged(
            orch_with_model(&server.base_url)
                .current_dir(&repo.path)
                .args(["agent", "--role", "explore", "--task", "x"])
                .args(args),
        )
    };
    let out = run(&[]);
    assert_exit(&out, 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(".orch/orch.toml:4")
            && err.contains("temperature must be a number from 0 to 2"),
        "{err}"
    );
    // The flag wins over the bad profile value, but is checked the same way.
    let out = run(&["--temperature=-1"]);
    assert_exit(&out, 2);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("flag --temperature"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&["--tool-choice", "none"]);
    assert_exit(&out, 2);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("expected `auto` or `required`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(server.requests().is_empty(), "nothing reached the server");
}

#[test]
fn resume_reuses_recorded_sampling_unless_a_flag_overrides() {
    let repo = TestRepo::new();
    repo.write("README.md", "base\n");
    // The profile's values differ from the run's flags: a resume must send
    // what the run recorded, not what the profile says.
    repo.write(
        ".orch/orch.toml",
        "default_profile = \"p\"\n\n[profiles.p]\ntemperature = 0.9\nseed = 1\nmax_tokens = 1000\n",
    );
    repo.commit_all("base");
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        tmp.path(),
        "p",
        "name: p\nstages:\n  one:\n    role: coder\n  two:\n    role: coder\n    needs: [one]\n",
    );
    let issue = write_issue(tmp.path(), "# do the thing\n");
    let write = |id: &str, path: &str| {
        Reply::tool_call(id, "write_file", json!({"path": path, "content": "x\n"}))
    };
    // Stage two fails (401) in the run and in the first resume, then passes.
    let server = FakeServer::start(
        Script::new()
            .agent(
                "one",
                vec![write("w", "one.txt"), Reply::finish("f", "one done", None)],
            )
            .agent("two", vec![Reply::Status(401, "bad key".into())])
            .agent("two", vec![Reply::Status(401, "bad key".into())])
            .agent(
                "two",
                vec![write("w", "two.txt"), Reply::finish("f", "two done", None)],
            ),
    );
    let out = crate::support::OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .args([
            "--temperature",
            "0.25",
            "--max-output-tokens",
            "0",
            "--tool-choice",
            "required",
        ])
        .json()
        .output();
    assert_exit(&out, 3);
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    assert_eq!(only_run_id(&repo.path), run_id);
    let run_sampling =
        json!({"temperature": 0.25, "seed": 1, "max_tokens": null, "tool_choice": "required"});
    for r in server.requests_for("one") {
        assert_eq!(sampling_of(&r), run_sampling, "flags over the profile");
    }
    let state = state_json(&repo, &run_id);
    assert_eq!(
        state["sampling"], run_sampling,
        "recorded, unset fields as null: {}",
        state["sampling"]
    );

    // Resume with one flag: it wins, the other three come from the record.
    let out = output_logged(
        orch()
            .current_dir(&repo.path)
            .args(["resume", &run_id, "--retry", "--seed", "99", "--json"]),
    );
    assert_exit(&out, 3);
    let two = server.requests_for("two");
    assert_eq!(two.len(), 2);
    let with_seed =
        json!({"temperature": 0.25, "seed": 99, "max_tokens": null, "tool_choice": "required"});
    assert_eq!(sampling_of(&two[0]), run_sampling);
    assert_eq!(sampling_of(&two[1]), with_seed);
    assert_eq!(state_json(&repo, &run_id)["sampling"], with_seed);

    // Resume with no flags: the record (now with seed 99), not the profile.
    let out = output_logged(
        orch()
            .current_dir(&repo.path)
            .args(["resume", &run_id, "--retry", "--json"]),
    );
    assert_exit(&out, 0);
    let resumed = &server.requests_for("two")[2..];
    assert_eq!(resumed.len(), 2, "the retried stage's two turns");
    for r in resumed {
        assert_eq!(r.body["model"], "m");
        assert_eq!(sampling_of(r), with_seed);
    }
    assert!(server.violations().is_empty(), "{:?}", server.violations());
}

#[test]
fn resume_of_a_record_without_sampling_uses_the_profile() {
    // Records written before sampling was recorded have no `sampling`; they
    // still load, and the resumed stages follow the profile.
    let repo = TestRepo::new();
    repo.write("README.md", "base\n");
    repo.write(
        ".orch/orch.toml",
        "default_profile = \"p\"\n\n[profiles.p]\nseed = 5\ntool_choice = \"required\"\n",
    );
    repo.commit_all("base");
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        tmp.path(),
        "p",
        "name: p\nstages:\n  one:\n    role: coder\n",
    );
    let issue = write_issue(tmp.path(), "# do the thing\n");
    let server = FakeServer::start(
        Script::new()
            .agent("one", vec![Reply::Status(401, "bad key".into())])
            .agent("one", vec![Reply::finish("f", "one done", None)]),
    );
    let out = crate::support::OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .args(["--temperature", "0.3"])
        .json()
        .output();
    assert_exit(&out, 3);
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let state_path = repo
        .path
        .join(".git/orch/runs")
        .join(&run_id)
        .join("state.json");
    let mut state: Value =
        serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    assert!(state["sampling"].is_object(), "{}", state["sampling"]);
    state.as_object_mut().unwrap().remove("sampling");
    std::fs::write(&state_path, serde_json::to_vec_pretty(&state).unwrap()).unwrap();

    let out = output_logged(
        orch()
            .current_dir(&repo.path)
            .args(["resume", &run_id, "--retry", "--json"]),
    );
    assert_exit(&out, 0);
    let reqs = server.requests_for("one");
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        sampling_of(&reqs[1]),
        json!({"temperature": null, "seed": 5, "max_tokens": 4096, "tool_choice": "required"}),
        "the old record names no sampling: the profile applies"
    );
    assert_eq!(
        state_json(&repo, &run_id)["sampling"],
        json!({"temperature": null, "seed": 5, "max_tokens": 4096, "tool_choice": "required"}),
        "the resume records what it sent"
    );
}
