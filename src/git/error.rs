//! The error of the git layer and the wrappers that build it (a leaf of
//! `git`: every file of it returns this error).

use std::path::{Path, PathBuf};

use git2::ErrorCode;

/// An error of the git layer; its message reads after "failed to …".
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// No repository was found at or above the path.
    #[error(
        "open a git repository at {}: not a git repository (orch works on one: run it inside, or name it with --repo DIR)",
        .path.display()
    )]
    NotARepo { path: PathBuf },
    /// The repository has no working tree.
    #[error("use the repository at {}: it is bare; orch needs a working tree", .path.display())]
    BareRepo { path: PathBuf },
    /// The repository has no commit to start a run from.
    #[error("use the repository at {}: it has no commits yet; commit something first", .path.display())]
    NoCommits { path: PathBuf },
    /// libgit2 could not open the repository.
    #[error("open the git repository at {}: {}", .path.display(), describe(.source))]
    Open {
        path: PathBuf,
        #[source]
        source: git2::Error,
    },
    /// A revision does not name a commit.
    #[error("resolve `{rev}` to a commit: {}", describe(.source))]
    Resolve {
        rev: String,
        #[source]
        source: git2::Error,
    },
    /// A branch name git would not accept.
    #[error("use `{branch}` as a branch name: it is not a valid ref name")]
    InvalidBranch { branch: String },
    /// A worktree name that cannot name an admin directory.
    #[error("use `{name}` as a worktree name: it must be a non-empty single path component")]
    InvalidWorktreeName { name: String },
    /// The branch is the one checked out in the user's working tree.
    #[error("move branch `{branch}`: it is checked out in the user's working tree")]
    BranchCheckedOut { branch: String },
    /// The worktree path is taken.
    #[error("create a worktree at {}: the path already exists", .path.display())]
    PathExists { path: PathBuf },
    /// A worktree admin entry of that name exists already.
    #[error(
        "create worktree `{name}`: its admin directory {} already exists (remove the old worktree or pick another name)",
        .admin.display()
    )]
    WorktreeNameTaken { name: String, admin: PathBuf },
    /// A path that should be one of orch's linked worktrees is not.
    #[error(
        "use {} as an orch worktree: it is not a linked worktree (refusing to touch the user's working tree)",
        .path.display()
    )]
    NotLinkedWorktree { path: PathBuf },
    /// `remove_worktree` was given a path that is not the named worktree.
    #[error("remove worktree `{name}` at {}: {reason}", .path.display())]
    WorktreeMismatch {
        name: String,
        path: PathBuf,
        reason: String,
    },
    /// Any other libgit2 failure; `op` names what and where.
    #[error("{op}: {}", describe(.source))]
    Git {
        op: String,
        #[source]
        source: git2::Error,
    },
    /// A `git` command failed; `command` reads after "failed to".
    #[error("{command}: {detail}")]
    Cli { command: String, detail: String },
    /// A file-system failure; `op` is a verb phrase completed by the path.
    #[error("{op} {}: {source}", .path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The whole of a libgit2 error: its message, completed with its class and
/// code when the message alone does not say what went wrong (libgit2 ends
/// some messages with a bare `:` when the OS gave no reason), and with what a
/// lock conflict means.
pub(crate) fn describe(e: &git2::Error) -> String {
    let msg = e.message().trim().trim_end_matches(':').trim_end();
    let msg = if msg.is_empty() {
        "libgit2 gave no message"
    } else {
        msg
    };
    if e.code() == ErrorCode::Locked {
        return format!(
            "{msg} (the lock file exists: another git process is updating it, or one was killed mid-update and left it behind)"
        );
    }
    if e.message().trim_end().ends_with(':') || e.message().trim().is_empty() {
        return format!("{msg} (libgit2 {:?} error, code {:?})", e.class(), e.code());
    }
    msg.to_owned()
}

/// Wraps a libgit2 error with a description of the operation.
pub(crate) fn git_err(op: impl Into<String>) -> impl FnOnce(git2::Error) -> GitError {
    let op = op.into();
    move |source| GitError::Git { op, source }
}

/// Wraps an I/O error with a verb phrase and the path.
pub(crate) fn io_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> GitError {
    let path = path.to_path_buf();
    move |source| GitError::Io { op, path, source }
}
