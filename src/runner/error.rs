//! The runner's error and the one way it runs git off the async threads.

use crate::git::GitError;
use crate::runlog::RecordError;
use std::path::PathBuf;

/// Errors that stop a run before or between stages (a failing stage is not
/// one of them: it is recorded in the run state).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A git operation failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// The run record could not be written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A role named by the pipeline is missing.
    #[error("find role `{role}` for stage `{stage}`")]
    MissingRole {
        /// The stage.
        stage: String,
        /// The role it names.
        role: String,
    },
    /// Setting up the tools of a stage failed.
    #[error("prepare the tools of stage `{stage}` in {path}: {source}")]
    Tools {
        /// The stage.
        stage: String,
        /// The worktree.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The run cannot be resumed or rolled back as asked.
    #[error("{0}")]
    Refused(String),
    /// The lane bootstrap's files are invalid (`.worktreeinclude`, the
    /// `[setup]` of `orch.toml`): nothing was created.
    #[error("{0}")]
    Config(String),
    /// A blocking task panicked or was cancelled.
    #[error("finish a background task: {0}")]
    Join(String),
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, GitError> + Send + 'static,
) -> Result<T, RunError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RunError::Join(e.to_string()))?
        .map_err(RunError::Git)
}
