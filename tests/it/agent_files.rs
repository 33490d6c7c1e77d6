//! Claude Code agent files keep what they narrow (issue 26.2) and are
//! found by their `name:` (26.3), end to end through the real binary:
//! `permissionMode: plan` offers no write or bash tool and a write attempt
//! is refused, `disallowedTools` removes tools and turns `Bash(…)` patterns
//! into deny rules, `maxTurns` is the turn limit, and the seven public
//! agent files plus one whose name differs from its file validate.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, offered_tools, orch, output_logged, tool_results,
    write_issue, write_pipeline,
};
use serde_json::json;
use std::path::Path;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/roles/claude-code");

/// Every agent file of the fixtures: the seven public ones and
/// `software_engineer_python.md` (name ≠ file name).
const AGENT_FILES: &[(&str, &str)] = &[
    ("angular-architect", "angular-architect"),
    ("code-reviewer", "code-reviewer"),
    ("debugger", "debugger"),
    ("documentation-engineer", "documentation-engineer"),
    ("rtk-testing-specialist", "rtk-testing-specialist"),
    ("system-architect", "system-architect"),
    ("visual-asset-generator", "visual-asset-generator"),
    ("software_engineer_python", "software-engineer-python"),
];

fn repo_with_agents() -> TestRepo {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "base");
    for (file, _) in AGENT_FILES {
        let text = std::fs::read_to_string(Path::new(FIXTURES).join(format!("{file}.md"))).unwrap();
        repo.write(&format!(".claude/agents/{file}.md"), text);
    }
    repo
}

#[test]
fn the_public_agent_files_and_one_named_unlike_its_file_validate() {
    let repo = repo_with_agents();
    let out = output_logged(orch().arg("validate").arg("--repo").arg(&repo.path));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{stdout}");
    for (_, name) in AGENT_FILES {
        assert!(stdout.contains(name), "{name}: {stdout}");
    }
    // The debugger's `permissionMode: ask` is mapped, not ignored.
    assert!(!stderr.contains("key `permissionMode`"), "{stderr}");
    assert!(!stderr.contains("key `disallowedTools`"), "{stderr}");
}

#[test]
fn a_role_is_asked_for_by_its_name_and_the_file_stem_says_which_name_to_use() {
    let repo = repo_with_agents();
    let server = FakeServer::start(Script::new().agent(
        "software-engineer-python",
        vec![Reply::finish("f", "add is in calc.py", None)],
    ));
    let ask = |role: &str| {
        let mut cmd = orch();
        cmd.current_dir(&repo.path)
            .args(["agent", "--role", role, "--task", "Where is add?"])
            .args(["--base-url", &server.base_url, "--model", "m"]);
        output_logged(&mut cmd)
    };
    let out = ask("software-engineer-python");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reqs = server.requests_for("software-engineer-python");
    assert_eq!(reqs.len(), 1);
    assert_eq!(
        offered_tools(&reqs[0]),
        [
            "bash",
            "read_file",
            "edit_file",
            "list_files",
            "grep",
            "finish"
        ]
    );
    let out = ask("software_engineer_python");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "the file software_engineer_python.md defines role \"software-engineer-python\""
        ),
        "{stderr}"
    );
}

#[test]
fn two_files_naming_one_role_the_nearer_directory_wins_with_a_warning() {
    let repo = TestRepo::with_commit(&[("a.txt", "a\n")], "base");
    repo.write(
        ".orch/roles/helper.md",
        "---\nname: helper\ndescription: from orch roles\n---\nP\n",
    );
    repo.write(
        ".claude/agents/helper_agent.md",
        "---\nname: helper\ndescription: from claude agents\n---\nP\n",
    );
    let out = output_logged(
        orch()
            .args(["validate", "--json"])
            .arg("--repo")
            .arg(&repo.path),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("helper_agent.md also defines role `helper`; the nearer file"),
        "{stderr}"
    );
    assert!(
        stderr.contains(".orch/roles/helper.md) is used"),
        "{stderr}"
    );
}

