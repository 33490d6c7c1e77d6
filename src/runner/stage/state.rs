//! One stage being run: what every step reads and what the commit made;
//! the steps add their methods to [`StageRun`] in their own files.

use crate::agent::AgentConfig;
use crate::llm::ChatModel;
use crate::memory::hook::Injected;
use crate::pipeline::Stage;
use crate::role::Role;
use crate::runlog::{ActionLog, BaselineReport};
use crate::runner::bootstrap::Prepared;
use crate::runner::ctx::RunCtx;
use crate::runner::lanes::Lane;
use crate::tools::ToolContext;
use std::sync::Arc;
use std::time::Instant;

/// Most of a stage summary or failure reason kept in `state.json`, `pr.md`
/// and the commit message; the transcript keeps the whole reply.
pub(super) const MAX_SUMMARY_BYTES: usize = 16 * 1024;

/// One stage being run: what every step reads, and what `prepare` made.
pub(super) struct StageRun<'a> {
    pub(super) ctx: &'a RunCtx,
    pub(super) stage: &'a Stage,
    pub(super) role: &'a Role,
    pub(super) lane: &'a Lane,
    pub(super) start: &'a crate::git::CommitId,
    pub(super) progress: &'a crate::ui::ProgressHandle,
    pub(super) id: String,
    pub(super) started: Instant,
    pub(super) log: ActionLog,
    pub(super) tool_ctx: ToolContext,
    /// The stage's model, reporting streamed progress.
    pub(super) model: Arc<dyn ChatModel>,
    /// The lane's preparation (included files, setup).
    pub(super) boot: Prepared,
    pub(super) baseline: Option<BaselineReport>,
    /// The task message, before the baseline and the lessons are added.
    pub(super) task: String,
    /// The lessons given to the stage.
    pub(super) memory: Injected,
    pub(super) cfg: AgentConfig,
    /// Where the model comes from (the `stage_start`'s `model_source`).
    pub(super) model_source: String,
    /// For an escalated attempt: the model that failed before, and why
    /// (the `Orch-Escalated-From` trailer).
    pub(super) escalated_from: Option<String>,
}

/// What the `commit` step made.
pub(super) struct Committed {
    pub(super) failure: Option<String>,
    /// The failure is a `no_change` of a stage that is not `required`.
    pub(super) no_change: bool,
    pub(super) duration_ms: u64,
    pub(super) commit: crate::git::CommitId,
    pub(super) branch: String,
    /// Whether an earlier attempt of the stage failed (for memory).
    pub(super) retried_after_failure: bool,
    pub(super) stat: crate::git::DiffStat,
    /// Whether the lane's watcher said what changed (else: walked).
    pub(super) from_watch: bool,
}
