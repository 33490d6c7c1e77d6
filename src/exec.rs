//! Child processes for tool calls: `bash -c` in its own process group, with a
//! scrubbed environment, closed stdin, a timeout, and capped output.
//!
//! Invariants:
//! - the child gets exactly the environment it is given (`env_clear` first);
//!   [`scrubbed_env`] builds that environment from an allowlist, so API keys
//!   and tokens never reach tool processes;
//! - stdout and stderr share one pipe, so the captured output is interleaved in
//!   the order the child wrote it;
//! - at most [`Capture`]'s head + 2 × tail bytes are held in memory, whatever
//!   the child prints;
//! - when [`run_shell`] returns (or its future is dropped), no process of the
//!   child's process group is left alive, and a grandchild that escaped the
//!   group while holding the pipe cannot delay the return by more than
//!   `drain_timeout`.

use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;

/// Default time a `bash` call may run when the model gives no `timeout_secs`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Upper bound for a model-requested timeout.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// Time between SIGTERM and SIGKILL of a timed-out process group.
pub const GRACE: Duration = Duration::from_secs(2);
/// Output bytes sent back to the model (head + tail).
pub const MAX_OUTPUT_BYTES: usize = 16 * 1024;
/// How long to keep reading the pipe after the child exited and its group was
/// killed; bounds the wait on a grandchild that left the group with the pipe.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// Environment variables copied from orch's own environment into tool processes.
const PASSED_VARS: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
    // Not a secret: marks every process of a run (see `reap_run_orphans`).
    RUN_MARKER,
];

/// The environment variable that marks every tool process (and subagent) of
/// a run with its run id, so a later `orch` can find what a killed one left.
pub const RUN_MARKER: &str = "ORCH_RUN_ID";

/// Variables forced for tool processes: no colours, pagers or git prompts.
const FIXED_VARS: &[(&str, &str)] = &[
    ("TERM", "dumb"),
    ("NO_COLOR", "1"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
];

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
pub struct ExecResult {
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

/// The environment for tool processes, built from orch's own environment
/// through an allowlist (see [`PASSED_VARS`] and [`FIXED_VARS`]).
pub fn scrubbed_env() -> Vec<(String, String)> {
    scrub(std::env::vars_os().map(|(k, v)| {
        (
            k.to_string_lossy().into_owned(),
            v.to_string_lossy().into_owned(),
        )
    }))
}

/// Keeps only allowlisted variables and adds the fixed ones. Secrets are never
/// on the allowlist; the explicit check below guards against someone adding a
/// pattern-like name to it later.
fn scrub(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vars
        .filter(|(k, _)| PASSED_VARS.contains(&k.as_str()) && !is_secret_name(k))
        .collect();
    env.sort();
    env.dedup_by(|a, b| a.0 == b.0);
    for (k, v) in FIXED_VARS {
        env.push(((*k).to_owned(), (*v).to_owned()));
    }
    env
}

/// Endings (of upper-cased names) that mark an environment variable as secret.
const SECRET_NAME_ENDINGS: &[&str] = &[
    "_KEY",
    "APIKEY",
    "_TOKEN",
    "_SECRET",
    "PASSWORD",
    "PASSWD",
    "_PASS",
    "_CREDENTIALS",
    "_PAT",
];

/// Whether an environment variable's name marks it as a secret: one of
/// [`SECRET_NAME_ENDINGS`], or `SECRET`/`PASSWORD` anywhere in it. The one
/// rule both for what tool processes never get and for what the run record
/// redacts.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAME_ENDINGS.iter().any(|e| upper.ends_with(e))
        || upper.contains("SECRET")
        || upper.contains("PASSWORD")
}

/// Runs `bash -c command` in `cwd` with exactly `env`, stdin closed, in its own
/// process group, and waits at most `timeout` (then SIGTERM, `grace`, SIGKILL to
/// the group). Returns `Err` only when the process cannot be started.
pub async fn run_shell(
    command: &str,
    cwd: &Path,
    env: &[(String, String)],
    timeout: Duration,
    limits: &ExecLimits,
) -> std::io::Result<ExecResult> {
    let start = Instant::now();
    let (read_end, write_end) = cloexec_pipe()?;
    let write_end2 = write_end.try_clone()?;

    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::from(write_end2))
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    // The command holds the parent's copies of the write end; drop them so the
    // reader sees EOF once every child-side copy is closed.
    drop(cmd);
    let pid = child.id().map(|p| p as libc::pid_t);
    let mut guard = GroupGuard(pid);
    let mut reader = pipe::Receiver::from_owned_fd(read_end)?;
    let mut capture = Capture::new(limits.max_output_bytes);
    let mut eof = false;

    let mut timed_out = false;
    let deadline = start + timeout;
    let status = match wait_reading(&mut child, &mut reader, &mut capture, &mut eof, deadline)
        .await?
    {
        Some(status) => status,
        None => {
            timed_out = true;
            signal_group(pid, libc::SIGTERM);
            let grace_end = Instant::now() + limits.grace;
            match wait_reading(&mut child, &mut reader, &mut capture, &mut eof, grace_end).await? {
                Some(status) => status,
                None => {
                    signal_group(pid, libc::SIGKILL);
                    child.wait().await?
                }
            }
        }
    };
    // Background jobs of the command must not outlive it.
    signal_group(pid, libc::SIGKILL);
    let drain_end = Instant::now() + limits.drain_timeout;
    let mut chunk = [0u8; 8192];
    while !eof {
        tokio::select! {
            n = reader.read(&mut chunk) => match n {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => capture.push(&chunk[..n]),
            },
            _ = tokio::time::sleep_until(drain_end.into()) => break,
        }
    }
    // Done with the group: a late kill could hit a recycled process id.
    guard.0 = None;
    let (output, omitted_lines) = capture.finish();
    Ok(ExecResult {
        exit_code: status.code(),
        signal: status.signal(),
        timed_out,
        output,
        omitted_lines,
        duration: start.elapsed(),
    })
}

