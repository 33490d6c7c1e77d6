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
//! A slot taken warm is moved by git ([`move_worktree`]: `git checkout -f
//! --detach <start>` rewrites only what differs and discards local
//! changes, `git clean -ffdx` removes untracked and ignored files), so it
//! holds exactly what a fresh `git worktree add --detach` would, whatever
//! its last user left in it; a slot that is missing, broken or that git
//! cannot move is (re)created from scratch. Removing a slot off the exit
//! path ([`retire`]) renames it into `<git>/orch/trash/` and drops its admin
//! entry (both O(1)); the files go later ([`empty_trash`], run in the
//! background or by `orch gc`).
//!
//! A kill -9 at any point leaves nothing a later taker trips on: the lease
//! is the kernel's, and a taker removes the lock files (`index.lock`,
//! `HEAD.lock`) a dead holder left in the slot's admin dir before git
//! touches it.

use super::{GitError, admin_lock, create_worktree, io_err, move_tracked, remove_worktree};
use std::fs;
use std::path::{Path, PathBuf};

/// The directory holding the pool's slots and their leases.
pub fn pool_dir(common_dir: &Path) -> PathBuf {
    common_dir.join("orch").join("pool")
}

/// The directory a slot's files are renamed into before they are deleted.
pub fn trash_dir(common_dir: &Path) -> PathBuf {
    common_dir.join("orch").join("trash")
}

/// The worktree directory of slot `n`.
pub fn slot_path(common_dir: &Path, n: usize) -> PathBuf {
    pool_dir(common_dir).join(format!("lane-{n}"))
}

/// The admin name of slot `n`.
pub fn slot_name(n: usize) -> String {
    format!("orch-pool-{n}")
}

fn lease_path(common_dir: &Path, n: usize) -> PathBuf {
    pool_dir(common_dir).join(format!("lane-{n}.lease"))
}

/// A held lease on one slot; released on drop.
#[derive(Debug)]
pub struct Lease {
    _file: fs::File,
    /// The slot number.
    pub slot: usize,
    /// The slot's worktree directory.
    pub path: PathBuf,
    /// The slot's admin name.
    pub name: String,
}

/// Takes slot `n`'s lease if nobody holds it.
fn try_lease(common_dir: &Path, n: usize) -> Result<Option<Lease>, GitError> {
    let path = lease_path(common_dir, n);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(io_err("create the directory", parent))?;
    }
    loop {
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err("open the lane lease", &path))?;
        // std's `File::try_lock` is `flock(LOCK_EX | LOCK_NB)` on Linux.
        if file.try_lock().is_ok() {
            // A retired slot's lease file is unlinked by its holder: a lock
            // on the unlinked file is no lease; open the new one.
            use std::os::unix::fs::MetadataExt;
            let same = match (file.metadata(), fs::metadata(&path)) {
                (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
                _ => false,
            };
            if !same {
                continue;
            }
            // Only the lease holder runs git in the slot, so a lock file
            // in its admin dir (`index.lock`, `HEAD.lock`) is a killed
            // holder's: nobody will finish or remove it.
            remove_dead_locks(&common_dir.join("worktrees").join(slot_name(n)))?;
            return Ok(Some(Lease {
                _file: file,
                slot: n,
                path: slot_path(common_dir, n),
                name: slot_name(n),
            }));
        }
        let err = std::io::Error::last_os_error();
        match err.kind() {
            std::io::ErrorKind::Interrupted => continue,
            std::io::ErrorKind::WouldBlock => return Ok(None),
            _ => return Err(io_err("lock the lane lease", &path)(err)),
        }
    }
}

/// Removes the `*.lock` files directly in a slot's admin dir `admin`.
fn remove_dead_locks(admin: &Path) -> Result<(), GitError> {
    for entry in fs::read_dir(admin).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "lock") && path.is_file() {
            match fs::remove_file(&path) {
                Ok(()) => {
                    tracing::debug!(lock = %path.display(), "removed a dead holder's lock file")
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("remove the stale lock file", &path)(e)),
            }
        }
    }
    Ok(())
}

