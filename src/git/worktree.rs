//! Creating, resetting and removing orch's linked worktrees.
//!
//! libgit2 1.9.7 leaves an empty `<common>/worktrees/<name>` behind when a
//! worktree creation fails, after which it treats every branch as checked out.
//! So the cheap checks run first and a failure removes everything this call
//! created (admin directory, worktree directory, branch).

use std::fs;
use std::path::{Path, PathBuf};

use git2::build::CheckoutBuilder;
use git2::{BranchType, ErrorCode, Repository, ResetType, WorktreeAddOptions};

use super::checkout::{self, Plain};
use super::{
    GitError, branch_ref, find_commit, git_err, io_err, open_at, open_linked_worktree, status_walk,
};

/// Creates branch `branch` at `base_sha` and a linked worktree named `name`
/// at `path` checked out on it.
///
/// Fails early when `path` exists, the branch exists or the name is taken;
/// creates the parent directories of `path`. On failure nothing it created is
/// left behind, so a later call with the same arguments can succeed.
pub fn create_worktree(
    common_dir: &Path,
    name: &str,
    path: &Path,
    branch: &str,
    base_sha: &str,
) -> Result<(), GitError> {
    if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\']) {
        return Err(GitError::InvalidWorktreeName {
            name: name.to_string(),
        });
    }
    let refname = branch_ref(branch)?;
    let path = std::path::absolute(path).map_err(io_err("resolve the worktree path", path))?;
    if fs::symlink_metadata(&path).is_ok() {
        return Err(GitError::PathExists { path });
    }
    let repo = open_at(common_dir)?;
    let base = find_commit(&repo, base_sha)?;
    // Without converting configuration, the tree is written by orch's own
    // checkout ([`checkout::checkout_plain`]); it gives the tree to
    // libgit2's (and its `.gitattributes` walk) when it meets anything
    // unusual, so the walk for attributes runs only then.
    let plain = !filters_configured(&repo)? && checkout::config_allows_plain(&repo)?;
    let admin = repo.commondir().join("worktrees").join(name);

    let mut created_branch = false;
    let result = (|| {
        // libgit2 is not safe against itself while a worktree is added: its
        // half-made admin dir makes a concurrent add (or branch write, in
        // this process or another) see every branch as checked out, and
        // both race to mkdir `.git/worktrees`. So the checks, the branch and
        // the add (of an empty tree: cheap) hold the repository's admin lock
        // ([`admin_lock`], a `flock` taken per call, so it also serialises
        // threads of one process); the checkout of the files does not, so
        // parallel lanes check out at the same time.
        {
            let _admin = admin_lock(common_dir, true)?;
            match repo.find_branch(branch, BranchType::Local) {
                Ok(_) => {
                    return Err(GitError::BranchExists {
                        branch: branch.to_string(),
                    });
                }
                Err(e) if e.code() == ErrorCode::NotFound => {}
                Err(e) => return Err(git_err(format!("look up branch `{branch}`"))(e)),
            }
            if fs::symlink_metadata(&admin).is_ok() {
                return Err(GitError::WorktreeNameTaken {
                    name: name.to_string(),
                    admin: admin.clone(),
                });
            }
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent).map_err(io_err("create the directory", parent))?;
            }
            // libgit2's own checkout on add reads `.gitattributes` only from
            // files already written (so `.gitattributes` itself is never
            // converted) and, with filters on, runs several `realpath`s per
            // file. So the add checks out an empty tree and the base is
            // checked out below, without filters when none can apply.
            let empty = empty_commit(&repo)?;
            let new_branch = repo
                .branch(
                    branch,
                    &repo
                        .find_commit(empty)
                        .map_err(git_err("read the empty lane-start commit"))?,
                    false,
                )
                .map_err(git_err(format!("create branch `{branch}`")))?;
            created_branch = true;
            crate::killpoint::reached("lane-branch-created");
            let mut opts = WorktreeAddOptions::new();
            opts.reference(Some(new_branch.get()));
            repo.worktree(name, &path, Some(&opts))
                .map_err(git_err(format!(
                    "add worktree `{name}` at {}",
                    path.display()
                )))?;
        }
        let (wt, filters, direct) = if plain {
            let wt = open_at(&path)?;
            match checkout::checkout_plain(&wt, base.tree_id())? {
                Plain::Done => (wt, false, true),
                Plain::Fallback(why) => {
                    tracing::debug!(%why, "lane checkout falls back to libgit2's");
                    drop(wt);
                    let filters = needs_checkout_filters(&repo, &base)?;
                    (checkout_files(&path, &base, filters)?, filters, false)
                }
            }
        } else {
            let filters = needs_checkout_filters(&repo, &base)?;
            (checkout_files(&path, &base, filters)?, filters, false)
        };
        let message = match (filters, direct) {
            (true, _) => "orch: lane at its base (filtered checkout)",
            (false, true) => "orch: lane at its base (unfiltered checkout), written directly",
            (false, false) => "orch: lane at its base (unfiltered checkout)",
        };
        {
            let _admin = admin_lock(common_dir, true)?;
            wt.find_reference(&refname)
                .and_then(|mut r| r.set_target(base.id(), message).map(drop))
                .map_err(git_err(format!("point `{refname}` at {}", base.id())))?;
        }
        crate::killpoint::reached("worktree-added");
        Ok(())
    })();
    if result.is_err() {
        let _admin = admin_lock(common_dir, true);
        undo_create(
            &repo,
            &admin,
            &path,
            created_branch.then_some(refname.as_str()),
        );
    }
    result
}

