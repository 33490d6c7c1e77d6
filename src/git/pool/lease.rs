//! A slot's lease: an exclusive `flock` on `<git>/orch/pool/lane-N.lease`,
//! taken without waiting and dropped by the kernel when the holder dies.

use super::handle::Pool;
use super::handle::slot_name;
use crate::git::error::{GitError, io_err};
use std::fs;
use std::path::{Path, PathBuf};

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

impl Pool<'_> {
    /// Takes slot `n`'s lease if nobody holds it.
    pub(super) fn try_lease(&self, n: usize) -> Result<Option<Lease>, GitError> {
        let common_dir = self.common_dir();
        let path = self.lease_path(n);
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
                    path: self.slot_path(n),
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
