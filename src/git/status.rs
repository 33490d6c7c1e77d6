//! What differs from `HEAD` in a worktree, as `git status` reports it.

use std::path::Path;

use git2::Repository;

use super::cli;
use super::error::GitError;
use super::open::open_linked_worktree;

/// Paths of a linked worktree that differ from its `HEAD` (modified, added,
/// deleted, untracked — not ignored; a nested repository as its directory),
/// sorted, as `git status` reports them.
pub fn changed_paths(worktree: &Path) -> Result<Vec<String>, GitError> {
    drop(open_linked_worktree(worktree)?);
    status_paths(worktree)
}

/// What `git status` lists at `root`, any repository or worktree (a
/// subagent's read-only guard checks the worktree it shares), as
/// [`changed_paths`] gives it for a lane. Never writes the index
/// (`--no-optional-locks`).
pub fn status_paths(root: &Path) -> Result<Vec<String>, GitError> {
    let out = cli::git(root)
        .args(["--no-optional-locks", "status", "--porcelain=v1", "-z"])
        .args(["--untracked-files=all", "--no-renames"])
        .run()?;
    let mut paths: Vec<String> = out
        .stdout
        .split(|&b| b == 0)
        .filter(|r| r.len() > 3)
        .filter_map(|r| String::from_utf8(r[3..].to_vec()).ok())
        .map(|p| p.trim_end_matches('/').to_owned())
        .collect();
    paths.sort();
    paths.dedup();
    Ok(paths)
}

/// The one status walk (libgit2's), as cheap as `git status`: every path
/// whose index or working-tree file differs from `HEAD`, untracked files
/// one by one (a nested repository as one directory path ending in `/`),
/// ignored files and submodules left out. Paths are raw bytes. Used by the
/// check of the user's working tree, whose answer the `git status`
/// fallback and its differential test vouch for.
pub(crate) fn status_walk(repo: &Repository) -> Result<Vec<(Vec<u8>, git2::Status)>, git2::Error> {
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .exclude_submodules(true);
    let statuses = repo.statuses(Some(&mut opts))?;
    Ok(statuses
        .iter()
        .map(|e| (e.path_bytes().to_vec(), e.status()))
        .collect())
}
