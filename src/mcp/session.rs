//! A stage's MCP servers: started in its lane under its sandbox, listed
//! once, called through rmcp, killed when the session drops.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use serde::Serialize;
use serde_json::Value;

use super::config::{Defined, McpConfig, expand};
use super::{McpError, RoleMcp};
use crate::exec::{PreExec, ProcessGroup};
use crate::sandbox::ToolSandbox;

/// How long a server has to answer its handshake and `tools/list`.
pub(super) const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one `tools/call` may take.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest tool description offered (schemas are sent on every request).
const MAX_DESCRIPTION: usize = 400;

/// One MCP tool as offered to the model.
#[derive(Debug, Clone, Serialize)]
pub struct McpToolInfo {
    /// `mcp__<server>__<tool>` (interned: tool definitions hold `&'static str`).
    pub name: &'static str,
    /// The server's name.
    pub server: String,
    /// The tool's name on its server.
    pub tool: String,
    /// Its description (capped).
    pub description: &'static str,
    /// Its input schema.
    pub parameters: Value,
}

/// What one MCP call did, for the `mcp_call` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpCallInfo {
    /// The server.
    pub server: String,
    /// The tool on it.
    pub tool: String,
    /// Wall time of the call.
    pub duration_ms: u64,
    /// Bytes of the result as the server sent it (before capping).
    pub bytes: usize,
    /// Whether the call ended as a tool error.
    pub is_error: bool,
}

pub(super) struct Server {
    pub(super) name: String,
    pub(super) client: tokio::sync::Mutex<Option<RunningService<RoleClient, ()>>>,
    /// The server's process group (stdio servers); dropping it kills the
    /// server's tree.
    pub(super) group: Mutex<Option<ProcessGroup>>,
    /// Why the server is gone, once it is.
    pub(super) dead: Mutex<Option<String>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("name", &self.name).finish()
    }
}

/// One MCP call of a recorded run, as its transcript holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCall {
    /// `mcp__<server>__<tool>`.
    pub name: String,
    /// Its arguments.
    pub arguments: Value,
    /// What the model was sent (without the `error: <tool>: ` prefix).
    pub content: String,
    /// Whether it was a tool error.
    pub is_error: bool,
}

/// The MCP servers of one stage and the tools it offers from them.
#[derive(Debug, Default)]
pub struct McpSession {
    servers: Vec<Arc<Server>>,
    tools: Vec<McpToolInfo>,
    /// A replay: calls answered from the recorded run, no server started.
    recorded: Option<Mutex<Vec<RecordedCall>>>,
    /// Servers the role names that no configuration defines.
    missing: Vec<String>,
}

/// Where and how a session's stdio servers run.
pub struct Launch<'a> {
    /// The lane: the servers' working directory.
    pub lane: &'a Path,
    /// The tool processes' environment (scrubbed; the run marker).
    pub env: &'a [(String, String)],
    /// The role's sandbox (as for `bash`); `None` runs unsandboxed.
    pub sandbox: Option<&'a ToolSandbox>,
    /// Run in the server between fork and exec, besides the sandbox.
    pub pre_exec: Option<&'a PreExec>,
}

