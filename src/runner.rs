//! The runner: owns a run's state from start to end. It plans the run,
//! schedules stages whose dependencies are done (up to `max_parallel` at
//! once, each in a lane worktree of its own), merges the commits of a fan-in
//! stage's parents, commits every stage on its own branch, hands summaries,
//! diffs and digests downstream, and writes the run record and the PR text.
//!
//! Invariants: the user's working tree, index and branch are never touched
//! (all work happens in the run's linked worktrees); only the scheduler
//! mutates the run state, and it rewrites `state.json` after every stage
//! transition; a stage is done only when its commit, its branch and its
//! record all exist; a stage's partial work is committed on its branch even
//! when the stage fails, and re-running a stage first moves its old branch
//! aside (`<stage>.v1`, …), so nothing is ever lost.

mod flow;
mod lanes;
mod pr;
mod stage;

pub(crate) use pr::pr_text;

use crate::agent;
use crate::git::{self, GitError};
use crate::ids::{RunId, Verdict};
use crate::llm::ChatModel;
use crate::pipeline::{OnFailure, Pipeline};
use crate::policy::BashPolicy;
use crate::role::Role;
use crate::runlog::{
    RUN_FORMAT, RecordError, RunDir, RunState, RunStatus, StageRecord, StageStatus, TokenCount,
};
use crate::ui::Ui;
use flow::{descendants, finish_run, handoff, skip_reason, start_commit};
use lanes::Lanes;
use serde::{Deserialize, Serialize};
use stage::run_stage;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::task::JoinSet;

/// Bytes of the whole-run diff put into the PR body's diffstat section.
const PR_DIFF_BUDGET: usize = 64 * 1024;
/// Default number of stages that may run at once.
pub(crate) const DEFAULT_MAX_PARALLEL: usize = 4;

/// Errors that stop a run before or between stages (a failing stage is not
/// one of them: it is recorded in the run state).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A git operation failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// The run record could not be written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A role named by the pipeline is missing.
    #[error("find role `{role}` for stage `{stage}`")]
    MissingRole {
        /// The stage.
        stage: String,
        /// The role it names.
        role: String,
    },
    /// Setting up the tools of a stage failed.
    #[error("prepare the tools of stage `{stage}` in {path}: {source}")]
    Tools {
        /// The stage.
        stage: String,
        /// The worktree.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The run cannot be resumed or rolled back as asked.
    #[error("{0}")]
    Refused(String),
    /// A blocking task panicked or was cancelled.
    #[error("finish a background task: {0}")]
    Join(String),
}

/// Settings shared by starting and resuming a run.
#[derive(Clone)]
pub(crate) struct Session {
    /// The model backend.
    pub model: Arc<dyn ChatModel>,
    /// The model base URL, for the record (never a key).
    pub base_url: Option<String>,
    /// The replay file, for the record, when replaying.
    pub replay_file: Option<String>,
    /// The sampling settings the model sends, for the record.
    pub sampling: Option<crate::runlog::SamplingRecord>,
    /// Values to redact from every record (API keys).
    pub secrets: Vec<String>,
    /// `--yes`: allow commands a role's `ask` rules would ask about.
    pub assume_yes: bool,
    /// Whether `ask` rules may prompt on a terminal.
    pub interactive: bool,
    /// Stages that may run at once (at least 1).
    pub max_parallel: usize,
    /// The run's budget and compaction policy (its price comes from the model).
    pub limits: agent::RunLimits,
}

/// Everything a new run needs.
pub(crate) struct RunOptions {
    /// Any path inside the user's repository.
    pub repo: PathBuf,
    /// The validated, unrolled pipeline.
    pub pipeline: Pipeline,
    /// The roles its stages name.
    pub roles: HashMap<String, Role>,
    /// The issue text (may be empty for `orch agent`).
    pub issue: String,
    /// The base revision (`HEAD` by default).
    pub base: String,
    /// Model, policy and parallelism.
    pub session: Session,
}

