//! Benchmark: what lane bootstrap costs.
//!
//! 1. In process, on the filesystem of `--dir` (default the system temp
//!    dir): one `ioctl(FICLONE)` attempt (what orch tries first), and a
//!    plain copy (`std::fs::copy`, `copy_file_range` on Linux) of a 4 KB
//!    and a 16 MB file.
//! 2. For real: `orch run` of a two-stage chain on a repository whose
//!    `.worktreeinclude` names 500 ignored files of 4 KB and one of 16 MB,
//!    with the scripted fake server; the `worktree_include` events give the
//!    cold copy (stage 1) and the unchanged check (stage 2, same lane).
//!
//! ```sh
//! cargo build && cargo run --example bootstrap_bench -- [--dir DIR]
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
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SMALL_FILES: usize = 500;

fn best_of(n: usize, mut f: impl FnMut()) -> Duration {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap()
}

fn in_process(dir: &Path) {
    let tmp = tempfile::tempdir_in(dir).unwrap();
    let small = tmp.path().join("small");
    let big = tmp.path().join("big");
    std::fs::write(&small, vec![b'x'; 4096]).unwrap();
    std::fs::write(&big, vec![b'y'; 16 << 20]).unwrap();
    let dst = tmp.path().join("dst");
    let mut errno = 0;
    let ficlone = best_of(200, || {
        let from = std::fs::File::open(&small).unwrap();
        let to = std::fs::File::create(&dst).unwrap();
        // SAFETY: both descriptors are open files owned by this closure.
        let rc = unsafe { libc::ioctl(to.as_raw_fd(), libc::FICLONE, from.as_raw_fd()) };
        if rc != 0 {
            errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        }
    });
    let open_create = best_of(200, || {
        let _from = std::fs::File::open(&small).unwrap();
        let _to = std::fs::File::create(&dst).unwrap();
    });
    let copy_small = best_of(200, || {
        std::fs::copy(&small, &dst).unwrap();
    });
    let copy_big = best_of(10, || {
        std::fs::copy(&big, &dst).unwrap();
    });
    let outcome = if errno == 0 {
        "supported".to_owned()
    } else {
        format!("refused, {}", std::io::Error::from_raw_os_error(errno))
    };
    println!("filesystem of {}:", dir.display());
    println!(
        "  FICLONE attempt (open+create+ioctl): {:>8.1} µs  ({outcome})",
        ficlone.as_secs_f64() * 1e6
    );
    println!(
        "  open+create alone:                   {:>8.1} µs",
        open_create.as_secs_f64() * 1e6
    );
    println!(
        "  std::fs::copy 4 KB:                  {:>8.1} µs",
        copy_small.as_secs_f64() * 1e6
    );
    println!(
        "  std::fs::copy 16 MB:                 {:>8.1} µs",
        copy_big.as_secs_f64() * 1e6
    );
}

fn end_to_end(dir: &Path) {
    let tmp = tempfile::tempdir_in(dir).unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join("local")).unwrap();
    std::fs::write(repo.join(".gitignore"), "local/\n.env\n").unwrap();
    std::fs::write(repo.join(".worktreeinclude"), ".env\nlocal/\n").unwrap();
    std::fs::write(repo.join("README.md"), "bench\n").unwrap();
    bench::commit_all_as_base(&repo);
    std::fs::write(repo.join(".env"), "A=1\n").unwrap();
    for i in 0..SMALL_FILES {
        std::fs::write(repo.join(format!("local/f{i}.txt")), vec![b'x'; 4096]).unwrap();
    }
    std::fs::write(repo.join("local/big.bin"), vec![b'y'; 16 << 20]).unwrap();
    let yaml = "name: p\nstages:\n  a:\n    role: coder\n  b:\n    role: coder\n    needs: [a]\n";
    std::fs::write(tmp.path().join("p.yaml"), yaml).unwrap();
    std::fs::write(tmp.path().join("ISSUE.md"), "# bench\n").unwrap();
    let server = FakeServer::start(
        Script::new()
            .agent("a", vec![Reply::finish("f", "done", None)])
            .agent("b", vec![Reply::finish("f", "done", None)]),
    );
    let status = Command::new(bench::orch_next_to_example())
        .args([
            "run", "p.yaml", "--repo", "repo", "--issue", "ISSUE.md", "--model", "bench",
        ])
        .args(["--base-url", &server.base_url])
        .current_dir(tmp.path())
        .env("CI", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("orch runs (build it first: cargo build)");
    assert!(status.success(), "orch run failed: {status}");
    let runs: PathBuf = std::fs::read_dir(repo.join(".git/orch/runs"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    for stage in ["a", "b"] {
        let log =
            std::fs::read_to_string(runs.join(format!("stages/{stage}/actions.jsonl"))).unwrap();
        let event: serde_json::Value = log
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|e| e["event"] == "worktree_include")
            .unwrap();
        println!(
            "  stage {stage}: {:>4} copied ({}), {:>4} unchanged: {:>8.1} ms",
            event["copied"].as_array().map_or(0, Vec::len),
            event["method"].as_str().unwrap_or("?"),
            event["unchanged"],
            event["duration_us"].as_f64().unwrap_or(0.0) / 1000.0
        );
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut dir = std::env::temp_dir();
    while let Some(a) = args.next() {
        if a == "--dir" {
            dir = PathBuf::from(args.next().expect("--dir DIR"));
        }
    }
    in_process(&dir);
    println!(
        "orch run, {SMALL_FILES} × 4 KB + 1 × 16 MB + .env included (a: fresh lane, b: same lane):"
    );
    end_to_end(&dir);
}
