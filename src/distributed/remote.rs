//! The remote round trips of a distributed run, done with the `git` CLI:
//! it speaks every transport a user's remote may need (ssh, https with the
//! user's credential helper, file), which orch's libgit2 build does not
//! (it is built without transports, see `docs/distributed.md`).
//!
//! The claim is a compare-and-swap on the remote: `git push
//! --force-with-lease=<ref>:<expected>` sends `<expected>` as the old value
//! of the ref update, and the receiving end applies the update only if the
//! ref still has that value (atomically, under its ref lock); with
//! `--atomic`, every ref of one push moves or none does. A lease that no
//! longer holds is told apart from other failures by `--porcelain` output.

use super::DistError;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a push ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// Every ref moved.
    Done,
    /// The remote ref no longer had the expected value (someone else
    /// wrote it since we read it): nothing moved.
    Stale,
}

/// `git --git-dir <common> …`, with stdin closed and no terminal prompt.
fn git(common: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("--git-dir")
        .arg(common)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null());
    cmd
}

fn run(mut cmd: Command, op: &str, url: &str) -> Result<std::process::Output, DistError> {
    cmd.output().map_err(|e| DistError::Remote {
        op: op.to_owned(),
        url: url.to_owned(),
        detail: format!("run git: {e}"),
    })
}

/// Fetches `refspecs` from `url` into the repository at `common` (one round
/// trip); returns how long it took.
pub(crate) fn fetch(common: &Path, url: &str, refspecs: &[String]) -> Result<Duration, DistError> {
    let started = Instant::now();
    let mut cmd = git(common);
    cmd.args([
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        url,
    ])
    .args(refspecs);
    let out = run(cmd, "fetch", url)?;
    if !out.status.success() {
        return Err(DistError::Remote {
            op: format!("fetch {}", refspecs.join(" ")),
            url: url.to_owned(),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(started.elapsed())
}

/// Pushes `refspecs` to `url` atomically, on the condition that the remote
/// ref `lease.0` still points at `lease.1` (`None`: that it does not exist).
pub(crate) fn push_with_lease(
    common: &Path,
    url: &str,
    lease: (&str, Option<&str>),
    refspecs: &[String],
) -> Result<(Pushed, Duration), DistError> {
    let started = Instant::now();
    let mut cmd = git(common);
    cmd.args(["push", "--porcelain", "--atomic", "--quiet"])
        .arg(format!(
            "--force-with-lease={}:{}",
            lease.0,
            lease.1.unwrap_or("")
        ))
        .arg(url)
        .args(refspecs);
    let out = run(cmd, "push", url)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.success() {
        return Ok((Pushed::Done, started.elapsed()));
    }
    // A lease that failed on our side: `!\t<src>:<dst>\t[rejected] (stale
    // info)`; on the receiving side (someone moved the ref between our
    // check and its lock): `[remote rejected]` with "cannot lock ref …: is
    // at X but expected Y". With --atomic the other refs say `(atomic push
    // failed)`. Both mean: another writer won; fetch and decide again.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stale = stdout.lines().any(|l| {
        l.starts_with('!')
            && [
                "stale info",
                "fetch first",
                "non-fast-forward",
                "already exists",
            ]
            .iter()
            .any(|m| l.contains(m))
    }) || stderr.contains("cannot lock ref");
    if stale {
        return Ok((Pushed::Stale, started.elapsed()));
    }
    Err(DistError::Remote {
        op: format!("push {}", refspecs.join(" ")),
        url: url.to_owned(),
        detail: format!("{} {}", stdout.trim(), stderr.trim())
            .trim()
            .to_owned(),
    })
}
