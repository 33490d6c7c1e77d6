//! Benchmark: the wall time of a width-4 DAG at a fixed model latency, run
//! serially (`--max-parallel 1`) and in parallel (`--max-parallel 4`).
//!
//! Four independent stages (3 model turns each: a `write_file`, a `bash`
//! call, `finish`) feed one fan-in stage (1 turn). Every model reply is held
//! for `LATENCY` by the scripted fake server, so the ideal serial time is
//! 13 × LATENCY and the ideal parallel time 4 × LATENCY; what is left is
//! orchestration overhead (worktrees, commits, merges, process spawns).
//!
//! ```sh
//! cargo build --release && cargo run --release --example dag_bench
//! ```

#[allow(dead_code, unused_imports)]
#[path = "../tests/it/support/fake_server.rs"]
mod fake_server;

use fake_server::{FakeServer, Reply, Script};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const LATENCY: Duration = Duration::from_millis(250);
const ROUNDS: usize = 3;
const PIPELINE: &str = "name: p\nstages:\n  w1:\n    role: coder\n  w2:\n    role: coder\n  w3:\n    role: coder\n  w4:\n    role: coder\n  join:\n    role: coder\n    needs: [w1, w2, w3, w4]\n";

fn orch_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    dir.join("orch")
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
        .status()
        .expect("git runs")
        .success();
    assert!(ok, "git {args:?}");
}

fn script() -> Script {
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
                .after(LATENCY),
                Reply::tool_call("b", "bash", json!({"command": "ls > /dev/null"})).after(LATENCY),
                Reply::finish("c", "done", None).after(LATENCY),
            ],
        );
    }
    s.agent(
        "join",
        vec![Reply::finish("c", "joined", None).after(LATENCY)],
    )
}

fn one_run(max_parallel: usize) -> Duration {
    let tmp = tempfile::tempdir().expect("temp dir");
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("README.md"), "bench\n").unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "base"]);
    std::fs::write(tmp.path().join("p.yaml"), PIPELINE).unwrap();
    std::fs::write(tmp.path().join("ISSUE.md"), "# bench\n").unwrap();
    let server = FakeServer::start(script());
    let started = Instant::now();
    let out = Command::new(orch_bin())
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
    let serial = median((0..ROUNDS).map(|_| one_run(1)).collect());
    let parallel = median((0..ROUNDS).map(|_| one_run(4)).collect());
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let l = ms(LATENCY);
    println!(
        "model latency {l:.0} ms per reply; 13 replies serial, 4 on the critical path; median of {ROUNDS} runs"
    );
    println!("| mode | wall time | ideal | overhead |");
    println!("|---|---|---|---|");
    println!(
        "| --max-parallel 1 | {:.0} ms | {:.0} ms | {:.0} ms |",
        ms(serial),
        13.0 * l,
        ms(serial) - 13.0 * l
    );
    println!(
        "| --max-parallel 4 | {:.0} ms | {:.0} ms | {:.0} ms |",
        ms(parallel),
        4.0 * l,
        ms(parallel) - 4.0 * l
    );
    println!(
        "speed-up: {:.2}x",
        serial.as_secs_f64() / parallel.as_secs_f64()
    );
}