/// Runs a one-stage pipeline of role `role` (written into
/// `.claude/agents/<role>.md` as `front`), the model answering `replies`.
fn run_role(role: &str, front: &str, replies: Vec<Reply>) -> (TestRepo, FakeServer, i32, String) {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "base");
    repo.write(
        &format!(".claude/agents/{role}.md"),
        format!("---\nname: {role}\n{front}---\nYou review code.\n"),
    );
    repo.commit_all("agent");
    let server = FakeServer::start(Script::new().agent("s", replies));
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# add\n\nadd subtracts.\n");
    let pipeline = write_pipeline(
        scratch.path(),
        "one",
        &format!("stages:\n  s:\n    role: {role}\n"),
    );
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (repo, server, out.status.code().unwrap_or(-1), stderr)
}

#[test]
fn permission_mode_plan_offers_no_write_or_bash_tool_and_a_write_is_refused() {
    let (repo, server, code, stderr) = run_role(
        "planner",
        "tools: Read, Write, Edit, Bash, Grep, Glob\npermissionMode: plan\n",
        vec![
            Reply::tool_call(
                "w1",
                "write_file",
                json!({"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"}),
            ),
            Reply::finish("f", "Reviewed: add subtracts.", None),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let reqs = server.requests_for("s");
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        offered_tools(&reqs[0]),
        ["read_file", "list_files", "grep", "finish"]
    );
    let refused = &tool_results(&reqs[1])[0];
    assert!(refused.contains("write_file"), "{refused}");
    let run_id = crate::support::only_run_id(&repo.path);
    assert_eq!(
        repo.git(&["show", &format!("orch/{run_id}/s:calc.py")]),
        "def add(a, b):\n    return a - b\n",
        "the write reached no commit"
    );
    assert!(
        stderr.contains("read-only: bash, write_file, edit_file not offered"),
        "{stderr}"
    );
}

#[test]
fn disallowed_tools_remove_tools_bash_patterns_are_denied_and_max_turns_is_the_limit() {
    let (_repo, server, code, stderr) = run_role(
        "pusher",
        "tools: Read, Write, Edit, Bash\ndisallowedTools: Write, Edit, Bash(git push:*)\nmaxTurns: 2\n",
        vec![
            Reply::tool_call("b1", "bash", json!({"command": "git   push origin HEAD"})),
            Reply::tool_call("b2", "bash", json!({"command": "true"})),
            Reply::finish("f", "never reached", None),
        ],
    );
    let reqs = server.requests_for("s");
    assert_eq!(offered_tools(&reqs[0]), ["bash", "read_file", "finish"]);
    let denied = &tool_results(&reqs[1])[0];
    assert!(
        denied.contains("git push") && denied.to_lowercase().contains("denied"),
        "{denied}"
    );
    // `maxTurns: 2`: two model turns, not orch's default 30.
    assert_eq!(reqs.len(), 2, "{stderr}");
    assert_ne!(code, 0, "{stderr}");
}

#[test]
fn a_mode_or_key_orch_cannot_honour_refuses_the_role_naming_file_key_and_value() {
    let repo = TestRepo::with_commit(&[("a.txt", "a\n")], "base");
    repo.write(
        ".claude/agents/auto.md",
        "---\nname: auto\npermissionMode: auto\n---\nP\n",
    );
    repo.write(
        ".claude/agents/hooked.md",
        "---\nname: hooked\nhooks:\n  PreToolUse:\n    - matcher: Bash\n---\nP\n",
    );
    let out = output_logged(orch().arg("validate").arg("--repo").arg(&repo.path));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("auto.md:3:17: permissionMode: \"auto\" has no orch equivalent"),
        "{stderr}"
    );
    assert!(
        stderr.contains("hooked.md:4:")
            && stderr
                .contains("hooks: hooks.PreToolUse[0].hooks must be a list of {type, command}"),
        "{stderr}"
    );
}
