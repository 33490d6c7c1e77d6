//! A setup step's progress: what both the record and the event stream name.

use serde::{Deserialize, Serialize};

/// A step's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StepStatus {
    /// Not run yet (or interrupted while running).
    #[default]
    Pending,
    /// Ran, and its check passed (having failed before the step).
    Verified,
    /// Not run: its check, seen failing earlier, passed right before the
    /// step (an earlier step or the machine already did it).
    Satisfied,
    /// Ran with exit 0, but its check passed before the step too (and was
    /// never seen failing), so the check shows nothing.
    Unverified,
    /// Ran, and it or its check failed.
    Failed,
    /// The user said no.
    Skipped,
}

impl StepStatus {
    /// Whether the step is behind the setup: a resume starts after it.
    pub(crate) fn done(self) -> bool {
        matches!(
            self,
            StepStatus::Verified | StepStatus::Satisfied | StepStatus::Unverified
        )
    }
}

/// What a step's check said when it ran before the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CheckBefore {
    /// It failed: the check can tell the step's work apart from its absence.
    Failed,
    /// It passed: the step is done already, or the check verifies nothing.
    Passed,
    /// It was not run (at plan time, a check that is not known to be
    /// read-only where no kernel sandbox keeps it read-only).
    NotRun,
}
