//! Cleaning a pooled lane at its hand-back from its watcher's history
//! instead of walking it: the run that held the lane knows, from the
//! kernel, every path touched since the lane was taken exactly clean
//! ([`super::watch::LaneWatch::since_start`]). Everything there that is not
//! in the lane's `HEAD` (ignored build output, files a failed command left)
//! is removed, every marked path that is in `HEAD` is checked against it,
//! and nothing else can differ: the untouched paths are as the take left
//! them, clean. The pool then stamps the lane ([`super::pool::seal`]), so
//! the next run moves it by the difference with no walk and no wait for
//! the background clean-up (a walk of 100,000 files: ~400 ms).
//!
//! It refuses (the caller leaves the lane to the clean-up's walk) whatever
//! it cannot vouch for: a tracked path that differs from `HEAD` (the run's
//! last stage did not commit it), a submodule or nested repository, a
//! filter or attribute that could make raw bytes differ from the blobs, a
//! `HEAD` other than the one the run committed.

use super::commit::{
    BLOB, Disk, EXEC, GITLINK, LINK, TREE, below_whole, cannot_vouch, disk_at, join, rel_path,
    tree_entry,
};
use super::{GitError, find_commit, git_err, io_err, open_linked_worktree};
use git2::{Oid, Repository};
use std::collections::BTreeMap;
use std::path::Path;

/// Makes the lane at `worktree` hold exactly its `HEAD`, which must be
/// `head`, given `marks`: every path that may differ from how the lane was
/// when it was last exactly clean (at any commit; `marks.base` is not
/// used). The index is neither read nor written (its pending record stays
/// for the next taker, whose readying applies it). Returns how
/// many stray entries were removed, or why the lane cannot be vouched for
/// (some strays may be gone by then, which is harmless: nothing in `HEAD`
/// is ever removed).
pub(super) fn clean_marked(
    worktree: &Path,
    head: &str,
    marks: &super::watch::Marks,
) -> Result<Result<usize, String>, GitError> {
    let repo = open_linked_worktree(worktree)?;
    let at_head = repo
        .head()
        .ok()
        .and_then(|h| h.target())
        .map(|id| id.to_string());
    if at_head.as_deref() != Some(head) {
        return Ok(Err(format!(
            "its HEAD is {}, not the run's {head}",
            at_head.as_deref().unwrap_or("unreadable")
        )));
    }
    if let Some(why) = cannot_vouch(&repo)? {
        return Ok(Err(why.to_owned()));
    }
    let tree = find_commit(&repo, head)?
        .tree()
        .map_err(git_err(format!("read the tree of {head}")))?;
    let mut roots: BTreeMap<&[u8], bool> =
        marks.paths.iter().map(|p| (p.as_slice(), false)).collect();
    for p in &marks.whole {
        roots.insert(p, true);
    }
    roots.remove(b".git".as_slice());
    if roots.contains_key(b"".as_slice()) {
        return Ok(Err("the lane's top directory was marked".to_owned()));
    }
    let mut sealer = Sealer {
        repo: &repo,
        root: worktree,
        removed: 0,
    };
    for (&p, &whole) in &roots {
        if below_whole(&roots, p) {
            continue;
        }
        let entry = tree_entry(&tree, p, head)?;
        if let Err(why) = sealer.visit(p, entry, whole)? {
            return Ok(Err(why));
        }
    }
    Ok(Ok(sealer.removed))
}

struct Sealer<'r> {
    repo: &'r Repository,
    root: &'r Path,
    removed: usize,
}

impl Sealer<'_> {
    /// Makes `rel` match its `HEAD` entry `entry`: removes it when it has
    /// none, checks it when it has one; a directory in `HEAD` is walked
    /// when `whole` (else its own marks cover what changed in it).
    fn visit(
        &mut self,
        rel: &[u8],
        entry: Option<(Oid, i32)>,
        whole: bool,
    ) -> Result<Result<(), String>, GitError> {
        let full = self.root.join(rel_path(rel));
        let name = || String::from_utf8_lossy(rel).into_owned();
        let Some((id, mode)) = entry else {
            match std::fs::symlink_metadata(&full) {
                // A stale mark below what is now a file: nothing there.
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                    ) => {}
                Err(e) => return Err(io_err("inspect the stray path", &full)(e)),
                Ok(_) => {
                    super::worktree::remove_untracked(self.root, rel_path(rel))?;
                    self.removed += 1;
                }
            }
            return Ok(Ok(()));
        };
        let disk = disk_at(&full);
        match (mode, disk) {
            (GITLINK, _) => Ok(Err(format!("{} is a submodule", name()))),
            (TREE, Disk::Dir) => {
                if std::fs::symlink_metadata(full.join(".git")).is_ok() {
                    return Ok(Err(format!("{} holds a nested repository", name())));
                }
                if !whole {
                    return Ok(Ok(()));
                }
                let sub = self
                    .repo
                    .find_tree(id)
                    .map_err(git_err(format!("read tree {id}")))?;
                self.walk(rel, &sub)
            }
            (TREE, _) => Ok(Err(format!("{}, a directory in HEAD, is not one", name()))),
            (LINK, Disk::Link) => {
                let target =
                    std::fs::read_link(&full).map_err(io_err("read the symlink", &full))?;
                let got = Oid::hash_object(
                    git2::ObjectType::Blob,
                    target.as_os_str().as_encoded_bytes(),
                )
                .map_err(git_err(format!("hash the symlink {}", full.display())))?;
                Ok(same(got, id, &name))
            }
            (BLOB | EXEC, Disk::File { exec }) if exec == (mode == EXEC) => {
                let got = Oid::hash_file(git2::ObjectType::Blob, &full)
                    .map_err(git_err(format!("hash {}", full.display())))?;
                Ok(same(got, id, &name))
            }
            _ => Ok(Err(format!("{} differs from HEAD (kind or mode)", name()))),
        }
    }

    /// Matches the directory `rel`, a tree in `HEAD`, to it entirely.
    fn walk(&mut self, rel: &[u8], tree: &git2::Tree<'_>) -> Result<Result<(), String>, GitError> {
        use std::os::unix::ffi::OsStrExt;
        let full = self.root.join(rel_path(rel));
        let mut names: BTreeMap<Vec<u8>, Option<(Oid, i32)>> = BTreeMap::new();
        for e in std::fs::read_dir(&full).map_err(io_err("list", &full))? {
            let e = e.map_err(io_err("list", &full))?;
            names.insert(e.file_name().as_bytes().to_vec(), None);
        }
        for e in tree.iter() {
            names.insert(e.name_bytes().to_vec(), Some((e.id(), e.filemode())));
        }
        for (name, entry) in names {
            if let Err(why) = self.visit(&join(rel, &name), entry, true)? {
                return Ok(Err(why));
            }
        }
        Ok(Ok(()))
    }
}

fn same(got: Oid, want: Oid, name: &dyn Fn() -> String) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{} differs from HEAD", name()))
    }
}
