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
//! - [`shell`]: `bash -c` for the `bash` tool, built from the above;
//! - `limits` and `pipe`: the limits and result type and the close-on-exec
//!   pipe the files above share (leaves, so no file imports this one).
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
mod limits;
mod pipe;
mod reaper;
pub(crate) mod shell;

pub(crate) use env::{RUN_MARKER, is_secret_name, scrubbed_env};
pub(crate) use group::{PreExec, ProcessGroup, reap_run_orphans};
pub(crate) use limits::{DRAIN_TIMEOUT, ExecLimits, ExecResult};
pub(crate) use shell::{run_shell, run_shell_with};
