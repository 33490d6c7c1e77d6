//! `refs/orch/memory`: a commit history of `lessons/<id>.md`, read and
//! written with libgit2 straight on the object database. Nothing here
//! touches a working tree, an index, `HEAD` or a branch; the ref update
//! is made under the repository's admin lock (as every orch ref write is)
//! and only moves the ref from the tip the change was built on.

use super::{Lesson, MemoryError, Origin};
use crate::git::{self, GitError, git_err};
use git2::{ErrorCode, Oid, Repository};
use std::path::Path;

/// The ref lessons live on.
pub const MEMORY_REF: &str = "refs/orch/memory";
/// The folder of lessons in the ref's tree.
const LESSONS_DIR: &str = "lessons";

fn tip(repo: &Repository) -> Result<Option<git2::Commit<'_>>, MemoryError> {
    match repo.find_reference(MEMORY_REF) {
        Ok(r) => Ok(Some(
            r.peel_to_commit()
                .map_err(git_err(format!("read {MEMORY_REF}")))?,
        )),
        Err(e) if e.code() == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(git_err(format!("read {MEMORY_REF}"))(e).into()),
    }
}

/// The lessons at the ref's tip (none when it does not exist), by id.
pub fn read(common: &Path) -> Result<Vec<Lesson>, MemoryError> {
    let handle = git::Repo::at(common);
    let repo = handle.git2()?;
    let Some(commit) = tip(repo)? else {
        return Ok(Vec::new());
    };
    let tree = commit
        .tree()
        .map_err(git_err(format!("read the tree of {MEMORY_REF}")))?;
    let Some(entry) = tree.get_name(LESSONS_DIR) else {
        return Ok(Vec::new());
    };
    let dir = repo
        .find_tree(entry.id())
        .map_err(git_err(format!("read {MEMORY_REF}:{LESSONS_DIR}")))?;
    let mut out = Vec::new();
    for e in dir.iter() {
        let Some(name) = e.name().ok().filter(|n| n.ends_with(".md")) else {
            continue;
        };
        let blob = repo
            .find_blob(e.id())
            .map_err(git_err(format!("read {MEMORY_REF}:{LESSONS_DIR}/{name}")))?;
        let text = String::from_utf8_lossy(blob.content());
        let origin = format!("{MEMORY_REF}:{LESSONS_DIR}/{name}");
        out.push(Lesson::parse(&text, &origin, Origin::Ref)?);
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// Writes lessons (new or changed, each to `lessons/<id>.md`) as one
/// commit on the ref, `memory: <verb> <ids>` with `trailers` below; the new
/// commit's SHA. `change` runs under the lock on the lessons at the tip and
/// returns the ones to write (none: no commit, `None`), so a
/// read-modify-write cannot lose a concurrent update.
pub fn update(
    common: &Path,
    verb: &str,
    trailers: &str,
    change: impl FnOnce(&[Lesson]) -> Result<Vec<Lesson>, MemoryError>,
) -> Result<Option<String>, MemoryError> {
    let _admin = git::Repo::at(common).admin_lock(true)?;
    heal_stale_lock(common);
    let current = read(common)?;
    let changed = change(&current)?;
    if changed.is_empty() {
        return Ok(None);
    }
    let ids: Vec<&str> = changed.iter().map(|l| l.id.as_str()).collect();
    let mut message = format!("memory: {verb} {}\n", ids.join(", "));
    if !trailers.trim().is_empty() {
        message.push('\n');
        message.push_str(trailers.trim_end());
        message.push('\n');
    }
    let message = message.as_str();
    let handle = git::Repo::at(common);
    let repo = handle.git2()?;
    let parent = tip(repo)?;
    let op = || format!("write a commit on {MEMORY_REF}");
    let old_dir = parent
        .as_ref()
        .and_then(|c| c.tree().ok())
        .and_then(|t| t.get_name(LESSONS_DIR).map(|e| e.id()))
        .and_then(|id| repo.find_tree(id).ok());
    let mut dir = repo.treebuilder(old_dir.as_ref()).map_err(git_err(op()))?;
    for l in &changed {
        let blob = repo.blob(l.render().as_bytes()).map_err(git_err(op()))?;
        dir.insert(format!("{}.md", l.id), blob, 0o100644)
            .map_err(git_err(op()))?;
    }
    let dir_id = dir.write().map_err(git_err(op()))?;
    let old_root = parent.as_ref().and_then(|c| c.tree().ok());
    let mut root = repo.treebuilder(old_root.as_ref()).map_err(git_err(op()))?;
    root.insert(LESSONS_DIR, dir_id, 0o040000)
        .map_err(git_err(op()))?;
    let root_id = root.write().map_err(git_err(op()))?;
    let tree = repo.find_tree(root_id).map_err(git_err(op()))?;
    let sig = git::signature(repo)?;
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    let oid = repo
        .commit(None, &sig, &sig, message, &tree, &parents)
        .map_err(git_err(op()))?;
    set_ref(repo, oid, parent.as_ref().map(|c| c.id()), message)?;
    Ok(Some(oid.to_string()))
}

/// Removes a `refs/orch/memory.lock` left by an orch killed while it moved
/// the ref (libgit2 writes the lock, then renames it over the ref). Called
/// under the repository's exclusive admin lock, which every orch holds for
/// every write of this ref: no live orch can be holding this lock then, so
/// one that exists is a dead process's. (Plain git writing this ref at the
/// same moment — a `git fetch` into `refs/orch/memory` — is not orch's to
/// know; orch never moves the ref but from the tip it read, so such a race
/// fails one write instead of losing one.)
fn heal_stale_lock(common: &Path) {
    let lock = common.join(format!("{MEMORY_REF}.lock"));
    match std::fs::remove_file(&lock) {
        Ok(()) => tracing::warn!(
            "removed {} left by a killed orch (no orch holds the repository lock)",
            lock.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::debug!("could not remove {}: {e}", lock.display()),
    }
}

/// Moves the ref to `new` only if it still points at `old` (creates it
/// when `old` is `None`).
fn set_ref(repo: &Repository, new: Oid, old: Option<Oid>, message: &str) -> Result<(), GitError> {
    let subject = message.lines().next().unwrap_or("orch memory");
    let op = || format!("update {MEMORY_REF}");
    match old {
        Some(old) => repo
            .reference_matching(MEMORY_REF, new, true, old, subject)
            .map(|_| ())
            .map_err(git_err(op())),
        None => repo
            .reference(MEMORY_REF, new, false, subject)
            .map(|_| ())
            .map_err(git_err(op())),
    }
}

/// One commit of the ref's history.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LogEntry {
    /// The commit.
    pub sha: String,
    /// Its time, RFC 3339.
    pub time: String,
    /// Its author.
    pub author: String,
    /// Its subject.
    pub subject: String,
}

/// The ref's history, newest first.
pub fn log(common: &Path) -> Result<Vec<LogEntry>, MemoryError> {
    let handle = git::Repo::at(common);
    let repo = handle.git2()?;
    let mut out = Vec::new();
    let mut next = tip(repo)?;
    while let Some(c) = next {
        let when = chrono::DateTime::from_timestamp(c.time().seconds(), 0)
            .map(|t| t.to_rfc3339())
            .unwrap_or_default();
        out.push(LogEntry {
            sha: c.id().to_string(),
            time: when,
            author: c.author().name().unwrap_or("").to_owned(),
            subject: c.summary().ok().flatten().unwrap_or("").to_owned(),
        });
        next = c.parent(0).ok();
    }
    Ok(out)
}
