//! `bash -c` for tool calls: in its own process group, with exactly the
//! environment it is given, closed stdin, a timeout (SIGTERM, grace,
//! SIGKILL to the group) and capped output.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::capture::{PipeCapture, cloexec_pipe};
use super::group::{PreExec, ProcessGroup};
use super::{ExecLimits, ExecResult};

/// Runs `bash -c command` in `cwd` with exactly `env`, stdin closed, in its own
/// process group, and waits at most `timeout` (then SIGTERM, `grace`, SIGKILL to
/// the group). Returns `Err` only when the process cannot be started.
pub(crate) async fn run_shell(
    command: &str,
    cwd: &Path,
    env: &[(String, String)],
    timeout: Duration,
    limits: &ExecLimits,
) -> std::io::Result<ExecResult> {
    run_shell_with(command, cwd, env, timeout, limits, None).await
}

/// [`run_shell`] with a hook run in the child before exec (a sandbox).
pub(crate) async fn run_shell_with(
    command: &str,
    cwd: &Path,
    env: &[(String, String)],
    timeout: Duration,
    limits: &ExecLimits,
    pre_exec: Option<&PreExec>,
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
        .stderr(Stdio::from(write_end2));
    let mut group = ProcessGroup::spawn(&mut cmd, pre_exec)?;
    // The command holds the parent's copies of the write end; drop them so the
    // reader sees EOF once every child-side copy is closed.
    drop(cmd);
    let mut out = PipeCapture::new(read_end, limits.max_output_bytes)?;

    let mut timed_out = false;
    let deadline = start + timeout;
    let status = match out.wait_reading(&mut group, deadline).await? {
        Some(status) => status,
        None => {
            timed_out = true;
            group.signal(libc::SIGTERM);
            let grace_end = Instant::now() + limits.grace;
            match out.wait_reading(&mut group, grace_end).await? {
                Some(status) => status,
                None => {
                    group.signal(libc::SIGKILL);
                    group.wait().await?
                }
            }
        }
    };
    // Background jobs of the command must not outlive it.
    group.signal(libc::SIGKILL);
    out.drain(Instant::now() + limits.drain_timeout).await;
    // Done with the group: a late kill could hit a recycled process id.
    group.release();
    let (output, omitted_lines) = out.finish();
    Ok(ExecResult {
        exit_code: status.code(),
        signal: status.signal(),
        timed_out,
        output,
        omitted_lines,
        duration: start.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::MAX_OUTPUT_BYTES;
    use super::super::env::scrubbed_env;
    use super::super::group::tests::group_gone;
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
}
