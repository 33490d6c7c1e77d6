//! A throwaway git repository with a hermetic git environment.
//!
//! Every `git` run here clears the environment and keeps only `PATH`, with
//! `HOME` pointing at a private empty directory, `GIT_CONFIG_NOSYSTEM=1`, a
//! fixed author/committer date and the identity in the repository's own
//! config — so commit SHAs are reproducible and nothing from the machine's or
//! the developer's git config leaks in. The repository lives in `dir/repo`,
//! the private `HOME` in `dir/home`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The fixed date of every commit made through [`TestRepo`] (2024-01-01 UTC).
pub const GIT_DATE: &str = "1704067200 +0000";

/// A temporary git repository on branch `main`.
pub struct TestRepo {
    /// Owns the directory; removed on drop.
    pub dir: tempfile::TempDir,
    /// The work tree (canonical path).
    pub path: PathBuf,
    home: PathBuf,
}

impl TestRepo {
    /// `git init -b main` in a fresh temp dir, with a test identity configured.
    pub fn new() -> TestRepo {
        let dir = tempfile::Builder::new()
            .prefix("orch-repo-")
            .tempdir()
            .expect("create temp dir");
        let root = dir.path().canonicalize().expect("canonical temp dir");
        let path = root.join("repo");
        let home = root.join("home");
        std::fs::create_dir_all(&path).expect("create repo dir");
        std::fs::create_dir_all(&home).expect("create home dir");
        let repo = TestRepo { dir, path, home };
        repo.git(&["init", "-q", "-b", "main"]);
        for (key, value) in [
            ("user.name", "Orch Test"),
            ("user.email", "orch-test@example.invalid"),
            ("commit.gpgsign", "false"),
            ("core.autocrlf", "false"),
        ] {
            repo.git(&["config", key, value]);
        }
        repo
    }

    /// A new repository with `files` (path, content) written and committed as `msg`.
    pub fn with_commit(files: &[(&str, &str)], msg: &str) -> TestRepo {
        let repo = TestRepo::new();
        for (path, content) in files {
            repo.write(path, content);
        }
        repo.commit_all(msg);
        repo
    }

    /// A `git` command in the repo with the hermetic environment, for callers
    /// that need the exit status or stderr themselves.
    pub fn git_command(&self) -> Command {
        let mut cmd = Command::new("git");
        cmd.current_dir(&self.path).env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        cmd.env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_DATE", GIT_DATE)
            .env("GIT_COMMITTER_DATE", GIT_DATE)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("LC_ALL", "C")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `git args…` and returns stdout; panics with stderr on failure.
    pub fn git(&self, args: &[&str]) -> String {
        let out = self.git_command().args(args).output().expect("run git");
        assert!(
            out.status.success(),
            "git {} failed ({}):\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `git worktree list` without the repository's pooled lanes
    /// (`.git/orch/pool/lane-N`), which outlive runs by design: the user's
    /// worktrees and any lane a run left behind.
    pub fn worktrees_but_pool(&self) -> String {
        self.git(&["worktree", "list", "--porcelain"])
            .split("\n\n")
            .filter(|block| !block.is_empty() && !block.contains("/.git/orch/pool/lane-"))
            .filter_map(|block| block.lines().next())
            .map(|line| format!("{line}\n"))
            .collect()
    }

    /// Writes `content` to `rel` (creating parent directories).
    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) {
        let file = self.path.join(rel);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).expect("create parent dirs");
        }
        std::fs::write(&file, content).expect("write file");
    }