/// How a run ended.
#[derive(Debug)]
pub(crate) struct RunSummary {
    /// The final state (also in `state.json`).
    pub state: RunState,
    /// The run's record directory.
    pub record_dir: PathBuf,
    /// The PR title and body (`None` unless the run succeeded).
    pub pr: Option<(String, String)>,
    /// True when a stage failed because the model backend failed.
    pub model_failed: bool,
    /// True when a stage failed on a fault of orch's own (a fatal tool
    /// error): an internal error, whatever else failed.
    pub internal_failed: bool,
    /// The last finished agent's report (what `orch agent` prints).
    pub last_summary: String,
}

/// The frozen plan of a run (`plan.json`): what `resume` runs, whatever the
/// pipeline and role files say by then.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Plan {
    /// The unrolled pipeline.
    pub pipeline: Pipeline,
    /// The roles its stages name.
    pub roles: HashMap<String, Role>,
}

/// Immutable facts of a run, shared with stage tasks.
struct RunCtx {
    run_id: crate::ids::RunId,
    common: PathBuf,
    run_dir: RunDir,
    plan: Plan,
    issue: String,
    session: Session,
    allowlist: Vec<String>,
    base_commit: String,
    /// Held while this process drives the run.
    _lock: crate::runlog::RunLock,
    /// What the run's stages used of its budget (stages charge it as they end).
    ledger: std::sync::Mutex<crate::budget::RunLedger>,
}

/// What a stage task reports back to the scheduler.
struct StageDone {
    id: String,
    result: Result<StageOutcome, RunError>,
}

struct StageOutcome {
    budget: crate::budget::BudgetReport,
    commit: String,
    branch: String,
    failure: Option<String>,
    model_failed: bool,
    internal_failed: bool,
    verdict: Option<Verdict>,
    verdict_from_text: bool,
    verify: Option<crate::agent::verify::VerifyReport>,
    summary: String,
    turns: u32,
    tokens: TokenCount,
    duration_ms: u64,
    digest: Vec<String>,
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, GitError> + Send + 'static,
) -> Result<T, RunError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RunError::Join(e.to_string()))?
        .map_err(RunError::Git)
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Starts a new run of a pipeline and drives it to its end. Stage failures
/// are recorded in the returned state, not returned as errors.
pub(crate) async fn run_pipeline(opts: RunOptions, ui: &Ui) -> Result<RunSummary, RunError> {
    let repo_path = opts.repo.clone();
    let info = blocking(move || git::open_repo(&repo_path)).await?;
    let common = info.common_dir.clone();
    let (c, base) = (common.clone(), opts.base.clone());
    let base_sha = blocking(move || git::resolve_commit(&c, &base)).await?;

    let (run_id, run_dir) = RunDir::create_new(&common)?;
    let lock = crate::runlog::lock_run(&run_dir.root, run_id.as_str())?;
    // The first lane's checkout overlaps the writing of the run record.
    let lanes = Arc::new(Lanes::new(&common, &run_id));
    lanes.prewarm(&base_sha).await;
    let secrets = &opts.session.secrets;
    run_dir.write_file(
        "issue.md",
        crate::runlog::redact(&opts.issue, secrets).as_bytes(),
    )?;
    let plan = Plan {
        pipeline: opts.pipeline,
        roles: opts.roles,
    };
    let plan_json = serde_json::to_vec_pretty(&plan).unwrap_or_default();
    run_dir.write_file("plan.json", &plan_json)?;

    let session = opts.session;
    let state = RunState {
        format: RUN_FORMAT.to_owned(),
        run_id: run_id.clone(),
        pipeline: plan.pipeline.name.clone(),
        pipeline_origin: plan.pipeline.origin.clone(),
        status: RunStatus::Running,
        created: now(),
        updated: now(),
        repo: info.workdir.display().to_string(),
        base_commit: base_sha.clone(),
        worktree: lanes::lanes_dir(&common, run_id.as_str())
            .display()
            .to_string(),
        final_branch: format!("orch/{run_id}/pr"),
        model: session.model.model_name(),
        model_label: session.model.label(),
        base_url: session.base_url.clone(),
        replay_file: session.replay_file.clone(),
        sampling: session.sampling,
        pr_title: None,
        stages: plan
            .pipeline
            .stages
            .iter()
            .map(|s| StageRecord::pending(s.id.as_str(), &s.role))
            .collect(),
    };
    run_dir.write_state(&state)?;
    ui.run_started(&state);
    // What the kernel enforces for tool processes: said once per run.
    let sandbox_line = crate::sandbox::availability().describe();
    crate::ui::status_line(&format!("orch: {sandbox_line}"));
    run_dir.write_file("sandbox.txt", format!("{sandbox_line}\n").as_bytes())?;
    let ctx = Arc::new(RunCtx {
        run_id,
        allowlist: BashPolicy::load_allowlist(&info.workdir).unwrap_or_default(),
        common,
        run_dir,
        plan,
        issue: opts.issue,
        _lock: lock,
        ledger: std::sync::Mutex::new(crate::budget::RunLedger::new(session.limits.budget)),
        session,
        base_commit: base_sha,
    });
    drive(ctx, state, lanes, ui).await
}

