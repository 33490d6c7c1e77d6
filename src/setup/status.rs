//! A setup step's progress: what both the record and the event stream name.

use serde::{Deserialize, Serialize};

/// A step's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StepStatus {
    /// Not run yet (or interrupted while running).
    #[default]
    Pending,
    /// Ran, and its check passed.
    Verified,
    /// Ran, and it or its check failed.
    Failed,
    /// The user said no.
    Skipped,
}
