//! Best of N at run time: the stage that selects one of its replicas
//! (`replicas:` in the pipeline, planned by `pipeline::replicas`).
//!
//! The replicas are ordinary stages (`code#1` … `code#N`) that ran side by
//! side from the same start commit; a replica of the `tests` strategies also
//! ran its checks on its result (`select.command`, else the stage's
//! `verify`), recorded as its [`StageRecord::check`]. The selecting stage
//! (`code`) then:
//!
//! 1. ranks the replicas: checks passed first, then fewest failing check
//!    commands, then the smallest diff, then the lowest cost (then the
//!    lowest number);
//! 2. `tests`: takes the first; `reviewer`: a reviewer agent sees every
//!    replica's diff (budgeted like any hand-off), summary and check result
//!    and answers with `finish`'s `choice`; `tests+reviewer`: the reviewer
//!    chooses among those that passed (one that passed is taken without it);
//! 3. commits the chosen replica's tree on `orch/<run>/code` (its parent
//!    is the replica's commit, so the history shows where it came from)
//!    with the trailers `Orch-Selected: k of N` and `Orch-Select-Strategy`,
//!    and logs a `selected` event.
//!
//! When none passed (or the reviewer chose nothing), the stage fails with
//! the best-ranked attempt committed, and says so. The replicas' branches
//! always stay.

use super::ctx::{RunCtx, StageOutcome};
use super::error::{RunError, blocking};
use super::escalate::StageTask;
use super::lanes::Lanes;
use crate::agent::prompt;
use crate::git::{self, CommitId};
use crate::pipeline::{Select, SelectStrategy, Stage};
use crate::role::Role;
use crate::runlog::{
    ActionEvent, ActionLog, Candidate, RunState, Selection, StageRecord, StageStatus, TokenCount,
    event,
};

/// The commit every replica of `stage` started from (the selection's own
/// start: its diff is the chosen replica's whole change).
pub(super) fn start_of(sel: &Select, state: &RunState) -> Option<CommitId> {
    sel.replicas
        .iter()
        .filter_map(|id| state.stage(id.as_str()))
        .find_map(|r| r.parent_commit.clone())
}

/// Whether the selection can run: every replica ended with a commit (a
/// failed replica still counts: its attempt is a candidate).
pub(super) fn replicas_done(sel: &Select, state: &RunState) -> bool {
    sel.replicas.iter().all(|id| {
        state.stage(id.as_str()).is_some_and(|r| {
            matches!(
                r.status,
                StageStatus::Succeeded | StageStatus::Failed | StageStatus::NoChange
            ) && r.commit.is_some()
        })
    })
}

/// The replicas as the selection sees them, in order.
async fn candidates(
    ctx: &RunCtx,
    sel: &Select,
    state: &RunState,
) -> Result<Vec<Candidate>, RunError> {
    let recs: Vec<StageRecord> = sel
        .replicas
        .iter()
        .filter_map(|id| state.stage(id.as_str()).cloned())
        .collect();
    let pairs: Vec<Option<(CommitId, CommitId)>> = recs
        .iter()
        .map(|r| r.parent_commit.clone().zip(r.commit.clone()))
        .collect();
    let c = ctx.common.clone();
    let lines: Vec<usize> = blocking(move || {
        let repo = git::Repo::at(c);
        pairs
            .into_iter()
            .map(|p| match p {
                Some((from, to)) => repo
                    .diff_stat(&from, &to)
                    .map(|s| s.insertions + s.deletions),
                None => Ok(0),
            })
            .collect()
    })
    .await?;
    Ok(recs
        .iter()
        .zip(lines)
        .enumerate()
        .map(|(i, (r, diff_lines))| Candidate {
            k: i as u32 + 1,
            stage: r.id.clone(),
            status: r.status.as_str().to_owned(),
            commit: r.commit.clone(),
            passed: r.check.as_ref().map(|c| c.passed()),
            failures: r.check.as_ref().map_or(0, |c| {
                c.runs.iter().filter(|x| !x.run.passed()).count() as u32
            }),
            diff_lines,
            tokens: r.tokens,
            cost_usd: r.budget.as_ref().and_then(|b| b.used.cost_usd),
        })
        .collect())
}

