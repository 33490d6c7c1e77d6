//! MCP over streamable HTTP end to end (issue 30.1), through the real
//! binary with the fixture server `fixtures/mcp/http_server.py` (stdlib
//! Python, started by the test on 127.0.0.1:0, answering JSON, checking a
//! bearer token): a role that names the server is offered its tool under
//! `mcp__web__shout`, the call reaches the server and is in the action log
//! (`mcp_call`); the token, from orch's environment via `${VAR}` in the
//! definition's `headers`, reaches the server but no tool process and no
//! record; a role that does not name the server sees none of its tools; a
//! `deny` rule refuses the call; `orch replay` with the server stopped
//! reproduces the run.

use crate::mcp::{assert_replay_reproduces, repo_with_servers, run_two_env};
use crate::support::{
    OrchRun, Reply, TestRepo, offered_tools, only_run_id, record_dir, stage_events, tool_results,
    write_issue, write_pipeline,
};
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/mcp/http_server.py");
/// The bearer token the fixture demands and orch reads from `FXHTTPAUTH`
/// (a name outside orch's secret-name patterns: only the `${VAR}` in
/// `headers` makes it a secret).
const TOKEN: &str = "http-mcp-tok-9d41c7e2";

/// The fixture server, killed when dropped.
struct HttpFixture {
    child: Child,
    url: String,
}

impl HttpFixture {
    /// Starts the fixture demanding `token` and waits (bounded) for its port.
    fn start(token: &str) -> HttpFixture {
        let mut child = Command::new("python3")
            .arg(FIXTURE)
            .arg(token)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs the fixture");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the fixture prints its port");
        let port: u16 = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("fixture said {line:?}"));
        HttpFixture {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }

    /// Stops the server (and waits for it).
    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HttpFixture {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A repository whose `.mcp.json` defines HTTP server `web` at `url` with
/// the token header, role `mcpuser` (given `front` matter) and role `plain`
/// (names no server), committed.
fn repo_with(url: &str, front: &str) -> TestRepo {
    repo_with_servers(
        json!({"web": {"type": "http", "url": url,
            "headers": {"Authorization": "Bearer ${FXHTTPAUTH}"}}}),
        front,
    )
}

/// Every file under `dir` that contains `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if std::fs::read(&path)
                .is_ok_and(|b| String::from_utf8_lossy(&b).contains(needle))
            {
                hits.push(path.display().to_string());
            }
        }
    }
    hits
}

fn shout_then_write() -> Vec<Reply> {
    vec![
        Reply::tool_call("c1", "mcp__web__shout", json!({"text": "hello"})),
        Reply::tool_call(
            "c2",
            "write_file",
            json!({"path": "shout.txt", "content": "HELLO\n"}),
        ),
        Reply::finish("f", "Shouted.", None),
    ]
}

#[test]
fn an_http_server_is_offered_called_logged_and_its_token_reaches_only_the_server() {
    let fixture = HttpFixture::start(TOKEN);
    let repo = repo_with(
        &fixture.url,
        "tools: Read, Write, Bash, mcp__web__shout\nmcpServers: [web]\n",
    );
    let (server, code, stderr) = run_two_env(
        &repo,
        vec![
            Reply::tool_call("c1", "mcp__web__shout", json!({"text": "hello"})),
            Reply::tool_call("c2", "mcp__web__shout", json!({"text": "auth?"})),
            Reply::tool_call("c3", "bash", json!({"command": "env"})),
            Reply::finish("f", "Shouted.", None),
        ],
        &[("FXHTTPAUTH", TOKEN)],
    );
    assert_eq!(code, 0, "{stderr}");
    let reqs = server.requests_for("a");
    assert_eq!(
        offered_tools(&reqs[0]),
        [
            "bash",
            "read_file",
            "write_file",
            "finish",
            "mcp__web__shout"
        ]
    );
    let schema = &reqs[0].body["tools"][4]["function"];
    assert_eq!(schema["description"], "Upper-case a text over HTTP.");
    assert_eq!(schema["parameters"]["required"], json!(["text"]));
    let results = tool_results(&reqs[3]);
    assert_eq!(results[0], "HELLO (over http)");
    // The server got the token (it answers 401 without it) and echoes it:
    // the model sees the header's whole value redacted.
    assert_eq!(results[1], "authorization: [REDACTED]");
    // No tool process has the token or its variable.
    assert!(results[2].contains("PATH="), "{}", results[2]);
    assert!(
        !results[2].contains("FXHTTPAUTH") && !results[2].contains("[REDACTED]"),
        "a tool process got the token: {}",
        results[2]
    );

    // The role that names no server sees none of its tools.
    assert_eq!(
        offered_tools(&server.requests_for("b")[0]),
        ["read_file", "write_file", "finish"]
    );

    // The ledger: the stage's server and both calls.
    let record = record_dir(&repo, &only_run_id(&repo.path));
    let servers = stage_events(&record, "a", "mcp_servers");
    assert_eq!(servers[0]["servers"], json!(["web"]), "{servers:?}");
    let calls = stage_events(&record, "a", "mcp_call");
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0]["server"], "web");
    assert_eq!(calls[0]["tool"], "shout");
    assert_eq!(calls[0]["call_id"], "c1");
    assert_eq!(calls[0]["is_error"], false);
    assert_eq!(calls[0]["bytes"].as_u64(), Some(results[0].len() as u64));
    assert!(stage_events(&record, "b", "mcp_servers").is_empty());

    // The token is in no record file and in no request to the model.
    assert_eq!(files_containing(&record, TOKEN), Vec::<String>::new());
    for req in server.requests() {
        assert!(!String::from_utf8_lossy(&req.raw).contains(TOKEN));
    }
}

