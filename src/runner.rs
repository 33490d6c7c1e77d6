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

mod bootstrap;
mod flow;
mod lanes;
pub(crate) mod models;
mod pr;
mod stage;

pub(crate) use flow::skip_reason;
pub(crate) use pr::pr_text;

use crate::agent;
use crate::git::{self, GitError};
use crate::ids::{RunId, Verdict};
use crate::llm::ChatModel;
use crate::pipeline::{OnFailure, Pipeline};
use crate::policy::BashPolicy;
use crate::role::Role;
use crate::runlog::{
    RUN_FORMAT, RecordError, RunDir, RunState, RunStatus, StageRecord, StageStatus, StateWriter,
    TokenCount,
};
use crate::ui::Ui;
use flow::{descendants, finish_run, handoff, start_commit};
use lanes::Lanes;
use serde::{Deserialize, Serialize};
use stage::run_stage;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::task::JoinSet;

/// Default number of stages that may run at once.
pub(crate) const DEFAULT_MAX_PARALLEL: usize = 4;
/// How old a run directory without a state file must be before a new run
/// removes it as the debris of a run killed in its first instants (a younger
/// one may be a run between its `mkdir` and its lock).
const DEAD_START_AGE: std::time::Duration = std::time::Duration::from_secs(60);

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
    /// The lane bootstrap's files are invalid (`.worktreeinclude`, the
    /// `[setup]` of `orch.toml`): nothing was created.
    #[error("{0}")]
    Config(String),
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
    /// The limits and model flags of the run, for the record (`resume` reuses them).
    pub settings: crate::runlog::RunSettings,
    /// The models stages name (`model:`), by base stage id; see [`models`].
    pub stage_models: std::collections::BTreeMap<String, models::StageModel>,
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
    /// What the run does with memory (`memory =` in orch.toml, `--no-memory`).
    pub memory: crate::memory::MemoryMode,
    /// How many warm lanes the repository keeps for later runs: `Some(0)`
    /// (`--no-lane-pool`) none; `None` what `ORCH_LANE_POOL`, else `[lanes]
    /// pool` in `orch.toml` says, else `max_parallel` (at least [`DEFAULT_MAX_PARALLEL`], so a
    /// one-lane `orch agent` does not shrink a wider run's pool).
    pub lane_pool: Option<usize>,
}

/// The lane pool's bound for a run in the repository at `workdir`.
fn lane_pool_bound(workdir: &Path, session: &Session) -> Result<usize, RunError> {
    if let Some(n) = session.lane_pool {
        return Ok(n);
    }
    if let Some(v) = std::env::var_os("ORCH_LANE_POOL").filter(|v| !v.is_empty()) {
        let v = v.to_string_lossy();
        return v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n as i64 <= crate::config::MAX_LANE_POOL)
            .ok_or_else(|| {
                RunError::Refused(format!(
                    "use ORCH_LANE_POOL={v}: expected a number of lanes from 0 (no pool) to {}",
                    crate::config::MAX_LANE_POOL
                ))
            });
    }
    let user = crate::catalog::user_config_dir();
    let configured = crate::config::lane_pool(Some(workdir), user.as_deref())
        .map_err(|e| RunError::Refused(e.to_string()))?;
    Ok(configured.unwrap_or(session.max_parallel.max(DEFAULT_MAX_PARALLEL)))
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
    /// The issue as fetched from a forge (`issue.json`), when it came from one.
    pub issue_json: Option<String>,
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
    /// What every stage's lane gets before its agent starts.
    bootstrap: bootstrap::Bootstrap,
    /// Held while this process drives the run.
    _lock: crate::runlog::RunLock,
    /// Run only this stage (`orch stage`): no other stage starts, none is
    /// marked skipped or blocked, and the run is not finished.
    only: Option<String>,
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
    setup: Option<crate::runlog::SetupRecord>,
    baseline: Option<crate::agent::verify::BaselineReport>,
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
    let Started {
        info,
        common,
        base_sha,
        boot,
        run_id,
        run_dir,
        lock,
        plan,
        mut state,
        session,
        issue,
        pool_bound,
    } = start_record(opts).await?;
    ui.run_started(&state);
    // What the kernel enforces for tool processes: said once per run.
    let sandbox_line = crate::sandbox::availability().describe();
    crate::ui::status_line(&format!("orch: {sandbox_line}"));
    run_dir.write_file_unsynced("sandbox.txt", format!("{sandbox_line}\n").as_bytes())?;
    // The first lane's checkout overlaps the rest of the start-up.
    let lanes = Arc::new(Lanes::new(&common, &run_id, pool_bound));
    lanes.prewarm(&base_sha).await;
    // So does asking the server for its context window: up to three probe
    // requests the first turn would otherwise wait for (it awaits this one).
    let probe = Arc::clone(&session.model);
    tokio::spawn(async move {
        probe.probe_context_window().await;
    });
    state.status = RunStatus::Running;
    state.updated = now();
    // The one fsync before the first request.
    run_dir.write_state_alone(&state)?;
    crate::killpoint::reached("state-running");
    let ctx = Arc::new(RunCtx {
        run_id,
        allowlist: BashPolicy::load_allowlist(&info.workdir).unwrap_or_default(),
        common,
        run_dir,
        plan,
        issue,
        _lock: lock,
        ledger: std::sync::Mutex::new(crate::budget::RunLedger::new(session.limits.budget)),
        session,
        base_commit: base_sha,
        bootstrap: boot,
        only: None,
    });
    drive(ctx, state, lanes, ui).await
}

