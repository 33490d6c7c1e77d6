//! Distributed runs through a git remote: the run record as a ref
//! ([`runref`]), the remote round trips (fetch, compare-and-swap push) done
//! with the `git` CLI ([`remote`]), and `orch stage`'s worker: claim one
//! stage of a run on the remote, run it in a local lane, publish it
//! ([`worker`]). See `docs/distributed.md`.

pub(crate) mod remote;
pub(crate) mod runref;
pub(crate) mod worker;

use crate::git::GitError;
use crate::runlog::RecordError;
use crate::runner::RunError;

/// Errors of a distributed step.
#[derive(Debug, thiserror::Error)]
pub enum DistError {
    /// A local git operation failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// The local run record could not be written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// Running the stage failed (not the stage itself: orch).
    #[error(transparent)]
    Run(#[from] RunError),
    /// The remote could not be reached or refused a push for another
    /// reason than a lease.
    #[error("{op} on the remote {url}: {detail}")]
    Remote {
        /// What was tried.
        op: String,
        /// The remote.
        url: String,
        /// What git said.
        detail: String,
    },
    /// The run or stage cannot be worked on as asked.
    #[error("{0}")]
    Refused(String),
}
