//! Creating, moving, resetting and removing orch's linked worktrees.
//!
//! git checks every lane out (`git worktree add`, `git reset --hard`,
//! `git checkout -f --detach`, `git clean`), so a lane holds what git makes
//! of its commit: filters, encodings, sparse patterns and gitlinks
//! included (docs/git-compatibility.md). libgit2 only reads and prunes
//! worktree admin entries.

use std::fs;
use std::path::{Path, PathBuf};

use git2::ErrorCode;

use super::cli::git;
use super::error::{GitError, git_err, io_err};
use super::open::open_linked_worktree;
use super::repo::{CommitId, Repo};

impl Repo {
    /// Creates a linked worktree named `name` at `path`, its `HEAD` detached at
    /// `base_sha`, checked out by git (`git worktree add --detach`).
    ///
    /// Fails early when `path` exists or the name is taken; creates the parent
    /// directories of `path`. On failure nothing it created is left behind, so a
    /// later call with the same arguments can succeed.
    pub fn create_worktree(
        &self,
        name: &str,
        path: &Path,
        base_sha: &CommitId,
    ) -> Result<(), GitError> {
        let common_dir = self.common_dir();
        if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\']) {
            return Err(GitError::InvalidWorktreeName {
                name: name.to_string(),
            });
        }
        let path = std::path::absolute(path).map_err(io_err("resolve the worktree path", path))?;
        if fs::symlink_metadata(&path).is_ok() {
            return Err(GitError::PathExists { path });
        }
        let admin = common_dir.join("worktrees").join(name);
        let result = (|| {
            {
                // libgit2 (orch's ref writes, other runs' prunes) must never see
                // an admin dir half-made, nor one under git's own name before it
                // is renamed to orch's.
                let _admin = self.admin_lock(true)?;
                if fs::symlink_metadata(&admin).is_ok() {
                    return Err(GitError::WorktreeNameTaken {
                        name: name.to_string(),
                        admin: admin.clone(),
                    });
                }
                if let Some(parent) = path.parent() {
                    fs::create_dir_all(parent).map_err(io_err("create the directory", parent))?;
                }
                self.forget_missing_registration(&path)?;
                git(common_dir)
                    .args(["worktree", "add", "--no-checkout", "--detach", "-q"])
                    .arg(&path)
                    .arg(base_sha)
                    .run()?;
                crate::killpoint::reached("lane-branch-created");
                self.name_admin_dir(&path, name)?;
                self.attach_shadow(&admin, name)?;
            }
            // What `git worktree add` runs to check the files out, outside the
            // lock so parallel lanes check out at the same time.
            git(&path)
                .args(["reset", "--hard", "-q", "--no-recurse-submodules"])
                .run()?;
            crate::killpoint::reached("worktree-added");
            Ok(())
        })();
        if result.is_err() {
            let _admin = self.admin_lock(true);
            undo_create(&admin, &path);
            let _ = self.remove_shadow(name);
        }
        result
    }

    /// Removes an admin dir that registers the (missing) worktree `path`: a
    /// kill between `git worktree add` and the rename to orch's name leaves one
    /// under git's name, and git then refuses to add `path` again ("missing but
    /// already registered"). Only entries naming exactly `path` are touched:
    /// orch's own lane directories.
    fn forget_missing_registration(&self, path: &Path) -> Result<(), GitError> {
        let common_dir = self.common_dir();
        let want = path.join(".git");
        for entry in fs::read_dir(common_dir.join("worktrees"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let gitdir = fs::read_to_string(entry.path().join("gitdir")).unwrap_or_default();
            if Path::new(gitdir.trim_end()) == want {
                let admin = entry.path();
                fs::remove_dir_all(&admin)
                    .map_err(io_err("remove the stale worktree admin directory", &admin))?;
            }
        }
        Ok(())
    }

    /// Renames the admin dir git made for the worktree at `path` (named after
    /// the path's last component, made unique) to `name`, orch's name for it:
    /// the admin dir is moved and the worktree's `.git` file rewritten.
    fn name_admin_dir(&self, path: &Path, name: &str) -> Result<(), GitError> {
        let common_dir = self.common_dir();
        let dot_git = path.join(".git");
        let text = fs::read_to_string(&dot_git).map_err(io_err("read", &dot_git))?;
        let made = PathBuf::from(text.trim_end().strip_prefix("gitdir: ").ok_or_else(|| {
            GitError::Cli {
                command: format!("read {}", dot_git.display()),
                detail: "git wrote no `gitdir: ` line".into(),
            }
        })?);
        let wanted = common_dir.join("worktrees").join(name);
        if made.file_name() == wanted.file_name() {
            return Ok(());
        }
        fs::rename(&made, &wanted).map_err(io_err("rename the worktree admin directory", &made))?;
        let absolute = std::path::absolute(&wanted).unwrap_or(wanted);
        let tmp = dot_git.with_extension("orch-tmp");
        fs::write(&tmp, format!("gitdir: {}\n", absolute.display()))
            .map_err(io_err("write", &tmp))?;
        fs::rename(&tmp, &dot_git).map_err(io_err("replace", &dot_git))
    }
}

