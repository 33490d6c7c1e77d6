//! The slot table: which slots exist, whether one is a whole worktree,
//! and removing or retiring one whose lease is held.

use super::handle::Pool;
use super::handle::slot_name;
use super::lease::Lease;
use crate::git::error::{GitError, io_err};
use std::fs;
use std::path::Path;

impl Pool<'_> {
    /// The slots that exist in some form (a worktree directory or an admin
    /// entry), sorted.
    pub fn slots(&self) -> Vec<usize> {
        let common_dir = self.common_dir();
        let mut found: Vec<usize> = Vec::new();
        let number = |name: &str, prefix: &str| {
            name.strip_prefix(prefix)
                .filter(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|k| k.parse().ok())
        };
        for (dir, prefix) in [
            (self.pool_dir(), "lane-"),
            (common_dir.join("worktrees"), "orch-pool-"),
        ] {
            for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
                if let Some(n) = entry.file_name().to_str().and_then(|f| number(f, prefix))
                    && entry.path().is_dir()
                {
                    found.push(n);
                }
            }
        }
        found.sort_unstable();
        found.dedup();
        found
    }

    /// Whether slot `n` is a whole worktree: its admin entry is complete and
    /// points at its directory, which points back.
    pub(super) fn is_whole(&self, n: usize) -> bool {
        let common_dir = self.common_dir();
        let admin = common_dir.join("worktrees").join(slot_name(n));
        let path = self.slot_path(n);
        let gitdir = fs::read_to_string(admin.join("gitdir")).unwrap_or_default();
        // The lane's `.git` must name this admin dir: a kill between renaming
        // git's admin dir to orch's name and rewriting `.git` leaves it naming
        // git's (gone) one, which git run with an explicit git dir would not
        // notice but libgit2 opening the lane would.
        let dot_git = fs::read_to_string(path.join(".git")).unwrap_or_default();
        let names_admin = dot_git
            .trim_end()
            .strip_prefix("gitdir: ")
            .is_some_and(|d| {
                let d = Path::new(d);
                d == admin || std::path::absolute(d).ok() == std::path::absolute(&admin).ok()
            });
        admin.join("commondir").is_file()
            && admin.join("HEAD").is_file()
            && Path::new(gitdir.trim()) == path.join(".git")
            && path.join(".git").is_file()
            && names_admin
    }

    /// The commit slot `n`'s detached `HEAD` names, if it is detached.
    pub(super) fn slot_head(&self, n: usize) -> Option<String> {
        let common_dir = self.common_dir();
        let head = fs::read_to_string(common_dir.join("worktrees").join(slot_name(n)).join("HEAD"));
        head.ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| h.len() == 40)
    }

    /// Removes whatever exists of slot `n` (its lease held): worktree, admin
    /// entry, add branch.
    pub(super) fn clear_slot(&self, n: usize) -> Result<(), GitError> {
        let common_dir = self.common_dir();
        let (name, path) = (slot_name(n), self.slot_path(n));
        let admin = common_dir.join("worktrees").join(&name);
        if fs::symlink_metadata(&admin).is_ok() {
            if !self.is_whole(n) {
                // Half-made or pointing elsewhere: libgit2 may not open it.
                let _admin = self.admin_lock(true)?;
                fs::remove_dir_all(&admin)
                    .map_err(io_err("remove the broken worktree admin directory", &admin))?;
            } else {
                self.remove_worktree(&name, &path)?;
            }
        }
        if fs::symlink_metadata(&path).is_ok() {
            fs::remove_dir_all(&path).map_err(io_err("remove the pooled lane directory", &path))?;
        }
        self.remove_shadow(&name)
    }

    /// Takes slot `n` out of the pool at once (its lease held): its directory
    /// is renamed into the trash and its admin entry removed, so `git worktree
    /// list` forgets it; the files are deleted by [`Pool::empty_trash`].
    pub fn retire(&self, lease: Lease) -> Result<(), GitError> {
        let common_dir = self.common_dir();
        if fs::symlink_metadata(&lease.path).is_ok() {
            self.move_into_trash(&lease.path, &lease.name)
                .map_err(io_err("move the lane into the trash", &lease.path))?;
        }
        let admin = common_dir.join("worktrees").join(&lease.name);
        if fs::symlink_metadata(&admin).is_ok() {
            let _admin = self.admin_lock(true)?;
            fs::remove_dir_all(&admin)
                .map_err(io_err("remove the worktree admin directory", &admin))?;
        }
        let _ = fs::remove_file(self.lease_path(lease.slot));
        self.remove_shadow(&lease.name)
    }
}