/// Whether checking out `base` could run a filter: an attribute file (a
/// `.gitattributes` anywhere in its tree, `info/attributes`, the global or
/// system one) or configuration that converts content (`core.autocrlf` other
/// than false, `core.eol`, `core.attributesfile`, any `filter.*`). Only when
/// none of these exists is a checkout without filters byte-identical to
/// git's, so any doubt answers `true`.
pub(crate) fn needs_checkout_filters(
    repo: &Repository,
    base: &git2::Commit<'_>,
) -> Result<bool, GitError> {
    if filters_configured(repo)? {
        return Ok(true);
    }
    let tree = base
        .tree()
        .map_err(git_err(format!("read the tree of {}", base.id())))?;
    let mut found = false;
    tree.walk(git2::TreeWalkMode::PreOrder, |_, entry| {
        if entry.name_bytes() == b".gitattributes" {
            found = true;
            return git2::TreeWalkResult::Abort;
        }
        git2::TreeWalkResult::Ok
    })
    .or_else(|e| if found { Ok(()) } else { Err(e) })
    .map_err(git_err(format!("walk the tree of {}", base.id())))?;
    Ok(found)
}

/// The part of [`needs_checkout_filters`] that is not the tree: attribute
/// files outside it and configuration that converts content.
pub(super) fn filters_configured(repo: &Repository) -> Result<bool, GitError> {
    let config = repo
        .config()
        .map_err(git_err("read the repository configuration"))?;
    let set = |key: &str| config.get_entry(key).is_ok();
    if config.get_bool("core.autocrlf").ok() != Some(false) && set("core.autocrlf")
        || set("core.eol")
        || set("core.attributesfile")
    {
        return Ok(true);
    }
    let mut filters = config
        .entries(Some("filter\\..*"))
        .map_err(git_err("read the `filter.*` configuration"))?;
    if filters.next().is_some() {
        return Ok(true);
    }
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .map(|d| d.join("git/attributes"));
    let attribute_files = [
        Some(repo.commondir().join("info/attributes")),
        xdg,
        Some(PathBuf::from("/etc/gitattributes")),
    ];
    Ok(attribute_files.iter().flatten().any(|f| f.exists()))
}

