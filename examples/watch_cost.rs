//! Benchmark: what following a run costs — the CPU time of `orch watch`
//! and `orch log --follow` on a live run whose stage log holds ~2,000
//! action lines, idle and while lines are appended.
//!
//! The run is a hand-made record (`state.json` with one running stage,
//! its `actions.jsonl`) under a fresh repository's `.git/orch/runs/`, kept
//! "live" by this process holding the run's OFD lock, as `orch run` does:
//! no model, no agent, so the numbers are the follower's alone. Each case
//! starts the follower (stdout to `/dev/null`), lets it follow for the
//! given seconds (appending lines at the given rate, or none), then writes
//! the final state and releases the lock; the follower must exit by
//! itself with the run's exit code. Its CPU time (user + system) comes
//! from `wait4`.
//!
//! ```sh
//! cargo build --release && cargo run --release --example watch_cost -- [--lines N] [--secs S] [--rate LINES_PER_SEC]
//! ```

// Benchmark code: a failed unwrap is a failed run, and printing is its output.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

#[path = "support/bench.rs"]
mod bench;

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RUN_ID: &str = "20261206-040000-000-0123456789abcdef";

fn state(repo: &Path, status: &str, stage_status: &str) -> String {
    let zeros = "0".repeat(40);
    serde_json::json!({
        "format": "orch-run/1", "run_id": RUN_ID, "pipeline": "p",
        "pipeline_origin": "bench", "status": status,
        "created": "2026-12-06T04:00:00Z", "updated": "2026-12-06T04:00:00Z",
        "repo": repo.display().to_string(), "base_commit": zeros,
        "worktree": "/nonexistent", "final_branch": format!("orch/{RUN_ID}/pr"),
        "model": "gpt-4o-mini", "model_label": "gpt-4o-mini (bench)", "base_url": null,
        "pr_title": null,
        "stages": [{
            "id": "code", "role": "coder", "status": stage_status, "branch": null,
            "commit": null, "parent_commit": null, "verdict": null, "summary": null,
            "turns": 0, "tokens": {"prompt": 0, "completion": 0}, "duration_ms": 0,
            "reason": null
        }]
    })
    .to_string()
}

/// Action line `i` of a realistic mix: per turn a request, a response with
/// one call, and the call's result (~450 bytes a line on average).
fn line(i: usize) -> String {
    let turn = i / 3 + 1;
    let v = match i % 3 {
        0 => serde_json::json!({"approx_bytes": 3000 + 40 * turn, "elapsed_ms": 10 * i,
            "event": "request", "messages": 2 * turn, "ts": "2026-12-06T04:00:00.000Z", "turn": turn}),
        1 => serde_json::json!({"completion_tokens": 40, "content": null, "cost_usd": null,
            "elapsed_ms": 10 * i, "event": "response", "finish_reason": "tool_calls",
            "latency_ms": 300, "prompt_tokens": 3000 + 40 * turn,
            "tool_calls": [{"arguments": format!("{{\"command\":\"grep -n fn src/file{turn}.rs\"}}"),
                            "id": format!("call_{turn}"), "name": "bash"}],
            "ts": "2026-12-06T04:00:00.000Z", "turn": turn}),
        _ => serde_json::json!({"call_id": format!("call_{turn}"), "duration_ms": 4,
            "elapsed_ms": 10 * i, "event": "tool", "exit_code": 0, "is_error": false,
            "name": "bash", "policy": "allow", "repeat": null,
            "result": "12:fn one() {}\n40:fn two() {}\n77:fn three() {}\n",
            "result_bytes": 48, "sandbox": null, "changed_path": null,
            "summary": format!("bash `grep -n fn src/file{turn}.rs` → exit 0"),
            "ts": "2026-12-06T04:00:00.000Z", "turn": turn}),
    };
    format!("{v}\n")
}

