//! Meeting the user's project, end to end through the real binary:
//! AGENTS.md / CLAUDE.md in every stage's system prompt (from the base
//! commit, hashed in the log, turned off by a flag), Claude Code agent files
//! from `.claude/agents/` (unknown tools and keys are warnings), a broken
//! role file that breaks nothing else, role models routed through
//! `[models] aliases`, and a role's sampling keys in its requests only.

use crate::support::{
    FakeServer, OrchRun, Recorded, Reply, Script, TestRepo, orch, output_logged, record_dir,
    stage_events, write_issue, write_pipeline,
};
use serde_json::{Value, json};
use std::path::Path;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/roles/claude-code");

/// The system message of a request.
fn system_text(req: &Recorded) -> String {
    req.messages()
        .iter()
        .find(|m| m["role"] == "system")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Runs a one-stage coder pipeline that finishes at once; returns the
/// server, the run id and the exit code.
fn run_one_stage(repo: &TestRepo, issue_text: &str, extra: &[&str]) -> (FakeServer, String, i32) {
    let server = FakeServer::start(
        Script::new().agent("code", vec![Reply::finish("c1", "Nothing to do.", None)]),
    );
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), issue_text);
    let pipeline = write_pipeline(scratch.path(), "one", "stages:\n  code:\n    role: coder\n");
    let out = OrchRun::new(&pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .args(extra)
        .output();
    let run_id = crate::support::only_run_id(&repo.path);
    (server, run_id, out.status.code().unwrap_or(-1))
}

fn blob(repo: &TestRepo, path: &str) -> String {
    repo.git(&["rev-parse", &format!("HEAD:{path}")])
        .trim()
        .to_owned()
}

#[test]
fn agents_md_at_the_root_and_nested_reach_the_system_prompt_root_first_with_hashes() {
    let repo = TestRepo::with_commit(
        &[
            (
                "AGENTS.md",
                "MARKER-ROOT-7f3: run `make check` before finishing.\n",
            ),
            (
                "src/api/AGENTS.md",
                "MARKER-NESTED-91c: handlers return JSON.\n",
            ),
            ("src/api/handler.py", "def handle():\n    return None\n"),
            (
                "other/AGENTS.md",
                "MARKER-UNRELATED: not on the way to the work.\n",
            ),
        ],
        "project with instructions",
    );
    // An uncommitted edit of the user's tree is not what the run reads.
    repo.write("AGENTS.md", "MARKER-DIRTY: uncommitted\n");
    let (server, run_id, code) = run_one_stage(
        &repo,
        "# handler returns None\n\n`src/api/handler.py` should return `{}`.\n",
        &[],
    );
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    let system = system_text(&reqs[0]);
    let root = system
        .find("MARKER-ROOT-7f3")
        .expect("root AGENTS.md in the prompt");
    let nested = system
        .find("MARKER-NESTED-91c")
        .expect("nested AGENTS.md in the prompt");
    assert!(root < nested, "root first, nearest last:\n{system}");
    assert!(system.contains("## AGENTS.md\n"), "{system}");
    assert!(system.contains("## src/api/AGENTS.md\n"), "{system}");
    assert!(!system.contains("MARKER-UNRELATED"), "{system}");
    assert!(!system.contains("MARKER-DIRTY"), "{system}");

    let record = record_dir(&repo, &run_id);
    let events = stage_events(&record, "code", "project_instructions");
    assert_eq!(events.len(), 1);
    let files: Vec<(String, String)> = events[0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["blob"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        files,
        [
            ("AGENTS.md".to_owned(), blob(&repo, "AGENTS.md")),
            (
                "src/api/AGENTS.md".to_owned(),
                blob(&repo, "src/api/AGENTS.md")
            ),
        ]
    );
    assert_eq!(events[0]["enabled"], true);
    assert_eq!(events[0]["cut"], false);
}

#[test]
fn no_project_instructions_removes_them_from_the_prompt() {
    let repo = TestRepo::with_commit(
        &[("AGENTS.md", "MARKER-ROOT-off: do not show me.\n")],
        "project with instructions",
    );
    let (server, run_id, code) = run_one_stage(
        &repo,
        "# a task\n\nDo it.\n",
        &["--no-project-instructions"],
    );
    assert_eq!(code, 0);
    let system = system_text(&server.requests_for("code")[0]);
    assert!(!system.contains("MARKER-ROOT-off"), "{system}");
    assert!(!system.contains("# Project instructions"), "{system}");
    let events = stage_events(&record_dir(&repo, &run_id), "code", "project_instructions");
    assert_eq!(events[0]["enabled"], false);
    assert_eq!(events[0]["files"], json!([]));
}

#[test]
fn a_claude_md_only_repo_gets_its_claude_md() {
    let repo = TestRepo::with_commit(
        &[("CLAUDE.md", "MARKER-CLAUDE-5e2: prefer small diffs.\n")],
        "claude project",
    );
    let (server, run_id, code) = run_one_stage(&repo, "# a task\n\nDo it.\n", &[]);
    assert_eq!(code, 0);
    let system = system_text(&server.requests_for("code")[0]);
    assert!(
        system.contains("## CLAUDE.md\n\nMARKER-CLAUDE-5e2"),
        "{system}"
    );
    let events = stage_events(&record_dir(&repo, &run_id), "code", "project_instructions");
    assert_eq!(events[0]["files"][0]["path"], "CLAUDE.md");
    assert_eq!(events[0]["files"][0]["blob"], blob(&repo, "CLAUDE.md"));
}

/// A repo with the fixture agent files in `.claude/agents/`.
fn repo_with_claude_agents() -> TestRepo {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "app");
    for name in [
        "documentation-engineer",
        "visual-asset-generator",
        "debugger",
        "angular-architect",
    ] {
        let text = std::fs::read_to_string(Path::new(FIXTURES).join(format!("{name}.md"))).unwrap();
        repo.write(&format!(".claude/agents/{name}.md"), text);
    }
    repo
}

