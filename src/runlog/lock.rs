//! The run lock: one process at a time may drive or change a run. The
//! running process holds an exclusive open-file-description lock
//! (`F_OFD_SETLK`) on `<run>/lock` for as long as it works on the run; the
//! kernel drops it when the process exits, also on `kill -9`, so a dead run
//! never stays locked.
//!
//! OFD locks rather than `flock`: [`lock_holder`] can ask whether a live
//! process holds the lock (`F_OFD_GETLK`) without taking it, so `orch runs`
//! looking at a run never makes a `resume` starting at that moment fail.

use super::error::RecordError;
use crate::ids::RunId;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

/// A held run lock; released on drop.
#[derive(Debug)]
pub(crate) struct RunLock {
    _file: File,
}

/// Whether a live process holds a lock file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockHolder {
    /// A live process holds it: the run is being worked on.
    Live,
    /// Nobody holds it (or it does not exist): whatever state the run
    /// claims, no process is driving it.
    Free,
}

fn whole_file(kind: libc::c_short) -> libc::flock {
    // SAFETY: `flock` is a plain C struct; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 0;
    fl
}

/// Takes an exclusive OFD lock on `file` without waiting; false when held.
fn try_lock(file: &File) -> std::io::Result<bool> {
    let mut fl = whole_file(libc::F_WRLCK as libc::c_short);
    // SAFETY: fcntl on a descriptor `file` owns, with a valid `flock` struct.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => Ok(false),
        _ => Err(err),
    }
}

/// How long [`lock_run`] waits for a lock whose recorded holder is dead.
/// A process killed while it was starting a tool command leaves the lock's
/// file description in the forked child until that child's `exec` closes
/// it (the descriptor is close-on-exec): milliseconds, more on a loaded
/// machine. A resume started right after the kill waits that out instead
/// of calling the dead process alive.
const DEAD_HOLDER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether the pid the lock file records names no live process.
fn holder_is_dead(holder: &str) -> bool {
    let Ok(pid) = holder.parse::<libc::pid_t>() else {
        return false;
    };
    if pid <= 0 || pid == libc::pid_t::try_from(std::process::id()).unwrap_or(0) {
        return false;
    }
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    // Signal 0 sends nothing; it only asks whether `pid` exists.
    rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH)
}

/// Retries [`try_lock`] every 10 ms for at most `wait`.
fn wait_for_lock(file: &File, wait: std::time::Duration) -> std::io::Result<bool> {
    let started = std::time::Instant::now();
    while started.elapsed() < wait {
        std::thread::sleep(std::time::Duration::from_millis(10));
        if try_lock(file)? {
            tracing::debug!(
                waited_ms = started.elapsed().as_millis() as u64,
                "the run lock's dead holder's child let it go"
            );
            return Ok(true);
        }
    }
    Ok(false)
}

