//! A validated, planned pipeline and its stages, and the limits a pipeline
//! file is checked against (a leaf of `pipeline`: `dag`, `spec` and
//! `mermaid` build on it).

use crate::budget::Budget;
use crate::ids::StageId;
use serde::{Deserialize, Serialize};

/// The most extra rounds a rework loop may ask for.
pub const MAX_REWORK_ROUNDS: u32 = 5;

/// One planned stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    /// The stage id (`code`, or `code.r2` for an unrolled rework round).
    pub id: StageId,
    /// The role that runs the stage.
    pub role: String,
    /// Stages that must finish first.
    pub needs: Vec<StageId>,
    /// The task template (may be empty; the runtime adds the issue and hand-off).
    pub task: String,
    /// A turn limit overriding the role's.
    pub max_turns: Option<u32>,
    /// Token, time and cost limits of the stage (each round has its own).
    #[serde(default)]
    pub budget: Budget,
    /// 1 for a stage as written; k for its k-th rework round.
    pub round: u32,
    /// The id as written (`code` for `code.r2`).
    pub base_id: StageId,
    /// For a rework round: the review stage whose `request_changes` verdict
    /// this round answers. The runtime skips the stage unless that review
    /// requested changes (and skips stages that depend on a skipped round).
    pub run_if_changes_requested_by: Option<StageId>,
    /// What a failure of this stage does to the rest of the run.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// Commands that must pass after the agent finishes (`verify:`); the
    /// stage succeeds only when they do.
    #[serde(default)]
    pub verify: Vec<String>,
    /// Extra rounds the agent gets to make verify pass (`verify_rounds:`).
    #[serde(default = "default_verify_rounds")]
    pub verify_rounds: u32,
    /// Recover tool calls the model wrote as text (`text_tool_calls:`).
    #[serde(default = "default_true")]
    pub text_tool_calls: bool,
    /// A text answer is this stage's result whatever its role says (set for
    /// `orch agent`; pipeline files use the role's `result:`).
    #[serde(default)]
    pub text_result: bool,
    /// `model:` — a model id, or the name of an `orch.toml` profile (its
    /// server, key and model); it wins over the role's `model:`, `--model`
    /// wins over it. Resolved when the run starts and again on resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `escalate_to:` — the `orch.toml` profile that runs the stage once
    /// more, from its start commit, when its first attempt fails in a way a
    /// stronger model may not (see `runner::escalate`); it wins over the
    /// role's `escalate_to:`. Resolved when the run starts and on resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalate_to: Option<String>,
    /// `required:` — when false, a stage whose agent produces no result
    /// (text without `finish`, turn limit, stuck, verify never passing)
    /// ends `no_change` instead of failing the run; its partial work stays
    /// on its branch and not in the run's result.
    #[serde(default = "default_true")]
    pub required: bool,
    /// Show the files the task names in the first message
    /// (`context_files:`, default on; the role can turn it off too).
    #[serde(default = "default_true")]
    pub context_files: bool,
    /// For one replica of a best-of-N stage (`replicas:`): which one, of
    /// how many, and the stage that selects among them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<Replica>,
    /// For the stage that selects among its replicas: how it chooses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub select: Option<Select>,
    /// Sampling keys of this stage (a replica's `temperature`, `seed`);
    /// they win over the role's and the profile's.
    #[serde(default, skip_serializing_if = "crate::llm::Sampling::is_empty")]
    pub sampling: crate::llm::Sampling,
}

// The floats (a replica's temperature, the budget) are never NaN: the
// pipeline parser rejects them, so equality is an equivalence relation here.
impl Eq for Stage {}

/// The fewest and most replicas a stage may ask for (`replicas: 1` is a
/// plain stage).
pub const REPLICAS_RANGE: std::ops::RangeInclusive<u32> = 2..=8;

/// One replica of a best-of-N stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replica {
    /// The stage as written, which selects among its replicas (`code` for `code#2`).
    pub of: StageId,
    /// 1-based.
    pub k: u32,
    /// How many replicas the stage has.
    pub n: u32,
    /// The commands the `tests` strategy runs on the replica's result
    /// (`select.command`, else the stage's `verify`); empty for `reviewer`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub check: Vec<String>,
}

/// How a best-of-N stage picks its winner (`select:`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Select {
    /// `tests`, `reviewer` or `tests+reviewer`.
    pub strategy: SelectStrategy,
    /// The replicas, in order (`code#1`, …).
    pub replicas: Vec<StageId>,
    /// The commands run on each replica (`select.command`, else `verify`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
    /// The role that ran the replicas (the reviewer runs as `role`).
    pub replica_role: String,
    /// `per_replica` (each replica has the stage's `budget:`) or `shared`
    /// (the budget is split evenly among the replicas).
    #[serde(default)]
    pub budget: BudgetSplit,
}

/// A best-of-N selection strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SelectStrategy {
    /// The replica whose checks pass (ties: fewest failures, smallest diff, lowest cost).
    #[serde(rename = "tests")]
    Tests,
    /// A reviewer agent reads every replica's diff and chooses.
    #[serde(rename = "reviewer")]
    Reviewer,
    /// The reviewer chooses among the replicas whose checks pass.
    #[serde(rename = "tests+reviewer")]
    TestsReviewer,
}