#[test]
fn real_claude_code_agent_files_validate_with_warnings() {
    let repo = repo_with_claude_agents();
    let out = output_logged(orch().arg("validate").arg("--repo").arg(&repo.path));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for name in [
        "documentation-engineer",
        "visual-asset-generator",
        "debugger",
        "angular-architect",
    ] {
        assert!(stdout.contains(name), "{stdout}");
    }
    let warning = |role: &str, needle: &str| {
        stderr.lines().any(|l| {
            l.starts_with("warning: ")
                && l.contains(&format!("role `{role}`"))
                && l.contains(needle)
        })
    };
    assert!(
        warning("documentation-engineer", "WebFetch, WebSearch not offered"),
        "{stderr}"
    );
    // `mcp__prompt-to-asset` grants that MCP server's tools (issue 30);
    // it is not a tool orch lacks.
    assert!(
        !warning("visual-asset-generator", "mcp__prompt-to-asset"),
        "{stderr}"
    );
    // Permission keys are mapped (agent_files.rs), not ignored.
    assert!(!warning("debugger", "key `permissionMode`"), "{stderr}");
    assert!(!warning("debugger", "key `disallowedTools`"), "{stderr}");
    assert!(
        !warning("debugger", "key `color`"),
        "color is a known display key: {stderr}"
    );
    assert!(warning("angular-architect", "angular-cli"), "{stderr}");
}

