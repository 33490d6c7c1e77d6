//! MCP servers end to end (issue 30.1), through the real binary with the
//! stdio fixture server `fixtures/mcp/server.py`: a role that names the
//! server is offered its tool under `mcp__fx__shout` and its call reaches
//! the server and is in the action log (`mcp_call`); a role that does not
//! name it sees nothing of it; a `deny` rule refuses the call before the
//! server; the server is gone after the run; `orch replay` of the run
//! with the server's script deleted reproduces it; and the first coder
//! request of a repository with a `.mcp.json` stays ≤ 3.4 KB.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, offered_tools, only_run_id, orch, output_logged,
    record_dir, stage_events, tool_results, write_issue, write_pipeline,
};
use serde_json::json;
use std::path::Path;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/mcp/server.py");

/// A repository whose `.mcp.json` defines server `fx` as `python3 <script>`,
/// with role `mcpuser` (given `front` matter) and role `plain` (names no
/// server), committed.
fn repo_with(script: &Path, front: &str) -> TestRepo {
    repo_with_servers(
        json!({"fx": {"command": "python3", "args": [script]}}),
        front,
    )
}

/// A repository whose `.mcp.json` has `servers` as its `mcpServers`, with
/// role `mcpuser` (given `front` matter) and role `plain` (names no
/// server), committed.
pub(crate) fn repo_with_servers(servers: serde_json::Value, front: &str) -> TestRepo {
    let repo = TestRepo::with_commit(&[("notes.txt", "notes\n")], "base");
    repo.write(".mcp.json", json!({"mcpServers": servers}).to_string());
    repo.write(
        ".orch/roles/mcpuser.md",
        format!("---\nname: mcpuser\ndescription: uses MCP\n{front}---\nYou work.\n"),
    );
    repo.write(
        ".orch/roles/plain.md",
        "---\nname: plain\ndescription: no MCP\ntools: Read, Write\n---\nYou work.\n",
    );
    repo.commit_all("roles and servers");
    repo
}

/// Runs stage `a` (role `mcpuser`) then stage `b` (role `plain`).
fn run_two(repo: &TestRepo, a: Vec<Reply>) -> (FakeServer, i32, String) {
    run_two_env(repo, a, &[])
}

/// [`run_two`] with `env` added to orch's environment.
pub(crate) fn run_two_env(
    repo: &TestRepo,
    a: Vec<Reply>,
    env: &[(&str, &str)],
) -> (FakeServer, i32, String) {
    let server = FakeServer::start(
        Script::new()
            .agent("a", a)
            .agent("b", vec![Reply::finish("fb", "Nothing to add.", None)]),
    );
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# shout\n\nShout hello.\n");
    let pipeline = write_pipeline(
        scratch.path(),
        "two",
        "stages:\n  a:\n    role: mcpuser\n  b:\n    role: plain\n    needs: [a]\n",
    );
    let mut run = OrchRun::new(&pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "m");
    for (k, v) in env {
        run = run.env(k, v);
    }
    let out = run.output();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (server, out.status.code().unwrap_or(-1), stderr)
}

fn shout_then_write() -> Vec<Reply> {
    vec![
        Reply::tool_call("c1", "mcp__fx__shout", json!({"text": "hello"})),
        Reply::tool_call(
            "c2",
            "write_file",
            json!({"path": "shout.txt", "content": "HELLO\n"}),
        ),
        Reply::finish("f", "Shouted.", None),
    ]
}

/// The pid the fixture put in its result.
fn pid_in(result: &str) -> u32 {
    let start = result.find("(pid ").expect("pid in result") + 5;
    result[start..].trim_end_matches(')').parse().unwrap()
}

