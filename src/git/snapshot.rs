//! The user's working tree as a commit, without touching it: what
//! `orch run --base worktree` starts from, and whether the tree is dirty at
//! all (so a run from `HEAD` can say it leaves the user's edits out).
//!
//! Whether the tree is dirty is asked of the `git` CLI when it is there
//! ([`working_tree_dirt`]): `git status` runs in its own process, so the
//! user's whole index (10 MB of entries at 100,000 files, plus libgit2's
//! iterators) is never held in orch's memory, and it is as fast as the walk
//! or faster. It runs with `--no-optional-locks`, so it never refreshes and
//! rewrites `.git/index` as a plain `git status` would. When git is missing,
//! fails or says something unexpected, libgit2's status walk answers
//! instead, with the same paths (but for a nested repository that holds no
//! file yet, which only git lists). Checked-out submodules are found the
//! same way: gitlinks from `git ls-files`, else libgit2's submodule map.
//!
//! The snapshot's tree is built in an in-memory index ([`git2::Index::new`],
//! never `.git/index`) from `HEAD`'s tree plus every path the status walk
//! reports, read from the working tree: tracked edits, deletions and
//! untracked files, minus ignored ones. The commit object is written without
//! moving any ref; the run's stage branches are what keep it alive.

use super::discover::{RepoInfo, discover};
use super::error::{GitError, git_err, io_err};
use super::open::{open_at, signature};
use super::status::status_walk;
use git2::{Oid, Repository};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The `git status` whose records are [`Dirt::paths`]: what the status walk
/// reports (untracked files one by one, no ignored files, submodules left
/// out), without rename detection (the walk pairs nothing either), and never
/// writing the index (`--no-optional-locks`).
const STATUS_ARGS: &[&str] = &[
    "--no-optional-locks",
    "status",
    "--porcelain=v1",
    "-z",
    "--untracked-files=all",
    "--ignore-submodules=all",
    "--no-renames",
];

/// How long each git command of the check may take. The walk would take as
/// long on the same tree (a hung network file system, say), so a `git
/// status` running out of it is an error, not a reason to fall back.
const STATUS_TIMEOUT: Duration = Duration::from_secs(60);

/// Bytes of `git status`'s stderr kept for the debug log.
const STDERR_KEPT: u64 = 4 * 1024;

/// What differs between the user's working tree and `HEAD`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dirt {
    /// Paths that differ from `HEAD` (staged, modified, deleted, untracked;
    /// not ignored), sorted.
    pub paths: Vec<String>,
    /// Submodules checked out in the user's tree (lanes do not check them out).
    pub submodules: Vec<String>,
}

impl Dirt {
    /// Whether the working tree differs from `HEAD` at all.
    pub fn is_dirty(&self) -> bool {
        !self.paths.is_empty()
    }
}

/// What differs between the working tree of the repository at `workdir` and
/// its `HEAD`, and which submodules are checked out. Reads only: the paths
/// come from `git status` and the submodules from `git ls-files` when the
/// `git` CLI is on `PATH` (nothing of the index is held in this process),
/// else from libgit2.
pub fn working_tree_dirt(workdir: &Path) -> Result<Dirt, GitError> {
    working_tree_dirt_with(&|| Command::new("git"), workdir)
}

/// [`working_tree_dirt`] asking the `git` that `git()` makes (a program and
/// its environment: the tests' hermetic one, or one that is not there).
fn working_tree_dirt_with(git: &dyn Fn() -> Command, workdir: &Path) -> Result<Dirt, GitError> {
    let repo = open_at(workdir)?;
    let paths = match cli_dirt_paths(git(), workdir) {
        Ok(paths) => paths,
        Err(NoAnswer::TimedOut) => {
            return Err(io_err("wait for `git status` in", workdir)(
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {} s", STATUS_TIMEOUT.as_secs()),
                ),
            ));
        }
        Err(NoAnswer::Unusable(why)) => {
            tracing::debug!(
                "the working-tree check uses libgit2's status walk: {why} ({})",
                workdir.display()
            );
            walk_dirt_paths(&repo, workdir)?
        }
    };
    let submodules = cli_checked_out_submodules(git(), workdir).unwrap_or_else(|why| {
        tracing::debug!(
            "the submodule check uses libgit2: {why:?} ({})",
            workdir.display()
        );
        checked_out_submodules(&repo)
    });
    Ok(Dirt { paths, submodules })
}