impl SelectStrategy {
    /// The name as written in a pipeline file.
    pub fn as_str(self) -> &'static str {
        match self {
            SelectStrategy::Tests => "tests",
            SelectStrategy::Reviewer => "reviewer",
            SelectStrategy::TestsReviewer => "tests+reviewer",
        }
    }

    /// Parses the name as written.
    pub fn parse(s: &str) -> Option<SelectStrategy> {
        match s.trim() {
            "tests" => Some(SelectStrategy::Tests),
            "reviewer" => Some(SelectStrategy::Reviewer),
            "tests+reviewer" => Some(SelectStrategy::TestsReviewer),
            _ => None,
        }
    }

    /// Whether the replicas' checks run.
    pub fn runs_tests(self) -> bool {
        self != SelectStrategy::Reviewer
    }

    /// Whether a reviewer agent chooses.
    pub fn asks_reviewer(self) -> bool {
        self != SelectStrategy::Tests
    }
}

/// How a best-of-N stage's `budget:` applies to its replicas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetSplit {
    /// Each replica gets the whole budget (N replicas may use N times it).
    #[default]
    PerReplica,
    /// The budget is split evenly among the replicas.
    Shared,
}

/// The default number of extra rounds an agent gets to make verify pass.
pub(crate) const DEFAULT_VERIFY_ROUNDS: u32 = 2;

fn default_verify_rounds() -> u32 {
    DEFAULT_VERIFY_ROUNDS
}

fn default_true() -> bool {
    true
}

/// The most extra rounds `verify_rounds` may ask for.
pub const MAX_VERIFY_ROUNDS: u32 = 10;

/// A stage's failure policy (`on_failure:` in the pipeline file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum OnFailure {
    /// Start nothing new; stages already running finish; the run fails.
    #[default]
    Stop,
    /// Skip only the stages that depend on this one; the others go on.
    Continue,
}

/// A validated, planned pipeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pipeline {
    /// The pipeline name (the file stem).
    pub name: String,
    /// One line saying what the pipeline does.
    pub description: String,
    /// Every stage, rework rounds included, in a deterministic topological order.
    pub stages: Vec<Stage>,
    /// Where the pipeline came from: a file path, or `built-in pipelines/<name>.yaml`.
    pub origin: String,
    /// Whether stages get the repository's AGENTS.md/CLAUDE.md in their
    /// system prompt (`project_instructions:`, `--no-project-instructions`).
    #[serde(default = "yes")]
    pub project_instructions: bool,
    /// The lane setup command of the pipeline (`setup:`); it overrides the
    /// repository's `[setup]` in `orch.toml` (see `docs/lane-bootstrap.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<LaneSetup>,
    /// `react_rounds:` — how many rounds `orch react` may add to a run from
    /// its pull request's feedback (`None`: [`DEFAULT_REACT_ROUNDS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub react_rounds: Option<u32>,
}

/// Rounds `orch react` may add to a run when the pipeline sets no `react_rounds:`.
pub const DEFAULT_REACT_ROUNDS: u32 = 3;
/// The most rounds `react_rounds:` may allow.
pub const MAX_REACT_ROUNDS: u32 = 10;

/// The most a lane setup command may be given to run (`timeout_secs`).
pub const MAX_SETUP_TIMEOUT_SECS: u64 = 4 * 3600;

/// A command that prepares a lane (`npm ci`, `uv sync`), run once per lane
/// and skipped while the lockfiles it names (and the command) are unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneSetup {
    /// The command line (`bash -c`, in the lane).
    pub command: String,
    /// Lockfiles (paths relative to the repository root; `*` and `?` in the
    /// file name) whose contents key the cache; `None`: the common ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lockfiles: Option<Vec<String>>,
    /// How long it may run, in seconds (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

impl LaneSetup {
    /// What is wrong with it, as a fragment naming the key (`None`: fine).
    pub fn problem(&self) -> Option<String> {
        if self.command.trim().is_empty() {
            return Some("setup command is empty".to_owned());
        }
        if let Some(t) = self.timeout_secs
            && (t == 0 || t > MAX_SETUP_TIMEOUT_SECS)
        {
            return Some(format!(
                "setup timeout_secs must be between 1 and {MAX_SETUP_TIMEOUT_SECS}, got {t}"
            ));
        }
        for l in self.lockfiles.iter().flatten() {
            let bad = l.trim().is_empty()
                || l.starts_with('/')
                || l.split('/').any(|c| c == ".." || c.is_empty());
            if bad {
                return Some(format!(
                    "setup lockfile {l:?} must be a relative path inside the repository (no `..`, no leading `/`)"
                ));
            }
        }
        None
    }
}

fn yes() -> bool {
    true
}

impl Pipeline {
    /// The stage with id `id`.
    pub fn stage(&self, id: &str) -> Option<&Stage> {
        self.stages.iter().find(|stage| stage.id.as_str() == id)
    }

    /// The stages that directly need `id`, in plan order.
    pub fn dependents(&self, id: &StageId) -> Vec<StageId> {
        self.stages
            .iter()
            .filter(|stage| stage.needs.contains(id))
            .map(|stage| stage.id.clone())
            .collect()
    }
}

/// Whether `id` may be written as a stage id: `^[a-z0-9][a-z0-9_-]*$`, so it
/// is a valid git ref component and cannot collide with unrolled `.rN` ids.
pub fn is_valid_stage_id(id: &str) -> bool {
    let mut chars = id.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}