/// Removes what a failed [`Repo::create_worktree`] made: the admin dir (under
/// either name) and the worktree directory.
fn undo_create(admin: &Path, path: &Path) {
    if let Ok(text) = fs::read_to_string(path.join(".git"))
        && let Some(made) = text.trim_end().strip_prefix("gitdir: ")
        && Path::new(made).parent() == admin.parent()
    {
        let _ = fs::remove_dir_all(made);
    }
    let _ = fs::remove_dir_all(admin);
    let _ = fs::remove_dir_all(path);
}

/// Resets orch's linked worktree at `worktree` to `sha`, detached: tracked
/// files as git checks them out, untracked files that are not ignored
/// removed (nested repositories too), as `git checkout -f --detach <sha> &&
/// git clean -ffd` would. Ignored files (build output, caches) are kept.
///
/// Used to discard a stage's changes and to restart an interrupted stage
/// from its start commit.
pub fn reset_worktree(worktree: &Path, sha: &CommitId) -> Result<(), GitError> {
    checkout_detached(worktree, sha, &[])?;
    git(worktree).args(["clean", "-ffdq"]).run().map(drop)
}

/// `git checkout -f --detach <sha>` (no submodule recursion) in orch's
/// linked worktree at `worktree`, with `config` (`-c` pairs) for it only.
fn checkout_detached(worktree: &Path, sha: &CommitId, config: &[&str]) -> Result<(), GitError> {
    drop(open_linked_worktree(worktree)?);
    git(worktree)
        .args(config.iter().flat_map(|c| ["-c", c]))
        .args([
            "checkout",
            "-f",
            "-q",
            "--no-recurse-submodules",
            "--detach",
            sha,
        ])
        .run()
        .map(drop)
}

/// Moves orch's linked worktree at `worktree` (a pooled lane, whatever
/// state its last user left it in) to `sha`, detached and exactly as a fresh
/// `git worktree add --detach <sha>` checks it out:
///
/// - `git checkout -f --detach <sha>`: only what differs is rewritten, local
///   changes are discarded. With `core.fileMode=true` for this checkout
///   only: where the repository ignores the executable bit, a bit the last
///   user flipped would otherwise survive (a fresh checkout writes the
///   tree's mode).
/// - `git clean -ffdx`: untracked and ignored files and nested repositories
///   go; nothing of the previous user leaks.
/// - every gitlink's directory is emptied: `clean` leaves what is inside a
///   submodule's path, a fresh checkout leaves it empty.
pub fn move_worktree(worktree: &Path, sha: &CommitId) -> Result<(), GitError> {
    move_tracked(worktree, sha)?;
    clean_moved(worktree)
}

/// The first half of [`move_worktree`]: `git checkout -f --detach <sha>`
/// (tracked files exactly `sha`'s). What the last user left untracked is
/// still there until [`clean_moved`]: nothing may read the lane before it.
pub fn move_tracked(worktree: &Path, sha: &CommitId) -> Result<(), GitError> {
    checkout_detached(worktree, sha, &["core.fileMode=true"])?;
    crate::killpoint::reached("pool-lane-moved");
    Ok(())
}

/// The second half of [`move_worktree`]: `git clean -ffdx` and every
/// gitlink's directory emptied.
pub fn clean_moved(worktree: &Path) -> Result<(), GitError> {
    // The clean and the listing of gitlinks read the index side by side.
    let lane = worktree.to_path_buf();
    let gitlinks = std::thread::spawn(move || gitlink_dirs(&lane));
    let cleaned = git(worktree).args(["clean", "-ffdxq"]).run();
    let gitlinks = gitlinks.join().unwrap_or_else(|_| {
        Err(GitError::Cli {
            command: "list the lane's gitlinks".into(),
            detail: "the listing thread panicked".into(),
        })
    })?;
    cleaned?;
    empty_dirs(&gitlinks)
}

