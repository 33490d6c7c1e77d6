//! Keeping the pool in shape: trimming it to its bound, healing what a
//! killed process left half-done, and removing it all (`orch gc`).

use super::lease::try_lease;
use super::slots::{clear_slot, is_whole, retire, slots};
use super::trash::empty_trash;
use super::{lease_path, pool_dir, slot_path};
use crate::git::GitError;
use std::fs;
use std::path::{Path, PathBuf};

/// Trims the pool to at most `keep` slots, retiring free slots (highest
/// numbers first) until it fits; slots in use are never touched. Returns
/// how many were retired.
pub fn trim(common_dir: &Path, keep: usize) -> Result<usize, GitError> {
    let existing = slots(common_dir);
    let mut count = existing.len();
    let mut retired = 0;
    for &n in existing.iter().rev() {
        if count <= keep {
            break;
        }
        if let Some(lease) = try_lease(common_dir, n)? {
            retire(common_dir, lease)?;
            count -= 1;
            retired += 1;
        }
    }
    Ok(retired)
}

/// Heals the free slots a killed process left half-done: a broken
/// worktree is removed (it is made again when needed).
pub fn heal(common_dir: &Path) -> Result<(), GitError> {
    for n in slots(common_dir) {
        let Some(_lease) = try_lease(common_dir, n)? else {
            continue;
        };
        if !is_whole(common_dir, n) {
            clear_slot(common_dir, n)?;
        }
    }
    Ok(())
}

/// Removes (or, with `dry_run`, lists) every free slot completely: its
/// worktree, admin entry and lease; then the trash. Slots in use are kept
/// and returned in the second list.
pub fn remove_all(
    common_dir: &Path,
    dry_run: bool,
) -> Result<(Vec<PathBuf>, Vec<PathBuf>), GitError> {
    let (mut removed, mut in_use) = (Vec::new(), Vec::new());
    for n in slots(common_dir) {
        let path = slot_path(common_dir, n);
        let Some(lease) = try_lease(common_dir, n)? else {
            in_use.push(path);
            continue;
        };
        if !dry_run {
            clear_slot(common_dir, n)?;
            drop(lease);
            let _ = fs::remove_file(lease_path(common_dir, n));
        }
        removed.push(path);
    }
    if !dry_run {
        empty_trash(common_dir)?;
        if in_use.is_empty() {
            // Leases of slots that no longer exist.
            for entry in fs::read_dir(pool_dir(common_dir))
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
            let _ = fs::remove_dir(pool_dir(common_dir));
        }
    }
    Ok((removed, in_use))
}
