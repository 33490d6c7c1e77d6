//! Escalation (`escalate_to:` on a stage or its role): a stage whose first
//! attempt fails in a way a stronger model may not — stuck (repeat
//! detection), no result after the nudge, a verify gate that never passed,
//! the turn limit, or the stage's own token/time/cost budget — runs once
//! more with the named profile, from its start commit, as attempt 2.
//!
//! Not escalated: a model or transport failure (the server is down or
//! refuses: a stronger model would hide it, and the run reports it as exit
//! 3), a lane setup that failed, a fault of orch's own, a refused secret,
//! and a run budget (`--max-*`) that ran out (nothing is left to spend).
//!
//! Invariants:
//! - Attempt 2 starts in a lane readied at the stage's start commit, as
//!   every stage does ([`Lanes::acquire`]): only orch's own lane is reset;
//!   attempt 1's commit stays on `orch/<run>/<stage>.vN`.
//! - Attempt 2 gets a fresh stage budget; the run's budget, already charged
//!   with attempt 1, bounds both.
//! - The action log holds both attempts and an `escalated` event between
//!   them; a run killed during attempt 2 resumes as attempt 2 (the log's
//!   last `escalated` has no `stage_end` after it); a stage whose attempts
//!   all ended (a rollback re-runs it) starts again from attempt 1.

use super::ctx::{RunCtx, StageOutcome};
use super::error::RunError;
use super::lanes::Lanes;
use super::models::Escalation;
use super::stage::run_stage;
use crate::agent::{AgentEnd, prompt};
use crate::budget::BudgetReport;
use crate::git::CommitId;
use crate::pipeline::Stage;
use crate::role::Role;
use crate::runlog::event::Logged;
use crate::runlog::{ActionEvent, ActionLog, Attempt, event};
use std::path::Path;

/// The attempt that runs with the escalation profile, and why.
pub(super) struct Escalated<'a> {
    /// The profile it asks.
    pub(super) to: &'a Escalation,
    /// The model of the attempt that failed.
    pub(super) from_model: String,
    /// Why that attempt failed.
    pub(super) reason: String,
}

/// The `cause` of an `escalated` event when an attempt that ended with
/// `end` (and `budget`) is escalated; `None` when it is not (see above).
pub(super) fn cause(end: &AgentEnd, budget: &BudgetReport) -> Option<&'static str> {
    match end {
        AgentEnd::Stuck(_) => Some("stuck"),
        AgentEnd::NoResult(_) => Some("no_result"),
        AgentEnd::VerifyFailed(_) => Some("verify_failed"),
        AgentEnd::TurnLimit => Some("turn_limit"),
        // Only the stage's own limit: the run's remainder is not renewed.
        AgentEnd::Budget(_) => budget
            .exceeded
            .as_ref()
            .filter(|d| !budget.from_run.contains(d))
            .map(|_| "budget"),
        AgentEnd::Finished
        | AgentEnd::Answered
        | AgentEnd::SetupFailed(_)
        | AgentEnd::ModelError(_)
        | AgentEnd::ToolFault(_) => None,
    }
}

/// A stage to run, attempt by attempt: everything but the hand-off and
/// the escalation is the same for each attempt.
pub(super) struct StageTask<'a> {
    pub(super) ctx: &'a RunCtx,
    pub(super) stage: &'a Stage,
    pub(super) role: &'a Role,
    pub(super) lanes: &'a Lanes,
    pub(super) start: &'a CommitId,
    pub(super) progress: &'a crate::ui::ProgressHandle,
}

