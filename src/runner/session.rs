//! What a run is given and what it returns: the session (the model and the
//! process-wide choices), the options, the plan and the summary.

use super::error::RunError;
use crate::agent;
use crate::llm::ChatModel;
use crate::pipeline::Pipeline;
use crate::role::Role;
use crate::runlog::RunState;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Default number of stages that may run at once.
pub(crate) const DEFAULT_MAX_PARALLEL: usize = 4;

/// How old a run directory without a state file must be before a new run
/// removes it as the debris of a run killed in its first instants (a younger
/// one may be a run between its `mkdir` and its lock).
pub(super) const DEAD_START_AGE: std::time::Duration = std::time::Duration::from_secs(60);

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
    pub stage_models: std::collections::BTreeMap<String, StageModel>,
    /// The profiles stages escalate to (`escalate_to:`), by base stage id.
    pub escalations: std::collections::BTreeMap<String, super::models::Escalation>,
    /// Values to redact from every record (API keys).
    pub secrets: Vec<String>,
    /// `--yes`: allow commands a role's `ask` rules would ask about.
    pub assume_yes: bool,
    /// Whether `ask` rules may prompt on a terminal.
    pub interactive: bool,
    /// Whether a run without a terminal waits for a control answer
    /// (`--ask-via control`) or denies at once.
    pub ask_via: crate::runlog::control::AskVia,
    /// How long a call waits for approval (`--ask-timeout`); `None`: until
    /// the stage's time budget runs out.
    pub ask_timeout: Option<std::time::Duration>,
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
    /// The run's hooks: the user's, the repository's when trusted, and
    /// each role's ([`crate::hooks::config`]).
    pub hooks: Arc<crate::hooks::HookConfig>,
}

/// The lane pool's bound for a run in the repository at `workdir`.
pub(super) fn lane_pool_bound(workdir: &Path, session: &Session) -> Result<usize, RunError> {
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

pub(super) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The model a stage's `model:` resolved to.
#[derive(Clone)]
pub(crate) struct StageModel {
    /// The backend: another profile's client, or the run's client asking
    /// for another model.
    pub model: Arc<dyn ChatModel>,
    /// Its server (never a key).
    pub base_url: Option<String>,
    /// Where it comes from, for the record: `stage model: profile \`strong\``.
    pub source: String,
}
