//! Process exit codes (also listed in the README). A leaf: `cli` maps
//! errors to them, `eval` compares a child's code with them.

/// Success.
pub const OK: i32 = 0;
/// The run ended with a failed stage (turn limit, stuck model, …).
pub const STAGE_FAILED: i32 = 1;
/// Invalid input or usage: bad flags, bad pipeline/role files, unknown names, missing files.
pub const INVALID: i32 = 2;
/// The model provider failed: auth, unknown model, unreachable, bad replies, exhausted replay.
pub const MODEL: i32 = 3;
/// A git operation failed (not a repository, unknown base, worktree trouble).
pub const GIT: i32 = 4;
/// An internal error: I/O on the run record, a bug.
pub const INTERNAL: i32 = 5;
/// The forge (GitHub, GitLab) failed: unreachable, token refused, not found.
pub const FORGE: i32 = 6;
/// `orch stage`: another worker holds the stage's claim, or won the race
/// for it; this worker changed nothing.
pub const CLAIMED: i32 = 7;
/// `orch stage`: a stage it needs has not finished yet; nothing changed.
pub const NOT_READY: i32 = 8;
/// `orch setup`: steps that change the system were not confirmed
/// (headless without `--yes`, or the user said no); they did not run.
pub const NOT_CONFIRMED: i32 = 9;
/// The run succeeded (final branch and `pr.md` written) but a stage the
/// pipeline does not require (`required: false`, e.g. the built-in `docs`)
/// produced no result: it ended `no_change`, and `pr.md` says why.
pub const OPTIONAL_NOT_DONE: i32 = 10;
/// `orch react`: the run has used every round its pipeline allows
/// (`react_rounds`, default 3) and the pull request still has feedback;
/// orch posted one "human needed" comment and changed nothing.
pub const HUMAN_NEEDED: i32 = 11;
/// Interrupted (Ctrl-C); the run is resumable.
pub const INTERRUPTED: i32 = 130;
