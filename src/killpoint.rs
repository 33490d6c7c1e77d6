//! Kill points: a test-only hook that SIGKILLs the process at a named step of
//! the start-up and stage-commit paths, so tests can prove that `orch resume`
//! finishes a run from every one of them without depending on timing luck.
//!
//! `ORCH_TEST_KILL_AT=<step>` kills at the first time `<step>` is reached;
//! `ORCH_TEST_KILL_AT=<step>:<n>` at the `n`-th time. The variable is read
//! only in debug builds (`cfg(debug_assertions)`): a release build ignores
//! it, so it can never be used to kill a user's run. The steps are listed in
//! [`STEPS`] and documented in `docs/faults.md`.

/// Every named step, in the order a run reaches them.
pub const STEPS: &[&str] = &[
    // Start-up: the run dir and its lock exist, no state yet.
    "run-dir-created",
    // `state.json` says `starting`; no lane, ref or worktree yet.
    "state-starting",
    // git registered a lane's worktree (under git's name for it); it is not
    // renamed to orch's name nor checked out yet.
    "lane-branch-created",
    // A lane's worktree was added.
    "worktree-added",
    // `state.json` says `running`.
    "state-running",
    // A stage's commit object is written; no branch points at it yet.
    "stage-committed",
    // A stage's branch points at its commit; the state does not say so yet.
    "stage-branch-set",
    // The state records a finished stage.
    "stage-recorded",
    // Every stage is done; the final branch and PR text are not written yet.
    "run-finishing",
    // A pooled lane taken by a run was moved by `git checkout -f`; its
    // strays are not cleaned yet (reached only with the lane pool on).
    "pool-lane-moved",
    // The lanes of a finished run are removed; the state is not final yet.
    "lanes-removed",
];

/// The steps only a run with the lane pool on reaches.
pub const POOL_ONLY: &[&str] = &["pool-lane-moved"];

/// The environment variable naming the step to kill at.
pub const KILL_AT_VAR: &str = "ORCH_TEST_KILL_AT";

/// Marks that `step` was reached: SIGKILLs this process if the test hook asks
/// for it (debug builds only; a no-op in release builds).
pub(crate) fn reached(step: &str) {
    #[cfg(debug_assertions)]
    debug::reached(step);
    #[cfg(not(debug_assertions))]
    let _ = step;
}

#[cfg(debug_assertions)]
mod debug {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};

    static TARGET: OnceLock<Option<(String, u32)>> = OnceLock::new();
    static SEEN: AtomicU32 = AtomicU32::new(0);

    fn target() -> &'static Option<(String, u32)> {
        TARGET.get_or_init(|| {
            let spec = std::env::var(super::KILL_AT_VAR).ok()?;
            let (step, n) = match spec.rsplit_once(':') {
                Some((s, n)) => (s.to_owned(), n.parse().ok()?),
                None => (spec, 1),
            };
            Some((step, n))
        })
    }

    pub(super) fn reached(step: &str) {
        let Some((want, n)) = target() else { return };
        if want != step {
            return;
        }
        if SEEN.fetch_add(1, Ordering::SeqCst) + 1 == *n {
            let me = rustix::process::getpid();
            let _ = rustix::process::kill_process(me, rustix::process::Signal::KILL);
        }
    }
}
