//! What lane bootstrap asks of git: the ignored entries of the user's
//! working tree (candidates for `.worktreeinclude`), whether paths are
//! ignored in a lane (so a copied file can never be committed), a lane's
//! admin directory (where per-lane state lives, outside every tree), and the
//! blob id of some bytes (the setup cache key's unit).
//!
//! Reads only; the user's tree, index and refs are never written.

use super::error::{GitError, git_err};
use super::open::{open_at, open_linked_worktree};
use std::path::{Path, PathBuf};

/// One ignored entry of a working tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoredEntry {
    /// The path relative to the root, `/`-separated, without a trailing `/`.
    pub path: String,
    /// True for a directory an ignore rule matches (`node_modules/`): git
    /// ignores everything below it and its contents are not listed.
    pub is_dir: bool,
}

/// The ignored files and directories of the working tree at `workdir`, as
/// `git status --ignored --untracked-files=all` lists them, sorted.
///
/// Directories that hold no tracked file are walked like git walks them
/// for untracked files, so an ignored file in one (`config/app.local` when
/// nothing under `config/` is tracked) is listed by itself. Only a directory
/// an ignore rule matches is one entry and is not walked (so `node_modules/`
/// costs one line, not a walk). Without untracked files libgit2 (like `git
/// status -uno`) never enters a directory that holds no tracked file, and the
/// ignored files inside it would be missed.
pub fn ignored_entries(workdir: &Path) -> Result<Vec<IgnoredEntry>, GitError> {
    let repo = open_at(workdir)?;
    let mut opts = git2::StatusOptions::new();
    opts.show(git2::StatusShow::Workdir)
        .include_untracked(true)
        .recurse_untracked_dirs(true)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::testutil::TestRepo;

    #[test]
    fn ignored_files_are_listed_at_any_depth_and_only_rule_ignored_dirs_whole() {
        let repo = TestRepo::new(); // ignores `target/` and `*.log`
        for path in [
            "a.log",
            "src/b.log",
            "fresh/c.log",
            "fresh/deeper/d.log",
            "fresh/new.rs",
            "logs/e.log",
            "src/logs/f.log",
            "target/debug/app",
            "fresh/target/x",
        ] {
            repo.write(path, "x\n");
        }
        let entries = ignored_entries(&repo.path).unwrap();
        let listed: Vec<(&str, bool)> = entries
            .iter()
            .map(|e| (e.path.as_str(), e.is_dir))
            .collect();
        assert_eq!(
            listed,
            [
                ("a.log", false),
                // In directories that hold no tracked file, too.
                ("fresh/c.log", false),
                ("fresh/deeper/d.log", false),
                ("fresh/target", true),
                // A directory of ignored files only is walked, not collapsed.
                ("logs/e.log", false),
                ("src/b.log", false),
                ("src/logs/f.log", false),
                ("target", true),
            ]
        );
    }
}
