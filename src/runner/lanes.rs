//! Lanes: the run's pool of linked worktrees. A stage borrows a lane, which
//! is reset to the stage's start commit, and gives it back when it is done;
//! sequential stages therefore reuse one checkout, and only stages running
//! side by side cost an extra worktree each (creating one is a full checkout,
//! the most expensive git step of a run). A lane that is known to be clean at
//! the start commit already (the previous stage in it committed exactly that)
//! is not reset at all, so a chain of stages costs no checkout per stage.
//! The first lane is created while the run record is being written.
//!
//! No process of a stage holds its lane once the stage ended: every tool
//! call (and subagent) returns only when every process it started is gone
//! ([`crate::exec`]'s per-call reaper, `setsid` and daemons included), so a
//! lane given back — to the next stage or to the pool — is written by no
//! one but its next holder.
//!
//! With the lane pool on (the default; `[lanes] pool = N` in `orch.toml`,
//! `--no-lane-pool` or `pool = 0` turn it off), every lane is a slot of the
//! repository's pool of warm lanes ([`crate::git::pool`]): a new lane is a
//! free pooled one moved to its start commit by the difference (or a new
//! slot), held under its lease for the whole run and handed back, detached
//! at its last stage commit, when the run ends; the pool is then trimmed to
//! its bound. The next run's lane costs a checkout of what changed.
//!
//! Without the pool, lane `k` of run `R` is the worktree
//! `.git/orch/worktrees/R/lane-k` (admin name `orch-R-k`), its `HEAD`
//! detached like a pooled lane's (runs of older versions left branches
//! `orch-lanes/R/k`, still deleted with the run's lanes). A finished run's
//! lanes are moved into the trash at once (a rename) and deleted after the
//! summary is out, in the background; an interrupted run keeps them, and
//! `resume` clears them.

use super::error::{RunError, blocking};
use crate::git::{self, GitError, pool};
use crate::ids::RunId;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// One worktree of the pool.
#[derive(Debug, Clone)]
pub(crate) struct Lane {
    /// The worktree's directory.
    pub path: PathBuf,
    /// Its admin name (`orch-<run>-<k>`).
    pub name: String,
    /// The commit its tree is known to match exactly (clean, nothing
    /// untracked but ignored files), if known.
    pub clean_at: Option<git::CommitId>,
    /// How the last `acquire` readied it: `created`, `warm` (a pooled lane
    /// moved to the start commit by the difference), `reset` or `clean`
    /// (already at the start commit: no git work at all).
    pub checkout: &'static str,
    /// Its readying and change watcher, recording from the stage's start
    /// commit (none when watchers are off or inotify is unavailable): the
    /// stage end looks at what it marked instead of walking the lane.
    pub watch: WatchSlot,
}

/// A lane's readying as it runs beside the stage's first model request:
/// its index brought up to date (a warm move leaves it to a pending record:
/// ~30 ms at 100,000 files) and its change watcher started (adding ~1,000
/// inotify watches there is tens of milliseconds). Whatever runs in the lane
/// waits for it first ([`WatchSlot::get`]; the tools through
/// [`WatchSlot::barrier`]), so nothing reads a stale index and the watcher
/// never misses a change.
#[derive(Clone)]
pub(crate) struct WatchSlot(
    futures_util::future::Shared<futures_util::future::BoxFuture<'static, Readiness>>,
);

/// What a lane's readying left.
#[derive(Clone, Default)]
pub(crate) struct Readiness {
    /// The change watcher, if there is one.
    watch: Option<std::sync::Arc<git::watch::LaneWatch>>,
    /// Why the lane could not be readied (its strays not cleaned): the
    /// stage must not commit what it holds.
    failed: Option<String>,
}

impl std::fmt::Debug for WatchSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WatchSlot")
    }
}

impl WatchSlot {
    /// No watcher (the stage end walks the lane).
    pub(crate) fn none() -> WatchSlot {
        use futures_util::FutureExt as _;
        WatchSlot(
            futures_util::future::ready(Readiness::default())
                .boxed()
                .shared(),
        )
    }

    /// The watcher, once it is up (or `None`: there is none).
    pub(crate) async fn get(&self) -> Option<std::sync::Arc<git::watch::LaneWatch>> {
        self.0.clone().await.watch
    }

    /// Why the lane's readying failed, once it ended (`None`: it did not).
    pub(crate) async fn failure(&self) -> Option<String> {
        self.0.clone().await.failed
    }

    /// A future that is ready once the watcher is up, for the tools.
    pub(crate) fn barrier(&self) -> crate::tools::Barrier {
        use futures_util::FutureExt as _;
        let slot = self.clone();
        async move {
            slot.get().await;
        }
        .boxed()
        .shared()
    }
}

