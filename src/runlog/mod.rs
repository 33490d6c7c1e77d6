//! The run record: everything about a run lives under the repository's git
//! directory, in `orch/runs/<run-id>/`.
//!
//! Layout (format `orch-run/1`, documented in `docs/run-record.md`):
//!
//! ```text
//! state.json                  run state, rewritten atomically (temp + fsync + rename)
//! issue.md                    the issue text the run was started with
//! pr.md                       PR title (first line) and body
//! stages/<stage>/actions.jsonl  append-only action log, one JSON event per line
//! stages/<stage>/transcript.json  the full conversation of the stage's agent
//! stages/<stage>/diff.patch   the stage's unified diff against its parent commit
//! control/                    asks waiting for an answer, guidance notes ([`control`])
//! ```
//!
//! Invariants: `state.json` is never half-written (readers see the old or the
//! new file); action logs are only appended to, one whole line per write, and
//! never re-read while a run is going.
//!
//! Durability: every file is replaced by a rename, so a killed process
//! leaves the old or the new file. What a run writes before its first stage
//! can end (`issue.md`, `plan.json`, `sandbox.txt`, the first states) is
//! written without an fsync and remembered; [`RunDir::write_state`], which
//! records work (a stage's result, the run's end), first fsyncs those. So the
//! start of a run costs one fsync (the `running` state, through
//! [`RunDir::write_state_alone`]) instead of one per file; a power loss before
//! the first stage ends can lose the run's plan, never a stage's result.

mod actions;
pub(crate) mod control;
mod dir;
mod error;
pub(crate) mod event;
pub(crate) mod live;
mod lock;
mod recover;
mod state;
mod verify;

pub(crate) use actions::{ActionLog, ActionObserver};
pub(crate) use dir::{
    RunDir, StateSink, StateWriter, find_run_id, install_state_sink, list_run_ids, runs_dir,
    write_atomic,
};
pub(crate) use error::RecordError;
pub(crate) use event::ActionEvent;
pub(crate) use lock::{RunLock, lock_run, refuse_if_live, run_is_live};
pub(crate) use recover::{as_shown, attempts_from_log, heal_dead_run_ref_locks, sweep_dead_starts};
pub(crate) use state::{
    Attempt, Candidate, DIGEST_LINES, RUN_FORMAT, RunSettings, RunState, RunStatus, Selection,
    SetupRecord, StageRecord, StageStatus, TokenCount,
};
pub(crate) use verify::{BaselineReport, BaselineRun, VerifyReport, VerifyRun};
