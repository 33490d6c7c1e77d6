//! Benchmark: orch against the performance budget in DESIGN.md, measured
//! against one fake model (tests/it/support/fake_server/, zero latency).
//!
//! Runs the release `orch` binary next to this example and reports, over N
//! runs, the median and p90 of:
//!
//! 1. start → first model request: from just before `spawn()` of `orch run`
//!    on a one-stage pipeline over a small repository to the moment the fake
//!    server (in this process) has read the first request; with floors
//!    (`orch --version`, `orch validate`) and a split at the stage's
//!    `stage_start` event (after the run's worktree exists);
//! 2. per tool turn overhead: a stage of K `read_file` turns and one of K
//!    `bash true` turns; overhead = gap between consecutive requests at the
//!    server − the tool's `duration_ms` − the fake server's own round trip
//!    for the same request (replayed by a raw client);
//! 3. peak memory (`ru_maxrss` of the reaped `orch` process, via `wait4`)
//!    and CPU time (user + sys) of a 3-stage `issue-to-pr` run and of the
//!    K-turn runs;
//! 4. first request size of the `code`, `review` and `docs` stages of the
//!    built-in `issue-to-pr` (the `Content-Length` of each agent's first
//!    request), split into system prompt, task, tool schemas.
//!
//! ```sh
//! cargo build --release && cargo run --release --example perf_probe [RUNS [TURNS]]
//! ```
//!
//! RUNS defaults to 15 (sections 2–3 use RUNS/3 runs), TURNS to 40.
//! `PERF_PROBE_ORCH=/path/to/orch` measures another build;
//! `PERF_PROBE_ONLY=startup` runs section 1 only.

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
#[path = "support/child.rs"]
mod child;

use fake_server::{FakeServer, Recorded, Reply, Script};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

const ONE_STAGE: &str = "name: p\nstages:\n  s:\n    role: coder\n    max_turns: 500\n";
const ISSUE: &str = "# Off-by-one in range_sum\n\n`range_sum(1, 3)` returns 3; it should include both ends and return 6.\n";

/// The release `orch` next to this example, or `$PERF_PROBE_ORCH` (to
/// compare two builds).
fn orch_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("PERF_PROBE_ORCH") {
        return PathBuf::from(bin);
    }
    bench::orch_next_to_example()
}

/// A temp dir with `repo/` (a small Python project: 12 files, one commit),
/// `p.yaml` (one coder stage), `ISSUE.md` and an empty config dir.
fn workspace() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("temp dir");
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join("src/calc")).unwrap();
    std::fs::create_dir_all(repo.join("tests")).unwrap();
    std::fs::write(
        repo.join("README.md"),
        "# calc\n\nA tiny calculator.\n".repeat(5),
    )
    .unwrap();
    std::fs::write(
        repo.join("src/calc/ops.py"),
        "def range_sum(a, b):\n    return sum(range(a, b))\n",
    )
    .unwrap();
    for i in 0..10 {
        std::fs::write(
            repo.join(format!("src/calc/m{i}.py")),
            format!("def f{i}(x):\n    return x + {i}\n").repeat(20),
        )
        .unwrap();
    }
    std::fs::write(
        repo.join("tests/test_ops.py"),
        "from calc.ops import range_sum\n\ndef test():\n    assert range_sum(1, 3) == 6\n",
    )
    .unwrap();
    bench::commit_all_as_base(&repo);
    std::fs::write(tmp.path().join("p.yaml"), ONE_STAGE).unwrap();
    std::fs::write(tmp.path().join("ISSUE.md"), ISSUE).unwrap();
    std::fs::create_dir_all(tmp.path().join("config")).unwrap();
    tmp
}

/// One finished `orch` process.
struct Proc {
    /// Wall clock just before `spawn()` of `orch` (in the wrapper).
    started_wall: SystemTime,
    wall: Duration,
    /// user + sys of the process (and of children it reaped).
    cpu: Duration,
    /// Peak RSS in KB: max of the process and children it reaped.
    maxrss_kb: i64,
    stderr: String,
}

fn unix_ns(t: SystemTime) -> u128 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos()
}