/// The candidates with a commit, best first: checks passed, the replica
/// succeeded, fewest failing checks, smallest diff, lowest cost, lowest k.
fn ranked(cands: &[Candidate]) -> Vec<&Candidate> {
    let mut out: Vec<&Candidate> = cands.iter().filter(|c| c.commit.is_some()).collect();
    out.sort_by(|a, b| {
        let key = |c: &Candidate| {
            (
                c.passed != Some(true),
                c.status != StageStatus::Succeeded.as_str(),
                c.failures,
                c.diff_lines,
            )
        };
        key(a)
            .cmp(&key(b))
            .then_with(|| {
                a.cost_usd
                    .unwrap_or(f64::INFINITY)
                    .total_cmp(&b.cost_usd.unwrap_or(f64::INFINITY))
            })
            .then(a.k.cmp(&b.k))
    });
    out
}

/// One line per candidate, for the reviewer's task, the log and the reason.
fn describe(c: &Candidate, state: &RunState) -> String {
    let checks = match (
        c.passed,
        state.stage(&c.stage).and_then(|r| r.check.as_ref()),
    ) {
        (Some(true), _) => "checks passed".to_owned(),
        (Some(false), Some(report)) => {
            let failing: Vec<String> = report
                .runs
                .iter()
                .filter(|r| !r.run.passed())
                .map(|r| r.run.status())
                .collect();
            format!("checks failed: {}", failing.join(", "))
        }
        _ => "no checks".to_owned(),
    };
    format!(
        "#{} (`{}`, {}): {checks}; {} diff lines; {} tokens",
        c.k,
        c.stage,
        c.status,
        c.diff_lines,
        c.tokens.total()
    )
}

/// The selecting stage's task, run by one agent.
pub(super) struct SelectTask<'a> {
    pub(super) ctx: &'a RunCtx,
    pub(super) stage: &'a Stage,
    pub(super) sel: &'a Select,
    pub(super) role: &'a Role,
    pub(super) lanes: &'a Lanes,
    pub(super) start: &'a CommitId,
    pub(super) progress: &'a crate::ui::ProgressHandle,
}

/// What was chosen, and how.
struct Choice {
    k: u32,
    reason: String,
    /// The chosen one passed its checks (`None`: no checks ran).
    passed: Option<bool>,
    /// Why the stage fails even so (the best attempt is committed).
    failure: Option<String>,
}

