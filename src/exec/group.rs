//! Process groups: every child orch starts (a tool command, a subagent)
//! leads a process group of its own, so it and everything it starts can be
//! stopped together.
//!
//! Invariants:
//! - [`ProcessGroup::spawn`] puts the child in a new group (`setpgid(0, 0)`)
//!   and runs an optional [`PreExec`] hook in the child between fork and exec
//!   (where a sandbox restricts the child before it runs anything);
//! - stopping is SIGTERM to the group, a grace period, then SIGKILL
//!   ([`ProcessGroup::stop`]);
//! - while armed, dropping a [`ProcessGroup`] SIGKILLs the group (an
//!   abandoned future leaves nothing running); [`ProcessGroup::release`]
//!   disarms it once the group is done, so a late kill cannot hit a recycled
//!   process id;
//! - [`reap_run_orphans`] finds what an `orch` killed with SIGKILL left
//!   running, by the run marker in the environment.

use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use super::RUN_MARKER;

/// Time between SIGTERM and SIGKILL when a process group is stopped.
pub(crate) const GRACE: Duration = Duration::from_secs(2);

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

/// A started child leading its own process group.
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    child: tokio::process::Child,
    /// The group id (the child's pid) while the guard is armed.
    pgid: Option<libc::pid_t>,
}

impl ProcessGroup {
    /// Starts `cmd` as the leader of a new process group, with `pre_exec`
    /// run in the child before exec. The caller sets program, arguments,
    /// environment and stdio; this sets the group and `kill_on_drop`.
    pub(crate) fn spawn(
        cmd: &mut tokio::process::Command,
        pre_exec: Option<&PreExec>,
    ) -> std::io::Result<ProcessGroup> {
        cmd.process_group(0).kill_on_drop(true);
        if let Some(PreExec(hook)) = pre_exec {
            let hook = Arc::clone(hook);
            // SAFETY: the hook runs between fork and exec; `PreExec`
            // documents that it must only make async-signal-safe calls.
            unsafe {
                cmd.pre_exec(move || hook());
            }
        }
        let child = cmd.spawn()?;
        let pgid = child.id().map(|p| p as libc::pid_t).filter(|p| *p > 0);
        Ok(ProcessGroup { child, pgid })
    }

    /// The leader's pid (0 when unknown).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Waits for the leader to exit.
    pub(crate) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Sends `signal` to the whole group (nothing once released).
    pub(crate) fn signal(&self, signal: libc::c_int) {
        if let Some(pgid) = self.pgid {
            signal_group(pgid, signal);
        }
    }

    /// SIGTERM to the group, up to `grace` for the leader to exit, then
    /// SIGKILL; returns the leader's exit status.
    pub(crate) async fn stop(&mut self, grace: Duration) -> std::io::Result<ExitStatus> {
        self.signal(libc::SIGTERM);
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                self.signal(libc::SIGKILL);
                self.child.wait().await
            }
        }
    }

    /// After the leader exited: SIGKILLs what is left of the group
    /// (background jobs must not outlive their command) and disarms the
    /// guard.
    pub(crate) fn finish(&mut self) {
        self.signal(libc::SIGKILL);
        self.release();
    }

    /// Disarms the drop guard: the group is done with, and a later kill
    /// could hit a recycled process id.
    pub(crate) fn release(&mut self) {
        self.pgid = None;
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
    }
}

/// Sends `signal` to the process group `pgid`; a gone group is fine.
fn signal_group(pgid: libc::pid_t, signal: libc::c_int) {
    if pgid > 0 {
        // SAFETY: plain syscall on a group created for the child with
        // `process_group(0)`, so its id equals the child's pid. ESRCH (group
        // already gone) is expected and ignored.
        unsafe {
            libc::killpg(pgid, signal);
        }
    }
}

/// Kills every process marked with `run_id` (see [`RUN_MARKER`]) together
/// with its process group: what an `orch` that was SIGKILLed in the middle
/// of a tool call or a subagent left running. Returns how many processes
/// were found. Linux only (reads `/proc`); elsewhere it finds nothing.
pub(crate) fn reap_run_orphans(run_id: &str) -> usize {
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
            let pid = pid as libc::pid_t;
            // SAFETY: plain signal syscalls on a pid read from /proc.
            unsafe {
                let pgid = libc::getpgid(pid);
                if pgid > 0 {
                    libc::killpg(pgid, libc::SIGKILL);
                }
                libc::kill(pid, libc::SIGKILL);
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
            // SAFETY: signal 0 only checks for existence.
            let rc = unsafe { libc::killpg(pgid, 0) };
            if rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
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
        g.finish();
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
        g.finish();
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