#[test]
fn a_wrong_token_fails_the_stage_naming_the_server_not_the_token() {
    let fixture = HttpFixture::start(TOKEN);
    let repo = repo_with(&fixture.url, "mcpServers: [web]\n");
    let wrong = "wrong-token-55e0b3aa";
    let (_server, code, stderr) = run_two_env(
        &repo,
        vec![Reply::finish("f", "Nothing.", None)],
        &[("FXHTTPAUTH", wrong)],
    );
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains("failed to start MCP server `web`: initialize at http://127.0.0.1:"),
        "{stderr}"
    );
    assert!(stderr.contains("HTTP 401 Unauthorized"), "{stderr}");
    assert!(!stderr.contains(wrong), "{stderr}");
}

#[test]
fn a_deny_rule_refuses_the_http_tool_before_the_server_sees_it() {
    let fixture = HttpFixture::start(TOKEN);
    let repo = repo_with(
        &fixture.url,
        "mcpServers: [web]\nbash:\n  deny: [\"mcp__web__*\"]\n",
    );
    let (server, code, stderr) = run_two_env(
        &repo,
        vec![
            Reply::tool_call("c1", "mcp__web__shout", json!({"text": "hello"})),
            Reply::finish("f", "Refused.", None),
        ],
        &[("FXHTTPAUTH", TOKEN)],
    );
    assert_eq!(code, 0, "{stderr}");
    let reqs = server.requests_for("a");
    assert!(offered_tools(&reqs[0]).contains(&"mcp__web__shout".to_owned()));
    assert_eq!(
        tool_results(&reqs[1])[0],
        "error: mcp__web__shout: not called: denied by policy: role rule deny `mcp__web__*`"
    );
    let record = record_dir(&repo, &only_run_id(&repo.path));
    assert!(stage_events(&record, "a", "mcp_call").is_empty());
}

#[test]
fn replay_with_the_http_server_stopped_reproduces_the_run() {
    let mut fixture = HttpFixture::start(TOKEN);
    let repo = repo_with(&fixture.url, "mcpServers: [web]\n");
    let (server, code, stderr) = run_two_env(&repo, shout_then_write(), &[("FXHTTPAUTH", TOKEN)]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        tool_results(&server.requests_for("a")[1])[0],
        "HELLO (over http)"
    );
    fixture.stop();
    assert_replay_reproduces(&repo);
}

#[test]
fn a_tool_error_and_a_dying_http_server_are_tool_errors_the_model_sees() {
    let fixture = HttpFixture::start(TOKEN);
    let repo = repo_with(&fixture.url, "mcpServers: [web]\n");
    let (server, code, stderr) = run_two_env(
        &repo,
        vec![
            Reply::tool_call("c1", "mcp__web__shout", json!({"text": "fail"})),
            Reply::tool_call("c2", "mcp__web__shout", json!({"text": "die"})),
            Reply::tool_call("c3", "mcp__web__shout", json!({"text": "again"})),
            Reply::finish("f", "Done.", None),
        ],
        &[("FXHTTPAUTH", TOKEN)],
    );
    assert_eq!(code, 0, "{stderr}");
    let results = tool_results(&server.requests_for("a")[3]);
    assert_eq!(results[0], "error: mcp__web__shout: FAIL (over http)");
    // The server is gone: each later call is a clean tool error naming it.
    for gone in &results[1..] {
        assert!(
            gone.starts_with("error: mcp__web__shout: MCP server `web`: "),
            "{results:?}"
        );
        assert!(!gone.contains("rmcp::"), "{gone}");
    }
    assert!(!stderr.contains(TOKEN), "{stderr}");
    let record = record_dir(&repo, &only_run_id(&repo.path));
    let calls = stage_events(&record, "a", "mcp_call");
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(calls.iter().all(|c| c["is_error"] == true), "{calls:?}");
}

#[test]
fn dry_run_lists_the_http_servers_tools() {
    let fixture = HttpFixture::start(TOKEN);
    let repo = repo_with(&fixture.url, "mcpServers: [web]\n");
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# shout\n\nShout hello.\n");
    let pipeline = write_pipeline(scratch.path(), "one", "stages:\n  a:\n    role: mcpuser\n");
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model("http://127.0.0.1:9", "m")
        .env("FXHTTPAUTH", TOKEN)
        .args(["--dry-run"])
        .json()
        .output();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let plan: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let a = &plan["stages"][0]["mcp"];
    assert_eq!(a["tools"], json!(["mcp__web__shout"]), "{plan}");
    assert!(a["bytes"].as_u64().unwrap() > 100, "{a}");
    assert!(!stdout.contains(TOKEN), "{stdout}");
}

#[test]
fn a_legacy_sse_server_fails_the_stage_saying_what_to_use() {
    let repo = repo_with_servers(
        json!({"web": {"type": "sse", "url": "http://127.0.0.1:9/sse"}}),
        "mcpServers: [web]\n",
    );
    let (_server, code, stderr) = run_two_env(&repo, vec![Reply::finish("f", "x", None)], &[]);
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains("failed to start MCP server `web`: it is a legacy HTTP+SSE server"),
        "{stderr}"
    );
    assert!(
        stderr.contains("use the server's streamable-HTTP endpoint with `type: http`"),
        "{stderr}"
    );
}
