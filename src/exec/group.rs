//! Process groups: every child orch starts (a tool command, a subagent)
//! leads a process group of its own under a reaper of its own
//! ([`super::reaper`]), so it and everything it starts — also what leaves
//! the group (`setsid`, daemons) — can be stopped together, and is.
//!
//! Invariants:
//! - [`ProcessGroup::spawn`] starts the reaper, which starts the command in
//!   a new group (the command's pid is the group id) and runs an optional
//!   [`PreExec`] hook in the command between fork and exec (where a sandbox
//!   restricts it before it runs anything; the reaper forks before, so it is
//!   not restricted);
//! - when [`ProcessGroup::wait`] returns, the command and every process it
//!   started are gone (the reaper SIGKILLs what is left as soon as the
//!   command exits), except what the reaper reported it could not kill,
//!   which is logged;
//! - signals reach the command's group through the reaper
//!   ([`ProcessGroup::signal`]), which sends them only while the command is
//!   not reaped, so a late signal cannot hit a recycled process id;
//! - stopping is SIGTERM to the group, a grace period, then SIGKILL of the
//!   whole tree ([`ProcessGroup::stop`]);
//! - dropping a [`ProcessGroup`] whose command still runs ends the call: the
//!   reaper SIGKILLs the tree, and the drop waits (bounded by
//!   [`DROP_WAIT`]) until it is gone, so a cancelled call leaves nothing
//!   running when its future is dropped;
//! - [`reap_run_orphans`] finds what an `orch` killed with SIGKILL left
//!   running, by the run marker in the environment (the reaper of a killed
//!   orch also sweeps its tree by itself when its control pipe closes).

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::env::RUN_MARKER;
use super::reaper::{self, Reaper, Report, fallback};
use crate::ids::RunId;

/// Time between SIGTERM and SIGKILL when a process group is stopped.
pub(crate) const GRACE: Duration = Duration::from_secs(2);
/// Upper bound of the wait in a drop for the reaper's sweep (which gives up
/// by itself after about 2 s without progress).
pub(crate) const DROP_WAIT: Duration = Duration::from_secs(5);

/// A hook run in the child after fork and before exec (e.g. applying a
/// sandbox). It runs in a forked copy of a multi-threaded process: it must
/// only make async-signal-safe calls (prepare everything before the spawn;
/// the hook itself should do little more than the final syscall).
#[derive(Clone)]
pub struct PreExec(Arc<dyn Fn() -> std::io::Result<()> + Send + Sync>);

impl PreExec {
    /// Wraps `hook`; an `Err` from it makes the spawn fail with that error.
    pub fn new(hook: impl Fn() -> std::io::Result<()> + Send + Sync + 'static) -> Self {
        PreExec(Arc::new(hook))
    }

    /// Runs the hook (in the child: from another hook that wraps this one).
    pub fn run(&self) -> std::io::Result<()> {
        (self.0)()
    }
}

impl std::fmt::Debug for PreExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PreExec(..)")
    }
}

/// A started command leading its own process group, under its reaper.
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    /// The reaper: orch's direct child; the command is the reaper's child.
    reaper_process: tokio::process::Child,
    reaper: Reaper,
    /// The command's pid (its group id), from the reaper's first record.
    pid: Option<libc::pid_t>,
    /// The command's exit status, once the reaper exited.
    status: Option<ExitStatus>,
}

impl ProcessGroup {
    /// Starts `cmd` as the leader of a new process group under a reaper,
    /// with `pre_exec` run in the command before exec. The caller sets
    /// program, arguments, environment and stdio.
    pub(crate) fn spawn(
        cmd: &mut tokio::process::Command,
        pre_exec: Option<&PreExec>,
    ) -> std::io::Result<ProcessGroup> {
        let (reaper, ends) = Reaper::pipes()?;
        // The reaper leads a group of its own (out of the terminal's), and
        // must survive a dropped group: it is what kills the tree then.
        cmd.process_group(0).kill_on_drop(false);
        // SAFETY: the hook runs between fork and exec and makes only raw
        // system calls on stack values (see `reaper`); it is registered
        // first, so the hooks below run in the command only.
        unsafe {
            cmd.pre_exec(reaper::hook(&ends));
        }
        if let Some(PreExec(hook)) = pre_exec {
            let hook = Arc::clone(hook);
            // SAFETY: the hook runs between fork and exec; `PreExec`
            // documents that it must only make async-signal-safe calls.
            unsafe {
                cmd.pre_exec(move || hook());
            }
        }
        let reaper_process = cmd.spawn()?;
        // The reaper wrote the command's pid before the spawn returned (it
        // does before closing its copy of the exec-error pipe the spawn
        // reads to its end).
        drop(ends);
        let mut group = ProcessGroup {
            reaper_process,
            reaper,
            pid: None,
            status: None,
        };
        group.pid = group.reaper.read_report().pid;
        Ok(group)
    }

