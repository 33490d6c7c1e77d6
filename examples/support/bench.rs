//! Helpers shared by the benchmark examples (included with `#[path]`): where
//! the `orch` binary is, and a committed repository to run it on.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `orch` binary of the same profile as this example
/// (`target/<profile>/orch`; build it first).
pub fn orch_next_to_example() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    dir.join("orch")
}

/// Runs `git` in `dir` with a fixed identity; panics if it fails.
pub fn git(dir: &Path, args: &[&str]) {
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

/// `git init` on `main` and one commit of everything already in `dir`.
pub fn commit_all_as_base(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "base"]);
}