#[test]
fn claude_code_agent_files_run_as_stages_and_a_full_claude_model_id_keeps_the_run_model() {
    let repo = repo_with_claude_agents();
    let stages = [
        "documentation-engineer",
        "visual-asset-generator",
        "debugger",
        "angular-architect",
    ];
    let mut script = Script::new();
    let mut yaml = String::from("stages:\n");
    for (i, role) in stages.iter().enumerate() {
        script = script.agent(
            role,
            vec![Reply::finish("f1", &format!("{role} done."), None)],
        );
        yaml.push_str(&format!("  {role}:\n    role: {role}\n"));
        if i > 0 {
            yaml.push_str(&format!("    needs: [{}]\n", stages[i - 1]));
        }
    }
    let server = FakeServer::start(script);
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# docs\n\nWrite them.\n");
    let pipeline = write_pipeline(scratch.path(), "claude", &yaml);
    // The model from the environment, not `--model`: role models may apply.
    let out = OrchRun::with_model_env(&server.base_url, &pipeline, &repo)
        .issue(&issue)
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for role in stages {
        let reqs = server.requests_for(role);
        assert_eq!(reqs.len(), 1, "{role}");
        assert_eq!(reqs[0].body["model"], "fake-model", "{role}");
    }
    // Unknown tools are not offered: the docs role has no bash, no web tool.
    let offered = crate::support::offered_tools(&server.requests_for("documentation-engineer")[0]);
    assert_eq!(
        offered,
        [
            "read_file",
            "write_file",
            "edit_file",
            "list_files",
            "grep",
            "finish"
        ]
    );
    // The full Claude id is not sent; the record and stderr say why.
    assert!(
        stderr.contains("role `angular-architect` names model `claude-3-opus-20240229`; no [models] alias maps it"),
        "{stderr}"
    );
    let run_id = crate::support::only_run_id(&repo.path);
    let notes = stage_events(
        &record_dir(&repo, &run_id),
        "angular-architect",
        "role_notes",
    );
    assert!(
        notes[0]["model_note"]
            .as_str()
            .unwrap()
            .contains("the run's model is used")
    );
    assert!(
        notes[0]["warnings"][0]
            .as_str()
            .unwrap()
            .contains("angular-cli"),
        "{:?}",
        notes[0]
    );
    // Said once on stderr, not once per stage or request.
    assert_eq!(
        stderr.matches("WebFetch, WebSearch not offered").count(),
        1,
        "{stderr}"
    );
}

#[test]
fn models_aliases_map_a_role_model_and_cli_model_overrides_every_role() {
    let repo = repo_with_claude_agents();
    repo.write(
        ".orch/orch.toml",
        "[models]\naliases = { \"claude-3-opus-20240229\" = \"mapped-model\" }\n",
    );
    let run = |flags: bool| {
        let server = FakeServer::start(Script::new().agent(
            "angular-architect",
            vec![Reply::finish("f1", "done.", None)],
        ));
        let scratch = tempfile::tempdir().unwrap();
        let issue = write_issue(scratch.path(), "# x\n\nDo x.\n");
        let pipeline = write_pipeline(
            scratch.path(),
            "one",
            "stages:\n  angular-architect:\n    role: angular-architect\n",
        );
        let run = OrchRun::with_model_env(&server.base_url, &pipeline, &repo).issue(&issue);
        let run = if flags {
            run.args(["--model", "flag-model"])
        } else {
            run
        };
        let out = run.output();
        assert_eq!(out.status.code(), Some(0));
        let reqs = server.requests_for("angular-architect");
        reqs[0].body["model"].as_str().unwrap().to_owned()
    };
    assert_eq!(run(false), "mapped-model");
    assert_eq!(run(true), "flag-model");
}

#[test]
fn a_broken_role_file_in_orch_roles_does_not_stop_issue_to_pr() {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "calc");
    repo.write(
        ".orch/roles/broken.md",
        "---\nname: broken\nmax_turns: many\n---\nP\n",
    );
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
            )
            .agent("docs", vec![Reply::finish("d1", "No docs needed.", None)]),
    );
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# add() subtracts\n\nFix it.\n");
    let out = OrchRun::new("issue-to-pr", &repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .output();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `orch validate` still names the broken file and its line.
    let out = output_logged(orch().arg("validate").arg("--repo").arg(&repo.path));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(".orch/roles/broken.md:3:12"), "{stderr}");
    // A command that uses the broken role reports it, and starts nothing.
    let out = output_logged(
        orch()
            .args(["agent", "--role", "broken", "--task", "hi", "--base-url"])
            .arg(&server.base_url)
            .args(["--model", "fake-model", "--repo"])
            .arg(&repo.path),
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(".orch/roles/broken.md:3:12"), "{stderr}");
}