#[test]
fn a_named_server_is_offered_called_logged_and_gone_after_the_run() {
    let repo = repo_with(
        Path::new(FIXTURE),
        "tools: Read, Write, mcp__fx__shout\nmcpServers: [fx]\n",
    );
    let (server, code, stderr) = run_two(&repo, shout_then_write());
    assert_eq!(code, 0, "{stderr}");
    let reqs = server.requests_for("a");
    assert_eq!(
        offered_tools(&reqs[0]),
        ["read_file", "write_file", "finish", "mcp__fx__shout"]
    );
    let schema = &reqs[0].body["tools"][3]["function"];
    assert_eq!(schema["description"], "Upper-case a text.");
    assert_eq!(schema["parameters"]["required"], json!(["text"]));
    let result = &tool_results(&reqs[1])[0];
    assert!(result.starts_with("HELLO (pid "), "{result}");

    // The role that names no server sees none of its tools.
    assert_eq!(
        offered_tools(&server.requests_for("b")[0]),
        ["read_file", "write_file", "finish"]
    );

    // The ledger: the stage's MCP servers and the call.
    let record = record_dir(&repo, &only_run_id(&repo.path));
    let servers = stage_events(&record, "a", "mcp_servers");
    assert_eq!(servers.len(), 1, "{servers:?}");
    assert_eq!(servers[0]["servers"], json!(["fx"]));
    assert!(servers[0]["bytes"].as_u64().unwrap() > 100, "{servers:?}");
    let calls = stage_events(&record, "a", "mcp_call");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["server"], "fx");
    assert_eq!(calls[0]["tool"], "shout");
    assert_eq!(calls[0]["call_id"], "c1");
    assert_eq!(calls[0]["bytes"].as_u64(), Some(result.len() as u64));
    assert!(stage_events(&record, "b", "mcp_servers").is_empty());

    // No process of the server is left.
    let pid = pid_in(result);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "MCP server {pid} still runs"
    );
}