/// A run whose record was just made (state `starting`), before any lane.
struct Started {
    info: git::RepoInfo,
    common: PathBuf,
    base_sha: String,
    boot: bootstrap::Bootstrap,
    run_id: RunId,
    run_dir: RunDir,
    lock: crate::runlog::RunLock,
    plan: Plan,
    state: RunState,
    session: Session,
    issue: String,
    /// How many lanes this run may hand back to the repository's pool.
    pool_bound: usize,
}

/// Plans a run without running any stage (`orch run --remote … --no-local`):
/// its record and run ref exist, every stage pending, status `running` (the
/// stages run elsewhere, by `orch stage`). Returns the state.
pub(crate) async fn plan_run(opts: RunOptions) -> Result<RunState, RunError> {
    let Started {
        run_dir, mut state, ..
    } = start_record(opts).await?;
    state.status = RunStatus::Running;
    state.updated = now();
    run_dir.write_state(&state)?;
    Ok(state)
}

/// Makes a new run's record: its directory and lock, the issue, the frozen
/// plan and the first state (`starting`), before any lane, ref or worktree.
async fn start_record(opts: RunOptions) -> Result<Started, RunError> {
    let (repo_path, base) = (opts.repo.clone(), opts.base.clone());
    let (info, base_sha) = blocking(move || git::open_repo_at(&repo_path, &base)).await?;
    let common = info.common_dir.clone();
    let boot = load_bootstrap(&info.workdir, &opts.pipeline).await?;

    let pool_bound = lane_pool_bound(&info.workdir, &opts.session)?;
    let (run_id, run_dir) = RunDir::create_new(&common)?;
    let lock = crate::runlog::lock_run(&run_dir.root, run_id.as_str())?;
    crate::killpoint::reached("run-dir-created");
    // Runs killed before their first state write left only a directory.
    crate::runlog::sweep_dead_starts(&common, DEAD_START_AGE);
    // Runs killed while recording their ref after their final state (never
    // resumed) left its lock.
    crate::runlog::heal_dead_run_ref_locks(&common);
    let secrets = &opts.session.secrets;
    // Until the `running` state below, nothing is fsynced: a run that dies
    // before its first stage ends has nothing worth resuming, and the next
    // `write_state` (a stage's result) makes these files durable first.
    run_dir.write_file_unsynced(
        "issue.md",
        crate::runlog::redact(&opts.issue, secrets).as_bytes(),
    )?;
    if let Some(json) = &opts.issue_json {
        run_dir.write_file(
            "issue.json",
            crate::runlog::redact(json, secrets).as_bytes(),
        )?;
    }
    let plan = Plan {
        pipeline: opts.pipeline,
        roles: opts.roles,
    };
    let plan_json = serde_json::to_vec_pretty(&plan).unwrap_or_default();
    run_dir.write_file_unsynced("plan.json", &plan_json)?;

    let session = opts.session;
    let state = RunState {
        format: RUN_FORMAT.to_owned(),
        run_id: run_id.clone(),
        pipeline: plan.pipeline.name.clone(),
        pipeline_origin: plan.pipeline.origin.clone(),
        status: RunStatus::Starting,
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
        settings: Some(session.settings.clone()),
        pr_title: None,
        pr_url: None,
        stages: plan
            .pipeline
            .stages
            .iter()
            .map(|s| StageRecord::pending(s.id.as_str(), &s.role))
            .collect(),
    };
    // The state exists before any lane, ref or worktree: a run killed from
    // here on is listed, and `resume` finishes (or cleans) it.
    run_dir.write_state_unsynced(&state)?;
    flow::reserve_space(&run_dir.root);
    crate::killpoint::reached("state-starting");
    Ok(Started {
        info,
        common,
        base_sha,
        boot,
        run_id,
        run_dir,
        lock,
        plan,
        state,
        session,
        issue: opts.issue,
        pool_bound,
    })
}

