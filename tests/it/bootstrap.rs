//! Lane bootstrap end to end: `.worktreeinclude` copies ignored files into
//! every lane (never into a commit), with gitignore rules at any depth
//! (exactly the selected files, in parent directories made for them); a
//! cached `setup:` command prepares the lane once per lockfile state (a
//! counter file outside the repository proves how often it ran), a failing
//! setup fails the stage before any model request, and the verify baseline
//! on the start commit reaches the reviewer.

use crate::support::{
    FAKE_API_KEY, FakeServer, OrchRun, Reply, Script, TestRepo, only_run_id, read_jsonl,
    record_dir, stage_events, stage_record, state_json, tool_results, user_text, write_issue,
    write_pipeline,
};
use serde_json::{Value, json};
use std::path::Path;

const ISSUE: &str = "# Tidy up\n\nMake the change the task asks for.\n";

/// Runs `yaml` on `repo` with the model given by environment (so the fake
/// API key is a known secret); the exit code and the run id.
fn run(repo: &TestRepo, yaml: &str, server: &FakeServer) -> (i32, String) {
    let out = run_output(repo, yaml, server);
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    (out.status.code().unwrap_or(-1), only_run_id(&repo.path))
}

/// `orch run` of `yaml` on `repo`, to its end.
fn run_output(repo: &TestRepo, yaml: &str, server: &FakeServer) -> std::process::Output {
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let pipeline = write_pipeline(scratch.path(), "boot", yaml);
    OrchRun::with_model_env(&server.base_url, &pipeline, repo)
        .issue(&issue)
        .output()
}

/// Every path in every commit reachable from an `orch/` or `orch-lanes/` branch.
fn paths_in_orch_commits(repo: &TestRepo) -> Vec<String> {
    let commits = repo.git(&["rev-list", "--branches=orch/*", "--branches=orch-lanes/*"]);
    assert!(!commits.trim().is_empty(), "the run left orch/ branches");
    let mut paths = Vec::new();
    for c in commits.lines() {
        let tree = repo.git(&["ls-tree", "-r", "--name-only", c]);
        paths.extend(tree.lines().map(str::to_owned));
    }
    paths
}

#[test]
fn included_ignored_files_reach_the_lane_but_never_a_commit() {
    let repo = TestRepo::with_commit(
        &[
            (".gitignore", ".env\nlocal.secret\nnode_modules/\n"),
            (".worktreeinclude", "# copied into every lane\n.env\n"),
            ("app.py", "print('hi')\n"),
        ],
        "app",
    );
    let env_text = format!("APP_MODE=local-dev\nOPENAI_API_KEY={FAKE_API_KEY}\n");
    repo.write(".env", &env_text);
    repo.write("local.secret", "ignored but not included\n");
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    Reply::tool_call(
                        "c1",
                        "bash",
                        json!({"command": "cat .env; test -e local.secret && echo LEAKED || echo no-local-secret"}),
                    ),
                    // The model changes the lane's copy and the code.
                    Reply::tool_call(
                        "c2",
                        "bash",
                        json!({"command": "echo APP_MODE=changed-by-agent >> .env && echo \"print('bye')\" > app.py"}),
                    ),
                    Reply::finish("c3", "Changed app.py.", None),
                ],
            )
            .agent(
                "review",
                vec![
                    Reply::tool_call("r0", "list_files", json!({})),
                    Reply::tool_call("r1", "bash", json!({"command": "cat .env"})),
                    Reply::finish("r2", "Fine.", Some("approve")),
                ],
            ),
    );
    let yaml =
        "stages:\n  code:\n    role: coder\n  review:\n    role: reviewer\n    needs: [code]\n";
    let (code, run_id) = run(&repo, yaml, &server);
    assert_eq!(code, 0);

    // The stage's `cat .env` shows the file, its known secret redacted.
    let seen = tool_results(&server.requests_for("code")[1]).join("\n");
    assert!(seen.contains("APP_MODE=local-dev"), "{seen}");
    assert!(seen.contains("OPENAI_API_KEY=[REDACTED]"), "{seen}");
    assert!(!seen.contains(FAKE_API_KEY), "{seen}");
    // Ignored but not included: not copied.
    assert!(seen.contains("no-local-secret"), "{seen}");
    // Not shown unless read: the gitignore-aware listing leaves it out.
    let listed = tool_results(&server.requests_for("review")[1]).join("\n");
    assert!(
        listed.contains("app.py") && !listed.contains(".env"),
        "{listed}"
    );
    // The next stage's lane gets the user's file back, not the agent's edit.
    let seen = tool_results(&server.requests_for("review")[2]).join("\n");
    assert!(seen.contains("APP_MODE=local-dev"), "{seen}");
    assert!(!seen.contains("changed-by-agent"), "{seen}");

    // No commit of the run contains it; the code change is committed.
    let paths = paths_in_orch_commits(&repo);
    assert!(!paths.iter().any(|p| p == ".env"), "{paths:?}");
    let branch = format!("orch/{run_id}/code");
    assert_eq!(
        repo.git(&["show", &format!("{branch}:app.py")]),
        "print('bye')\n"
    );
    // The user's own file is untouched.
    assert_eq!(repo.read(".env"), env_text);

    let record = record_dir(&repo, &run_id);
    let copies = stage_events(&record, "code", "worktree_include");
    assert_eq!(copies.len(), 1);
    assert_eq!(copies[0]["copied"], json!([".env"]));
    assert!(
        ["reflink", "copy"].contains(&copies[0]["method"].as_str().unwrap()),
        "{}",
        copies[0]
    );
    // The review stage reused the lane: the changed copy was replaced.
    let copies = stage_events(&record, "review", "worktree_include");
    assert_eq!(copies[0]["copied"], json!([".env"]), "{}", copies[0]);
}