/// [`super::open_repo`] and the [`working_tree_dirt`] of its working tree,
/// with one open of the repository.
pub fn open_repo_with_dirt(path: &Path) -> Result<(RepoInfo, Dirt), GitError> {
    let (repo, info) = discover(path)?;
    let dirt = dirt_of(&repo, &info.workdir)?;
    Ok((info, dirt))
}

// `--base worktree` keeps the walk here: the snapshot that follows walks the
// status again with libgit2 anyway, so asking git first would only add a
// process.
fn dirt_of(repo: &Repository, workdir: &Path) -> Result<Dirt, GitError> {
    Ok(Dirt {
        paths: walk_dirt_paths(repo, workdir)?,
        submodules: checked_out_submodules(repo),
    })
}

/// [`Dirt::paths`] from libgit2's status walk.
fn walk_dirt_paths(repo: &Repository, workdir: &Path) -> Result<Vec<String>, GitError> {
    let mut paths: Vec<String> = status_walk(repo)
        .map_err(git_err(format!("read the status of {}", workdir.display())))?
        .into_iter()
        .filter(|(_, s)| *s != git2::Status::CURRENT && !s.is_ignored())
        .map(|(p, _)| String::from_utf8_lossy(&p).into_owned())
        .collect();
    paths.sort();
    Ok(paths)
}

/// Why `git status` gave no [`Dirt::paths`].
#[derive(Debug)]
enum NoAnswer {
    /// Missing, failed, or said something that is not status records: the
    /// walk answers instead.
    Unusable(String),
    /// Still running after [`STATUS_TIMEOUT`] (and killed).
    TimedOut,
}

/// [`Dirt::paths`] from `git status` run by `cmd` (a `git` program) in
/// `workdir`, sorted.
fn cli_dirt_paths(cmd: Command, workdir: &Path) -> Result<Vec<String>, NoAnswer> {
    let out = run_git(cmd, STATUS_ARGS, workdir, |pipe| {
        let mut bytes = Vec::new();
        pipe.read_to_end(&mut bytes).map(|_| bytes)
    })?;
    let mut paths = porcelain_paths(&out).ok_or_else(|| {
        NoAnswer::Unusable(format!(
            "`git status` printed something that is not porcelain v1 records: {:?}",
            String::from_utf8_lossy(&out[..out.len().min(200)])
        ))
    })?;
    paths.sort();
    Ok(paths)
}

/// Runs `cmd` (a `git` program) with `args` in `workdir` and returns what
/// `read` makes of its stdout (read on a thread of its own, as it comes).
///
/// The child runs in its own process group (a Ctrl-C meant for orch does not
/// turn into a failed check), with stdin closed and the repository-locating
/// variables removed; it inherits the calling thread's CPU priority. It
/// holds no lock (`--no-optional-locks`), so a
/// timeout kills it at once.
fn run_git<T: Send + 'static>(
    mut cmd: Command,
    args: &[&str],
    workdir: &Path,
    read: impl FnOnce(&mut std::process::ChildStdout) -> std::io::Result<T> + Send + 'static,
) -> Result<T, NoAnswer> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let what = format!("`git {}`", args.join(" "));
    cmd.args(args)
        .current_dir(workdir)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Inherited from orch's caller (a hook, an alias), these would point
    // `git status` at another repository than the one opened at the path.
    for name in super::cli::GIT_LOCAL_ENV {
        cmd.env_remove(name);
    }
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .spawn()
        .map_err(|e| NoAnswer::Unusable(format!("could not run {program}: {e}")))?;
    let stdout = in_thread(child.stdout.take(), read);
    let stderr = in_thread(child.stderr.take(), |pipe| {
        let mut bytes = Vec::new();
        std::io::copy(&mut pipe.take(STDERR_KEPT), &mut bytes).map(|_| bytes)
    });
    let out = match stdout.recv_timeout(STATUS_TIMEOUT) {
        Ok(Ok(out)) => out,
        failed => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(match failed {
                Err(mpsc::RecvTimeoutError::Timeout) => NoAnswer::TimedOut,
                Ok(Err(e)) => NoAnswer::Unusable(format!("could not read {what}: {e}")),
                _ => NoAnswer::Unusable(format!("could not start a reader of {what}")),
            });
        }
    };
    // Its stdout closed, git is exiting.
    let status = child
        .wait()
        .map_err(|e| NoAnswer::Unusable(format!("could not wait for {what}: {e}")))?;
    // Only for the log; a process git started may hold the pipe open.
    let err = match stderr.recv_timeout(crate::exec::DRAIN_TIMEOUT) {
        Ok(Ok(bytes)) => bytes,
        _ => Vec::new(),
    };
    if !status.success() {
        return Err(NoAnswer::Unusable(format!(
            "{what} exited with {status}: {}",
            String::from_utf8_lossy(&err).trim()
        )));
    }
    Ok(out)
}

