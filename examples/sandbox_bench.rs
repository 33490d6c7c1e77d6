//! Times the per-tool-call cost of the sandbox: building the Landlock
//! ruleset and spawning through its `pre_exec` hook, against a plain spawn;
//! and the repository guard's before/after fingerprint check — on a small
//! repository and on a large one (10,000 files, 2,000 packed and 20 loose
//! refs by default — a clone plus a few local branches; pass more loose refs
//! to see the guard's per-file cost).
//!
//! ```text
//! cargo run --release --example sandbox_bench -- [files] [packed-refs] [rounds] [loose-refs] [home-entries]
//! ```
//!
//! With `home-entries` > 0, `HOME` is a fresh directory of that many entries
//! (files and directories) plus the usual secret paths (`.ssh`, `.aws`,
//! `.config/gh`, `.docker/config.json`, `.kube/config`, …), so the ruleset's
//! sibling grants (`grant_excluding`) list and open all of them: the case of
//! issue 25.7. `prepare` is what every call paid before the ruleset was kept
//! per stage; "wired call" is what a call pays now.
//!
//! Each spawn runs `/bin/true` (so the child's own work is ~nothing) from the
//! lane of a real linked worktree, with `HOME` and the default secret paths
//! of the machine. Prints median and p90 in microseconds.

// Benchmark code: a failed unwrap is a failed run, and printing is its output.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use orch::sandbox::{self, Policy, RepoGuard};
use orch::sandbox_profile::Profile;

// Shared with the other benchmarks; this one needs no `orch` binary.
#[path = "support/bench.rs"]
#[allow(dead_code)]
mod bench;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let files: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(10_000);
    let packed: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(2_000);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(300);
    let loose: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(20);
    let home_entries: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(0);
    // Not under /tmp: the secrets' ancestors are listed entry by entry, and
    // a shared /tmp holds thousands of other entries; a real HOME's parent
    // (/home) holds a few.
    let fake_home = tempfile::Builder::new()
        .prefix("bench-home-")
        .tempdir_in(std::env::current_dir()?)?;
    if home_entries > 0 {
        let home = fake_home.path();
        for rel in [".ssh", ".aws", ".config/gh", ".gnupg", ".docker", ".kube"] {
            std::fs::create_dir_all(home.join(rel))?;
        }
        for rel in [
            ".netrc",
            ".docker/config.json",
            ".kube/config",
            ".git-credentials",
        ] {
            std::fs::write(home.join(rel), "x")?;
        }
        for i in 0..home_entries {
            if i % 4 == 0 {
                std::fs::create_dir_all(home.join(format!("dir{i}")))?;
            } else {
                std::fs::write(home.join(format!(".file{i}")), "x")?;
            }
        }
        // SAFETY: still single-threaded; nothing else reads the environment.
        unsafe { std::env::set_var("HOME", home) };
        println!("HOME: {} entries", std::fs::read_dir(home)?.count());
    }
    println!("{}", sandbox::availability());
    println!("rounds: {rounds}; times in µs (median / p90)\n");
    println!(
        "| repository | plain spawn | prepare | prepare + spawn | overhead | guard check | wired call (begin + finish) | spawn into the kept sandbox |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let small = tempfile::tempdir()?;
    row("small (10 files, 3 refs)", small.path(), 10, 0, 0, rounds)?;
    let large = tempfile::tempdir()?;
    row(
        &format!("{files} files, {packed} packed + {loose} loose refs"),
        large.path(),
        files,
        packed,
        loose,
        rounds,
    )?;
    Ok(())
}

