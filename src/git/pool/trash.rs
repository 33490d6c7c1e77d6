//! The trash: directories renamed into `<git>/orch/trash/` in O(1), deleted
//! later ([`Pool::empty_trash`], in the background or by `orch gc`).

use super::handle::Pool;
use crate::git::error::{GitError, io_err};
use std::fs;
use std::path::{Path, PathBuf};

impl Pool<'_> {
    /// Moves a directory into the trash (for [`Pool::empty_trash`]); O(1).
    pub fn trash(&self, dir: &Path) -> Result<(), GitError> {
        let leaf = dir
            .file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
        self.move_into_trash(dir, &leaf)
            .map_err(io_err("move a directory into the trash", dir))
    }

    /// Renames `dir` to a unique `<leaf>-<pid>-<nanos>` in the trash. The trash
    /// directory is made when missing; [`Pool::empty_trash`] leaves it (an older
    /// orch removed it when done, so a rename that finds it gone while `dir`
    /// is still there makes it again and retries).
    pub(super) fn move_into_trash(&self, dir: &Path, leaf: &str) -> std::io::Result<()> {
        let trash = self.trash_dir();
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
    pub fn trash_is_empty(&self) -> bool {
        fs::read_dir(self.trash_dir()).map_or(true, |mut d| d.next().is_none())
    }

    /// Deletes what the trash holds. Entries are whole directories renamed
    /// there by their owner, so deleting them races nobody.
    pub fn empty_trash(&self) -> Result<Vec<PathBuf>, GitError> {
        let dir = self.trash_dir();
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::Repo;

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
                    let _ = Repo::at(&common).pool().empty_trash();
                }
            })
        };
        for i in 0..300 {
            let dir = tmp.path().join(format!("lane-{i}"));
            fs::create_dir_all(dir.join("sub")).unwrap();
            Repo::at(&common)
                .pool()
                .trash(&dir)
                .unwrap_or_else(|e| panic!("round {i}: {e}"));
            assert!(!dir.exists());
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        emptier.join().unwrap();
    }
}
