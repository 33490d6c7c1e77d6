//! The stage's MCP servers: started for the role that names them (or, in a
//! replay, answered from the recorded run), logged as an `mcp_servers`
//! event with the bytes their tool definitions add to every request.

use crate::mcp::{Launch, McpConfig, McpSession, RecordedCall};
use crate::role::Role;
use crate::runlog::{ActionEvent, ActionLog, event};
use crate::runner::ctx::RunCtx;
use crate::runner::error::RunError;
use crate::tools::ToolContext;
use std::sync::Arc;

/// Gives `tool_ctx` the role's MCP servers and rules; nothing (and no event)
/// for a role that names none.
pub(super) async fn attach(
    ctx: &RunCtx,
    role: &Role,
    tool_ctx: &mut ToolContext,
    id: &str,
    log: &mut ActionLog,
) -> Result<(), RunError> {
    if role.mcp.is_empty() {
        return Ok(());
    }
    let fail = |e: &dyn std::fmt::Display| {
        RunError::Config(format!("stage `{id}` (role `{}`): {e}", role.name))
    };
    tool_ctx.mcp_role = role.mcp.clone();
    let (session, replayed_from) = match &ctx.session.replay_file {
        Some(file) => (
            replayed(file, id).map_err(|e| fail(&e))?,
            Some(file.clone()),
        ),
        None => {
            let config = McpConfig::load(
                &ctx.common,
                ctx.base_commit.as_str(),
                Some(&ctx.bootstrap.workdir),
                crate::dirs::user_config_dir().as_deref(),
            )
            .map_err(|e| fail(&e))?;
            if let Some(ready) = &tool_ctx.ready {
                ready.clone().await;
            }
            let launch = Launch {
                lane: &tool_ctx.root,
                env: &tool_ctx.env,
                sandbox: tool_ctx.sandbox.as_deref(),
                pre_exec: tool_ctx.pre_exec.as_ref(),
            };
            let session = McpSession::start(&role.mcp, &config, launch)
                .await
                .map_err(|e| fail(&e))?;
            (session, None)
        }
    };
    let tools: Vec<serde_json::Value> = session
        .tools()
        .iter()
        .map(|t| {
            serde_json::json!({"name": t.name, "description": t.description, "parameters": t.parameters})
        })
        .collect();
    let missing = session.missing().to_vec();
    if !missing.is_empty() {
        crate::ui::status_line(&format!(
            "orch: warning: stage `{id}`: role `{}` names MCP server(s) {} that no .mcp.json, orch.toml [mcp.servers] or mcpServers: entry defines; their tools are not offered",
            role.name,
            missing.join(", ")
        ));
    }
    log.append(&ActionEvent::McpServers(event::McpServers {
        servers: session.server_names(),
        missing,
        tools,
        bytes: session.definitions_bytes(),
        replayed_from,
    }))?;
    tool_ctx.mcp = Some(Arc::new(session));
    Ok(())
}

/// The recorded MCP tools and results of stage `id` in the replay `file`.
fn replayed(file: &str, id: &str) -> Result<McpSession, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("failed to read {file}: {e}"))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("failed to read {file}: {e}"))?;
    let stage = &value["mcp"][id];
    let tools = stage["tools"].as_array().cloned().unwrap_or_default();
    let calls = stage["calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| RecordedCall {
            name: c["name"].as_str().unwrap_or_default().to_owned(),
            arguments: c["arguments"].clone(),
            content: c["content"].as_str().unwrap_or_default().to_owned(),
            is_error: c["is_error"].as_bool().unwrap_or(false),
        })
        .collect();
    Ok(McpSession::replayed(&tools, calls))
}
