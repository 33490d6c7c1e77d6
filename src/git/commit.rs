//! Committing a lane after a stage: the tree is what git stages there
//! ([`super::stage_tree`]), the commit is written with libgit2 on the
//! parent orch names, and the lane's `HEAD` is detached at it.

use std::path::Path;

use super::error::{GitError, git_err};
use super::open::{find_commit, open_linked_worktree, signature};
use super::repo::{CommitId, Repo};

/// Commits everything in the linked worktree at `worktree` on top of
/// `parent_sha`, as `git add -A && git commit` would stage it, and detaches
/// the worktree's `HEAD` at the new commit.
///
/// A stage that changed nothing still gets its (empty) commit. The author
/// is the repository's `user.name`/`user.email`, else `orch <orch@localhost>`.
pub fn commit_all(
    worktree: &Path,
    message: &str,
    parent_sha: &CommitId,
) -> Result<CommitId, GitError> {
    // Refuse the user's own working tree before git touches its index.
    let repo = Repo::of_lane(worktree)?;
    let (tree, _) = super::staging::stage_tree(worktree, parent_sha, None)?;
    repo.commit_tree(worktree, message, parent_sha, &tree)
}

impl Repo {
    /// The user's repository the linked worktree at `worktree` (a lane)
    /// belongs to: a lane's own common dir is its shadow, whose object store
    /// is the lane's, so commits are written through the user's.
    pub fn of_lane(worktree: &Path) -> Result<Repo, GitError> {
        let lane = open_linked_worktree(worktree)?;
        Ok(Repo::at(match super::shadow::of_lane(worktree) {
            Some((real, _)) => real,
            None => lane.commondir().to_path_buf(),
        }))
    }

    /// Commits tree `tree` (written by git, e.g. [`super::stage_tree`]) on
    /// top of `parent_sha` with `message`, through this handle (the user's
    /// repository, [`Repo::of_lane`] of the lane), and detaches the lane at
    /// `worktree` at the new commit. Never follows the lane's `HEAD`:
    /// whatever branch the agent left it on (its own `git checkout`) is not
    /// moved.
    pub fn commit_tree(
        &self,
        worktree: &Path,
        message: &str,
        parent_sha: &CommitId,
        tree: &str,
    ) -> Result<CommitId, GitError> {
        drop(open_linked_worktree(worktree)?);
        let repo = self.git2()?;
        let at = worktree.display();
        let parent = find_commit(repo, parent_sha)?;
        let tree_id =
            git2::Oid::from_str(tree).map_err(git_err(format!("read tree id `{tree}`")))?;
        let tree = repo
            .find_tree(tree_id)
            .map_err(git_err(format!("read tree {tree_id}")))?;
        let sig = signature(repo)?;
        let message = git2::message_prettify(message, None)
            .map_err(git_err("clean up the commit message"))?;
        let oid = repo
            .commit(None, &sig, &sig, &message, &tree, &[&parent])
            .map_err(git_err(format!("commit in {at}")))?;
        crate::killpoint::reached("stage-committed");
        super::cli::git(worktree)
            .args([
                "update-ref",
                "--no-deref",
                "-m",
                "orch: stage commit",
                "HEAD",
            ])
            .arg(oid.to_string())
            .run()?;
        Ok(CommitId::from_oid(oid))
    }
}

impl Repo {
    /// A commit whose tree is `tree_of`'s and whose parents are `parents`
    /// (in order), written without any worktree: a best-of-N stage's
    /// commit, which takes the chosen replica's tree as it is.
    pub fn commit_with_tree_of(
        &self,
        tree_of: &CommitId,
        parents: &[CommitId],
        message: &str,
    ) -> Result<CommitId, GitError> {
        let repo = self.git2()?;
        let tree = find_commit(repo, tree_of)?
            .tree()
            .map_err(git_err(format!("read the tree of {tree_of}")))?;
        let parents = parents
            .iter()
            .map(|p| find_commit(repo, p))
            .collect::<Result<Vec<_>, _>>()?;
        let parents: Vec<&git2::Commit<'_>> = parents.iter().collect();
        let sig = signature(repo)?;
        let message = git2::message_prettify(message, None)
            .map_err(git_err("clean up the commit message"))?;
        let oid = repo
            .commit(None, &sig, &sig, &message, &tree, &parents)
            .map_err(git_err(format!("commit the tree of {tree_of}")))?;
        Ok(CommitId::from_oid(oid))
    }
}
