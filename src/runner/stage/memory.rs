//! Memory: the accepted lessons given to a stage, and the lessons distilled
//! from it when it ends.

use super::state::{Committed, StageRun};
use crate::agent::{AgentOutcome, prompt};
use crate::memory::hook::Injected;
use crate::runlog::ActionLog;
use crate::runlog::VerifyReport;
use crate::runner::ctx::RunCtx;
use crate::runner::error::RunError;
use crate::runner::lanes::Lane;

/// Accepted lessons relevant to this stage, as the user's notes in its task.
pub(super) async fn inject(
    ctx: &RunCtx,
    lane: &Lane,
    start: &crate::git::CommitId,
    task: &str,
    upstream: &[prompt::Upstream],
    log: &mut ActionLog,
) -> Result<Injected, RunError> {
    Ok(crate::memory::hook::inject(
        ctx.session.memory,
        &ctx.common,
        &lane.path,
        start,
        task.to_owned(),
        upstream
            .iter()
            .flat_map(|u| crate::memory::hook::diffstat_paths(&u.diffstat))
            .collect(),
        &ctx.session.secrets,
        log,
    )
    .await?)
}

impl StageRun<'_> {
    /// Before `stage_end`, so the stage's log ends with its end. The
    /// distiller's tokens count against the run's budget.
    pub(super) async fn distill(
        &mut self,
        outcome: &AgentOutcome,
        verify: Option<&VerifyReport>,
        c: &Committed,
    ) -> Result<(), RunError> {
        let (ctx, stage) = (self.ctx, self.stage);
        let distill_tokens = crate::memory::hook::after_stage(
            crate::memory::hook::StageEnd {
                mode: ctx.session.memory,
                common: ctx.common.clone(),
                used: &self.memory.ids,
                evidence: crate::memory::Evidence {
                    run: ctx.run_id.to_string(),
                    stage: self.id.clone(),
                    commit: c.commit.to_string(),
                    event: String::new(),
                },
                task: &self.task,
                transcript: &outcome.transcript,
                verify,
                failed: c.failure.is_some(),
                retried_after_failure: c.retried_after_failure,
                // A later review round runs only after one requested changes.
                approved_after_changes: stage.id != stage.base_id
                    && self.cfg.require_verdict
                    && outcome.verdict == Some(crate::ids::Verdict::Approve),
                secrets: &ctx.session.secrets,
            },
            ctx.session.model.as_ref(),
            &mut self.log,
        )
        .await?;
        ctx.ledger
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .charge_tokens(distill_tokens);
        Ok(())
    }
}