/// A commit of the empty tree with a fixed author and time (so always the
/// same object), for a worktree add that checks out nothing.
fn empty_commit(repo: &Repository) -> Result<git2::Oid, GitError> {
    let what = "write the empty lane-start commit";
    let tree_id = repo
        .treebuilder(None)
        .and_then(|b| b.write())
        .map_err(git_err(what))?;
    let tree = repo.find_tree(tree_id).map_err(git_err(what))?;
    let sig = git2::Signature::new("orch", "orch@localhost", &git2::Time::new(0, 0))
        .map_err(git_err(what))?;
    repo.commit(None, &sig, &sig, "orch: empty lane start", &tree, &[])
        .map_err(git_err(what))
}

/// Checks out `base` into the fresh worktree at `path` (whose branch is at
/// the empty commit), with or without `filters`; the caller then moves the
/// branch to `base`, so files, index and branch end as `git worktree add`
/// leaves them. The index holds `base` before the files are written, so
/// attributes are read from it as git does (a `.gitattributes` applies to
/// itself and to files that sort before it). Returns the worktree's handle.
fn checkout_files(
    path: &Path,
    base: &git2::Commit<'_>,
    filters: bool,
) -> Result<Repository, GitError> {
    let what = format!("check out {} into {}", base.id(), path.display());
    let wt = open_at(path)?;
    {
        let commit = wt.find_commit(base.id()).map_err(git_err(&what))?;
        let tree = commit.tree().map_err(git_err(&what))?;
        if filters {
            let mut index = wt.index().map_err(git_err(&what))?;
            index.read_tree(&tree).map_err(git_err(&what))?;
        }
        let mut checkout = CheckoutBuilder::new();
        checkout.force().disable_filters(!filters);
        wt.checkout_tree(commit.as_object(), Some(&mut checkout))
            .map_err(git_err(&what))?;
    }
    Ok(wt)
}

/// Best-effort removal of what a failed `create_worktree` made. The admin
/// directory goes first: while it lingers libgit2 refuses to delete branches.
fn undo_create(repo: &Repository, admin: &Path, path: &Path, branch_ref: Option<&str>) {
    let _ = fs::remove_dir_all(admin);
    let _ = fs::remove_dir_all(path);
    if let Some(name) = branch_ref
        && let Ok(mut reference) = repo.find_reference(name)
    {
        let _ = reference.delete();
    }
}

/// Hard-resets the linked worktree at `worktree` (its branch, index and files)
/// to `sha` and deletes untracked files that are not ignored, as
/// `git reset --hard <sha> && git clean -fd` would.
///
/// Used to restart an interrupted stage from its start commit. Ignored files
/// (build output, caches) are kept. Directories left empty by the clean are
/// removed; empty directories that held nothing to begin with are invisible to
/// git and stay.
pub fn reset_worktree(worktree: &Path, sha: &str) -> Result<(), GitError> {
    let repo = open_linked_worktree(worktree)?;
    let at = worktree.display();
    let commit = find_commit(&repo, sha)?;
    let mut checkout = CheckoutBuilder::new();
    checkout.force();
    repo.reset(commit.as_object(), ResetType::Hard, Some(&mut checkout))
        .map_err(git_err(format!("reset {at} to {sha}")))?;
    // The reset wrote the whole index from `sha`'s tree.
    super::pending::discard_pending_in(&repo)?;

    let workdir = workdir_of(&repo, worktree)?;
    for rel in untracked_paths(&repo).map_err(git_err(format!("list untracked files in {at}")))? {
        remove_untracked(&workdir, &rel)?;
    }
    Ok(())
}

/// The working directory of the worktree `repo` opened at `worktree`.
fn workdir_of(repo: &Repository, worktree: &Path) -> Result<PathBuf, GitError> {
    repo.workdir()
        .map(Path::to_path_buf)
        .ok_or_else(|| GitError::NotLinkedWorktree {
            path: worktree.to_path_buf(),
        })
}