/// Finishes a distributed run whose every stage is done (the record in this
/// repository holds the merged state, and the sinks' branches are here): the
/// final commit and branch, `pr.md`, and the final status, as a local run
/// ends. Returns the final state.
pub(crate) async fn finish_distributed(
    repo: &Path,
    run_id: &RunId,
    session: Session,
) -> Result<RunState, RunError> {
    let repo_path = repo.to_path_buf();
    let info = blocking(move || git::open_repo(&repo_path)).await?;
    let common = info.common_dir.clone();
    let id = run_id.as_str();
    let lock = crate::runlog::lock_run(&RunDir::open(&common, id)?.root, id)?;
    let (run_dir, mut state, plan) = load_run(&common, id)?;
    let boot = load_bootstrap(&info.workdir, &plan.pipeline).await?;
    let issue = std::fs::read_to_string(run_dir.root.join("issue.md")).unwrap_or_default();
    let any_failed = state
        .stages
        .iter()
        .any(|s| matches!(s.status, StageStatus::Failed | StageStatus::Blocked));
    let ctx = RunCtx {
        run_id: run_id.clone(),
        allowlist: Vec::new(),
        common,
        base_commit: state.base_commit.clone(),
        run_dir,
        plan,
        issue,
        _lock: lock,
        ledger: std::sync::Mutex::new(crate::budget::RunLedger::new(session.limits.budget)),
        session,
        bootstrap: boot,
        only: None,
    };
    state.status = if any_failed {
        RunStatus::Failed
    } else {
        match finish_run(&ctx, &mut state).await? {
            Ok(_) => RunStatus::Succeeded,
            Err(reason) => {
                crate::ui::status_line(&format!("orch: {reason}"));
                RunStatus::Failed
            }
        }
    };
    state.updated = now();
    ctx.run_dir.write_state(&state)?;
    Ok(state)
}

