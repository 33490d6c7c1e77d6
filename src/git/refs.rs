//! Commits and branches of the repository: resolving revisions, setting and
//! listing `refs/heads/…`, reading a commit's trailers.

use std::path::Path;

use git2::{ErrorCode, Repository};

use super::cli;
use super::discover::clean_path;
use super::error::{GitError, git_err};
use super::open::find_commit;
use super::repo::{CommitId, Repo};
use super::shadow::Quarantine;

fn branch_ref(branch: &str) -> Result<String, GitError> {
    let name = format!("refs/heads/{branch}");
    if branch.is_empty() || !git2::Reference::is_valid_name(&name) {
        return Err(GitError::InvalidBranch {
            branch: branch.to_string(),
        });
    }
    Ok(name)
}

impl Repo {
    /// Resolves `rev` (`HEAD`, a branch, a tag, a sha…) to a full commit id.
    ///
    /// `HEAD` is the main working tree's when the handle is of the common
    /// git dir, a linked worktree's when it is of that worktree's top.
    pub fn resolve_commit(&self, rev: &str) -> Result<CommitId, GitError> {
        Ok(CommitId::from_oid(find_commit(self.git2()?, rev)?.id()))
    }

    /// Creates `refs/heads/<branch>` at `sha`, or force-moves it there.
    ///
    /// Refuses a branch the user has checked out (in the main working tree or in
    /// one of their own linked worktrees), so the user's `HEAD` never moves under
    /// them. Branches checked out in worktrees under the common git dir (orch's
    /// own) may be moved.
    pub fn set_branch(&self, branch: &str, sha: &CommitId) -> Result<(), GitError> {
        branch_ref(branch)?;
        // Looking for the worktrees that have the branch checked out must not
        // meet another process's half-made worktree; and libgit2's loose-ref
        // writes race each other on the shared directories (two stages of one
        // run setting `orch/<run>/a` and `orch/<run>/b` at once failed with
        // "failed to make directory …: No such file or directory"), so ref
        // updates are serialised too.
        let _admin = self.admin_lock(true)?;
        set_branch_locked(self.git2()?, branch, sha)
    }

    /// The commit `refs/heads/<branch>` points at, or `None` when it does not exist.
    pub fn branch_sha(&self, branch: &str) -> Result<Option<CommitId>, GitError> {
        let name = branch_ref(branch)?;
        let repo = self.git2()?;
        let reference = match repo.find_reference(&name) {
            Ok(reference) => reference,
            Err(e) if e.code() == ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(git_err(format!("read branch `{branch}`"))(e)),
        };
        let commit = reference
            .peel_to_commit()
            .map_err(git_err(format!("read branch `{branch}`")))?;
        Ok(Some(CommitId::from_oid(commit.id())))
    }

    /// `(name, sha)` of every branch whose name starts with `prefix`, sorted by name.
    ///
    /// Branches that do not point at a commit are skipped.
    pub fn list_branches(&self, prefix: &str) -> Result<Vec<(String, CommitId)>, GitError> {
        let repo = self.git2()?;
        let full_prefix = format!("refs/heads/{prefix}");
        let op = || {
            format!(
                "list branches `{prefix}*` in {}",
                self.common_dir().display()
            )
        };
        let mut out = Vec::new();
        for reference in repo.references().map_err(git_err(op()))? {
            let reference = reference.map_err(git_err(op()))?;
            // Branch names orch writes are UTF-8; skip any that are not.
            let Ok(name) = reference.name() else {
                continue;
            };
            let Some(short) = name.strip_prefix("refs/heads/") else {
                continue;
            };
            if !name.starts_with(&full_prefix) {
                continue;
            }
            if let Ok(commit) = reference.peel_to_commit() {
                out.push((short.to_string(), CommitId::from_oid(commit.id())));
            }
        }
        out.sort();
        Ok(out)
    }

    /// The `Key: value` trailers at the end of a commit's message, in order.
    pub fn commit_message_trailers(
        &self,
        sha: &CommitId,
    ) -> Result<Vec<(String, String)>, GitError> {
        let commit = find_commit(self.git2()?, sha)?;
        let message = String::from_utf8_lossy(commit.message_bytes()).into_owned();
        let trailers = git2::message_trailers_strs(&message)
            .map_err(git_err(format!("parse the trailers of commit {sha}")))?;
        Ok(trailers
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect())
    }