impl McpSession {
    /// Starts the servers `role` names (definitions from `config`, its own
    /// inline ones first) and lists their tools, keeping those it grants.
    pub async fn start(
        role: &RoleMcp,
        config: &McpConfig,
        launch: Launch<'_>,
    ) -> Result<McpSession, McpError> {
        let mut session = McpSession::default();
        for name in role.granted_servers() {
            let defined = match role.inline.get(&name) {
                Some(spec) => Defined {
                    spec: spec.clone(),
                    origin: "the role's mcpServers".to_owned(),
                },
                None => match config.servers.get(&name) {
                    Some(d) => d.clone(),
                    None => {
                        // As Claude Code: a server nobody configured
                        // offers no tools; the stage says so and goes on.
                        session.missing.push(name);
                        continue;
                    }
                },
            };
            let server = start_server(&name, &defined, &launch).await?;
            let listed = {
                let client = server.client.lock().await;
                let Some(client) = client.as_ref() else {
                    continue;
                };
                tokio::time::timeout(START_TIMEOUT, client.list_all_tools())
                    .await
                    .map_err(|_| start_error(&name, "tools/list did not answer in time"))?
                    .map_err(|e| start_error(&name, &format!("tools/list failed: {}", tidy(&e))))?
            };
            for tool in listed {
                if !role.grants(&name, &tool.name) {
                    continue;
                }
                let description = tool
                    .description
                    .as_deref()
                    .map(|d| crate::text::one_line(d, MAX_DESCRIPTION))
                    .unwrap_or_default();
                session.tools.push(McpToolInfo {
                    name: intern(super::tool_name(&name, &tool.name)),
                    server: name.clone(),
                    tool: tool.name.to_string(),
                    description: intern(description),
                    parameters: Value::Object((*tool.input_schema).clone()),
                });
            }
            session.servers.push(server);
        }
        Ok(session)
    }

    /// A replay's session: the recorded tool definitions (`name`,
    /// `description`, `parameters` objects), every call answered from
    /// `calls` (the first unused one with the same name and arguments).
    pub fn replayed(tools: &[Value], calls: Vec<RecordedCall>) -> McpSession {
        let tools = tools
            .iter()
            .filter_map(|t| {
                let name = t["name"].as_str()?;
                let (server, tool) = super::split(name)?;
                Some(McpToolInfo {
                    name: intern(name.to_owned()),
                    server: server.to_owned(),
                    tool: tool?.to_owned(),
                    description: intern(t["description"].as_str().unwrap_or_default().to_owned()),
                    parameters: t["parameters"].clone(),
                })
            })
            .collect();
        McpSession {
            servers: Vec::new(),
            tools,
            recorded: Some(Mutex::new(calls)),
            missing: Vec::new(),
        }
    }

    /// The servers the role names that no configuration defines (not
    /// started; their tools are not offered).
    pub fn missing(&self) -> &[String] {
        &self.missing
    }

    /// The servers started, by name.
    pub fn server_names(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.name.clone()).collect()
    }

    /// The tools offered, by server then in the server's order.
    pub fn tools(&self) -> &[McpToolInfo] {
        &self.tools
    }

    /// The offered tools as the model sees them.
    pub fn definitions(&self) -> Vec<crate::llm::ToolDef> {
        self.tools
            .iter()
            .map(|t| crate::llm::ToolDef {
                name: t.name,
                description: t.description,
                parameters: t.parameters.clone(),
            })
            .collect()
    }

    /// Bytes the offered tools' definitions add to a request's `tools`
    /// array (commas included).
    pub fn definitions_bytes(&self) -> usize {
        self.definitions()
            .iter()
            .map(|d| serde_json::to_string(d).map_or(0, |s| s.len() + 1))
            .sum()
    }

    /// The tool called `name`, when offered.
    pub fn tool(&self, name: &str) -> Option<&McpToolInfo> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// Calls `tool` with `arguments`; `Ok(text, is_error)` is what the model
    /// sees (a tool-level error included), `Err` a failure of the call
    /// itself (a dead server, a timeout, a protocol error), also shown to
    /// the model as an error.
    pub async fn call(
        &self,
        tool: &McpToolInfo,
        arguments: serde_json::Map<String, Value>,
    ) -> Result<(String, bool), String> {
        if let Some(recorded) = &self.recorded {
            let mut calls = recorded.lock().unwrap_or_else(|e| e.into_inner());
            let arguments = Value::Object(arguments);
            let Some(i) = calls
                .iter()
                .position(|c| c.name == tool.name && c.arguments == arguments)
            else {
                return Err(format!(
                    "this replay has no recorded result for this call of `{}` (the run it replays made no such call)",
                    tool.name
                ));
            };
            let call = calls.remove(i);
            return Ok((call.content, call.is_error));
        }
        let Some(server) = self.servers.iter().find(|s| s.name == tool.server) else {
            return Err(format!("MCP server `{}` is not running", tool.server));
        };
        if let Some(why) = server
            .dead
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Err(format!(
                "MCP server `{}` is gone ({why}); its tools cannot be called in this stage",
                server.name
            ));
        }
        let client = server.client.lock().await;
        let Some(client) = client.as_ref() else {
            return Err(format!("MCP server `{}` is not running", tool.server));
        };
        let mut params = CallToolRequestParams::new(tool.tool.clone());
        params.arguments = Some(arguments);
        match tokio::time::timeout(CALL_TIMEOUT, client.call_tool(params)).await {
            Err(_) => Err(format!(
                "MCP server `{}` did not answer within {}s",
                server.name,
                CALL_TIMEOUT.as_secs()
            )),
            Ok(Err(e)) => {
                let closed = matches!(e, rmcp::ServiceError::TransportClosed)
                    || client.is_transport_closed();
                if closed {
                    let stdio = server
                        .group
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .is_some();
                    let why = if stdio {
                        "its connection closed (the process exited)"
                    } else {
                        "its HTTP connection closed"
                    }
                    .to_owned();
                    tracing::warn!(server = %server.name, "MCP server died: {why}");
                    crate::ui::status_line(&format!(
                        "orch: warning: MCP server `{}` died ({why}); its tools fail from now on",
                        server.name
                    ));
                    *server.dead.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
                    return Err(format!("MCP server `{}` is gone: {why}", server.name));
                }
                Err(format!("MCP server `{}`: {}", server.name, tidy(&e)))
            }
            Ok(Ok(result)) => {
                let is_error = result.is_error.unwrap_or(false);
                let value = serde_json::to_value(&result).unwrap_or(Value::Null);
                Ok((result_text(&value), is_error))
            }
        }
    }
}

