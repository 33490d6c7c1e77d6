#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]
//! Benchmark (issue 14): how orch's cost grows with the repository, next to
//! the `git` CLI doing the same on the same repository.
//!
//! For each size it generates a repository of N tracked ~30-byte files in
//! nested directories (`dNN/eNN/fNNNNNN.txt`, 100 files per directory), one
//! commit, packed by `git gc`, on tmpfs (`/dev/shm`) so the numbers are the
//! software's own cost and not the disk's. Then, per round:
//!
//! - `git worktree add -b` of `HEAD`, then one file changed and `git add -A`
//!   + `git commit` in it (two processes, as a script would);
//! - `orch run` of a one-stage pipeline (built-in `coder` role) against the
//!   scripted fake model of the integration tests: one `bash` call that
//!   appends to a file, then `finish`; run three times on the same
//!   repository: run 1 (cold), run 2 right after it (it finds whatever the
//!   first left: a warm pooled lane, maybe still in the hands of run 1's
//!   background clean-up, which it then waits for), then — once the
//!   background clean-up that run 2 started has finished (polled through
//!   its lock, `.git/orch/pool/cleaner.held`; its duration, from run 2
//!   reaped to the lock free, is reported) — run 2 again, "after clean-up",
//!   which finds a lane stamped clean. `orch gc` runs (untimed) between
//!   rounds, so each round's first run is cold.
//!
//! Reported per size (median, min–max over the rounds): start → first model
//! request (spawn of `orch` to the fake server having read the request),
//! the stage commit (`stage_end` − the `finish` tool event in the stage's
//! action log: commit, branch, diff), exit after the final answer (the last
//! request read by the server → `orch` reaped), and peak RSS: orch's own
//! (`getrusage(RUSAGE_SELF)`, which it logs at exit under
//! `ORCH_LOG=orch::usage=debug`) and with its children (`ru_maxrss` from
//! `wait4`, through a small wrapper process, see `support/child.rs`: the
//! larger of orch and its largest reaped child, e.g. the `git status` of
//! the user's tree).
//!
//! ```sh
//! cargo build --release && cargo build --release --example repo_scale
//! target/release/examples/repo_scale                 # 1k and 10k files, 3 rounds
//! target/release/examples/repo_scale --full          # and 100k files
//! target/release/examples/repo_scale --sizes 2000 --rounds 5
//! REPO_SCALE_ORCH=/path/to/other/orch target/release/examples/repo_scale   # A/B
//! REPO_SCALE_LOG=orch=debug REPO_SCALE_KEEP=1 target/release/examples/repo_scale --sizes 100000 --rounds 1
//! ```
//!
//! `REPO_SCALE_LOG` is passed to `orch` as `ORCH_LOG` (its stderr lands in
//! the workspace's `stderr-*.log`); `REPO_SCALE_KEEP` keeps the workspaces.
//!
//! `--dir PATH` puts the scratch repositories elsewhere (default `/dev/shm`
//! when it exists, else the temp dir).

#[allow(dead_code, unused_imports)]
#[path = "../tests/it/support/fake_server/mod.rs"]
mod fake_server;

#[allow(dead_code)]
#[path = "support/bench.rs"]
mod bench;

#[path = "support/child.rs"]
mod child;

use fake_server::{FakeServer, Reply, Script};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

const ONE_STAGE: &str = "name: p\nstages:\n  s:\n    role: coder\n    max_turns: 20\n";
const ISSUE: &str = "# Mark the first file\n\nAppend a line to d00/e00/f000000.txt.\n";
/// The file both sides change.
const TOUCHED: &str = "d00/e00/f000000.txt";
const FILES_PER_DIR: usize = 100;

struct Args {
    sizes: Vec<usize>,
    rounds: usize,
    dir: PathBuf,
    orch: PathBuf,
}

