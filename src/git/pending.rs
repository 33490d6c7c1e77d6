//! The lane's lazy index: a commit from a watcher's marks
//! ([`super::commit_edits`]) does not rewrite the lane's whole index (at
//! 100,000 files reading and writing it is ~100–230 ms and most of a run's
//! peak memory) but appends the paths it changed to a pending record in the
//! lane's admin directory (`<common>/worktrees/<name>/orch-index-pending`).
//! Every reader of a lane's index applies the record first
//! ([`apply_pending_index`]): the next stage's acquire (before any tool,
//! setup or verify runs), the stage end's walks, the pool's take and its
//! background clean-up.
//!
//! The record is written without fsync. Lost (a crash), the index is
//! merely stale for those paths: its entries still name the parent's blobs
//! while `HEAD` and the files hold the new ones. Every walk that readies a
//! lane reports such a path as differing from `HEAD` and checks it out
//! again, which rewrites its index entry; a hard reset rewrites the whole
//! index. Nothing trusts the index without a walk except a stamped lane,
//! and a stamp is only written after such a walk found the lane clean, or
//! by the hand-back's seal ([`super::pool::seal`]) of a lane whose index
//! only orch wrote since it was taken clean. The seal leaves the record in
//! place (the stamp records its length) for the next taker's readying.
//!
//! Format: one entry per path, `A` (the file exists: add it from disk) or
//! `D` (it is gone: remove it) then the raw path, each ended by a NUL
//! (git paths never hold one).

use super::index_file::{DiskEntry, Patched, patch_index};
use super::{GitError, git_err, io_err, open_linked_worktree};
use git2::{ObjectType, Oid, Repository};
use std::io::Write as _;
use std::path::{Path, PathBuf};

pub(super) const RECORD: &str = "orch-index-pending";

fn record_path(repo: &Repository) -> PathBuf {
    repo.path().join(RECORD)
}

/// Appends `paths` (raw, `/`-separated; `true`: the file is there) to the
/// pending record of the linked worktree `repo`. No fsync (see the module
/// docs).
pub(super) fn record_pending<'p>(
    repo: &Repository,
    paths: impl IntoIterator<Item = (&'p [u8], bool)>,
) -> Result<(), GitError> {
    let mut buf = Vec::new();
    for (p, present) in paths {
        buf.push(if present { b'A' } else { b'D' });
        buf.extend_from_slice(p);
        buf.push(0);
    }
    if buf.is_empty() {
        return Ok(());
    }
    let path = record_path(repo);
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(&buf))
        .map_err(io_err("write the lane's pending index record", &path))
}

/// Brings the index of the linked worktree at `worktree` up to its pending
/// record, if it has one (else one `stat`), and deletes the record.
pub fn apply_pending_index(worktree: &Path) -> Result<(), GitError> {
    apply_pending_in(&open_linked_worktree(worktree)?)
}

/// [`apply_pending_index`] of an open linked worktree.
pub(super) fn apply_pending_in(repo: &Repository) -> Result<(), GitError> {
    let path = record_path(repo);
    let record = match std::fs::read(&path) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("read the lane's pending index record", &path)(e)),
    };
    let Some(workdir) = repo.workdir() else {
        return Ok(());
    };
    match patch_streamed(repo, workdir, &record)? {
        Patched::Done(_) => return discard_pending_in(repo),
        Patched::Fallback(why) => tracing::debug!(why, "the lane's index is updated by libgit2"),
    }
    let what = format!("update the index of {}", workdir.display());
    let mut index = repo.index().map_err(git_err(&what))?;
    for entry in record.split(|&b| b == 0).filter(|e| !e.is_empty()) {
        let (kind, p) = (entry[0], super::commit::rel_path(&entry[1..]));
        // A later entry for the same path wins; the disk decides at the end.
        let present = kind == b'A'
            && workdir
                .join(p)
                .symlink_metadata()
                .is_ok_and(|m| !m.is_dir());
        let done = if present {
            index.add_path(p)
        } else {
            match index.remove_path(p) {
                Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(()),
                r => r,
            }
        };
        done.map_err(git_err(&what))?;
    }
    index.write().map_err(git_err(&what))?;
    discard_pending_in(repo)
}

/// Applies `record` to the index file of `repo` in one streamed pass
/// ([`patch_index`]): each path's entry is made from the file on disk now
/// (its `lstat` and blob id, hashed without filters, which is why any
/// converting configuration goes through libgit2).
fn patch_streamed(repo: &Repository, workdir: &Path, record: &[u8]) -> Result<Patched, GitError> {
    use std::os::unix::fs::PermissionsExt;
    if super::worktree::filters_configured(repo)? {
        return Ok(Patched::Fallback("converting filters are configured"));
    }
    let config = repo
        .config()
        .map_err(git_err("read the repository configuration"))?;
    if !config.get_bool("core.filemode").unwrap_or(true)
        || !config.get_bool("core.symlinks").unwrap_or(true)
    {
        return Ok(Patched::Fallback("core.filemode or core.symlinks is false"));
    }
    let mut paths: Vec<&[u8]> = record
        .split(|&b| b == 0)
        .filter(|e| e.len() > 1)
        .map(|e| &e[1..])
        .collect();
    paths.sort_unstable();
    paths.dedup();
    let mut changes = Vec::with_capacity(paths.len());
    for p in paths {
        let full = workdir.join(super::commit::rel_path(p));
        let hash =
            |r: Result<Oid, git2::Error>| r.map_err(git_err(format!("hash {}", full.display())));
        let entry = match std::fs::symlink_metadata(&full) {
            Ok(m) if m.file_type().is_symlink() => {
                let target =
                    std::fs::read_link(&full).map_err(io_err("read the symlink", &full))?;
                let id = hash(Oid::hash_object(
                    ObjectType::Blob,
                    target.as_os_str().as_encoded_bytes(),
                ))?;
                Some(DiskEntry::from_metadata(&m, 0o120000, id))
            }
            Ok(m) if m.is_file() => {
                let id = hash(Oid::hash_file(ObjectType::Blob, &full))?;
                let mode = if m.permissions().mode() & 0o100 != 0 {
                    0o100755
                } else {
                    0o100644
                };
                Some(DiskEntry::from_metadata(&m, mode, id))
            }
            Ok(_) => None,
            // Gone, or a parent is a file now: no entry either way.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                None
            }
            Err(e) => return Err(io_err("inspect", &full)(e)),
        };
        changes.push((p.to_vec(), entry));
    }
    let index = repo.path().join("index");
    patch_index(&index, &changes).map_err(io_err("update the index", &index))
}

/// Deletes the pending record of `repo` without applying it (its whole
/// index was just rewritten, e.g. by a hard reset).
pub(super) fn discard_pending_in(repo: &Repository) -> Result<(), GitError> {
    let path = record_path(repo);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(io_err("delete the lane's pending index record", &path)(e))
        }
        _ => Ok(()),
    }
}

/// Whether the linked worktree at `worktree` has a pending index record.
pub fn has_pending_index(worktree: &Path) -> Result<bool, GitError> {
    Ok(record_path(&open_linked_worktree(worktree)?).exists())
}
