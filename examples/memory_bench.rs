//! Benchmark: memory retrieval at 100, 1,000 and 10,000 lessons — writing
//! them to `refs/orch/memory` (one commit), reading them back (what a stage
//! start does), building the BM25 index, and the top-5 query a stage makes
//! (`select`: index build + scoring + scope checks, on a ~100-word task);
//! plus the cost at a stage start when there are no lessons at all.
//!
//! ```sh
//! cargo run --release --example memory_bench
//! ```

// Test and benchmark code: a failed unwrap is a failed run, and printing is its output.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

use orch::memory::index::Index;
use orch::memory::{
    Evidence, Kind, Lesson, Origin, Query, Scope, Status, load::load_all_at, select, store,
};
use std::process::Command;
use std::time::{Duration, Instant};

const SIZES: [usize; 3] = [100, 1_000, 10_000];
const QUERIES: usize = 30;

/// A deterministic word stream: a few hundred common words and many rare ones.
struct Words(u64);

impl Words {
    fn next(&mut self) -> String {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = (self.0 >> 33) as usize;
        const COMMON: &[&str] = &[
            "tests", "parser", "config", "env", "fixture", "cargo", "pytest", "timeout", "cache",
            "lock", "path", "branch", "module", "error", "retry", "schema",
        ];
        if r.is_multiple_of(3) {
            COMMON[r % COMMON.len()].to_owned()
        } else {
            format!("w{}", r % 20_000)
        }
    }

    fn text(&mut self, n: usize) -> String {
        (0..n).map(|_| self.next()).collect::<Vec<_>>().join(" ")
    }
}

fn lessons(n: usize) -> Vec<Lesson> {
    let mut w = Words(n as u64);
    (0..n)
        .map(|i| Lesson {
            id: format!("lesson-{i}"),
            title: w.text(6),
            kind: Kind::Pitfall,
            scope: Scope {
                paths: if i.is_multiple_of(4) {
                    vec![format!("src/m{}/**", i % 50)]
                } else {
                    vec![]
                },
                tags: vec![],
            },
            evidence: Some(Evidence {
                run: "bench".into(),
                stage: "code".into(),
                commit: "0".repeat(40),
                event: "manual".into(),
            }),
            created: "2026-01-01T00:00:00Z".into(),
            expires: None,
            status: Status::Accepted,
            uses: 0,
            failed_uses: 0,
            summary: w.text(25),
            body: w.text(80),
            origin: Origin::Ref,
        })
        .collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn git_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        assert!(
            Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .status()
                .unwrap()
                .success()
        );
    };
    git(&["init", "-q"]);
    git(&[
        "-c",
        "user.name=b",
        "-c",
        "user.email=b@b",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "base",
    ]);
    dir
}

fn main() {
    let mut w = Words(7);
    let task = format!(
        "# Task\n\nResolve this issue: tests fail in src/m3/lib.rs {}",
        w.text(100)
    );
    let paths = vec!["src/m3/lib.rs".to_owned()];
    let q = Query {
        text: &task,
        paths: &paths,
    };
    let today = orch::memory::today();

    // No lessons: what every stage start pays.
    let empty = git_repo();
    let git_dir = empty.path().join(".git");
    let none: Vec<Duration> = (0..QUERIES)
        .map(|_| {
            let t = Instant::now();
            let (ls, _) = load_all_at(&git_dir, None, empty.path()).unwrap();
            assert!(select(&ls, &q, &today).is_empty());
            t.elapsed()
        })
        .collect();
    println!(
        "no lessons: load + select {} (median of {QUERIES})",
        ms(median(none))
    );

    println!(
        "{:>7} {:>12} {:>12} {:>12} {:>14}",
        "lessons", "write ref", "read ref", "index build", "top-5 select"
    );
    for n in SIZES {
        let all = lessons(n);
        let repo = git_repo();
        let git_dir = repo.path().join(".git");
        let t = Instant::now();
        store::update(&git_dir, "add", "", |_| Ok(all.clone())).unwrap();
        let write = t.elapsed();
        let reads: Vec<Duration> = (0..5)
            .map(|_| {
                let t = Instant::now();
                let (ls, _) = load_all_at(&git_dir, None, &git_dir).unwrap();
                assert_eq!(ls.len(), n);
                t.elapsed()
            })
            .collect();
        let builds: Vec<Duration> = (0..5)
            .map(|_| {
                let t = Instant::now();
                let idx = Index::build(
                    all.iter()
                        .map(|l| format!("{} {} {}", l.title, l.summary, l.body)),
                );
                assert_eq!(idx.len(), n);
                t.elapsed()
            })
            .collect();
        let selects: Vec<Duration> = (0..QUERIES)
            .map(|_| {
                let t = Instant::now();
                let chosen = select(&all, &q, &today);
                assert!(!chosen.is_empty());
                t.elapsed()
            })
            .collect();
        println!(
            "{n:>7} {:>12} {:>12} {:>12} {:>14}",
            ms(write),
            ms(median(reads)),
            ms(median(builds)),
            ms(median(selects))
        );
    }
    // The query alone on a built index (what an index kept across stages would cost).
    let all = lessons(10_000);
    let idx = Index::build(
        all.iter()
            .map(|l| format!("{} {} {}", l.title, l.summary, l.body)),
    );
    let qs: Vec<Duration> = (0..QUERIES)
        .map(|_| {
            let t = Instant::now();
            assert_eq!(idx.top(&task, 5).len(), 5);
            t.elapsed()
        })
        .collect();
    println!(
        "10000 lessons: BM25 top-5 on a built index {}",
        ms(median(qs))
    );
}
