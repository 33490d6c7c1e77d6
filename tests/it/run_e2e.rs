//! End to end: the real `orch` binary against the scripted fake model server,
//! on real git repositories in temp dirs.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, assert_exit, offered_tools, orch, output_logged,
    read_jsonl, record_dir, state_json, stdout_json, tool_results, user_text, walk, write_issue,
    write_pipeline,
};
use serde_json::{Value, json};
use std::path::Path;

const ISSUE: &str = "# add() subtracts\n\n`calc.add(2, 3)` returns -1; it should return 5.\n";

fn buggy_repo() -> TestRepo {
    TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            ("README.md", "# calc\n"),
            (".gitignore", "build/\n"),
        ],
        "calc 0.1",
    )
}

/// Leaves the user's tree dirty three ways: a modified tracked file, a staged
/// change, and an untracked file.
fn make_dirty(repo: &TestRepo) {
    repo.write(
        "README.md",
        "# calc\n\nlocal edits the user has not committed\n",
    );
    repo.write("staged.txt", "staged but not committed\n");
    repo.git(&["add", "staged.txt"]);
    repo.write("notes.txt", "untracked scratch\n");
}

#[test]
fn issue_to_pr_with_a_review_round_trip_on_a_dirty_repo() {
    let repo = buggy_repo();
    make_dirty(&repo);
    let before = repo.snapshot();
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);

    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    Reply::tool_call("c1", "read_file", json!({"path": "calc.py"})),
                    crate::support::fix_add("c2"),
                    Reply::tool_call(
                        "c3",
                        "bash",
                        json!({"command": "mkdir -p build && echo junk > build/out.txt && echo made-by-shell > shell.txt && cat calc.py"}),
                    ),
                    Reply::finish("c4", "add() now adds.", None),
                ],
            )
            .agent(
                "review",
                vec![Reply::finish(
                    "r1",
                    "Please add a regression test for add(2, 3).",
                    Some("request_changes"),
                )],
            )
            .agent(
                "code.r2",
                vec![
                    Reply::tool_call(
                        "c1",
                        "write_file",
                        json!({"path": "tests/test_calc.py", "content": "from calc import add\nassert add(2, 3) == 5\n"}),
                    ),
                    Reply::finish("c2", "Added tests/test_calc.py.", None),
                ],
            )
            .agent(
                "review.r2",
                vec![Reply::finish("r1", "Fix and test look right.", Some("approve"))],
            )
            .agent(
                "docs",
                vec![
                    Reply::tool_call(
                        "d1",
                        "write_file",
                        json!({"path": "CHANGELOG.md", "content": "- Fixed add().\n"}),
                    ),
                    Reply::finish("d2", "Wrote CHANGELOG.md.", None),
                ],
            ),
    );

    let out = OrchRun::new("issue-to-pr", &repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .json()
        .output();
    assert_eq!(out.status.code(), Some(0));
    let j = stdout_json(&out);
    assert_eq!(j["status"], "succeeded");
    let run_id = j["run_id"].as_str().unwrap().to_owned();
    let stages: Vec<(String, String, Value)> = j["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["status"].as_str().unwrap().to_owned(),
                s["verdict"].clone(),
            )
        })
        .collect();
    let ids: Vec<&str> = stages.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(
        ids,
        [
            "code",
            "review",
            "code.r2",
            "review.r2",
            "code.r3",
            "review.r3",
            "docs"
        ]
    );
    let status: Vec<&str> = stages.iter().map(|s| s.1.as_str()).collect();
    assert_eq!(
        status,
        [
            "succeeded",
            "succeeded",
            "succeeded",
            "succeeded",
            "skipped",
            "skipped",
            "succeeded"
        ]
    );
    assert_eq!(stages[1].2, "request_changes");
    assert_eq!(stages[3].2, "approve");
    assert_eq!(j["final_branch"], format!("orch/{run_id}/pr"));
    assert_eq!(j["pr_title"], "add() subtracts");

    // One branch per stage that ran, plus the final one; commits chained.
    let branches = repo.git(&["branch", "--list", "--format=%(refname:short)", "orch/*"]);
    let mut branches: Vec<&str> = branches.lines().collect();
    branches.sort();
    let mut expected: Vec<String> = ["code", "code.r2", "docs", "pr", "review", "review.r2"]
        .iter()
        .map(|s| format!("orch/{run_id}/{s}"))
        .collect();
    expected.sort();
    assert_eq!(branches, expected);
    let sha = |b: &str| {
        repo.git(&["rev-parse", &format!("orch/{run_id}/{b}")])
            .trim()
            .to_owned()
    };
    let base = repo.git(&["rev-parse", "main"]).trim().to_owned();
    let chain = ["code", "review", "code.r2", "review.r2", "docs"];
    let mut parent = base.clone();
    for stage in chain {
        let p = repo
            .git(&["rev-parse", &format!("orch/{run_id}/{stage}^")])
            .trim()
            .to_owned();
        assert_eq!(p, parent, "parent of {stage}");
        parent = sha(stage);
    }
    assert_eq!(sha("pr"), sha("docs"));
    assert_eq!(j["stages"][6]["commit"], sha("docs"));

    // The fix, the shell-made file and later stages' files are in the final
    // tree; the ignored build output is not.
    let show = |path: &str| repo.git(&["show", &format!("orch/{run_id}/pr:{path}")]);
    assert!(show("calc.py").contains("return a + b"));
    assert_eq!(show("shell.txt"), "made-by-shell\n");
    assert!(show("tests/test_calc.py").contains("add(2, 3) == 5"));
    assert_eq!(show("CHANGELOG.md"), "- Fixed add().\n");
    let files = repo.git(&["ls-tree", "-r", "--name-only", &format!("orch/{run_id}/pr")]);
    assert!(!files.contains("build/"), "{files}");
    // The reviewer's commit is empty (read-only) but exists.
    let review_diff = repo.git(&[
        "diff",
        "--stat",
        &format!("orch/{run_id}/code"),
        &format!("orch/{run_id}/review"),
    ]);
    assert_eq!(review_diff.trim(), "");

    // Trailers on the stage commits.
    let msg = repo.git(&["log", "-1", "--format=%B", &format!("orch/{run_id}/code")]);
    for t in [
        format!("Orch-Run: {run_id}"),
        "Orch-Stage: code".into(),
        "Orch-Role: coder".into(),
        "Orch-Model: fake-model".into(),
        "Orch-Turns: 4".into(),
        "Orch-Tokens:".into(),
    ] {
        assert!(msg.contains(&t), "missing {t} in {msg}");
    }
    let msg = repo.git(&["log", "-1", "--format=%B", &format!("orch/{run_id}/review")]);
    assert!(msg.contains("Orch-Verdict: request_changes"), "{msg}");

    // The user's working tree, index, HEAD and branch: byte-for-byte unchanged.
    assert_eq!(repo.snapshot(), before);

    // What the agents sent back to the model.
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let code = server.requests_for("code");
    assert_eq!(code.len(), 4);
    let first_tools = tool_results(&code[1]);
    assert!(
        first_tools[0].contains("return a - b"),
        "read_file output reaches the model: {first_tools:?}"
    );
    let third = tool_results(&code[3]);
    assert!(
        third[2].contains("return a + b"),
        "bash saw the edit: {third:?}"
    );
    assert!(
        third[2].contains("exit"),
        "bash result carries the exit code: {third:?}"
    );
    assert!(user_text(&code[0]).contains("add() subtracts"));
    assert_eq!(code[0].body["model"], "fake-model");
    let coder_tools = offered_tools(&code[0]);
    for t in [
        "bash",
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "grep",
        "finish",
    ] {
        assert!(
            coder_tools.iter().any(|x| x == t),
            "coder offered {t}: {coder_tools:?}"
        );
    }
    let review = server.requests_for("review");
    let reviewer_tools = offered_tools(&review[0]);
    assert!(
        !reviewer_tools
            .iter()
            .any(|t| t == "write_file" || t == "edit_file"),
        "{reviewer_tools:?}"
    );
    assert!(reviewer_tools.iter().any(|t| t == "finish"));
    let review_task = user_text(&review[0]);
    assert!(
        review_task.contains("-    return a - b") && review_task.contains("+    return a + b"),
        "reviewer sees the diff: {review_task}"
    );
    assert!(
        review_task.contains("add() now adds."),
        "reviewer sees the coder's summary"
    );
    let rework_task = user_text(&server.requests_for("code.r2")[0]);
    assert!(
        rework_task.contains("Please add a regression test"),
        "{rework_task}"
    );
    assert!(rework_task.contains("request_changes"));
    let review2 = user_text(&server.requests_for("review.r2")[0]);
    assert!(
        review2.contains("tests/test_calc.py") && review2.contains("return a + b"),
        "second review sees the cumulative diff: {review2}"
    );
    assert!(server.requests_for("code.r3").is_empty());

    // The run record.
    let record = record_dir(&repo, &run_id);
    let state = state_json(&repo, &run_id);
    assert_eq!(state["format"], "orch-run/1");
    assert_eq!(state["status"], "succeeded");
    let events = read_jsonl(&record.join("stages/code/actions.jsonl"));
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.iter().filter(|k| **k == "request").count(), 4);
    assert_eq!(kinds.iter().filter(|k| **k == "tool").count(), 4);
    let bash = events.iter().find(|e| e["name"] == "bash").unwrap();
    assert_eq!(bash["exit_code"], 0);
    assert!(bash["duration_ms"].is_u64());
    assert!(bash["elapsed_ms"].is_u64());
    assert!(kinds.contains(&"stage_end"));
    let pr = std::fs::read_to_string(record.join("pr.md")).unwrap();
    assert!(pr.starts_with("add() subtracts\n"));
    assert!(pr.contains("Final verdict: **approve**"), "{pr}");
    assert!(pr.contains("calc.py"));
    assert!(record.join("stages/review/transcript.json").is_file());
    // The finished run's worktree is removed; its branches keep everything.
    assert!(!repo.path.join(".git/orch/worktrees").join(&run_id).exists());
}

