//! The stage commit: its message, the commit on the stage's branch (an
//! earlier attempt's branch kept as `<branch>.vN`) and its patch.

use super::settle::Settled;
use super::state::{Committed, MAX_SUMMARY_BYTES, StageRun};
use crate::agent::{AgentEnd, AgentOutcome};
use crate::git::{self, GitError};
use crate::runlog::VerifyReport;
use crate::runner::error::{RunError, blocking};
use crate::runner::pr;

impl StageRun<'_> {
    /// Commits the settled tree on the stage's branch and writes its patch;
    /// the stage failed when its agent did or a secret was refused.
    pub(super) async fn commit(
        &mut self,
        outcome: &AgentOutcome,
        verify: Option<&VerifyReport>,
        settled: Settled,
    ) -> Result<Committed, RunError> {
        let (ctx, lane, start, id) = (self.ctx, self.lane, self.start, self.id.clone());
        let Settled {
            tree,
            leaked,
            from_watch,
        } = settled;
        // A stage not `required` whose agent produced no result ends
        // `no_change`; orch's own, the provider's and a refused secret still fail.
        let no_change = !self.stage.required
            && leaked.is_none()
            && matches!(
                outcome.end,
                AgentEnd::NoResult(_)
                    | AgentEnd::TurnLimit
                    | AgentEnd::Stuck(_)
                    | AgentEnd::VerifyFailed(_)
            );
        let failure = match (outcome.end.failure_reason(self.cfg.max_turns), leaked) {
            (Some(f), Some(l)) => Some(format!("{f}; {l}")),
            (f, l) => f.or(l),
        }
        .map(|f| self.redact(&crate::text::model_text(&f, MAX_SUMMARY_BYTES)));
        let duration_ms = self.started.elapsed().as_millis() as u64;
        let message = pr::commit_message(&pr::CommitInfo {
            run_id: ctx.run_id.as_str(),
            stage: &id,
            role: &self.role.name,
            model: &self.model.model_name(),
            summary: failure.as_deref().unwrap_or(&outcome.summary),
            verdict: outcome.verdict,
            turns: outcome.turns,
            tokens: outcome.tokens,
            cost_usd: outcome.budget.used.cost_usd,
            duration_ms,
            failed: failure.is_some(),
            no_change,
            finish_from_text: outcome.finish_from_text,
            verify: verify.map(|v| v.passed),
            memory: &self.memory.ids,
            escalated_from: self.escalated_from.as_deref(),
        });
        let (wt, parent, watch) = (lane.path.clone(), start.to_owned(), lane.watch.get().await);
        let branch = format!("orch/{}/{id}", ctx.run_id);
        let (c, b) = (ctx.common.clone(), branch.clone());
        // One blocking task, one repository handle: the commit, the earlier
        // attempt's tip (read before it is moved aside), the branch.
        let (commit, retried_after_failure) = blocking(move || {
            let repo = git::Repo::at(c);
            let commit = repo.commit_tree(&wt, &message, &parent, &tree)?;
            // The record restarts from the commit (the next stage in this lane
            // starts there); one that cannot is replaced when the lane is next
            // acquired.
            if let Some(w) = watch {
                w.restart(&commit);
            }
            let retried = crate::memory::hook::prior_attempt_failed(&repo, &b);
            keep_old_branch(&repo, &b)?;
            repo.set_branch(&b, &commit)?;
            Ok((commit, retried))
        })
        .await?;
        let stat = crate::runner::flow::write_stage_patch(ctx, &id, start, &commit).await?;
        Ok(Committed {
            failure,
            no_change,
            duration_ms,
            commit,
            branch,
            retried_after_failure,
            stat,
            from_watch,
        })
    }
}

/// Before a stage runs again (retry, rollback), its old branch is moved to
/// the first free `<branch>.vN`, so every attempt stays reviewable.
pub(in crate::runner) fn keep_old_branch(repo: &git::Repo, branch: &str) -> Result<(), GitError> {
    if repo.branch_sha(branch)?.is_none() {
        return Ok(());
    }
    let mut n = 1;
    while repo.branch_sha(&format!("{branch}.v{n}"))?.is_some() {
        n += 1;
    }
    repo.rename_branch(branch, &format!("{branch}.v{n}"))
}
