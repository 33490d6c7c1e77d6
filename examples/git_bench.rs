//! Times orch's git work per run and per stage against the `git` CLI doing the
//! same, on a generated repository (10,000 files by default).
//!
//! ```text
//! cargo run --example git_bench -- [files] [rounds]
//! ```
//!
//! Per round, each side: create a worktree on a new branch at `HEAD`; then
//! three stages of "change 10 files, stage everything, commit" (the first stage
//! right after creation, when the index's stat cache is freshest and racy);
//! then one stage that changed nothing (an empty commit). The `git` side runs
//! `git worktree add -b`, `git add -A` + `git commit -q [--allow-empty]` (two
//! processes, as a script would), and `git branch -f` for the stage branch.
//! Worktrees are removed (untimed) after each round. A third, create-only
//! column times libgit2's own checkout on worktree add (filters on), the way
//! lanes were created before issue 14.

// Test and benchmark code: a failed unwrap is a failed run, and printing is its output.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const CHANGED_PER_STAGE: usize = 10;
const STAGES: usize = 3;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let files: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(10_000);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(3);

    let scratch = tempfile::TempDir::new()?;
    let root = fs::canonicalize(scratch.path())?;
    let repo = root.join("repo");
    let home = root.join("home");
    fs::create_dir_all(&home)?;
    fs::create_dir_all(&repo)?;
    let git = Git { home };

    let t = Instant::now();
    generate(&git, &repo, files)?;
    eprintln!("generated {files} files in {:?}", t.elapsed());
    let info = orch::git::open_repo(&repo)?;
    let base = orch::git::Repo::at(&info.common_dir).resolve_commit("HEAD")?;

    let mut orch_times = Times::default();
    let mut cli_times = Times::default();
    let mut old_adds = vec![];
    for round in 0..rounds {
        // Alternate who goes first so page-cache warmth does not favour one side.
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for use_orch in order {
            let name = format!("{}-{round}", if use_orch { "orch" } else { "cli" });
            let path = info.common_dir.join("orch/worktrees").join(&name);
            if use_orch {
                orch_times.push(run_orch(&info.common_dir, &name, &path, &base)?);
            } else {
                cli_times.push(run_cli(&git, &repo, &name, &path, &base)?);
            }
            // Untimed: drop the worktree so later rounds start from the same
            // state (and the same amount of dirty page cache).
            orch::git::Repo::at(&info.common_dir).remove_worktree(&name, &path)?;
            git.run(&repo, &["gc", "--auto", "--quiet"])?;
        }
        // Before issue 14: libgit2's own checkout on worktree add, with
        // filters and per-file attribute lookups.
        let name = format!("old-{round}");
        let path = info.common_dir.join("orch/worktrees").join(&name);
        old_adds.push(old_add(&info.common_dir, &name, &path, &base)?);
        orch::git::Repo::at(&info.common_dir).remove_worktree(&name, &path)?;
    }

    println!(
        "repository: {files} files, {CHANGED_PER_STAGE} files changed per stage, {rounds} rounds (median, min–max)"
    );
    println!("| operation | orch (git2) | git CLI |");
    println!("|---|---|---|");
    for (label, pick) in [
        ("create worktree", 0usize),
        ("stage 1 commit (fresh worktree)", 1),
        ("stage 2 commit", 2),
        ("stage 3 commit", 3),
        ("empty stage commit", 4),
    ] {
        println!(
            "| {label} | {} | {} |",
            orch_times.describe(pick),
            cli_times.describe(pick)
        );
    }
    let old = Times(old_adds.into_iter().map(|d| [d; 2 + STAGES]).collect());
    println!(
        "| create worktree, libgit2's checkout on add (before issue 14) | {} | - |",
        old.describe(0)
    );
    Ok(())
}

/// A worktree added the way lanes were before issue 14: a branch at `base`
/// and `Repository::worktree`, whose checkout runs the filters.
fn old_add(common: &Path, name: &str, path: &Path, base: &str) -> anyhow::Result<Duration> {
    let repo = git2::Repository::open(common)?;
    let commit = repo.find_commit(git2::Oid::from_str(base)?)?;
    fs::create_dir_all(path.parent().expect("lane parent"))?;
    let t = Instant::now();
    let branch = repo.branch(&format!("orch/{name}/pr"), &commit, false)?;
    let mut opts = git2::WorktreeAddOptions::new();
    opts.reference(Some(branch.get()));
    repo.worktree(name, path, Some(&opts))?;
    Ok(t.elapsed())
}

/// One round's timings: create, the stages, the empty stage.
type Round = [Duration; 2 + STAGES];

