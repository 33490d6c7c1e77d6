//! Benchmark: the wall time of a width-4 DAG at a fixed model latency, run
//! serially (`--max-parallel 1`) and in parallel (`--max-parallel 4`).
//!
//! Two shapes: four independent stages (3 model turns each: a `write_file`,
//! a `bash` call, `finish`), and the same four feeding one fan-in stage
//! (1 turn). Every model reply is held for the latency by the scripted fake
//! server, so the ideal times are 12 × / 3 × latency and 13 × / 4 × latency;
//! what is left is orchestration overhead (worktrees, commits, merges,
//! process spawns).
//!
//! ```sh
//! cargo build --release && cargo run --release --example dag_bench [LATENCY_MS ...]
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

const ROUNDS: usize = 3;
const WIDE: &str = "name: p\nstages:\n  w1:\n    role: coder\n  w2:\n    role: coder\n  w3:\n    role: coder\n  w4:\n    role: coder\n";
const JOIN: &str = "  join:\n    role: coder\n    needs: [w1, w2, w3, w4]\n";

fn script(latency: Duration) -> Script {
    let mut s = Script::new();
    for w in ["w1", "w2", "w3", "w4"] {
        s = s.agent(
            w,
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

fn one_run(max_parallel: usize, latency: Duration, join: bool) -> Duration {
    let tmp = tempfile::tempdir().expect("temp dir");
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("README.md"), "bench\n").unwrap();
    bench::commit_all_as_base(&repo);
    let pipeline = if join {
        format!("{WIDE}{JOIN}")
    } else {
        WIDE.to_owned()
    };
    std::fs::write(tmp.path().join("p.yaml"), pipeline).unwrap();
    std::fs::write(tmp.path().join("ISSUE.md"), "# bench\n").unwrap();
    let server = FakeServer::start(script(latency));
    let started = Instant::now();
    let out = Command::new(bench::orch_next_to_example())
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

fn main() {
    let latencies: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let latencies = if latencies.is_empty() {
        vec![250, 1000]
    } else {
        latencies
    };
    println!("median of {ROUNDS} runs each; ideal = model latency x replies on the critical path");
    println!(
        "| shape | latency | serial (-p 1) | parallel (-p 4) | speed-up | ideal speed-up | overhead serial / parallel |"
    );
    println!("|---|---|---|---|---|---|---|");
    for ms in latencies {
        let latency = Duration::from_millis(ms);
        for (join, name, serial_turns, critical_turns) in [
            (false, "4 stages", 12.0, 3.0),
            (true, "4 stages + fan-in", 13.0, 4.0),
        ] {
            let serial = median((0..ROUNDS).map(|_| one_run(1, latency, join)).collect());
            let parallel = median((0..ROUNDS).map(|_| one_run(4, latency, join)).collect());
            let f = |d: Duration| d.as_secs_f64() * 1000.0;
            let l = ms as f64;
            println!(
                "| {name} | {ms} ms | {:.0} ms | {:.0} ms | {:.2}x | {:.2}x | {:.0} / {:.0} ms |",
                f(serial),
                f(parallel),
                serial.as_secs_f64() / parallel.as_secs_f64(),
                serial_turns / critical_turns,
                f(serial) - serial_turns * l,
                f(parallel) - critical_turns * l,
            );
        }
    }
}