/// Reads the run's lane bootstrap (`.worktreeinclude`, the setup command)
/// off the async threads; a bad file is an input error.
async fn load_bootstrap(
    workdir: &Path,
    pipeline: &Pipeline,
) -> Result<bootstrap::Bootstrap, RunError> {
    let (w, p) = (workdir.to_path_buf(), pipeline.clone());
    tokio::task::spawn_blocking(move || bootstrap::Bootstrap::load(&w, &p))
        .await
        .map_err(|e| RunError::Join(e.to_string()))?
        .map_err(RunError::Config)
}

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
    let boot = load_bootstrap(&info.workdir, &plan.pipeline).await?;
    let failed: Vec<&str> = state
        .stages
        .iter()
        .filter(|s| s.status == StageStatus::Failed)
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
    // A stage counts as done only if its branch still points at its commit.
    for rec in &mut state.stages {
        if opts.only.as_ref().is_some_and(|only| *only != rec.id) {
            continue;
        }
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
        crate::exec::reap_run_orphans(run_id)
    };
    if orphans > 0 {
        ui.line(&format!(
            "orch: stopped {orphans} process(es) left running by the interrupted run"
        ));
    }
    lanes::clear_stale(&common, run_id).await?;
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
        if rec.status == StageStatus::Succeeded {
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
            a.cost_usd = session.model.cost_usd(&crate::llm::Usage {
                prompt_tokens: a.tokens.prompt,
                completion_tokens: a.tokens.completion,
                total_tokens: a.tokens.total(),
                ..Default::default()
            });
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

/// Stage records by id: the scheduler's O(1) way into the run state, whose
/// records are made from the frozen plan and never added or removed. It
/// remembers which records were handed out for change since the last state
/// write, so a write re-serialises only those (see [`StateWriter`]).
struct Index {
    by_id: HashMap<String, usize>,
    dirty: std::sync::Mutex<Vec<usize>>,
    writer: std::sync::Mutex<StateWriter>,
}

impl Index {
    fn of(state: &RunState) -> Index {
        Index {
            by_id: state
                .stages
                .iter()
                .enumerate()
                .map(|(i, r)| (r.id.clone(), i))
                .collect(),
            dirty: std::sync::Mutex::new(Vec::new()),
            writer: std::sync::Mutex::new(StateWriter::default()),
        }
    }

    fn status(&self, state: &RunState, id: &str) -> Option<StageStatus> {
        self.by_id.get(id).map(|&i| state.stages[i].status)
    }

    /// The record of a planned stage, marked as changed. Invariant: the run
    /// state's stage records are made from the frozen plan, so every stage
    /// id the scheduler holds has one.
    #[allow(clippy::expect_used)]
    fn rec<'a>(&self, state: &'a mut RunState, id: &str) -> &'a mut StageRecord {
        let i = *self.by_id.get(id).expect("stage records mirror the plan");
        self.dirty.lock().unwrap_or_else(|e| e.into_inner()).push(i);
        &mut state.stages[i]
    }

    /// Writes the state durably; only records handed out by [`Index::rec`]
    /// since the last write are serialised again.
    fn write(&self, run_dir: &RunDir, state: &mut RunState) -> Result<(), RecordError> {
        self.write_as(run_dir, state, true)
    }

    /// [`Index::write`] without an fsync, for a transition that records no
    /// work (a stage marked running: after a crash it restarts either way).
    fn write_unsynced(&self, run_dir: &RunDir, state: &mut RunState) -> Result<(), RecordError> {
        self.write_as(run_dir, state, false)
    }

    fn write_as(
        &self,
        run_dir: &RunDir,
        state: &mut RunState,
        sync: bool,
    ) -> Result<(), RecordError> {
        let dirty = std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|e| e.into_inner()));
        let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if sync {
            writer.write(run_dir, state, dirty)
        } else {
            writer.write_unsynced(run_dir, state, dirty)
        }
    }
}

/// What the scheduler learnt while it drove the stages.
#[derive(Default)]
struct Drove {
    stopping: bool,
    interrupted: bool,
    model_failed: bool,
    internal_failed: bool,
    last_summary: String,
}