#[derive(Default)]
struct Times(Vec<Round>);

impl Times {
    fn push(&mut self, round: Round) {
        self.0.push(round);
    }

    fn describe(&self, idx: usize) -> String {
        let mut v: Vec<Duration> = self.0.iter().map(|r| r[idx]).collect();
        v.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        match (v.first(), v.last()) {
            (Some(lo), Some(hi)) => format!(
                "{:.0} ms ({:.0}–{:.0})",
                ms(v[v.len() / 2]),
                ms(*lo),
                ms(*hi)
            ),
            _ => "-".to_string(),
        }
    }
}

fn run_orch(common: &Path, name: &str, path: &Path, base: &str) -> anyhow::Result<Round> {
    let mut round = Round::default();
    let repo = orch::git::Repo::at(common);
    let mut parent = orch::git::CommitId::parse(base)?;
    let t = Instant::now();
    repo.create_worktree(name, path, &parent)?;
    round[0] = t.elapsed();
    for stage in 0..STAGES {
        change_files(path, stage)?;
        let t = Instant::now();
        parent = orch::git::commit_all(path, &format!("stage {stage}"), &parent)?;
        repo.set_branch(&format!("orch/{name}/s{stage}"), &parent)?;
        round[1 + stage] = t.elapsed();
    }
    let t = Instant::now();
    let sha = orch::git::commit_all(path, "empty stage", &parent)?;
    repo.set_branch(&format!("orch/{name}/empty"), &sha)?;
    round[1 + STAGES] = t.elapsed();
    Ok(round)
}

fn run_cli(git: &Git, repo: &Path, name: &str, path: &Path, base: &str) -> anyhow::Result<Round> {
    let mut round = Round::default();
    let path_str = path.to_string_lossy().into_owned();
    let t = Instant::now();
    git.run(
        repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            &format!("orch/{name}/pr"),
            &path_str,
            base,
        ],
    )?;
    round[0] = t.elapsed();
    for stage in 0..STAGES {
        change_files(path, stage)?;
        let t = Instant::now();
        git.run(path, &["add", "-A"])?;
        git.run(path, &["commit", "-q", "-m", &format!("stage {stage}")])?;
        git.run(
            path,
            &["branch", "-f", &format!("orch/{name}/s{stage}"), "HEAD"],
        )?;
        round[1 + stage] = t.elapsed();
    }
    let t = Instant::now();
    git.run(path, &["add", "-A"])?;
    git.run(
        path,
        &["commit", "-q", "--allow-empty", "-m", "empty stage"],
    )?;
    git.run(
        path,
        &["branch", "-f", &format!("orch/{name}/empty"), "HEAD"],
    )?;
    round[1 + STAGES] = t.elapsed();
    Ok(round)
}

/// Modifies some files, adds and deletes others: 10 paths per stage.
fn change_files(worktree: &Path, stage: usize) -> anyhow::Result<()> {
    for i in 0..CHANGED_PER_STAGE {
        let n = stage * 997 + i * 131;
        let path = file_path(worktree, n);
        match i % 5 {
            3 => fs::write(worktree.join(format!("new-{stage}-{i}.txt")), "new\n")?,
            4 => {
                let _ = fs::remove_file(&path);
            }
            _ => fs::write(&path, format!("changed in stage {stage}\n"))?,
        }
    }
    Ok(())
}

fn file_path(root: &Path, n: usize) -> PathBuf {
    root.join(format!(
        "d{:02}/s{:02}/f{n:05}.txt",
        n % 100,
        (n / 100) % 10
    ))
}

fn generate(git: &Git, repo: &Path, files: usize) -> anyhow::Result<()> {
    git.run(repo, &["init", "-q", "-b", "main"])?;
    git.run(repo, &["config", "user.name", "Bench"])?;
    git.run(repo, &["config", "user.email", "bench@example.com"])?;
    for n in 0..files {
        let path = file_path(repo, n);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(&path, format!("file {n}\n{}\n", "x".repeat(n % 400)))?;
    }
    fs::write(repo.join(".gitignore"), "target/\n")?;
    git.run(repo, &["add", "-A"])?;
    git.run(repo, &["commit", "-q", "-m", "generated"])?;
    Ok(())
}

/// The `git` CLI with no system or global config.
struct Git {
    home: PathBuf,
}

impl Git {
    fn run(&self, dir: &Path, args: &[&str]) -> anyhow::Result<()> {
        let out = Command::new("git")
            .current_dir(dir)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", self.home.join(".gitconfig"))
            .env("LC_ALL", "C")
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }
}