/// What [`move_worktree`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moved {
    /// The worktree is now exactly `sha`'s tree, detached at it and verified
    /// clean; `paths` paths were checked out and `stray` untracked or
    /// ignored entries removed.
    Done {
        /// Paths checked out (the difference, plus files found modified).
        paths: usize,
        /// Untracked and ignored entries removed.
        stray: usize,
    },
    /// The worktree was left for a fresh one; the reason says why.
    Refused(String),
}

/// Moves orch's linked worktree at `worktree` (a pooled lane, whatever
/// state its last user left it in) to `sha`, detached, by checking out only
/// the difference: one status walk finds what differs from its `HEAD`
/// (modified tracked files, untracked and ignored entries, which are
/// removed: nothing of the previous user leaks); the paths that differ
/// between `HEAD` and `sha` plus the modified ones are checked out (new,
/// changed, deleted, mode and symlink changes), then those paths are
/// checked again. Everything else was proven equal to `HEAD`, so the
/// worktree then holds exactly `sha`'s tree.
///
/// Refuses ([`Moved::Refused`], the worktree untouched) when a checkout
/// could run a filter (attributes or converting configuration, in the old
/// or the new tree): a fresh, filtered checkout is the safe path there.
pub fn move_worktree(worktree: &Path, sha: &str) -> Result<Moved, GitError> {
    move_worktree_with(worktree, sha, false)
}

/// [`move_worktree`] of a worktree known to be exactly its `HEAD`'s tree
/// (the pool's clean-up verified it with a full walk and nothing touched it
/// since, see `pool::Stamp`): no walk at all, only the tree-to-tree
/// difference is checked out and checked path by path.
pub(super) fn move_clean_worktree(worktree: &Path, sha: &str) -> Result<Moved, GitError> {
    move_worktree_with(worktree, sha, true)
}

/// The status of everything in a lane that differs from its `HEAD`:
/// modified tracked paths, and untracked or ignored entries (directories as
/// one entry, not recursed into).
fn lane_status(repo: &Repository, at: &std::path::Display<'_>) -> Result<LaneStatus, GitError> {
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(false)
        .include_ignored(true)
        .recurse_ignored_dirs(false)
        .exclude_submodules(true);
    let statuses = repo
        .statuses(Some(&mut opts))
        .map_err(git_err(format!("read the status of {at}")))?;
    let mut found = LaneStatus::default();
    for e in statuses.iter() {
        let st = e.status();
        if st == git2::Status::WT_NEW || st == git2::Status::IGNORED {
            found.stray.push(bytes_to_path(e.path_bytes()));
        } else {
            found.modified.push(e.path_bytes().to_vec());
        }
    }
    Ok(found)
}

#[derive(Default)]
struct LaneStatus {
    modified: Vec<Vec<u8>>,
    stray: Vec<PathBuf>,
}