/// What `resume` may do with failed stages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ResumeOptions {
    /// Re-run failed stages too (otherwise a run with failed stages is refused).
    pub retry_failed: bool,
}

/// Loads a run's state and plan.
pub(crate) fn load_run(common: &Path, run_id: &str) -> Result<(RunDir, RunState, Plan), RunError> {
    let run_dir = RunDir::open(common, run_id)?;
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
    let (run_dir, mut state, plan) = load_run(&common, run_id)?;
    let failed: Vec<&str> = state
        .stages
        .iter()
        .filter(|s| s.status == StageStatus::Failed)
        .map(|s| s.id.as_str())
        .collect();
    if !failed.is_empty() && !opts.retry_failed {
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
    // A stage counts as done only if its branch still points at its commit.
    for rec in &mut state.stages {
        let done = match (rec.status, &rec.branch, &rec.commit) {
            (StageStatus::Succeeded, Some(b), Some(c)) => {
                let (cd, b) = (common.clone(), b.clone());
                blocking(move || git::branch_sha(&cd, &b)).await? == Some(c.clone())
            }
            _ => false,
        };
        if !done {
            rec.status = StageStatus::Pending;
            rec.reason = None;
        }
    }
    // The lock proves the previous orch of this run is gone; whatever it
    // left running (a tool command, a subagent) goes too.
    let orphans = crate::exec::reap_run_orphans(run_id);
    if orphans > 0 {
        ui.line(&format!(
            "orch: stopped {orphans} process(es) left running by the interrupted run"
        ));
    }
    lanes::clear_stale(&common, run_id).await?;
    let lanes = Arc::new(Lanes::new(&common, id));
    state.status = RunStatus::Running;
    state.model = session.model.model_name();
    state.model_label = session.model.label();
    state.base_url = session.base_url.clone();
    state.replay_file = session.replay_file.clone();
    state.sampling = session.sampling;
    state.updated = now();
    run_dir.write_state(&state)?;
    ui.run_started(&state);
    let issue = std::fs::read_to_string(run_dir.root.join("issue.md")).unwrap_or_default();
    // The run's budget counts what its finished stages already used.
    let mut ledger = crate::budget::RunLedger::new(session.limits.budget);
    for rec in state
        .stages
        .iter()
        .filter(|r| r.status == StageStatus::Succeeded)
    {
        ledger.charge(&crate::budget::BudgetUse {
            tokens: rec.tokens.total(),
            cost_usd: rec.budget.as_ref().and_then(|b| b.used.cost_usd),
            ..Default::default()
        });
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
    });
    drive(ctx, state, lanes, ui).await
}