fn parse_args() -> Args {
    let mut sizes = vec![1_000, 10_000];
    let mut rounds = 3;
    let mut dir = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--full" => sizes.push(100_000),
            "--rounds" => rounds = it.next().and_then(|v| v.parse().ok()).expect("--rounds N"),
            "--sizes" => {
                sizes = it
                    .next()
                    .expect("--sizes N,M")
                    .split(',')
                    .map(|s| s.trim().parse().expect("a number of files"))
                    .collect();
            }
            "--dir" => dir = PathBuf::from(it.next().expect("--dir PATH")),
            other => panic!("unknown argument `{other}` (see the top of examples/repo_scale.rs)"),
        }
    }
    let orch = std::env::var_os("REPO_SCALE_ORCH")
        .map(PathBuf::from)
        .unwrap_or_else(bench::orch_next_to_example);
    assert!(
        orch.exists(),
        "{} missing: cargo build --release first",
        orch.display()
    );
    Args {
        sizes,
        rounds: rounds.max(1),
        dir,
        orch,
    }
}

/// `repo/` with `files` tracked files in one packed commit, `p.yaml`,
/// `ISSUE.md`, an empty config dir and a home for git.
fn workspace(parent: &Path, files: usize) -> tempfile::TempDir {
    let ws = tempfile::tempdir_in(parent).expect("scratch dir");
    let repo = ws.path().join("repo");
    for i in 0..files {
        let rel = format!(
            "d{:02}/e{:02}/f{i:06}.txt",
            i / 10_000,
            (i / FILES_PER_DIR) % 100
        );
        let path = repo.join(rel);
        if i % FILES_PER_DIR == 0 {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        }
        std::fs::write(&path, format!("line of file {i:06} (bench)\n")).unwrap();
    }
    // No background `gc --auto` (a 100k-file commit starts one) racing the
    // explicit pack or the timed runs.
    bench::git(&repo, &["init", "-q", "-b", "main"]);
    bench::git(&repo, &["config", "gc.auto", "0"]);
    bench::git(&repo, &["add", "-A"]);
    bench::git(&repo, &["commit", "-qm", "base"]);
    bench::git(&repo, &["gc", "-q"]);
    std::fs::write(ws.path().join("p.yaml"), ONE_STAGE).unwrap();
    std::fs::write(ws.path().join("ISSUE.md"), ISSUE).unwrap();
    std::fs::create_dir_all(ws.path().join("config")).unwrap();
    ws
}

