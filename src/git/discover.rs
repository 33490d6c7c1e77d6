//! Finding the user's repository at or above a path and checking that orch
//! can work on it.

use std::path::{Path, PathBuf};

use git2::{ErrorCode, Repository};

use super::error::{GitError, git_err, io_err};
use super::open::find_commit;
use super::repo::{CommitId, Repo};

/// Where the user's repository lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoInfo {
    /// Top of the user's working tree (of the linked worktree, when orch was
    /// pointed into one).
    pub workdir: PathBuf,
    /// The shared `.git` directory, also when the path was inside a linked
    /// worktree; run records and orch's worktrees live under it.
    pub common_dir: PathBuf,
}

/// Finds the repository at or above `path` and checks that orch can work on it.
///
/// Errors when there is none, when it is bare, and when it has no commits yet.
pub fn open_repo(path: &Path) -> Result<RepoInfo, GitError> {
    Ok(discover(path)?.1)
}

/// [`open_repo`] and [`Repo::resolve_commit`] of `rev` in its common dir, with one
/// open of the repository when `path` is not inside a linked worktree.
pub fn open_repo_at(path: &Path, rev: &str) -> Result<(RepoInfo, CommitId), GitError> {
    let (repo, info) = discover(path)?;
    // In a linked worktree, `HEAD` of the common dir is the main working
    // tree's, as `Repo::resolve_commit` reads it.
    let sha = if repo.is_worktree() {
        Repo::at(&info.common_dir).resolve_commit(rev)?
    } else {
        CommitId::from_oid(find_commit(&repo, rev)?.id())
    };
    Ok((info, sha))
}

/// The repository at or above `path`, checked as [`open_repo`] says.
pub(crate) fn discover(path: &Path) -> Result<(Repository, RepoInfo), GitError> {
    std::fs::metadata(path).map_err(io_err("open a git repository at", path))?;
    let repo = Repository::discover(path).map_err(|source| {
        if source.code() == ErrorCode::NotFound {
            GitError::NotARepo {
                path: path.to_path_buf(),
            }
        } else {
            GitError::Open {
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    let Some(workdir) = repo.workdir() else {
        return Err(GitError::BareRepo {
            path: clean_path(repo.path()),
        });
    };
    let workdir = clean_path(workdir);
    let common_dir = clean_path(repo.commondir());
    if has_no_commits(&repo).map_err(git_err(format!(
        "read the references of {}",
        common_dir.display()
    )))? {
        return Err(GitError::NoCommits { path: workdir });
    }
    Ok((
        repo,
        RepoInfo {
            workdir,
            common_dir,
        },
    ))
}

/// True when `HEAD` is unborn and no reference exists at all.
fn has_no_commits(repo: &Repository) -> Result<bool, git2::Error> {
    match repo.head() {
        Ok(_) => Ok(false),
        Err(e) if matches!(e.code(), ErrorCode::UnbornBranch | ErrorCode::NotFound) => {
            Ok(repo.references()?.next().is_none())
        }
        Err(e) => Err(e),
    }
}

/// Drops the trailing separator libgit2 puts on directory paths.
pub(super) fn clean_path(path: &Path) -> PathBuf {
    path.components().collect()
}
