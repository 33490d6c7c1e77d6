//! Committing a whole worktree after a stage, like `git add -A && git commit`.

use std::path::Path;

use git2::IndexAddOption;

use super::{GitError, find_commit, git_err, open_linked_worktree, signature};

/// Commits everything in the linked worktree at `worktree` on top of
/// `parent_sha` and moves the worktree's branch to the new commit.
///
/// Stages like `git add -A`: new files that are not ignored, modified files and
/// deletions; files already tracked stay tracked even when ignored. A stage that
/// changed nothing still gets its (empty) commit. The author is the
/// repository's `user.name`/`user.email`, else `orch <orch@localhost>`.
///
/// Staging is one walk of the worktree: libgit2 diffs the index against the
/// files and rehashes only what the index's stat cache cannot vouch for.
pub fn commit_all(worktree: &Path, message: &str, parent_sha: &str) -> Result<String, GitError> {
    let repo = open_linked_worktree(worktree)?;
    let at = worktree.display();
    let parent = find_commit(&repo, parent_sha)?;

    let mut index = repo
        .index()
        .map_err(git_err(format!("read the index of {at}")))?;
    // An empty pathspec matches everything. `add_all` also drops index entries
    // whose files are gone, so no separate `update_all` walk is needed.
    index
        .add_all(std::iter::empty::<&str>(), IndexAddOption::DEFAULT, None)
        .map_err(git_err(format!("stage the changes in {at}")))?;
    let tree_id = index
        .write_tree()
        .map_err(git_err(format!("write the tree of {at}")))?;
    index
        .write()
        .map_err(git_err(format!("write the index of {at}")))?;
    let tree = repo
        .find_tree(tree_id)
        .map_err(git_err(format!("read tree {tree_id}")))?;

    let sig = signature(&repo)?;
    let message =
        git2::message_prettify(message, None).map_err(git_err("clean up the commit message"))?;
    // No `update_ref` here: libgit2 would insist that the branch still points at
    // `parent`, and the caller names the parent explicitly.
    let oid = repo
        .commit(None, &sig, &sig, &message, &tree, &[&parent])
        .map_err(git_err(format!("commit in {at}")))?;
    crate::killpoint::reached("stage-committed");

    let head = repo
        .find_reference("HEAD")
        .map_err(git_err(format!("read HEAD of {at}")))?;
    match head.symbolic_target_bytes() {
        Some(branch) => {
            let branch = String::from_utf8_lossy(branch).into_owned();
            // Ref writes are serialised across threads and processes (see
            // `set_branch`).
            let _admin = super::admin_lock(repo.commondir(), true)?;
            repo.reference(&branch, oid, true, "orch: commit stage")
                .map_err(git_err(format!("move `{branch}` to {oid}")))?;
        }
        None => repo
            .set_head_detached(oid)
            .map_err(git_err(format!("move HEAD of {at} to {oid}")))?,
    }
    Ok(oid.to_string())
}