/// Cleans orch's linked worktree at `worktree` (a pooled lane a run handed
/// back) in place, at its own `HEAD`: one status walk finds what its last
/// user left (untracked and ignored entries are removed, modified tracked
/// paths checked out again), then a second walk must find nothing (none
/// when the first found nothing to clean). Returns
/// what `observe` saw of the lane clean at `HEAD` (it is given the `HEAD`
/// SHA), or why it is not clean (then nothing vouches for it and its next
/// taker walks it again). Lanes with attribute files or converting
/// filters are never vouched for (their taker makes them afresh).
/// `observe` runs before the check walk (what it sees then is what the
/// check vouches for): before the first walk, which is the check when it
/// finds nothing to clean, else again between the clean-up and the second.
pub(super) fn clean_worktree<T>(
    worktree: &Path,
    mut observe: impl FnMut(&str) -> Option<T>,
) -> Result<Result<T, String>, GitError> {
    let repo = open_linked_worktree(worktree)?;
    let at = worktree.display();
    let head = match repo.head().and_then(|h| h.peel_to_commit()) {
        Ok(c) => c,
        Err(e) => {
            return Ok(Err(format!(
                "its HEAD is unreadable: {}",
                super::describe(&e)
            )));
        }
    };
    if filters_configured(&repo)? {
        return Ok(Err(
            "attribute files or converting filters are configured".to_owned()
        ));
    }
    super::pending::apply_pending_in(&repo)?;
    let attributes = |p: &[u8]| p == b".gitattributes" || p.ends_with(b"/.gitattributes");
    let index = repo
        .index()
        .map_err(git_err(format!("read the index of {at}")))?;
    if index.iter().any(|e| attributes(&e.path)) {
        return Ok(Err("its tree has a .gitattributes".to_owned()));
    }
    drop(index);
    let workdir = workdir_of(&repo, worktree)?;
    // Seen before the first walk: when that walk finds the lane clean
    // already (the last stage committed everything and left no ignored
    // file), it vouches for what was seen, and no second walk is needed.
    let before = observe(&head.id().to_string());
    let found = lane_status(&repo, &at)?;
    if found.stray.is_empty() && found.modified.is_empty() {
        crate::killpoint::reached("pool-clean-walked");
        return Ok(before.ok_or_else(|| "its directories could not be listed".to_owned()));
    }
    for rel in &found.stray {
        remove_untracked(&workdir, rel)?;
    }
    if !found.modified.is_empty() {
        let mut checkout = CheckoutBuilder::new();
        checkout
            .force()
            .disable_filters(true)
            .disable_pathspec_match(true);
        for p in &found.modified {
            checkout.path(bytes_to_path(p));
        }
        repo.checkout_tree(head.as_object(), Some(&mut checkout))
            .map_err(git_err(format!("check out {} again in {at}", head.id())))?;
        let tree = head
            .tree()
            .map_err(git_err(format!("read the tree of {}", head.id())))?;
        sync_index(&repo, &tree, &workdir, &found.modified)
            .map_err(git_err(format!("update the index of {at}")))?;
    }
    crate::killpoint::reached("pool-clean-walked");
    let Some(seen) = observe(&head.id().to_string()) else {
        return Ok(Err("its directories could not be listed".to_owned()));
    };
    let left = lane_status(&repo, &at)?;
    if let Some(p) = left.modified.first() {
        return Ok(Err(format!(
            "{} still differs from HEAD",
            String::from_utf8_lossy(p)
        )));
    }
    if let Some(p) = left.stray.first() {
        return Ok(Err(format!("{} is still there", p.display())));
    }
    Ok(Ok(seen))
}