impl SelectTask<'_> {
    /// Chooses a replica (running the reviewer when the strategy asks),
    /// commits its tree on the stage's branch and reports the stage.
    pub(super) async fn run(
        &self,
        upstream: Vec<prompt::Upstream>,
        state: &RunState,
    ) -> Result<StageOutcome, RunError> {
        let (ctx, sel) = (self.ctx, self.sel);
        let started = std::time::Instant::now();
        let cands = candidates(ctx, sel, state).await?;
        let best = ranked(&cands);
        let n = sel.replicas.len() as u32;
        let strategy = sel.strategy;
        let Some(first) = best.first().copied() else {
            // Unreachable through the scheduler (it waits for every
            // replica's commit); said plainly if it ever happens.
            return Err(RunError::Refused(format!(
                "select for stage `{}`: no replica has a commit",
                self.stage.id
            )));
        };
        let passing: Vec<&Candidate> = best
            .iter()
            .copied()
            .filter(|c| c.passed == Some(true))
            .collect();
        let none_passed = || {
            format!(
                "none of the {n} replicas passed its checks ({}); the best attempt, #{} ({} failing check(s), {} diff lines), is committed",
                sel.commands.join("; "),
                first.k,
                first.failures,
                first.diff_lines
            )
        };
        let mut reviewed: Option<StageOutcome> = None;
        let choice = match strategy {
            SelectStrategy::Tests => tests_choice(first, &passing, none_passed),
            SelectStrategy::TestsReviewer if passing.len() < 2 => {
                tests_choice(first, &passing, none_passed)
            }
            SelectStrategy::Reviewer | SelectStrategy::TestsReviewer => {
                let pool: Vec<&Candidate> = if strategy == SelectStrategy::TestsReviewer {
                    passing.clone()
                } else {
                    best.clone()
                };
                let out = self.review(upstream, &pool, &cands, state).await?;
                let choice = match (out.failure.clone(), out.choice) {
                    (None, Some(k)) if pool.iter().any(|c| c.k == k) => Choice {
                        k,
                        reason: out.outcome.summary.clone(),
                        passed: cands[(k - 1) as usize].passed,
                        failure: None,
                    },
                    (None, Some(k)) => Choice {
                        k: pool[0].k,
                        reason: format!(
                            "the reviewer chose #{k}, which is not among the replicas that passed; the best-ranked one that passed is taken ({})",
                            out.outcome.summary
                        ),
                        passed: pool[0].passed,
                        failure: None,
                    },
                    (failure, _) => Choice {
                        k: pool[0].k,
                        reason: "the reviewer did not choose".to_owned(),
                        passed: pool[0].passed,
                        failure: Some(format!(
                            "the reviewer did not choose a replica ({}); the best-ranked attempt, #{}, is committed",
                            failure.unwrap_or_else(|| "no choice".to_owned()),
                            pool[0].k
                        )),
                    },
                };
                reviewed = Some(out.outcome);
                choice
            }
        };
        let mut out = self.settle(choice, reviewed, &cands, state).await?;
        // The selection's own time: the replicas' checks, the reviewer
        // (the replicas' time is their own stages').
        out.duration_ms = started.elapsed().as_millis() as u64;
        Ok(out)
    }

    /// Runs the reviewer that chooses among `pool`.
    async fn review(
        &self,
        upstream: Vec<prompt::Upstream>,
        pool: &[&Candidate],
        cands: &[Candidate],
        state: &RunState,
    ) -> Result<Reviewed, RunError> {
        let n = self.sel.replicas.len();
        let allowed: Vec<String> = pool.iter().map(|c| format!("#{}", c.k)).collect();
        let lines: Vec<String> = cands.iter().map(|c| describe(c, state)).collect();
        let mut stage = self.stage.clone();
        stage.task = format!(
            "{n} attempts (replicas `{}`) were made at the task below; their diffs, summaries and verify results follow as upstream stages. Choose the best one: the one that solves the task correctly and most simply. You may read files and run commands, but change nothing.\n\nThe attempts' checks:\n{}\n\nChoose among: {}. Call `finish` with `choice` (the attempt's number) and, as `summary`, the reason for your choice.\n\n# The task the attempts were given\n\n{}",
            self.sel
                .replicas
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>()
                .join("`, `"),
            lines
                .iter()
                .map(|l| format!("- {l}"))
                .collect::<Vec<_>>()
                .join("\n"),
            allowed.join(", "),
            self.stage.task
        );
        let task = StageTask {
            ctx: self.ctx,
            stage: &stage,
            role: self.role,
            lanes: self.lanes,
            start: self.start,
            progress: self.progress,
        };
        let outcome = task.run(upstream).await?;
        let choice = outcome.choice;
        Ok(Reviewed {
            failure: outcome.failure.clone(),
            choice,
            outcome,
        })
    }

    /// Commits the chosen tree, logs the choice and reports the stage.
    async fn settle(
        &self,
        choice: Choice,
        reviewed: Option<StageOutcome>,
        cands: &[Candidate],
        state: &RunState,
    ) -> Result<StageOutcome, RunError> {
        let (ctx, stage, sel) = (self.ctx, self.stage, self.sel);
        let id = stage.id.to_string();
        let n = sel.replicas.len() as u32;
        let chosen = &cands[(choice.k - 1) as usize];
        let winner = chosen.commit.clone().ok_or_else(|| {
            RunError::Refused(format!(
                "select for stage `{id}`: replica #{} has no commit",
                choice.k
            ))
        })?;
        let winner_rec = state.stage(&chosen.stage);
        let mut tokens = TokenCount::default();
        let mut cost = Some(0.0);
        for c in cands {
            tokens.add(c.tokens);
            cost = cost.zip(c.cost_usd).map(|(a, b)| a + b);
        }
        if let Some(r) = &reviewed {
            tokens.add(r.tokens);
            cost = cost.zip(r.budget.used.cost_usd).map(|(a, b)| a + b);
        }
        let summary = match &choice.failure {
            Some(f) => f.clone(),
            None => format!(
                "selected replica #{} of {n} ({}): {}",
                choice.k,
                sel.strategy.as_str(),
                choice.reason
            ),
        };
        let model = winner_rec
            .and_then(|r| r.model.clone())
            .unwrap_or_else(|| ctx.session.model.model_name());
        let message = format!(
            "orch({id}){}: replica #{} of {n} selected ({})\n\n{}\n\nOrch-Run: {}\nOrch-Stage: {id}\nOrch-Role: {}\nOrch-Model: {model}\nOrch-Selected: {} of {n}\nOrch-Select-Strategy: {}\n{}Orch-Tokens: {} (all replicas and the selection)\nOrch-Cost: {}\n",
            if choice.failure.is_some() {
                " [failed]"
            } else {
                ""
            },
            choice.k,
            sel.strategy.as_str(),
            crate::secrets::redact(&summary, &ctx.session.secrets),
            ctx.run_id,
            stage.role,
            choice.k,
            sel.strategy.as_str(),
            match choice.passed {
                Some(true) => "Orch-Verify: pass\n",
                Some(false) => "Orch-Verify: fail\n",
                None => "",
            },
            tokens.total(),
            cost.map_or("unknown".to_owned(), |usd| format!("${usd:.4}")),
        );
        let mut parents = vec![winner.clone()];
        // The reviewer's own (empty) commit stays in the history.
        if let Some(r) = &reviewed {
            parents.push(r.commit.clone());
        }
        let branch = format!("orch/{}/{id}", ctx.run_id);
        let (c, b, w, reviewer_ran) = (
            ctx.common.clone(),
            branch.clone(),
            winner.clone(),
            reviewed.is_some(),
        );
        let commit = blocking(move || {
            let repo = git::Repo::at(c);
            let commit = repo.commit_with_tree_of(&w, &parents, &message)?;
            // The reviewer's attempt already moved an earlier branch aside.
            if !reviewer_ran {
                super::stage::keep_old_branch(&repo, &b)?;
            }
            repo.set_branch(&b, &commit)?;
            Ok(commit)
        })
        .await?;
        super::flow::write_stage_patch(ctx, &id, self.start, &commit).await?;
        let candidates: Vec<String> = cands.iter().map(|c| describe(c, state)).collect();
        ActionLog::open(
            &ctx.run_dir.stage_dir(&id)?.join("actions.jsonl"),
            ctx.session.secrets.clone(),
        )?
        .with_events(self.progress.stage_events(&id))
        .append(&ActionEvent::Selected(event::Selected {
            strategy: sel.strategy.as_str().to_owned(),
            chosen: choice.k,
            of: n,
            passed: choice.passed,
            reason: choice.reason.clone(),
            candidates,
            commit: commit.to_string(),
        }))?;
        let selection = Selection {
            strategy: sel.strategy.as_str().to_owned(),
            chosen: choice.k,
            of: n,
            reason: choice.reason,
            passed: choice.passed,
            candidates: cands.to_vec(),
            tokens,
            cost_usd: cost,
        };
        let mut out = match reviewed {
            Some(r) => r,
            None => StageOutcome {
                budget: Default::default(),
                commit: commit.clone(),
                branch: branch.clone(),
                failure: None,
                model_failed: false,
                internal_failed: false,
                verdict: None,
                verdict_from_text: false,
                finish_from_text: false,
                approved_despite_failed_verify: false,
                no_change: false,
                verify: None,
                setup: None,
                baseline: None,
                summary: String::new(),
                turns: 0,
                tokens: TokenCount::default(),
                duration_ms: 0,
                digest: Vec::new(),
                model: model.clone(),
                model_source: format!("the model of replica #{}", choice.k),
                cause: None,
                earlier: Vec::new(),
                check: None,
                selection: None,
                choice: None,
            },
        };
        out.commit = commit;
        out.branch = branch;
        out.summary = summary;
        out.failure = choice.failure;
        out.selection = Some(Box::new(selection));
        // The chosen replica's verify result is the stage's.
        out.verify = winner_rec.and_then(|r| r.verify.clone());
        Ok(out)
    }
}

/// What the reviewer answered.
struct Reviewed {
    failure: Option<String>,
    choice: Option<u32>,
    outcome: StageOutcome,
}

/// The `tests` choice: the best-ranked replica, failing the stage when it
/// did not pass.
fn tests_choice(
    first: &Candidate,
    passing: &[&Candidate],
    none_passed: impl Fn() -> String,
) -> Choice {
    if passing.is_empty() {
        return Choice {
            k: first.k,
            reason: "none passed; the best attempt by fewest failing checks, then smallest diff, then lowest cost".to_owned(),
            passed: first.passed,
            failure: Some(none_passed()),
        };
    }
    let reason = if passing.len() == 1 {
        format!(
            "the only replica whose checks passed ({} diff lines)",
            first.diff_lines
        )
    } else {
        format!(
            "{} replicas passed; #{} has the fewest failing checks, then the smallest diff ({} lines), then the lowest cost",
            passing.len(),
            first.k,
            first.diff_lines
        )
    };
    Choice {
        k: first.k,
        reason,
        passed: Some(true),
        failure: None,
    }
}
