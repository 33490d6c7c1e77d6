//! What the review commands share: finding a stage of a run, a short
//! commit id, and the memory report.

use crate::cli::error::CliError;
use crate::runlog::{RunState, StageRecord};
use std::path::Path;

pub(super) fn stage<'a>(state: &'a RunState, id: &str) -> Result<&'a StageRecord, CliError> {
    state.stage(id).ok_or_else(|| {
        let known: Vec<&str> = state.stages.iter().map(|s| s.id.as_str()).collect();
        CliError::Invalid(format!(
            "failed to find stage `{id}` in run {} (stages: {})",
            state.run_id,
            known.join(", ")
        ))
    })
}

pub(super) fn short(sha: Option<&str>) -> &str {
    sha.map_or("-", |c| &c[..c.len().min(10)])
}

/// The lessons a run's stages were given and those it proposed.
pub(super) fn memory_report(common: &Path, s: &RunState) -> String {
    let stages: Vec<(&str, Option<&crate::git::CommitId>)> = s
        .stages
        .iter()
        .map(|st| (st.id.as_str(), st.commit.as_ref()))
        .collect();
    crate::memory::hook::run_report(common, &s.run_id, &stages)
}
