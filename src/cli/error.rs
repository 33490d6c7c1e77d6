//! The command line's error and its exit code.

use crate::catalog::CatalogError;
use crate::exit;
use crate::git::GitError;
use crate::llm::LlmError;
use crate::runlog::RecordError;
use crate::runner::RunError;

/// An error of a command, with the exit code it maps to.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad usage or input.
    #[error("{0}")]
    Invalid(String),
    /// Pipeline/role lookup or validation.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// Model configuration or provider.
    #[error("failed to {0}")]
    Model(#[from] LlmError),
    /// Git.
    #[error("failed to {0}")]
    Git(#[from] GitError),
    /// The run record.
    #[error("failed to {0}")]
    Record(#[from] RecordError),
    /// A run that could not proceed.
    #[error("failed to {0}")]
    Run(RunError),
    /// The model server failed the preflight (unreachable, key refused,
    /// model not served): exit 3, nothing created.
    #[error("{0}")]
    Preflight(String),
    /// The forge's API, or the push to its remote.
    #[error(transparent)]
    Forge(#[from] crate::forge::ForgeError),
    /// A git remote could not be reached or refused a push (exit 4, as git).
    #[error("failed to {0}")]
    Remote(String),
    /// Anything else.
    #[error("{0}")]
    Internal(String),
    /// Stdout was closed by its reader (`orch log last | head -1`): a normal
    /// end, exit 0 and no message (see `cli/output.rs`).
    #[error("stop writing: stdout was closed")]
    StdoutClosed,
}

impl From<RunError> for CliError {
    fn from(e: RunError) -> Self {
        match e {
            RunError::Git(g) => CliError::Git(g),
            RunError::Record(r) => CliError::Record(r),
            RunError::MissingRole { .. } | RunError::Refused(_) | RunError::Config(_) => {
                CliError::Invalid(format!("failed to {e}"))
            }
            other => CliError::Run(other),
        }
    }
}

impl From<crate::runlog::control::ControlError> for CliError {
    fn from(e: crate::runlog::control::ControlError) -> Self {
        use crate::runlog::control::ControlError;
        match e {
            ControlError::Record(r) => CliError::Record(r),
            io @ ControlError::Io { .. } => CliError::Internal(format!("failed to {io}")),
            refused => CliError::Invalid(format!("failed to {refused}")),
        }
    }
}

impl From<crate::distributed::DistError> for CliError {
    fn from(e: crate::distributed::DistError) -> Self {
        use crate::distributed::DistError;
        match e {
            DistError::Git(g) => CliError::Git(g),
            DistError::Record(r) => CliError::Record(r),
            DistError::Run(r) => r.into(),
            remote @ DistError::Remote { .. } => CliError::Remote(remote.to_string()),
            DistError::Refused(why) => CliError::Invalid(format!("failed to {why}")),
        }
    }
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Invalid(_) | CliError::Catalog(_) => exit::INVALID,
            CliError::Model(LlmError::Config(_)) => exit::INVALID,
            CliError::Model(_) | CliError::Preflight(_) => exit::MODEL,
            CliError::Git(_) | CliError::Remote(_) => exit::GIT,
            CliError::Record(
                crate::runlog::RecordError::UnknownRun { .. }
                | crate::runlog::RecordError::AmbiguousRun { .. }
                | crate::runlog::RecordError::Locked { .. },
            ) => exit::INVALID,
            CliError::Record(_) | CliError::Run(_) | CliError::Internal(_) => exit::INTERNAL,
            CliError::Forge(crate::forge::ForgeError::Invalid(_)) => exit::INVALID,
            CliError::Forge(crate::forge::ForgeError::Push(_)) => exit::GIT,
            CliError::Forge(crate::forge::ForgeError::Api(_)) => exit::FORGE,
            CliError::StdoutClosed => exit::OK,
        }
    }
}
