//! What lane bootstrap asks of git: the ignored entries of the user's
//! working tree (candidates for `.worktreeinclude`), whether paths are
//! ignored in a lane (so a copied file can never be committed), a lane's
//! admin directory (where per-lane state lives, outside every tree), and the
//! blob id of some bytes (the setup cache key's unit).
//!
//! Reads only; the user's tree, index and refs are never written.

use super::{GitError, git_err, open_at, open_linked_worktree};
use std::path::{Path, PathBuf};

/// One ignored entry of a working tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoredEntry {
    /// The path relative to the root, `/`-separated, without a trailing `/`.
    pub path: String,
    /// True for a directory git ignores whole (its contents are not listed).
    pub is_dir: bool,
}

/// The ignored files and directories of the working tree at `workdir`, as
/// `git status --ignored` lists them: an ignored directory is one entry and
/// is not walked (so `node_modules/` costs one line, not a walk), sorted.
pub fn ignored_entries(workdir: &Path) -> Result<Vec<IgnoredEntry>, GitError> {
    let repo = open_at(workdir)?;
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(false)
        .include_ignored(true)
        .recurse_ignored_dirs(false)
        .exclude_submodules(true);
    let statuses = repo.statuses(Some(&mut opts)).map_err(git_err(format!(
        "list the ignored files of {}",
        workdir.display()
    )))?;
    let mut out: Vec<IgnoredEntry> = statuses
        .iter()
        .filter(|e| e.status().is_ignored())
        .filter_map(|e| String::from_utf8(e.path_bytes().to_vec()).ok())
        .map(|p| match p.strip_suffix('/') {
            Some(dir) => IgnoredEntry {
                path: dir.to_owned(),
                is_dir: true,
            },
            None => IgnoredEntry {
                path: p,
                is_dir: false,
            },
        })
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// For each of `paths` (relative, `/`-separated), whether the linked
/// worktree at `lane` ignores it (its own `.gitignore` files at its commit,
/// `info/exclude`, `core.excludesFile`).
pub fn ignored_in_lane(lane: &Path, paths: &[String]) -> Result<Vec<bool>, GitError> {
    let repo = open_linked_worktree(lane)?;
    paths
        .iter()
        .map(|p| {
            repo.is_path_ignored(p).map_err(git_err(format!(
                "check whether {p} is ignored in {}",
                lane.display()
            )))
        })
        .collect()
}

/// The admin directory of the linked worktree at `lane`
/// (`<common>/worktrees/<name>`): per-lane state kept there is in no tree.
pub fn lane_admin_dir(lane: &Path) -> Result<PathBuf, GitError> {
    Ok(open_linked_worktree(lane)?.path().to_path_buf())
}

/// The git blob id of `bytes` (what `git hash-object` prints).
pub fn blob_id(bytes: &[u8]) -> Result<String, GitError> {
    git2::Oid::hash_object(git2::ObjectType::Blob, bytes)
        .map(|o| o.to_string())
        .map_err(git_err("hash a file"))
}