/// Reads output while waiting for the child; `None` when `until` passed first.
async fn wait_reading(
    child: &mut tokio::process::Child,
    reader: &mut pipe::Receiver,
    capture: &mut Capture,
    eof: &mut bool,
    until: Instant,
) -> std::io::Result<Option<ExitStatus>> {
    let mut chunk = [0u8; 8192];
    let sleep = tokio::time::sleep_until(until.into());
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            status = child.wait() => return status.map(Some),
            n = reader.read(&mut chunk), if !*eof => match n {
                Ok(0) | Err(_) => *eof = true,
                Ok(n) => capture.push(&chunk[..n]),
            },
            _ = &mut sleep => return Ok(None),
        }
    }
}

fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both fds are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn signal_group(pgid: Option<libc::pid_t>, signal: libc::c_int) {
    if let Some(pgid) = pgid.filter(|p| *p > 0) {
        // SAFETY: plain syscall; the group was created for this child with
        // `process_group(0)`, so its id equals the child's pid. ESRCH (group
        // already gone) is expected and ignored.
        unsafe {
            libc::killpg(pgid, signal);
        }
    }
}

/// Kills the process group when the run is abandoned (its future dropped).
struct GroupGuard(Option<libc::pid_t>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        signal_group(self.0, libc::SIGKILL);
    }
}

/// A bounded output buffer: the first `head_cap` bytes and the last `tail_cap`
/// bytes (holding at most 2 × `tail_cap` between compactions), counting the
/// lines that fall in between.
#[derive(Debug)]
pub(crate) struct Capture {
    head: Vec<u8>,
    tail: Vec<u8>,
    head_cap: usize,
    tail_cap: usize,
    dropped_bytes: usize,
    dropped_newlines: usize,
}

impl Capture {
    /// A buffer keeping about `max_bytes` in total.
    pub(crate) fn new(max_bytes: usize) -> Self {
        let head_cap = max_bytes / 2;
        Capture {
            head: Vec::new(),
            tail: Vec::new(),
            head_cap,
            tail_cap: max_bytes - head_cap,
            dropped_bytes: 0,
            dropped_newlines: 0,
        }
    }

    /// Appends bytes.
    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        if self.head.len() < self.head_cap {
            let take = bytes.len().min(self.head_cap - self.head.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if bytes.is_empty() {
            return;
        }
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * self.tail_cap {
            let cut = self.tail.len() - self.tail_cap;
            self.drop_tail_front(cut);
        }
    }

    fn drop_tail_front(&mut self, n: usize) {
        self.dropped_bytes += n;
        self.dropped_newlines += count_newlines(&self.tail[..n]);
        self.tail.drain(..n);
    }

    /// The text (lossy UTF-8) and the number of omitted lines. When bytes were
    /// dropped, the head is cut back to its last newline and the tail forward
    /// past its first, so only whole lines are shown around the marker.
    pub(crate) fn finish(mut self) -> (String, usize) {
        if self.tail.len() > self.tail_cap {
            let cut = self.tail.len() - self.tail_cap;
            self.drop_tail_front(cut);
        }
        if self.dropped_bytes == 0 {
            let mut all = self.head;
            all.extend_from_slice(&self.tail);
            return (String::from_utf8_lossy(&all).into_owned(), 0);
        }
        if let Some(pos) = self.head.iter().rposition(|b| *b == b'\n') {
            self.dropped_bytes += self.head.len() - (pos + 1);
            self.head.truncate(pos + 1);
        }
        if let Some(pos) = self.tail.iter().position(|b| *b == b'\n')
            && pos + 1 < self.tail.len()
        {
            self.drop_tail_front(pos + 1);
        }
        let lines = self.dropped_newlines.max(1);
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("[… {lines} lines omitted …]\n"));
        text.push_str(&String::from_utf8_lossy(&self.tail));
        (text, lines)
    }
}

