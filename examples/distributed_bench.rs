//! Benchmark: the remote round trips of a distributed run, per stage, on a
//! local bare remote. A chain of N trivial stages (the scripted fake model
//! answers `finish` at once) is planned onto a bare repository with
//! `orch run --remote … --no-local`, then each stage is run by
//! `orch stage … --json` from one clone; each prints the time it spent in
//! `git fetch` (before the claim, and again on contention), in the claim
//! push and in the publish push. Also reported: the whole `orch stage`
//! process, start to exit.
//!
//! ```sh
//! cargo build --release && cargo run --release --example distributed_bench -- [STAGES]
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
use std::process::{Command, Stdio};
use std::time::Instant;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn p90(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[(v.len() * 9 / 10).min(v.len() - 1)]
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let tmp = tempfile::tempdir().expect("temp dir");
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("README.md"), "bench\n").unwrap();
    bench::commit_all_as_base(&repo);
    let mut y = String::from("name: p\nstages:\n");
    for i in 0..n {
        y.push_str(&format!("  s{i}:\n    role: coder\n"));
        if i > 0 {
            y.push_str(&format!("    needs: [s{}]\n", i - 1));
        }
    }
    std::fs::write(tmp.path().join("p.yaml"), y).unwrap();
    std::fs::write(tmp.path().join("ISSUE.md"), "# bench\n").unwrap();
    bench::git(tmp.path(), &["clone", "-q", "--bare", "repo", "remote.git"]);
    bench::git(tmp.path(), &["clone", "-q", "remote.git", "worker"]);
    let script = (0..n).fold(Script::new(), |s, i| {
        s.agent(&format!("s{i}"), vec![Reply::finish("f", "done", None)])
    });
    let server = FakeServer::start(script);
    let orch = bench::orch_next_to_example();
    let out = Command::new(&orch)
        .args(["run", "p.yaml", "--repo", "repo", "--issue", "ISSUE.md"])
        .args(["--model", "bench", "--base-url", &server.base_url])
        .args(["--remote", "remote.git", "--no-local"])
        .current_dir(tmp.path())
        .env("CI", "true")
        .stderr(Stdio::null())
        .output()
        .expect("orch runs (build it first)");
    assert!(out.status.success(), "plan failed");
    let run = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let remote = tmp.path().join("remote.git");
    local_run(&orch, tmp.path(), n);
    let (mut fetch, mut claim, mut publish, mut whole) = (vec![], vec![], vec![], vec![]);
    for i in 0..n {
        let started = Instant::now();
        let out = Command::new(&orch)
            .args(["stage", &run, &format!("s{i}"), "--json", "--remote"])
            .arg(&remote)
            .current_dir(tmp.path().join("worker"))
            .env("CI", "true")
            .stderr(Stdio::null())
            .output()
            .unwrap();
        whole.push(started.elapsed().as_secs_f64() * 1000.0);
        assert!(out.status.success(), "stage s{i} failed");
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let t = &j["round_trips"];
        fetch.push(t["fetch_ms"].as_f64().unwrap());
        claim.push(t["claim_ms"].as_f64().unwrap());
        publish.push(t["publish_ms"].as_f64().unwrap());
    }
    println!("{n} stages, one after another, one worker clone, local bare remote");
    println!("| round trip | median | p90 |");
    println!("|---|---|---|");
    for (name, v) in [
        ("fetch (run ref, base, run branches)", &mut fetch),
        ("claim push (lease)", &mut claim),
        (
            "publish push (stage branch + run ref, atomic, lease)",
            &mut publish,
        ),
        ("whole `orch stage` process", &mut whole),
    ] {
        println!("| {name} | {:.1} ms | {:.1} ms |", median(v), p90(v));
    }
}

/// A local `orch run` of the chain with `ORCH_LOG=orch::distributed=debug`:
/// the run ref's cost per state write, and the run's wall time per stage.
fn local_run(orch: &std::path::Path, dir: &std::path::Path, n: usize) {
    let script = (0..n).fold(Script::new(), |s, i| {
        s.agent(&format!("s{i}"), vec![Reply::finish("f", "done", None)])
    });
    let server = FakeServer::start(script);
    let started = Instant::now();
    let out = Command::new(orch)
        .args(["run", "p.yaml", "--repo", "repo", "--issue", "ISSUE.md"])
        .args(["--model", "bench", "--base-url", &server.base_url])
        .current_dir(dir)
        .env("CI", "true")
        .env("ORCH_LOG", "orch::distributed=debug")
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let wall = started.elapsed().as_secs_f64() * 1000.0;
    assert!(out.status.success(), "local run failed");
    let log = String::from_utf8_lossy(&out.stderr);
    let mut costs: Vec<f64> = log
        .lines()
        .filter(|l| l.contains("recorded the run on its ref"))
        .filter_map(|l| l.split("elapsed_us=").nth(1))
        .filter_map(|t| {
            t.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<f64>()
                .ok()
        })
        .map(|us| us / 1000.0)
        .collect();
    assert!(!costs.is_empty(), "no run ref timings in the log: {log}");
    println!(
        "local run of {n} stages: {:.1} ms per stage (whole run); {} state writes recorded on the run ref: median {:.2} ms, p90 {:.2} ms each",
        wall / n as f64,
        costs.len(),
        median(&mut costs),
        p90(&mut costs)
    );
    println!();
}
