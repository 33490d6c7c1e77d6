//! Pipelines: a YAML file describing a DAG of stages, each run by one role.
//!
//! [`parse_pipeline`] reads the file ([`spec`]), checks it (stage ids, roles,
//! `needs`, cycles, rework targets — every error located at `file:line:column`)
//! and plans it ([`dag`]): bounded rework loops are unrolled into extra rounds
//! so the plan is always acyclic, and stages come out in a deterministic
//! topological order.
//!
//! Invariants of a [`Pipeline`]: every `needs` entry names an earlier stage in
//! `stages`; ids are unique; original ids match `^[a-z0-9][a-z0-9_-]*$` and
//! unrolled rounds add a `.rN` suffix (`code.r2`).

mod dag;
mod error;
mod mermaid;
mod spec;
#[cfg(test)]
mod tests;

pub use error::SpecError;

use crate::budget::Budget;
use crate::ids::StageId;
use serde::{Deserialize, Serialize};
use spec::PipelineSpec;
use std::path::Path;

/// The most extra rounds a rework loop may ask for.
pub const MAX_REWORK_ROUNDS: u32 = 5;

/// One planned stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
}

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

    /// The plan as a Mermaid `flowchart TD`; conditional rework edges are dotted.
    pub fn to_mermaid(&self) -> String {
        mermaid::render(self)
    }
}

/// Parses, checks and plans a pipeline file.
///
/// `origin` names the file in errors; when it ends in `.yaml`/`.yml`, a
/// `name:` key must equal the file stem (and defaults to it). `known_roles`
/// are the role names a stage may use.
pub fn parse_pipeline(
    text: &str,
    origin: &str,
    known_roles: &[String],
) -> Result<Pipeline, SpecError> {
    let spec: PipelineSpec =
        serde_saphyr::from_str(text).map_err(|err| SpecError::from_yaml(origin, &err, 0))?;

    let stem = pipeline_file_stem(origin);
    let name = match (&spec.name, stem) {
        (Some(name), Some(stem)) if name.value != stem => {
            return Err(SpecError::at(
                origin,
                &name.referenced,
                0,
                format!(
                    "pipeline name \"{}\" must equal the file name \"{stem}\"",
                    name.value
                ),
            ));
        }
        (Some(name), _) if name.value.trim().is_empty() => {
            return Err(SpecError::at(
                origin,
                &name.referenced,
                0,
                "pipeline name is empty",
            ));
        }
        (Some(name), _) => name.value.clone(),
        (None, Some(stem)) => stem.to_owned(),
        (None, None) => return Err(SpecError::new(origin, 1, 1, "missing field `name`")),
    };

    let stages = dag::plan(&spec, origin, known_roles)?;
    let setup = match &spec.setup {
        Some(s) => match s.value.0.problem() {
            Some(why) => return Err(SpecError::at(origin, &s.referenced, 0, why)),
            None => Some(s.value.0.clone()),
        },
        None => None,
    };
    Ok(Pipeline {
        name,
        description: spec.description.trim().to_owned(),
        stages,
        origin: origin.to_owned(),
        project_instructions: spec.project_instructions.unwrap_or(true),
        setup,
    })
}

/// The file stem of `origin` when it names a `.yaml`/`.yml` file.
fn pipeline_file_stem(origin: &str) -> Option<&str> {
    let path = Path::new(origin.strip_prefix("built-in ").unwrap_or(origin));
    let ext = path.extension()?;
    if ext != "yaml" && ext != "yml" {
        return None;
    }
    path.file_stem()?.to_str()
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