/// Gives `lane`, which holds exactly `start` and in which nothing runs, a
/// watcher recording from `start`: its own, restarted, or a new one. It
/// starts in the background; see [`WatchSlot`]. `clean`: the lane was just
/// taken warm from the pool and still holds its last user's untracked
/// files; they are removed first ([`git::clean_moved`]), before the watcher
/// starts and before anything reads the lane.
fn watch_from(common: &Path, lane: &mut Lane, start: &git::CommitId, clean: bool) {
    use futures_util::FutureExt as _;
    let watching = git::watch::enabled();
    let (old, path, c, s) = (
        std::mem::replace(&mut lane.watch, WatchSlot::none()),
        lane.path.clone(),
        common.to_path_buf(),
        start.clone(),
    );
    let task = tokio::spawn(async move {
        let old = old.get().await;
        tokio::task::spawn_blocking(move || {
            if clean && let Err(e) = git::clean_moved(&path) {
                return Readiness {
                    watch: None,
                    failed: Some(format!("failed to clean the pooled lane: failed to {e}")),
                };
            }
            Readiness {
                watch: ready_lane(&path, &c, &s, old, watching),
                failed: None,
            }
        })
        .await
        .unwrap_or_else(|e| Readiness {
            watch: None,
            failed: Some(format!("the lane's readying failed: {e}")),
        })
    });
    lane.watch = WatchSlot(task.map(|r| r.unwrap_or_default()).boxed().shared());
}

