//! Finding a recorded run: `last` or an id, its directory and state, and
//! what it cost. Shared by the review commands and `resume`/`rollback`.

use super::error::CliError;
use crate::git;
use crate::ids::RunId;
use crate::runlog::{self, RunState};
use std::path::{Path, PathBuf};

/// The run id for `last` (the newest run), or the id as given, or the one
/// id a unique prefix starts (an ambiguous prefix names its candidates). A
/// string that cannot be a run id is an unknown run, reported with the runs
/// that exist.
pub(super) fn resolve_run_id(repo: &Path, run: &str) -> Result<RunId, CliError> {
    let info = git::open_repo(repo)?;
    if run == "last" {
        return runlog::list_run_ids(&info.common_dir)
            .into_iter()
            .find_map(|id| id.parse().ok())
            .ok_or_else(|| {
                CliError::Invalid(format!(
                    "failed to find the last run: the repository at {} has no runs (another repository: --repo DIR)",
                    info.workdir.display()
                ))
            });
    }
    let run = &runlog::find_run_id(&info.common_dir, run)?;
    run.parse::<RunId>().map_err(|bad| {
        match runlog::RunDir::open(&info.common_dir, run) {
            Err(unknown) => unknown.into(),
            // A record under a name orch never makes (created by hand).
            Ok(_) => CliError::Invalid(format!("failed to {bad}")),
        }
    })
}

/// The repository's common git dir, the run's record directory and its state.
pub(super) fn open(repo: &Path, run: &str) -> Result<(PathBuf, PathBuf, RunState), CliError> {
    let info = git::open_repo(repo)?;
    let run_id = resolve_run_id(repo, run)?;
    let dir = runlog::RunDir::open(&info.common_dir, run_id.as_str())?;
    let state = dir.read_state()?;
    Ok((info.common_dir, dir.root, state))
}

/// The run's cost: the sum over stages that ran, "unknown" when any of
/// them ran on a model without a known price.
pub(super) fn run_cost(s: &RunState) -> String {
    let running = s
        .stages
        .iter()
        .any(|st| st.status == runlog::StageStatus::Running && st.turns > 0);
    if running {
        // Its price is applied when it ends; "$0" so far would be a lie.
        return "unknown until the running stage ends".to_owned();
    }
    run_cost_usd(s).map_or("unknown".to_owned(), super::output::usd)
}

/// The run's cost in USD (earlier attempts included), `None` when unknown.
/// Never `-0.0`: the float sum of nothing is negative zero.
pub(super) fn run_cost_usd(s: &RunState) -> Option<f64> {
    let stages: Option<f64> = s
        .stages
        .iter()
        .filter(|st| st.turns > 0)
        .map(|st| st.budget.as_ref().and_then(|b| b.used.cost_usd))
        .sum();
    let attempts: Option<f64> = s
        .stages
        .iter()
        .flat_map(|st| &st.attempts)
        .filter(|a| a.turns > 0)
        .map(|a| a.cost_usd)
        .sum();
    Some(stages? + attempts? + 0.0)
}
