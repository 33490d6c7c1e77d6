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
//! A slot taken warm is moved with [`move_worktree`] (only the difference is
//! checked out, untracked and ignored files are removed, the result is
//! verified); a slot that is missing, broken or refused is (re)created from
//! scratch. Removing a slot off the exit path ([`retire`]) renames it into
//! `<git>/orch/trash/` and drops its admin entry (both O(1)); the files go
//! later ([`empty_trash`], run in the background or by `orch gc`).
//!
//! Sealed at the hand-back: a run whose lane's watcher kept its history
//! since the take ([`seal`]) removes what that history saw appear and is
//! not in the lane's `HEAD` (ignored build output), checks the marked
//! tracked paths against `HEAD` and writes the stamp itself, in
//! O(what the run touched); the next run then moves the lane by the
//! difference at once, even when it starts right after this one.
//!
//! Clean-up off the critical path, for the lanes the seal could not vouch
//! for: a run hands its lanes back as they are
//! (a rename-free drop of the lease); after its output is written, the
//! detached background `orch gc --empty-trash` also runs [`clean_free`],
//! which leases each free slot, cleans it with the full status walk
//! (untracked and ignored entries removed, modified tracked files checked
//! out again), verifies it with a second walk and writes its stamp,
//! `lane-N.clean`: the `HEAD` it verified plus a tamper check (the index
//! file's size, mtime and inode; every directory's mtime and inode, which
//! change when an entry is added, removed or renamed in it). The next
//! [`take`] consumes the stamp (it is unlinked before the lane is touched,
//! so a stamp never outlives a use) and, when it holds, moves the lane by
//! the tree-to-tree difference with no walk at all; no stamp, or one that
//! does not hold, is today's walk. While the clean-up has a slot in hand
//! (its `lane-N.cleaning` lock held) a `take` that finds no other free slot
//! waits for it, at most [`CLEANER_WAIT`]: a fresh checkout of a large
//! tree costs more than a clean-up's walk. A kill of the clean-up leaves a
//! slot without a stamp, which its next taker walks.

use super::{
    GitError, admin_lock, branch_sha, create_worktree, detach_worktree, io_err, remove_worktree,
    worktree::{Moved, clean_worktree, move_clean_worktree, move_worktree},
};
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

/// The branch libgit2 needs to add slot `n`'s worktree (it cannot add a
/// detached one); deleted once the worktree is detached.
fn add_branch(n: usize) -> String {
    format!("orch-lanes/pool-{n}")
}

fn lease_path(common_dir: &Path, n: usize) -> PathBuf {
    pool_dir(common_dir).join(format!("lane-{n}.lease"))
}

/// Slot `n`'s stamp: what the clean-up verified (see the module docs).
pub fn stamp_path(common_dir: &Path, n: usize) -> PathBuf {
    pool_dir(common_dir).join(format!("lane-{n}.clean"))
}

/// Held (exclusively) by the clean-up while it has slot `n` in hand.
fn cleaning_path(common_dir: &Path, n: usize) -> PathBuf {
    pool_dir(common_dir).join(format!("lane-{n}.cleaning"))
}

/// Held (shared) by every background clean-up from before it is started
/// until it ends; [`cleaner_running`] asks whether one is.
pub fn cleaner_lock_path(common_dir: &Path) -> PathBuf {
    pool_dir(common_dir).join("cleaner.held")
}

/// How long a [`take`] that finds no free slot waits for one the clean-up
/// has in hand before it makes a new lane.
pub const CLEANER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// `flock(fd, how | LOCK_NB)` on `file`: whether it was taken.
fn try_flock(file: &fs::File, how: libc::c_int) -> bool {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: flock on a descriptor `file` owns; no memory is shared.
        if unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) } == 0 {
            return true;
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return false;
        }
    }
}

fn open_lock_file(path: &Path) -> Option<fs::File> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).ok()?;
    }
    fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .ok()
}