/// Takes the lock of the run at `run_root`, or says which process holds it.
pub(crate) fn lock_run(run_root: &Path, run_id: &str) -> Result<RunLock, RecordError> {
    let path = run_root.join("lock");
    let io = |source| RecordError::Io {
        path: path.clone(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(io)?;
    if !try_lock(&file).map_err(io)? {
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        let holder = holder.trim().to_owned();
        if !(holder_is_dead(&holder) && wait_for_lock(&file, DEAD_HOLDER_WAIT).map_err(io)?) {
            return Err(RecordError::Locked {
                run: run_id.to_owned(),
                holder,
            });
        }
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    write!(file, "{}", std::process::id()).map_err(io)?;
    Ok(RunLock { _file: file })
}

/// Whether a live process holds the lock of the run at `run_root`, asked
/// without taking it. A lock file that cannot be opened is free: no process
/// can hold what does not exist.
pub(crate) fn lock_holder(run_root: &Path) -> LockHolder {
    let Ok(file) = File::open(run_root.join("lock")) else {
        return LockHolder::Free;
    };
    let mut fl = whole_file(libc::F_WRLCK as libc::c_short);
    // SAFETY: fcntl on a descriptor `file` owns, with a valid `flock` struct.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    if rc == 0 && fl.l_type == libc::F_UNLCK as libc::c_short {
        LockHolder::Free
    } else {
        // An error asking is treated as held: never call a live run dead.
        LockHolder::Live
    }
}

/// Whether a live orch process drives the run at `run_root`: the one test
/// of a run's liveness (`gc`, `runs`, `show`, `resume`, `rollback` all ask
/// it). Asked without taking the lock, so a resume starting this instant
/// never fails for it.
pub(crate) fn run_is_live(run_root: &Path) -> bool {
    lock_holder(run_root) == LockHolder::Live
}

/// Refuses to work on a run a live process drives: the [`RecordError::Locked`]
/// error naming the run and the holder's pid (as it wrote it in the lock file).
/// A lock whose recorded holder is dead is waited for, as [`lock_run`] does
/// (a killed run's forked child may hold it until it execs).
pub(crate) fn refuse_if_live(run_root: &Path, run_id: &RunId) -> Result<(), RecordError> {
    if !run_is_live(run_root) {
        return Ok(());
    }
    let holder = std::fs::read_to_string(run_root.join("lock")).unwrap_or_default();
    let holder = holder.trim().to_owned();
    if holder_is_dead(&holder) {
        let started = std::time::Instant::now();
        while started.elapsed() < DEAD_HOLDER_WAIT {
            std::thread::sleep(std::time::Duration::from_millis(10));
            if !run_is_live(run_root) {
                return Ok(());
            }
        }
    }
    Err(RecordError::Locked {
        run: run_id.to_string(),
        holder,
    })
}

/// Waits, bounded, until no process holds `run_root`'s lock. For tests:
/// `cargo test` runs them as threads of one process, and a child another
/// test forks holds a copy of every descriptor until it execs (they are
/// close-on-exec), so a lock this process dropped can look held for a
/// moment.
#[cfg(test)]
pub(crate) fn wait_released(run_root: &Path) {
    let started = std::time::Instant::now();
    while run_is_live(run_root) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "the lock on {} was never released",
            run_root.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_until_the_first_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(lock_holder(tmp.path()), LockHolder::Free);
        let first = lock_run(tmp.path(), "r1").unwrap();
        assert_eq!(lock_holder(tmp.path()), LockHolder::Live);
        let err = lock_run(tmp.path(), "r1").unwrap_err().to_string();
        assert!(
            err.contains("r1") && err.contains(&std::process::id().to_string()),
            "{err}"
        );
        // Asking does not take it.
        assert_eq!(lock_holder(tmp.path()), LockHolder::Live);
        drop(first);
        wait_released(tmp.path());
        let _again = lock_run(tmp.path(), "r1").unwrap();
        assert_eq!(lock_holder(tmp.path()), LockHolder::Live);
    }

    #[test]
    fn a_lock_a_dead_holder_left_in_a_child_is_waited_for() {
        // What a `kill -9` during a tool command's start leaves: the lock
        // file names a dead pid, and the lock's file description lives on in
        // a forked child until it execs. Here a second description of this
        // process holds the lock, and lets go after a while.
        let tmp = tempfile::tempdir().unwrap();
        let held = lock_run(tmp.path(), "r1").unwrap();
        let mut dead = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = dead.id();
        dead.wait().unwrap();
        std::fs::write(tmp.path().join("lock"), dead_pid.to_string()).unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            drop(held);
        });
        let _taken = lock_run(tmp.path(), "r1").expect("waited for the child");
        release.join().unwrap();
        assert_eq!(lock_holder(tmp.path()), LockHolder::Live);
        // A live holder (this process) is refused at once.
        let err = lock_run(tmp.path(), "r1").unwrap_err().to_string();
        assert!(err.contains("another orch process"), "{err}");
    }
}
