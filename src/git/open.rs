//! Opening a repository and the libgit2 look-ups every file of `git`
//! shares: a commit by revision, orch's commit signature (a leaf of `git`).

use std::path::Path;

use git2::{Oid, Repository};

use super::error::{GitError, git_err};

/// Opens a repository exactly at `path` (a git dir or a working tree), without
/// searching upward.
pub(crate) fn open_at(path: &Path) -> Result<Repository, GitError> {
    Repository::open(path).map_err(|source| GitError::Open {
        path: path.to_path_buf(),
        source,
    })
}

/// Looks up a commit by full or abbreviated sha (or any revision).
pub(crate) fn find_commit<'r>(
    repo: &'r Repository,
    rev: &str,
) -> Result<git2::Commit<'r>, GitError> {
    let resolve = |source| GitError::Resolve {
        rev: rev.to_string(),
        source,
    };
    let object = match Oid::from_str(rev) {
        Ok(oid) if rev.len() == 40 => repo.find_object(oid, None).map_err(resolve)?,
        _ => repo.revparse_single(rev).map_err(resolve)?,
    };
    object.peel_to_commit().map_err(resolve)
}

pub(crate) fn open_linked_worktree(path: &Path) -> Result<Repository, GitError> {
    let repo = open_at(path)?;
    if !repo.is_worktree() {
        return Err(GitError::NotLinkedWorktree {
            path: path.to_path_buf(),
        });
    }
    Ok(repo)
}

/// The signature orch commits with: the repository's configured identity, or
/// `orch <orch@localhost>` when none is configured.
pub(crate) fn signature(repo: &Repository) -> Result<git2::Signature<'static>, GitError> {
    match repo.signature() {
        Ok(sig) => Ok(sig),
        Err(_) => git2::Signature::now("orch", "orch@localhost").map_err(git_err(
            "build the fallback signature orch <orch@localhost>",
        )),
    }
}

/// Gives `repo` an empty in-memory index, so that nothing done with this
/// handle reads the index file.
///
/// A diff (and a merge) looks up each changed file's attributes (`diff`,
/// `merge`: the driver, whether it is binary), and libgit2 looks for
/// `.gitattributes` in the working tree *and in the index*: the first
/// lookup loads the whole index, O(tracked files) of reading and memory
/// (9 MB at 100,000 files) for a diff that touches three files. With an
/// empty index the attributes come from where `git diff` takes them for a
/// working tree that has the files (the working tree's `.gitattributes`,
/// `info/attributes`, `core.attributesfile`); a diff between two commits
/// then costs what changed. Only for handles that never stage anything.
pub(crate) fn without_index(repo: &Repository) -> Result<(), GitError> {
    let mut empty = git2::Index::new().map_err(git_err("make an empty in-memory index"))?;
    repo.set_index(&mut empty)
        .map_err(git_err("give the repository handle an empty index"))
}
