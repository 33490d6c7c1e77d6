//! The git layer: one linked worktree per run, one commit per stage, branches
//! that record every stage, and diffs between any two of them.
//!
//! Invariants:
//! - The user's working tree, index, `HEAD` and current branch are never
//!   written. Everything orch changes lives in its own linked worktree (under the
//!   common git dir) and in `refs/heads/orch/…`. Functions that write files or an
//!   index ([`commit_all`], [`reset_worktree`]) refuse anything but a linked
//!   worktree, and [`Repo::set_branch`] refuses the branch the user has checked out.
//! - The operations on the user's repository are methods of one handle,
//!   [`Repo`], which opens the repository (reads its config files and refs)
//!   on first use and keeps it: make one per blocking task and pass `&Repo`
//!   down. Everything here is synchronous (libgit2 blocks, and a handle
//!   cannot be shared between threads), so async callers run it through
//!   `spawn_blocking`.
//! - Work is proportional to what changed as far as libgit2 allows: staging
//!   walks the worktree once, trusting the index's stat cache for unchanged files.

pub(crate) mod cli;
mod commit;
mod diff;
mod discover;
mod error;
pub mod gc;
pub mod ignored;
mod merge;
mod open;
pub mod pool;
mod refs;
mod repo;
pub mod shadow;
pub mod snapshot;
mod staging;
mod status;
pub mod watch;
mod worktree;

#[cfg(test)]
pub(crate) mod testutil;

pub use error::GitError;
pub(crate) use error::{git_err, io_err};
pub(crate) use open::signature;

pub use commit::commit_all;
pub use diff::{Diff, DiffStat, FileStat};
pub use discover::{RepoInfo, open_repo, open_repo_at};
pub use merge::MergeOutcome;
pub use repo::{CommitId, InvalidCommitId, Repo};
pub use shadow::Quarantine;
pub use staging::{Staged, stage_tree, stage_tree_held};
pub use status::{changed_paths, status_paths};
pub use worktree::{AdminLock, clean_moved, move_tracked, move_worktree, reset_worktree};

/// The most bytes of parsed objects (commits, trees) libgit2 keeps cached
/// across all open repositories. Its default, 256 MB, let the cache grow
/// with the repository: a checkout, a tree walk or a diff of a 100,000-file
/// commit parses every tree once, and each later lookup of the same object
/// costs only a re-read from the (mapped) pack.
pub const OBJECT_CACHE_MAX_BYTES: usize = 4 << 20;

/// Size of one window libgit2 maps of a pack file (its default: 1 GB).
pub const PACK_WINDOW_BYTES: usize = 2 << 20;

/// The most bytes of pack files libgit2 keeps mapped at once (its default:
/// 8 GB). Mapped pages of a pack count in the process's RSS once read; a
/// checkout reads every blob of the commit, so without a bound the whole
/// pack stayed resident (8.5 MB of a 100,000-file repository's pack).
pub const PACK_MAPPED_MAX_BYTES: usize = 4 << 20;

/// Caps the memory libgit2 keeps for itself: parsed objects
/// ([`OBJECT_CACHE_MAX_BYTES`]) and mapped packs ([`PACK_MAPPED_MAX_BYTES`]),
/// so a run's peak memory does not grow with the repository.
///
/// # Safety
///
/// Writes libgit2's process-wide options without synchronisation: call it
/// once, before any thread that might use libgit2 exists.
pub unsafe fn limit_memory() -> Result<(), GitError> {
    let size = libc::ssize_t::try_from(OBJECT_CACHE_MAX_BYTES).unwrap_or(libc::ssize_t::MAX);
    // SAFETY: the caller guarantees no other thread uses libgit2 yet.
    unsafe { git2::opts::set_cache_max_size(size) }
        .map_err(git_err("cap libgit2's object cache"))?;
    // SAFETY: the caller guarantees no other thread uses libgit2 yet, so
    // these unsynchronised writes of its globals race with nothing.
    unsafe {
        git2::opts::set_mwindow_size(PACK_WINDOW_BYTES)
            .and_then(|()| git2::opts::set_mwindow_mapped_limit(PACK_MAPPED_MAX_BYTES))
    }
    .map_err(git_err("cap libgit2's pack windows"))?;
    Ok(())
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod watch_tests;
