//! `load_skill`: a skill's instructions (its `SKILL.md` body and the list
//! of its files), or one of its files; offered only to a stage that has
//! skills ([`crate::skills`]). Read-only: it reads git objects or the
//! user's skill folder, never the lane.

use super::args::Args;
use super::context::ToolContext;
use super::outcome::{ToolError, ToolOutcome, join_failure};
use crate::llm::ToolDef;
use serde_json::json;

/// The tool's name.
pub(crate) const NAME: &str = "load_skill";

/// True when `ctx` offers `load_skill` (its stage has a skill).
pub(crate) fn offered(ctx: &ToolContext) -> bool {
    ctx.skills.as_ref().is_some_and(|s| !s.is_empty())
}

/// The schema offered to the model.
pub(crate) fn definition() -> ToolDef {
    ToolDef {
        name: NAME,
        description: "Load a skill's instructions by name; with `file`, one of its files.",
        parameters: super::schema::schema(
            json!({"name": {"type": "string"}, "file": {"type": "string", "description": "a file the skill lists"}}),
            &["name"],
        ),
    }
}

/// Bytes of [`definition`] in a request's `tools` array.
pub(crate) fn definition_bytes() -> usize {
    serde_json::to_string(&definition()).map_or(0, |j| j.len())
}

pub(crate) async fn run(ctx: &ToolContext, args: &Args) -> Result<ToolOutcome, ToolError> {
    let Some(skills) = ctx.skills.clone() else {
        return Err("this stage has no skills".to_owned().into());
    };
    let name = args.string("name", "a skill's name from the system prompt")?;
    let file = args.opt_string("file", "a file the skill lists")?;
    let loaded = tokio::task::spawn_blocking(move || skills.load(name.trim(), file.as_deref()))
        .await
        .map_err(|e| ToolError::Fatal(join_failure(&e)))?;
    let (content, record) = loaded?;
    let mut out = ToolOutcome::ok(
        content,
        format!("load_skill {} ({})", record.name, record.path),
    );
    out.skill = Some(record);
    Ok(out)
}