#[test]
fn an_included_file_the_lane_does_not_ignore_is_not_copied() {
    // The user ignores `.env` only in an uncommitted .gitignore edit: the
    // lane (at HEAD) would commit it, so it is left out.
    let repo = TestRepo::with_commit(
        &[
            (".gitignore", "node_modules/\n"),
            (".worktreeinclude", ".env\n"),
            ("app.py", "print('hi')\n"),
        ],
        "app",
    );
    repo.write(".gitignore", "node_modules/\n.env\n");
    repo.write(".env", "APP_MODE=local-dev\n");
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call(
                "c1",
                "bash",
                json!({"command": "test -e .env && echo PRESENT || echo ABSENT"}),
            ),
            Reply::finish("c2", "Looked.", None),
        ],
    ));
    let (code, run_id) = run(&repo, "stages:\n  code:\n    role: coder\n", &server);
    assert_eq!(code, 0);
    let seen = tool_results(&server.requests_for("code")[1]).join("\n");
    assert!(seen.contains("ABSENT"), "{seen}");
    let copies = stage_events(&record_dir(&repo, &run_id), "code", "worktree_include");
    assert_eq!(copies[0]["not_ignored_in_lane"], json!([".env"]));
    assert!(!paths_in_orch_commits(&repo).iter().any(|p| p == ".env"));
}

#[test]
fn included_files_follow_gitignore_rules_at_any_depth() {
    let repo = TestRepo::with_commit(
        &[
            (".gitignore", ".env\n*.local\nsecrets/\nnode_modules/\n"),
            (
                ".worktreeinclude",
                "config/*.local\n!config/keep.local\n**/.env\nsecrets/\n",
            ),
            ("app.py", "print('hi')\n"),
            ("services/api/main.py", "print('api')\n"),
        ],
        "app",
    );
    let copied = [
        ".env",
        // Nothing under config/ or tools/ is tracked.
        "config/app.local",
        "secrets/nested/cert.pem",
        "secrets/token",
        "services/api/.env",
        "tools/dev/.env",
    ];
    let left_out = [
        // The negation.
        "config/keep.local",
        // Matches, but git does not ignore it: the stage would commit it.
        "config/notes.txt",
        // Ignored, but no line matches.
        "other.local",
        // An unanchored line does not reach into an ignored directory.
        "node_modules/pkg/.env",
    ];
    for path in copied.iter().chain(&left_out) {
        repo.write(path, format!("local {path}\n"));
    }
    let before = repo.snapshot();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call(
                "c1",
                "bash",
                json!({"command": "find . -path ./.git -prune -o -type f -print | sort; cat config/app.local"}),
            ),
            Reply::finish("c2", "Looked.", None),
        ],
    ));
    let (code, run_id) = run(&repo, "stages:\n  code:\n    role: coder\n", &server);
    assert_eq!(code, 0);

    // The lane holds its checkout and exactly the selected files, in
    // parent directories made for them.
    let seen = tool_results(&server.requests_for("code")[1]).join("\n");
    let mut expected: Vec<String> = [
        ".gitignore",
        ".worktreeinclude",
        "app.py",
        "services/api/main.py",
    ]
    .iter()
    .chain(&copied)
    .map(|p| format!("./{p}"))
    .collect();
    expected.sort();
    let listed: Vec<&str> = seen.lines().take_while(|l| l.starts_with("./")).collect();
    assert_eq!(listed, expected, "{seen}");
    assert!(seen.contains("local config/app.local"), "{seen}");
    let copies = stage_events(&record_dir(&repo, &run_id), "code", "worktree_include");
    assert_eq!(copies[0]["copied"], json!(copied), "{}", copies[0]);

    let paths = paths_in_orch_commits(&repo);
    assert!(
        !paths.iter().any(|p| copied.contains(&p.as_str())),
        "{paths:?}"
    );
    before.assert_unchanged(&repo.snapshot());
}

