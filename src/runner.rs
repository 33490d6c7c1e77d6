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
//!
//! Where: [`start`] makes a new run, [`resume`] resumes or rolls one back,
//! [`schedule`] drives the stages, [`stage`] runs one.

mod bootstrap;
mod flow;
mod lanes;
pub(crate) mod models;
mod pr;
mod resume;
mod schedule;
mod stage;
mod start;

pub(crate) use flow::skip_reason;
pub(crate) use pr::pr_text;
pub(crate) use resume::{ResumeOptions, load_run, resume_run, rollback_run};
pub(crate) use start::{finish_distributed, plan_run, run_pipeline};

use crate::agent;
use crate::git::GitError;
use crate::ids::Verdict;
use crate::llm::ChatModel;
use crate::pipeline::Pipeline;
use crate::role::Role;
use crate::runlog::{RecordError, RunDir, RunState, TokenCount};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    pub sampling: Option<crate::llm::Sampling>,
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
    let user = crate::dirs::user_config_dir();
    let env = crate::environment::current().var_os(crate::environment::ORCH_LANE_POOL);
    let configured = crate::config::lane_pool(env, Some(workdir), user.as_deref())
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
    base_commit: crate::git::CommitId,
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
    commit: crate::git::CommitId,
    branch: String,
    failure: Option<String>,
    model_failed: bool,
    internal_failed: bool,
    verdict: Option<Verdict>,
    verdict_from_text: bool,
    verify: Option<crate::runlog::VerifyReport>,
    setup: Option<crate::runlog::SetupRecord>,
    baseline: Option<crate::runlog::BaselineReport>,
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
