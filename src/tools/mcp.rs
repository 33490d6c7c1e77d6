//! `mcp__<server>__<tool>`: a call to a tool of one of the stage's MCP
//! servers, through the role's MCP rules, capped like `bash` output, with
//! what it did in [`ToolOutcome::mcp`] for the `mcp_call` event.

use std::time::Instant;

use super::context::ToolContext;
use super::outcome::{SUMMARY_CHARS, ToolOutcome};
use crate::mcp::{McpCallInfo, McpDecision};
use crate::text::one_line;

/// The tool definitions of the session's MCP tools.
pub(super) fn definitions(ctx: &ToolContext) -> Vec<crate::llm::ToolDef> {
    ctx.mcp
        .as_ref()
        .map(|s| s.definitions())
        .unwrap_or_default()
}

/// Whether `name` is an MCP tool offered in `ctx`.
pub(super) fn offers(ctx: &ToolContext, name: &str) -> bool {
    ctx.mcp.as_ref().is_some_and(|s| s.tool(name).is_some())
}

/// Runs the call `name(arguments)`; every failure is a tool error.
pub(super) async fn run(ctx: &ToolContext, name: &str, arguments: &str) -> ToolOutcome {
    let Some(session) = ctx.mcp.as_ref() else {
        return ToolOutcome::error(name, "no MCP server in this stage");
    };
    let Some(tool) = session.tool(name) else {
        return ToolOutcome::error(name, "not an offered MCP tool");
    };
    let policy = match ctx.mcp_role.decide(name) {
        McpDecision::Allow(label) => Ok(label),
        McpDecision::Ask(why) => super::approval::ask(ctx, name, arguments, &why).await,
        McpDecision::Deny(why) => Err(why),
    };
    let policy = match policy {
        Ok(p) => p,
        Err(reason) => {
            let mut out =
                ToolOutcome::error(name, &format!("not called: denied by policy: {reason}"));
            out.policy = Some(format!("deny: {reason}"));
            return out;
        }
    };
    let args = if arguments.trim().is_empty() {
        serde_json::Map::new()
    } else {
        match serde_json::from_str::<serde_json::Value>(arguments) {
            Ok(serde_json::Value::Object(map)) => map,
            Ok(_) => return ToolOutcome::error(name, "arguments must be a JSON object"),
            Err(e) => {
                return ToolOutcome::error(name, &format!("arguments are not valid JSON: {e}"));
            }
        }
    };
    let start = Instant::now();
    let result = session.call(tool, args).await;
    let duration_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    let (text, is_error) = match result {
        Ok(r) => r,
        Err(why) => (why, true),
    };
    let bytes = text.len();
    let body = crate::text::head_tail_lines(&text, ctx.limits.max_output_bytes);
    let mut out = if is_error {
        ToolOutcome::error(name, &body)
    } else {
        ToolOutcome::ok(
            body,
            format!("{name} → {bytes} B ({:.1}s)", duration_ms as f64 / 1000.0),
        )
    };
    if is_error {
        out.summary = one_line(&format!("{name} → error: {text}"), SUMMARY_CHARS);
    }
    out.policy = Some(policy);
    out.mcp = Some(McpCallInfo {
        server: tool.server.clone(),
        tool: tool.tool.clone(),
        duration_ms,
        bytes,
        is_error,
    });
    out
}