/// The scheduler: starts stages whose dependencies are done, up to
/// `max_parallel` at once, and applies their results as they arrive. Any
/// error after the run started marks the stages that were running `failed`
/// and the run `failed` before it is returned (if the state can still be
/// written; if not, the dead lock tells the next command).
async fn drive(
    ctx: Arc<RunCtx>,
    mut state: RunState,
    lanes: Arc<Lanes>,
    ui: &Ui,
) -> Result<RunSummary, RunError> {
    let index = Index::of(&state);
    let mut drove = Drove::default();
    let mut pr = None;
    let result = async {
        drive_stages(&ctx, &mut state, &index, &lanes, ui, &mut drove).await?;
        let any_failed = state
            .stages
            .iter()
            .any(|s| matches!(s.status, StageStatus::Failed | StageStatus::Blocked));
        state.status = if drove.interrupted {
            RunStatus::Interrupted
        } else if ctx.only.is_some() {
            // One stage of a distributed run: the run goes on elsewhere;
            // this worker's lanes go back to its pool.
            lanes.hand_back().await?;
            RunStatus::Running
        } else if any_failed || drove.stopping {
            // The stage branches keep the work; the lanes go back (O(1)).
            if let Err(e) = lanes.hand_back().await {
                ui.line(&format!(
                    "orch: warning: failed to hand back the lanes: {e}"
                ));
            }
            RunStatus::Failed
        } else {
            crate::killpoint::reached("run-finishing");
            match finish_run(&ctx, &mut state).await? {
                Ok(text) => {
                    pr = Some(text);
                    // The final branch and pr.md exist; the lanes go back to
                    // the pool or into the trash (renames, whatever the
                    // repository's size: nothing slow on the exit path).
                    lanes.hand_back().await?;
                    crate::killpoint::reached("lanes-removed");
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
        Ok::<(), RunError>(())
    }
    .await;
    if let Err(e) = result {
        fail_on_error(&ctx, &mut state, &e);
        return Err(e);
    }
    flow::release_space(&ctx.run_dir.root);
    ui.run_finished(&state);
    Ok(RunSummary {
        state,
        record_dir: ctx.run_dir.root.clone(),
        pr,
        model_failed: drove.model_failed,
        internal_failed: drove.internal_failed,
        last_summary: drove.last_summary,
    })
}

/// Marks the stages that were running `failed` (keeping the tokens their
/// action logs show) and the run `failed`, because of `e`; best effort: when
/// the state cannot be written, the dead run lock says the run is over.
fn fail_on_error(ctx: &RunCtx, state: &mut RunState, e: &RunError) {
    let why = format!("orch stopped on an error: failed to {e}");
    for rec in &mut state.stages {
        if rec.status == StageStatus::Running {
            rec.status = StageStatus::Failed;
            keep_logged_use(&ctx.run_dir, rec);
            rec.reason = Some(why.clone());
        }
    }
    state.status = RunStatus::Failed;
    state.updated = now();
    // A full disk: the space held since the start takes the state.
    if ctx.run_dir.write_state(state).is_err() && flow::release_space(&ctx.run_dir.root) {
        let _ = ctx.run_dir.write_state(state);
    }
    flow::release_space(&ctx.run_dir.root);
}

/// Fills a stage record that never got its outcome (interrupted, or ended
/// by an error) with the turns and tokens its last attempt logged.
fn keep_logged_use(run_dir: &RunDir, rec: &mut StageRecord) {
    let log = run_dir
        .root
        .join("stages")
        .join(&rec.id)
        .join("actions.jsonl");
    if let Some(last) = crate::runlog::attempts_from_log(&log).pop() {
        rec.turns = last.turns;
        rec.tokens = last.tokens;
    }
}

/// The scheduling loop, up to the moment no stage runs and none can start.
async fn drive_stages(
    ctx: &Arc<RunCtx>,
    state: &mut RunState,
    index: &Index,
    lanes: &Arc<Lanes>,
    ui: &Ui,
    drove: &mut Drove,
) -> Result<(), RunError> {
    let mut running: JoinSet<StageDone> = JoinSet::new();
    let max_parallel = ctx.session.max_parallel.max(1);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    // SIGTERM (a supervisor, `timeout`, `kill`) interrupts like Ctrl-C.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let terminated = async move {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(terminated);

    loop {
        if !drove.stopping {
            let failed_now =
                schedule(ctx, state, index, lanes, &mut running, max_parallel, ui).await?;
            drove.stopping |= failed_now;
        }
        if running.is_empty() {
            return Ok(());
        }
        let signal = tokio::select! {
            joined = running.join_next() => {
                let Some(joined) = joined else { continue };
                let done = joined.map_err(|e| RunError::Join(e.to_string()))?;
                let out = done.result?;
                let rec = index.rec(state, &done.id);
                rec.status = if out.failure.is_some() { StageStatus::Failed } else { StageStatus::Succeeded };
                rec.branch = Some(out.branch);
                rec.commit = Some(out.commit);
                rec.verdict = out.verdict;
                (rec.verdict_from_text, rec.verify) = (out.verdict_from_text, out.verify);
                (rec.setup, rec.baseline) = (out.setup, out.baseline);
                rec.summary = Some(out.summary.clone());
                rec.turns = out.turns;
                rec.tokens = out.tokens;
                rec.duration_ms = out.duration_ms;
                rec.reason = out.failure.clone();
                rec.digest = out.digest;
                rec.budget = Some(out.budget);
                ui.stage_finished(rec);
                drove.model_failed |= out.model_failed;
                drove.internal_failed |= out.internal_failed;
                drove.last_summary = out.summary;
                if out.failure.is_some() {
                    let stage = ctx.plan.pipeline.stage(&done.id);
                    if stage.is_none_or(|s| s.on_failure == OnFailure::Stop) {
                        drove.stopping = true;
                    }
                }
                state.updated = now();
                index.write(&ctx.run_dir, state)?;
                crate::killpoint::reached("stage-recorded");
                continue;
            }
            _ = &mut ctrl_c => "interrupted",
            _ = &mut terminated => "terminated (SIGTERM)",
        };
        drove.interrupted = true;
        ui.line(&format!(
            "orch: {signal}; stopping the running stages (resume with `orch resume`)"
        ));
        running.abort_all();
        while running.join_next().await.is_some() {}
        for rec in &mut state.stages {
            if rec.status == StageStatus::Running {
                rec.status = StageStatus::Pending;
                keep_logged_use(&ctx.run_dir, rec);
                rec.reason = Some(format!(
                    "{signal}; restarts from its start commit on resume"
                ));
            }
        }
        return Ok(());
    }
}

/// Starts every stage that is ready, marks skipped and blocked ones.
/// Returns true when a stage failed before it could start (a fan-in
/// conflict) under the `stop` policy.
async fn schedule(
    ctx: &Arc<RunCtx>,
    state: &mut RunState,
    index: &Index,
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
            if ctx.only.as_deref().is_some_and(|only| only != id) {
                continue;
            }
            if index.status(state, id) != Some(StageStatus::Pending) {
                continue;
            }
            let needs: Vec<StageStatus> = stage
                .needs
                .iter()
                .filter_map(|n| index.status(state, n.as_str()))
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
                    index.status(state, n.as_str()),
                    Some(StageStatus::Failed | StageStatus::Blocked)
                )
            }) {
                set_not_run(
                    state,
                    index,
                    id,
                    StageStatus::Blocked,
                    format!("upstream stage `{bad}` did not succeed"),
                    ui,
                );
                continue;
            }
            if let Some(reason) = skip_reason(stage, state) {
                set_not_run(state, index, id, StageStatus::Skipped, reason, ui);
                continue;
            }
            let start = match start_commit(ctx, stage, state).await? {
                Ok(sha) => sha,
                Err(conflict) => {
                    let rec = index.rec(state, id);
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
            let rec = index.rec(state, id);
            rec.status = StageStatus::Running;
            rec.parent_commit = Some(start.clone());
            rec.reason = None;
            state.updated = now();
            index.write_unsynced(&ctx.run_dir, state)?;
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

fn set_not_run(
    state: &mut RunState,
    index: &Index,
    id: &str,
    status: StageStatus,
    reason: String,
    ui: &Ui,
) {
    let rec = index.rec(state, id);
    rec.status = status;
    rec.reason = Some(reason);
    ui.stage_skipped(rec);
}
