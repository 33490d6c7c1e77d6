//! The read-only guard of `bash` in a subagent: a read-only role (explore)
//! works in its parent's worktree, so what its `bash` commands change would
//! end up in the parent stage's commit. The guard snapshots the worktree's changed files
//! before each command and puts back whatever the command changed.
//!
//! A snapshot holds the content of every file `git status` lists (modified,
//! new, deleted; ignored files are out of scope, like stage commits); a file
//! not listed equals `HEAD`, so it is restored from there. Cost: one status
//! walk before and one after each command, plus reading the changed files.
//!
//! Where Landlock is available the read-only sandbox profile makes the lane
//! unwritable for the command itself, and this guard is not used
//! ([`crate::sandbox::ToolSandbox::enforces_read_only`]); it stays the
//! fallback without Landlock.
//!
//! Limit: a writing sibling agent changing the same worktree while the
//! command runs would have its changes undone too; parents should not mix a
//! writing child with others in one turn.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::outcome::{ToolError, ToolOutcome, join_failure};
use crate::text::one_line;

/// Files larger than this are compared by size and mtime only, and are not
/// restored from the snapshot.
const MAX_SNAPSHOT_FILE: u64 = 8 << 20;

/// The changed files of a worktree at one moment: path → content (`None` =
/// deleted, or too large to keep).
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    files: HashMap<String, Option<Vec<u8>>>,
    ok: bool,
    /// Why the snapshot task itself failed (panicked, cancelled): orch's fault.
    fault: Option<String>,
}

/// Undoes the worktree changes of a read-only agent's commands.
#[derive(Debug)]
pub struct ReadOnlyGuard {
    root: PathBuf,
}

impl ReadOnlyGuard {
    /// A guard over the worktree at `root`.
    pub fn new(root: &Path) -> Self {
        ReadOnlyGuard {
            root: root.to_path_buf(),
        }
    }

    /// The worktree's changed files now.
    pub async fn snapshot(&self) -> Snapshot {
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || take(&root))
            .await
            .unwrap_or_else(|e| Snapshot {
                fault: Some(join_failure(&e)),
                ..Snapshot::default()
            })
    }

    /// Puts back what changed since `before`; when anything did, the outcome
    /// becomes an error that names the discarded paths. A failed guard task
    /// is [`ToolError::Fatal`].
    pub async fn discard_changes(
        &self,
        before: Snapshot,
        outcome: Result<ToolOutcome, ToolError>,
    ) -> Result<ToolOutcome, ToolError> {
        if let Some(fault) = before.fault {
            return Err(ToolError::Fatal(fault));
        }
        let root = self.root.clone();
        let discarded = tokio::task::spawn_blocking(move || restore(&root, &before))
            .await
            .map_err(|e| ToolError::Fatal(join_failure(&e)))?;
        let note = match discarded {
            Ok(paths) if paths.is_empty() => return outcome,
            Ok(paths) => format!(
                "this role is read-only: the command changed {}; those changes were discarded",
                paths.join(", ")
            ),
            Err(why) => {
                format!("this role is read-only and its changes could not be checked: {why}")
            }
        };
        let mut out = match outcome {
            Ok(o) => o,
            Err(ToolError::RespondToModel(msg)) => ToolOutcome::error("bash", &msg),
            Err(fatal) => return Err(fatal),
        };
        out.is_error = true;
        out.content = format!("error: bash: {note}\n{}", out.content);
        out.summary = one_line(&format!("bash → discarded: {note}"), 120);
        out.policy = Some(format!("read-only: {note}"));
        Ok(out)
    }
}

fn take(root: &Path) -> Snapshot {
    let Ok(paths) = changed_paths(root) else {
        return Snapshot::default();
    };
    let files = paths
        .into_iter()
        .map(|p| {
            let full = root.join(&p);
            let content = match std::fs::metadata(&full) {
                Ok(m) if m.is_file() && m.len() <= MAX_SNAPSHOT_FILE => std::fs::read(&full).ok(),
                _ => None,
            };
            (p, content)
        })
        .collect();
    Snapshot {
        files,
        ok: true,
        fault: None,
    }
}