/// Rolls a run back to `stage`: the final branch moves to that stage's
/// commit and every stage that depends on it (transitively) is marked
/// rolled back; their branches stay. Returns the ids rolled back.
pub(crate) async fn rollback_run(
    repo: &Path,
    run_id: &RunId,
    stage: &str,
) -> Result<Vec<String>, RunError> {
    let run_id = run_id.as_str();
    let repo_path = repo.to_path_buf();
    let info = blocking(move || git::open_repo(&repo_path)).await?;
    let common = info.common_dir.clone();
    let _lock = crate::runlog::lock_run(&RunDir::open(&common, run_id)?.root, run_id)?;
    let (run_dir, mut state, plan) = load_run(&common, run_id)?;
    let Some(target) = state.stage(stage).cloned() else {
        let known: Vec<&str> = state.stages.iter().map(|s| s.id.as_str()).collect();
        return Err(RunError::Refused(format!(
            "roll back run `{run_id}`: no stage `{stage}` (stages: {})",
            known.join(", ")
        )));
    };
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
    blocking(move || git::set_branch(&c, &b, &s)).await?;
    state.status = RunStatus::RolledBack;
    state.updated = now();
    run_dir.write_state(&state)?;
    Ok(rolled)
}

/// The scheduler: starts stages whose dependencies are done, up to
/// `max_parallel` at once, and applies their results as they arrive.
async fn drive(
    ctx: Arc<RunCtx>,
    mut state: RunState,
    lanes: Arc<Lanes>,
    ui: &Ui,
) -> Result<RunSummary, RunError> {
    let mut running: JoinSet<StageDone> = JoinSet::new();
    let mut stopping = false;
    let mut interrupted = false;
    let mut model_failed = false;
    let mut internal_failed = false;
    let mut last_summary = String::new();
    let max_parallel = ctx.session.max_parallel.max(1);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);

    loop {
        if !stopping {
            let failed_now =
                schedule(&ctx, &mut state, &lanes, &mut running, max_parallel, ui).await?;
            stopping |= failed_now;
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            joined = running.join_next() => {
                let Some(joined) = joined else { continue };
                let done = joined.map_err(|e| RunError::Join(e.to_string()))?;
                let out = done.result?;
                let rec = planned(&mut state, &done.id);
                rec.status = if out.failure.is_some() { StageStatus::Failed } else { StageStatus::Succeeded };
                rec.branch = Some(out.branch);
                rec.commit = Some(out.commit);
                rec.verdict = out.verdict;
                (rec.verdict_from_text, rec.verify) = (out.verdict_from_text, out.verify);
                rec.summary = Some(out.summary.clone());
                rec.turns = out.turns;
                rec.tokens = out.tokens;
                rec.duration_ms = out.duration_ms;
                rec.reason = out.failure.clone();
                rec.digest = out.digest;
                rec.budget = Some(out.budget);
                ui.stage_finished(rec);
                model_failed |= out.model_failed;
                internal_failed |= out.internal_failed;
                last_summary = out.summary;
                if out.failure.is_some() {
                    let stage = ctx.plan.pipeline.stage(&done.id);
                    if stage.is_none_or(|s| s.on_failure == OnFailure::Stop) {
                        stopping = true;
                    }
                }
                state.updated = now();
                ctx.run_dir.write_state(&state)?;
            }
            _ = &mut ctrl_c => {
                interrupted = true;
                ui.line("orch: interrupted; stopping the running stages (resume with `orch resume`)");
                running.abort_all();
                while running.join_next().await.is_some() {}
                for rec in &mut state.stages {
                    if rec.status == StageStatus::Running {
                        rec.status = StageStatus::Pending;
                        rec.reason = Some("interrupted; restarts from its start commit on resume".into());
                    }
                }
                break;
            }
        }
    }

    let any_failed = state
        .stages
        .iter()
        .any(|s| matches!(s.status, StageStatus::Failed | StageStatus::Blocked));
    let mut pr = None;
    state.status = if interrupted {
        RunStatus::Interrupted
    } else if any_failed || stopping {
        RunStatus::Failed
    } else {
        match finish_run(&ctx, &mut state).await? {
            Ok(text) => {
                pr = Some(text);
                lanes.remove_all().await?;
                RunStatus::Succeeded
            }
            Err(reason) => {
                ui.line(&format!("orch: {reason}"));
                RunStatus::Failed
            }
        }
    };
    state.updated = now();
    ctx.run_dir.write_state(&state)?;
    ui.run_finished(&state);
    Ok(RunSummary {
        state,
        record_dir: ctx.run_dir.root.clone(),
        pr,
        model_failed,
        internal_failed,
        last_summary,
    })
}

