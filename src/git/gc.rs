//! Clearing away what runs leave in the repository: a run's lanes (linked
//! worktrees under `<git>/orch/worktrees/<run>/lane-k`, admin entries
//! `orch-<run>-<k>`, branches `orch-lanes/<run>/<k>`) and its stage branches
//! (`orch/<run>/…`). Whether a run may be cleared (not running) is the
//! caller's question; these functions only do, or list, the git side.

use super::error::GitError;
use super::repo::Repo;
use std::path::PathBuf;

/// One thing removed (or, in a dry run, that would be).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removed {
    /// A linked worktree (lane), by its directory.
    Worktree(PathBuf),
    /// A branch, by its short name.
    Branch(String),
}

impl Repo {
    /// The directory holding run `run_id`'s lanes.
    pub fn lanes_root(&self, run_id: &str) -> PathBuf {
        let common_dir = self.common_dir();
        common_dir.join("orch").join("worktrees").join(run_id)
    }

    /// Run ids that have a lanes directory (also those whose record is gone).
    pub fn runs_with_lanes(&self) -> Vec<String> {
        let common_dir = self.common_dir();
        let Ok(entries) = std::fs::read_dir(common_dir.join("orch").join("worktrees")) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = entries
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        ids.sort();
        ids
    }

    /// Removes (or, with `dry_run`, lists) the lanes of `run_id`: their
    /// worktrees, admin entries and `orch-lanes/<run>/` branches.
    pub fn remove_lanes(&self, run_id: &str, dry_run: bool) -> Result<Vec<Removed>, GitError> {
        let common_dir = self.common_dir();
        let dir = self.lanes_root(run_id);
        let mut removed = Vec::new();
        let mut lanes: Vec<(String, PathBuf)> = Vec::new();
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let file = entry.file_name();
                if let Some(k) = file.to_str().and_then(|n| n.strip_prefix("lane-")) {
                    lanes.push((format!("orch-{run_id}-{k}"), entry.path()));
                }
            }
        }
        // Admin entries whose directory is already gone.
        if let Ok(entries) = std::fs::read_dir(common_dir.join("worktrees")) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Some(k) = name.strip_prefix(&format!("orch-{run_id}-")) {
                    let path = dir.join(format!("lane-{k}"));
                    if !lanes.iter().any(|(n, _)| *n == name) {
                        lanes.push((name, path));
                    }
                }
            }
        }
        lanes.sort();
        for (name, path) in lanes {
            if !dry_run {
                self.remove_worktree(&name, &path)?;
            }
            removed.push(Removed::Worktree(path));
        }
        for (branch, _) in self.list_branches(&format!("orch-lanes/{run_id}/"))? {
            if !dry_run {
                self.delete_branch(&branch)?;
            }
            removed.push(Removed::Branch(branch));
        }
        if !dry_run {
            let _ = std::fs::remove_dir(&dir);
        }
        Ok(removed)
    }

    /// Removes (or lists) run `run_id`'s stage branches `orch/<run>/…`, keeping
    /// the PR branch `orch/<run>/pr` unless `include_pr`.
    pub fn remove_run_branches(
        &self,
        run_id: &str,
        include_pr: bool,
        dry_run: bool,
    ) -> Result<Vec<Removed>, GitError> {
        let pr = format!("orch/{run_id}/pr");
        let mut removed = Vec::new();
        for (branch, _) in self.list_branches(&format!("orch/{run_id}/"))? {
            if branch == pr && !include_pr {
                continue;
            }
            if !dry_run {
                self.delete_branch(&branch)?;
            }
            removed.push(Removed::Branch(branch));
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::testutil::TestRepo;

    #[test]
    fn run_branches_go_and_the_pr_branch_stays_unless_asked() {
        let repo = TestRepo::new();
        let common = repo.git_dir();
        for b in [
            "orch/r1/code",
            "orch/r1/code.v1",
            "orch/r1/pr",
            "orch/r2/code",
        ] {
            repo.git(&["branch", b]);
        }
        let listed = Repo::at(&common)
            .remove_run_branches("r1", false, true)
            .unwrap();
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert!(
            repo.git(&["branch", "--list", "orch/r1/*"])
                .contains("code.v1")
        );
        Repo::at(&common)
            .remove_run_branches("r1", false, false)
            .unwrap();
        let left = repo.git(&["branch", "--list", "orch/*"]);
        assert!(
            left.contains("orch/r1/pr") && left.contains("orch/r2/code"),
            "{left}"
        );
        assert!(!left.contains("orch/r1/code"), "{left}");
        Repo::at(&common)
            .remove_run_branches("r1", true, false)
            .unwrap();
        assert!(!repo.git(&["branch", "--list", "orch/r1/*"]).contains("pr"));
    }
}