/// The slots that exist in some form (a worktree directory or an admin
/// entry), sorted.
pub fn slots(common_dir: &Path) -> Vec<usize> {
    let mut found: Vec<usize> = Vec::new();
    let number = |name: &str, prefix: &str| {
        name.strip_prefix(prefix)
            .filter(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|k| k.parse().ok())
    };
    for (dir, prefix) in [
        (pool_dir(common_dir), "lane-"),
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
fn is_whole(common_dir: &Path, n: usize) -> bool {
    let admin = common_dir.join("worktrees").join(slot_name(n));
    let path = slot_path(common_dir, n);
    let gitdir = fs::read_to_string(admin.join("gitdir")).unwrap_or_default();
    admin.join("commondir").is_file()
        && admin.join("HEAD").is_file()
        && Path::new(gitdir.trim()) == path.join(".git")
        && path.join(".git").is_file()
}

/// The commit slot `n`'s detached `HEAD` names, if it is detached.
fn slot_head(common_dir: &Path, n: usize) -> Option<String> {
    let head = fs::read_to_string(common_dir.join("worktrees").join(slot_name(n)).join("HEAD"));
    head.ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| h.len() == 40)
}

/// How a taken lane was readied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readied {
    /// A pooled lane, moved to the start commit by its difference; its
    /// untracked and ignored files are not cleaned yet
    /// ([`super::clean_moved`]).
    Warm,
    /// A new worktree (no free pooled lane, or the pooled one was refused).
    Created,
}

/// Takes a free slot (one already at `start` first, then the lowest
/// number; a new one when every slot is taken: the run's hand-back trims
/// the pool to its bound again, [`trim`]) and readies it at `start`,
/// detached, its tracked files exactly as git checks `start` out. A
/// [`Readied::Warm`] lane still holds what its last user left untracked:
/// the caller runs [`super::clean_moved`] before anything reads it (the
/// runner does it beside the first model request, behind the lane's
/// readiness barrier). Returns the lease, how
/// the lane was readied and why a pooled lane there was not reused (empty
/// when it was, or none was).
pub fn take(common_dir: &Path, start: &str) -> Result<(Lease, Readied, String), GitError> {
    let mut existing = slots(common_dir);
    existing.sort_by_key(|&n| (slot_head(common_dir, n).as_deref() != Some(start), n));
    let mut lease = None;
    for &n in &existing {
        if let Some(l) = try_lease(common_dir, n)? {
            lease = Some(l);
            break;
        }
    }
    if lease.is_none() {
        for n in 1.. {
            if existing.contains(&n) {
                continue;
            }
            if let Some(l) = try_lease(common_dir, n)? {
                lease = Some(l);
                break;
            }
        }
    }
    let Some(lease) = lease else {
        unreachable!("the loop over slot numbers ends with a lease")
    };
    let (readied, note) = ready(common_dir, &lease, start)?;
    Ok((lease, readied, note))
}

/// Readies the leased slot at `start`: moved by git if it is whole, else
/// (or when the move fails) removed and created anew. The note says why a
/// pooled lane was not reused, if one was there.
fn ready(common_dir: &Path, lease: &Lease, start: &str) -> Result<(Readied, String), GitError> {
    let n = lease.slot;
    let mut note = String::new();
    if is_whole(common_dir, n) {
        let admin = common_dir.join("worktrees").join(&lease.name);
        let moved = super::shadow::attach(common_dir, &admin, &lease.name)
            .and_then(|_| move_tracked(&lease.path, start));
        match moved {
            Ok(()) => return Ok((Readied::Warm, note)),
            Err(e) => note = format!("failed to {e}"),
        }
    }
    clear_slot(common_dir, n)?;
    create_worktree(common_dir, &lease.name, &lease.path, start)?;
    Ok((Readied::Created, note))
}

/// Removes whatever exists of slot `n` (its lease held): worktree, admin
/// entry, add branch.
fn clear_slot(common_dir: &Path, n: usize) -> Result<(), GitError> {
    let (name, path) = (slot_name(n), slot_path(common_dir, n));
    let admin = common_dir.join("worktrees").join(&name);
    if fs::symlink_metadata(&admin).is_ok() {
        if !is_whole(common_dir, n) {
            // Half-made or pointing elsewhere: libgit2 may not open it.
            let _admin = admin_lock(common_dir, true)?;
            fs::remove_dir_all(&admin)
                .map_err(io_err("remove the broken worktree admin directory", &admin))?;
        } else {
            remove_worktree(common_dir, &name, &path)?;
        }
    }
    if fs::symlink_metadata(&path).is_ok() {
        fs::remove_dir_all(&path).map_err(io_err("remove the pooled lane directory", &path))?;
    }
    super::shadow::remove(common_dir, &name)
}