/// Runs `read` on `pipe` on a thread of its own (so neither pipe of the
/// child can fill up and stall it), then reads the rest of it away.
fn in_thread<R: Read + Send + 'static, T: Send + 'static>(
    pipe: Option<R>,
    read: impl FnOnce(&mut R) -> std::io::Result<T> + Send + 'static,
) -> mpsc::Receiver<std::io::Result<T>> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        let work = move || {
            let got = read(&mut pipe);
            let rest = std::io::copy(&mut pipe, &mut std::io::sink());
            let _ = tx.send(got.and_then(|got| rest.map(|_| got)));
        };
        // A thread that cannot start drops `tx`: the receiver says so.
        let _ = std::thread::Builder::new()
            .name("orch-git-pipe".to_owned())
            .spawn(work);
    }
    rx
}

/// The paths of `git status --porcelain=v1 -z` output (`XY path` records,
/// each ended by a NUL), as the status walk names them: lossy UTF-8, ignored
/// files (`!!`) left out. `None` when the output is not such records, or
/// holds a rename or copy (`--no-renames` asks for none; the walk pairs
/// nothing, so its answer is the one to trust then).
fn porcelain_paths(out: &[u8]) -> Option<Vec<String>> {
    const CODES: &[u8] = b" MTADU?!";
    if out.is_empty() {
        return Some(Vec::new());
    }
    let mut paths = Vec::new();
    for record in out.strip_suffix(&[0])?.split(|b| *b == 0) {
        let [x, y, b' ', path @ ..] = record else {
            return None;
        };
        if path.is_empty() || !CODES.contains(x) || !CODES.contains(y) {
            return None;
        }
        if (x, y) != (&b'!', &b'!') {
            paths.push(String::from_utf8_lossy(path).into_owned());
        }
    }
    Some(paths)
}

/// [`checked_out_submodules`] without libgit2's submodule map, which loads
/// the whole index and walks `HEAD`'s tree into this process even when there
/// is no submodule: the gitlinks of the index come from `git ls-files`, read
/// as they stream (only gitlinks are kept), the rest from `.gitmodules`, as
/// libgit2 lists them. Sorted by path. Unlike libgit2, a gitlink that is in
/// `HEAD` but no longer in the index (and not in `.gitmodules`) is missed.
fn cli_checked_out_submodules(cmd: Command, workdir: &Path) -> Result<Vec<String>, NoAnswer> {
    let args = ["--no-optional-locks", "ls-files", "-z", "--stage"];
    let mut paths = run_git(cmd, &args, workdir, |pipe| {
        let mut links = std::collections::BTreeSet::new();
        let mut reader = std::io::BufReader::new(pipe);
        let mut record = Vec::new();
        while {
            record.clear();
            std::io::BufRead::read_until(&mut reader, 0, &mut record)? > 0
        } {
            // `<mode> <object> <stage>\t<path>\0`
            let entry = record.strip_suffix(&[0]).unwrap_or(&record);
            let tab = entry.iter().position(|b| *b == b'\t');
            let (Some(tab), Some(b' ')) = (tab, entry.get(6)) else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "not `git ls-files --stage` records",
                ));
            };
            if entry.starts_with(b"160000 ") {
                links.insert(String::from_utf8_lossy(&entry[tab + 1..]).into_owned());
            }
        }
        Ok(links)
    })?;
    paths.extend(gitmodules_paths(workdir));
    Ok(paths
        .into_iter()
        .filter(|p| workdir.join(p).join(".git").exists())
        .collect())
}