/// The shared lock a background clean-up holds for its whole life: taken
/// by the process that starts it (and handed to it as its stdin, so the
/// lock is held from before it starts until it exits). `None` when the
/// pool directory cannot hold it.
pub fn hold_cleaner(common_dir: &Path) -> Option<fs::File> {
    let file = open_lock_file(&cleaner_lock_path(common_dir))?;
    try_flock(&file, libc::LOCK_SH).then_some(file)
}

/// Whether a background clean-up of this repository's pool is running.
pub fn cleaner_running(common_dir: &Path) -> bool {
    let Ok(file) = fs::File::open(cleaner_lock_path(common_dir)) else {
        return false;
    };
    !try_flock(&file, libc::LOCK_EX)
}

/// Whether the clean-up has slot `n` in hand now.
fn being_cleaned(common_dir: &Path, n: usize) -> bool {
    let Ok(file) = fs::File::open(cleaning_path(common_dir, n)) else {
        return false;
    };
    !try_flock(&file, libc::LOCK_EX)
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
    use std::os::fd::AsRawFd;
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
        // SAFETY: flock on a descriptor `file` owns; no memory is shared.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
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
            // Only the lease holder writes the slot's index, so a lock
            // there is a killed holder's (its lane was readied in the
            // background when it died): nobody will finish or remove it.
            let index_lock = common_dir
                .join("worktrees")
                .join(slot_name(n))
                .join("index.lock");
            match fs::remove_file(&index_lock) {
                Ok(()) => tracing::debug!(slot = n, "removed a dead holder's index.lock"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("remove the stale index lock", &index_lock)(e)),
            }
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
    /// A pooled lane, moved to the start commit by its difference.
    Warm,
    /// A new worktree (no free pooled lane, or the pooled one was refused).
    Created,
}