/// Writes `.orch/orch.toml` (untracked) with a setup command that appends
/// a line to `counter` and a `[sandbox]` that lets it write there.
fn counting_setup(repo: &TestRepo, counter: &Path) {
    let dir = counter.parent().unwrap().display().to_string();
    let cmd = format!(
        "echo \"setup in $PWD\" && echo ran >> {} && mkdir -p node_modules && echo ok > node_modules/.ready",
        counter.display()
    );
    repo.write(
        ".orch/orch.toml",
        format!(
            "[sandbox]\nwritable = [{dir:?}]\n\n[setup]\ncommand = {cmd:?}\nlockfiles = [\"package-lock.json\"]\n"
        ),
    );
}

#[test]
fn setup_runs_once_per_lane_and_again_only_after_the_lockfile_changes() {
    let repo = TestRepo::with_commit(
        &[
            (".gitignore", "node_modules/\n.orch/\n"),
            ("package-lock.json", "{\"lockfileVersion\": 3}\n"),
        ],
        "lock",
    );
    let outside = tempfile::tempdir().unwrap();
    let counter = outside.path().canonicalize().unwrap().join("count");
    counting_setup(&repo, &counter);
    let finish = |id: &str| Reply::finish(id, "Done.", None);
    let server = FakeServer::start(
        Script::new()
            .agent(
                "first",
                vec![
                    Reply::tool_call("a1", "bash", json!({"command": "cat node_modules/.ready"})),
                    finish("a2"),
                ],
            )
            .agent("second", vec![
                Reply::tool_call(
                    "b1",
                    "write_file",
                    json!({"path": "package-lock.json", "content": "{\"lockfileVersion\": 3, \"packages\": {}}\n"}),
                ),
                finish("b2"),
            ])
            .agent("third", vec![finish("c1")]),
    );
    let yaml = "stages:\n  first:\n    role: coder\n  second:\n    role: coder\n    needs: [first]\n  third:\n    role: coder\n    needs: [second]\n";
    let (code, run_id) = run(&repo, yaml, &server);
    assert_eq!(code, 0);

    // first: ran; second: same lane, same lockfile: skipped; third: the
    // lockfile second changed: ran again.
    let count = std::fs::read_to_string(&counter).unwrap();
    assert_eq!(count.lines().count(), 2, "{count:?}");
    let state = state_json(&repo, &run_id);
    let ran: Vec<Value> = ["first", "second", "third"]
        .iter()
        .map(|s| stage_record(&state, s)["setup"]["ran"].clone())
        .collect();
    assert_eq!(ran, [json!(true), json!(false), json!(true)]);
    let keys: Vec<Value> = ["first", "second", "third"]
        .iter()
        .map(|s| stage_record(&state, s)["setup"]["key"].clone())
        .collect();
    assert_eq!(keys[0], keys[1]);
    assert_ne!(keys[1], keys[2]);
    assert_eq!(
        stage_record(&state, "first")["setup"]["lockfiles"],
        json!(["package-lock.json"])
    );
    // The setup prepared the lane before the agent's first command.
    let seen = tool_results(&server.requests_for("first")[1]).join("\n");
    assert!(seen.contains("ok"), "{seen}");
    // Its output is in the run record; the cache is in no commit.
    let record = record_dir(&repo, &run_id);
    let log = std::fs::read_to_string(record.join("stages/first/setup.log")).unwrap();
    assert!(log.contains("setup in "), "{log}");
    assert!(!record.join("stages/second/setup.log").exists());
    let paths = paths_in_orch_commits(&repo);
    assert!(
        !paths
            .iter()
            .any(|p| p.contains("orch-setup") || p.starts_with("node_modules")),
        "{paths:?}"
    );
}