/// A single-stage pipeline file outside the repository.
fn solo_pipeline(dir: &Path, role: &str) -> std::path::PathBuf {
    write_pipeline(
        dir,
        "solo",
        &format!(
            "name: solo\ndescription: one stage\nstages:\n  work:\n    role: {role}\n    task: \"{{{{ issue }}}}\"\n    max_turns: 6\n"
        ),
    )
}

#[test]
fn malformed_and_unknown_tool_calls_go_back_to_the_model() {
    let repo = buggy_repo();
    let before = repo.snapshot();
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let pipeline = solo_pipeline(scratch.path(), "coder");
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::raw_tool_call("c1", "read_file", "{\"path\": \"calc.py\""),
            Reply::tool_call("c2", "delete_everything", json!({})),
            Reply::tool_call("c3", "read_file", json!({"path": "../outside.txt"})),
            Reply::tool_call("c4", "read_file", json!({"path": "missing.py"})),
            Reply::finish("c5", "Gave up politely.", None),
        ],
    ));
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .output();
    assert_eq!(out.status.code(), Some(0));
    let reqs = server.requests_for("work");
    assert_eq!(reqs.len(), 5);
    let results = tool_results(&reqs[4]);
    assert_eq!(results.len(), 4);
    assert!(
        results[0].starts_with("error:") && results[0].contains("read_file"),
        "{}",
        results[0]
    );
    assert!(
        results[1].starts_with("error:") && results[1].contains("delete_everything"),
        "{}",
        results[1]
    );
    assert!(
        results[2].starts_with("error:"),
        "path outside the worktree refused: {}",
        results[2]
    );
    assert!(
        results[3].starts_with("error:") && results[3].contains("missing.py"),
        "{}",
        results[3]
    );
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("succeeded"), "{stdout}");
    assert_eq!(repo.snapshot(), before);
}

