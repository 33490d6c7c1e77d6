//! One run's context, shared by its stages, and what a stage hands back.

use super::error::RunError;
use super::session::{Plan, Session};
use crate::ids::Verdict;
use crate::pipeline::LaneSetup;
use crate::runlog::{RunDir, TokenCount};
use std::path::PathBuf;

/// Immutable facts of a run, shared with stage tasks.
pub(super) struct RunCtx {
    pub(super) run_id: crate::ids::RunId,
    pub(super) common: PathBuf,
    pub(super) run_dir: RunDir,
    pub(super) plan: Plan,
    pub(super) issue: String,
    pub(super) session: Session,
    pub(super) allowlist: Vec<String>,
    pub(super) base_commit: crate::git::CommitId,
    /// What every stage's lane gets before its agent starts.
    pub(super) bootstrap: Bootstrap,
    /// Held while this process drives the run.
    pub(super) _lock: crate::runlog::RunLock,
    /// Run only this stage (`orch stage`): no other stage starts, none is
    /// marked skipped or blocked, and the run is not finished.
    pub(super) only: Option<String>,
    /// What the run's stages used of its budget (stages charge it as they end).
    pub(super) ledger: std::sync::Mutex<crate::budget::RunLedger>,
}

/// What a stage task reports back to the scheduler.
pub(super) struct StageDone {
    pub(super) id: String,
    pub(super) result: Result<StageOutcome, RunError>,
}

pub(super) struct StageOutcome {
    pub(super) budget: crate::budget::BudgetReport,
    pub(super) commit: crate::git::CommitId,
    pub(super) branch: String,
    pub(super) failure: Option<String>,
    pub(super) model_failed: bool,
    pub(super) internal_failed: bool,
    pub(super) verdict: Option<Verdict>,
    pub(super) verdict_from_text: bool,
    pub(super) finish_from_text: bool,
    pub(super) approved_despite_failed_verify: bool,
    /// The stage produced no result but is not `required`: `failure` is
    /// its reason, and it ends `no_change` instead of failing the run.
    pub(super) no_change: bool,
    pub(super) verify: Option<crate::runlog::VerifyReport>,
    pub(super) setup: Option<crate::runlog::SetupRecord>,
    pub(super) baseline: Option<crate::runlog::BaselineReport>,
    pub(super) summary: String,
    pub(super) turns: u32,
    pub(super) tokens: TokenCount,
    pub(super) duration_ms: u64,
    pub(super) digest: Vec<String>,
    /// The model the attempt asked, and where it comes from.
    pub(super) model: String,
    pub(super) model_source: String,
    /// Why a failed attempt may be escalated (`runner::escalate::cause`).
    pub(super) cause: Option<&'static str>,
    /// Earlier attempts of the stage run by this process (an escalated
    /// stage's first attempt), for the stage record.
    pub(super) earlier: Vec<crate::runlog::Attempt>,
    /// A replica's selection check (`runner::select`).
    pub(super) check: Option<Box<crate::runlog::BaselineReport>>,
    /// A best-of-N stage's choice (boxed: rare, and every stage's outcome
    /// travels through deep futures).
    pub(super) selection: Option<Box<crate::runlog::Selection>>,
    /// A best-of-N reviewer's `finish` choice (1-based).
    pub(super) choice: Option<u32>,
}

/// A run's lane bootstrap, read once when the run starts (or resumes).
#[derive(Debug, Default)]
pub(crate) struct Bootstrap {
    /// The user's working tree (where included files are copied from).
    pub(super) workdir: PathBuf,
    /// Included files, relative to the root, sorted.
    pub(super) include: Vec<String>,
    /// The setup command and where it was written.
    pub(super) setup: Option<(LaneSetup, String)>,
}
