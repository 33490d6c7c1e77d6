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
mod ctx;
mod error;
mod escalate;
mod flow;
mod lanes;
pub(crate) mod models;
mod pr;
mod react;
mod resume;
mod schedule;
mod select;
mod session;
mod stage;
mod start;

pub(crate) use flow::skip_reason;
pub(crate) use react::{ReactStages, add_react_round, end_react_round};
pub(crate) use resume::{ResumeOptions, load_run, resume_run, rollback_run};
pub(crate) use start::{finish_distributed, plan_run, run_pipeline};

pub(crate) use error::RunError;
pub(crate) use session::{DEFAULT_MAX_PARALLEL, Plan, RunOptions, RunSummary, Session};
