//! Reviewing runs: `orch runs`, `show`, `review`, `diff`, `log`, `watch`.
//! All read the run record and git; none changes anything.

mod follow;
mod log;
mod render;
mod review;
mod runs;
mod shared;
mod show;
mod watch;

pub(super) use log::LogArgs;
pub(super) use log::cmd_log;
pub(super) use review::{DiffArgs, ReviewArgs};
pub(super) use review::{cmd_diff, cmd_review};
pub(super) use runs::RunsArgs;
pub(super) use runs::cmd_runs;
pub(super) use show::ShowArgs;
pub(super) use show::cmd_show;
pub(super) use watch::WatchArgs;
pub(super) use watch::cmd_watch;
