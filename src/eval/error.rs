//! The error that stops an eval (a leaf of `eval`).

use std::path::PathBuf;

/// An error that stops an eval (a task that merely is not solved is not one).
#[derive(Debug, thiserror::Error)]
pub(crate) enum EvalError {
    /// A task directory is malformed; `path` names the offending file.
    #[error("failed to use the eval task {}: {reason}", path.display())]
    BadTask {
        /// The file or directory at fault.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// `--task NAME` named no task of the set.
    #[error("failed to find the eval task `{name}` in {}", dir.display())]
    UnknownTask {
        /// The name asked for.
        name: String,
        /// The task-set directory.
        dir: PathBuf,
    },
    /// `orch run` rejected its input (exit 2): the pipeline or model flags are wrong for every task.
    #[error(
        "failed to run the pipeline on task {task}: `orch run` rejected its input (exit 2): {message}"
    )]
    RunRejected {
        /// The task it happened on.
        task: String,
        /// The end of `orch run`'s stderr.
        message: String,
    },
    /// A git command eval runs itself failed.
    #[error("failed to {what} for task {task}: {message}")]
    Git {
        /// The task.
        task: String,
        /// What eval was doing, e.g. "commit the task's files".
        what: String,
        /// git's stderr, or why it could not run.
        message: String,
    },
    /// File-system trouble.
    #[error("failed to {what} ({}): {source}", path.display())]
    Io {
        /// What eval was doing.
        what: String,
        /// The path involved.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}