/// The submodule paths `.gitmodules` names (a submodule without `path` is
/// at its name), as libgit2 reads them.
fn gitmodules_paths(workdir: &Path) -> Vec<String> {
    let file = workdir.join(".gitmodules");
    let Ok(config) = git2::Config::open(&file) else {
        return Vec::new();
    };
    let mut named = std::collections::BTreeMap::new();
    let Ok(mut entries) = config.entries(Some(r"^submodule\.")) else {
        return Vec::new();
    };
    while let Some(Ok(entry)) = entries.next() {
        let (Ok(key), Ok(value)) = (entry.name(), entry.value()) else {
            continue;
        };
        let Some((name, var)) = key
            .strip_prefix("submodule.")
            .and_then(|k| k.rsplit_once('.'))
        else {
            continue;
        };
        let path = named
            .entry(name.to_owned())
            .or_insert_with(|| name.to_owned());
        if var == "path" {
            *path = value.to_owned();
        }
    }
    named.into_values().collect()
}

/// Submodules whose directory holds a checkout (a `.git` file or directory).
fn checked_out_submodules(repo: &Repository) -> Vec<String> {
    let (Ok(subs), Some(workdir)) = (repo.submodules(), repo.workdir()) else {
        return Vec::new();
    };
    subs.iter()
        .filter(|s| workdir.join(s.path()).join(".git").exists())
        .map(|s| s.path().display().to_string())
        .collect()
}

/// Copies the index at `from` to `to` with its mtime: git takes an entry
/// whose mtime is not older than the index file's as "racily clean" and
/// compares its content, so a copy stamped now would let a file rewritten
/// with the same size in the same second as the index pass as unchanged
/// (git's own `racy-git.txt`; seen as a lost edit under load).
fn copy_index(from: &Path, to: &Path) -> Result<(), GitError> {
    std::fs::copy(from, to).map_err(io_err("copy the index", from))?;
    let mtime = std::fs::metadata(from)
        .and_then(|m| m.modified())
        .map_err(io_err("read the mtime of", from))?;
    std::fs::File::options()
        .write(true)
        .open(to)
        .and_then(|f| f.set_modified(mtime))
        .map_err(io_err("set the mtime of", to))
}

