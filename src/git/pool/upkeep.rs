//! Keeping the pool in shape: trimming it to its bound, healing what a
//! killed process left half-done, and removing it all (`orch gc`).

use super::handle::Pool;
use crate::git::error::GitError;
use std::fs;
use std::path::PathBuf;

impl Pool<'_> {
    /// Trims the pool to at most `keep` slots, retiring free slots (highest
    /// numbers first) until it fits; slots in use are never touched. Returns
    /// how many were retired.
    pub fn trim(&self, keep: usize) -> Result<usize, GitError> {
        let existing = self.slots();
        let mut count = existing.len();
        let mut retired = 0;
        for &n in existing.iter().rev() {
            if count <= keep {
                break;
            }
            if let Some(lease) = self.try_lease(n)? {
                self.retire(lease)?;
                count -= 1;
                retired += 1;
            }
        }
        Ok(retired)
    }

    /// Heals the free slots a killed process left half-done: a broken
    /// worktree is removed (it is made again when needed).
    pub fn heal(&self) -> Result<(), GitError> {
        for n in self.slots() {
            let Some(_lease) = self.try_lease(n)? else {
                continue;
            };
            if !self.is_whole(n) {
                self.clear_slot(n)?;
            }
        }
        Ok(())
    }

    /// Removes (or, with `dry_run`, lists) every free slot completely: its
    /// worktree, admin entry and lease; then the trash. Slots in use are kept
    /// and returned in the second list.
    pub fn remove_all(&self, dry_run: bool) -> Result<(Vec<PathBuf>, Vec<PathBuf>), GitError> {
        let (mut removed, mut in_use) = (Vec::new(), Vec::new());
        for n in self.slots() {
            let path = self.slot_path(n);
            let Some(lease) = self.try_lease(n)? else {
                in_use.push(path);
                continue;
            };
            if !dry_run {
                self.clear_slot(n)?;
                drop(lease);
                let _ = fs::remove_file(self.lease_path(n));
            }
            removed.push(path);
        }
        if !dry_run {
            self.empty_trash()?;
            if in_use.is_empty() {
                // Leases of slots that no longer exist.
                for entry in fs::read_dir(self.pool_dir())
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    let ext = entry.path().extension().map(|e| e.to_os_string());
                    if ext.is_some_and(|e| {
                        e == "lease" || e == "clean" || e == "cleaning" || e == "held" || e == "tmp"
                    }) {
                        let _ = fs::remove_file(entry.path());
                    }
                }
                let _ = fs::remove_dir(self.pool_dir());
            }
        }
        Ok((removed, in_use))
    }
}
