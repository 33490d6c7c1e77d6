//! The tools' JSON schemas as offered to the model: lean descriptions, in
//! [`ALL_TOOLS`] order, `spawn_agent` only where a [`Spawner`] can spawn.
//!
//! [`Spawner`]: super::Spawner

use serde_json::{Value, json};

use super::context::ToolContext;
use super::outcome::ALL_TOOLS;
use crate::llm::ToolDef;

/// The tools offered to the model in `ctx`: [`definitions`] plus
/// `spawn_agent` when the role allows it and `ctx` can spawn (a spawn context
/// below the depth limit).
pub fn offered(ctx: &ToolContext) -> Vec<ToolDef> {
    let can_spawn = ctx.spawn.as_ref().is_some_and(|s| s.can_spawn());
    let mut defs = schemas(&ctx.allowed, can_spawn);
    if let Some(n) = ctx.choices {
        with_choice(&mut defs, n);
    }
    // Offered only to a stage with skills, so a stage without any sends
    // the same bytes as before skills existed.
    if super::load_skill::offered(ctx) {
        defs.push(super::load_skill::definition());
    }
    // MCP tools after orch's own, before nothing: `finish` stays last
    // among orch's and the MCP tools follow in server order.
    defs.extend(super::mcp::definitions(ctx));
    defs
}

/// `finish` of a best-of-N reviewer: `choice` (the replica it picks, 1 to
/// `n`) is required beside the summary, which gives the reason.
fn with_choice(defs: &mut [ToolDef], n: u32) {
    let Some(fin) = defs.iter_mut().find(|d| d.name == "finish") else {
        return;
    };
    fin.description = "End the stage: choose one attempt (choice) and say why (summary).";
    fin.parameters = schema(
        json!({
            "summary": {"type": "string"},
            "choice": {"type": "integer", "minimum": 1, "maximum": n},
        }),
        &["summary", "choice"],
    );
}

/// Names of the tools offered in `ctx` (for the system prompt).
pub fn offered_names(ctx: &ToolContext) -> Vec<String> {
    offered(ctx).iter().map(|d| d.name.to_owned()).collect()
}

/// JSON schemas of the allowed tools, in [`ALL_TOOLS`] order, without
/// `spawn_agent` (which needs a [`ToolContext`]; see [`offered`]).
pub fn definitions(allowed: &[String]) -> Vec<ToolDef> {
    schemas(allowed, false)
}

/// The schemas of the `allowed` tools in [`ALL_TOOLS`] order; `spawn_agent`
/// only when `can_spawn`.
fn schemas(allowed: &[String], can_spawn: bool) -> Vec<ToolDef> {
    ALL_TOOLS
        .iter()
        .filter(|t| allowed.iter().any(|a| a == *t))
        .filter_map(|t| match *t {
            "spawn_agent" => can_spawn.then(spawn_agent_definition),
            other => definition(other),
        })
        .collect()
}

/// An object schema; `required` is left out when empty (it is optional in
/// JSON Schema, and every byte is sent on every request).
pub(super) fn schema(props: Value, required: &[&str]) -> Value {
    if required.is_empty() {
        return json!({"type": "object", "properties": props});
    }
    json!({"type": "object", "properties": props, "required": required})
}

/// The schema of `spawn_agent` offered to the model.
fn spawn_agent_definition() -> ToolDef {
    ToolDef {
        name: "spawn_agent",
        description: "Run a subagent (fresh history) on a subtask; returns its report.",
        parameters: schema(
            json!({"role": {"type": "string", "description": "e.g. explore (read-only)"}, "task": {"type": "string"}}),
            &["role", "task"],
        ),
    }
}

fn definition(name: &str) -> Option<ToolDef> {
    let s = |d: &str| json!({"type": "string", "description": d});
    let plain = json!({"type": "string"});
    let int = |d: &str| json!({"type": "integer", "description": d});
    let def = |name, description, parameters| ToolDef {
        name,
        description,
        parameters,
    };
    Some(match name {
        "bash" => def(
            "bash",
            "Run bash in the worktree root; no stdin, output capped.",
            schema(
                json!({"command": plain, "timeout_secs": int("default 120, max 600")}),
                &["command"],
            ),
        ),
        "read_file" => def(
            "read_file",
            "Read a text file, lines numbered.",
            schema(
                json!({"path": plain, "offset": int("1-based first line"), "limit": int("max lines")}),
                &["path"],
            ),
        ),
        "write_file" => def(
            "write_file",
            "Create or overwrite a file and its dirs; returns a diff.",
            schema(
                json!({"path": plain, "content": plain}),
                &["path", "content"],
            ),
        ),
        "edit_file" => def(
            "edit_file",
            "Replace old_string (exactly once unless replace_all); returns a diff.",
            schema(
                json!({"path": plain, "old_string": plain, "new_string": plain, "replace_all": {"type": "boolean"}}),
                &["path", "old_string", "new_string"],
            ),
        ),
        "list_files" => def(
            "list_files",
            "List files that are not gitignored.",
            schema(
                json!({"path": s("dir, default root"), "pattern": s("gitignore glob")}),
                &[],
            ),
        ),
        "grep" => def(
            "grep",
            "Regex search; prints path:line:text.",
            schema(
                json!({"pattern": plain, "path": plain, "glob": plain}),
                &["pattern"],
            ),
        ),
        "finish" => def(
            "finish",
            "End the stage.",
            schema(
                json!({"summary": plain, "verdict": {"type": "string", "enum": ["approve", "request_changes"]}}),
                &["summary"],
            ),
        ),
        _ => return None,
    })
}