/// Runs `orch args…` in `dir` through a small wrapper process (this binary
/// with `--exec-child`), which reaps it with `wait4` for its exact rusage.
///
/// Why the wrapper: Linux folds the memory high-water mark of the process
/// that spawned a child (at `exec`) into the child's `ru_maxrss`, so `orch`
/// spawned straight from this probe (which holds every recorded request)
/// would report the probe's peak, not its own. The wrapper is a few MB.
fn orch(dir: &Path, args: &[&str]) -> Proc {
    let stamp = unix_ns(SystemTime::now());
    let err_path = dir.join(format!("stderr-{stamp}.log"));
    let out_path = dir.join(format!("rusage-{stamp}.txt"));
    let err = std::fs::File::create(&err_path).unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .arg(child::EXEC_CHILD)
        .arg(&out_path)
        .arg(orch_bin())
        .args(args)
        .current_dir(dir)
        .env("CI", "true")
        .env("ORCH_CONFIG_DIR", dir.join("config"))
        .env_remove("ORCH_LOG")
        .env_remove("ORCH_PROFILE")
        .env_remove("ORCH_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .status()
        .expect("the wrapper runs");
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(
        status.success(),
        "orch {args:?} failed ({status}): {stderr}"
    );
    let out = std::fs::read_to_string(&out_path).expect("wrapper output");
    let f: Vec<u128> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
    Proc {
        started_wall: SystemTime::UNIX_EPOCH + Duration::from_nanos(f[0] as u64),
        wall: Duration::from_nanos(f[1] as u64),
        cpu: Duration::from_nanos(f[2] as u64),
        maxrss_kb: f[3] as i64,
        stderr,
    }
}

fn run_args<'a>(pipeline: &'a str, base_url: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        pipeline,
        "--repo",
        "repo",
        "--issue",
        "ISSUE.md",
        "--model",
        "m",
        "--base-url",
        base_url,
    ]
}

/// The events of `stage`'s action log in the only run of `repo`.
fn actions(dir: &Path, stage: &str) -> Vec<Value> {
    let runs = dir.join("repo/.git/orch/runs");
    let run = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .expect("a run record")
        .unwrap()
        .path();
    let text = std::fs::read_to_string(run.join("stages").join(stage).join("actions.jsonl"))
        .expect("actions.jsonl");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("jsonl line"))
        .collect()
}

fn ts_of(event: &Value) -> SystemTime {
    let ts = event["ts"].as_str().expect("ts");
    let t = chrono::DateTime::parse_from_rfc3339(ts).expect("rfc3339");
    SystemTime::UNIX_EPOCH + Duration::from_millis(t.timestamp_millis() as u64)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn since(later: SystemTime, earlier: SystemTime) -> f64 {
    match later.duration_since(earlier) {
        Ok(d) => ms(d),
        Err(e) => -ms(e.duration()),
    }
}

/// Median and p90 (nearest rank) of `v`.
fn stats(v: &[f64]) -> (f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    (rank(0.5), rank(0.9))
}

fn row(what: &str, v: &[f64], unit: &str) {
    let (med, p90) = stats(v);
    let prec = if unit == "ms" { 2 } else { 0 };
    println!(
        "| {what} | {med:.prec$} {unit} | {p90:.prec$} {unit} | {} |",
        v.len()
    );
}

/// Sends `body` to the fake server as `agent` with a raw HTTP/1.1 client and
/// reads the answer to its end: the server's own cost of one model turn.
fn raw_round_trip(base_url: &str, agent: &str, body: &[u8]) -> Duration {
    let addr = base_url
        .trim_start_matches("http://")
        .trim_end_matches("/v1");
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).expect("connect to the fake server");
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nX-Orch-Agent: {agent}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    let took = started.elapsed();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "raw client: {answer:?}"
    );
    took
}

fn content_length(r: &Recorded) -> usize {
    r.header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| r.body.to_string().len())
}

// ---------------------------------------------------------------- 1. startup

fn startup(runs: usize) -> f64 {
    let (mut version, mut validate, mut first, mut to_stage, mut stage_to_req, mut total) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut rss, mut cpu) = (vec![], vec![]);
    for _ in 0..runs {
        let ws = workspace();
        version.push(ms(orch(ws.path(), &["--version"]).wall));
        validate.push(ms(orch(ws.path(), &["validate", "--repo", "repo"]).wall));
        let server =
            FakeServer::start(Script::new().agent("s", vec![Reply::finish("f", "done", None)]));
        let p = orch(ws.path(), &run_args("p.yaml", &server.base_url));
        let reqs = server.requests();
        assert!(server.violations().is_empty(), "{:?}", server.violations());
        let first_at = reqs.first().expect("a model request");
        first.push(since(first_at.received, p.started_wall));
        let log = actions(ws.path(), "s");
        let stage_start = log.iter().find(|e| e["event"] == "stage_start").unwrap();
        to_stage.push(since(ts_of(stage_start), p.started_wall));
        stage_to_req.push(since(first_at.received, ts_of(stage_start)));
        total.push(ms(p.wall));
        rss.push(p.maxrss_kb as f64);
        cpu.push(ms(p.cpu));
    }
    println!("\n### 1. Start → first model request (1-stage pipeline, small repo, {runs} runs)\n");
    println!("| what | median | p90 | n |\n|---|---|---|---|");
    row("`orch --version` (process start + exit)", &version, "ms");
    row(
        "`orch validate --repo repo` (start + catalog + parse all)",
        &validate,
        "ms",
    );
    row(
        "**spawn → first request received by the server**",
        &first,
        "ms",
    );
    row(
        "  spawn → `stage_start` logged (run record + worktree; ms clock)",
        &to_stage,
        "ms",
    );
    row(
        "  `stage_start` → first request received (prompt, client, connect)",
        &stage_to_req,
        "ms",
    );
    row(
        "whole 1-turn run (to exit: commit, PR branch, worktree removal)",
        &total,
        "ms",
    );
    row("CPU (user+sys) of that run", &cpu, "ms");
    row("peak RSS of that run", &rss, "KB");
    stats(&cpu).0
}