/// Runs `program args…` in `dir` through the rusage wrapper; its usage and
/// (for `orch`) the peak RSS of the process itself, which it logs at exit:
/// `wait4`'s `ru_maxrss` is the larger of it and its largest reaped child
/// (`git status`, the tools).
fn timed(ws: &Path, dir: &Path, program: &Path, args: &[&str]) -> (child::Usage, Option<i64>) {
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let out = ws.join(format!("rusage-{stamp}.txt"));
    let err = ws.join(format!("stderr-{stamp}.log"));
    let mut cmd = child::wrapped(program, &out);
    cmd.args(args)
        .current_dir(dir)
        .env("CI", "true")
        .env("ORCH_CONFIG_DIR", ws.join("config"))
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
        .env(
            "ORCH_LOG",
            format!(
                "{},orch::usage=debug",
                std::env::var("REPO_SCALE_LOG").unwrap_or_else(|_| "warn".to_owned())
            ),
        )
        .env_remove("ORCH_PROFILE")
        .env_remove("ORCH_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap());
    let u = child::run(cmd, &out);
    assert!(
        u.ok,
        "{} {args:?} failed: {}",
        program.display(),
        std::fs::read_to_string(&err).unwrap_or_default()
    );
    let own = std::fs::read_to_string(&err).ok().and_then(|log| {
        let at = log.rfind("peak_rss_kb=")? + "peak_rss_kb=".len();
        let digits: String = log[at..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    });
    if std::env::var_os("REPO_SCALE_LOG").is_none() {
        let _ = std::fs::remove_file(&err);
    }
    (u, own)
}

/// One round of the `git` CLI: worktree add, then add + commit of one change.
struct GitRound {
    add: child::Usage,
    commit: Duration,
    /// `git add -A -- <the changed path> && git write-tree` right after the
    /// worktree add (the issue-24 reference for orch's stage commit).
    narrow: Duration,
}

fn git_round(ws: &Path, round: usize) -> GitRound {
    let repo = ws.join("repo");
    let wt = ws.join(format!("git-wt-{round}"));
    let branch = format!("bench/{round}");
    let git = Path::new("git");
    let wt_arg = wt.to_str().unwrap();
    let (add, _) = timed(
        ws,
        &repo,
        git,
        &["worktree", "add", "-q", "-b", &branch, wt_arg, "HEAD"],
    );
    append_line(&wt.join(TOUCHED));
    let (narrow_add, _) = timed(ws, &wt, git, &["add", "-A", "--", TOUCHED]);
    let (narrow_tree, _) = timed(ws, &wt, git, &["write-tree"]);
    append_line(&wt.join(TOUCHED));
    let (staged, _) = timed(ws, &wt, git, &["add", "-A"]);
    let (committed, _) = timed(ws, &wt, git, &["commit", "-q", "-m", "bench change"]);
    bench::git(&repo, &["worktree", "remove", "--force", wt_arg]);
    bench::git(&repo, &["branch", "-q", "-D", &branch]);
    GitRound {
        add,
        commit: staged.wall + committed.wall,
        narrow: narrow_add.wall + narrow_tree.wall,
    }
}

fn append_line(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(b"changed\n").unwrap();
}

/// One `orch run` as the fake server and the action log saw it.
struct OrchRun {
    usage: child::Usage,
    /// Peak RSS of `orch` itself (KB), as it logged it.
    own_rss_kb: i64,
    first_request: Duration,
    stage_commit: Duration,
    exit_after_final: Duration,
}

fn run_ids(repo: &Path) -> Vec<String> {
    std::fs::read_dir(repo.join(".git/orch/runs"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

fn orch_run(ws: &Path, orch: &Path) -> OrchRun {
    let repo = ws.join("repo");
    let before = run_ids(&repo);
    let server = FakeServer::start(Script::new().agent(
        "s",
        vec![
            Reply::tool_call(
                "a",
                "bash",
                json!({"command": format!("echo changed >> {TOUCHED}")}),
            ),
            Reply::finish("b", "Marked the first file.", None),
        ],
    ));
    let (usage, own) = timed(
        ws,
        ws,
        orch,
        &[
            "run",
            "p.yaml",
            "--repo",
            "repo",
            "--issue",
            "ISSUE.md",
            "--model",
            "m",
            "--base-url",
            &server.base_url,
        ],
    );
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2, "two model requests");
    let run = run_ids(&repo)
        .into_iter()
        .find(|id| !before.contains(id))
        .expect("a new run record");
    let log =
        std::fs::read_to_string(repo.join(format!(".git/orch/runs/{run}/stages/s/actions.jsonl")))
            .unwrap();
    let events: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let at = |pick: &dyn Fn(&Value) -> bool| {
        let e = events.iter().find(|e| pick(e)).expect("an event");
        let t = chrono::DateTime::parse_from_rfc3339(e["ts"].as_str().unwrap()).unwrap();
        SystemTime::UNIX_EPOCH + Duration::from_millis(t.timestamp_millis() as u64)
    };
    let finish = at(&|e| e["event"] == "tool" && e["name"] == "finish");
    let end = at(&|e| e["event"] == "stage_end");
    OrchRun {
        usage,
        own_rss_kb: own.expect("orch logs its peak memory (orch::usage)"),
        first_request: reqs[0].received.duration_since(usage.started_wall).unwrap(),
        stage_commit: end.duration_since(finish).unwrap_or_default(),
        exit_after_final: usage
            .ended_wall()
            .duration_since(reqs[1].received)
            .unwrap_or_default(),
    }
}

/// Waits until no background clean-up of `repo`'s pool runs (bounded: 10
/// minutes); returns how long that took.
fn wait_for_cleaner(repo: &Path) -> Duration {
    use std::os::fd::AsRawFd;
    let t = std::time::Instant::now();
    let Ok(file) = std::fs::File::open(repo.join(".git/orch/pool/cleaner.held")) else {
        return Duration::ZERO;
    };
    while t.elapsed() < Duration::from_secs(600) {
        // SAFETY: flock on a descriptor `file` owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return t.elapsed();
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    panic!("the background clean-up did not end within 10 minutes");
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `median (min–max)` of `v`, or just the value for one sample.
fn describe(v: &[f64], unit: &str) -> String {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let prec = if unit == "MB" { 1 } else { 0 };
    let med = v[(v.len() - 1) / 2];
    if v.len() == 1 {
        return format!("{med:.prec$} {unit}");
    }
    format!(
        "{med:.prec$} {unit} ({:.prec$}–{:.prec$})",
        v[0],
        v[v.len() - 1]
    )
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    child::maybe_exec_child();
    let args = parse_args();
    println!(
        "repo_scale: {} on {} ({} CPUs, load average {}), {} round(s)",
        args.orch.display(),
        args.dir.display(),
        std::thread::available_parallelism().map_or(0, usize::from),
        load(),
        args.rounds
    );
    let mut rows = Vec::new();
    let mut kept = Vec::new();
    for &files in &args.sizes {
        let t = std::time::Instant::now();
        let ws = workspace(&args.dir, files);
        eprintln!(
            "generated {files} files in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        if std::env::var_os("REPO_SCALE_KEEP").is_some() {
            eprintln!("keeping {} (REPO_SCALE_KEEP)", ws.path().display());
        }
        let (mut gits, mut firsts, mut seconds) = (vec![], vec![], vec![]);
        let (mut cleaned, mut cleanups) = (vec![], vec![]);
        let repo = ws.path().join("repo");
        for round in 0..args.rounds {
            gits.push(git_round(ws.path(), round));
            if round > 0 {
                // Whatever the previous round's runs left (lanes): the first
                // run of each round starts cold.
                wait_for_cleaner(&repo);
                timed(ws.path(), ws.path(), &args.orch, &["gc", "--repo", "repo"]);
            }
            firsts.push(orch_run(ws.path(), &args.orch));
            seconds.push(orch_run(ws.path(), &args.orch));
            cleanups.push(wait_for_cleaner(&repo));
            cleaned.push(orch_run(ws.path(), &args.orch));
            eprintln!("  {files} files: round {} done", round + 1);
        }
        let col = |runs: &[OrchRun], f: &dyn Fn(&OrchRun) -> f64, unit: &str| {
            describe(&runs.iter().map(f).collect::<Vec<_>>(), unit)
        };
        let rss = |r: &OrchRun| r.usage.maxrss_kb as f64 / 1024.0;
        let own = |r: &OrchRun| r.own_rss_kb as f64 / 1024.0;
        rows.push(vec![
            format!("{files}"),
            describe(
                &gits.iter().map(|g| ms(g.add.wall)).collect::<Vec<_>>(),
                "ms",
            ),
            col(&firsts, &|r| ms(r.first_request), "ms"),
            col(&seconds, &|r| ms(r.first_request), "ms"),
            col(&cleaned, &|r| ms(r.first_request), "ms"),
            describe(&gits.iter().map(|g| ms(g.narrow)).collect::<Vec<_>>(), "ms"),
            describe(&gits.iter().map(|g| ms(g.commit)).collect::<Vec<_>>(), "ms"),
            col(&firsts, &|r| ms(r.stage_commit), "ms"),
            col(&cleaned, &|r| ms(r.stage_commit), "ms"),
            col(&firsts, &|r| ms(r.exit_after_final), "ms"),
            col(&seconds, &|r| ms(r.exit_after_final), "ms"),
            col(&firsts, &own, "MB"),
            col(&cleaned, &own, "MB"),
            col(&firsts, &rss, "MB"),
            col(&cleaned, &rss, "MB"),
            describe(
                &gits
                    .iter()
                    .map(|g| g.add.maxrss_kb as f64 / 1024.0)
                    .collect::<Vec<_>>(),
                "MB",
            ),
            col(&firsts, &|r| ms(r.usage.cpu), "ms"),
        ]);
        kept.push(ws);
    }
    println!();
    println!(
        "| tracked files | `git worktree add` | start → first request, run 1 | run 2 (right after run 1) | run 3 (warm) | `git add -A -- <path> && git write-tree` | `git add -A && git commit` | orch stage commit, run 1 | run 3 (warm) | exit after final answer, run 1 | run 2 | orch's own peak RSS, run 1 | run 3 | with its children (`wait4`), run 1 | run 3 | `git worktree add` peak RSS | orch CPU, run 1 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        println!("| {} |", row.join(" | "));
    }
    println!("\nload average at the end: {}", load());
    if std::env::var_os("REPO_SCALE_KEEP").is_some() {
        for ws in kept {
            let _ = ws.keep();
        }
    }
}
