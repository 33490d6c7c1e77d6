//! The limits a child process runs under and what a finished one did;
//! shared by the files of `exec` (a leaf: it imports none of them but
//! `group`'s grace period).

use std::time::Duration;

/// Default time a `bash` call may run when the model gives no `timeout_secs`.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Upper bound for a model-requested timeout.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// Time between SIGTERM and SIGKILL of a timed-out process group.
pub(crate) const GRACE: Duration = super::group::GRACE;
/// Output bytes sent back to the model (head + tail).
pub(crate) const MAX_OUTPUT_BYTES: usize = 16 * 1024;
/// How long to keep reading the pipe after the command and everything it
/// started were killed; bounds the wait on a process that escaped its reaper
/// (one the reaper could not kill) while holding the pipe.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// Limits for one child process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecLimits {
    /// Timeout when the caller asks for none.
    pub default_timeout: Duration,
    /// Largest timeout a caller may ask for (requests above are clamped).
    pub max_timeout: Duration,
    /// SIGTERM → SIGKILL delay on timeout.
    pub grace: Duration,
    /// Output bytes kept (head + tail); the middle is replaced by a marker.
    pub max_output_bytes: usize,
    /// How long to read the pipe after the child exited.
    pub drain_timeout: Duration,
}

impl Default for ExecLimits {
    fn default() -> Self {
        ExecLimits {
            default_timeout: DEFAULT_TIMEOUT,
            max_timeout: MAX_TIMEOUT,
            grace: GRACE,
            max_output_bytes: MAX_OUTPUT_BYTES,
            drain_timeout: DRAIN_TIMEOUT,
        }
    }
}

/// What a finished child process did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExecResult {
    /// Exit code, when the child exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended the child, when it was killed.
    pub signal: Option<i32>,
    /// True when the timeout fired and the group was killed.
    pub timed_out: bool,
    /// stdout and stderr interleaved, lossily decoded, capped head + tail with
    /// a `[… N lines omitted …]` marker in between when anything was dropped.
    pub output: String,
    /// Lines dropped from the middle of the output (0 when nothing was dropped).
    pub omitted_lines: usize,
    /// Wall time from spawn to the end of draining.
    pub duration: Duration,
}