    /// The paths whose entries differ between commit `from` and tree `to`
    /// (blobs, modes, symlinks, gitlinks), sorted: what a stage changed, from
    /// the objects git wrote. `git diff-tree` compares subtrees by id and
    /// descends only into those that differ (libgit2's tree diff loaded every
    /// subtree: 11 MB of heap at 100,000 files). Non-UTF-8 paths are given
    /// lossily. `held`: the quarantine `to_tree`'s new objects are in.
    pub fn changed_between(
        &self,
        from: &CommitId,
        to_tree: &str,
        held: Option<&Quarantine>,
    ) -> Result<Vec<String>, GitError> {
        let common_dir = self.common_dir();
        let git = match held {
            Some(q) => cli::git(common_dir).env("GIT_ALTERNATE_OBJECT_DIRECTORIES", q.objects()),
            None => cli::git(common_dir),
        };
        let out = git
            .args([
                "diff-tree",
                "-r",
                "-z",
                "--name-only",
                "--no-renames",
                "--no-commit-id",
            ])
            .arg(format!("{from}^{{tree}}"))
            .arg(to_tree)
            .run()?;
        let mut paths: Vec<String> = out
            .stdout
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        paths.sort();
        paths.dedup();
        Ok(paths)
    }
}

/// [`Repo::set_branch`] with the admin lock held.
fn set_branch_locked(repo: &Repository, branch: &str, sha: &CommitId) -> Result<(), GitError> {
    let name = branch_ref(branch)?;
    let commit = find_commit(repo, sha)?;
    if checked_out_by_user(repo, &name) {
        return Err(GitError::BranchCheckedOut {
            branch: branch.to_string(),
        });
    }
    repo.reference(&name, commit.id(), true, "orch: set branch")
        .map_err(git_err(format!("set branch `{branch}` to {sha}")))?;
    crate::killpoint::reached("stage-branch-set");
    Ok(())
}

/// Whether `refname` is the `HEAD` of the main working tree or of a linked
/// worktree that lives outside the common git dir.
fn checked_out_by_user(repo: &Repository, refname: &str) -> bool {
    let common = clean_path(repo.commondir());
    let head_is = |head_file: &Path| {
        std::fs::read_to_string(head_file)
            .map(|text| text.trim_end() == format!("ref: {refname}"))
            .unwrap_or(false)
    };
    if head_is(&common.join("HEAD")) {
        return true;
    }
    let Ok(names) = repo.worktrees() else {
        return false;
    };
    let real_common = std::fs::canonicalize(&common).unwrap_or_else(|_| common.clone());
    names.iter().flatten().flatten().any(|name| {
        // A worktree whose directory is gone still counts, as it does for git
        // until it is pruned.
        let orchs_own = repo
            .find_worktree(name)
            .ok()
            .and_then(|worktree| std::fs::canonicalize(worktree.path()).ok())
            .is_some_and(|path| path.starts_with(&real_common));
        !orchs_own && head_is(&common.join("worktrees").join(name).join("HEAD"))
    })
}

impl Repo {
    /// The URL of remote `name`, `None` when there is no such remote or its
    /// URL is not UTF-8.
    pub fn remote_url(&self, name: &str) -> Result<Option<String>, GitError> {
        let remote = self.git2()?.find_remote(name).ok();
        Ok(remote.and_then(|rm| rm.url().ok().map(str::to_owned)))
    }

    /// Whether the repository has a remote called `name`.
    pub fn has_remote(&self, name: &str) -> Result<bool, GitError> {
        Ok(self.git2()?.find_remote(name).is_ok())
    }

    /// Whether reference `name` (a full ref name) exists.
    pub fn has_reference(&self, name: &str) -> Result<bool, GitError> {
        Ok(self.git2()?.find_reference(name).is_ok())
    }

    /// The bytes of `path` in `HEAD`'s tree, `None` when `HEAD` or the path
    /// cannot be read there (no such file, a directory, an unborn `HEAD`).
    pub fn file_at_head(&self, path: &Path) -> Result<Option<Vec<u8>>, GitError> {
        let repo = self.git2()?;
        let head = repo.head().ok().and_then(|h| h.peel_to_tree().ok());
        Ok(head
            .and_then(|t| t.get_path(path).ok())
            .and_then(|e| repo.find_blob(e.id()).ok())
            .map(|b| b.content().to_vec()))
    }

    /// Writes the files of commit `sha`'s tree into `dest` (no checkout, no
    /// index): each blob at its path, directories made as needed.
    pub fn export_tree(&self, sha: &CommitId, dest: &Path) -> Result<(), GitError> {
        let repo = self.git2()?;
        let op = || format!("export the tree of {sha}");
        let tree = find_commit(repo, sha)?.tree().map_err(git_err(op()))?;
        let mut files = Vec::new();
        tree.walk(git2::TreeWalkMode::PreOrder, |root, entry| {
            if entry.kind() == Some(git2::ObjectType::Blob) {
                files.push((
                    format!("{root}{}", entry.name().unwrap_or_default()),
                    entry.id(),
                ));
            }
            git2::TreeWalkResult::Ok
        })
        .map_err(git_err(op()))?;
        for (path, id) in files {
            let blob = repo.find_blob(id).map_err(git_err(op()))?;
            let target = dest.join(&path);
            if let Some(p) = target.parent() {
                std::fs::create_dir_all(p).map_err(super::error::io_err("create", p))?;
            }
            std::fs::write(&target, blob.content())
                .map_err(super::error::io_err("write", &target))?;
        }
        Ok(())
    }
}