/// Takes the run's OFD lock, as the process driving a run holds it.
fn lock(path: &Path) -> File {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    // SAFETY: `flock` is a plain C struct; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: fcntl on a descriptor `f` owns, with a valid `flock` struct.
    let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) };
    assert_eq!(rc, 0, "lock {}", path.display());
    f
}

/// The exit code and CPU time of the child `pid`, reaped.
fn reap(pid: u32) -> (i32, Duration) {
    let mut status = 0;
    // SAFETY: `rusage` is a plain C struct; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, with valid pointers for the call.
    let rc = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid as libc::pid_t);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (
        libc::WEXITSTATUS(status),
        tv(usage.ru_utime) + tv(usage.ru_stime),
    )
}

struct Case {
    name: &'static str,
    args: Vec<String>,
    rate: f64,
}

fn run_case(orch: &Path, dir: &Path, lines: usize, secs: f64, case: &Case) -> (Duration, usize) {
    let repo = dir.join(case.name.replace(' ', "-"));
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("README"), "bench\n").unwrap();
    bench::commit_all_as_base(&repo);
    let root = repo.join(".git/orch/runs").join(RUN_ID);
    std::fs::create_dir_all(root.join("stages/code")).unwrap();
    let held = lock(&root.join("lock"));
    std::fs::write(root.join("state.json"), state(&repo, "running", "running")).unwrap();
    let log_path = root.join("stages/code/actions.jsonl");
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .unwrap();
    for i in 0..lines {
        log.write_all(line(i).as_bytes()).unwrap();
    }
    // Reaped by `wait4` in `reap`, for its rusage.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(orch)
        .args(&case.args)
        .arg("--repo")
        .arg(&repo)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut appended = 0;
    while started.elapsed().as_secs_f64() < secs {
        std::thread::sleep(Duration::from_millis(10));
        let due = (started.elapsed().as_secs_f64() * case.rate) as usize;
        while appended < due {
            // One line per write, as the run appends them.
            log.write_all(line(lines + appended).as_bytes()).unwrap();
            appended += 1;
        }
    }
    std::fs::write(
        root.join("state.json.tmp"),
        state(&repo, "succeeded", "succeeded"),
    )
    .unwrap();
    std::fs::rename(root.join("state.json.tmp"), root.join("state.json")).unwrap();
    drop(held);
    let (code, cpu) = reap(child.id());
    assert_eq!(code, 0, "{} exits with the run's code", case.name);
    (cpu, appended)
}

fn main() {
    let mut lines = 2000;
    let mut secs = 10.0;
    let mut rate = 100.0;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .expect("a value")
                .parse::<f64>()
                .expect("a number")
        };
        match a.as_str() {
            "--lines" => lines = value() as usize,
            "--secs" => secs = value(),
            "--rate" => rate = value(),
            other => panic!("unknown argument {other}"),
        }
    }
    let orch: PathBuf =
        std::env::var_os("ORCH_BIN").map_or_else(bench::orch_next_to_example, PathBuf::from);
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("watch idle", vec!["watch", RUN_ID], 0.0),
        ("watch appending", vec!["watch", RUN_ID], rate),
        ("log-follow idle", vec!["log", "--follow", RUN_ID], 0.0),
        (
            "log-follow appending",
            vec!["log", "--follow", RUN_ID],
            rate,
        ),
    ];
    println!(
        "{lines} lines in the log at the start; {secs} s of following; appending at {rate} lines/s"
    );
    println!("| case | lines appended | CPU (user+sys) | CPU share of {secs} s |");
    println!("|---|---|---|---|");
    for (name, args, rate) in cases {
        let case = Case {
            name,
            args: args.into_iter().map(str::to_owned).collect(),
            rate,
        };
        let (cpu, appended) = run_case(&orch, dir.path(), lines, secs, &case);
        println!(
            "| {name} | {appended} | {:.1} ms | {:.2}% |",
            cpu.as_secs_f64() * 1000.0,
            cpu.as_secs_f64() / secs * 100.0
        );
    }
}
