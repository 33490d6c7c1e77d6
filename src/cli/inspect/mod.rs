//! Reviewing runs: `orch runs`, `show`, `review`, `diff`, `log`. All read the
//! run record and git; none changes anything.

mod log;
mod render;
mod review;
mod runs;
mod show;

pub(super) use log::LogArgs;
pub(super) use log::cmd_log;
pub(super) use review::{DiffArgs, ReviewArgs};
pub(super) use review::{cmd_diff, cmd_review};
pub(super) use runs::RunsArgs;
pub(super) use runs::cmd_runs;
pub(super) use show::ShowArgs;
pub(super) use show::cmd_show;

use super::CliError;
use crate::runlog::{RunState, StageRecord};
use std::path::Path;

fn stage<'a>(state: &'a RunState, id: &str) -> Result<&'a StageRecord, CliError> {
    state.stage(id).ok_or_else(|| {
        let known: Vec<&str> = state.stages.iter().map(|s| s.id.as_str()).collect();
        CliError::Invalid(format!(
            "failed to find stage `{id}` in run {} (stages: {})",
            state.run_id,
            known.join(", ")
        ))
    })
}

fn short(sha: Option<&str>) -> &str {
    sha.map_or("-", |c| &c[..c.len().min(10)])
}

/// The lessons a run's stages were given and those it proposed.
fn memory_report(common: &Path, s: &RunState) -> String {
    let stages: Vec<(&str, Option<&crate::git::CommitId>)> = s
        .stages
        .iter()
        .map(|st| (st.id.as_str(), st.commit.as_ref()))
        .collect();
    crate::memory::hook::run_report(common, s.run_id.as_str(), &stages)
}

pub(super) use crate::text::plural;

/// Dollars to four places, never `-0.0000` (a float sum of nothing is -0.0).
pub(super) fn usd(v: f64) -> String {
    format!("${:.4}", v + 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_singular_or_plural_and_costs_never_negative_zero() {
        assert_eq!(plural(1, "error", "errors"), "1 error");
        assert_eq!(plural(0, "error", "errors"), "0 errors");
        assert_eq!(plural(2, "turn", "turns"), "2 turns");
        let nothing: f64 = std::iter::empty::<f64>().sum();
        assert_eq!(usd(nothing), "$0.0000");
        assert_eq!(usd(-0.0), "$0.0000");
        assert_eq!(usd(0.01234), "$0.0123");
    }
}
