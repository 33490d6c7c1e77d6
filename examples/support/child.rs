//! Exact rusage of one child process for the benchmark examples (included
//! with `#[path]`): the example re-executes itself as a small wrapper
//! (`--exec-child OUT program args…`) that spawns the program, reaps it with
//! `wait4` and writes when it started, its wall time, CPU time and peak RSS.
//!
//! Why the wrapper: Linux folds the memory high-water mark of the process
//! that spawned a child (at `exec`) into the child's `ru_maxrss`, so a
//! program spawned straight from a benchmark that holds a lot (recorded
//! requests, a generated repository's file list) would report the
//! benchmark's peak, not its own. The wrapper is a few MB.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

/// The flag that turns the example into the wrapper.
pub const EXEC_CHILD: &str = "--exec-child";

/// One finished, reaped child.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// Wall clock just before `spawn()` (in the wrapper).
    pub started_wall: SystemTime,
    /// Spawn to reaped.
    pub wall: Duration,
    /// user + sys of the child (and of children it reaped).
    pub cpu: Duration,
    /// Peak RSS in KB: max of the child and the children it reaped.
    pub maxrss_kb: i64,
    /// Whether it exited with status 0.
    pub ok: bool,
}

impl Usage {
    /// Wall clock when the child had been reaped.
    pub fn ended_wall(&self) -> SystemTime {
        self.started_wall + self.wall
    }
}

fn tv(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
}

fn unix_ns(t: SystemTime) -> u128 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos()
}

/// Runs `program args…` through the wrapper (this executable with
/// [`EXEC_CHILD`]) as `cmd` is set up (cwd, env, stdio), and reads its usage
/// from `out` (a scratch file path).
pub fn run(mut cmd: Command, out: &Path) -> Usage {
    let status = cmd.status().expect("the wrapper runs");
    let text = std::fs::read_to_string(out).expect("wrapper output");
    let f: Vec<u128> = text
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    let _ = std::fs::remove_file(out);
    Usage {
        started_wall: SystemTime::UNIX_EPOCH + Duration::from_nanos(f[0] as u64),
        wall: Duration::from_nanos(f[1] as u64),
        cpu: Duration::from_nanos(f[2] as u64),
        maxrss_kb: f[3] as i64,
        ok: status.success(),
    }
}

/// A command that runs `program` through the wrapper, writing to `out`; add
/// the program's arguments, cwd, env and stdio to it.
pub fn wrapped(program: &Path, out: &Path) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.arg(EXEC_CHILD).arg(out).arg(program);
    cmd
}

/// The wrapper itself: `--exec-child OUT program args…` (`argv` from OUT on).
/// Spawns the program with this process's cwd, env and stdio, reaps it with
/// `wait4` and writes `start_unix_ns wall_ns cpu_ns maxrss_kb` to OUT; exits
/// with status 0 when the program did, else 1.
pub fn exec_child(out: &str, program: &str, args: &[String]) -> ! {
    let mut cmd = Command::new(program);
    cmd.args(args);
    let started_wall = SystemTime::now();
    let started = Instant::now();
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{program} runs (build it first): {e}"));
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own unreaped child; `status` and `ru` are valid out-pointers.
    let got = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let wall = started.elapsed();
    assert_eq!(got, pid, "wait4: {}", std::io::Error::last_os_error());
    std::mem::forget(child); // already reaped
    let cpu = tv(ru.ru_utime) + tv(ru.ru_stime);
    std::fs::write(
        out,
        format!(
            "{} {} {} {}\n",
            unix_ns(started_wall),
            wall.as_nanos(),
            cpu.as_nanos(),
            ru.ru_maxrss
        ),
    )
    .expect("write the wrapper output");
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    std::process::exit(if ok { 0 } else { 1 })
}

/// When this process was started as the wrapper, become it (never returns).
pub fn maybe_exec_child() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(EXEC_CHILD) {
        exec_child(&argv[2], &argv[3], &argv[4..]);
    }
}