/// The blocking part of [`watch_from`]: the watcher restarted or started.
fn ready_lane(
    path: &Path,
    common: &Path,
    start: &git::CommitId,
    old: Option<std::sync::Arc<git::watch::LaneWatch>>,
    watching: bool,
) -> Option<std::sync::Arc<git::watch::LaneWatch>> {
    if !watching {
        return None;
    }
    if let Some(w) = old.filter(|w| w.restart(start)) {
        return Some(w);
    }
    // Tests (debug builds only, like the kill points): a watcher slow to
    // start, which the tools must wait for.
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("ORCH_TEST_WATCH_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    let started = std::time::Instant::now();
    match git::watch::LaneWatch::start(path, common, start) {
        Ok(w) => {
            tracing::debug!(
                lane = %path.display(),
                elapsed_us = started.elapsed().as_micros() as u64,
                "lane watcher started"
            );
            Some(std::sync::Arc::new(w))
        }
        Err(e) => {
            tracing::debug!(lane = %path.display(), "no lane watcher: {e}");
            None
        }
    }
}

/// The pool of a run's lanes, shared by the stage tasks: a task takes a lane
/// when it starts (creating one if none is free, outside the lock, so
/// parallel stages check out their worktrees at the same time).
pub(crate) struct Lanes {
    common: PathBuf,
    run_id: RunId,
    /// How many pooled lanes the repository keeps; 0: no pool.
    pool_bound: usize,
    inner: Mutex<Pool>,
    /// The first lane, being created ahead of need.
    prewarm: tokio::sync::Mutex<Option<tokio::task::JoinHandle<Result<Lane, RunError>>>>,
}

#[derive(Default)]
struct Pool {
    free: Vec<Lane>,
    created: usize,
    /// The leases of the pooled lanes this run holds.
    leases: Vec<pool::Lease>,
}

/// The directory holding a run's lanes.
pub(crate) fn lanes_dir(common: &Path, run_id: &RunId) -> PathBuf {
    common.join("orch").join("worktrees").join(run_id.as_str())
}

impl Lanes {
    /// An empty set of lanes; `pool_bound` pooled lanes are kept for later
    /// runs (0: no pool, the run's lanes are its own).
    pub(crate) fn new(common: &Path, run_id: &RunId, pool_bound: usize) -> Lanes {
        Lanes {
            common: common.to_path_buf(),
            run_id: run_id.clone(),
            pool_bound,
            inner: Mutex::new(Pool::default()),
            prewarm: tokio::sync::Mutex::new(None),
        }
    }

    /// Starts creating a lane at `start` in the background, so the first
    /// stage finds it ready.
    pub(crate) async fn prewarm(self: &std::sync::Arc<Self>, start: &git::CommitId) {
        let k = {
            let mut pool = self.pool();
            pool.created += 1;
            pool.created
        };
        let (this, sha) = (std::sync::Arc::clone(self), start.clone());
        *self.prewarm.lock().await = Some(tokio::spawn(async move {
            let mut lane = this.create(k, &sha).await?;
            lane.checkout = if lane.checkout == "warm" {
                "prewarmed-warm"
            } else {
                "prewarmed"
            };
            Ok(lane)
        }));
    }

    async fn create(&self, k: usize, start: &git::CommitId) -> Result<Lane, RunError> {
        if self.pool_bound > 0 {
            let (c, sha) = (self.common.clone(), start.clone());
            let started = std::time::Instant::now();
            let (lease, readied, note) =
                blocking(move || git::Repo::at(c).pool().take(&sha)).await?;
            tracing::debug!(
                lane = %lease.name,
                elapsed_us = started.elapsed().as_micros() as u64,
                "pooled lane taken"
            );
            if !note.is_empty() {
                tracing::debug!(lane = %lease.name, "pooled lane not reused: {note}");
            }
            let mut lane = Lane {
                path: lease.path.clone(),
                name: lease.name.clone(),
                clean_at: Some(start.clone()),
                checkout: match readied {
                    pool::Readied::Warm => "warm",
                    pool::Readied::Created => "created",
                },
                watch: WatchSlot::none(),
            };
            self.pool().leases.push(lease);
            watch_from(
                &self.common,
                &mut lane,
                start,
                readied == pool::Readied::Warm,
            );
            return Ok(lane);
        }
        let mut lane = Lane {
            path: lanes_dir(&self.common, &self.run_id).join(format!("lane-{k}")),
            name: format!("orch-{}-{k}", self.run_id),
            clean_at: Some(start.clone()),
            checkout: "created",
            watch: WatchSlot::none(),
        };
        let (c, l, sha) = (self.common.clone(), lane.clone(), start.clone());
        blocking(move || git::Repo::at(&c).create_worktree(&l.name, &l.path, &sha)).await?;
        watch_from(&self.common, &mut lane, start, false);
        Ok(lane)
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A lane checked out at `start`: a free one reset there, or a new one.
    pub(crate) async fn acquire(&self, start: &git::CommitId) -> Result<Lane, RunError> {
        if let Some(handle) = self.prewarm.lock().await.take() {
            let lane = handle.await.map_err(|e| RunError::Join(e.to_string()))??;
            self.release(lane);
        }
        self.prefer(start);
        let reused = {
            let mut pool = self.pool();
            match pool.free.pop() {
                Some(lane) => Ok(lane),
                None => {
                    pool.created += 1;
                    Err(pool.created)
                }
            }
        };
        match reused {
            Ok(mut lane) if lane.clean_at.as_ref() == Some(start) => {
                // A lane made ahead of need is still "created" (or "warm")
                // on first use, and its readying is the one started then.
                let fresh = matches!(lane.checkout, "prewarmed" | "prewarmed-warm");
                lane.checkout = match lane.checkout {
                    "prewarmed" => "created",
                    "prewarmed-warm" => "warm",
                    _ => "clean",
                };
                if !fresh {
                    // The last stage's commit left the index to a pending
                    // record: the readying brings it up to date before
                    // anything (tools, setup, verify) reads it.
                    watch_from(&self.common, &mut lane, start, false);
                }
                Ok(lane)
            }
            Ok(mut lane) => {
                // Whatever readying the lane still has in flight ends first.
                lane.watch.get().await;
                let (path, sha) = (lane.path.clone(), start.clone());
                if let Err(e) = blocking(move || git::reset_worktree(&path, &sha)).await {
                    lane.clean_at = None;
                    self.release(lane);
                    return Err(e);
                }
                lane.clean_at = Some(start.clone());
                lane.checkout = "reset";
                watch_from(&self.common, &mut lane, start, false);
                Ok(lane)
            }
            Err(k) => self.create(k, start).await,
        }
    }

    /// Gives a lane back to the pool, preferring (for the next stage that
    /// starts where this one ended) the lanes that need no reset.
    pub(crate) fn release(&self, lane: Lane) {
        self.pool().free.push(lane);
    }

    /// Takes the free lane already clean at `start`, if there is one, to the
    /// top of the pool.
    fn prefer(&self, start: &git::CommitId) {
        let mut pool = self.pool();
        if let Some(i) = pool
            .free
            .iter()
            .position(|l| l.clean_at.as_ref() == Some(start))
        {
            let lane = pool.free.remove(i);
            pool.free.push(lane);
        }
    }

    /// Ends the run's use of its lanes, in O(lanes) renames whatever the
    /// repository's size: pooled lanes are handed back (their leases
    /// dropped; each is detached at its last stage commit; its next taker
    /// moves it with git) and the pool is trimmed to its
    /// bound; the run's own lanes (no pool) are moved into the trash. What
    /// goes to the trash is deleted later ([`pool::Pool::empty_trash`]).
    pub(crate) async fn hand_back(&self) -> Result<(), RunError> {
        if let Some(handle) = self.prewarm.lock().await.take() {
            let _ = handle.await;
        }
        // A lane's readying still running (a stage that ended before it
        // touched the lane) finishes before the lane is let go.
        let readying: Vec<WatchSlot> = self.pool().free.iter().map(|l| l.watch.clone()).collect();
        for slot in readying {
            slot.get().await;
        }
        let Pool { free, leases, .. } = std::mem::take(&mut *self.pool());
        let mut watches = Vec::with_capacity(free.len());
        for lane in &free {
            watches.extend(lane.watch.get().await);
        }
        drop(free);
        let (c, run, bound) = (self.common.clone(), self.run_id.clone(), self.pool_bound);
        blocking(move || {
            // The watchers stop before their lanes are let go.
            git::watch::drop_together(watches);
            drop(leases);
            let repo = git::Repo::at(c);
            repo.pool().trim(bound)?;
            retire_run_lanes(&repo, &run)
        })
        .await
    }
}

/// Moves run `run`'s own lanes (no pool) into the trash in one rename, then
/// drops their admin entries and branches: the files are deleted later.
/// Only call it while holding the run's lock.
fn retire_run_lanes(repo: &git::Repo, run: &RunId) -> Result<(), GitError> {
    let common = repo.common_dir();
    let dir = lanes_dir(common, run);
    if std::fs::symlink_metadata(&dir).is_ok() {
        repo.pool().trash(&dir)?;
    }
    {
        // The admin entries first: while one names a branch, libgit2
        // refuses to delete it.
        let _admin = repo.admin_lock(true)?;
        for entry in std::fs::read_dir(common.join("worktrees"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.strip_prefix(&format!("orch-{run}-")).is_some() {
                let admin = entry.path();
                std::fs::remove_dir_all(&admin).map_err(|source| GitError::Io {
                    op: "remove the worktree admin directory",
                    path: admin,
                    source,
                })?;
            }
        }
    }
    for (branch, _) in repo.list_branches(&format!("orch-lanes/{run}/"))? {
        repo.delete_branch(&branch)?;
    }
    Ok(())
}

/// Removes whatever lanes of `run_id` exist on disk or as branches (after a
/// crash, or at the end of a successful run), healing first what a kill
/// left half-done: stale `*.lock` files under the run's own refs
/// (`orch/<run>/…`, `orch-lanes/<run>/…`, `refs/orch/runs/<run>`), admin dirs of the run's lanes
/// that lack `gitdir` or whose worktree is gone, and lane directories no
/// admin dir claims. Only call it while holding the run's lock (so whatever
/// it finds belongs to a dead process); other runs' and the user's
/// worktrees and refs are never touched.
pub(crate) async fn clear_stale(common: &Path, run_id: &RunId) -> Result<(), RunError> {
    let (c, run) = (common.to_path_buf(), run_id.clone());
    blocking(move || {
        let repo = git::Repo::at(&c);
        repo.remove_stale_ref_locks(&[format!("orch/{run}"), format!("orch-lanes/{run}")])?;
        // The run's record ref (`refs/orch/runs/<run>`) is written only by
        // the run lock's holder: a lock file there is a killed one's.
        let run_ref_lock = c.join("refs/orch/runs").join(format!("{run}.lock"));
        match std::fs::remove_file(&run_ref_lock) {
            Ok(()) => tracing::debug!(run = %run, "removed a killed run's run-ref lock"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(GitError::Io {
                    op: "remove the stale ref lock",
                    path: run_ref_lock,
                    source,
                });
            }
        }
        repo.prune_broken_lanes(run.as_str())?;
        // Pooled lanes a kill left half-made (their leases died with it).
        repo.pool().heal()?;
        let dir = lanes_dir(&c, &run);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let file = entry.file_name();
                let Some(k) = file.to_str().and_then(|n| n.strip_prefix("lane-")) else {
                    continue;
                };
                let name = format!("orch-{run}-{k}");
                if c.join("worktrees").join(&name).exists() {
                    repo.remove_worktree(&name, &entry.path())?;
                } else {
                    // A lane directory without an admin dir (a kill between
                    // the checkout and the registration, or a pruned admin
                    // dir): it lies inside the run's own lanes directory.
                    let path = entry.path();
                    std::fs::remove_dir_all(&path).map_err(|source| GitError::Io {
                        op: "remove the orphaned lane directory",
                        path,
                        source,
                    })?;
                }
            }
        }
        // Admin entries whose directory is already gone.
        if let Ok(entries) = std::fs::read_dir(c.join("worktrees")) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Some(k) = name.strip_prefix(&format!("orch-{run}-")) {
                    repo.remove_worktree(&name, &dir.join(format!("lane-{k}")))?;
                }
            }
        }
        for (branch, _) in repo.list_branches(&format!("orch-lanes/{run}/"))? {
            repo.delete_branch(&branch)?;
        }
        let _ = std::fs::remove_dir(&dir);
        Ok(())
    })
    .await
}
