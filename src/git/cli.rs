//! Running the `git` CLI: git itself stages every stage tree and checks out
//! every lane, so what orch commits and checks out is what git makes of the
//! same files and configuration — clean/smudge filters (git-lfs), encodings,
//! `core.autocrlf`, sparse checkout, split and v4 indexes, nested
//! repositories and submodule gitlinks included (docs/git-compatibility.md).
//!
//! In the style of jj's `git_subprocess.rs`: the version is checked once
//! ([`MIN_VERSION`], a clear error below it); every command runs with
//! `core.fsmonitor`, submodule recursion and hooks off (`core.hooksPath` to
//! `/dev/null`: orch's own checkouts and staging run no user hook), under
//! `LC_ALL=C` (messages orch keeps for errors read the same everywhere),
//! without a terminal prompt, with stdin closed, in its own process group
//! (a ^C to orch's terminal does not reach it mid-write; orch ends it), and
//! without the variables git clears before it works in another repository
//! (inherited from orch's caller they would point git elsewhere). Stderr is
//! kept (bounded) for the error; a command that outlives [`TIMEOUT`] (a
//! filter that hangs) is killed with its group.
//!
//! libgit2 stays for object and ref work where it is exact: commits of a
//! tree git wrote, merges in memory, diffs, branch moves.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::error::GitError;

/// The oldest git orch runs: `--pathspec-from-file` (2.25), `worktree add`
/// copying the sparse-checkout patterns and `config.worktree` to the new
/// worktree, `merge-tree --write-tree` used by tests (2.38).
pub(crate) const MIN_VERSION: (u32, u32) = (2, 38);

/// How long one git command may take: a checkout of a very large tree on a
/// slow disk takes seconds; a filter driver that hangs must not hang the run.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(600);

/// Bytes of stderr kept for an error message.
const STDERR_KEPT: usize = 8 * 1024;

/// The settings every command runs with (see the module doc).
const FIXED_CONFIG: &[&str] = &[
    "-c",
    "core.fsmonitor=false",
    "-c",
    "submodule.recurse=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "advice.detachedHead=false",
    "-c",
    "maintenance.auto=false",
    "-c",
    "gc.auto=0",
];

/// The variables git itself clears before it works in another repository
/// (`git rev-parse --local-env-vars`).
pub(crate) const GIT_LOCAL_ENV: &[&str] = &[
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_OBJECT_DIRECTORY",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_GRAFT_FILE",
    "GIT_INDEX_FILE",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_REPLACE_REF_BASE",
    "GIT_PREFIX",
    "GIT_SHALLOW_FILE",
    "GIT_COMMON_DIR",
];

/// What a finished git command left.
#[derive(Debug)]
pub(crate) struct Output {
    /// Its exit code (`-1` when a signal ended it).
    pub code: i32,
    /// Everything it wrote to stdout.
    pub stdout: Vec<u8>,
    /// The head of what it wrote to stderr.
    pub stderr: String,
}

/// One git command in `dir`, built up like a [`Command`].
pub(crate) struct Git {
    cmd: Command,
    what: String,
    /// Keeps only the NUL-terminated stdout records it accepts (a large
    /// listing is filtered as it streams, never held whole).
    keep: Option<fn(&[u8]) -> bool>,
}

/// A git command run in `dir` (`git -C dir …` with the fixed settings).
pub(crate) fn git(dir: &Path) -> Git {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(dir).args(FIXED_CONFIG);
    for var in GIT_LOCAL_ENV {
        cmd.env_remove(var);
    }
    cmd.env("LC_ALL", "C")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    Git {
        cmd,
        what: format!("in {}", dir.display()),
        keep: None,
    }
}