fn move_worktree_with(worktree: &Path, sha: &str, known_clean: bool) -> Result<Moved, GitError> {
    let repo = open_linked_worktree(worktree)?;
    // A lane known clean may keep its pending record: the direct move does
    // not read the index and adds its paths to the record.
    if !known_clean {
        super::pending::apply_pending_in(&repo)?;
    }
    let at = worktree.display();
    let new = find_commit(&repo, sha)?;
    if filters_configured(&repo)? {
        return Ok(Moved::Refused(
            "attribute files or converting filters are configured".to_owned(),
        ));
    }
    let old = match repo.head().and_then(|h| h.peel_to_commit()) {
        Ok(c) => c,
        Err(e) => {
            return Ok(Moved::Refused(format!(
                "its HEAD is unreadable: {}",
                super::describe(&e)
            )));
        }
    };
    let attributes = |p: &[u8]| p == b".gitattributes" || p.ends_with(b"/.gitattributes");
    let workdir = workdir_of(&repo, worktree)?;
    // 1. One walk of the whole worktree against its HEAD, unless the pool's
    // clean-up vouches that it is exactly HEAD's tree (it checked for
    // attribute files in that tree too).
    let (mut paths, stray) = if known_clean {
        (Vec::new(), Vec::new())
    } else {
        let index = repo
            .index()
            .map_err(git_err(format!("read the index of {at}")))?;
        if index.iter().any(|e| attributes(&e.path)) {
            return Ok(Moved::Refused("its tree has a .gitattributes".to_owned()));
        }
        drop(index);
        let found = lane_status(&repo, &at)?;
        for rel in &found.stray {
            remove_untracked(&workdir, rel)?;
        }
        (found.modified, found.stray)
    };
    let modified = paths.clone();

    // 2. The difference between the trees (proportional to the change).
    let (old_tree, new_tree) = match (old.tree(), new.tree()) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            return Err(git_err(format!("read the trees to move {at} to {sha}"))(e));
        }
    };
    // A lane known clean: the difference written directly and the index
    // patched in place (no walk, no whole-index read), unless it needs
    // libgit2's checkout.
    let direct = if known_clean {
        match checkout::move_plain(&repo, &old_tree, &new_tree)? {
            checkout::Move::Done(changed) => Some(changed),
            checkout::Move::Fallback(why) => {
                tracing::debug!(lane = %at, why, "the difference goes through libgit2's checkout");
                // libgit2's checkout reads the index.
                super::pending::apply_pending_in(&repo)?;
                None
            }
        }
    } else {
        None
    };
    if let Some(changed) = direct {
        paths = changed;
    } else {
        let diff = repo
            .diff_tree_to_tree(Some(&old_tree), Some(&new_tree), None)
            .map_err(git_err(format!("diff {} and {sha}", old.id())))?;
        for delta in diff.deltas() {
            for file in [delta.old_file(), delta.new_file()] {
                if let Some(p) = file.path_bytes() {
                    if attributes(p) {
                        return Ok(Moved::Refused(format!("{sha} has a .gitattributes")));
                    }
                    paths.push(p.to_vec());
                }
            }
        }
        paths.sort();
        paths.dedup();
        if !paths.is_empty() {
            let mut checkout = CheckoutBuilder::new();
            checkout
                .force()
                .disable_filters(true)
                .disable_pathspec_match(true);
            for p in &paths {
                checkout.path(bytes_to_path(p));
            }
            repo.checkout_tree(new.as_object(), Some(&mut checkout))
                .map_err(git_err(format!(
                    "check out {sha} over {} in {at}",
                    old.id()
                )))?;
        }
    }
    repo.set_head_detached(new.id())
        .map_err(git_err(format!("move HEAD of {at} to {sha}")))?;

    // 3. The paths that changed now match `sha` (everything else matched
    // the old HEAD, which agrees with `sha` there), checked path by path
    // against the tree (a status limited to them still walks the worktree).
    for p in &paths {
        if let Some(why) = differs_from_tree(&new_tree, &workdir, p)? {
            return Ok(Moved::Refused(format!(
                "{} is not at {sha} after the checkout: {why}",
                String::from_utf8_lossy(p)
            )));
        }
    }
    // The checkout leaves the index entry of a path whose file already
    // matched alone: a stale index (a lost pending record) is set right here.
    sync_index(&repo, &new_tree, &workdir, &modified)
        .map_err(git_err(format!("update the index of {at}")))?;
    Ok(Moved::Done {
        paths: paths.len(),
        stray: stray.len(),
    })
}