/// The directories of the gitlinks in the worktree's index (submodules,
/// nested repositories committed as such).
fn gitlink_dirs(worktree: &Path) -> Result<Vec<PathBuf>, GitError> {
    let out = git(worktree)
        .args(["ls-files", "-z", "--stage"])
        .keep_records(|r| r.starts_with(b"160000 "))
        .run()?;
    let mut dirs = Vec::new();
    for record in out.stdout.split(|&b| b == 0) {
        let Some(path) = record.strip_prefix(b"160000 ") else {
            continue;
        };
        let Some(tab) = path.iter().position(|&b| b == b'\t') else {
            continue;
        };
        use std::os::unix::ffi::OsStrExt;
        dirs.push(worktree.join(std::ffi::OsStr::from_bytes(&path[tab + 1..])));
    }
    Ok(dirs)
}

/// Empties each of `dirs` (a submodule's checkout or anything written
/// there), as a fresh checkout leaves a gitlink's directory.
fn empty_dirs(dirs: &[PathBuf]) -> Result<(), GitError> {
    for dir in dirs {
        let Ok(entries) = fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let p = entry.path();
            let gone = match entry.file_type() {
                Ok(t) if t.is_dir() => fs::remove_dir_all(&p),
                _ => fs::remove_file(&p),
            };
            gone.map_err(io_err("empty the submodule directory", &p))?;
        }
    }
    Ok(())
}

impl Repo {
    /// Deletes the linked worktree `name` at `path` and prunes its admin entry;
    /// branches are kept.
    ///
    /// Refuses when `path` is not where worktree `name` lives. Removing a worktree
    /// that is already gone is not an error.
    pub fn remove_worktree(&self, name: &str, path: &Path) -> Result<(), GitError> {
        let _admin = self.admin_lock(true)?;
        let worktree = match self.git2()?.find_worktree(name) {
            Ok(worktree) => worktree,
            Err(e) if e.code() == ErrorCode::NotFound => {
                if fs::symlink_metadata(path).is_ok() {
                    return Err(GitError::WorktreeMismatch {
                        name: name.to_string(),
                        path: path.to_path_buf(),
                        reason: "no worktree of that name is registered, so the path is left alone"
                            .to_string(),
                    });
                }
                return Ok(());
            }
            Err(e) => return Err(git_err(format!("look up worktree `{name}`"))(e)),
        };
        if let Ok(git2::WorktreeLockStatus::Locked(reason)) = worktree.is_locked() {
            return Err(GitError::WorktreeMismatch {
                name: name.to_string(),
                path: path.to_path_buf(),
                reason: format!(
                    "it is locked ({}); unlock it with `git worktree unlock`",
                    reason.unwrap_or_else(|| "no reason given".to_string())
                ),
            });
        }
        if fs::symlink_metadata(path).is_ok() {
            if !same_path(worktree.path(), path) {
                return Err(GitError::WorktreeMismatch {
                    name: name.to_string(),
                    path: path.to_path_buf(),
                    reason: format!("the worktree lives at {}", worktree.path().display()),
                });
            }
            // Double-check that this really is a linked worktree before deleting it.
            open_linked_worktree(path)?;
            fs::remove_dir_all(path).map_err(io_err("remove the worktree directory", path))?;
        }
        let mut prune = git2::WorktreePruneOptions::new();
        prune.valid(true).locked(false).working_tree(false);
        worktree
            .prune(Some(&mut prune))
            .map_err(git_err(format!("prune worktree `{name}`")))?;
        let admin = self.git2()?.commondir().join("worktrees").join(name);
        if fs::symlink_metadata(&admin).is_ok() {
            fs::remove_dir_all(&admin)
                .map_err(io_err("remove the worktree admin directory", &admin))?;
        }
        self.remove_shadow(name)
    }

    /// The file whose lock serialises worktree admin-dir changes across
    /// processes: `<common>/orch/worktree-admin-lock` (no `.lock` suffix: git
    /// tools treat `*.lock` files as debris).
    pub fn admin_lock_path(&self) -> PathBuf {
        let common_dir = self.common_dir();
        common_dir.join("orch").join("worktree-admin-lock")
    }
}

/// A held repository admin lock; released on drop (and by the kernel when the
/// process dies, also on `kill -9`).
#[derive(Debug)]
pub struct AdminLock {
    _file: fs::File,
}