// ---------------------------------------------------------------- 2/3. turns

struct TurnRun {
    gaps: Vec<f64>,
    tool_ms: Vec<f64>,
    server_rt: Vec<f64>,
    wall: f64,
    cpu: f64,
    rss: f64,
}

fn turn_run(turns: usize, kind: &str) -> TurnRun {
    let ws = workspace();
    // Each call differs (a larger `limit`, an ignored argument) so the
    // repetition guard does not stop the stage; the work is the same.
    let call = |i: usize| match kind {
        "read_file" => Reply::tool_call(
            &format!("c{i}"),
            "read_file",
            json!({"path": "src/calc/ops.py", "limit": 1000 + i}),
        ),
        _ => Reply::tool_call(
            &format!("c{i}"),
            "bash",
            json!({"command": format!("true {i}")}),
        ),
    };
    let mut replies: Vec<Reply> = (0..turns).map(call).collect();
    replies.push(Reply::finish("f", "done", None));
    // "calib" answers the raw client's replays of the same requests.
    let calib: Vec<Reply> = (0..turns).map(call).collect();
    let server = FakeServer::start(Script::new().agent("s", replies).agent("calib", calib));
    let p = orch(ws.path(), &run_args("p.yaml", &server.base_url));
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let reqs = server.requests_for("s");
    assert_eq!(reqs.len(), turns + 1);
    let log = actions(ws.path(), "s");
    let tool_ms: Vec<f64> = log
        .iter()
        .filter(|e| e["event"] == "tool" && e["name"] != "finish")
        .map(|e| e["duration_ms"].as_f64().unwrap())
        .collect();
    assert_eq!(tool_ms.len(), turns);
    let gaps: Vec<f64> = reqs
        .windows(2)
        .map(|w| ms(w[1].at.duration_since(w[0].at)))
        .collect();
    // The server's part of each gap: the same request bodies, sent raw.
    let server_rt: Vec<f64> = reqs[..turns]
        .iter()
        .map(|r| {
            ms(raw_round_trip(
                &server.base_url,
                "calib",
                r.body.to_string().as_bytes(),
            ))
        })
        .collect();
    TurnRun {
        gaps,
        tool_ms,
        server_rt,
        wall: ms(p.wall),
        cpu: ms(p.cpu),
        rss: p.maxrss_kb as f64,
    }
}

