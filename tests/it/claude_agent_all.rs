//! Issue 30's third acceptance point, through the real binary: a Claude
//! Code agent file with `mcpServers:`, `mcp__github__*` tools, `skills:` and
//! `hooks:` runs as a stage with all four honoured — the MCP server's tool
//! offered and called (in the ledger), the skill in the catalogue and
//! loaded, the agent file's PreToolUse hook refusing `rm` (trusted with
//! `--trust-hooks`), and nothing of it widened: no other tool, no other
//! skill.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, offered_tools, only_run_id, record_dir,
    stage_events, tool_results, write_issue, write_pipeline,
};
use serde_json::json;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/mcp/server.py");

/// PreToolUse on Bash: refuses any command with `rm` (exit 2, reason on stderr).
const NO_RM: &str = r#"cmd=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["tool_input"]["command"])')
case " $cmd " in
  *" rm "*) echo "rm is not allowed here: $cmd" >&2; exit 2 ;;
esac
exit 0
"#;

const AGENT: &str = "---\nname: releaser\ndescription: Writes release notes.\ntools: Read, Write, Bash, Skill, mcp__github__*\nmcpServers:\n  - github\nskills: release-notes\nhooks:\n  PreToolUse:\n    - matcher: Bash\n      hooks:\n        - type: command\n          command: sh .claude/hooks/no-rm.sh\n---\nYou write release notes.\n";

const SKILL: &str = "---\nname: release-notes\ndescription: Write release notes for a change.\n---\nOne line per user-visible change, newest first.\n";

const OTHER_SKILL: &str =
    "---\nname: lint-fix\ndescription: Fix lint findings.\n---\nRun the linter first.\n";

#[test]
fn a_claude_code_agent_file_with_mcp_servers_tools_skills_and_hooks_runs_with_all_four() {
    let repo = TestRepo::with_commit(
        &[
            ("keep.txt", "precious\n"),
            (".claude/agents/releaser.md", AGENT),
            (".claude/skills/release-notes/SKILL.md", SKILL),
            (".claude/skills/lint-fix/SKILL.md", OTHER_SKILL),
            (".claude/hooks/no-rm.sh", NO_RM),
            (
                ".mcp.json",
                &json!({"mcpServers": {"github": {"command": "python3", "args": [FIXTURE]}}})
                    .to_string(),
            ),
        ],
        "an agent file with all four",
    );
    let server = FakeServer::start(Script::new().agent(
        "notes",
        vec![
            Reply::tool_call("s1", "load_skill", json!({"name": "release-notes"})),
            Reply::tool_call("m1", "mcp__github__shout", json!({"text": "hello"})),
            Reply::tool_call("b1", "bash", json!({"command": "rm keep.txt"})),
            Reply::tool_call(
                "w1",
                "write_file",
                json!({"path": "NOTES.md", "content": "- HELLO\n"}),
            ),
            Reply::finish("f1", "Wrote the notes.", None),
        ],
    ));
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# notes\n\nWrite the release notes.\n");
    let pipeline = write_pipeline(
        scratch.path(),
        "notes",
        "stages:\n  notes:\n    role: releaser\n",
    );
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .args(["--trust-hooks"])
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let reqs = server.requests_for("notes");
    assert_eq!(reqs.len(), 5);

    // Offered: what the file names, and no more.
    let mut offered = offered_tools(&reqs[0]);
    offered.sort();
    assert_eq!(
        offered,
        [
            "bash",
            "finish",
            "load_skill",
            "mcp__github__shout",
            "read_file",
            "write_file"
        ]
    );
    // The skill it names is in the catalogue; the other is not.
    let system = reqs[0].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        system.contains("release-notes: Write release notes for a change."),
        "{system}"
    );
    assert!(!system.contains("lint-fix"), "{system}");

    let results = |i: usize| tool_results(&reqs[i]).join("\n");
    assert!(
        results(1).contains("One line per user-visible change"),
        "{}",
        results(1)
    );
    assert!(results(2).contains("HELLO"), "{}", results(2));
    assert!(
        results(3).contains("refused by a PreToolUse hook")
            && results(3).contains("rm is not allowed here: rm keep.txt"),
        "{}",
        results(3)
    );

    let run_id = only_run_id(&repo.path);
    let record = record_dir(&repo, &run_id);
    let calls = stage_events(&record, "notes", "mcp_call");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        (&calls[0]["server"], &calls[0]["tool"]),
        (&json!("github"), &json!("shout"))
    );
    let loads = stage_events(&record, "notes", "skill_load");
    assert_eq!(loads.len(), 1, "{loads:?}");
    assert_eq!(loads[0]["name"], "release-notes");
    let hooks = stage_events(&record, "notes", "hook_run");
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0]["decision"], "block");
    let show = |p: &str| repo.git(&["show", &format!("orch/{run_id}/notes:{p}")]);
    assert_eq!(show("keep.txt"), "precious\n");
    assert_eq!(show("NOTES.md"), "- HELLO\n");
}