#[test]
fn a_role_temperature_is_sent_by_its_stages_only() {
    let repo = TestRepo::with_commit(&[("a.txt", "a\n")], "a");
    repo.write(
        ".orch/roles/cool.md",
        "---\nname: cool\ndescription: a calm coder\ntemperature: 0.2\nseed: 7\ntool_choice: required\n---\nYou code calmly; call finish when done.\n",
    );
    let server = FakeServer::start(
        Script::new()
            .agent("calm", vec![Reply::finish("f1", "calm done.", None)])
            .agent("plain", vec![Reply::finish("f1", "plain done.", None)]),
    );
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# x\n\nDo x.\n");
    let pipeline = write_pipeline(
        scratch.path(),
        "two",
        "stages:\n  calm:\n    role: cool\n  plain:\n    role: coder\n    needs: [calm]\n",
    );
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .output();
    assert_eq!(out.status.code(), Some(0));
    let calm: &Value = &server.requests_for("calm")[0].body;
    assert_eq!(calm["temperature"], 0.2);
    assert_eq!(calm["seed"], 7);
    assert_eq!(calm["tool_choice"], "required");
    let plain: &Value = &server.requests_for("plain")[0].body;
    assert!(plain.get("temperature").is_none(), "{plain}");
    assert!(plain.get("seed").is_none(), "{plain}");
    assert_eq!(plain["tool_choice"], "auto");
}

#[test]
fn pr_text_has_word_cut_subjects_git_binary_stats_no_skipped_rounds_and_no_machine_details() {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "calc");
    let long = "Fixed add() so that it adds its two arguments instead of subtracting the second from the first one";
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    crate::support::fix_add("c1"),
                    Reply::tool_call(
                        "c2",
                        "bash",
                        json!({"command": "head -c 302 /dev/zero > blob.bin && printf 'x\\0y' >> blob.bin && wc -c < blob.bin"}),
                    ),
                    Reply::finish("c3", long, None),
                ],
            )
            .agent("review", vec![Reply::finish("r1", "Good.", Some("approve"))])
            .agent("docs", vec![Reply::finish("d1", "No docs needed.", None)]),
    );
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# add() subtracts\n\nFix it.\n");
    let out = OrchRun::new("issue-to-pr", &repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .output();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_id = crate::support::only_run_id(&repo.path);
    let subject = repo.git(&["log", "-1", "--format=%s", &format!("orch/{run_id}/code")]);
    assert_eq!(
        subject.trim(),
        "orch(code): Fixed add() so that it adds its two arguments instead of…"
    );
    assert!(!subject.contains("more bytes"), "{subject}");

    let pr = std::fs::read_to_string(record_dir(&repo, &run_id).join("pr.md")).unwrap();
    // The diffstat as git prints it.
    let git_stat = repo.git(&["diff", "--stat", "main", &format!("orch/{run_id}/pr")]);
    let bin_line = git_stat.lines().find(|l| l.contains("blob.bin")).unwrap();
    assert!(bin_line.contains("Bin 0 -> 305 bytes"), "{git_stat}");
    assert!(pr.contains("blob.bin | Bin 0 -> 305 bytes"), "{pr}");
    // Skipped rework rounds are left out; no local URL or path.
    assert!(!pr.contains("code.r2") && !pr.contains("review.r3"), "{pr}");
    assert!(!pr.contains("127.0.0.1") && !pr.contains("http://"), "{pr}");
    assert!(!pr.contains(&repo.path.display().to_string()), "{pr}");
    // The provenance table: stage, role, model, verdict, verify, tokens, cost.
    assert!(
        pr.contains("| stage | role | model | verdict | verify | tokens | cost |"),
        "{pr}"
    );
    let row = pr.lines().find(|l| l.starts_with("| review |")).unwrap();
    assert!(
        row.starts_with("| review | reviewer | fake-model | approve | none | "),
        "{row}"
    );
    assert_eq!(
        pr.lines().filter(|l| l.starts_with("| code")).count(),
        1,
        "{pr}"
    );
}

/// A recorded run whose bash call reads a file outside the repository
/// (`ext`), so a replay from the same base can see a different tool result.
fn recorded_run(ext: &Path) -> (TestRepo, FakeServer, String) {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "calc");
    let cmd = format!("cat {} > seen.txt && cat seen.txt", ext.display());
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            crate::support::fix_add("c1"),
            Reply::tool_call("c2", "bash", json!({"command": cmd})),
            Reply::finish("c3", "add() adds.", None),
        ],
    ));
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# add() subtracts\n\nFix it.\n");
    let pipeline = write_pipeline(scratch.path(), "one", "stages:\n  code:\n    role: coder\n");
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .output();
    assert_eq!(out.status.code(), Some(0));
    let run_id = crate::support::only_run_id(&repo.path);
    (repo, server, run_id)
}