/// Writes the working tree of the repository at `workdir` as a commit whose
/// parent is `HEAD`, and returns its SHA: the tree is what `git add -A &&
/// git write-tree` makes of it (tracked files as they are on disk, untracked
/// files that are not ignored, modes, filters and submodule gitlinks as git
/// records them), staged into a temporary copy of the index
/// (`GIT_INDEX_FILE`), so the user's index, refs and files are never
/// written; only new objects land in the store, as any `git add` would.
pub fn snapshot_worktree(workdir: &Path) -> Result<String, GitError> {
    let repo = open_at(workdir)?;
    let root: PathBuf =
        repo.workdir()
            .map(Path::to_path_buf)
            .ok_or_else(|| GitError::BareRepo {
                path: workdir.to_path_buf(),
            })?;
    let head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(|_| GitError::NoCommits {
            path: workdir.to_path_buf(),
        })?;
    // A copy of the user's index keeps its stat data, so git rehashes only
    // what changed; without one, the temporary index starts from `HEAD`.
    let tmp = tempfile::Builder::new()
        .prefix("orch-snapshot-index-")
        .tempdir()
        .map_err(io_err("create a temp dir in", &std::env::temp_dir()))?;
    let index = tmp.path().join("index");
    let users = repo.path().join("index");
    let git = |args: &[&str]| {
        super::cli::git(&root)
            .args(["-c", "core.splitIndex=false"])
            .args(args)
            .env("GIT_INDEX_FILE", &index)
            .run()
    };
    if users.is_file() {
        copy_index(&users, &index)?;
    } else {
        git(&["read-tree", &head.id().to_string()])?;
    }
    git(&["add", "-A"])?;
    let out = git(&["write-tree"])?;
    let tree_id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let tree = Oid::from_str(&tree_id)
        .and_then(|id| repo.find_tree(id))
        .map_err(git_err("read the snapshot tree"))?;
    let sig = signature(&repo)?;
    let id = repo
        .commit(
            None,
            &sig,
            &sig,
            "orch: snapshot of the working tree (uncommitted changes included)",
            &tree,
            &[&head],
        )
        .map_err(git_err("write the snapshot commit"))?;
    Ok(id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::testutil::TestRepo;

    #[test]
    fn a_racily_clean_edit_is_in_the_snapshot_as_git_sees_it() {
        // git's racy-git case, made deterministic: `src/lib.rs` rewritten
        // with the same size and mtime as its index entry, in the second the
        // index was written (`core.trustctime=false`, a user's setting, so
        // the ctime cannot tell). Only the content tells, and git compares
        // it because the entry is not older than the index file — which a
        // copy of the index stamped now hid (a lost edit, seen under load).
        let repo = TestRepo::new();
        repo.git(&["config", "core.trustctime", "false"]);
        let lib = repo.path.join("src/lib.rs");
        let index = repo.git_dir().join("index");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let second = std::time::UNIX_EPOCH + Duration::from_secs(now - 100);
        let stamp = |path: &Path| {
            std::fs::File::options()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(second)
                .unwrap();
        };
        stamp(&lib);
        repo.git(&["update-index", "--refresh"]);
        // Same size, same inode, same mtime; then the index's own second.
        std::fs::write(&lib, "pub fn one() -> u32 {\n    2\n}\n").unwrap();
        stamp(&lib);
        stamp(&index);
        let sha = snapshot_worktree(&repo.path).unwrap();
        // The oracle: git itself (no optional locks: it writes no index).
        let status = repo.git(&["--no-optional-locks", "status", "--porcelain"]);
        assert_eq!(status, " M src/lib.rs\n", "git sees the edit");
        let snapped = repo.git(&["show", &format!("{sha}:src/lib.rs")]);
        assert!(snapped.contains("    2"), "{snapped}");
    }

    #[test]
    fn a_snapshot_holds_edits_and_untracked_files_and_leaves_the_index_alone() {
        let repo = TestRepo::new();
        repo.write("src/lib.rs", "pub fn one() -> u32 {\n    2\n}\n");
        repo.write("notes.txt", "new file\n");
        repo.write(".gitignore", "*.log\n");
        repo.write("debug.log", "ignored\n");
        let before = repo.snapshot();
        let dirt = working_tree_dirt(&repo.path).unwrap();
        assert!(dirt.is_dirty());
        assert!(dirt.paths.contains(&"notes.txt".to_owned()), "{dirt:?}");
        let sha = snapshot_worktree(&repo.path).unwrap();
        assert_eq!(repo.snapshot(), before, "the user's repo is unchanged");
        let show = |p: &str| repo.git(&["show", &format!("{sha}:{p}")]);
        assert!(show("src/lib.rs").contains("    2"));
        assert_eq!(show("notes.txt"), "new file\n");
        let files = repo.git(&["ls-tree", "-r", "--name-only", &sha]);
        assert!(!files.contains("debug.log"), "{files}");
        assert_eq!(
            repo.git(&["rev-parse", &format!("{sha}^")]),
            repo.git(&["rev-parse", "HEAD"])
        );
    }

    #[test]
    fn a_checked_out_submodule_is_found() {
        let sub = TestRepo::new();
        let repo = TestRepo::new();
        let url = sub.path.display().to_string();
        repo.git(&[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            &url,
            "vendor/sub",
        ]);
        repo.git(&["commit", "-q", "-m", "add a submodule"]);
        let dirt = working_tree_dirt(&repo.path).unwrap();
        assert_eq!(dirt.submodules, ["vendor/sub"]);
        assert!(!dirt.is_dirty(), "{dirt:?}");
    }

    /// The git CLI with the test repository's hermetic config, and without
    /// the `GIT_OPTIONAL_LOCKS=0` the test helpers set: the check itself
    /// must ask for that.
    fn hermetic_git(repo: &TestRepo) -> Command {
        let mut cmd = repo.git_cmd(&repo.path, &[]);
        cmd.env_remove("GIT_OPTIONAL_LOCKS");
        cmd
    }

    /// Every kind of change the check reports, and some it must not.
    fn dirty_repo() -> TestRepo {
        let repo = TestRepo::new();
        repo.write("dir with space/a b.txt", "one\n");
        repo.write("tracked-then-removed.txt", "soon gone\n");
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-q", "-m", "more"]);
        repo.write("staged.txt", "staged\n");
        repo.write("日本.txt", "staged, non-ASCII\n");
        repo.write("README.md", "# staged edit\n");
        repo.git(&["add", "staged.txt", "日本.txt", "README.md"]);
        repo.write("README.md", "# staged edit, then edited again\n");
        repo.write("added-then-deleted.txt", "x\n");
        repo.git(&["add", "added-then-deleted.txt"]);
        std::fs::remove_file(repo.path.join("added-then-deleted.txt")).unwrap();
        repo.write("src/lib.rs", "pub fn one() -> u32 {\n    2\n}\n");
        repo.write("dir with space/a b.txt", "two\n");
        std::fs::remove_file(repo.path.join("src/old.rs")).unwrap();
        repo.git(&["rm", "-q", "tracked-then-removed.txt"]);
        repo.write("new/deep/er/file.txt", "untracked, nested\n");
        repo.write("héllo wörld.txt", "untracked, space and non-ASCII\n");
        repo.write("debug.log", "ignored\n");
        repo.write("target/out.bin", "ignored dir\n");
        repo.write("new/deep/trace.log", "ignored, nested\n");
        std::fs::create_dir_all(repo.path.join("vendor/inner")).unwrap();
        repo.git_in(&repo.path.join("vendor/inner"), &["init", "-q"]);
        repo.write("vendor/inner/lib.c", "nested repository\n");
        std::fs::create_dir_all(repo.path.join("empty/dir")).unwrap();
        repo
    }

    const DIRTY_PATHS: &[&str] = &[
        "README.md",
        "added-then-deleted.txt",
        "dir with space/a b.txt",
        "héllo wörld.txt",
        "new/deep/er/file.txt",
        "src/lib.rs",
        "src/old.rs",
        "staged.txt",
        "tracked-then-removed.txt",
        "vendor/inner/",
        "日本.txt",
    ];

    #[test]
    fn the_git_cli_finds_exactly_the_paths_of_the_status_walk() {
        let repo = dirty_repo();
        let cli = cli_dirt_paths(hermetic_git(&repo), &repo.path).unwrap();
        let walk = walk_dirt_paths(&open_at(&repo.path).unwrap(), &repo.path).unwrap();
        assert_eq!(cli, walk);
        assert_eq!(cli, DIRTY_PATHS);
        let dirt = working_tree_dirt_with(&|| hermetic_git(&repo), &repo.path).unwrap();
        assert_eq!(dirt.paths, DIRTY_PATHS);
    }

    #[cfg(unix)]
    #[test]
    fn a_file_turned_symlink_is_dirty_to_both() {
        let repo = TestRepo::new();
        std::fs::remove_file(repo.path.join("README.md")).unwrap();
        std::os::unix::fs::symlink("src/lib.rs", repo.path.join("README.md")).unwrap();
        let cli = cli_dirt_paths(hermetic_git(&repo), &repo.path).unwrap();
        let walk = walk_dirt_paths(&open_at(&repo.path).unwrap(), &repo.path).unwrap();
        assert_eq!(cli, ["README.md"]);
        assert_eq!(cli, walk);
    }

    #[test]
    fn the_check_never_rewrites_the_index_even_when_git_status_would() {
        let repo = TestRepo::new();
        // Same content, older mtime: the index's stat data is stale, which a
        // plain `git status` refreshes by rewriting `.git/index`.
        let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        for rel in ["README.md", "src/lib.rs"] {
            std::fs::File::options()
                .write(true)
                .open(repo.path.join(rel))
                .unwrap()
                .set_modified(hour_ago)
                .unwrap();
        }
        let index = repo.git_dir().join("index");
        let read = || {
            let mtime = std::fs::metadata(&index).unwrap().modified().unwrap();
            (std::fs::read(&index).unwrap(), mtime)
        };
        let before = read();
        let dirt = working_tree_dirt_with(&|| hermetic_git(&repo), &repo.path).unwrap();
        assert!(!dirt.is_dirty(), "{dirt:?}");
        assert!(read() == before, "the check rewrote .git/index");
        // The control: the same tree makes a plain `git status` write it.
        let st = hermetic_git(&repo).arg("status").output().unwrap();
        assert!(st.status.success());
        assert!(read() != before, "plain git status left the index alone");
    }

    #[test]
    fn without_a_usable_git_the_walk_gives_the_same_answer() {
        let repo = dirty_repo();
        let cli = working_tree_dirt_with(&|| hermetic_git(&repo), &repo.path).unwrap();
        assert_eq!(cli.paths, DIRTY_PATHS);
        let scratch = tempfile::tempdir().unwrap();
        let missing = scratch.path().join("no-such-git");
        for (program, why) in [
            (missing.as_os_str(), "missing"),
            ("false".as_ref(), "exits 1"),
            ("echo".as_ref(), "prints its arguments"),
        ] {
            let git = || Command::new(program);
            assert!(
                matches!(
                    cli_dirt_paths(git(), &repo.path),
                    Err(NoAnswer::Unusable(_))
                ),
                "{why}"
            );
            assert_eq!(
                working_tree_dirt_with(&git, &repo.path).unwrap(),
                cli,
                "{why}"
            );
        }
    }

    /// The one difference known: a nested repository with no file at all
    /// (just `git init`) is untracked to git and nothing to libgit2.
    #[test]
    fn an_empty_nested_repository_is_untracked_to_git_only() {
        let repo = TestRepo::new();
        std::fs::create_dir_all(repo.path.join("fresh")).unwrap();
        repo.git_in(&repo.path.join("fresh"), &["init", "-q"]);
        let cli = cli_dirt_paths(hermetic_git(&repo), &repo.path).unwrap();
        let walk = walk_dirt_paths(&open_at(&repo.path).unwrap(), &repo.path).unwrap();
        assert_eq!(cli, ["fresh/"]);
        assert!(walk.is_empty(), "{walk:?}");
    }

    #[test]
    fn git_finds_the_checked_out_submodules_libgit2_finds() {
        let sub = TestRepo::new();
        let repo = TestRepo::new();
        let url = sub.path.display().to_string();
        for path in ["vendor/sub", "vendor/gone", "other path/sub"] {
            repo.git(&[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "add",
                "-q",
                &url,
                path,
            ]);
        }
        // A gitlink without a `.gitmodules` entry: an embedded repository.
        std::fs::create_dir_all(repo.path.join("embedded")).unwrap();
        repo.git_in(&repo.path.join("embedded"), &["init", "-q"]);
        repo.write("embedded/a.txt", "a\n");
        repo.git_in(&repo.path.join("embedded"), &["add", "a.txt"]);
        repo.git_in(
            &repo.path.join("embedded"),
            &[
                "-c",
                "user.name=T",
                "-c",
                "user.email=t@e",
                "commit",
                "-qm",
                "a",
            ],
        );
        repo.git(&["add", "embedded"]);
        repo.git(&["commit", "-q", "-m", "submodules"]);
        // Not checked out any more: an empty directory.
        repo.git(&["submodule", "deinit", "-q", "-f", "vendor/gone"]);
        let cli = cli_checked_out_submodules(hermetic_git(&repo), &repo.path).unwrap();
        let mut libgit2 = checked_out_submodules(&open_at(&repo.path).unwrap());
        libgit2.sort();
        assert_eq!(cli, ["embedded", "other path/sub", "vendor/sub"]);
        assert_eq!(cli, libgit2);
        let dirt = working_tree_dirt_with(&|| hermetic_git(&repo), &repo.path).unwrap();
        assert_eq!(dirt.submodules, cli);
        assert!(!dirt.is_dirty(), "{dirt:?}");
        let without = working_tree_dirt_with(&|| Command::new("false"), &repo.path).unwrap();
        assert_eq!(without.submodules.len(), 3, "{without:?}");
    }

    #[test]
    fn porcelain_records_are_read_strictly() {
        let paths = |out: &[u8]| porcelain_paths(out);
        assert_eq!(paths(b""), Some(vec![]));
        assert_eq!(
            paths(b"?? a b\0 M c\0!! d.log\0UU e\0AD f\0"),
            Some(["a b", "c", "e", "f"].map(String::from).to_vec())
        );
        assert_eq!(paths(b"?? a"), None, "no NUL at the end");
        assert_eq!(paths(b"R  new\0old\0"), None, "a rename");
        assert_eq!(paths(b"## main\0?? a\0"), None, "a branch header");
        assert_eq!(paths(b"?? a\0\0"), None, "an empty record");
        assert_eq!(paths(b"?? \0"), None, "an empty path");
    }

    #[test]
    fn a_clean_tree_is_not_dirty() {
        let repo = TestRepo::new();
        assert!(!working_tree_dirt(&repo.path).unwrap().is_dirty());
    }
}
