//! `bash -c` for tool calls: in its own process group under a reaper, with
//! exactly the environment it is given, closed stdin, a timeout (SIGTERM to
//! the group, grace, SIGKILL of everything) and capped output. When
//! [`run_shell`] returns, no process the command started is left.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::capture::PipeCapture;
use super::group::{PreExec, ProcessGroup};
use super::limits::{ExecLimits, ExecResult};
use super::pipe::cloexec_pipe;

/// Runs `bash -c command` in `cwd` with exactly `env`, stdin closed, in its own
/// process group, and waits at most `timeout` (then SIGTERM to the group,
/// `grace`, SIGKILL of every process the command started). Returns once the
/// command and everything it started are gone; `Err` only when the process
/// cannot be started.
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
                    group.kill();
                    group.wait().await?
                }
            }
        }
    };
    // The wait returned: the command's reaper killed every process it left
    // (background jobs, `setsid`, daemons), so the pipe's last writers are
    // gone and the drain ends at once; the drain timeout bounds only what
    // escaped the reaper (it logged it).
    out.drain(Instant::now() + limits.drain_timeout).await;
    drop(group);
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
    use super::super::env::scrubbed_env;
    use super::super::group::tests::group_gone;
    use super::super::limits::MAX_OUTPUT_BYTES;
    use super::*;
    use std::path::Path;

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

    /// Starts, in the background, a `setsid` process, a double fork and a
    /// `nohup` process; each writes its pid to `pN` and, `delay` later,
    /// `late` to `mN`. Returns once all three wrote their pid, so they run
    /// when the command goes on.
    fn escapees(delay: &str) -> String {
        format!(
            "setsid sh -c 'echo $$ > p1; sleep {delay}; echo late > m1' >/dev/null 2>&1 & \
             ( ( sh -c 'echo $$ > p2; sleep {delay}; echo late > m2' ) & ) & \
             nohup sh -c 'echo $$ > p3; sleep {delay}; echo late > m3' >/dev/null 2>&1 & \
             for _ in $(seq 1000); do [ -s p1 ] && [ -s p2 ] && [ -s p3 ] && break; sleep 0.01; done; \
             echo started"
        )
    }

    /// The environment of [`run`] plus a marker only this test's processes
    /// carry.
    fn marked_env(marker: &str) -> Vec<(String, String)> {
        let mut env = env();
        env.push(("ORCH_TEST_CALL".to_owned(), marker.to_owned()));
        env
    }

    /// Live processes whose environment holds `ORCH_TEST_CALL=marker`.
    fn marked_processes(marker: &str) -> Vec<String> {
        let needle = format!("ORCH_TEST_CALL={marker}");
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.parse::<u32>().is_ok())
            })
            .filter(|e| {
                std::fs::read(e.path().join("environ"))
                    .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
            })
            .filter_map(|e| {
                let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
                Some(stat.trim().to_owned())
            })
            .collect()
    }

    /// After a call ended: all three escapees were started and none is
    /// alive (not even as a zombie: the reaper reaped them), no process of
    /// the call is left, and for `watch` (well past their delay) none
    /// writes its marker.
    fn assert_nothing_survived(dir: &Path, marker: &str, watch: Duration) {
        for n in 1..=3 {
            let pid: libc::pid_t = std::fs::read_to_string(dir.join(format!("p{n}")))
                .unwrap_or_else(|_| panic!("escapee {n} did not start"))
                .trim()
                .parse()
                .unwrap();
            assert_eq!(
                proc_state(pid),
                None,
                "escapee {n} (pid {pid}) survived the call"
            );
        }
        assert_eq!(marked_processes(marker), Vec::<String>::new());
        let end = Instant::now() + watch;
        while Instant::now() < end {
            for n in 1..=3 {
                assert!(
                    !dir.join(format!("m{n}")).exists(),
                    "escapee {n} wrote its marker after the call"
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[tokio::test]
    async fn no_process_outlives_a_call_that_exits() {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(30),
            run_shell(
                &format!("{}; exit 7", escapees("0.3")),
                dir.path(),
                &marked_env("exits"),
                Duration::from_secs(60),
                &limits(),
            ),
        )
        .await
        .expect("hung")
        .unwrap();
        assert_eq!(r.exit_code, Some(7));
        assert_eq!(r.output, "started\n");
        // Not held by the escapees' sleep (nor by the drain timeout).
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
        // 1 s: more than three times the escapees' delay.
        assert_nothing_survived(dir.path(), "exits", Duration::from_secs(1));
    }

    #[tokio::test]
    async fn no_process_outlives_a_call_that_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let r = tokio::time::timeout(
            Duration::from_secs(30),
            run_shell(
                &format!("{}; sleep 1000", escapees("1.5")),
                dir.path(),
                &marked_env("times-out"),
                Duration::from_secs(1),
                &limits(),
            ),
        )
        .await
        .expect("hung")
        .unwrap();
        assert!(r.timed_out);
        assert_eq!(r.signal, Some(libc::SIGTERM));
        // The call took its 1 s timeout; the escapees would write at 1.5 s.
        assert_nothing_survived(dir.path(), "times-out", Duration::from_secs(2));
    }

    #[tokio::test]
    async fn no_process_outlives_a_cancelled_call() {
        let dir = tempfile::tempdir().unwrap();
        let env = marked_env("cancelled");
        let command = format!("{}; touch ready; sleep 1000", escapees("0.3"));
        let limits = limits();
        // Boxed, so that dropping it drops the future itself.
        let mut call = Box::pin(run_shell(
            &command,
            dir.path(),
            &env,
            Duration::from_secs(60),
            &limits,
        ));
        let ready = async {
            while !dir.path().join("ready").exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::select! {
            r = &mut call => panic!("the call ended: {r:?}"),
            r = tokio::time::timeout(Duration::from_secs(20), ready) => r.expect("never ready"),
        }
        // Dropping the call's future is the cancellation; the drop waits for
        // the reaper's sweep.
        drop(call);
        assert_nothing_survived(dir.path(), "cancelled", Duration::from_secs(1));
    }

    #[tokio::test]
    async fn ending_a_call_kills_only_its_own_processes() {
        // A long call and a sibling process of the test run beside a call
        // that leaves a `setsid` sleeper: its end takes the sleeper only.
        let dir = tempfile::tempdir().unwrap();
        let mut sibling = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let long_dir = tempfile::tempdir().unwrap();
        let long_env = marked_env("long");
        let short_env = marked_env("short");
        let limits = limits();
        let mut long = Box::pin(run_shell(
            "touch ready; sleep 1000; true",
            long_dir.path(),
            &long_env,
            Duration::from_secs(60),
            &limits,
        ));
        let ready = async {
            while !long_dir.path().join("ready").exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::select! {
            r = &mut long => panic!("the long call ended: {r:?}"),
            r = tokio::time::timeout(Duration::from_secs(20), ready) => r.expect("never ready"),
        }
        let short = tokio::select! {
            r = &mut long => panic!("the long call ended: {r:?}"),
            r = run_shell(
                "setsid sh -c 'echo $$ > p; exec sleep 1000' >/dev/null 2>&1 & \
                 for _ in $(seq 1000); do [ -s p ] && break; sleep 0.01; done",
                dir.path(),
                &short_env,
                Duration::from_secs(60),
                &limits,
            ) => r.unwrap(),
        };
        assert_eq!(short.exit_code, Some(0));
        assert_eq!(marked_processes("short"), Vec::<String>::new());
        assert_eq!(
            marked_processes("long").len(),
            2,
            "the long call's shell and sleep live"
        );
        assert_eq!(sibling.try_wait().unwrap(), None, "the sibling lives");
        sibling.kill().unwrap();
        sibling.wait().unwrap();
        drop(long);
        assert_eq!(marked_processes("long"), Vec::<String>::new());
    }

    #[tokio::test]
    async fn the_reaper_ignores_the_commands_signals() {
        // The reaper is the shell's parent; signals it can block do not stop
        // it, so the sleeper that left the group still goes with the call.
        let dir = tempfile::tempdir().unwrap();
        let r = run_shell(
            "for s in TERM INT HUP QUIT USR1 PIPE; do kill -$s $PPID; done; \
             setsid sh -c 'echo $$ > p; exec sleep 1000' >/dev/null 2>&1 & \
             for _ in $(seq 1000); do [ -s p ] && break; sleep 0.01; done; echo after",
            dir.path(),
            &marked_env("signals"),
            Duration::from_secs(30),
            &limits(),
        )
        .await
        .unwrap();
        assert_eq!((r.exit_code, r.output.as_str()), (Some(0), "after\n"));
        assert_eq!(marked_processes("signals"), Vec::<String>::new());
    }

    #[tokio::test]
    async fn the_command_leads_its_group_and_its_status_is_reported() {
        // `$$` is the group id (the reaper is outside the group), and the
        // status is the command's, not its reaper's.
        let r = run(
            "cut -d' ' -f5 /proc/$$/stat; echo $$; kill -KILL $$",
            Duration::from_secs(10),
        )
        .await;
        let lines: Vec<&str> = r.output.lines().collect();
        assert_eq!(lines.len(), 2, "{}", r.output);
        assert_eq!(lines[0], lines[1], "the shell leads its group");
        assert_eq!(r.exit_code, None);
        assert_eq!(r.signal, Some(libc::SIGKILL));
        let r = run("exit 137", Duration::from_secs(10)).await;
        assert_eq!((r.exit_code, r.signal), (Some(137), None));
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
