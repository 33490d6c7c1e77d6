//! The files a stage's task names, for its first message
//! (`agent::context_files`), logged as a `context_files` event.

use crate::agent::context_files;
use crate::pipeline::Stage;
use crate::role::Role;
use crate::runlog::{ActionEvent, ActionLog, event};
use crate::runner::ctx::RunCtx;
use crate::runner::error::RunError;
use crate::tools::ToolContext;

/// The section of named files for the stage's first message (empty when
/// the stage or its role says `context_files: off`, or none is named),
/// read from the lane after its bootstrap; what was shown, cut or left out
/// is logged; with the paths shown whole (not cut).
pub(super) async fn named_files(
    ctx: &RunCtx,
    stage: &Stage,
    role: &Role,
    tools: &ToolContext,
    log: &mut ActionLog,
) -> Result<(String, Vec<String>), RunError> {
    if !(stage.context_files && role.context_files) {
        log.append(&ActionEvent::ContextFiles(event::ContextFiles::default()))?;
        return Ok((String::new(), Vec::new()));
    }
    let root = tools.root.clone();
    // What the sandbox keeps unreadable stays out too (a lane path can be
    // one only through `sandbox.deny_read`).
    let deny = tools
        .sandbox
        .as_ref()
        .and_then(|s| s.policy(&root).ok())
        .map(|p| p.secret_paths)
        .unwrap_or_default();
    let texts = [stage.task.clone(), ctx.issue.clone()];
    let found = tokio::task::spawn_blocking(move || {
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        context_files::collect(&root, &texts, &deny)
    })
    .await
    .map_err(|e| RunError::Join(e.to_string()))?;
    log.append(&ActionEvent::ContextFiles(event::ContextFiles {
        enabled: true,
        files: found
            .shown
            .iter()
            .map(|s| event::ContextFile {
                path: s.path.clone(),
                bytes: s.bytes,
                included: s.included,
                truncated: s.truncated,
            })
            .collect(),
        skipped: found
            .skipped
            .iter()
            .map(|(path, reason)| event::ContextSkip {
                path: path.clone(),
                reason: reason.clone(),
            })
            .collect(),
        bytes: Some(found.text.len()),
    }))?;
    let whole = found
        .shown
        .iter()
        .filter(|s| !s.truncated)
        .map(|s| s.path.clone())
        .collect();
    Ok((found.text, whole))
}