impl Drop for McpSession {
    fn drop(&mut self) {
        for server in &self.servers {
            // Closing stdin is the protocol's shutdown; the group's drop
            // then kills whatever is left (waiting, bounded, until it is gone).
            if let Ok(mut client) = server.client.try_lock() {
                client.take();
            }
            server
                .group
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
        }
    }
}

/// The text of a `tools/call` result: text blocks as they are, any other
/// block (image, resource) as its JSON, structured content when there is
/// no block.
fn result_text(value: &Value) -> String {
    let mut parts: Vec<String> = Vec::new();
    for block in value["content"].as_array().into_iter().flatten() {
        match block["type"].as_str() {
            Some("text") => parts.push(block["text"].as_str().unwrap_or_default().to_owned()),
            _ => parts.push(block.to_string()),
        }
    }
    if parts.is_empty()
        && let Some(s) = value.get("structuredContent")
    {
        parts.push(s.to_string());
    }
    if parts.is_empty() {
        return "(no content)".to_owned();
    }
    parts.join("\n")
}

/// An rmcp error's text without the Rust type paths it names its transport
/// by (`Transport [rmcp::transport::worker::WorkerTransport<…>] error`).
pub(super) fn tidy(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(start) = rest.find(" [rmcp::") {
        out.push_str(&rest[..start]);
        match rest[start..].find(']') {
            Some(end) => rest = &rest[start + end + 1..],
            None => {
                rest = &rest[start..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

pub(super) fn start_error(server: &str, reason: &str) -> McpError {
    McpError::Start {
        server: server.to_owned(),
        reason: reason.to_owned(),
    }
}

/// Starts one server and does its handshake.
async fn start_server(
    name: &str,
    defined: &Defined,
    launch: &Launch<'_>,
) -> Result<Arc<Server>, McpError> {
    let spec = &defined.spec;
    let Some(command) = spec.command.as_deref() else {
        return super::http::connect(name, defined).await;
    };
    let mut env: BTreeMap<String, String> = launch.env.iter().cloned().collect();
    let mut secrets = Vec::new();
    for (k, v) in &spec.env {
        let (value, found) = expand(v, &format!("{}: mcpServers.{name}.env.{k}", defined.origin))?;
        secrets.extend(found);
        env.insert(k.clone(), value);
    }
    crate::secrets::add_secrets(secrets);

    let call = match launch.sandbox {
        Some(sb) => Some(
            sb.begin(launch.lane)
                .await
                .map_err(|e| start_error(name, &e))?,
        ),
        None => None,
    };
    let mut hook = launch.pre_exec.cloned();
    if let Some(call) = &call {
        env.extend(call.env.iter().cloned());
        let prepared = Arc::clone(&call.prepared);
        let outer = launch.pre_exec.cloned();
        hook = Some(PreExec::new(move || {
            if let Some(outer) = &outer {
                outer.run()?;
            }
            prepared.apply_in_child()
        }));
    }
    let spawned = spawn(command, &spec.args, launch.lane, &env, hook.as_ref());
    if let (Some(sb), Some(call)) = (launch.sandbox, call) {
        sb.finish(call).map_err(|e| start_error(name, &e))?;
    }
    let (group, stdin, stdout) =
        spawned.map_err(|e| start_error(name, &format!("`{command}` did not start: {e}")))?;
    let handshake = tokio::time::timeout(START_TIMEOUT, ().serve((stdout, stdin))).await;
    let client = match handshake {
        Err(_) => {
            return Err(start_error(
                name,
                &format!(
                    "no answer to `initialize` within {}s",
                    START_TIMEOUT.as_secs()
                ),
            ));
        }
        Ok(Err(e)) => return Err(start_error(name, &format!("initialize failed: {e}"))),
        Ok(Ok(c)) => c,
    };
    tracing::info!(server = name, pid = group.pid(), "MCP server started");
    Ok(Arc::new(Server {
        name: name.to_owned(),
        client: tokio::sync::Mutex::new(Some(client)),
        group: Mutex::new(Some(group)),
        dead: Mutex::new(None),
    }))
}

type Spawned = (
    ProcessGroup,
    tokio::net::unix::pipe::Sender,
    tokio::net::unix::pipe::Receiver,
);

/// Spawns `command args` in `cwd` with exactly `env`, stdin and stdout
/// piped to orch, stderr discarded (a server's log is not the protocol).
fn spawn(
    command: &str,
    args: &[String],
    cwd: &Path,
    env: &BTreeMap<String, String>,
    hook: Option<&PreExec>,
) -> std::io::Result<Spawned> {
    let (stdin_child, stdin_ours) = std::io::pipe()?;
    let (stdout_ours, stdout_child) = std::io::pipe()?;
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env)
        .stdin(Stdio::from(stdin_child))
        .stdout(Stdio::from(stdout_child))
        .stderr(Stdio::null());
    let group = ProcessGroup::spawn(&mut cmd, hook)?;
    // The command holds the child ends; drop them so EOF means the server.
    drop(cmd);
    let tx = tokio::net::unix::pipe::Sender::from_owned_fd(stdin_ours.into())?;
    let rx = tokio::net::unix::pipe::Receiver::from_owned_fd(stdout_ours.into())?;
    Ok((group, tx, rx))
}

/// A `&'static str` for `s`: tool definitions hold static names; each
/// distinct name is kept once for the life of the process.
fn intern(s: String) -> &'static str {
    static SEEN: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = seen.iter().find(|x| **x == s) {
        return found;
    }
    let leaked: &'static str = Box::leak(s.into_boxed_str());
    seen.push(leaked);
    leaked
}

#[cfg(test)]
mod tests {
    #[test]
    fn tidy_drops_rmcp_type_paths() {
        assert_eq!(
            super::tidy(
                &"Transport send error: Transport [rmcp::transport::worker::WorkerTransport<rmcp::X<reqwest::Client>>] error: Client error: refused"
            ),
            "Transport send error: Transport error: Client error: refused"
        );
        assert_eq!(super::tidy(&"a [rmcp::b"), "a [rmcp::b");
    }
}
