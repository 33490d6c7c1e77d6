//! Benchmark: the wall time of a width-W DAG (4 by default) at a fixed
//! model latency, run serially (`--max-parallel 1`) and in parallel
//! (`--max-parallel W`).
//!
//! Two shapes: W independent stages (3 model turns each: a `write_file`,
//! a `bash` call, `finish`), and the same W feeding one fan-in stage
//! (1 turn). Every model reply is held for the latency by the scripted fake
//! server, so the ideal times are 3W × / 3 × latency and (3W+1) × / 4 ×
//! latency; what is left is orchestration overhead (worktrees, commits,
//! merges, process spawns). Each run is on a fresh repository, so its lanes
//! are created (no warm pool). `ORCH_BIN` picks another `orch` binary (to
//! compare builds); `--files N` adds N small tracked files (so lane
//! checkouts cost something); `--rounds R` (3). The repositories are made
//! under `TMPDIR` (printed): on a file system where creating a file is slow
//! (an ext4 `/tmp` after heavy churn took ~1 ms per new inode here, tmpfs
//! 16 µs) the run's file creations (loose objects, lanes) dominate.
//!
//! ```sh
//! cargo build --release && cargo run --release --example dag_bench -- [--width W] [--files N] [--rounds R] [LATENCY_MS ...]
//! ```

// Test and benchmark code: a failed unwrap is a failed run, and printing is its output.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

#[allow(dead_code, unused_imports)]
#[path = "../tests/it/support/fake_server/mod.rs"]
mod fake_server;

#[path = "support/bench.rs"]
mod bench;

use fake_server::{FakeServer, Reply, Script};
use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};

fn stage_ids(width: usize) -> Vec<String> {
    (1..=width).map(|i| format!("w{i}")).collect()
}

fn pipeline(width: usize, join: bool) -> String {
    let mut p = "name: p\nstages:\n".to_owned();
    for w in stage_ids(width) {
        p.push_str(&format!("  {w}:\n    role: coder\n"));
    }
    if join {
        let needs = stage_ids(width).join(", ");
        p.push_str(&format!("  join:\n    role: coder\n    needs: [{needs}]\n"));
    }
    p
}

fn script(width: usize, latency: Duration) -> Script {
    let mut s = Script::new();
    for w in stage_ids(width) {
        s = s.agent(
            &w,
            vec![
                Reply::tool_call(
                    "a",
                    "write_file",
                    json!({"path": format!("{w}.txt"), "content": "x\n"}),
                )
                .after(latency),
                Reply::tool_call("b", "bash", json!({"command": "ls > /dev/null"})).after(latency),
                Reply::finish("c", "done", None).after(latency),
            ],
        );
    }
    s.agent(
        "join",
        vec![Reply::finish("c", "joined", None).after(latency)],
    )
}

/// What one measurement varies.
struct Shape {
    width: usize,
    files: usize,
    join: bool,
}

fn one_run(shape: &Shape, max_parallel: usize, latency: Duration) -> Duration {
    let (width, join) = (shape.width, shape.join);
    let tmp = tempfile::tempdir().expect("temp dir");
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("README.md"), "bench\n").unwrap();
    for i in 0..shape.files {
        let dir = repo.join(format!("d{}", i / 100));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i}.txt")), format!("{i}\n")).unwrap();
    }
    bench::commit_all_as_base(&repo);
    std::fs::write(tmp.path().join("p.yaml"), pipeline(width, join)).unwrap();
    std::fs::write(tmp.path().join("ISSUE.md"), "# bench\n").unwrap();
    let server = FakeServer::start(script(width, latency));
    let started = Instant::now();
    let orch = std::env::var_os("ORCH_BIN").map_or_else(bench::orch_next_to_example, Into::into);
    let out = Command::new(orch)
        .args([
            "run", "p.yaml", "--repo", "repo", "--issue", "ISSUE.md", "--model", "bench",
        ])
        .args([
            "--base-url",
            &server.base_url,
            "--max-parallel",
            &max_parallel.to_string(),
        ])
        .current_dir(tmp.path())
        .env("CI", "true")
        .output()
        .expect("orch runs (build it first: cargo build --release)");
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "orch failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The value after `--flag`, parsed, or `default`.
fn flag(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number after the flag"))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let width = flag(&args, "--width", 4);
    let files = flag(&args, "--files", 0);
    let rounds = flag(&args, "--rounds", 3);
    let latencies: Vec<u64> = args
        .iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || !args[i - 1].starts_with("--"))
        .filter_map(|(_, a)| a.parse().ok())
        .collect();
    let latencies = if latencies.is_empty() {
        vec![250, 1000]
    } else {
        latencies
    };
    println!(
        "median of {rounds} runs each, repo of {} files, under {} (TMPDIR); ideal = model latency x replies on the critical path",
        files + 1,
        std::env::temp_dir().display()
    );
    println!(
        "| shape | latency | serial (-p 1) | parallel (-p {width}) | speed-up | ideal speed-up | % of ideal | overhead serial / parallel |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let w = width as f64;
    for ms in latencies {
        let latency = Duration::from_millis(ms);
        for (join, name, serial_turns, critical_turns) in [
            (false, format!("{width} stages"), 3.0 * w, 3.0),
            (true, format!("{width} stages + fan-in"), 3.0 * w + 1.0, 4.0),
        ] {
            let shape = Shape { width, files, join };
            let serial = median((0..rounds).map(|_| one_run(&shape, 1, latency)).collect());
            let parallel = median(
                (0..rounds)
                    .map(|_| one_run(&shape, width, latency))
                    .collect(),
            );
            let f = |d: Duration| d.as_secs_f64() * 1000.0;
            let l = ms as f64;
            let speedup = serial.as_secs_f64() / parallel.as_secs_f64();
            let ideal = serial_turns / critical_turns;
            println!(
                "| {name} | {ms} ms | {:.0} ms | {:.0} ms | {speedup:.2}x | {ideal:.2}x | {:.0}% | {:.0} / {:.0} ms |",
                f(serial),
                f(parallel),
                100.0 * speedup / ideal,
                f(serial) - serial_turns * l,
                f(parallel) - critical_turns * l,
            );
        }
    }
}