/// Takes slot `n` out of the pool at once (its lease held): its directory
/// is renamed into the trash and its admin entry removed, so `git worktree
/// list` forgets it; the files are deleted by [`empty_trash`].
pub fn retire(common_dir: &Path, lease: Lease) -> Result<(), GitError> {
    if fs::symlink_metadata(&lease.path).is_ok() {
        into_trash(common_dir, &lease.path, &lease.name)
            .map_err(io_err("move the lane into the trash", &lease.path))?;
    }
    let admin = common_dir.join("worktrees").join(&lease.name);
    if fs::symlink_metadata(&admin).is_ok() {
        let _admin = admin_lock(common_dir, true)?;
        fs::remove_dir_all(&admin)
            .map_err(io_err("remove the worktree admin directory", &admin))?;
    }
    let _ = fs::remove_file(lease_path(common_dir, lease.slot));
    super::shadow::remove(common_dir, &lease.name)
}

/// Moves a directory into the trash (for [`empty_trash`]); O(1).
pub fn trash(common_dir: &Path, dir: &Path) -> Result<(), GitError> {
    let leaf = dir
        .file_name()
        .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
    into_trash(common_dir, dir, &leaf).map_err(io_err("move a directory into the trash", dir))
}

/// Renames `dir` to a unique `<leaf>-<pid>-<nanos>` in the trash. The trash
/// directory is made when missing; [`empty_trash`] leaves it (an older
/// orch removed it when done, so a rename that finds it gone while `dir`
/// is still there makes it again and retries).
fn into_trash(common_dir: &Path, dir: &Path, leaf: &str) -> std::io::Result<()> {
    let trash = trash_dir(common_dir);
    let mut tries = 0;
    loop {
        match fs::create_dir_all(&trash) {
            // `create_dir_all` saw the directory, which was gone when it
            // looked again: the same race.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 100 => {
                tries += 1;
                continue;
            }
            other => other?,
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let to = trash.join(format!("{leaf}-{}-{nanos}", std::process::id()));
        match fs::rename(dir, &to) {
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && tries < 100
                    && fs::symlink_metadata(dir).is_ok() =>
            {
                tries += 1;
            }
            other => return other,
        }
    }
}

/// Whether the trash holds anything.
pub fn trash_is_empty(common_dir: &Path) -> bool {
    fs::read_dir(trash_dir(common_dir)).map_or(true, |mut d| d.next().is_none())
}

/// Deletes what the trash holds. Entries are whole directories renamed
/// there by their owner, so deleting them races nobody.
pub fn empty_trash(common_dir: &Path) -> Result<Vec<PathBuf>, GitError> {
    let dir = trash_dir(common_dir);
    let mut removed = Vec::new();
    for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match fs::remove_dir_all(&path) {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("remove the trashed lane", &path)(e)),
        }
    }
    // The (empty) trash directory stays: removing it would race another
    // process's rename into it.
    Ok(removed)
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::testutil::TestRepo;

    #[test]
    fn trashing_while_another_process_empties_the_trash_never_fails() {
        // `empty_trash` (another run's background clean-up) removes the
        // trash directory when done; a rename racing it must still land.
        let tmp = tempfile::tempdir().unwrap();
        let common = tmp.path().join("git");
        fs::create_dir_all(&common).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let emptier = {
            let (common, stop) = (common.clone(), std::sync::Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = empty_trash(&common);
                }
            })
        };
        for i in 0..300 {
            let dir = tmp.path().join(format!("lane-{i}"));
            fs::create_dir_all(dir.join("sub")).unwrap();
            trash(&common, &dir).unwrap_or_else(|e| panic!("round {i}: {e}"));
            assert!(!dir.exists());
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        emptier.join().unwrap();
    }

    #[test]
    fn lanes_taken_side_by_side_are_distinct_slots_and_leave_no_branch() {
        // Eight takers at once, made and retired again: each gets a slot of
        // its own, and git's worktree adds under orch's names never collide.
        let repo = TestRepo::new();
        let common = repo.git_dir();
        let head = repo.git(&["rev-parse", "HEAD"]).trim().to_owned();
        for round in 0..10 {
            let takers: Vec<_> = (0..8)
                .map(|_| {
                    let (c, h) = (common.clone(), head.clone());
                    std::thread::spawn(move || take(&c, &h))
                })
                .collect();
            let leases: Vec<Lease> = takers
                .into_iter()
                .map(|t| {
                    let (lease, _, _) = t
                        .join()
                        .unwrap()
                        .unwrap_or_else(|e| panic!("round {round}: {e}"));
                    lease
                })
                .collect();
            let mut slots: Vec<usize> = leases.iter().map(|l| l.slot).collect();
            slots.sort_unstable();
            slots.dedup();
            assert_eq!(slots.len(), 8, "round {round}: {slots:?}");
            for lease in leases {
                retire(&common, lease).unwrap();
            }
        }
        assert_eq!(repo.git(&["for-each-ref", "refs/heads/orch-lanes/"]), "");
    }
}
