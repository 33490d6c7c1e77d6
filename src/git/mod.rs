//! The git layer: one linked worktree per run, one commit per stage, branches
//! that record every stage, and diffs between any two of them.
//!
//! Invariants:
//! - The user's working tree, index, `HEAD` and current branch are never
//!   written. Everything orch changes lives in its own linked worktree (under the
//!   common git dir) and in `refs/heads/orch/…`. Functions that write files or an
//!   index ([`commit_all`], [`reset_worktree`]) refuse anything but a linked
//!   worktree, and [`Repo::set_branch`] refuses the branch the user has checked out.
//! - The operations on the user's repository are methods of one handle,
//!   [`Repo`], which opens the repository (reads its config files and refs)
//!   on first use and keeps it: make one per blocking task and pass `&Repo`
//!   down. Everything here is synchronous (libgit2 blocks, and a handle
//!   cannot be shared between threads), so async callers run it through
//!   `spawn_blocking`.
//! - Work is proportional to what changed as far as libgit2 allows: staging
//!   walks the worktree once, trusting the index's stat cache for unchanged files.

pub(crate) mod cli;
mod commit;
mod diff;
mod error;
pub mod gc;
pub mod ignored;
mod merge;
mod open;
pub mod pool;
mod repo;
pub mod shadow;
pub mod snapshot;
mod staging;
pub mod watch;
mod worktree;

#[cfg(test)]
pub(crate) mod testutil;

pub use error::GitError;
pub(crate) use error::{git_err, io_err};
pub(crate) use open::{find_commit, open_at, open_linked_worktree, signature};

use std::path::{Path, PathBuf};

use git2::{ErrorCode, Repository};

pub use commit::commit_all;
pub(crate) use diff::without_index;
pub use diff::{Diff, DiffStat, FileStat};
pub use merge::MergeOutcome;
pub use repo::{CommitId, InvalidCommitId, Repo};
pub use shadow::Quarantine;
pub use staging::{Staged, stage_tree, stage_tree_held};
pub use worktree::{AdminLock, clean_moved, move_tracked, move_worktree, reset_worktree};

/// The most bytes of parsed objects (commits, trees) libgit2 keeps cached
/// across all open repositories. Its default, 256 MB, let the cache grow
/// with the repository: a checkout, a tree walk or a diff of a 100,000-file
/// commit parses every tree once, and each later lookup of the same object
/// costs only a re-read from the (mapped) pack.
pub const OBJECT_CACHE_MAX_BYTES: usize = 4 << 20;

/// Size of one window libgit2 maps of a pack file (its default: 1 GB).
pub const PACK_WINDOW_BYTES: usize = 2 << 20;

/// The most bytes of pack files libgit2 keeps mapped at once (its default:
/// 8 GB). Mapped pages of a pack count in the process's RSS once read; a
/// checkout reads every blob of the commit, so without a bound the whole
/// pack stayed resident (8.5 MB of a 100,000-file repository's pack).
pub const PACK_MAPPED_MAX_BYTES: usize = 4 << 20;

/// Caps the memory libgit2 keeps for itself: parsed objects
/// ([`OBJECT_CACHE_MAX_BYTES`]) and mapped packs ([`PACK_MAPPED_MAX_BYTES`]),
/// so a run's peak memory does not grow with the repository.
///
/// # Safety
///
/// Writes libgit2's process-wide options without synchronisation: call it
/// once, before any thread that might use libgit2 exists.
pub unsafe fn limit_memory() -> Result<(), GitError> {
    let size = libc::ssize_t::try_from(OBJECT_CACHE_MAX_BYTES).unwrap_or(libc::ssize_t::MAX);
    // SAFETY: the caller guarantees no other thread uses libgit2 yet.
    unsafe { git2::opts::set_cache_max_size(size) }
        .map_err(git_err("cap libgit2's object cache"))?;
    // SAFETY: the caller guarantees no other thread uses libgit2 yet, so
    // these unsynchronised writes of its globals race with nothing.
    unsafe {
        git2::opts::set_mwindow_size(PACK_WINDOW_BYTES)
            .and_then(|()| git2::opts::set_mwindow_mapped_limit(PACK_MAPPED_MAX_BYTES))
    }
    .map_err(git_err("cap libgit2's pack windows"))?;
    Ok(())
}

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
fn clean_path(path: &Path) -> PathBuf {
    path.components().collect()
}

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

#[cfg(test)]
mod tests;
#[cfg(test)]
mod watch_tests;
