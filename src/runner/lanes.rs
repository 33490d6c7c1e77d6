//! Lanes: the run's pool of linked worktrees. A stage borrows a lane, which
//! is reset to the stage's start commit, and gives it back when it is done;
//! sequential stages therefore reuse one checkout, and only stages running
//! side by side cost an extra worktree each (creating one is a full checkout,
//! the most expensive git step of a run).
//!
//! Lane `k` of run `R` is the worktree `.git/orch/worktrees/R/lane-k` on the
//! branch `orch-lanes/R/k` (outside `orch/R/`, so it can never collide with a
//! stage branch). Lanes are removed when the run succeeds; a failed or
//! interrupted run keeps them for inspection, and `resume` clears them.

use super::{RunError, blocking};
use crate::git;
use std::path::{Path, PathBuf};

/// One worktree of the pool.
#[derive(Debug, Clone)]
pub(crate) struct Lane {
    /// The worktree's directory.
    pub path: PathBuf,
    /// Its admin name (`orch-<run>-<k>`).
    pub name: String,
    /// The branch it has checked out.
    pub branch: String,
}

/// The pool of a run's lanes.
pub(crate) struct Lanes {
    common: PathBuf,
    run_id: String,
    free: Vec<Lane>,
    created: Vec<Lane>,
}

/// The directory holding a run's lanes.
pub(crate) fn lanes_dir(common: &Path, run_id: &str) -> PathBuf {
    common.join("orch").join("worktrees").join(run_id)
}

impl Lanes {
    /// An empty pool.
    pub(crate) fn new(common: &Path, run_id: &str) -> Lanes {
        Lanes {
            common: common.to_path_buf(),
            run_id: run_id.to_owned(),
            free: Vec::new(),
            created: Vec::new(),
        }
    }

    /// A lane checked out at `start`: a free one reset there, or a new one.
    pub(crate) async fn acquire(&mut self, start: &str) -> Result<Lane, RunError> {
        if let Some(lane) = self.free.pop() {
            let (path, sha) = (lane.path.clone(), start.to_owned());
            blocking(move || git::reset_worktree(&path, &sha)).await?;
            return Ok(lane);
        }
        let k = self.created.len() + 1;
        let lane = Lane {
            path: lanes_dir(&self.common, &self.run_id).join(format!("lane-{k}")),
            name: format!("orch-{}-{k}", self.run_id),
            branch: format!("orch-lanes/{}/{k}", self.run_id),
        };
        let (c, l, sha) = (self.common.clone(), lane.clone(), start.to_owned());
        blocking(move || git::create_worktree(&c, &l.name, &l.path, &l.branch, &sha)).await?;
        self.created.push(lane.clone());
        Ok(lane)
    }

    /// Gives a lane back to the pool.
    pub(crate) fn release(&mut self, lane: Lane) {
        self.free.push(lane);
    }

    /// Removes every lane this pool created (worktrees and lane branches).
    pub(crate) async fn remove_all(&mut self) -> Result<(), RunError> {
        self.free.clear();
        self.created.clear();
        clear_stale(&self.common, &self.run_id).await
    }
}

/// Removes whatever lanes of `run_id` exist on disk or as branches (after a
/// crash, or at the end of a successful run).
pub(crate) async fn clear_stale(common: &Path, run_id: &str) -> Result<(), RunError> {
    let (c, run) = (common.to_path_buf(), run_id.to_owned());
    blocking(move || {
        let dir = lanes_dir(&c, &run);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let file = entry.file_name();
                let Some(k) = file.to_str().and_then(|n| n.strip_prefix("lane-")) else {
                    continue;
                };
                git::remove_worktree(&c, &format!("orch-{run}-{k}"), &entry.path())?;
            }
        }
        // Admin entries whose directory is already gone.
        if let Ok(entries) = std::fs::read_dir(c.join("worktrees")) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Some(k) = name.strip_prefix(&format!("orch-{run}-")) {
                    git::remove_worktree(&c, &name, &dir.join(format!("lane-{k}")))?;
                }
            }
        }
        for (branch, _) in git::list_branches(&c, &format!("orch-lanes/{run}/"))? {
            git::delete_branch(&c, &branch)?;
        }
        let _ = std::fs::remove_dir(&dir);
        Ok(())
    })
    .await
}