#[test]
fn a_stage_that_hits_its_turn_limit_fails_and_keeps_its_work() {
    let repo = buggy_repo();
    let before = repo.snapshot();
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let pipeline = solo_pipeline(scratch.path(), "coder");
    let replies = (0..6)
        .map(|i| {
            Reply::tool_call(
                &format!("c{i}"),
                "write_file",
                json!({"path": format!("f{i}.txt"), "content": "x"}),
            )
        })
        .collect();
    let server = FakeServer::start(Script::new().agent("work", replies));
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .output();
    assert_eq!(out.status.code(), Some(1), "stage failure exit code");
    let j = stdout_json(&out);
    assert_eq!(j["status"], "failed");
    assert_eq!(j["stages"][0]["status"], "failed");
    assert!(
        j["stages"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("turn limit")
    );
    let run_id = j["run_id"].as_str().unwrap();
    let files = repo.git(&["ls-tree", "--name-only", &format!("orch/{run_id}/work")]);
    assert!(files.contains("f5.txt"), "partial work committed: {files}");
    assert_eq!(repo.snapshot(), before);
}

#[test]
fn an_unauthorized_model_fails_with_the_model_exit_code() {
    let repo = buggy_repo();
    let before = repo.snapshot();
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::Status(401, "{\"error\":\"bad key\"}".into())],
    ));
    let out = OrchRun::new("issue-to-pr", &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .env("ORCH_API_KEY", "sk-test-very-secret")
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("401") || stderr.contains("401"),
        "{stdout}\n{stderr}"
    );
    assert!(!stdout.contains("sk-test-very-secret") && !stderr.contains("sk-test-very-secret"));
    let auth = server.requests_for("code")[0]
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v.clone());
    assert_eq!(auth.as_deref(), Some("Bearer sk-test-very-secret"));
    // The key never reaches the run record.
    for entry in walk(&repo.path.join(".git/orch/runs")) {
        let text = std::fs::read_to_string(&entry).unwrap_or_default();
        assert!(
            !text.contains("sk-test-very-secret"),
            "key leaked into {}",
            entry.display()
        );
    }
    assert_eq!(repo.snapshot(), before);
}