impl StageTask<'_> {
    /// Runs the stage: its first attempt, and when that fails escalably
    /// and the stage has a profile to escalate to, its second attempt with
    /// that profile; a stage killed during its second attempt resumes there.
    pub(super) async fn run(
        &self,
        upstream: Vec<prompt::Upstream>,
    ) -> Result<StageOutcome, RunError> {
        let (ctx, stage) = (self.ctx, self.stage);
        let id = stage.id.as_str();
        let Some(to) = ctx.session.escalations.get(stage.base_id.as_str()) else {
            return self.attempt(upstream, None).await;
        };
        let log_path = ctx.run_dir.stage_dir(id)?.join("actions.jsonl");
        let (from_model, reason, earlier) = match pending_escalation(&log_path) {
            Some(e) => (e.from_model, e.reason, Vec::new()),
            None => {
                let first = self.attempt(upstream.clone(), None).await?;
                let (Some(cause), Some(reason)) = (first.cause, first.failure.clone()) else {
                    return Ok(first);
                };
                let escalated = event::Escalated {
                    attempt: 1,
                    from_model: first.model.clone(),
                    from_source: first.model_source.clone(),
                    to_profile: to.profile.clone(),
                    to_model: to.model.model_name(),
                    cause: cause.to_owned(),
                    reason: reason.clone(),
                    restart_from: self.start.to_string(),
                };
                ActionLog::open(&log_path, ctx.session.secrets.clone())?
                    .with_events(self.progress.stage_events(id))
                    .append(&ActionEvent::Escalated(escalated))?;
                crate::ui::status_line(&format!(
                    "orch: stage `{id}`: attempt 1 with {} failed ({cause}); retrying once from its start commit with profile `{}` ({})",
                    first.model,
                    to.profile,
                    to.model.model_name()
                ));
                let record = Attempt {
                    status: "failed".into(),
                    turns: first.turns,
                    tokens: first.tokens,
                    cost_usd: first.budget.used.cost_usd,
                    model: Some(first.model.clone()),
                    reason: Some(reason.clone()),
                    escalated_to: Some(to.profile.clone()),
                };
                (first.model, reason, vec![record])
            }
        };
        let esc = Escalated {
            to,
            from_model,
            reason,
        };
        let mut second = self.attempt(upstream, Some(&esc)).await?;
        second.earlier = earlier;
        Ok(second)
    }

    /// One attempt in a lane readied at the start commit, given back
    /// afterwards.
    async fn attempt(
        &self,
        upstream: Vec<prompt::Upstream>,
        escalated: Option<&Escalated<'_>>,
    ) -> Result<StageOutcome, RunError> {
        let (lanes, start) = (self.lanes, self.start);
        let mut lane = lanes.acquire(start).await?;
        let r = run_stage(
            self.ctx,
            self.stage,
            self.role,
            &lane,
            start,
            upstream,
            self.progress,
            escalated,
        )
        .await;
        // The stage committed its whole tree: the lane is clean there.
        lane.clean_at = r.as_ref().ok().map(|o| o.commit.clone());
        lanes.release(lane);
        r
    }
}

/// The `escalated` event of an attempt 2 that never ended (its run was
/// killed): the last `escalated` in the log with no `stage_end` after it.
fn pending_escalation(log: &Path) -> Option<event::Escalated> {
    let text = std::fs::read_to_string(log).ok()?;
    let mut pending = None;
    for line in crate::runlog::event::parse_log(&text) {
        match line.event {
            Logged::Known(ActionEvent::Escalated(e)) => pending = Some(e),
            Logged::Known(ActionEvent::StageEnd(_)) => pending = None,
            _ => {}
        }
    }
    pending
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(exceeded: &str, from_run: &[&str]) -> BudgetReport {
        BudgetReport {
            exceeded: Some(exceeded.to_owned()),
            from_run: from_run.iter().map(|s| (*s).to_owned()).collect(),
            ..BudgetReport::default()
        }
    }

    #[test]
    fn capability_failures_escalate_and_the_rest_do_not() {
        let none = BudgetReport::default();
        assert_eq!(cause(&AgentEnd::Stuck("x".into()), &none), Some("stuck"));
        assert_eq!(
            cause(&AgentEnd::NoResult("x".into()), &none),
            Some("no_result")
        );
        assert_eq!(
            cause(&AgentEnd::VerifyFailed("x".into()), &none),
            Some("verify_failed")
        );
        assert_eq!(cause(&AgentEnd::TurnLimit, &none), Some("turn_limit"));
        assert_eq!(cause(&AgentEnd::Finished, &none), None);
        assert_eq!(cause(&AgentEnd::SetupFailed("x".into()), &none), None);
        // The stage's own budget: a fresh one may do; the run's remainder
        // is not renewed.
        let own = budget("tokens", &[]);
        assert_eq!(cause(&AgentEnd::Budget("x".into()), &own), Some("budget"));
        let run = budget("cost", &["cost"]);
        assert_eq!(cause(&AgentEnd::Budget("x".into()), &run), None);
    }
}
