//! The repository's pool of warm lanes: linked worktrees that outlive the
//! run that made them, so the next run (or stage) starts from a checkout
//! that only needs the difference to its start commit.
//!
//! Slot `N` is the worktree `<git>/orch/pool/lane-N` (admin name
//! `orch-pool-N`, so `git worktree list` shows it as orch's), always with a
//! detached `HEAD`. Whoever uses a slot holds its lease: an exclusive
//! `flock` on `<git>/orch/pool/lane-N.lease`, taken without waiting, held
//! for the lane's whole use and dropped by the kernel when the process dies.
//! So two runs on one repository never use the same lane, and a slot whose
//! lease can be taken belongs to nobody: whatever it holds (a dead run's
//! half-written files, a half-made worktree) may be cleaned or removed.
//!
//! A slot taken warm is moved by git ([`super::move_worktree`]: `git checkout -f
//! --detach <start>` rewrites only what differs and discards local
//! changes, `git clean -ffdx` removes untracked and ignored files), so it
//! holds exactly what a fresh `git worktree add --detach` would, whatever
//! its last user left in it; a slot that is missing, broken or that git
//! cannot move is (re)created from scratch. Removing a slot off the exit
//! path ([`Pool::retire`]) renames it into `<git>/orch/trash/` and drops its admin
//! entry (both O(1)); the files go later ([`Pool::empty_trash`], run in the
//! background or by `orch gc`).
//!
//! A kill -9 at any point leaves nothing a later taker trips on: the lease
//! is the kernel's, and a taker removes the lock files (`index.lock`,
//! `HEAD.lock`) a dead holder left in the slot's admin dir before git
//! touches it.

mod handle;
mod lease;
mod slots;
mod take;
mod trash;
mod upkeep;

pub use handle::{Pool, slot_name};
pub use lease::Lease;
pub use take::Readied;