#[test]
fn orch_agent_runs_one_explore_agent_and_prints_its_report() {
    let repo = buggy_repo();
    let before = repo.snapshot();
    let server = FakeServer::start(Script::new().agent(
        "explore",
        vec![
            Reply::tool_call("e1", "grep", json!({"pattern": "def add"})),
            Reply::finish("e2", "add() is defined in calc.py line 1.", None),
        ],
    ));
    let out = orch()
        .current_dir(&repo.path)
        .args([
            "agent",
            "--role",
            "explore",
            "--task",
            "Where is add defined?",
            "--base-url",
            &server.base_url,
            "--model",
            "m",
        ])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "add() is defined in calc.py line 1."
    );
    let reqs = server.requests_for("explore");
    assert_eq!(
        reqs[0].body["messages"].as_array().unwrap().len(),
        2,
        "fresh history: system + task"
    );
    assert!(
        tool_results(&reqs[1])[0].contains("calc.py:1:"),
        "grep output reaches the model"
    );
    let tools = offered_tools(&reqs[0]);
    assert!(
        !tools.iter().any(|t| t == "write_file" || t == "edit_file"),
        "{tools:?}"
    );
    assert_eq!(repo.snapshot(), before);
}

#[test]
fn demo_runs_offline_and_the_fix_passes_the_fixture_tests() {
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("demo");
    let out = output_logged(orch().arg("demo").arg("--dir").arg(&demo));
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("REPLAY"),
        "the demo says it replays: {stderr}"
    );
    assert!(stdout.contains("model: replay of"), "{stdout}");
    assert!(stdout.contains("final branch: orch/"), "{stdout}");
    assert!(
        stdout.contains("PR title: word_count miscounts words"),
        "{stdout}"
    );
    assert!(stdout.contains("before 3 1 → after 2 2"), "{stdout}");
    assert!(stdout.contains("OK"), "fixture tests pass: {stdout}");
    // The demo repo's own branch is untouched.
    let head = std::process::Command::new("git")
        .args([
            "-C",
            demo.join("repo").to_str().unwrap(),
            "status",
            "--porcelain",
        ])
        .output()
        .unwrap();
    assert!(
        head.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&head.stdout)
    );
}

