//! The error of preparing the sandbox for one child process (a leaf of
//! `sandbox`: every file that builds a ruleset returns it).

use std::path::PathBuf;

/// An error while preparing the sandbox for one child process.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A path a rule names could not be opened or listed.
    #[error("open sandbox path {path}: {source}")]
    Path {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The lane's git metadata (`<lane>/.git`, its `commondir`) is not readable.
    #[error("read git metadata of lane {lane}: {detail}")]
    LaneGit {
        /// The lane worktree.
        lane: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The kernel refused the ruleset (the message names the call).
    #[error("build the Landlock ruleset: {0}")]
    Ruleset(String),
}