fn turns(runs: usize, k: usize, one_turn_cpu: f64) {
    println!(
        "\n### 2. Per tool turn ({k} turns per stage, zero model latency, {runs} runs; every turn of every run is a sample)\n"
    );
    println!("| what | median | p90 | n |\n|---|---|---|---|");
    let mut summary = vec![];
    for kind in ["read_file", "bash"] {
        let (mut gap, mut tool, mut rt, mut over, mut cpu, mut rss, mut wall) =
            (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..runs {
            let r = turn_run(k, kind);
            for i in 0..k {
                over.push(r.gaps[i] - r.tool_ms[i] - r.server_rt[i]);
            }
            gap.extend(r.gaps);
            tool.extend(r.tool_ms);
            rt.extend(r.server_rt);
            cpu.push((r.cpu - one_turn_cpu) / k as f64);
            rss.push(r.rss);
            wall.push(r.wall);
        }
        let label = if kind == "bash" {
            "`bash true`"
        } else {
            "`read_file`"
        };
        row(
            &format!("{label}: request → next request at the server"),
            &gap,
            "ms",
        );
        row(
            &format!("{label}: tool `duration_ms` (action log, whole ms)"),
            &tool,
            "ms",
        );
        row(
            &format!("{label}: fake server round trip for the same request"),
            &rt,
            "ms",
        );
        row(
            &format!("**{label}: orch overhead per turn** (gap − tool − server)"),
            &over,
            "ms",
        );
        row(
            &format!("{label}: CPU (user+sys) per extra turn, vs the 1-turn run"),
            &cpu,
            "ms",
        );
        summary.push((kind, rss, wall));
    }
    println!("\n### 3a. Peak memory and wall time of the {k}-turn runs\n");
    println!("| what | median | p90 | n |\n|---|---|---|---|");
    for (kind, rss, wall) in summary {
        row(&format!("`{kind}` × {k}: peak RSS"), &rss, "KB");
        row(&format!("`{kind}` × {k}: whole run"), &wall, "ms");
    }
}

// ------------------------------------------------------- 3b/4. issue-to-pr

fn issue_to_pr(runs: usize) {
    let (mut rss, mut cpu, mut wall) = (vec![], vec![], vec![]);
    let mut sizes: Vec<(String, usize, usize, usize, usize, usize)> = vec![];
    for n in 0..runs {
        let ws = workspace();
        let script = Script::new()
            .agent(
                "code",
                vec![
                    Reply::tool_call("a", "read_file", json!({"path": "src/calc/ops.py"})),
                    Reply::tool_call(
                        "b",
                        "edit_file",
                        json!({"path": "src/calc/ops.py", "old_string": "range(a, b)", "new_string": "range(a, b + 1)"}),
                    ),
                    Reply::tool_call("c", "bash", json!({"command": "grep -n range src/calc/ops.py"})),
                    Reply::finish("d", "range_sum now includes both ends.", None),
                ],
            )
            .agent(
                "review",
                vec![Reply::finish("e", "The fix is right.", Some("approve"))],
            )
            .agent(
                "docs",
                vec![Reply::finish("f", "Nothing for users to read.", None)],
            );
        let server = FakeServer::start(script);
        let p = orch(ws.path(), &run_args("issue-to-pr", &server.base_url));
        assert!(server.violations().is_empty(), "{:?}", server.violations());
        assert!(!p.stderr.contains("failed"), "{}", p.stderr);
        rss.push(p.maxrss_kb as f64);
        cpu.push(ms(p.cpu));
        wall.push(ms(p.wall));
        if n == 0 {
            for agent in ["code", "review", "docs"] {
                let first = &server.requests_for(agent)[0];
                let msgs = first.messages();
                let len = |v: &Value| v.to_string().len();
                sizes.push((
                    agent.to_owned(),
                    content_length(first),
                    msgs[0]["content"].as_str().map_or(0, str::len),
                    msgs[1]["content"].as_str().map_or(0, str::len),
                    len(&first.body["tools"]),
                    first.body["tools"].as_array().map_or(0, Vec::len),
                ));
            }
        }
    }
    println!(
        "\n### 3b. Peak memory of a 3-stage `issue-to-pr` run ({runs} runs; code: 4 turns incl. an edit and a bash call; review, docs: 1 turn)\n"
    );
    println!("| what | median | p90 | n |\n|---|---|---|---|");
    row("peak RSS", &rss, "KB");
    row("CPU (user+sys, incl. the bash child)", &cpu, "ms");
    row("whole run", &wall, "ms");
    println!(
        "\n### 4. First request of each `issue-to-pr` stage (issue of {} bytes)\n",
        ISSUE.len()
    );
    println!(
        "| stage | request body | system prompt | first user message (task + hand-off) | tool schemas | tools offered |\n|---|---|---|---|---|---|"
    );
    for (agent, total, sys, task, tools, n) in sizes {
        println!("| {agent} | {total} B | {sys} B | {task} B | {tools} B | {n} |");
    }
}

fn main() {
    child::maybe_exec_child();
    let argv: Vec<String> = std::env::args().collect();
    let mut args = argv.iter().skip(1).filter_map(|a| a.parse::<usize>().ok());
    let runs = args.next().unwrap_or(15).max(1);
    let k = args.next().unwrap_or(40).max(2);
    let bin = orch_bin();
    assert!(
        bin.exists(),
        "{} missing: cargo build --release first",
        bin.display()
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    println!(
        "orch perf probe: {} ({} CPUs, load average {}), {runs} runs, {k} turns",
        bin.display(),
        cpus,
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let one_turn_cpu = startup(runs);
    // PERF_PROBE_ONLY=startup: only section 1 (quick A/B comparisons).
    if std::env::var("PERF_PROBE_ONLY").as_deref() != Ok("startup") {
        turns(runs.div_ceil(3), k, one_turn_cpu);
        issue_to_pr(runs.div_ceil(3));
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "\nload average at the end: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}
