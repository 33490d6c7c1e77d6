//! `--dry-run`'s view of a role's MCP servers: which it names, where each
//! is defined, the tools it would be offered and the bytes their
//! definitions add to every request. Listing the tools needs the servers'
//! `tools/list`, so each server is started once, in an empty temporary
//! directory (deleted afterwards) under the role's sandbox, and stopped.

use super::{Launch, McpConfig, McpSession, RoleMcp};
use crate::sandbox::ToolSandbox;
use serde_json::{Value, json};

/// The MCP part of a stage's dry-run plan (`Value::Null` when the role
/// names no server).
pub(crate) fn describe(
    role: &RoleMcp,
    config: Result<McpConfig, super::McpError>,
    sandbox: std::io::Result<ToolSandbox>,
) -> Value {
    if role.is_empty() {
        return Value::Null;
    }
    let servers: Vec<Value> = role
        .granted_servers()
        .iter()
        .map(|name| {
            let origin = match (role.inline.get(name), &config) {
                (Some(_), _) => Some("the role's mcpServers".to_owned()),
                (None, Ok(c)) => c.servers.get(name).map(|d| d.origin.clone()),
                (None, Err(_)) => None,
            };
            json!({"name": name, "defined_in": origin})
        })
        .collect();
    let listed = config
        .map_err(|e| e.to_string())
        .and_then(|c| sandbox.map_err(|e| e.to_string()).map(|s| (c, s)))
        .and_then(|(config, sandbox)| list(role, &config, &sandbox));
    match listed {
        Ok(session) => json!({
            "servers": servers,
            "undefined": session.missing(),
            "tools": session.tools().iter().map(|t| t.name).collect::<Vec<_>>(),
            "bytes": session.definitions_bytes(),
        }),
        Err(e) => json!({"servers": servers, "error": e}),
    }
}

/// Starts the role's servers in a scratch directory on a runtime of its
/// own (a dry run is synchronous) and returns their listing; the servers
/// are stopped when the session drops.
fn list(role: &RoleMcp, config: &McpConfig, sandbox: &ToolSandbox) -> Result<McpSession, String> {
    let scratch = tempfile::Builder::new()
        .prefix("orch-mcp-dry-")
        .tempdir()
        .map_err(|e| format!("failed to make a scratch directory: {e}"))?;
    let env = crate::exec::scrubbed_env();
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("failed to start a runtime: {e}"))?;
                rt.block_on(async {
                    let launch = Launch {
                        lane: scratch.path(),
                        env: &env,
                        sandbox: Some(sandbox),
                        pre_exec: None,
                    };
                    McpSession::start(role, config, launch)
                        .await
                        .map_err(|e| e.to_string())
                })
            })
            .join()
            .map_err(|_| "listing the MCP servers panicked".to_owned())?
    })
}