fn row(
    label: &str,
    root: &Path,
    files: usize,
    packed: usize,
    loose: usize,
    rounds: usize,
) -> anyhow::Result<()> {
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo)?;
    for i in 0..files {
        let dir = repo.join(format!("d{}", i % 100));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("f{i}.txt")), format!("file {i}\n"))?;
    }
    bench::commit_all_as_base(&repo);
    bench::git(&repo, &["tag", "v1"]);
    if packed > 0 {
        let mut stdin = String::new();
        for i in 0..packed {
            stdin.push_str(&format!("create refs/heads/feature/p{i} HEAD\n"));
        }
        update_refs(&repo, &stdin)?;
        bench::git(&repo, &["pack-refs", "--all"]);
        let mut stdin = String::new();
        for i in 0..loose {
            stdin.push_str(&format!("create refs/heads/topic/l{i} HEAD\n"));
        }
        update_refs(&repo, &stdin)?;
    }
    let lane = root.join("lane");
    bench::git(
        &repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "orch-lanes/b/0",
            lane.to_str().unwrap_or("lane"),
        ],
    );
    let tmp = root.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    let policy = Policy::new(Profile::WorkspaceWrite, &lane, &tmp)?;

    let spawn = |prepared: Option<sandbox::Prepared>| -> anyhow::Result<()> {
        let mut cmd = Command::new("/bin/true");
        cmd.current_dir(&lane).stdin(Stdio::null());
        if let Some(p) = prepared {
            // SAFETY: the hook only makes async-signal-safe system calls.
            unsafe { cmd.pre_exec(p.into_pre_exec()) };
        }
        anyhow::ensure!(cmd.status()?.success(), "child failed");
        Ok(())
    };
    let mut plain = Vec::new();
    let mut prep = Vec::new();
    let mut sandboxed = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        spawn(None)?;
        plain.push(t.elapsed());
        let t = Instant::now();
        let p = sandbox::prepare(&policy)?;
        prep.push(t.elapsed());
        spawn(Some(p))?;
        sandboxed.push(t.elapsed());
    }
    // What a call's child pays now: the stage's sandbox, prepared once,
    // entered by every spawn (read-only mounts, no_new_privs, capability
    // drop, landlock_restrict_self).
    let kept = std::sync::Arc::new(sandbox::prepare(&policy)?);
    let mut cached = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let mut cmd = Command::new("/bin/true");
        cmd.current_dir(&lane).stdin(Stdio::null());
        let p = std::sync::Arc::clone(&kept);
        // SAFETY: the hook only makes async-signal-safe system calls.
        unsafe { cmd.pre_exec(move || p.apply_in_child()) };
        anyhow::ensure!(cmd.status()?.success(), "child failed");
        cached.push(t.elapsed());
    }
    let mut guard = RepoGuard::new(&repo.join(".git"))?;
    if let Some(git) = &policy.git {
        guard.watch_lane(git)?;
    }
    // Let the racy window pass once, as between real tool calls.
    std::thread::sleep(sandbox_racy_wait());
    guard.before_call()?;
    let mut check = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        guard.before_call()?;
        let changes = guard.after_call()?;
        check.push(t.elapsed());
        anyhow::ensure!(changes.is_empty(), "unexpected changes: {changes:?}");
    }
    // What orch pays per `bash` call besides the spawn, as wired: the
    // policy (lane git layout discovered), the ruleset, the guard's
    // before/after pair and the (empty) object quarantine scan.
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let wired_sb = sandbox::ToolSandbox::new(sandbox::SandboxChoice {
        profile: Profile::WorkspaceWrite,
        network: true,
        writable: Vec::new(),
        deny_read: Vec::new(),
    })?;
    drop(
        rt.block_on(wired_sb.begin(&lane))
            .map_err(anyhow::Error::msg)?,
    );
    std::thread::sleep(sandbox_racy_wait());
    let mut wired = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let call = rt
            .block_on(wired_sb.begin(&lane))
            .map_err(anyhow::Error::msg)?;
        wired_sb.finish(call).map_err(anyhow::Error::msg)?;
        wired.push(t.elapsed());
    }
    let (wm, w9) = stats(&mut wired);
    let (pm, p9) = stats(&mut plain);
    let (sm, s9) = stats(&mut sandboxed);
    let (rm, r9) = stats(&mut prep);
    let (gm, g9) = stats(&mut check);
    let (cm, c9) = stats(&mut cached);
    println!(
        "| {label} | {} / {} | {} / {} | {} / {} | {} / {} | {} / {} | {} / {} | {} / {} |",
        us(pm),
        us(p9),
        us(rm),
        us(r9),
        us(sm),
        us(s9),
        us(sm.saturating_sub(pm)),
        us(s9.saturating_sub(p9)),
        us(gm),
        us(g9),
        us(wm),
        us(w9),
        us(cm),
        us(c9),
    );
    Ok(())
}

fn sandbox_racy_wait() -> Duration {
    sandbox::RACY_WINDOW + Duration::from_millis(20)
}

fn update_refs(repo: &Path, stdin: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut child = Command::new("git")
        .args(["update-ref", "--stdin"])
        .current_dir(repo)
        .stdin(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdin"))?
        .write_all(stdin.as_bytes())?;
    anyhow::ensure!(child.wait()?.success(), "git update-ref failed");
    Ok(())
}

/// (median, p90).
fn stats(v: &mut [Duration]) -> (Duration, Duration) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.9))
}

/// Microseconds with one decimal.
fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}