#[test]
fn a_role_with_its_own_model_asks_the_server_for_that_model() {
    let repo = buggy_repo();
    repo.write(
        ".orch/roles/coder.md",
        "---\nname: coder\ndescription: a coder on a small model\ntools: [read_file, finish]\nmodel: small-model\n---\nYou fix things.\n",
    );
    // A role's model is used when the profile maps it (or the server lists
    // it); `--model` on the command line would override it.
    repo.write(
        ".orch/orch.toml",
        "[models]\naliases = { small-model = \"small-model\" }\n",
    );
    repo.commit_all("role override");
    let before = repo.snapshot();
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let pipeline = solo_pipeline(scratch.path(), "coder");
    let server =
        FakeServer::start(Script::new().agent("work", vec![Reply::finish("f", "done", None)]));
    let out = OrchRun::with_model_env(&server.base_url, &pipeline, &repo)
        .issue(&issue)
        .json()
        .output();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(server.requests_for("work")[0].body["model"], "small-model");
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let msg = repo.git(&["log", "-1", "--format=%B", &format!("orch/{run_id}/work")]);
    assert!(msg.contains("Orch-Model: small-model"), "{msg}");
    assert_eq!(repo.snapshot(), before);
}

#[test]
fn a_read_only_stage_cannot_change_the_tree_through_bash() {
    let repo = buggy_repo();
    let before = repo.snapshot();
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let pipeline = solo_pipeline(scratch.path(), "reviewer");
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_call(
                "b",
                "bash",
                json!({"command": "echo sneaky > sneaky.txt && rm calc.py && mkdir -p build && echo ignored > build/x"}),
            ),
            Reply::finish("f", "looked around", None),
        ],
    ));
    // Without Landlock (simulated): the discard after the stage is what
    // keeps the tree; with it the kernel refuses the writes themselves
    // (`sandbox_e2e::a_read_only_stage_is_read_only_for_the_kernel`).
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .env("ORCH_SANDBOX_DISABLE", "1")
        .output();
    assert_eq!(out.status.code(), Some(0));
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    // The stage commit changes nothing: the reviewer is read-only.
    let changed = repo.git(&[
        "diff",
        "--name-only",
        "main",
        &format!("orch/{run_id}/work"),
    ]);
    assert_eq!(
        changed.trim(),
        "",
        "read-only stage changed files: {changed}"
    );
    let events = crate::support::stage_events(
        &crate::support::record_dir(&repo, &run_id),
        "work",
        "read_only_violation",
    );
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["discarded"], json!(["calc.py", "sneaky.txt"]));
    assert_eq!(repo.snapshot(), before);
}

