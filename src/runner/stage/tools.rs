//! The stage's tools: its bash policy, its sandbox and the run's marker in
//! every tool process's environment.

use crate::budget::StageBudget;
use crate::llm::ChatModel;
use crate::policy::BashPolicy;
use crate::role::Role;
use crate::runlog::{ActionEvent, ActionLog, event};
use crate::runner::ctx::RunCtx;
use crate::runner::error::RunError;
use crate::runner::lanes::Lane;
use crate::tools::ToolContext;
use std::sync::Arc;

/// The tool context of stage `id` in `lane`: the role's tools under its bash
/// policy, in its sandbox (logged as a `sandbox` event), gated on the lane's
/// readiness.
pub(super) fn tool_context(
    ctx: &RunCtx,
    role: &Role,
    lane: &Lane,
    id: &str,
    log: &mut ActionLog,
) -> Result<ToolContext, RunError> {
    let policy = BashPolicy {
        allow: role.bash.allow.clone(),
        ask: role.bash.ask.clone(),
        deny: role.bash.deny.clone(),
        allowlist: ctx.allowlist.clone(),
        assume_yes: ctx.session.assume_yes,
        interactive: ctx.session.interactive,
    };
    let mut tool_ctx =
        ToolContext::new(&lane.path, &role.tools, role.read_only, policy).map_err(|source| {
            RunError::Tools {
                stage: id.to_owned(),
                path: lane.path.clone(),
                source,
            }
        })?;
    // Every tool process (and subagent) of the run carries its id, so a
    // later `resume` can find what a SIGKILLed orch left running.
    tool_ctx
        .env
        .push((crate::exec::RUN_MARKER.to_owned(), ctx.run_id.to_string()));
    let sandbox = crate::sandbox::ToolSandbox::for_role(&ctx.common, role).map_err(|source| {
        RunError::Tools {
            stage: id.to_owned(),
            path: lane.path.clone(),
            source,
        }
    })?;
    log.append(&ActionEvent::Sandbox(event::Sandbox {
        profile: sandbox.choice().label(),
        kernel: crate::sandbox::availability().describe(),
    }))?;
    tool_ctx.sandbox = Some(Arc::new(sandbox));
    tool_ctx.ready = Some(lane.watch.barrier());
    // Asks and guidance through the run's control channel (`orch answer`,
    // `orch guide`, `orch ui`).
    tool_ctx.control = Some(Arc::new(crate::tools::ControlChannel::new(
        ctx.run_dir.root.clone(),
        id,
        ctx.session.ask_via,
        ctx.session.ask_timeout,
    )));
    Ok(tool_ctx)
}

/// The stage's subagent spawner: its children share the stage's budget,
/// sandbox and model.
pub(super) fn spawner(
    ctx: &RunCtx,
    tool_ctx: &ToolContext,
    id: &str,
    model: &Arc<dyn ChatModel>,
    budget: StageBudget,
) -> Option<Arc<dyn crate::tools::Spawner>> {
    crate::subagent::SpawnContext::for_stage(
        &ctx.common,
        &tool_ctx.root,
        &ctx.run_dir.root,
        id,
        model.as_ref(),
        ctx.session.assume_yes,
        budget,
        ctx.session.limits.compaction,
    )
    .map(|s| s.with_sandbox(tool_ctx.sandbox.clone()))
    .map(|s| Arc::new(s) as Arc<dyn crate::tools::Spawner>)
}