#[test]
fn a_deny_rule_refuses_the_tool_before_the_server_sees_it() {
    let repo = repo_with(
        Path::new(FIXTURE),
        "mcpServers: [fx]\nbash:\n  deny: [\"mcp__fx__shout\"]\n",
    );
    let (server, code, stderr) = run_two(
        &repo,
        vec![
            Reply::tool_call("c1", "mcp__fx__shout", json!({"text": "hello"})),
            Reply::finish("f", "Refused.", None),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let reqs = server.requests_for("a");
    assert!(offered_tools(&reqs[0]).contains(&"mcp__fx__shout".to_owned()));
    let result = &tool_results(&reqs[1])[0];
    assert_eq!(
        result,
        "error: mcp__fx__shout: not called: denied by policy: role rule deny `mcp__fx__shout`"
    );
    let record = record_dir(&repo, &only_run_id(&repo.path));
    assert!(stage_events(&record, "a", "mcp_call").is_empty());
    let tool = &stage_events(&record, "a", "tool")[0];
    assert_eq!(tool["policy"], "deny: role rule deny `mcp__fx__shout`");
}

#[test]
fn a_tool_error_and_a_dying_server_are_tool_errors_the_model_sees() {
    let repo = repo_with(Path::new(FIXTURE), "mcpServers: [fx]\n");
    let (server, code, stderr) = run_two(
        &repo,
        vec![
            Reply::tool_call("c1", "mcp__fx__shout", json!({"text": "fail"})),
            Reply::tool_call("c2", "mcp__fx__shout", json!({"text": "die"})),
            Reply::tool_call("c3", "mcp__fx__shout", json!({"text": "again"})),
            Reply::finish("f", "Done.", None),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let reqs = server.requests_for("a");
    let failed = &tool_results(&reqs[1])[0];
    assert!(
        failed.starts_with("error: mcp__fx__shout: FAIL (pid "),
        "{failed}"
    );
    let died = &tool_results(&reqs[2])[1];
    assert!(died.starts_with("error: mcp__fx__shout: "), "{died}");
    let again = &tool_results(&reqs[3])[2];
    assert!(
        again.contains("MCP server `fx` is gone"),
        "a dead server's tools fail cleanly: {again}"
    );
    assert_eq!(
        stderr.matches("MCP server `fx` died").count(),
        1,
        "reported once: {stderr}"
    );
}

#[test]
fn the_server_runs_sandboxed_with_a_scrubbed_env_and_its_expanded_token_is_redacted() {
    let repo = TestRepo::with_commit(&[("notes.txt", "notes\n")], "base");
    repo.write(
        ".mcp.json",
        json!({"mcpServers": {"fx": {"command": "python3", "args": [FIXTURE], "env": {"FX_TOKEN": "${MY_MCP_TOKEN}"}}}})
            .to_string(),
    );
    repo.write(
        ".orch/roles/mcpuser.md",
        "---\nname: mcpuser\ndescription: d\nmcpServers: [fx]\n---\nYou work.\n",
    );
    repo.write(
        ".orch/roles/plain.md",
        "---\nname: plain\ntools: Read\n---\nP\n",
    );
    repo.commit_all("servers");
    let outside = tempfile::tempdir().unwrap();
    let canary = outside.path().join("canary");
    let (server, code, stderr) = run_two_env(
        &repo,
        vec![
            Reply::tool_call(
                "c1",
                "mcp__fx__shout",
                json!({"text": format!("probe:{}", canary.display())}),
            ),
            Reply::finish("f", "Probed.", None),
        ],
        &[
            ("MY_MCP_TOKEN", "mcp-token-7f3a9c2e"),
            ("ORCH_API_KEY", "sk-orch-key-5b8d1e4f"),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let result = &tool_results(&server.requests_for("a")[1])[0];
    assert!(
        !canary.exists(),
        "the server wrote outside its lane: {result}"
    );
    assert!(result.starts_with("write refused; "), "{result}");
    assert!(result.contains("token [REDACTED];"), "{result}");
    assert!(!result.contains("mcp-token-7f3a9c2e"), "{result}");
    assert!(result.contains(" FX_TOKEN"), "{result}");
    assert!(!result.contains("ORCH_API_KEY"), "{result}");
    let record = record_dir(&repo, &only_run_id(&repo.path));
    let log = std::fs::read_to_string(record.join("stages/a/actions.jsonl")).unwrap();
    assert!(!log.contains("mcp-token-7f3a9c2e"), "{log}");
}

#[test]
fn a_server_no_configuration_defines_is_named_and_offers_nothing() {
    let repo = repo_with(Path::new(FIXTURE), "tools: Read, Write, mcp__nosuch__x\n");
    let (server, code, stderr) = run_two(&repo, vec![Reply::finish("f", "Nothing.", None)]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("names MCP server(s) nosuch that no .mcp.json"),
        "{stderr}"
    );
    assert_eq!(
        offered_tools(&server.requests_for("a")[0]),
        ["read_file", "write_file", "finish"]
    );
    let record = record_dir(&repo, &only_run_id(&repo.path));
    let servers = stage_events(&record, "a", "mcp_servers");
    assert_eq!(servers[0]["missing"], json!(["nosuch"]), "{servers:?}");
}

#[test]
fn replay_with_the_server_script_deleted_reproduces_the_run() {
    let scripts = tempfile::tempdir().unwrap();
    let script = scripts.path().join("server.py");
    std::fs::copy(FIXTURE, &script).unwrap();
    let repo = repo_with(&script, "mcpServers: [fx]\n");
    let (_server, code, stderr) = run_two(&repo, shout_then_write());
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(repo.read("notes.txt"), "notes\n");
    std::fs::remove_file(&script).unwrap();
    assert_replay_reproduces(&repo);
}

/// `orch replay` of the repository's only run reports `reproduced: true`
/// and an equal final tree, and its stage `a` started no MCP server.
pub(crate) fn assert_replay_reproduces(repo: &TestRepo) {
    let run_id = only_run_id(&repo.path);
    let out = output_logged(
        orch()
            .args(["replay", &run_id, "--json", "--repo"])
            .arg(&repo.path),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["reproduced"], true, "{report}");
    assert_eq!(report["final_tree"]["equal"], true, "{report}");
    let replay_dir = record_dir(repo, report["run_id"].as_str().unwrap());
    let servers = stage_events(&replay_dir, "a", "mcp_servers");
    assert!(servers[0]["replayed_from"].is_string(), "{servers:?}");
    assert_eq!(servers[0]["servers"], json!([]));
}

#[test]
fn the_first_coder_request_of_a_repository_with_mcp_servers_stays_at_most_3400_bytes() {
    let repo = repo_with(Path::new(FIXTURE), "mcpServers: [fx]\n");
    let server = FakeServer::start(
        Script::new()
            .agent("code", vec![Reply::finish("a", "Nothing to change.", None)])
            .agent("review", vec![Reply::finish("b", "Fine.", Some("approve"))])
            .agent("docs", vec![Reply::finish("c", "Nothing.", None)]),
    );
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# Off-by-one\n\nFix it.\n");
    let out = OrchRun::new("issue-to-pr", &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .output();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = &server.requests_for("code")[0];
    let tools = offered_tools(first);
    assert!(!tools.iter().any(|t| t.starts_with("mcp__")), "{tools:?}");
    let length = first.body.to_string().len();
    assert!(
        length <= 3400,
        "first coder request is {length} B, budget 3400 B"
    );
}

#[test]
fn dry_run_lists_the_servers_tools_and_bytes_a_stage_would_get() {
    let repo = repo_with(
        Path::new(FIXTURE),
        "tools: Read, mcp__fx__shout\nmcpServers: [fx]\n",
    );
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# shout\n\nShout hello.\n");
    let pipeline = write_pipeline(
        scratch.path(),
        "two",
        "stages:\n  a:\n    role: mcpuser\n  b:\n    role: plain\n    needs: [a]\n",
    );
    let run = |json_out: bool| {
        let mut run = OrchRun::new(&pipeline, &repo)
            .issue(&issue)
            .model("http://127.0.0.1:9", "m")
            .args(["--dry-run"]);
        if json_out {
            run = run.json();
        }
        run.output()
    };
    let out = run(true);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let a = &plan["stages"][0]["mcp"];
    assert_eq!(a["tools"], json!(["mcp__fx__shout"]), "{plan}");
    assert_eq!(a["servers"][0]["name"], "fx");
    assert!(
        a["servers"][0]["defined_in"]
            .as_str()
            .unwrap()
            .starts_with(".mcp.json at ")
    );
    let bytes = a["bytes"].as_u64().unwrap();
    assert!((100..1000).contains(&bytes), "{a}");
    assert!(plan["stages"][1]["mcp"].is_null(), "{plan}");
    let human = String::from_utf8_lossy(&run(false).stdout).into_owned();
    assert!(
        human.contains(&format!(
            "mcp: servers fx; tools mcp__fx__shout; their definitions add {bytes} B to every request"
        )),
        "{human}"
    );
}

#[test]
fn orch_agent_with_a_role_naming_a_server_is_offered_its_tools() {
    let repo = repo_with(Path::new(FIXTURE), "mcpServers: [fx]\n");
    let server = FakeServer::start(Script::new().agent(
        "mcpuser",
        vec![
            Reply::tool_call("c1", "mcp__fx__shout", json!({"text": "hi"})),
            Reply::finish("f", "Shouted.", None),
        ],
    ));
    let mut cmd = orch();
    cmd.current_dir(&repo.path)
        .args(["agent", "--role", "mcpuser", "--task", "Shout."])
        .args(["--base-url", &server.base_url, "--model", "m"]);
    let out = output_logged(&mut cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let reqs = server.requests_for("mcpuser");
    assert!(offered_tools(&reqs[0]).contains(&"mcp__fx__shout".to_owned()));
    let result = &tool_results(&reqs[1])[0];
    assert!(result.starts_with("HI (pid "), "{result}");
}
