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
mod replicas;
mod spec;
#[cfg(test)]
mod tests;
mod types;

pub use error::SpecError;
pub use replicas::replica_id;
pub use types::{
    BudgetSplit, DEFAULT_REACT_ROUNDS, LaneSetup, MAX_REACT_ROUNDS, MAX_REWORK_ROUNDS,
    MAX_SETUP_TIMEOUT_SECS, MAX_VERIFY_ROUNDS, OnFailure, Pipeline, REPLICAS_RANGE, Replica,
    Select, SelectStrategy, Stage, is_valid_stage_id,
};

use spec::PipelineSpec;
use std::path::Path;

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
    if let Some(r) = &spec.react_rounds
        && !(1..=types::MAX_REACT_ROUNDS).contains(&r.value)
    {
        return Err(SpecError::at(
            origin,
            &r.referenced,
            0,
            format!(
                "react_rounds must be between 1 and {}, got {}",
                types::MAX_REACT_ROUNDS,
                r.value
            ),
        ));
    }
    Ok(Pipeline {
        name,
        description: spec.description.trim().to_owned(),
        stages,
        origin: origin.to_owned(),
        project_instructions: spec.project_instructions.unwrap_or(true),
        setup,
        react_rounds: spec.react_rounds.as_ref().map(|r| r.value),
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