    /// The command's pid, which is also its process group id (0 when
    /// unknown).
    pub(crate) fn pid(&self) -> u32 {
        self.pid.map_or(0, |p| p as u32)
    }

    /// Waits for the command to exit and the reaper to have killed what it
    /// left; returns the command's exit status.
    pub(crate) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let own = self.reaper_process.wait().await?;
        let report = self.reaper.read_report();
        log_report(&report);
        let status = match report.status {
            Some(raw) => ExitStatus::from_raw(raw),
            None => {
                // Only a kill from outside ends a reaper before its command.
                tracing::warn!(
                    pid = report.pid,
                    reaper = %own,
                    "the reaper of a command died before it; killing the command's group, what left it may outlive it"
                );
                if let Some(pid) = report.pid {
                    signal_group(pid, rustix::process::Signal::KILL);
                }
                own
            }
        };
        self.status = Some(status);
        Ok(status)
    }

    /// Sends `signal` to the command's group (nothing once it was reaped).
    pub(crate) fn signal(&self, signal: libc::c_int) {
        if self.status.is_none() {
            self.reaper.signal(signal);
        }
    }

    /// SIGKILLs the command's group and every process it started (the
    /// reaper does, then exits; [`ProcessGroup::wait`] for it).
    pub(crate) fn kill(&mut self) {
        self.reaper.end();
    }

    /// SIGTERM to the group, up to `grace` for the command to exit, then
    /// SIGKILL of the whole tree; returns the command's exit status.
    pub(crate) async fn stop(&mut self, grace: Duration) -> std::io::Result<ExitStatus> {
        self.signal(libc::SIGTERM);
        match tokio::time::timeout(grace, self.wait()).await {
            Ok(status) => status,
            Err(_) => {
                self.kill();
                self.wait().await
            }
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        self.reaper.end();
        if let Some(pid) = self.reaper_process.id() {
            wait_exited(pid as libc::pid_t, DROP_WAIT);
        }
    }
}

