//! Benchmark: how orch's own work grows with the number of stages.
//!
//! 1. Validation (parse, check and plan) of a chain of 10, 1,000 and 10,000
//!    trivial stages, in process.
//! 2. The per-stage-boundary cost of a long chain run for real: `orch run` on
//!    a chain of N stages whose model (the scripted fake server, no latency)
//!    answers `finish` at once, so what is measured is orch's work between
//!    two stages (lane reuse, commit, branch, diff, records, state writes,
//!    scheduling) plus one loopback HTTP round trip. Each chain runs for at
//!    most `--seconds` (default 30); the rate is taken from `state.json`
//!    between the 10th finished stage and the end.
//!
//! ```sh
//! cargo build && cargo run --example stage_bench -- [N ...] [--seconds S]
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
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn chain(n: usize) -> String {
    let mut y = String::from("name: p\nstages:\n");
    for i in 0..n {
        y.push_str(&format!("  s{i}:\n    role: coder\n"));
        if i > 0 {
            y.push_str(&format!("    needs: [s{}]\n", i - 1));
        }
    }
    y
}

fn validate_time(n: usize) -> Duration {
    let text = chain(n);
    let roles = vec!["coder".to_owned()];
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        let p = orch::pipeline::parse_pipeline(&text, "p.yaml", &roles).unwrap();
        best = best.min(t.elapsed());
        assert_eq!(p.stages.len(), n);
    }
    best
}

/// Finished stages in the run's `state.json`, if it can be read.
fn finished(repo: &Path) -> Option<usize> {
    let runs = repo.join(".git/orch/runs");
    let entry = std::fs::read_dir(runs).ok()?.flatten().next()?;
    let text = std::fs::read_to_string(entry.path().join("state.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(
        v["stages"]
            .as_array()?
            .iter()
            .filter(|s| s["status"] == "succeeded")
            .count(),
    )
}

/// (stages finished, seconds per stage boundary) of a chain of `n`.
fn chain_run(n: usize, cap: Duration) -> (usize, f64) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("README.md"), "bench\n").unwrap();
    bench::commit_all_as_base(&repo);
    std::fs::write(tmp.path().join("p.yaml"), chain(n)).unwrap();
    std::fs::write(tmp.path().join("ISSUE.md"), "# bench\n").unwrap();
    let script = (0..n).fold(Script::new(), |s, i| {
        s.agent(&format!("s{i}"), vec![Reply::finish("f", "done", None)])
    });
    let server = FakeServer::start(script);
    let mut child = Command::new(bench::orch_next_to_example())
        .args([
            "run", "p.yaml", "--repo", "repo", "--issue", "ISSUE.md", "--model", "bench",
        ])
        .args(["--base-url", &server.base_url])
        .current_dir(tmp.path())
        .env("CI", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("orch runs (build it first: cargo build)");
    let started = Instant::now();
    let mut first: Option<(Instant, usize)> = None;
    let mut last = (Instant::now(), 0);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let exited = child.try_wait().unwrap().is_some();
        if let Some(done) = finished(&repo) {
            let now = Instant::now();
            if first.is_none() && done >= 10 {
                first = Some((now, done));
            }
            last = (now, done);
        }
        if exited || started.elapsed() > cap {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let per = match first {
        Some((t0, d0)) if last.1 > d0 => {
            last.0.duration_since(t0).as_secs_f64() / (last.1 - d0) as f64
        }
        _ => started.elapsed().as_secs_f64() / last.1.max(1) as f64,
    };
    (last.1, per)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut seconds = 30;
    let mut sizes = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--seconds" {
            seconds = it.next().and_then(|s| s.parse().ok()).unwrap_or(30);
        } else if let Ok(n) = a.parse() {
            sizes.push(n);
        }
    }
    if sizes.is_empty() {
        sizes = vec![10, 1000, 10000];
    }
    println!("| stages | validate (parse + check + plan) |");
    println!("|---|---|");
    for &n in &sizes {
        println!(
            "| {n} | {:.1} ms |",
            validate_time(n).as_secs_f64() * 1000.0
        );
    }
    println!();
    println!("| chain of | stages finished (cap {seconds} s) | per stage boundary |");
    println!("|---|---|---|");
    for &n in &sizes {
        let (done, per) = chain_run(n, Duration::from_secs(seconds));
        println!("| {n} | {done} | {:.1} ms |", per * 1000.0);
    }
}
