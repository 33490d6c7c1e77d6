//! Resuming a run where it stopped, and rolling one back to a stage.

use super::bootstrap::load_bootstrap;
use super::ctx::RunCtx;
use super::error::{RunError, blocking};
use super::flow;
use super::flow::descendants;
use super::lanes;
use super::lanes::Lanes;
use super::schedule::drive;
use super::session::{Plan, RunSummary, Session, lane_pool_bound, now};
use crate::git;
use crate::ids::RunId;
use crate::policy::BashPolicy;
use crate::runlog::{RecordError, RunDir, RunState, RunStatus, StageStatus, TokenCount};
use crate::ui::Ui;
use std::path::Path;
use std::sync::Arc;

/// What `resume` may do with failed stages.
#[derive(Debug, Clone)]
pub(crate) struct ResumeOptions {
    /// Re-run failed stages too (otherwise a run with failed stages is refused).
    pub retry_failed: bool,
    /// Run exactly this stage and nothing else (`orch stage`); the other
    /// stages' records are kept as they are and the run is not finished.
    pub only: Option<String>,
}

/// Loads a run's state and plan.
pub(crate) fn load_run(
    common: &Path,
    run_id: &RunId,
) -> Result<(RunDir, RunState, Plan), RunError> {
    let run_dir = RunDir::open(common, run_id.as_str())?;
    let state = run_dir.read_state()?;
    let plan_path = run_dir.root.join("plan.json");
    let plan: Plan = std::fs::read_to_string(&plan_path)
        .map_err(|source| RecordError::Io {
            path: plan_path.clone(),
            source,
        })
        .and_then(|t| {
            serde_json::from_str(&t).map_err(|e| RecordError::Corrupt {
                path: plan_path.clone(),
                reason: e.to_string(),
            })
        })?;
    Ok((run_dir, state, plan))
}

/// Resumes a run after an interruption, a kill, a failure (`retry_failed`)
/// or a rollback: finished stages are kept; every other stage runs again from
/// its start commit, in DAG order.
pub(crate) async fn resume_run(
    repo: &Path,
    run_id: &RunId,
    session: Session,
    opts: ResumeOptions,
    ui: &Ui,
) -> Result<RunSummary, RunError> {
    let id = run_id;
    let run_id = id.as_str();
    let repo_path = repo.to_path_buf();
    let info = blocking(move || git::open_repo(&repo_path)).await?;
    let common = info.common_dir.clone();
    let lock = crate::runlog::lock_run(&RunDir::open(&common, run_id)?.root, run_id)?;
    let (run_dir, mut state, plan) = load_run(&common, id)?;
    let boot = load_bootstrap(&info.workdir, &plan.pipeline).await?;
    // A replica is one attempt of its best-of-N stage: a failed one is a
    // finished attempt, kept (its selection is the stage's outcome) unless
    // `--retry` asks to run failed work again.
    let is_replica = |id: &str| plan.pipeline.stage(id).is_some_and(|s| s.replica.is_some());
    let failed: Vec<&str> = state
        .stages
        .iter()
        .filter(|s| s.status == StageStatus::Failed && !is_replica(&s.id))
        .map(|s| s.id.as_str())
        .collect();
    if !failed.is_empty() && !opts.retry_failed && opts.only.is_none() {
        return Err(RunError::Refused(format!(
            "resume run `{run_id}`: stage(s) {} failed; pass --retry to run them again",
            failed.join(", ")
        )));
    }
    if state.status == RunStatus::Succeeded {
        return Err(RunError::Refused(format!(
            "resume run `{run_id}`: it already succeeded (roll it back first to redo stages)"
        )));
    }
    // A stage counts as done only if its branch still points at its commit
    // (the branches read in one blocking task, with one repository handle).
    let skip = |id: &str| opts.only.as_ref().is_some_and(|only| *only != id);
    // `--retry` of a best-of-N stage whose selection failed (none passed)
    // runs its replicas again too: the same attempts would fail the same way.
    let retried_replicas: Vec<String> = if opts.retry_failed {
        plan.pipeline
            .stages
            .iter()
            .filter(|s| {
                state
                    .stage(s.id.as_str())
                    .is_some_and(|r| r.status == StageStatus::Failed)
            })
            .filter_map(|s| s.select.as_ref())
            .flat_map(|sel| sel.replicas.iter().map(|r| r.to_string()))
            .collect()
    } else {
        Vec::new()
    };
    let wanted: Vec<Option<(String, git::CommitId)>> = state
        .stages
        .iter()
        .map(|rec| match (rec.status, &rec.branch, &rec.commit) {
            _ if retried_replicas.contains(&rec.id) => None,
            (StageStatus::Succeeded, Some(b), Some(c)) if !skip(&rec.id) => {
                Some((b.clone(), c.clone()))
            }
            (StageStatus::Failed | StageStatus::NoChange, Some(b), Some(c))
                if is_replica(&rec.id) && !opts.retry_failed && !skip(&rec.id) =>
            {
                Some((b.clone(), c.clone()))
            }
            _ => None,
        })
        .collect();
    let cd = common.clone();
    let done: Vec<bool> = blocking(move || {
        let repo = git::Repo::at(cd);
        wanted
            .into_iter()
            .map(|w| match w {
                Some((b, c)) => Ok(repo.branch_sha(&b)? == Some(c)),
                None => Ok(false),
            })
            .collect()
    })
    .await?;
    for (rec, done) in state.stages.iter_mut().zip(done) {
        if skip(&rec.id) {
            continue;
        }
        if !done {
            rec.status = StageStatus::Pending;
            rec.reason = None;
            // What its earlier attempts used stays counted, per attempt.
            let log = run_dir
                .root
                .join("stages")
                .join(&rec.id)
                .join("actions.jsonl");
            rec.attempts = priced(crate::runlog::attempts_from_log(&log), &session);
            rec.tokens = TokenCount::default();
            rec.turns = 0;
        }
    }
    // The lock proves the previous orch of this run is gone; whatever it
    // left running (a tool command, a subagent) goes too.
    // Not for one stage of a distributed run: other workers of the same run
    // may share this machine (from other clones), and their tools carry the
    // same run marker.
    let orphans = if opts.only.is_some() {
        0
    } else {
        crate::exec::reap_run_orphans(id)
    };
    if orphans > 0 {
        ui.line(&format!(
            "orch: stopped {orphans} process(es) left running by the interrupted run"
        ));
    }
    lanes::clear_stale(&common, id).await?;
    let lanes = Arc::new(Lanes::new(
        &common,
        id,
        lane_pool_bound(&info.workdir, &session)?,
    ));
    state.status = RunStatus::Running;
    state.model = session.model.model_name();
    state.model_label = session.model.label();
    state.base_url = session.base_url.clone();
    state.replay_file = session.replay_file.clone();
    state.sampling = session.sampling;
    state.settings = Some(session.settings.clone());
    state.updated = now();
    run_dir.write_state(&state)?;
    flow::reserve_space(&run_dir.root);
    ui.run_started(&state);
    let issue = std::fs::read_to_string(run_dir.root.join("issue.md")).unwrap_or_default();
    // The run's budget counts what its finished stages already used.
    let mut ledger = crate::budget::RunLedger::new(session.limits.budget);
    for rec in &state.stages {
        // Failed replicas kept above are finished attempts too.
        let kept_replica = is_replica(&rec.id)
            && matches!(rec.status, StageStatus::Failed | StageStatus::NoChange);
        if rec.status == StageStatus::Succeeded || kept_replica {
            ledger.charge(&crate::budget::BudgetUse {
                tokens: rec.tokens.total(),
                cost_usd: rec.budget.as_ref().and_then(|b| b.used.cost_usd),
                ..Default::default()
            });
        }
        for a in &rec.attempts {
            ledger.charge(&crate::budget::BudgetUse {
                tokens: a.tokens.total(),
                cost_usd: a.cost_usd,
                ..Default::default()
            });
        }
    }
    let ctx = Arc::new(RunCtx {
        _lock: lock,
        ledger: std::sync::Mutex::new(ledger),
        run_id: id.clone(),
        allowlist: BashPolicy::load_allowlist(&info.workdir).unwrap_or_default(),
        common,
        base_commit: state.base_commit.clone(),
        run_dir,
        plan,
        issue,
        session,
        bootstrap: boot,
        only: opts.only,
    });
    drive(ctx, state, lanes, ui).await
}

