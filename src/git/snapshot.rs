//! The user's working tree as a commit, without touching it: what
//! `orch run --base worktree` starts from, and whether the tree is dirty at
//! all (so a run from `HEAD` can say it leaves the user's edits out).
//!
//! The snapshot's tree is built in an in-memory index ([`git2::Index::new`],
//! never `.git/index`) from `HEAD`'s tree plus every path the status walk
//! reports, read from the working tree: tracked edits, deletions and
//! untracked files, minus ignored ones. The commit object is written without
//! moving any ref; the run's stage branches are what keep it alive.

use super::{GitError, git_err, io_err, open_at, status_walk};
use git2::{IndexEntry, IndexTime, Oid, Repository};
use std::path::{Path, PathBuf};

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
/// its `HEAD`, and which submodules are checked out. Reads only.
pub fn working_tree_dirt(workdir: &Path) -> Result<Dirt, GitError> {
    dirt_of(&open_at(workdir)?, workdir)
}

/// [`super::open_repo`] and the [`working_tree_dirt`] of its working tree,
/// with one open of the repository.
pub fn open_repo_with_dirt(path: &Path) -> Result<(super::RepoInfo, Dirt), GitError> {
    let (repo, info) = super::discover(path)?;
    let dirt = dirt_of(&repo, &info.workdir)?;
    Ok((info, dirt))
}

fn dirt_of(repo: &Repository, workdir: &Path) -> Result<Dirt, GitError> {
    let mut paths: Vec<String> = status_walk(repo)
        .map_err(git_err(format!("read the status of {}", workdir.display())))?
        .into_iter()
        .filter(|(_, s)| *s != git2::Status::CURRENT && !s.is_ignored())
        .map(|(p, _)| String::from_utf8_lossy(&p).into_owned())
        .collect();
    paths.sort();
    Ok(Dirt {
        paths,
        submodules: checked_out_submodules(repo),
    })
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

/// Writes the working tree of the repository at `workdir` (tracked files as
/// they are on disk, untracked files, not ignored ones; submodules as `HEAD`
/// records them) as a commit whose parent is `HEAD`, and returns its SHA.
/// No ref, index file or working-tree file is written.
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
    let head_tree = head
        .tree()
        .map_err(git_err("read the tree of HEAD for a snapshot"))?;
    let mut index = git2::Index::new().map_err(git_err("create an in-memory index"))?;
    index
        .read_tree(&head_tree)
        .map_err(git_err("read HEAD into an in-memory index"))?;
    let changed =
        status_walk(&repo).map_err(git_err(format!("read the status of {}", root.display())))?;
    for (path, status) in changed {
        if status == git2::Status::CURRENT || status.is_ignored() || path.ends_with(b"/") {
            // A nested repository shows as `dir/`: not part of this tree.
            continue;
        }
        let rel = bytes_to_path(&path);
        let full = root.join(&rel);
        match std::fs::symlink_metadata(&full) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Deleted in the working tree (whatever the index says).
                let _ = index.remove_path(&rel);
            }
            Err(e) => return Err(io_err("read", &full)(e)),
            Ok(meta) => {
                let (id, mode) = blob_of(&repo, &full, &meta)?;
                index
                    .add(&entry(path, id, mode))
                    .map_err(git_err(format!("add {} to the snapshot", rel.display())))?;
            }
        }
    }
    let tree_id = index
        .write_tree_to(&repo)
        .map_err(git_err("write the snapshot tree"))?;
    let tree = repo
        .find_tree(tree_id)
        .map_err(git_err("read the snapshot tree"))?;
    let sig = super::signature(&repo)?;
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

/// The blob of a working-tree file (a symlink's target for a link) and its mode.
fn blob_of(
    repo: &Repository,
    full: &Path,
    meta: &std::fs::Metadata,
) -> Result<(Oid, u32), GitError> {
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(full).map_err(io_err("read the link", full))?;
        let id = repo
            .blob(target.as_os_str().as_encoded_bytes())
            .map_err(git_err(format!("store {}", full.display())))?;
        return Ok((id, 0o120000));
    }
    let id = repo
        .blob_path(full)
        .map_err(git_err(format!("store {}", full.display())))?;
    Ok((
        id,
        if is_executable(meta) {
            0o100755
        } else {
            0o100644
        },
    ))
}

#[cfg(unix)]
fn is_executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_meta: &std::fs::Metadata) -> bool {
    false
}

fn entry(path: Vec<u8>, id: Oid, mode: u32) -> IndexEntry {
    IndexEntry {
        ctime: IndexTime::new(0, 0),
        mtime: IndexTime::new(0, 0),
        dev: 0,
        ino: 0,
        mode,
        uid: 0,
        gid: 0,
        file_size: 0,
        id,
        flags: (path.len().min(0xfff)) as u16,
        flags_extended: 0,
        path,
    }
}

fn bytes_to_path(bytes: &[u8]) -> PathBuf {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
    }
    #[cfg(not(unix))]
    {
        PathBuf::from(String::from_utf8_lossy(bytes).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::testutil::TestRepo;

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

    #[test]
    fn a_clean_tree_is_not_dirty() {
        let repo = TestRepo::new();
        assert!(!working_tree_dirt(&repo.path).unwrap().is_dirty());
    }
}
