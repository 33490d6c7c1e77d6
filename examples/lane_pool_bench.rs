#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]
//! Benchmark: what the pool of warm lanes buys a run on a large repository.
//! On a generated repository of N tracked 30-byte files in nested
//! directories (packed), one-stage runs against the scripted fake server
//! (one `finish` reply, no latency):
//!
//! - start → first request: from spawning `orch run` to the first chat
//!   request reaching the server (the preflight's `GET /models` excluded),
//!   cold (no pool) and warm (a pooled lane moved to a new base that changed
//!   10 files);
//! - exit after the final answer: from that request to the process's exit
//!   (the stage commit, the PR text, the lane hand-back, the summary), with
//!   the pool and with `--no-lane-pool` (the lane goes to the trash and is
//!   deleted in the background);
//! - `git worktree add` of the same commit, for scale.
//!
//! ```sh
//! cargo build --release --bin orch --example lane_pool_bench
//! TMPDIR=/dev/shm target/release/examples/lane_pool_bench [FILES ...] [--rounds R]
//! # an orch without the pool, cold runs only:
//! ORCH_BIN=path/to/old/orch TMPDIR=/dev/shm target/release/examples/lane_pool_bench --before
//! ```

#[allow(dead_code, unused_imports)]
#[path = "../tests/it/support/fake_server/mod.rs"]
mod fake_server;

#[allow(dead_code)]
#[path = "support/bench.rs"]
mod bench;

use fake_server::{FakeServer, Reply, Script};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Files changed by each new base.
const CHANGED: usize = 10;

fn generate(repo: &Path, files: usize) {
    std::fs::create_dir_all(repo).unwrap();
    for i in 0..files {
        let dir = repo.join(format!("d{:03}/e{:02}", i / 1000, (i / 50) % 20));
        if i % 50 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("f{i}.txt")), format!("{i:>29}\n")).unwrap();
    }
    std::fs::write(repo.join(".gitignore"), "*.log\n").unwrap();
    bench::git(repo, &["init", "-q", "-b", "main"]);
    // No detached auto-gc racing the explicit one (or the measurements).
    bench::git(repo, &["config", "gc.auto", "0"]);
    bench::git(repo, &["add", "-A"]);
    bench::git(repo, &["commit", "-qm", "base"]);
    bench::git(repo, &["gc", "-q"]);
}

/// A new base commit changing `CHANGED` files.
fn new_base(repo: &Path, files: usize, round: usize) {
    for k in 0..CHANGED {
        let i = (round * 7919 + k * 104_729) % files;
        let path = repo.join(format!("d{:03}/e{:02}/f{i}.txt", i / 1000, (i / 50) % 20));
        std::fs::write(path, format!("round {round} {k}\n")).unwrap();
    }
    bench::git(repo, &["commit", "-qam", "next"]);
}

struct Times {
    first_request: Duration,
    exit_after_final: Duration,
    checkout: String,
}