fn count_newlines(bytes: &[u8]) -> usize {
    bytes.iter().filter(|b| **b == b'\n').count()
}

/// Caps `text` to about `max_bytes`, keeping head and tail lines with the same
/// `[… N lines omitted …]` marker as command output.
pub(crate) fn cap_text(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut capture = Capture::new(max_bytes);
    capture.push(text.as_bytes());
    capture.finish().0
}

/// Kills every process marked with `run_id` (see [`RUN_MARKER`]) together
/// with its process group: what an `orch` that was SIGKILLed in the middle
/// of a tool call or a subagent left running. Returns how many processes
/// were found. Linux only (reads `/proc`); elsewhere it finds nothing.
pub fn reap_run_orphans(run_id: &str) -> usize {
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

    fn limits() -> ExecLimits {
        ExecLimits {
            grace: Duration::from_millis(500),
            ..ExecLimits::default()
        }
    }

    fn env() -> Vec<(String, String)> {
        scrubbed_env()
    }

    async fn run(cmd: &str, timeout: Duration) -> ExecResult {
        let dir = tempfile::tempdir().unwrap();
        tokio::time::timeout(
            Duration::from_secs(30),
            run_shell(cmd, dir.path(), &env(), timeout, &limits()),
        )
        .await
        .expect("run_shell hung")
        .unwrap()
    }

    #[test]
    fn scrub_drops_secrets_and_keeps_allowlist() {
        let vars = [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/x"),
            ("ORCH_API_KEY", "sk-secret"),
            ("OPENAI_API_KEY", "sk-2"),
            ("GITHUB_TOKEN", "ghp"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("MY_SECRET", "s"),
            ("RANDOM_VAR", "r"),
            ("TERM", "xterm-256color"),
        ];
        let env = scrub(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("PATH"), Some("/usr/bin"));
        assert_eq!(get("HOME"), Some("/home/x"));
        assert_eq!(get("TERM"), Some("dumb"));
        assert_eq!(get("NO_COLOR"), Some("1"));
        assert_eq!(get("GIT_TERMINAL_PROMPT"), Some("0"));
        for secret in [
            "ORCH_API_KEY",
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "MY_SECRET",
            "RANDOM_VAR",
        ] {
            assert_eq!(get(secret), None, "{secret} leaked");
        }
        assert!(!env.iter().any(|(_, v)| v.starts_with("sk-")));
        let names: Vec<_> = env.iter().map(|(k, _)| k.as_str()).collect();
        let mut dedup = names.clone();
        dedup.dedup();
        assert_eq!(names.len(), dedup.len(), "each variable once: {names:?}");
    }

    #[tokio::test]
    async fn exit_code_and_interleaved_output() {
        let r = run(
            "echo out; echo err >&2; echo out2; exit 3",
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(r.exit_code, Some(3));
        assert_eq!(r.signal, None);
        assert!(!r.timed_out);
        assert_eq!(r.output, "out\nerr\nout2\n");
        assert_eq!(r.omitted_lines, 0);
    }

    #[tokio::test]
    async fn stdin_is_closed() {
        let r = run("cat; echo after", Duration::from_secs(10)).await;
        assert_eq!(r.exit_code, Some(0));
        assert_eq!(r.output, "after\n");
        assert!(r.duration < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn env_is_exactly_given() {
        let dir = tempfile::tempdir().unwrap();
        let env = vec![
            ("PATH".to_owned(), std::env::var("PATH").unwrap()),
            ("ONLY".to_owned(), "1".to_owned()),
        ];
        let r = run_shell("env", dir.path(), &env, Duration::from_secs(10), &limits())
            .await
            .unwrap();
        let mut keys: Vec<&str> = r
            .output
            .lines()
            .filter_map(|l| l.split('=').next())
            .collect();
        keys.sort();
        // bash itself exports PWD, SHLVL and `_`.
        keys.retain(|k| !["PWD", "SHLVL", "_", "OLDPWD"].contains(k));
        assert_eq!(keys, ["ONLY", "PATH"]);
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(30),
            run_shell(
                "sleep 1000 & echo $! > pid; echo started; sleep 1000",
                dir.path(),
                &env(),
                Duration::from_secs(1),
                &limits(),
            ),
        )
        .await
        .expect("hung")
        .unwrap();
        assert!(r.timed_out);
        assert_eq!(r.exit_code, None);
        assert_eq!(r.signal, Some(libc::SIGTERM));
        assert!(r.output.contains("started"));
        assert!(started.elapsed() < Duration::from_secs(10));
        let bg: libc::pid_t = std::fs::read_to_string(dir.path().join("pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let gone = (0..250).any(|_| {
            let state = proc_state(bg);
            if state.is_none() || state == Some('Z') {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
            false
        });
        assert!(gone, "background grandchild {bg} survived the timeout");
    }

    #[tokio::test]
    async fn group_is_gone_after_timeout_via_killpg() {
        let dir = tempfile::tempdir().unwrap();
        let r = run_shell(
            "echo $$ > pgid; sleep 1000 & sleep 1000",
            dir.path(),
            &env(),
            Duration::from_secs(1),
            &limits(),
        )
        .await
        .unwrap();
        assert!(r.timed_out);
        let pgid: libc::pid_t = std::fs::read_to_string(dir.path().join("pgid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(group_gone(pgid), "process group {pgid} still alive");
    }

    /// The state letter of a process (`R`, `S`, `Z`, …), `None` when it is gone.
    fn proc_state(pid: libc::pid_t) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .next()?
            .chars()
            .next()
    }

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

    #[tokio::test]
    async fn grandchild_holding_the_pipe_does_not_hang() {
        let started = Instant::now();
        let r = run("(sleep 100 &) ; echo done", Duration::from_secs(60)).await;
        assert_eq!(r.exit_code, Some(0));
        assert_eq!(r.output, "done\n");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn escaped_grandchild_is_bounded_by_drain_timeout() {
        let started = Instant::now();
        // setsid moves the sleeper out of the group, so killpg cannot reach it.
        let r = run("setsid sleep 3 & echo done", Duration::from_secs(60)).await;
        assert_eq!(r.exit_code, Some(0));
        assert!(r.output.contains("done"));
        assert!(
            started.elapsed() < Duration::from_millis(2900),
            "took {:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn output_is_capped_head_and_tail() {
        let r = run("seq 1 100000", Duration::from_secs(30)).await;
        assert!(
            r.output.len() <= MAX_OUTPUT_BYTES + 100,
            "len {}",
            r.output.len()
        );
        assert!(r.output.starts_with("1\n2\n3\n"));
        assert!(r.output.ends_with("99999\n100000\n"));
        assert!(r.omitted_lines > 90000);
        let marker = format!("[… {} lines omitted …]\n", r.omitted_lines);
        assert!(r.output.contains(&marker), "no marker in output");
        // Shown lines + omitted lines account for every line exactly.
        let shown = r.output.lines().count() - 1;
        assert_eq!(shown + r.omitted_lines, 100000);
    }

    #[tokio::test]
    async fn non_utf8_output_is_lossy() {
        let r = run("printf 'a\\377b\\n'", Duration::from_secs(10)).await;
        assert_eq!(r.output, "a\u{FFFD}b\n");
    }

    #[test]
    fn capture_counts_exactly_and_bounds_memory() {
        let mut c = Capture::new(100);
        let mut max_held = 0;
        for i in 0..10_000 {
            c.push(format!("line {i}\n").as_bytes());
            max_held = max_held.max(c.head.len() + c.tail.len());
        }
        assert!(max_held <= 150 + 16, "held {max_held}");
        let (text, omitted) = c.finish();
        let shown = text.lines().count() - 1;
        assert_eq!(shown + omitted, 10_000);
        assert!(text.starts_with("line 0\n"));
        assert!(text.ends_with("line 9999\n"));
    }

    #[test]
    fn cap_text_short_is_unchanged() {
        assert_eq!(cap_text("abc\n", 100), "abc\n");
        let long: String = (0..1000).map(|i| format!("{i}\n")).collect();
        let capped = cap_text(&long, 200);
        assert!(capped.contains("lines omitted"));
        assert!(capped.len() < 300);
    }
}