#[test]
fn a_failing_setup_fails_the_stage_before_any_model_request() {
    let repo = TestRepo::with_commit(&[("app.py", "print('hi')\n")], "app");
    let server = FakeServer::start(
        Script::new().agent("code", vec![Reply::finish("c1", "never served", None)]),
    );
    let yaml = "setup: \"echo 'npm ERR! registry unreachable'; exit 7\"\nstages:\n  code:\n    role: coder\n";
    let (code, run_id) = run(&repo, yaml, &server);
    assert_eq!(code, 1);
    assert!(
        server.requests().is_empty(),
        "{:?}",
        server.requests().len()
    );
    assert_eq!(server.remaining("code"), 1);

    let state = state_json(&repo, &run_id);
    let rec = stage_record(&state, "code");
    assert_eq!(rec["status"], "failed");
    let reason = rec["reason"].as_str().unwrap();
    assert!(reason.contains("lane setup failed"), "{reason}");
    assert!(reason.contains("exited 7"), "{reason}");
    assert!(reason.contains("no model was called"), "{reason}");
    assert!(reason.contains("npm ERR! registry unreachable"), "{reason}");
    assert_eq!(rec["setup"]["exit_code"], 7);
    assert_eq!(rec["setup"]["passed"], false);
    assert_eq!(rec["turns"], 0);
    let log =
        std::fs::read_to_string(record_dir(&repo, &run_id).join("stages/code/setup.log")).unwrap();
    assert!(log.contains("npm ERR! registry unreachable"), "{log}");
}

#[test]
fn a_bad_setup_key_is_an_input_error_naming_the_file_and_line() {
    let repo = TestRepo::with_commit(&[("app.py", "print('hi')\n")], "app");
    repo.write(
        ".orch/orch.toml",
        "[setup]\ncommand = \"true\"\ntimeout = 3\n",
    );
    let server = FakeServer::start(Script::new());
    let out = run_output(&repo, "stages:\n  code:\n    role: coder\n", &server);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("orch.toml:3:"), "{err}");
    assert!(err.contains("timeout"), "{err}");
    assert!(
        !repo.path.join(".git/orch/runs").exists() || {
            std::fs::read_dir(repo.path.join(".git/orch/runs"))
                .unwrap()
                .count()
                == 0
        }
    );
}

#[test]
fn the_baseline_tells_the_reviewer_which_failures_were_already_there() {
    let check = "grep -q 'a + b' calc.py || { echo 'FAIL: test_add: add(2, 3) == -1'; exit 1; }";
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "calc");
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    crate::support::fix_add("c1"),
                    Reply::finish("c2", "add() adds.", None),
                ],
            )
            .agent(
                "review",
                vec![Reply::finish("r1", "Good.", Some("approve"))],
            ),
    );
    let yaml = format!(
        "stages:\n  code:\n    role: coder\n    verify: \"{check}\"\n  review:\n    role: reviewer\n    needs: [code]\n"
    );
    let (code, run_id) = run(&repo, &yaml, &server);
    assert_eq!(code, 0);

    let state = state_json(&repo, &run_id);
    let rec = stage_record(&state, "code");
    let base = &rec["baseline"];
    assert_eq!(base["commit"], rec["parent_commit"]);
    assert_eq!(base["runs"][0]["exit_code"], 1);
    assert_eq!(base["runs"][0]["command"], check);
    assert_eq!(rec["verify"]["passed"], true);
    // It ran once, before the agent started (so before its first request).
    let record = record_dir(&repo, &run_id);
    let events = stage_events(&record, "code", "baseline");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["commit"], rec["parent_commit"]);
    assert_eq!(events[0]["passed"], false);
    assert_eq!(stage_events(&record, "code", "verify")[0]["round"], 1);
    let events: Vec<String> = read_jsonl(&record.join("stages/code/actions.jsonl"))
        .iter()
        .map(|e| e["event"].as_str().unwrap_or("").to_owned())
        .collect();
    let at = |k: &str| events.iter().position(|e| e == k).unwrap();
    assert!(at("baseline") < at("agent_start"), "{events:?}");

    // The coder is told too, before its first turn.
    let told = user_text(&server.requests_for("code")[0]);
    assert!(told.contains("# Baseline"), "{told}");
    assert!(told.contains("already failing before the change"), "{told}");

    let first = user_text(&server.requests_for("review")[0]);
    assert!(first.contains("Verify: pass"), "{first}");
    assert!(first.contains("Baseline"), "{first}");
    assert!(
        first.contains("exit 1 (already failing before the change)"),
        "{first}"
    );
    assert!(first.contains("FAIL: test_add: add(2, 3) == -1"), "{first}");
}
