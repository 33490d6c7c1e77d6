//! Hermetic git repositories for the git layer's tests: a temp `HOME`, no
//! system or global config (for the `git` CLI and for libgit2), fixed dates.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use tempfile::TempDir;

const FIXED_DATE: &str = "2024-01-02T03:04:05Z";

/// Points libgit2's global, XDG and system config search paths at an empty
/// directory, so the machine's `~/.gitconfig` cannot leak into a test.
pub(crate) fn hermetic_libgit2() {
    static EMPTY: OnceLock<TempDir> = OnceLock::new();
    EMPTY.get_or_init(|| {
        let dir = TempDir::new().expect("temp dir for empty git config");
        for level in [
            git2::ConfigLevel::Global,
            git2::ConfigLevel::XDG,
            git2::ConfigLevel::System,
        ] {
            // SAFETY: runs once, inside `get_or_init`, before this test binary's
            // git tests open any repository; libgit2 options are process-global.
            unsafe { git2::opts::set_search_path(level, dir.path()) }
                .expect("set libgit2 config search path");
        }
        dir
    });
}

/// A scratch area holding a hermetic `HOME` and one repository.
pub(crate) struct TestRepo {
    /// Deleted with the value.
    _root: TempDir,
    /// Top of the repository's working tree.
    pub path: PathBuf,
}

impl TestRepo {
    /// An initialised repository on `main` with no commits and a local identity.
    pub(crate) fn empty() -> Self {
        hermetic_libgit2();
        let root = TempDir::new().expect("temp dir");
        // Canonical, so paths compare equal to what libgit2 reports.
        let root_path = fs::canonicalize(root.path()).expect("canonical temp dir");
        fs::create_dir_all(root_path.join("home")).expect("home");
        let path = root_path.join("repo");
        fs::create_dir_all(&path).expect("repo dir");
        let repo = TestRepo { _root: root, path };
        repo.git(&["init", "-q", "-b", "main"]);
        repo.git(&["config", "user.name", "Test User"]);
        repo.git(&["config", "user.email", "test@example.com"]);
        repo
    }

    /// A repository with one commit of a few files and a `.gitignore`.
    pub(crate) fn new() -> Self {
        let repo = Self::empty();
        repo.write("README.md", "# demo\n");
        repo.write("src/lib.rs", "pub fn one() -> u32 {\n    1\n}\n");
        repo.write("src/old.rs", "// to be deleted\n");
        repo.write(".gitignore", "target/\n*.log\n");
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-q", "-m", "initial"]);
        repo
    }

    fn home(&self) -> PathBuf {
        self.path.parent().expect("root").join("home")
    }

    /// The repository's `.git` directory.
    pub(crate) fn git_dir(&self) -> PathBuf {
        self.path.join(".git")
    }

    pub(crate) fn write(&self, rel: &str, content: &str) {
        write_file(&self.path.join(rel), content);
    }

    /// Runs `git` in the repository; panics with its stderr on failure.
    pub(crate) fn git(&self, args: &[&str]) -> String {
        self.git_in(&self.path, args)
    }

    /// Runs `git` in `dir` with this repository's hermetic environment.
    pub(crate) fn git_in(&self, dir: &Path, args: &[&str]) -> String {
        let out = self.git_cmd(dir, args).output().expect("run git");
        assert!(
            out.status.success(),
            "git {args:?} in {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub(crate) fn git_cmd(&self, dir: &Path, args: &[&str]) -> Command {
        let home = self.home();
        let mut cmd = Command::new("git");
        cmd.current_dir(dir)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", home.join(".gitconfig"))
            .env("GIT_AUTHOR_DATE", FIXED_DATE)
            .env("GIT_COMMITTER_DATE", FIXED_DATE)
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("LC_ALL", "C");
        cmd
    }

    /// Full sha of a revision, per the `git` CLI.
    pub(crate) fn rev_in(&self, dir: &Path, rev: &str) -> crate::git::CommitId {
        let sha = self.git_in(dir, &["rev-parse", rev]);
        crate::git::CommitId::parse(sha.trim()).expect("git rev-parse gives a full sha")
    }

    pub(crate) fn rev(&self, rev: &str) -> crate::git::CommitId {
        self.rev_in(&self.path, rev)
    }

    /// Everything of the user's repository that orch must never change.
    pub(crate) fn snapshot(&self) -> Snapshot {
        // Read the index before anything else runs git in the repository.
        let index = fs::read(self.git_dir().join("index")).unwrap_or_default();
        let head = fs::read(self.git_dir().join("HEAD")).expect("HEAD");
        let mut files = BTreeMap::new();
        collect_files(&self.path, &self.path, &mut files);
        let status = self.git(&["status", "--porcelain", "--untracked-files=all"]);
        let head_sha = self.rev("HEAD");
        Snapshot {
            head,
            head_sha,
            index,
            files,
            status,
        }
    }

    /// The scratch directory holding the repository (canonical), for
    /// worktrees and other repositories beside it.
    pub(crate) fn root(&self) -> &Path {
        self.path.parent().expect("repo has a parent")
    }
}

/// The user-visible state of a repository, compared byte for byte.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Snapshot {
    head: Vec<u8>,
    head_sha: crate::git::CommitId,
    index: Vec<u8>,
    files: BTreeMap<PathBuf, Vec<u8>>,
    status: String,
}

fn collect_files(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
    for entry in fs::read_dir(dir).expect("read dir") {
        let entry = entry.expect("dir entry");
        let path = entry.path();
        let rel = path.strip_prefix(root).expect("under root").to_path_buf();
        if rel == Path::new(".git") {
            continue;
        }
        let kind = entry.file_type().expect("file type");
        if kind.is_dir() {
            out.insert(rel.join(""), Vec::new());
            collect_files(root, &path, out);
        } else {
            out.insert(rel, fs::read(&path).expect("read file"));
        }
    }
}

pub(crate) fn write_file(path: &Path, content: &str) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).expect("create parent");
    }
    fs::write(path, content).expect("write file");
}