fn replay(repo: &TestRepo, args: &[&str]) -> (i32, Value) {
    let out = output_logged(
        orch()
            .arg("replay")
            .args(args)
            .arg("--repo")
            .arg(&repo.path)
            .arg("--json"),
    );
    let code = out.status.code().unwrap_or(-1);
    let j = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (code, j)
}

#[test]
fn orch_replay_reproduces_a_recorded_run_offline_with_zero_requests() {
    let ext_dir = tempfile::tempdir().unwrap();
    let ext = ext_dir.path().join("input.txt");
    std::fs::write(&ext, "outside value 1\n").unwrap();
    let (repo, server, run_id) = recorded_run(&ext);
    let requests = server.requests().len();
    let (code, j) = replay(&repo, &[&run_id]);
    assert_eq!(code, 0, "{j}");
    assert_eq!(server.requests().len(), requests, "a replay calls no model");
    assert_eq!(j["replay_of"], run_id.as_str());
    assert_eq!(j["reproduced"], true);
    assert_eq!(j["divergences"], json!([]));
    assert_eq!(j["final_tree"]["equal"], true);
    assert!(j["model"].as_str().unwrap().starts_with("replay of"), "{j}");
    let new_run = j["run_id"].as_str().unwrap();
    assert_ne!(new_run, run_id);
    let tree = |run: &str| repo.git(&["rev-parse", &format!("orch/{run}/pr^{{tree}}")]);
    assert_eq!(tree(&run_id), tree(new_run));
}

#[test]
fn orch_replay_reports_where_a_tool_result_diverged_and_that_the_tree_differs() {
    let ext_dir = tempfile::tempdir().unwrap();
    let ext = ext_dir.path().join("input.txt");
    std::fs::write(&ext, "outside value 1\n").unwrap();
    let (repo, server, run_id) = recorded_run(&ext);
    std::fs::write(&ext, "outside value 2\n").unwrap();
    let requests = server.requests().len();
    let (code, j) = replay(&repo, &[&run_id]);
    assert_eq!(code, 1, "{j}");
    assert_eq!(server.requests().len(), requests);
    assert_eq!(j["reproduced"], false);
    assert_eq!(
        j["divergences"],
        json!([{"agent": "code", "call_id": "c2", "tool": "bash", "recorded": "outside value 1", "replayed": "outside value 2"}])
    );
    assert_eq!(j["final_tree"]["equal"], false);
}

#[test]
fn orch_replay_export_writes_a_file_that_run_replay_plays() {
    let ext_dir = tempfile::tempdir().unwrap();
    let ext = ext_dir.path().join("input.txt");
    std::fs::write(&ext, "outside value 1\n").unwrap();
    let (repo, server, run_id) = recorded_run(&ext);
    let file = ext_dir.path().join("run.replay.json");
    let out = output_logged(
        orch()
            .args(["replay", &run_id, "--export"])
            .arg(&file)
            .arg("--repo")
            .arg(&repo.path),
    );
    assert_eq!(out.status.code(), Some(0));
    let exported: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(exported["format"], "orch-replay/1");
    assert_eq!(exported["agents"]["code"].as_array().unwrap().len(), 3);
    assert_eq!(exported["agents"]["code"][1]["tool_calls"][0]["id"], "c2");

    let requests = server.requests().len();
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# add() subtracts\n\nFix it.\n");
    let pipeline = write_pipeline(scratch.path(), "one", "stages:\n  code:\n    role: coder\n");
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .args([std::ffi::OsStr::new("--replay"), file.as_os_str()])
        .json()
        .output();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(server.requests().len(), requests);
    let runs = repo.git(&[
        "for-each-ref",
        "--format=%(refname:short)",
        "refs/heads/orch/*/pr",
    ]);
    let trees: Vec<String> = runs
        .lines()
        .map(|b| repo.git(&["rev-parse", &format!("{b}^{{tree}}")]))
        .collect();
    assert_eq!(trees.len(), 2, "{runs}");
    assert_eq!(trees[0], trees[1]);
}
