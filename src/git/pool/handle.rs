//! The pool's handle, [`Pool`], and where its slots, leases and trash live.

use crate::git::repo::Repo;
use std::path::PathBuf;

/// The pool of a repository: [`Repo::pool`]. Its methods are the pool's
/// operations; it reads as the [`Repo`] it belongs to (the handle is
/// shared, not re-opened).
#[derive(Debug, Clone, Copy)]
pub struct Pool<'r>(&'r Repo);

impl Repo {
    /// The repository's pool of warm lanes.
    pub fn pool(&self) -> Pool<'_> {
        Pool(self)
    }
}

impl std::ops::Deref for Pool<'_> {
    type Target = Repo;
    fn deref(&self) -> &Repo {
        self.0
    }
}

impl Pool<'_> {
    /// The directory holding the pool's slots and their leases.
    pub fn pool_dir(&self) -> PathBuf {
        let common_dir = self.common_dir();
        common_dir.join("orch").join("pool")
    }

    /// The directory a slot's files are renamed into before they are deleted.
    pub fn trash_dir(&self) -> PathBuf {
        let common_dir = self.common_dir();
        common_dir.join("orch").join("trash")
    }

    /// The worktree directory of slot `n`.
    pub fn slot_path(&self, n: usize) -> PathBuf {
        self.pool_dir().join(format!("lane-{n}"))
    }
}

/// The admin name of slot `n`.
pub fn slot_name(n: usize) -> String {
    format!("orch-pool-{n}")
}

impl Pool<'_> {
    pub(super) fn lease_path(&self, n: usize) -> PathBuf {
        self.pool_dir().join(format!("lane-{n}.lease"))
    }
}