    /// Reads `rel` as text.
    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path.join(rel)).expect("read file")
    }

    /// `git add -A && git commit` (empty commits allowed); returns the new HEAD SHA.
    pub fn commit_all(&self, msg: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "--no-verify", "-m", msg]);
        self.git(&["rev-parse", "HEAD"]).trim().to_owned()
    }

    /// Everything a user would notice if it changed: HEAD, status, the index
    /// bytes and every file outside `.git`.
    pub fn snapshot(&self) -> RepoSnapshot {
        // Read the index before running `git status`, and run status without
        // optional locks, so taking a snapshot never rewrites the index.
        let index = std::fs::read(self.path.join(".git/index")).unwrap_or_default();
        let quiet = |args: &[&str]| {
            let out = self.git_command().args(args).output().expect("run git");
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        };
        let head_ref =
            quiet(&["symbolic-ref", "-q", "HEAD"]).unwrap_or_else(|| "(detached)".to_owned());
        let head_sha = quiet(&["rev-parse", "-q", "--verify", "HEAD"]).unwrap_or_default();
        let status = self.git(&["--no-optional-locks", "status", "--porcelain=v1", "-uall"]);
        let mut files = BTreeMap::new();
        collect_files(&self.path, &self.path, &mut files);
        RepoSnapshot {
            head_ref,
            head_sha,
            status,
            index,
            files,
        }
    }
}

impl Default for TestRepo {
    fn default() -> Self {
        TestRepo::new()
    }
}

fn collect_files(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(Result::ok)
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if entry.file_name() == ".git" {
            continue;
        }
        let path = entry.path();
        let rel = path
            .strip_prefix(root)
            .expect("under root")
            .to_string_lossy()
            .replace('\\', "/");
        let kind = entry.file_type().expect("file type");
        if kind.is_symlink() {
            let target = std::fs::read_link(&path).expect("read link");
            out.insert(rel, format!("symlink -> {}", target.display()).into_bytes());
        } else if kind.is_dir() {
            collect_files(root, &path, out);
        } else {
            out.insert(rel, std::fs::read(&path).expect("read file"));
        }
    }
}

/// The user-visible state of a [`TestRepo`] at one moment.
#[derive(Clone, PartialEq, Eq)]
pub struct RepoSnapshot {
    /// `refs/heads/main`, or `(detached)`.
    pub head_ref: String,
    /// HEAD's commit, `""` before the first commit.
    pub head_sha: String,
    /// `git status --porcelain=v1 -uall`.
    pub status: String,
    /// Raw bytes of `.git/index`.
    pub index: Vec<u8>,
    /// Every file outside `.git` (relative path → bytes; symlinks as `symlink -> target`).
    pub files: BTreeMap<String, Vec<u8>>,
}

impl RepoSnapshot {
    /// What differs between `self` and `later`, one line each.
    pub fn differences(&self, later: &RepoSnapshot) -> Vec<String> {
        let mut out = Vec::new();
        if self.head_ref != later.head_ref {
            out.push(format!("HEAD ref: {} -> {}", self.head_ref, later.head_ref));
        }
        if self.head_sha != later.head_sha {
            out.push(format!("HEAD sha: {} -> {}", self.head_sha, later.head_sha));
        }
        if self.status != later.status {
            out.push(format!("status:\n{}-> \n{}", self.status, later.status));
        }
        if self.index != later.index {
            out.push(format!(
                "index bytes changed ({} -> {} bytes)",
                self.index.len(),
                later.index.len()
            ));
        }
        for (path, bytes) in &self.files {
            match later.files.get(path) {
                None => out.push(format!("file removed: {path}")),
                Some(after) if after != bytes => out.push(format!("file changed: {path}")),
                Some(_) => {}
            }
        }
        for path in later.files.keys().filter(|p| !self.files.contains_key(*p)) {
            out.push(format!("file added: {path}"));
        }
        out
    }

    /// Panics, listing the differences, unless `later` equals `self`.
    pub fn assert_unchanged(&self, later: &RepoSnapshot) {
        let diffs = self.differences(later);
        assert!(
            diffs.is_empty(),
            "the user's repository changed:\n{}",
            diffs.join("\n")
        );
    }
}

impl fmt::Debug for RepoSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let files: BTreeMap<&str, usize> = self
            .files
            .iter()
            .map(|(p, b)| (p.as_str(), b.len()))
            .collect();
        f.debug_struct("RepoSnapshot")
            .field("head_ref", &self.head_ref)
            .field("head_sha", &self.head_sha)
            .field("status", &self.status)
            .field("index_len", &self.index.len())
            .field("files", &files)
            .finish()
    }
}