/// Paths `git status` lists (the one status walk of [`crate::git`]).
fn changed_paths(root: &Path) -> Result<Vec<String>, crate::git::GitError> {
    crate::git::status_paths(root)
}

/// Restores every path that differs from `before`; returns those paths.
fn restore(root: &Path, before: &Snapshot) -> Result<Vec<String>, String> {
    if !before.ok {
        return Err("no snapshot could be taken before the command".to_owned());
    }
    let now = changed_paths(root).map_err(|e| e.to_string())?;
    let mut candidates: Vec<String> = now;
    candidates.extend(before.files.keys().cloned());
    candidates.sort();
    candidates.dedup();
    let repo = crate::git::Repo::at(root);
    // Opened here, so that a root that is no repository fails before any path.
    repo.git2().map_err(|e| e.to_string())?;
    let mut discarded = Vec::new();
    for rel in candidates {
        let full = root.join(&rel);
        let current = std::fs::read(&full).ok();
        let wanted: Option<Vec<u8>> = match before.files.get(&rel) {
            Some(content) => content.clone(),
            // Not listed before: it equalled HEAD (or did not exist).
            None => repo
                .file_at_head(Path::new(&rel))
                .map_err(|e| e.to_string())?,
        };
        if current == wanted {
            continue;
        }
        let put_back = match &wanted {
            Some(bytes) => full
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|_| std::fs::write(&full, bytes)),
            None => std::fs::remove_file(&full).or_else(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    Ok(())
                } else {
                    Err(e)
                }
            }),
        };
        if let Err(e) = put_back {
            return Err(format!("{rel}: {e}"));
        }
        discarded.push(rel);
    }
    Ok(discarded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@e")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@e")
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    }

    #[tokio::test]
    async fn changes_of_a_command_are_put_back_and_the_parents_are_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        git(root, &["init", "-q"]);
        std::fs::write(root.join("a.txt"), "a\n").unwrap();
        std::fs::write(root.join("b.txt"), "b\n").unwrap();
        std::fs::write(root.join(".gitignore"), "build/\n").unwrap();
        git(root, &["add", "-A"]);
        git(root, &["commit", "-qm", "init"]);
        // The parent's uncommitted work.
        std::fs::write(root.join("a.txt"), "parent edit\n").unwrap();
        std::fs::write(root.join("parent-new.txt"), "p\n").unwrap();

        let guard = ReadOnlyGuard::new(root);
        let before = guard.snapshot().await;
        // What a read-only child's command does.
        std::fs::write(root.join("a.txt"), "child edit\n").unwrap();
        std::fs::remove_file(root.join("b.txt")).unwrap();
        std::fs::remove_file(root.join("parent-new.txt")).unwrap();
        std::fs::write(root.join("child-new.txt"), "c\n").unwrap();
        std::fs::create_dir_all(root.join("build")).unwrap();
        std::fs::write(root.join("build/out"), "ignored\n").unwrap();
        let out = guard
            .discard_changes(before, Ok(ToolOutcome::ok("done\n".into(), "bash".into())))
            .await
            .unwrap();
        assert!(out.is_error);
        assert!(out.content.contains("discarded"), "{}", out.content);
        for p in ["a.txt", "b.txt", "child-new.txt", "parent-new.txt"] {
            assert!(out.content.contains(p), "{p}: {}", out.content);
        }
        assert!(!out.content.contains("build/out"), "{}", out.content);
        assert_eq!(
            std::fs::read_to_string(root.join("a.txt")).unwrap(),
            "parent edit\n"
        );
        assert_eq!(std::fs::read_to_string(root.join("b.txt")).unwrap(), "b\n");
        assert_eq!(
            std::fs::read_to_string(root.join("parent-new.txt")).unwrap(),
            "p\n"
        );
        assert!(!root.join("child-new.txt").exists());

        // A command that changes nothing keeps its outcome.
        let before = guard.snapshot().await;
        let ok = ToolOutcome::ok("x\n".into(), "bash".into());
        let out = guard.discard_changes(before, Ok(ok.clone())).await.unwrap();
        assert_eq!(out, ok);
    }
}