/// Attempts read from a stage's action log, priced by the session's model.
fn priced(attempts: Vec<crate::runlog::Attempt>, session: &Session) -> Vec<crate::runlog::Attempt> {
    attempts
        .into_iter()
        .map(|mut a| {
            a.cost_usd = session.model.cost_usd(&crate::llm::Usage::of(a.tokens));
            a
        })
        .collect()
}

/// Rolls a run back to `stage`: the final branch moves to that stage's
/// commit and every stage that depends on it (transitively) is marked
/// rolled back; their branches stay. Returns the ids rolled back.
pub(crate) async fn rollback_run(
    repo: &Path,
    run_id: &RunId,
    stage: &str,
) -> Result<Vec<String>, RunError> {
    let id = run_id;
    let run_id = run_id.as_str();
    let repo_path = repo.to_path_buf();
    let info = blocking(move || git::open_repo(&repo_path)).await?;
    let common = info.common_dir.clone();
    let _lock = crate::runlog::lock_run(&RunDir::open(&common, run_id)?.root, run_id)?;
    let (run_dir, mut state, plan) = load_run(&common, id)?;
    let Some(target) = state.stage(stage).cloned() else {
        let known: Vec<&str> = state.stages.iter().map(|s| s.id.as_str()).collect();
        return Err(RunError::Refused(format!(
            "roll back run `{run_id}`: no stage `{stage}` (stages: {})",
            known.join(", ")
        )));
    };
    // A replica is one attempt of its best-of-N stage, not a point of the
    // run to go back to: the stage itself, or one before it, is.
    if let Some(r) = plan.pipeline.stage(stage).and_then(|s| s.replica.as_ref()) {
        return Err(RunError::Refused(format!(
            "roll back run `{run_id}` to `{stage}`: it is replica {} of {} of stage `{}`; roll back to `{}` (keeps its selection) or to a stage before it (re-runs the replicas and the selection)",
            r.k, r.n, r.of, r.of
        )));
    }
    let (StageStatus::Succeeded, Some(commit)) = (target.status, target.commit.clone()) else {
        return Err(RunError::Refused(format!(
            "roll back run `{run_id}` to `{stage}`: that stage has not succeeded (it is {})",
            target.status.as_str()
        )));
    };
    let later = descendants(&plan.pipeline, stage);
    let mut rolled = Vec::new();
    for rec in &mut state.stages {
        if later.contains(&rec.id) && rec.status != StageStatus::Pending {
            rec.status = StageStatus::RolledBack;
            rec.reason = Some(format!("rolled back to `{stage}`"));
            rolled.push(rec.id.clone());
        }
    }
    let (c, b, s) = (common.clone(), state.final_branch.clone(), commit);
    blocking(move || git::Repo::at(c).set_branch(&b, &s)).await?;
    state.status = RunStatus::RolledBack;
    state.updated = now();
    run_dir.write_state(&state)?;
    Ok(rolled)
}
