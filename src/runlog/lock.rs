//! The run lock: one process at a time may drive or change a run. The
//! running process holds an exclusive `flock` on `<run>/lock` for as long as
//! it works on the run; the kernel drops it when the process exits, also on
//! `kill -9`, so a dead run never stays locked.

use super::RecordError;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

/// A held run lock; released on drop.
#[derive(Debug)]
pub(crate) struct RunLock {
    _file: File,
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
    // SAFETY: flock on a file descriptor this function owns; no memory is shared.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        return Err(RecordError::Locked {
            run: run_id.to_owned(),
            holder: holder.trim().to_owned(),
        });
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    write!(file, "{}", std::process::id()).map_err(io)?;
    Ok(RunLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_until_the_first_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let first = lock_run(tmp.path(), "r1").unwrap();
        let err = lock_run(tmp.path(), "r1").unwrap_err().to_string();
        assert!(
            err.contains("r1") && err.contains(&std::process::id().to_string()),
            "{err}"
        );
        drop(first);
        lock_run(tmp.path(), "r1").unwrap();
    }
}
