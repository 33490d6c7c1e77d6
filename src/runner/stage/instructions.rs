//! The repository's instruction files (`AGENTS.md` and the like) for a
//! stage's system prompt.

use crate::agent;
use crate::pipeline::Stage;
use crate::runlog::{ActionEvent, ActionLog, event};
use crate::runner::ctx::RunCtx;
use crate::runner::error::{RunError, blocking};

/// The repository's instruction files for this stage, read from the run's
/// base commit, logged as a `project_instructions` event (path and blob id
/// of each file); the prompt section, empty when off or none was found.
pub(super) async fn project_instructions(
    ctx: &RunCtx,
    stage: &Stage,
    log: &mut ActionLog,
) -> Result<String, RunError> {
    if !ctx.plan.pipeline.project_instructions {
        log.append(&ActionEvent::ProjectInstructions(
            event::ProjectInstructions::default(),
        ))?;
        return Ok(String::new());
    }
    let (common, base) = (ctx.common.clone(), ctx.base_commit.clone());
    let hints = [stage.task.clone(), ctx.issue.clone()];
    let found = blocking(move || {
        let hints: Vec<&str> = hints.iter().map(String::as_str).collect();
        agent::instructions::load(&common, &base, &hints)
    })
    .await?;
    log.append(&ActionEvent::ProjectInstructions(
        event::ProjectInstructions {
            enabled: true,
            commit: Some(ctx.base_commit.to_string()),
            files: found.files,
            cut: Some(found.cut),
            limit_bytes: Some(agent::instructions::INSTRUCTIONS_BUDGET),
        },
    ))?;
    Ok(found.text)
}