fn one_run(root: &Path, extra: &[&str]) -> Times {
    let server =
        FakeServer::start(Script::new().agent("work", vec![Reply::finish("f", "done", None)]));
    let orch = std::env::var_os("ORCH_BIN").map_or_else(bench::orch_next_to_example, Into::into);
    let started = Instant::now();
    let out = Command::new(orch)
        .args(["run", "p.yaml", "--repo", "repo", "--issue", "ISSUE.md"])
        .args(["--model", "bench", "--base-url", &server.base_url, "--json"])
        .args(extra)
        .current_dir(root)
        .env("CI", "true")
        .env("HOME", root.join("home"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("orch runs (build it first)");
    let ended = Instant::now();
    assert!(
        out.status.success(),
        "orch failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let chats: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .collect();
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_id = summary["run_id"].as_str().unwrap();
    let log = root.join(format!(
        "repo/.git/orch/runs/{run_id}/stages/work/actions.jsonl"
    ));
    let checkout = std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["event"] == "stage_start")
        .map(|e| e["lane_checkout"].as_str().unwrap_or("?").to_owned())
        .unwrap_or_default();
    Times {
        first_request: chats[0].at - started,
        exit_after_final: ended - chats.last().unwrap().at,
        checkout,
    }
}

/// Waits (bounded) until the background deletion of retired lanes is done,
/// so it does not slow the next measurement.
fn wait_for_trash(root: &Path) {
    let trash = root.join("repo/.git/orch/trash");
    let t = Instant::now();
    while trash.exists() && t.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .map_or(3, |r| r.parse().expect("--rounds R"));
    let mut sizes: Vec<usize> = args
        .iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || args[i - 1] != "--rounds")
        .filter_map(|(_, a)| a.parse().ok())
        .collect();
    if sizes.is_empty() {
        sizes = vec![10_000, 100_000];
    }
    // `--before`: an `orch` without the pool (`ORCH_BIN=…`): cold runs only,
    // whose lanes are removed before the summary.
    let before = args.iter().any(|a| a == "--before");
    println!(
        "median of {rounds} rounds (min-max); TMPDIR={:?}",
        std::env::var("TMPDIR").ok()
    );
    println!(
        "| files | `git worktree add` | start → first request, cold | start → first request, warm | exit after final, pool | exit after final, --no-lane-pool |"
    );
    println!("|---|---|---|---|---|---|");
    for files in sizes {
        let tmp = tempfile::TempDir::new().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("home")).unwrap();
        std::fs::write(
            root.join("p.yaml"),
            "name: p\nstages:\n  work:\n    role: coder\n",
        )
        .unwrap();
        std::fs::write(root.join("ISSUE.md"), "# bench\n").unwrap();
        let repo = root.join("repo");
        let t = Instant::now();
        generate(&repo, files);
        eprintln!("generated {files} files in {:?}", t.elapsed());

        let mut add = Vec::new();
        let (mut cold, mut warm, mut exit_pool, mut exit_nopool) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let wt = root.join(format!("by-git-{round}"));
            let t = Instant::now();
            bench::git(
                &repo,
                &["worktree", "add", "-q", "--detach", wt.to_str().unwrap()],
            );
            add.push(t.elapsed());
            bench::git(
                &repo,
                &["worktree", "remove", "--force", wt.to_str().unwrap()],
            );

            if before {
                let c = one_run(root, &[]);
                cold.push(c.first_request);
                exit_nopool.push(c.exit_after_final);
                continue;
            }
            // Cold: no pool (the previous round's lane was removed).
            let c = one_run(root, &["--no-lane-pool"]);
            assert_eq!(c.checkout, "created");
            cold.push(c.first_request);
            exit_nopool.push(c.exit_after_final);
            wait_for_trash(root);
            // Fill the pool, then a warm run on a new base.
            let _ = one_run(root, &[]);
            new_base(&repo, files, round);
            let w = one_run(root, &[]);
            assert_eq!(w.checkout, "warm", "the pooled lane was reused");
            warm.push(w.first_request);
            exit_pool.push(w.exit_after_final);
            // Empty the pool for the next round's cold run.
            let _ = one_run(root, &["--no-lane-pool"]);
            wait_for_trash(root);
        }
        let show = |v: &Vec<Duration>| {
            format!(
                "{} ({}–{})",
                ms(median(v.clone())),
                ms(*v.iter().min().unwrap()),
                ms(*v.iter().max().unwrap())
            )
        };
        if before {
            println!(
                "| {files} (before) | {} | {} | - | - | {} |",
                show(&add),
                show(&cold),
                show(&exit_nopool)
            );
            continue;
        }
        println!(
            "| {files} | {} | {} | {} | {} | {} |",
            show(&add),
            show(&cold),
            show(&warm),
            show(&exit_pool),
            show(&exit_nopool)
        );
    }
}
