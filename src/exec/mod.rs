//! Child processes for tool calls: `bash -c` in its own process group under
//! a reaper, with a scrubbed environment, closed stdin, a timeout, and
//! capped output.
//!
//! - [`env`]: the environment allowlist and the secret-name rule;
//! - [`reaper`]: the per-call subreaper between orch and a command, which
//!   kills everything the command started when it ends (also `setsid`,
//!   double forks, daemons) — why this mechanism is in its doc;
//! - [`group`]: process groups (spawn in a group under a reaper with an
//!   optional pre-exec hook, SIGTERM → grace → SIGKILL, drop guard, orphan
//!   reaping), used by tool commands and subagents alike;
//! - [`capture`]: one pipe for stdout and stderr, read into a bounded buffer;
//! - [`shell`]: `bash -c` for the `bash` tool, built from the above.
//!
//! Invariants:
//! - the child gets exactly the environment it is given (`env_clear` first);
//!   [`scrubbed_env`] builds that environment from an allowlist, so API keys
//!   and tokens never reach tool processes;
//! - stdout and stderr share one pipe, so the captured output is interleaved in
//!   the order the child wrote it;
//! - at most the buffer's head + 2 × tail bytes are held in memory, whatever
//!   the child prints;
//! - no process outlives its tool call: when [`run_shell`] returns (or its
//!   future is dropped), no process the command started is left alive —
//!   background jobs, `nohup`, double forks, `setsid` and daemons alike —
//!   unless the reaper could not kill it (another user's process, one stuck
//!   in the kernel), which is logged. A stage's lane is therefore held by no
//!   process of the stage once its calls returned, and can go back to the
//!   lane pool;
//! - a grandchild that escaped the reaper while holding the pipe cannot delay
//!   the return by more than `drain_timeout`.

mod capture;
pub(crate) mod env;
pub(crate) mod group;
mod reaper;
pub(crate) mod shell;

use std::time::Duration;

pub(crate) use env::{RUN_MARKER, is_secret_name, scrubbed_env};
pub(crate) use group::{PreExec, ProcessGroup, reap_run_orphans};
pub(crate) use shell::{run_shell, run_shell_with};

/// Default time a `bash` call may run when the model gives no `timeout_secs`.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Upper bound for a model-requested timeout.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// Time between SIGTERM and SIGKILL of a timed-out process group.
pub(crate) const GRACE: Duration = group::GRACE;
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