/// Takes a free slot (a whole one first, preferring one already at
/// `start`, then one stamped clean; else the lowest free number) and
/// readies it at `start`, detached and clean. A run waits for a lane only
/// while the background clean-up has one in hand (at most
/// [`CLEANER_WAIT`]); when every slot is taken a new one is made, and the
/// run's hand-back trims the pool to its bound again ([`trim`]). Returns
/// the lease, how the lane was readied and why a pooled lane there was not
/// reused (empty when it was, or none was). A lane moved by the difference
/// may leave its index to a pending record: [`super::apply_pending_index`]
/// before anything reads it (the runner does it beside the first model
/// request, behind the lane's readiness barrier).
pub fn take(common_dir: &Path, start: &str) -> Result<(Lease, Readied, String), GitError> {
    let mut existing = slots(common_dir);
    existing.sort_by_key(|&n| {
        (
            slot_head(common_dir, n).as_deref() != Some(start),
            !stamp_path(common_dir, n).is_file(),
            n,
        )
    });
    let mut lease = None;
    for &n in &existing {
        if let Some(l) = try_lease(common_dir, n)? {
            lease = Some(l);
            break;
        }
    }
    if lease.is_none() {
        lease = wait_for_cleaned(common_dir, &existing)?;
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

/// Waits (at most [`CLEANER_WAIT`]) for a slot of `existing` the clean-up
/// has in hand, and leases it; `None` when it has none in hand (the busy
/// slots are runs') or the wait ran out.
fn wait_for_cleaned(common_dir: &Path, existing: &[usize]) -> Result<Option<Lease>, GitError> {
    let started = std::time::Instant::now();
    let mut waiting: Vec<usize> = existing
        .iter()
        .copied()
        .filter(|&n| being_cleaned(common_dir, n))
        .collect();
    while !waiting.is_empty() && started.elapsed() < CLEANER_WAIT {
        std::thread::sleep(std::time::Duration::from_millis(2));
        let mut still = Vec::new();
        for &n in &waiting {
            if let Some(l) = try_lease(common_dir, n)? {
                tracing::debug!(
                    slot = n,
                    waited_ms = started.elapsed().as_millis() as u64,
                    "took a pooled lane the clean-up had in hand"
                );
                return Ok(Some(l));
            }
            if being_cleaned(common_dir, n) {
                still.push(n);
            }
        }
        waiting = still;
    }
    Ok(None)
}

/// Readies the leased slot at `start`: moved if it is whole, else (or when
/// the move is refused or fails) removed and created anew. The note says
/// why a pooled lane was not reused, if one was there.
fn ready(common_dir: &Path, lease: &Lease, start: &str) -> Result<(Readied, String), GitError> {
    let n = lease.slot;
    let mut note = String::new();
    // Consumed before the lane is touched: a stamp never outlives a use.
    let stamped = take_stamp(common_dir, n);
    if is_whole(common_dir, n) {
        let check = stamped.as_deref().map(|s| stamp_check(common_dir, n, s));
        let clean = matches!(check, Some(Ok(())));
        if !clean {
            // The pending index record first (the walk reads the index). A
            // failure here fails the move below again. A stamped lane keeps
            // its record (the seal leaves one): the move adds its own paths
            // to it, and the taker's readying applies both.
            let _ = super::apply_pending_index(&lease.path);
        }
        let moved = if clean {
            move_clean_worktree(&lease.path, start)
        } else {
            if let Some(Err(why)) = &check {
                tracing::debug!(lane = %lease.name, why, "the pooled lane's clean stamp does not hold: walking it");
            }
            move_worktree(&lease.path, start)
        };
        match moved {
            Ok(Moved::Done { paths, .. }) => {
                if clean {
                    tracing::debug!(lane = %lease.name, paths, "pooled lane stamped clean: moved without a walk");
                }
                // A kill between the add and the detach left the add branch.
                drop_add_branch(common_dir, n)?;
                return Ok((Readied::Warm, note));
            }
            Ok(Moved::Refused(why)) => note = why,
            Err(e) => note = format!("failed to {e}"),
        }
    }
    clear_slot(common_dir, n)?;
    create_worktree(common_dir, &lease.name, &lease.path, &add_branch(n), start)?;
    detach_worktree(&lease.path)?;
    drop_add_branch(common_dir, n)?;
    Ok((Readied::Created, note))
}

/// Deletes slot `n`'s add branch, and the ref lock a process killed while
/// writing it left (only called with the slot's lease held: any lock there
/// is a dead holder's).
fn drop_add_branch(common_dir: &Path, n: usize) -> Result<(), GitError> {
    let branch = add_branch(n);
    super::remove_stale_ref_locks(common_dir, std::slice::from_ref(&branch))?;
    // The slot's worktree is detached by now (and its lease held): the
    // branch is checked out nowhere, so it is deleted as a plain ref.
    // libgit2's branch deletion would open every worktree of the repository
    // to make sure, per lane (8 lanes: 64 opens; 5% of a width-8 run's CPU).
    let repo = super::open_at(common_dir)?;
    let name = format!("refs/heads/{branch}");
    // Under the admin lock like every ref write: deleting the last loose
    // ref of `refs/heads/orch-lanes/` removes that directory, which another
    // lane's add was about to create its branch's lock file in ("failed to
    // create locked file …/orch-lanes/pool-6.lock: No such file or
    // directory", seen at width 8).
    let _admin = admin_lock(common_dir, true)?;
    match repo.find_reference(&name) {
        Ok(mut reference) => reference
            .delete()
            .map_err(super::git_err(format!("delete branch `{branch}`"))),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(()),
        Err(e) => Err(super::git_err(format!("read branch `{branch}`"))(e)),
    }
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
    let _ = fs::remove_file(stamp_path(common_dir, n));
    if fs::symlink_metadata(&path).is_ok() {
        fs::remove_dir_all(&path).map_err(io_err("remove the pooled lane directory", &path))?;
    }
    drop_add_branch(common_dir, n)
}

/// Takes slot `n` out of the pool at once (its lease held): its directory
/// is renamed into the trash and its admin entry removed, so `git worktree
/// list` forgets it; the files are deleted by [`empty_trash`].
pub fn retire(common_dir: &Path, lease: Lease) -> Result<(), GitError> {
    let _ = fs::remove_file(stamp_path(common_dir, lease.slot));
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
    drop_add_branch(common_dir, lease.slot)?;
    let _ = fs::remove_file(lease_path(common_dir, lease.slot));
    Ok(())
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

/// Heals the free slots a killed process left half-done: a broken worktree
/// is removed (it is made again when needed), a whole one keeps its files
/// but loses the add branch a kill between its add and its detach left.
pub fn heal(common_dir: &Path) -> Result<(), GitError> {
    for n in slots(common_dir) {
        let Some(_lease) = try_lease(common_dir, n)? else {
            continue;
        };
        if !is_whole(common_dir, n) {
            clear_slot(common_dir, n)?;
        } else {
            if branch_sha(common_dir, &add_branch(n))?.is_some() {
                detach_worktree(&slot_path(common_dir, n))?;
            }
            drop_add_branch(common_dir, n)?;
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

/// The first line of a stamp (its format).
const STAMP_MAGIC: &str = "orch-pool-clean 2";

/// The `(mtime seconds, mtime nanoseconds, inode)` of `path`, not followed.
fn stat_key(path: &Path) -> Option<(i64, i64, u64)> {
    fs::symlink_metadata(path).ok().map(|m| key_of(&m))
}

/// [`stat_key`] from metadata already read.
fn key_of(m: &fs::Metadata) -> (i64, i64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.mtime(), m.mtime_nsec(), m.ino())
}

/// What the tamper check records of the index of the worktree whose admin
/// name is `name` (size, mtime, inode: any write replaces the file), as the
/// stamp's `index …` line; `None` when it cannot be read.
pub fn index_key(common_dir: &Path, name: &str) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let index = common_dir.join("worktrees").join(name).join("index");
    let meta = fs::symlink_metadata(index).ok()?;
    Some(format!(
        "index {} {} {} {}",
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ino()
    ))
}

/// The tamper check of slot `n` as the clean-up leaves it at `head`: the
/// index file (size, mtime, inode) and every directory of the lane
/// (mtime, inode; the lane's own `.git` file is not a directory). `None`
/// when something cannot be read or a path cannot be written on one line.
fn observe_slot(common_dir: &Path, n: usize, head: &str, dirs: Listing<'_>) -> Option<String> {
    use std::fmt::Write as _;
    use std::os::unix::ffi::OsStrExt;
    let name = slot_name(n);
    let (index, pending) = (
        index_key(common_dir, &name)?,
        pending_key(common_dir, &name),
    );
    let mut out = format!("{STAMP_MAGIC}\nhead {head}\n{index}\n{pending}\n");
    let root = slot_path(common_dir, n);
    let as_path = |rel: &[u8]| PathBuf::from(std::ffi::OsStr::from_bytes(rel));
    // (directory, list its subdirectories from the disk too)
    let mut stack: Vec<(PathBuf, bool)> = match dirs {
        Listing::Walk => vec![(PathBuf::new(), true)],
        Listing::Known { watched, whole } => watched
            .iter()
            .map(|d| (as_path(d), false))
            .chain(whole.iter().map(|d| (as_path(d), true)))
            .collect(),
    };
    let walk = matches!(dirs, Listing::Walk);
    let mut seen = std::collections::HashSet::new();
    while let Some((rel, list)) = stack.pop() {
        let full = root.join(&rel);
        let meta = match fs::symlink_metadata(&full) {
            Ok(m) => m,
            // Known directories the seal removed (strays) are gone.
            Err(_) if !walk => continue,
            Err(_) => return None,
        };
        if !meta.is_dir() {
            if walk {
                return None;
            }
            continue;
        }
        let key = key_of(&meta);
        if !seen.insert(rel.clone()) {
            continue;
        }
        let (s, ns, ino) = key;
        let name = rel.to_str()?;
        if name.contains('\n') {
            return None;
        }
        let _ = writeln!(
            out,
            "d {s} {ns} {ino} {}",
            if name.is_empty() { "." } else { name }
        );
        if list {
            for entry in fs::read_dir(&full).ok()? {
                let entry = entry.ok()?;
                if entry.file_type().ok()?.is_dir() {
                    stack.push((rel.join(entry.file_name()), true));
                }
            }
        }
    }
    seen.contains(Path::new("")).then_some(out)
}

/// Where [`observe_slot`] finds the lane's directories.
#[derive(Clone, Copy)]
enum Listing<'a> {
    /// Every directory from the disk (a walk of the whole lane).
    Walk,
    /// Its watcher's list ([`super::watch::LaneWatch::directories`]): the
    /// watched directories (each only `stat`ed) and the ones marked whole
    /// (listed from the disk).
    Known {
        watched: &'a [Vec<u8>],
        whole: &'a [Vec<u8>],
    },
}

/// The stamp's `pending …` line: the length of the slot's pending index
/// record (0: none). The seal leaves the record for the next taker; a
/// record changed after the stamp makes it not hold.
fn pending_key(common_dir: &Path, name: &str) -> String {
    let record = common_dir
        .join("worktrees")
        .join(name)
        .join(super::pending::RECORD);
    format!(
        "pending {}",
        fs::symlink_metadata(record).map_or(0, |m| m.len())
    )
}

/// Whether the stamp `text` of slot `n` still holds: the slot's `HEAD` is
/// the one verified and nothing the tamper check covers changed.
fn stamp_holds(common_dir: &Path, n: usize, text: &str) -> bool {
    stamp_check(common_dir, n, text).is_ok()
}

/// [`stamp_holds`], saying what does not hold.
fn stamp_check(common_dir: &Path, n: usize, text: &str) -> Result<(), String> {
    let mut lines = text.lines();
    if lines.next() != Some(STAMP_MAGIC) {
        return Err("an unknown stamp format".to_owned());
    }
    let head = lines.next().and_then(|l| l.strip_prefix("head "));
    if head.is_none() || slot_head(common_dir, n).as_deref() != head {
        return Err("its HEAD moved".to_owned());
    }
    let name = slot_name(n);
    let want = index_key(common_dir, &name).ok_or("its index is unreadable")?;
    let had = lines.next().unwrap_or_default();
    if had != want {
        return Err(format!("its index was written ({had} then, {want} now)"));
    }
    if lines.next() != Some(pending_key(common_dir, &name).as_str()) {
        return Err("its pending index record changed".to_owned());
    }
    let root = slot_path(common_dir, n);
    let mut dirs = 0usize;
    for line in lines {
        let mut parts = line.splitn(5, ' ');
        let (Some("d"), Some(s), Some(ns), Some(ino), Some(rel)) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(format!("a malformed line {line:?}"));
        };
        let full = if rel == "." {
            root.clone()
        } else {
            root.join(rel)
        };
        let Some((ms, mns, mino)) = stat_key(&full) else {
            return Err(format!("{rel} is gone"));
        };
        if s.parse() != Ok(ms) || ns.parse() != Ok(mns) || ino.parse() != Ok(mino) {
            return Err(format!("{rel} changed"));
        }
        dirs += 1;
    }
    if dirs == 0 {
        return Err("it lists no directory".to_owned());
    }
    Ok(())
}

/// Writes slot `n`'s stamp (its lease held), atomically.
fn write_stamp(common_dir: &Path, n: usize, stamp: &str) -> Result<(), GitError> {
    let path = stamp_path(common_dir, n);
    let tmp = path.with_extension("clean.tmp");
    fs::write(&tmp, stamp).map_err(io_err("write the lane's clean stamp", &tmp))?;
    fs::rename(&tmp, &path).map_err(io_err("write the lane's clean stamp", &path))
}

/// Seals a leased slot at its hand-back, instead of the clean-up's walks:
/// `marks` is its watcher's history since the take (every path that may
/// differ from the exactly clean lane the take gave), `head` the commit
/// the run left it at, `index_was` the [`index_key`] orch saw when it last
/// wrote the slot's index itself. When the slot is still at `head` and its
/// index is the one orch wrote (so no `git add` or `git reset` in the lane
/// changed it), the marked strays are removed, the marked tracked paths
/// checked ([`super::seal::clean_marked`]) and the slot stamped. Returns
/// how many strays were removed, or why it was not stamped (then the
/// background clean-up walks it).
pub fn seal(
    common_dir: &Path,
    lease: &Lease,
    head: &str,
    watch: &super::watch::LaneWatch,
    index_was: &str,
) -> Result<Result<usize, String>, GitError> {
    let Some(marks) = watch.since_start() else {
        return Ok(Err("its watcher kept no complete history".to_owned()));
    };
    let n = lease.slot;
    let _ = fs::remove_file(stamp_path(common_dir, n));
    if !is_whole(common_dir, n) {
        return Ok(Err("it is not a whole worktree".to_owned()));
    }
    if slot_head(common_dir, n).as_deref() != Some(head) {
        return Ok(Err(format!("its HEAD moved from {head}")));
    }
    if index_key(common_dir, &lease.name).as_deref() != Some(index_was) {
        return Ok(Err(
            "its index was written by something other than orch".to_owned()
        ));
    }
    let removed = match super::seal::clean_marked(&lease.path, head, &marks)? {
        Ok(removed) => removed,
        Err(why) => return Ok(Err(why)),
    };
    crate::killpoint::reached("lane-sealing");
    let Some(dirs) = watch.directories() else {
        return Ok(Err("its watcher lost track of its directories".to_owned()));
    };
    let listing = Listing::Known {
        watched: &dirs.watched,
        whole: &dirs.whole,
    };
    let Some(stamp) = observe_slot(common_dir, n, head, listing) else {
        return Ok(Err("its directories could not be listed".to_owned()));
    };
    write_stamp(common_dir, n, &stamp)?;
    Ok(Ok(removed))
}

/// Reads and removes slot `n`'s stamp (its lease held).
fn take_stamp(common_dir: &Path, n: usize) -> Option<String> {
    let path = stamp_path(common_dir, n);
    let text = fs::read_to_string(&path).ok();
    if text.is_some() {
        let _ = fs::remove_file(&path);
    }
    text
}

/// Whether some slot is free of a stamp, so [`clean_free`] has work.
pub fn needs_cleaning(common_dir: &Path) -> bool {
    slots(common_dir)
        .into_iter()
        .any(|n| !stamp_path(common_dir, n).is_file())
}

/// What [`clean_free`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Cleaned {
    /// Slots cleaned, verified and stamped.
    pub stamped: Vec<usize>,
    /// Slots left without a stamp, and why.
    pub refused: Vec<(usize, String)>,
}

/// The background clean-up: every free, whole slot without a stamp that
/// holds is cleaned by the full walk, verified by a second walk and
/// stamped (see the module docs). Slots in use (by a run, or by another
/// clean-up) are left alone.
pub fn clean_free(common_dir: &Path) -> Result<Cleaned, GitError> {
    let mut done = Cleaned::default();
    for n in slots(common_dir) {
        let Some(marker) = open_lock_file(&cleaning_path(common_dir, n)) else {
            continue;
        };
        // The marker first: a `take` that sees it waits for this slot.
        if !try_flock(&marker, libc::LOCK_EX) {
            continue;
        }
        let Some(lease) = try_lease(common_dir, n)? else {
            continue;
        };
        if !is_whole(common_dir, n) {
            continue;
        }
        if let Ok(text) = fs::read_to_string(stamp_path(common_dir, n)) {
            if stamp_holds(common_dir, n, &text) {
                continue;
            }
            let _ = fs::remove_file(stamp_path(common_dir, n));
        }
        if branch_sha(common_dir, &add_branch(n))?.is_some() {
            detach_worktree(&lease.path)?;
        }
        drop_add_branch(common_dir, n)?;
        match clean_worktree(&lease.path, |head| {
            observe_slot(common_dir, n, head, Listing::Walk)
        })? {
            Ok(stamp) => {
                write_stamp(common_dir, n, &stamp)?;
                done.stamped.push(n);
            }
            Err(why) => done.refused.push((n, why)),
        }
        drop(lease);
    }
    Ok(done)
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
    fn lanes_made_side_by_side_never_lose_their_add_branch_to_another_lanes_clean_up() {
        // Each new slot's add branch is created and deleted again; the last
        // loose ref's deletion removes `refs/heads/orch-lanes/`, which must
        // not race another slot's creation of its branch there.
        let repo = TestRepo::new();
        let common = repo.git_dir();
        let head = repo.git(&["rev-parse", "HEAD"]).trim().to_owned();
        for round in 0..40 {
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

    #[test]
    fn a_lane_found_clean_by_one_walk_is_stamped_and_a_later_file_still_undoes_the_stamp() {
        let repo = TestRepo::new();
        repo.write("deep/er/a.txt", "a\n");
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-qm", "deep"]);
        let common = repo.git_dir();
        let head = repo.git(&["rev-parse", "HEAD"]).trim().to_owned();
        let (lease, _, _) = take(&common, &head).unwrap();
        drop(lease);
        // Nothing to clean: the one walk is the check, and it stamps.
        let done = clean_free(&common).unwrap();
        assert_eq!(done.stamped, [1], "{done:?}");
        let stamp = fs::read_to_string(stamp_path(&common, 1)).unwrap();
        assert!(stamp_holds(&common, 1, &stamp));
        // The pending index record is part of what the stamp vouches for.
        let record = common
            .join("worktrees/orch-pool-1")
            .join(crate::git::pending::RECORD);
        fs::write(&record, b"Ddeep/er/a.txt\0").unwrap();
        assert_eq!(
            stamp_check(&common, 1, &stamp),
            Err("its pending index record changed".to_owned())
        );
        fs::remove_file(&record).unwrap();
        assert!(stamp_holds(&common, 1, &stamp));
        // A file added deep inside after the stamp: the stamp no longer holds,
        // so the next take walks the lane and the file does not leak.
        fs::write(slot_path(&common, 1).join("deep/er/sneaked.txt"), "x\n").unwrap();
        assert!(!stamp_holds(&common, 1, &stamp));
        let (lease, readied, note) = take(&common, &head).unwrap();
        assert_eq!(readied, Readied::Warm, "{note}");
        assert!(!lease.path.join("deep/er/sneaked.txt").exists());
    }

    #[test]
    fn a_cleaned_slot_is_stamped_and_a_take_waits_for_the_slot_the_clean_up_holds() {
        let repo = TestRepo::new();
        let common = repo.git_dir();
        let head = repo.git(&["rev-parse", "HEAD"]).trim().to_owned();
        let (lease, readied, _) = take(&common, &head).unwrap();
        assert_eq!((lease.slot, readied), (1, Readied::Created));
        fs::write(lease.path.join("left.txt"), "by the last run\n").unwrap();
        drop(lease);
        assert!(needs_cleaning(&common));
        let done = clean_free(&common).unwrap();
        assert_eq!(done.stamped, [1], "{done:?}");
        assert!(!slot_path(&common, 1).join("left.txt").exists());
        assert!(!needs_cleaning(&common));

        // The clean-up has slot 1 in hand (marker, then lease) for a while:
        // the take waits for it rather than making slot 2.
        let marker = open_lock_file(&cleaning_path(&common, 1)).unwrap();
        // A child another test forks in this process can share the clean-up's
        // closed marker descriptor until it execs: wait that out (bounded).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !try_flock(&marker, libc::LOCK_EX) {
            assert!(
                std::time::Instant::now() < deadline,
                "the marker stays locked"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let held = loop {
            if let Some(lease) = try_lease(&common, 1).unwrap() {
                break lease;
            }
            assert!(std::time::Instant::now() < deadline, "the lease stays held");
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            drop(held);
            drop(marker);
        });
        let (lease, readied, note) = take(&common, &head).unwrap();
        release.join().unwrap();
        assert_eq!((lease.slot, readied), (1, Readied::Warm), "{note}");
        assert!(
            !stamp_path(&common, 1).exists(),
            "the take consumed the stamp"
        );
        assert_eq!(slots(&common), [1]);
    }
}
