//! The error of writing or reading a run record (a leaf of `runlog`).

use std::path::{Path, PathBuf};

/// Errors while writing or reading a run record.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// An I/O error on a record file.
    #[error("write the run record at {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// `state.json` could not be parsed.
    #[error("read the run state {path}: {reason}")]
    Corrupt {
        /// The state file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// Another process is working on the run.
    #[error(
        "work on run `{run}`: another orch process (pid {holder}) is running it; wait for it or stop it first"
    )]
    Locked {
        /// The run id.
        run: String,
        /// The holder's pid, as it wrote it.
        holder: String,
    },
    /// More than one run's id starts with the prefix given.
    #[error("find run `{prefix}`: it is the start of {} run ids ({}); type more of the one you mean", .candidates.len(), .candidates.join(", "))]
    AmbiguousRun {
        /// The prefix given.
        prefix: String,
        /// The ids it starts, newest first.
        candidates: Vec<String>,
    },
    /// No run with this id exists.
    #[error("find run `{run}` under {dir} (known runs: {known})")]
    UnknownRun {
        /// The id asked for.
        run: String,
        /// Where runs live.
        dir: PathBuf,
        /// The ids that exist, newest first (a few).
        known: String,
    },
}

pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RecordError + '_ {
    move |source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    }
}