impl Repo {
    /// Takes the repository's admin lock, waiting for it. Held exclusively
    /// around the creation and removal of worktrees (while libgit2 adds a
    /// worktree, its half-made admin dir makes every other process see every
    /// branch as checked out) and around every branch write, deletion and rename
    /// (libgit2 refuses those while such an admin dir exists, and its loose-ref
    /// writes race each other on shared directories). `exclusive: false` takes
    /// a shared lock, for readers that only need no admin dir to be half-made.
    pub fn admin_lock(&self, exclusive: bool) -> Result<AdminLock, GitError> {
        let path = self.admin_lock_path();
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io_err("create the directory", parent))?;
        }
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err("open the worktree admin lock", &path))?;
        loop {
            // std's `File::lock`/`lock_shared` are `flock(LOCK_EX)`/`flock(LOCK_SH)`
            // on Linux, without a retry on EINTR.
            let locked = if exclusive {
                file.lock()
            } else {
                file.lock_shared()
            };
            let Err(err) = locked else {
                return Ok(AdminLock { _file: file });
            };
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(io_err("lock the worktree admin lock", &path)(err));
            }
        }
    }
}

/// Whether `name` is the admin name of a lane of run `run`: `orch-<run>-<k>`.
fn is_lane_name(name: &str, run: &str) -> bool {
    name.strip_prefix("orch-")
        .and_then(|n| n.strip_prefix(run))
        .and_then(|n| n.strip_prefix('-'))
        .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
}

impl Repo {
    /// Removes the admin dirs of run `run`'s lanes (`worktrees/orch-<run>-<k>`)
    /// that a kill left broken: no `gitdir`, `commondir` or `HEAD` file (killed
    /// mid-`worktree add`), a `gitdir` naming a worktree that is gone, or
    /// anything else libgit2 cannot open and validate. Other runs' and the user's
    /// worktrees are never touched. Returns the names removed.
    pub fn prune_broken_lanes(&self, run: &str) -> Result<Vec<String>, GitError> {
        let common_dir = self.common_dir();
        let _admin = self.admin_lock(true)?;
        let dir = common_dir.join("worktrees");
        let mut pruned = Vec::new();
        let repo = self.git2().ok();
        let Ok(entries) = fs::read_dir(&dir) else {
            return Ok(pruned);
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !is_lane_name(&name, run) {
                continue;
            }
            let admin = entry.path();
            let broken = match fs::read_to_string(admin.join("gitdir")) {
            Err(_) => true,
            // `gitdir` holds `<worktree>/.git`.
            Ok(text) => !Path::new(text.trim()).exists(),
        } || !admin.join("commondir").is_file()
            || !admin.join("HEAD").is_file()
            // Whatever else a kill mid-`worktree add` can leave half-written:
            // what libgit2 cannot open or validate is broken too.
            || repo
                .as_ref()
                .is_some_and(|r| r.find_worktree(&name).and_then(|w| w.validate()).is_err());
            if broken {
                fs::remove_dir_all(&admin)
                    .map_err(io_err("remove the broken worktree admin directory", &admin))?;
                pruned.push(name);
            }
        }
        Ok(pruned)
    }

    /// Removes lock files (`*.lock`) a killed git update left under
    /// `refs/heads/<prefix>` for each prefix (e.g. `orch/<run>` and
    /// `orch-lanes/<run>`). Only call it while holding the run's lock: a lock file
    /// there then belongs to a dead process. Returns the files removed.
    pub fn remove_stale_ref_locks(&self, prefixes: &[String]) -> Result<Vec<PathBuf>, GitError> {
        let common_dir = self.common_dir();
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), GitError> {
            let Ok(entries) = fs::read_dir(dir) else {
                return Ok(());
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let Ok(meta) = fs::symlink_metadata(&path) else {
                    continue;
                };
                if meta.is_dir() {
                    walk(&path, out)?;
                } else if path.extension().is_some_and(|e| e == "lock") {
                    fs::remove_file(&path).map_err(io_err("remove the stale ref lock", &path))?;
                    out.push(path);
                }
            }
            Ok(())
        }
        let mut removed = Vec::new();
        for prefix in prefixes {
            let dir = common_dir.join("refs").join("heads").join(prefix);
            // `refs/heads/orch-lanes/<run>.lock` sits next to the directory.
            let beside = dir.with_extension(match dir.extension() {
                Some(e) => format!("{}.lock", e.to_string_lossy()),
                None => "lock".to_owned(),
            });
            if beside.is_file() {
                fs::remove_file(&beside).map_err(io_err("remove the stale ref lock", &beside))?;
                removed.push(beside);
            }
            walk(&dir, &mut removed)?;
        }
        Ok(removed)
    }
}

fn same_path(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a.components().eq(b.components()),
    }
}