/// Blocks until the child `pid` exited (without reaping it: tokio does), at
/// most `bound`.
fn wait_exited(pid: libc::pid_t, bound: Duration) {
    use rustix::event::{PollFd, PollFlags};
    use rustix::process::{Pid, PidfdFlags, WaitId, WaitIdOptions};
    let deadline = Instant::now() + bound;
    let Some(pid) = Pid::from_raw(pid.max(0)) else {
        return;
    };
    // On our own unreaped child, so the pid is not a recycled one.
    if let Ok(fd) = rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
        let mut pfd = [PollFd::new(&fd, PollFlags::IN)];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let timeout = Duration::from_millis(left.as_millis() as u64);
            let rc = match rustix::time::Timespec::try_from(timeout) {
                Ok(t) => rustix::event::poll(&mut pfd, Some(&t)),
                Err(_) => rustix::event::poll(&mut pfd, None),
            };
            if rc != Err(rustix::io::Errno::INTR) || left.is_zero() {
                return;
            }
        }
    }
    // No pidfd (before Linux 5.3): look without reaping, every millisecond.
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    while Instant::now() < deadline {
        // An error, or a state of the child: it exited.
        let exited = !matches!(rustix::process::waitid(WaitId::Pid(pid), options), Ok(None));
        if exited {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Logs what a reaper reported: each unavailable mechanism once per
/// process as a warning (never silently), survivors every time.
fn log_report(report: &Report) {
    static WARNED: AtomicU32 = AtomicU32::new(0);
    let new = report.fallbacks & !WARNED.fetch_or(report.fallbacks, Ordering::Relaxed);
    if new & fallback::NO_SUBREAPER != 0 {
        tracing::warn!(
            "prctl(PR_SET_CHILD_SUBREAPER) failed: processes that leave a command's process group (setsid, daemons) may outlive it"
        );
    }
    if new & fallback::PROC_SCAN != 0 {
        tracing::warn!(
            "/proc/thread-self/children is unavailable: a command's leftover processes are found by scanning /proc (slower)"
        );
    }
    if new & fallback::NO_PROC != 0 {
        tracing::warn!(
            "/proc is unreadable: only a command's process group is killed at its end; processes that left it may outlive it"
        );
    }
    if new & fallback::NO_SIGNALFD != 0 {
        tracing::warn!("signalfd failed: the reaper polls for exited processes");
    }
    tracing::debug!(
        pid = report.pid,
        sweep_us = report.sweep_us,
        fallbacks = report.fallbacks,
        "the command's reaper ended its tree"
    );
    if report.survivors > 0 {
        tracing::warn!(
            pid = report.pid,
            survivors = report.survivors,
            "processes started by a command could not be killed and outlive it"
        );
    }
}

/// Sends `signal` to the process group `pgid`; a gone group is fine.
fn signal_group(pgid: libc::pid_t, signal: rustix::process::Signal) {
    // Only used when the command's reaper died before reaping it (so the
    // command, re-parented, most likely still leads the group); ESRCH (group
    // already gone) is expected and ignored.
    if let Some(pgid) = rustix::process::Pid::from_raw(pgid.max(0)) {
        let _ = rustix::process::kill_process_group(pgid, signal);
    }
}

/// Kills every process marked with `run_id` (see [`RUN_MARKER`]) together
/// with its process group: what an `orch` that was SIGKILLed in the middle
/// of a tool call or a subagent left running. Returns how many processes
/// were found. Linux only (reads `/proc`); elsewhere it finds nothing.
pub(crate) fn reap_run_orphans(run_id: &RunId) -> usize {
    let marker = format!("{RUN_MARKER}={run_id}");
    let me = std::process::id();
    let mut found = 0;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ.split(|b| *b == 0).any(|v| v == marker.as_bytes()) {
            found += 1;
            use rustix::process::{Pid, Signal};
            // A pid read from /proc is positive; an error (the process is
            // gone) is fine.
            if let Some(pid) = libc::pid_t::try_from(pid).ok().and_then(Pid::from_raw) {
                if let Ok(pgid) = rustix::process::getpgid(Some(pid)) {
                    let _ = rustix::process::kill_process_group(pgid, Signal::KILL);
                }
                let _ = rustix::process::kill_process(pid, Signal::KILL);
            }
        }
    }
    found
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::process::Stdio;

    /// Live (non-zombie) processes whose process group is `pgid`.
    fn live_members(pgid: libc::pid_t) -> usize {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return 0;
        };
        dir.flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|stat| {
                let Some((_, rest)) = stat.rsplit_once(')') else {
                    return false;
                };
                let fields: Vec<&str> = rest.split_whitespace().collect();
                fields.first() != Some(&"Z") && fields.get(2) == Some(&pgid.to_string().as_str())
            })
            .count()
    }

    /// Waits (bounded) until `killpg(pgid, 0)` reports ESRCH. Members that are
    /// already dead but not yet reaped by init (zombies) count as gone: reaping
    /// orphans is init's job, and a loaded machine can be slow at it.
    pub(crate) fn group_gone(pgid: libc::pid_t) -> bool {
        for _ in 0..250 {
            // Signal 0 only checks for existence.
            let rc = rustix::process::Pid::from_raw(pgid.max(0))
                .map(rustix::process::test_kill_process_group);
            if rc == Some(Err(rustix::io::Errno::SRCH)) {
                return true;
            }
            if live_members(pgid) == 0 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// A bash that ignores SIGTERM, with a background sleeper in its group;
    /// it creates `ready` once the trap is set.
    fn sleeper(dir: &std::path::Path) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new("bash");
        cmd.args(["-c", "trap '' TERM; touch ready; sleep 1000 & sleep 1000"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    /// Waits (bounded) until `path` exists.
    fn appears(path: &std::path::Path) -> bool {
        (0..500).any(|_| {
            let there = path.exists();
            if !there {
                std::thread::sleep(Duration::from_millis(20));
            }
            there
        })
    }

    #[tokio::test]
    async fn stop_escalates_to_sigkill_and_takes_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let mut g = ProcessGroup::spawn(&mut sleeper(dir.path()), None).unwrap();
        let pgid = g.pid() as libc::pid_t;
        assert!(
            appears(&dir.path().join("ready")),
            "the shell did not start"
        );
        let status =
            tokio::time::timeout(Duration::from_secs(30), g.stop(Duration::from_millis(300)))
                .await
                .expect("stop hung")
                .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "TERM is ignored");
        assert!(group_gone(pgid), "group {pgid} survived");
    }

    #[tokio::test]
    async fn dropping_an_armed_group_kills_it() {
        let dir = tempfile::tempdir().unwrap();
        let g = ProcessGroup::spawn(&mut sleeper(dir.path()), None).unwrap();
        let pgid = g.pid() as libc::pid_t;
        assert!(
            appears(&dir.path().join("ready")),
            "the shell did not start"
        );
        drop(g);
        assert!(group_gone(pgid), "group {pgid} survived its guard");
    }

    #[tokio::test]
    async fn the_pre_exec_hook_runs_in_the_child_and_can_refuse_the_spawn() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = tokio::process::Command::new("bash");
        cmd.args(["-c", "echo x > seen"])
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default());
        // The hook changes the child's umask (an async-signal-safe call);
        // the file the child writes shows it.
        let hook = PreExec::new(|| {
            // SAFETY: umask is async-signal-safe.
            unsafe {
                libc::umask(0o077);
            }
            Ok(())
        });
        let mut g = ProcessGroup::spawn(&mut cmd, Some(&hook)).unwrap();
        assert!(g.wait().await.unwrap().success());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("seen"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "the hook's umask applied: {mode:o}");

        let refuse = PreExec::new(|| Err(std::io::Error::from_raw_os_error(libc::EPERM)));
        let err = ProcessGroup::spawn(&mut tokio::process::Command::new("true"), Some(&refuse))
            .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPERM));
    }
}
