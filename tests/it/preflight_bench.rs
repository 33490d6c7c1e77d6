//! Start → first model request at 0, 100 and 300 ms of server latency
//! (issue 29, point 4): an ignored bench through the real binary, run by
//! hand for docs/performance.md ("No wasted round trips before the first
//! request"):
//!
//! ```text
//! cargo test --test it preflight_bench -- --ignored --nocapture
//! ORCH_TEST_BIN=/path/to/old/orch cargo test --test it preflight_bench -- --ignored --nocapture
//! ```
//!
//! For each server kind (no `/models`, llama.cpp, an OpenAI-like list) and
//! latency it times `orch run` of a one-stage pipeline from `spawn()` to the
//! fake server having read the first chat request, over `ORCH_BENCH_RUNS`
//! runs (default 5; the median is printed): each run with an empty cache
//! ("first run"), then each with the cache a previous run against the same
//! server left ("cached").
//! It also counts the requests the server got before that first one, and
//! how many of them it had answered before it (the round trips waited for).

use crate::support::{FakeServer, OrchRun, Reply, Script, TestRepo, write_issue, write_pipeline};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// A fresh server of `kind` at `latency`, scripted for `runs` runs.
fn server(kind: &str, latency: Duration, runs: usize) -> FakeServer {
    let mut script = Script::new().latency(latency);
    for _ in 0..runs {
        script = script.agent("work", super::preflight::two_turns());
    }
    let list = |owner: &str| {
        Reply::Raw(json!({"object": "list", "data": [{"id": "m", "owned_by": owner}]}).to_string())
    };
    match kind {
        "llama.cpp" => {
            script = script.route("/v1/models", list("llamacpp")).route(
                "/props",
                Reply::Raw(json!({"default_generation_settings": {"n_ctx": 8192}}).to_string()),
            );
        }
        "openai-like" => script = script.route("/v1/models", list("openai")),
        _ => {}
    }
    FakeServer::start(script)
}

/// One timed run against `server` with the cache at `cache`: start → its
/// first chat request, the requests the server got before that one, and
/// how many of them it had answered (the round trips it waited for).
fn timed_run(
    repo: &TestRepo,
    pipeline: &Path,
    issue: &Path,
    server: &FakeServer,
    cache: &Path,
) -> (Duration, usize, usize) {
    let (chats, sides) = (server.requests().len(), server.side_requests().len());
    let mut cmd = OrchRun::new(pipeline, repo)
        .issue(issue)
        .model(&server.base_url, "m")
        .env("XDG_CACHE_HOME", cache)
        .json()
        .command();
    let start = SystemTime::now();
    let _ = cmd.output().expect("orch runs");
    let first = server.requests()[chats].clone();
    let before = server.side_requests()[sides..]
        .iter()
        .filter(|r| r.at <= first.at)
        .count();
    (
        first.received.duration_since(start).unwrap_or_default(),
        before,
        first.answered_before - (chats + sides),
    )
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

#[test]
#[ignore = "a benchmark: run by hand for docs/performance.md"]
fn preflight_bench_start_to_first_request() {
    let runs: usize = std::env::var("ORCH_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    // `ORCH_BENCH_LATENCIES=0,100`: other latencies, in ms.
    let latencies: Vec<u64> = std::env::var("ORCH_BENCH_LATENCIES")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![0, 100, 300]);
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load before: {}", load().trim());
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# Nothing\n\nNothing to do.\n");
    let pipeline = write_pipeline(
        scratch.path(),
        "solo",
        "name: solo\nstages:\n  work:\n    role: coder\n    task: \"{{ issue }}\"\n",
    );
    println!(
        "| server | latency | first run: start → first request | requests before it (answered) | cached: start → first request | requests before it (answered) |"
    );
    println!("|---|---|---|---|---|---|");
    for kind in ["no /models", "llama.cpp", "openai-like"] {
        for ms in latencies.iter().copied() {
            let latency = Duration::from_millis(ms);
            let mut first = Vec::new();
            let mut first_n = (0, 0);
            let server = server(kind, latency, 2 * runs + 1);
            for _ in 0..runs {
                let cache = tempfile::tempdir().unwrap();
                let (t, n, a) = timed_run(&repo, &pipeline, &issue, &server, cache.path());
                first.push(t);
                first_n = (n, a);
            }
            let cache = tempfile::tempdir().unwrap();
            let _ = timed_run(&repo, &pipeline, &issue, &server, cache.path());
            let mut cached = Vec::new();
            let mut cached_n = (0, 0);
            for _ in 0..runs {
                let (t, n, a) = timed_run(&repo, &pipeline, &issue, &server, cache.path());
                cached.push(t);
                cached_n = (n, a);
            }
            println!(
                "| {kind} | {ms} ms | {} ms | {} ({}) | {} ms | {} ({}) |",
                median(first).as_millis(),
                first_n.0,
                first_n.1,
                median(cached).as_millis(),
                cached_n.0,
                cached_n.1,
            );
        }
    }
    println!("load after: {}", load().trim());
}