/// Starts every stage that is ready, marks skipped and blocked ones.
/// Returns true when a stage failed before it could start (a fan-in
/// conflict) under the `stop` policy.
async fn schedule(
    ctx: &Arc<RunCtx>,
    state: &mut RunState,
    lanes: &Arc<Lanes>,
    running: &mut JoinSet<StageDone>,
    max_parallel: usize,
    ui: &Ui,
) -> Result<bool, RunError> {
    let mut stop = false;
    loop {
        let mut progressed = false;
        for stage in &ctx.plan.pipeline.stages {
            if running.len() >= max_parallel || stop {
                return Ok(stop);
            }
            let id = stage.id.as_str();
            if state.stage(id).map(|r| r.status) != Some(StageStatus::Pending) {
                continue;
            }
            let needs: Vec<StageStatus> = stage
                .needs
                .iter()
                .filter_map(|n| state.stage(n.as_str()).map(|r| r.status))
                .collect();
            if needs.iter().any(|s| {
                matches!(
                    s,
                    StageStatus::Pending | StageStatus::Running | StageStatus::RolledBack
                )
            }) {
                continue;
            }
            progressed = true;
            if let Some(bad) = stage.needs.iter().find(|n| {
                matches!(
                    state.stage(n.as_str()).map(|r| r.status),
                    Some(StageStatus::Failed | StageStatus::Blocked)
                )
            }) {
                set_not_run(
                    state,
                    id,
                    StageStatus::Blocked,
                    format!("upstream stage `{bad}` did not succeed"),
                    ui,
                );
                continue;
            }
            if let Some(reason) = skip_reason(stage, state) {
                set_not_run(state, id, StageStatus::Skipped, reason, ui);
                continue;
            }
            let start = match start_commit(ctx, stage, state).await? {
                Ok(sha) => sha,
                Err(conflict) => {
                    let rec = planned(state, id);
                    rec.status = StageStatus::Failed;
                    rec.reason = Some(conflict);
                    ui.stage_finished(rec);
                    if stage.on_failure == OnFailure::Stop {
                        stop = true;
                    }
                    continue;
                }
            };
            let role = ctx
                .plan
                .roles
                .get(&stage.role)
                .ok_or_else(|| RunError::MissingRole {
                    stage: id.to_owned(),
                    role: stage.role.clone(),
                })?
                .clone();
            let upstream = handoff(ctx, stage, state).await?;
            let rec = planned(state, id);
            rec.status = StageStatus::Running;
            rec.parent_commit = Some(start.clone());
            rec.reason = None;
            state.updated = now();
            ctx.run_dir.write_state(state)?;
            ui.stage_started(id, &role.name);
            let (ctx2, stage2, ui_id) = (Arc::clone(ctx), stage.clone(), id.to_owned());
            let (progress, lanes) = (ui.progress_handle(), Arc::clone(lanes));
            running.spawn(async move {
                let _ = &ui_id;
                let result = match lanes.acquire(&start).await {
                    Ok(mut lane) => {
                        let r =
                            run_stage(&ctx2, &stage2, &role, &lane, &start, upstream, &progress)
                                .await;
                        // The stage committed its whole tree: the lane is clean there.
                        lane.clean_at = r.as_ref().ok().map(|o| o.commit.clone());
                        lanes.release(lane);
                        r
                    }
                    Err(e) => Err(e),
                };
                StageDone {
                    id: stage2.id.to_string(),
                    result,
                }
            });
        }
        if !progressed {
            return Ok(stop);
        }
    }
}

/// The record of a planned stage. Invariant: the run state's stage records
/// are made from the frozen plan, so every stage id the scheduler holds has one.
#[allow(clippy::expect_used)]
fn planned<'a>(state: &'a mut RunState, id: &str) -> &'a mut crate::runlog::StageRecord {
    state.stage_mut(id).expect("stage records mirror the plan")
}

fn set_not_run(state: &mut RunState, id: &str, status: StageStatus, reason: String, ui: &Ui) {
    let rec = planned(state, id);
    rec.status = status;
    rec.reason = Some(reason);
    ui.stage_skipped(rec);
}