/// What a run records of its changes is what `git` says of the same commits:
/// each stage's `diff.patch` is `git diff <start> <commit>` (streamed to the
/// file, never held whole), and `pr.md`'s changes block is
/// `git diff --stat base final` of the whole multi-stage run, a fan-in
/// merge included.
#[test]
fn stage_patches_and_the_pr_diffstat_match_git_for_a_multi_stage_run() {
    let repo = buggy_repo();
    // Enough of a repository that a diff which walked it would show.
    for i in 0..40 {
        repo.write(&format!("pkg/m{:02}/mod.py", i), format!("X = {i}\n"));
    }
    repo.commit_all("modules");
    let base = repo.git(&["rev-parse", "HEAD"]).trim().to_owned();
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let pipeline = write_pipeline(
        scratch.path(),
        "fanin",
        "name: fanin\nstages:\n  left:\n    role: coder\n    task: \"{{ issue }}\"\n  right:\n    role: coder\n    task: \"{{ issue }}\"\n  join:\n    role: coder\n    task: \"{{ issue }}\"\n    needs: [left, right]\n",
    );
    let server = FakeServer::start(
        Script::new()
            .agent(
                "left",
                vec![
                    crate::support::fix_add("l1"),
                    Reply::tool_call(
                        "l2",
                        "bash",
                        json!({"command": "git mv pkg/m03/mod.py pkg/m03/renamed.py && rm pkg/m04/mod.py && printf '\\000\\001bin' > blob.bin"}),
                    ),
                    Reply::finish("l3", "Fixed add().", None),
                ],
            )
            .agent(
                "right",
                vec![
                    Reply::tool_call(
                        "r1",
                        "write_file",
                        json!({"path": "pkg/m10/mod.py", "content": "X = 10\nY = 11\n"}),
                    ),
                    Reply::finish("r2", "Added Y.", None),
                ],
            )
            .agent(
                "join",
                vec![
                    Reply::tool_call(
                        "j1",
                        "write_file",
                        json!({"path": "README.md", "content": "# calc\n\nAdds now.\n"}),
                    ),
                    Reply::finish("j2", "Documented.", None),
                ],
            ),
    );
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .json()
        .output();
    assert_exit(&out, 0);
    let j = stdout_json(&out);
    let run_id = j["run_id"].as_str().unwrap().to_owned();
    let record = record_dir(&repo, &run_id);
    let state = state_json(&repo, &run_id);
    for id in ["left", "right", "join"] {
        let rec = crate::support::stage_record(&state, id);
        let (from, to) = (
            rec["parent_commit"].as_str().unwrap(),
            rec["commit"].as_str().unwrap(),
        );
        let patch =
            std::fs::read_to_string(record.join(format!("stages/{id}/diff.patch"))).unwrap();
        assert_eq!(
            patch,
            repo.git(&["diff", "-M", "--no-color", from, to]),
            "stage {id}"
        );
        let end = crate::support::stage_events(&record, id, "stage_end");
        let changed = repo.git(&["diff", "--name-only", "-M", from, to]);
        assert_eq!(
            end[0]["files_changed"].as_u64().unwrap() as usize,
            changed.lines().count(),
            "stage {id}"
        );
    }
    let left = crate::support::stage_record(&state, "left");
    let left_patch = std::fs::read_to_string(record.join("stages/left/diff.patch")).unwrap();
    assert!(
        left_patch.contains("rename to pkg/m03/renamed.py"),
        "{left_patch}"
    );
    assert!(left_patch.contains("Binary files"), "{left_patch}");
    assert!(left["commit"].is_string());
    let final_branch = j["final_branch"].as_str().unwrap();
    let git_stat = repo.git(&["diff", "--stat=80", "-M", &base, final_branch]);
    let pr = std::fs::read_to_string(record.join("pr.md")).unwrap();
    let changes = pr
        .split("## Changes\n\n```\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap();
    // The same files and totals as git (orch's layout differs in details:
    // git writes a rename as `dir/{a => b}` and widens the count column for
    // a binary file's row).
    assert_eq!(changes.lines().last(), git_stat.lines().last(), "{pr}");
    assert_eq!(changes.lines().count(), git_stat.lines().count(), "{pr}");
    let numstat = repo.git(&["diff", "--numstat", "-M", &base, final_branch]);
    for row in numstat.lines().filter(|r| !r.contains("=>")) {
        let mut cols = row.split('\t');
        let (ins, del, path) = (
            cols.next().unwrap(),
            cols.next().unwrap(),
            cols.next().unwrap(),
        );
        let line = changes
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{path} ")))
            .unwrap_or_else(|| panic!("{path} missing in {changes}"));
        if ins != "-" {
            let n: usize = ins.parse::<usize>().unwrap() + del.parse::<usize>().unwrap();
            assert!(line.contains(&format!("| {n}")), "{line} vs {row}");
        }
    }
    assert!(
        changes.contains("pkg/m03/mod.py => pkg/m03/renamed.py"),
        "{changes}"
    );
    assert!(git_stat.contains(" 6 files changed"), "{git_stat}");
}
