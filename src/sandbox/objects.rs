//! Moving the objects a lane's git wrote to its quarantine
//! ([`super::LaneGit::quarantine`]) into the user's object store, from orch
//! (outside the sandbox) after each call — git's own receive-pack
//! quarantine, done by hand.
//!
//! Invariant: only adds objects. An object that already exists in the store
//! is never overwritten (loose objects are content-addressed, so the existing
//! one is the same object); a pack's `.idx` is moved last, as git treats a
//! pack as present once its index is.

use std::path::{Path, PathBuf};

use super::LaneGit;

/// An error while migrating quarantined objects.
#[derive(Debug, thiserror::Error)]
#[error("migrate git object {path}: {source}")]
pub struct MigrateError {
    /// The file that could not be moved.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// Moves every object in `git`'s quarantine into `<common>/objects` and
/// returns how many files were moved. A missing quarantine moves nothing.
pub fn migrate_objects(git: &LaneGit) -> Result<usize, MigrateError> {
    let from = git.quarantine();
    let to = git.common_dir.join("objects");
    let mut moved = 0;
    let Ok(dirs) = std::fs::read_dir(&from) else {
        return Ok(0);
    };
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| MigrateError { path, source }
    };
    let mut packs = Vec::new();
    for d in dirs {
        let d = d.map_err(err(&from))?;
        let name = d.file_name();
        let name = name.to_string_lossy();
        let is_fanout = name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit());
        if name == "pack" {
            packs.push(d.path());
        } else if is_fanout {
            for f in std::fs::read_dir(d.path()).map_err(err(&d.path()))? {
                let f = f.map_err(err(&d.path()))?;
                let fname = f.file_name();
                if fname.to_string_lossy().starts_with("tmp_") {
                    continue;
                }
                let target = to.join(&*name).join(&fname);
                moved += move_one(&f.path(), &target)? as usize;
            }
        }
    }
    for pack_dir in packs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&pack_dir)
            .map_err(err(&pack_dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("pack-"))
            })
            .collect();
        // Index files last: a pack counts as present once its .idx is.
        files.sort_by_key(|p| p.extension().is_some_and(|e| e == "idx"));
        for f in files {
            if let Some(name) = f.file_name() {
                moved += move_one(&f, &to.join("pack").join(name))? as usize;
            }
        }
    }
    Ok(moved)
}

/// Moves `from` to `to` unless `to` exists; returns whether it moved.
fn move_one(from: &Path, to: &Path) -> Result<bool, MigrateError> {
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| MigrateError { path, source }
    };
    if to.exists() {
        std::fs::remove_file(from).map_err(err(from))?;
        return Ok(false);
    }
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).map_err(err(dir))?;
    }
    // hard_link fails if `to` appeared meanwhile, so nothing is overwritten.
    match std::fs::hard_link(from, to) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => {
            let tmp = to.with_extension("orch-tmp");
            std::fs::copy(from, &tmp).map_err(err(from))?;
            std::fs::rename(&tmp, to).map_err(err(to))?;
        }
    }
    std::fs::remove_file(from).map_err(err(from))?;
    Ok(true)
}
