//! Benchmark: how fast `orch ui` serves the page of a 50-stage run.
//!
//! Runs a real 50-stage pipeline (10 layers of 5; each stage needs the
//! whole layer before it, writes a file and finishes) with the scripted
//! fake server, starts `orch ui` on it, and measures:
//!
//! 1. over HTTP: the run page, and the page with its two assets, as a
//!    browser fetches them on a cold load (median and worst of 30);
//! 2. in headless Chromium when there is one (chromedriver on PATH): the
//!    navigation to the run page until its `load` event, from the
//!    browser's own Navigation Timing (median and worst of 10).
//!
//! ```sh
//! cargo build --release && cargo run --release --example ui_bench
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

#[allow(dead_code)]
#[path = "../tests/it/webui/driver.rs"]
mod driver;

use fake_server::{FakeServer, Reply, Script};
use serde_json::json;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LAYERS: usize = 10;
const WIDTH: usize = 5;

fn id(layer: usize, i: usize) -> String {
    format!("s{layer}_{i}")
}

fn pipeline() -> String {
    let mut p = String::from("name: p\nstages:\n");
    for l in 0..LAYERS {
        for i in 0..WIDTH {
            p.push_str(&format!("  {}:\n    role: coder\n", id(l, i)));
            if l > 0 {
                let needs: Vec<String> = (0..WIDTH).map(|j| id(l - 1, j)).collect();
                p.push_str(&format!("    needs: [{}]\n", needs.join(", ")));
            }
        }
    }
    p
}

fn script() -> Script {
    let mut s = Script::new();
    for l in 0..LAYERS {
        for i in 0..WIDTH {
            let w = id(l, i);
            s = s.agent(
                &w,
                vec![
                    Reply::tool_call(
                        "a",
                        "write_file",
                        json!({"path": format!("{w}.py"), "content": format!("def {w}():\n    return {l}\n")}),
                    )
                    .with_usage(800, 60),
                    Reply::finish("b", &format!("wrote {w}.py"), None).with_usage(900, 20),
                ],
            );
        }
    }
    s
}

fn stats(mut v: Vec<Duration>) -> String {
    v.sort();
    format!(
        "median {:.1} ms, worst {:.1} ms (n={})",
        v[v.len() / 2].as_secs_f64() * 1e3,
        v[v.len() - 1].as_secs_f64() * 1e3,
        v.len()
    )
}

fn main() {
    // `--repo DIR`: measure the newest run already recorded there (e.g. one
    // this benchmark made before) instead of making one.
    let args: Vec<String> = std::env::args().collect();
    let given = args
        .iter()
        .position(|a| a == "--repo")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);
    let tmp = tempfile::tempdir().unwrap();
    let orch: PathBuf =
        std::env::var_os("ORCH_BIN").map_or_else(bench::orch_next_to_example, Into::into);
    let repo = match given {
        Some(repo) => repo,
        None => record_run(tmp.path(), &orch),
    };
    measure(&repo, &orch);
}

/// Runs the 50-stage pipeline in `dir/repo`; returns the repository.
fn record_run(dir: &Path, orch: &Path) -> PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("README.md"), "bench\n").unwrap();
    bench::commit_all_as_base(&repo);
    std::fs::write(dir.join("p.yaml"), pipeline()).unwrap();
    std::fs::write(dir.join("ISSUE.md"), "# bench\n").unwrap();
    let server = FakeServer::start(script());
    let started = Instant::now();
    let out = Command::new(orch)
        .args([
            "run", "p.yaml", "--repo", "repo", "--issue", "ISSUE.md", "--model", "bench",
        ])
        .args(["--base-url", &server.base_url])
        .current_dir(dir)
        .env("CI", "true")
        .output()
        .expect("orch runs (build it first)");
    assert!(
        out.status.success(),
        "orch failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "50-stage run recorded in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    repo
}

/// Serves `repo` with `orch ui` and measures its newest run's page.
fn measure(repo: &Path, orch: &Path) {
    let mut ui = Command::new(orch)
        .args(["ui", "--repo"])
        .arg(repo)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut url = String::new();
    std::io::BufReader::new(ui.stdout.take().unwrap())
        .read_line(&mut url)
        .unwrap();
    let url = url.trim().to_owned();
    let addr = url["http://".len()..].split('/').next().unwrap().to_owned();
    let token = url.split("token=").nth(1).unwrap().to_owned();
    let mut runs: Vec<String> = std::fs::read_dir(repo.join(".git/orch/runs"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    runs.sort();
    let run_id = runs.pop().expect("a recorded run");
    let page = format!("/run/{run_id}?token={token}");
    let cookie = format!("orch_ui={token}");

    let (status, _, body) = driver::http(&addr, "GET", &page, &[], "");
    assert_eq!(status, 200);
    let stages = body.matches("<g class=\"node").count();
    println!(
        "run page: {stages} stages drawn, {} KB of HTML",
        body.len() / 1024
    );
    let mut page_only = Vec::new();
    let mut with_assets = Vec::new();
    for _ in 0..30 {
        let t = Instant::now();
        let (s, _, _) = driver::http(&addr, "GET", &page, &[], "");
        assert_eq!(s, 200);
        page_only.push(t.elapsed());
        for asset in ["/assets/style.css", "/assets/app.js"] {
            let (s, _, _) = driver::http(&addr, "GET", asset, &[("Cookie", &cookie)], "");
            assert_eq!(s, 200);
        }
        with_assets.push(t.elapsed());
    }
    println!("HTTP, run page:              {}", stats(page_only));
    println!("HTTP, run page + 2 assets:   {}", stats(with_assets));

    if let Some(b) = driver::Browser::start() {
        b.goto(&url);
        let mut loads = Vec::new();
        for _ in 0..10 {
            b.goto(&format!("http://{addr}/run/{run_id}"));
            let ms = b.execute(
                "const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime;",
            );
            loads.push(Duration::from_secs_f64(ms.as_f64().unwrap() / 1e3));
        }
        println!("Chromium, navigation → load: {}", stats(loads));
    }
    let _ = ui.kill();
    let _ = ui.wait();
}