/// Sets the index entries of `paths` (found differing from `HEAD` by a
/// walk, whose files now match `tree`) to the files: added with their stat
/// data when `tree` has a file there, else removed. A checkout rewrites only
/// the entries of files it writes; one whose file already matched but whose
/// index entry is stale (see `pending`) would stay stale.
fn sync_index(
    repo: &Repository,
    tree: &git2::Tree<'_>,
    workdir: &Path,
    paths: &[Vec<u8>],
) -> Result<(), git2::Error> {
    if paths.is_empty() {
        return Ok(());
    }
    let mut index = repo.index()?;
    for p in paths {
        let rel = bytes_to_path(p);
        let in_tree = tree
            .get_path(&rel)
            .is_ok_and(|e| e.kind() != Some(git2::ObjectType::Tree));
        let on_disk = fs::symlink_metadata(workdir.join(&rel)).is_ok_and(|m| !m.is_dir());
        if in_tree && on_disk {
            index.add_path(&rel)?;
        } else {
            match index.remove_path(&rel) {
                Err(e) if e.code() != ErrorCode::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    index.write()
}

/// Why the file at `rel` under `workdir` differs from `tree`'s entry there
/// (content hash, executable bit, symlink target, presence), or `None`.
fn differs_from_tree(
    tree: &git2::Tree<'_>,
    workdir: &Path,
    rel: &[u8],
) -> Result<Option<String>, GitError> {
    use std::os::unix::fs::PermissionsExt;
    let rel_path = bytes_to_path(rel);
    let full = workdir.join(&rel_path);
    let meta = fs::symlink_metadata(&full).ok();
    let entry = match tree.get_path(&rel_path) {
        Ok(e) => Some(e),
        Err(e) if e.code() == ErrorCode::NotFound => None,
        Err(e) => {
            return Err(git_err(format!("look up {} in the tree", full.display()))(
                e,
            ));
        }
    };
    let Some(entry) = entry else {
        return Ok(meta.map(|_| "it should not exist".to_owned()));
    };
    let Some(meta) = meta else {
        return Ok(Some("it is missing".to_owned()));
    };
    let mode = entry.filemode();
    let hash = |bytes: &[u8]| {
        git2::Oid::hash_object(git2::ObjectType::Blob, bytes)
            .map_err(git_err(format!("hash {}", full.display())))
    };
    let why = match mode {
        0o040000 => (!meta.is_dir()).then(|| "it should be a directory".to_owned()),
        0o160000 => None, // a submodule: lanes do not check them out
        0o120000 => {
            let target = fs::read_link(&full).map_err(io_err("read the symlink", &full))?;
            let target = target.as_os_str().as_encoded_bytes().to_vec();
            (!meta.file_type().is_symlink() || hash(&target)? != entry.id())
                .then(|| "its symlink target differs".to_owned())
        }
        _ => {
            let exec = meta.permissions().mode() & 0o111 != 0;
            if !meta.is_file() {
                Some("it should be a file".to_owned())
            } else if exec != (mode == 0o100755) {
                Some("its executable bit differs".to_owned())
            } else {
                let bytes = fs::read(&full).map_err(io_err("read", &full))?;
                (hash(&bytes)? != entry.id()).then(|| "its content differs".to_owned())
            }
        }
    };
    Ok(why)
}

/// Detaches the `HEAD` of orch's linked worktree at `worktree` at the
/// commit it points at (its branch may then be deleted).
pub fn detach_worktree(worktree: &Path) -> Result<(), GitError> {
    let repo = open_linked_worktree(worktree)?;
    let at = worktree.display();
    let head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(git_err(format!("read HEAD of {at}")))?;
    repo.set_head_detached(head.id())
        .map_err(git_err(format!("detach HEAD of {at}")))
}

/// Untracked, not ignored paths, files one by one; a nested repository shows
/// up as one directory path ending in `/`.
fn untracked_paths(repo: &Repository) -> Result<Vec<PathBuf>, git2::Error> {
    Ok(status_walk(repo)?
        .into_iter()
        .filter(|(_, status)| status.is_wt_new())
        .map(|(path, _)| bytes_to_path(&path))
        .collect())
}

/// Deletes one untracked path (never following a symlink), then the
/// directories above it that it leaves empty.
pub(super) fn remove_untracked(workdir: &Path, rel: &Path) -> Result<(), GitError> {
    // Collecting components drops the `/` of a nested repository's entry, so
    // `symlink_metadata` looks at the entry itself, never through a symlink.
    let full: PathBuf = workdir.join(rel).components().collect();
    let meta = match fs::symlink_metadata(&full) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("inspect the untracked path", &full)(e)),
    };
    if meta.is_dir() {
        fs::remove_dir_all(&full).map_err(io_err("remove the untracked directory", &full))?;
    } else {
        fs::remove_file(&full).map_err(io_err("remove the untracked file", &full))?;
    }
    let mut dir: Option<PathBuf> = full.parent().map(Path::to_path_buf);
    while let Some(d) = dir {
        // `remove_dir` only succeeds on an empty directory: exactly the ones to
        // drop. Stop at the first one that still holds something.
        if d == workdir || !d.starts_with(workdir) || fs::remove_dir(&d).is_err() {
            break;
        }
        dir = d.parent().map(Path::to_path_buf);
    }
    Ok(())
}

/// Deletes the linked worktree `name` at `path` and prunes its admin entry;
/// branches are kept.
///
/// Refuses when `path` is not where worktree `name` lives. Removing a worktree
/// that is already gone is not an error.
pub fn remove_worktree(common_dir: &Path, name: &str, path: &Path) -> Result<(), GitError> {
    let _admin = admin_lock(common_dir, true)?;
    let repo = open_at(common_dir)?;
    let worktree = match repo.find_worktree(name) {
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
    let admin = repo.commondir().join("worktrees").join(name);
    if fs::symlink_metadata(&admin).is_ok() {
        fs::remove_dir_all(&admin)
            .map_err(io_err("remove the worktree admin directory", &admin))?;
    }
    Ok(())
}

/// The file whose lock serialises worktree admin-dir changes across
/// processes: `<common>/orch/worktree-admin-lock` (no `.lock` suffix: git
/// tools treat `*.lock` files as debris).
pub fn admin_lock_path(common_dir: &Path) -> PathBuf {
    common_dir.join("orch").join("worktree-admin-lock")
}

/// A held repository admin lock; released on drop (and by the kernel when the
/// process dies, also on `kill -9`).
#[derive(Debug)]
pub struct AdminLock {
    _file: fs::File,
}

/// Takes the repository's admin lock, waiting for it. Held exclusively
/// around the creation and removal of worktrees (while libgit2 adds a
/// worktree, its half-made admin dir makes every other process see every
/// branch as checked out) and around every branch write, deletion and rename
/// (libgit2 refuses those while such an admin dir exists, and its loose-ref
/// writes race each other on shared directories). `exclusive: false` takes
/// a shared lock, for readers that only need no admin dir to be half-made.
pub fn admin_lock(common_dir: &Path, exclusive: bool) -> Result<AdminLock, GitError> {
    use std::os::fd::AsRawFd;
    let path = admin_lock_path(common_dir);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(io_err("create the directory", parent))?;
    }
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_err("open the worktree admin lock", &path))?;
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    loop {
        // SAFETY: flock on a descriptor `file` owns; no memory is shared.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(AdminLock { _file: file });
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(io_err("lock the worktree admin lock", &path)(err));
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

/// Removes the admin dirs of run `run`'s lanes (`worktrees/orch-<run>-<k>`)
/// that a kill left broken: no `gitdir`, `commondir` or `HEAD` file (killed
/// mid-`worktree add`), a `gitdir` naming a worktree that is gone, or
/// anything else libgit2 cannot open and validate. Other runs' and the user's
/// worktrees are never touched. Returns the names removed.
pub fn prune_broken_lanes(common_dir: &Path, run: &str) -> Result<Vec<String>, GitError> {
    let _admin = admin_lock(common_dir, true)?;
    let dir = common_dir.join("worktrees");
    let mut pruned = Vec::new();
    let repo = open_at(common_dir).ok();
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
pub fn remove_stale_ref_locks(
    common_dir: &Path,
    prefixes: &[String],
) -> Result<Vec<PathBuf>, GitError> {
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

/// A path from libgit2 (raw bytes, `/`-separated) as a native path.
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

fn same_path(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a.components().eq(b.components()),
    }
}