impl Git {
    /// Adds arguments.
    pub(crate) fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd.args(args);
        self
    }

    /// Adds one argument.
    pub(crate) fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.cmd.arg(arg);
        self
    }

    /// Keeps only the NUL-terminated records of stdout that `keep` accepts
    /// (each kept with its NUL), read as they stream.
    pub(crate) fn keep_records(mut self, keep: fn(&[u8]) -> bool) -> Self {
        self.keep = Some(keep);
        self
    }

    /// Sets a variable of the command's environment.
    pub(crate) fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    /// Adds one argument made of `prefix` and a path
    /// (`--pathspec-from-file=<path>`).
    pub(crate) fn arg_path(mut self, prefix: &str, path: &Path) -> Self {
        let mut arg = std::ffi::OsString::from(prefix);
        arg.push(path);
        self.cmd.arg(arg);
        self
    }

    /// Feeds the file at `path` to the command's stdin (else it is closed).
    pub(crate) fn stdin_file(mut self, path: &Path) -> Result<Self, GitError> {
        let file = std::fs::File::open(path).map_err(super::error::io_err("open", path))?;
        self.cmd.stdin(file);
        Ok(self)
    }

    /// Runs it and returns what it left, whatever its exit code.
    pub(crate) fn output(mut self) -> Result<Output, GitError> {
        check_version()?;
        let line = self.describe();
        let spawn_err = |e: std::io::Error| GitError::Cli {
            command: line.clone(),
            detail: format!("could not start git: {e}"),
        };
        let mut child = self.cmd.spawn().map_err(spawn_err)?;
        let started = Instant::now();
        let mut out = child.stdout.take();
        let mut err = child.stderr.take();
        let err_reader = std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(e) = err.as_mut() {
                let _ = e.take(STDERR_KEPT as u64 * 4).read_to_end(&mut buf);
                // Drain the rest so git never blocks on a full pipe.
                let _ = std::io::copy(e, &mut std::io::sink());
            }
            buf
        });
        // A watchdog ends a git that hangs (a filter driver); the wait
        // itself blocks, so a fast git is seen the moment it exits.
        let (done, until) = std::sync::mpsc::channel::<()>();
        let timed_out = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watchdog = {
            let (pid, timed_out) = (child.id() as i32, std::sync::Arc::clone(&timed_out));
            std::thread::spawn(move || {
                if until.recv_timeout(TIMEOUT) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                    timed_out.store(true, std::sync::atomic::Ordering::SeqCst);
                    // The child's own group (spawned with `process_group(0)`,
                    // not yet reaped: the waiter is still blocked on it).
                    if let Some(pid) = rustix::process::Pid::from_raw(pid.max(0)) {
                        let signal = rustix::process::Signal::KILL;
                        let _ = rustix::process::kill_process_group(pid, signal);
                    }
                }
            })
        };
        let mut stdout = Vec::new();
        match (out.as_mut(), self.keep) {
            (Some(o), None) => {
                let _ = o.read_to_end(&mut stdout);
            }
            (Some(o), Some(keep)) => {
                use std::io::BufRead;
                let mut lines = std::io::BufReader::new(o);
                let mut record = Vec::new();
                while lines.read_until(0, &mut record).is_ok_and(|n| n > 0) {
                    if keep(&record) {
                        stdout.extend_from_slice(&record);
                    }
                    record.clear();
                }
            }
            (None, _) => {}
        }
        let waited = child.wait();
        drop(done);
        let _ = watchdog.join();
        let stderr = err_reader.join().unwrap_or_default();
        let status = waited.map_err(|e| GitError::Cli {
            command: line.clone(),
            detail: format!("could not wait for git: {e}"),
        })?;
        if timed_out.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(GitError::Cli {
                command: line,
                detail: format!("it ran longer than {} s and was killed", TIMEOUT.as_secs()),
            });
        }
        let mut stderr = String::from_utf8_lossy(&stderr).into_owned();
        if stderr.len() > STDERR_KEPT {
            let mut cut = STDERR_KEPT;
            while !stderr.is_char_boundary(cut) {
                cut -= 1;
            }
            stderr.truncate(cut);
            stderr.push_str("[…]");
        }
        tracing::debug!(
            command = %line,
            code = status.code().unwrap_or(-1),
            elapsed_us = started.elapsed().as_micros() as u64,
            "git ran"
        );
        Ok(Output {
            code: status.code().unwrap_or(-1),
            stdout,
            stderr,
        })
    }

    /// Runs it; a non-zero exit is an error carrying git's stderr.
    pub(crate) fn run(self) -> Result<Output, GitError> {
        let line = self.describe();
        let out = self.output()?;
        if out.code != 0 {
            return Err(GitError::Cli {
                command: line,
                detail: failure_detail(&out),
            });
        }
        Ok(out)
    }

    /// `git <args> (in <dir>)` for messages, without the fixed settings.
    fn describe(&self) -> String {
        let args: Vec<String> = self
            .cmd
            .get_args()
            .skip(2 + FIXED_CONFIG.len())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        format!("run `git {}` {}", args.join(" "), self.what)
    }
}

/// What git said when it failed: its stderr, or its exit code.
pub(crate) fn failure_detail(out: &Output) -> String {
    let said = out.stderr.trim();
    if said.is_empty() {
        format!("git exited with code {}", out.code)
    } else {
        format!("git exited with code {}: {said}", out.code)
    }
}

/// Checks once per process that `git` runs and is at least [`MIN_VERSION`].
pub(crate) fn check_version() -> Result<(), GitError> {
    static CHECKED: OnceLock<Result<(), String>> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let out = Command::new("git")
                .arg("--version")
                .env("LC_ALL", "C")
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("run `git --version`: {e} (orch needs git {} or newer on PATH)", show(MIN_VERSION)))?;
            let text = String::from_utf8_lossy(&out.stdout);
            let found = parse_version(&text).ok_or_else(|| {
                format!("read git's version from `{}`", text.trim())
            })?;
            if found < MIN_VERSION {
                return Err(format!(
                    "use git {}: orch needs git {} or newer (it stages and checks out with git itself)",
                    show(found),
                    show(MIN_VERSION)
                ));
            }
            Ok(())
        })
        .clone()
        .map_err(|detail| GitError::Cli {
            command: "check the git version".into(),
            detail,
        })
}

fn show((major, minor): (u32, u32)) -> String {
    format!("{major}.{minor}")
}

/// `(major, minor)` of `git version 2.47.3` (also `2.39.5.windows.1`,
/// `2.43.0 (Apple Git-115)`).
fn parse_version(text: &str) -> Option<(u32, u32)> {
    let v = text.trim().strip_prefix("git version ")?;
    let mut parts = v.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version("git version 2.47.3\n"), Some((2, 47)));
        assert_eq!(parse_version("git version 2.39.5.windows.1"), Some((2, 39)));
        assert_eq!(
            parse_version("git version 2.43.0 (Apple Git-115)"),
            Some((2, 43))
        );
        assert_eq!(parse_version("hub version 2.14"), None);
        assert!((2, 37) < MIN_VERSION && (2, 38) >= MIN_VERSION && (3, 0) > MIN_VERSION);
    }

    #[test]
    fn a_failure_carries_the_command_and_gits_words() {
        let dir = tempfile::tempdir().unwrap();
        let e = git(dir.path())
            .args(["rev-parse", "HEAD"])
            .run()
            .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("git rev-parse HEAD"), "{msg}");
        assert!(msg.contains("not a git repository"), "{msg}");
    }
}
