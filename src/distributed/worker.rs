//! `orch stage`'s worker: one stage of a run, on any machine, through the
//! run's git remote.
//!
//! 1. **Fetch** (one round trip): the run ref, the run's base commit and
//!    every stage branch of the run, into the worker's clone.
//! 2. **Settle and check**: stages whose needs are done but that cannot run
//!    (a rework round nobody asked for, a stage after a failure) are marked
//!    skipped or blocked, as the local scheduler does; the stage must be
//!    pending with every need done, and not claimed by another worker.
//! 3. **Claim** (one round trip): the run ref with the stage `running` and
//!    `claims/<stage>.json` (worker, time) is pushed with a lease on the
//!    value fetched. A lease that no longer holds means someone else wrote
//!    the run: fetch again and re-check (the other write may have been
//!    another stage's); a claim by another worker ends the command with
//!    [`Outcome::Claimed`], having changed nothing.
//! 4. **Run** exactly that stage in a local lane (the runner's resume path,
//!    restricted to one stage).
//! 5. **Publish** (one round trip, more on contention): the stage branch and
//!    the run ref — the remote's latest record with this stage's record and
//!    files merged in — in one atomic push with a lease. The worker whose
//!    publish completes the run also writes the final branch and `pr.md`.
//!
//! Invariants: the remote run ref only ever moves by a lease-checked push;
//! a worker writes only its own stage's record (and the settling of stages
//! whose outcome is already decided); a worker killed after its claim
//! leaves the claim, which the same worker (or `--reclaim` after the claim
//! timeout) takes over.

use super::DistError;
use super::remote::{self, Pushed};
use super::runref::{self, run_ref};
use crate::ids::RunId;
use crate::runlog::{RunDir, RunState, RunStatus, StageRecord, StageStatus};
use crate::runner::{self, Plan, ResumeOptions, Session};
use crate::ui::Ui;
use git2::{FileMode, Oid, Repository};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How many times a claim or a publish is retried when another worker's
/// write got in between (each retry is one more fetch and push).
const LEASE_ATTEMPTS: usize = 32;

/// Where the remote's run ref is kept after a fetch.
fn remote_run_ref(run_id: &RunId) -> String {
    format!("refs/orch/remote-runs/{run_id}")
}

/// The ref that keeps a run's base commit on the remote.
pub(crate) fn base_ref(run_id: &RunId) -> String {
    format!("refs/orch/run-bases/{run_id}")
}

/// A stage's claim, `claims/<stage>.json` in the run ref's tree.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Claim {
    /// Who claimed it (`--worker`).
    pub worker: String,
    /// RFC 3339 time of the claim.
    pub claimed_at: String,
}

/// What `orch stage` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct StageJob {
    /// The clone to work in (its working tree is never touched).
    pub repo: PathBuf,
    /// The remote the run lives on.
    pub url: String,
    /// The run.
    pub run_id: RunId,
    /// The stage.
    pub stage: String,
    /// This worker's identity.
    pub worker: String,
    /// Take over another worker's claim older than `claim_timeout`.
    pub reclaim: bool,
    /// How old a claim must be before `reclaim` takes it over.
    pub claim_timeout: Duration,
}

/// Time spent on the remote, per round trip kind.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct RoundTrips {
    /// Fetches, in milliseconds (all of them).
    pub fetch_ms: u64,
    /// The claim push(es).
    pub claim_ms: u64,
    /// The publish push(es).
    pub publish_ms: u64,
    /// How many fetches and pushes there were.
    pub fetches: u32,
    /// Pushes, claim and publish.
    pub pushes: u32,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// How `orch stage` ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// This worker ran the stage; its record as published.
    Ran {
        /// The stage's record.
        record: Box<StageRecord>,
        /// The run's status after the publish.
        run_status: RunStatus,
        /// The stage failed on the model backend.
        model_failed: bool,
        /// The stage failed on a fault of orch's own.
        internal_failed: bool,
        /// Interrupted (Ctrl-C, SIGTERM): nothing was published, the claim stays.
        interrupted: bool,
    },
    /// Nothing to do: the stage already ended (succeeded or skipped; possibly
    /// just now, settled by this worker).
    Done(StageStatus),
    /// The stage cannot run: it failed or was blocked by a failed need.
    NotRunnable(StageStatus, Option<String>),
    /// A stage it needs has not finished.
    NotReady(Vec<String>),
    /// Another worker holds the claim (or won the race for it).
    Claimed(Claim),
}

/// The fetched run: its remote tip and the record in it.
pub(crate) struct Fetched {
    job: StageJob,
    common: PathBuf,
    tip: Oid,
    /// The run's state as the remote has it.
    pub state: RunState,
    /// The run's frozen plan.
    pub plan: Plan,
    trips: RoundTrips,
}

fn blocking_io<T>(f: impl FnOnce() -> Result<T, DistError>) -> Result<T, DistError> {
    // The worker is one stage's sequential script: its git steps run on
    // the runtime's blocking pool through `block_in_place`.
    tokio::task::block_in_place(f)
}

fn git2_err(op: impl Into<String>) -> impl FnOnce(git2::Error) -> DistError {
    let op = op.into();
    move |e| DistError::Git(crate::git::git_err(op)(e))
}

/// The refspecs of a worker's fetch: the run ref, the base, the run's branches.
fn run_refspecs(run_id: &RunId) -> Vec<String> {
    vec![
        format!("+{}:{}", run_ref(run_id), remote_run_ref(run_id)),
        format!("+{0}:{0}", base_ref(run_id)),
        format!("+refs/heads/orch/{run_id}/*:refs/heads/orch/{run_id}/*"),
    ]
}

/// Reads a blob of `tree` as text.
fn read_blob(
    repo: &Repository,
    tree: &git2::Tree<'_>,
    path: &str,
) -> Result<Option<Vec<u8>>, DistError> {
    let Ok(entry) = tree.get_path(Path::new(path)) else {
        return Ok(None);
    };
    let blob = repo
        .find_blob(entry.id())
        .map_err(git2_err(format!("read `{path}` of the run ref")))?;
    Ok(Some(blob.content().to_vec()))
}

fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, DistError> {
    serde_json::from_slice(bytes)
        .map_err(|e| DistError::Refused(format!("read `{what}` of the run ref: {e}")))
}

/// The state, plan and claim of `stage` in the commit `tip`.
fn read_record(
    repo: &Repository,
    tip: Oid,
    stage: &str,
) -> Result<(RunState, Plan, Option<Claim>), DistError> {
    let commit = repo
        .find_commit(tip)
        .map_err(git2_err("read the run ref"))?;
    let tree = commit.tree().map_err(git2_err("read the run ref"))?;
    let state = read_blob(repo, &tree, "state.json")?
        .ok_or_else(|| DistError::Refused("read the run ref: it has no state.json".into()))?;
    let plan = read_blob(repo, &tree, "plan.json")?
        .ok_or_else(|| DistError::Refused("read the run ref: it has no plan.json".into()))?;
    let claim = match read_blob(repo, &tree, &format!("claims/{stage}.json"))? {
        Some(b) => Some(parse(&b, "claim")?),
        None => None,
    };
    Ok((
        parse(&state, "state.json")?,
        parse(&plan, "plan.json")?,
        claim,
    ))
}

/// Marks what the local scheduler would: a pending stage whose needs are
/// all done is `blocked` when one of them failed, `skipped` when it is a
/// rework round nobody asked for. Returns whether anything changed.
pub(crate) fn settle(plan: &Plan, state: &mut RunState) -> bool {
    let mut changed = false;
    for stage in &plan.pipeline.stages {
        let status = |s: &RunState, id: &str| s.stage(id).map(|r| r.status);
        if status(state, stage.id.as_str()) != Some(StageStatus::Pending) {
            continue;
        }
        let needs: Vec<Option<StageStatus>> = stage
            .needs
            .iter()
            .map(|n| status(state, n.as_str()))
            .collect();
        if needs.iter().any(|s| {
            matches!(
                s,
                Some(StageStatus::Pending | StageStatus::Running | StageStatus::RolledBack)
            )
        }) {
            continue;
        }
        let bad = stage.needs.iter().find(|n| {
            matches!(
                status(state, n.as_str()),
                Some(StageStatus::Failed | StageStatus::Blocked)
            )
        });
        let (new, reason) = if let Some(bad) = bad {
            (
                StageStatus::Blocked,
                format!("upstream stage `{bad}` did not succeed"),
            )
        } else if let Some(reason) = runner::skip_reason(stage, state) {
            (StageStatus::Skipped, reason)
        } else {
            continue;
        };
        if let Some(rec) = state.stage_mut(stage.id.as_str()) {
            rec.status = new;
            rec.reason = Some(reason);
            changed = true;
        }
    }
    changed
}

/// Step 1: fetches the run from the remote (cloning into `job.repo` first
/// when it is not a repository yet).
pub(crate) fn fetch(job: StageJob) -> Result<Fetched, DistError> {
    blocking_io(|| {
        let common = prepare_clone(&job.repo)?;
        let mut trips = RoundTrips::default();
        let run = &job.run_id;
        let took = {
            let _admin = crate::git::Repo::at(&common).admin_lock(true)?;
            remote::fetch(&common, &job.url, &run_refspecs(run)).map_err(|e| match e {
                DistError::Remote { detail, .. } if detail.contains("couldn't find remote ref") => {
                    DistError::Refused(format!(
                        "find run `{run}` on {}: the remote has no `{}` (plan it with `orch run … --remote URL --no-local`)",
                        job.url,
                        run_ref(run)
                    ))
                }
                other => other,
            })?
        };
        trips.fetch_ms += ms(took);
        trips.fetches += 1;
        let handle = crate::git::Repo::at(&common);
        let repo = handle.git2()?;
        let tip = runref::read_run_ref(repo, &remote_run_ref(run))?
            .ok_or_else(|| DistError::Refused(format!("find run `{run}` on {}", job.url)))?;
        let (state, plan, _) = read_record(repo, tip, &job.stage)?;
        if state.stage(&job.stage).is_none() {
            let known: Vec<&str> = state.stages.iter().map(|s| s.id.as_str()).collect();
            return Err(DistError::Refused(format!(
                "run stage `{}` of run `{run}`: no such stage (stages: {})",
                job.stage,
                known.join(", ")
            )));
        }
        Ok(Fetched {
            job,
            common,
            tip,
            state,
            plan,
            trips,
        })
    })
}

/// The common git dir of the worker's clone: `repo` itself when it is a
/// repository, else a new empty one made there (`git init`; what it needs
/// is fetched into it).
fn prepare_clone(repo: &Path) -> Result<PathBuf, DistError> {
    if let Ok(common) = crate::git::Repo::discover(repo).and_then(|r| r.commondir()) {
        return Ok(common);
    }
    std::fs::create_dir_all(repo).map_err(|source| {
        DistError::Git(crate::git::GitError::Io {
            op: "create the work dir",
            path: repo.to_path_buf(),
            source,
        })
    })?;
    let made = Repository::init(repo)
        .map_err(git2_err(format!("create a clone at {}", repo.display())))?;
    Ok(made.commondir().components().collect())
}

/// What a decision on the fetched record says.
enum Decision {
    /// Claim it (a fresh claim or this worker's own, or a reclaim).
    Claim,
    /// Stop with this outcome (after pushing the settled record, when it
    /// changed).
    Stop(Outcome),
}

fn decide(job: &StageJob, state: &RunState, plan: &Plan, claim: Option<Claim>) -> Decision {
    let Some(rec) = state.stage(&job.stage) else {
        return Decision::Stop(Outcome::NotReady(Vec::new()));
    };
    match rec.status {
        StageStatus::Succeeded | StageStatus::Skipped | StageStatus::NoChange => {
            Decision::Stop(Outcome::Done(rec.status))
        }
        StageStatus::Failed | StageStatus::Blocked => {
            Decision::Stop(Outcome::NotRunnable(rec.status, rec.reason.clone()))
        }
        StageStatus::Running => match claim {
            Some(c) if c.worker == job.worker => Decision::Claim,
            Some(c) if job.reclaim && claim_age(&c) >= job.claim_timeout => Decision::Claim,
            Some(c) => Decision::Stop(Outcome::Claimed(c)),
            None => Decision::Claim,
        },
        StageStatus::Pending | StageStatus::RolledBack => {
            let waiting: Vec<String> = plan
                .pipeline
                .stage(&job.stage)
                .map(|s| {
                    s.needs
                        .iter()
                        .filter(|n| {
                            !matches!(
                                state.stage(n.as_str()).map(|r| r.status),
                                Some(
                                    StageStatus::Succeeded
                                        | StageStatus::Skipped
                                        | StageStatus::NoChange
                                )
                            )
                        })
                        .map(|n| n.to_string())
                        .collect()
                })
                .unwrap_or_default();
            if waiting.is_empty() {
                Decision::Claim
            } else {
                Decision::Stop(Outcome::NotReady(waiting))
            }
        }
    }
}

fn claim_age(c: &Claim) -> Duration {
    chrono::DateTime::parse_from_rfc3339(&c.claimed_at)
        .ok()
        .and_then(|t| {
            (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
                .to_std()
                .ok()
        })
        .unwrap_or(Duration::MAX)
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn state_bytes(state: &RunState) -> Result<Vec<u8>, DistError> {
    let mut b = serde_json::to_vec_pretty(state)
        .map_err(|e| DistError::Refused(format!("write state.json: {e}")))?;
    b.push(b'\n');
    Ok(b)
}

/// A commit on top of `tip` whose tree is `tip`'s with `files` put in
/// (blobs by content, or trees by id).
fn commit_over(
    repo: &Repository,
    tip: Oid,
    files: &[(String, Entry)],
    message: &str,
) -> Result<Oid, DistError> {
    let parent = repo
        .find_commit(tip)
        .map_err(git2_err("read the run ref"))?;
    let base = parent.tree().map_err(git2_err("read the run ref"))?;
    let mut update = git2::build::TreeUpdateBuilder::new();
    for (path, entry) in files {
        match entry {
            Entry::Blob(bytes) => {
                let oid = repo
                    .blob(bytes)
                    .map_err(git2_err(format!("store `{path}`")))?;
                update.upsert(path.as_str(), oid, FileMode::Blob);
            }
            Entry::Tree(oid) => {
                update.upsert(path.as_str(), *oid, FileMode::Tree);
            }
        }
    }
    let tree = update
        .create_updated(repo, &base)
        .map_err(git2_err("build the run ref's tree"))?;
    let tree = repo
        .find_tree(tree)
        .map_err(git2_err("build the run ref's tree"))?;
    let sig = runref::record_signature()?;
    repo.commit(None, &sig, &sig, message, &tree, &[&parent])
        .map_err(git2_err("commit the run ref"))
}

enum Entry {
    Blob(Vec<u8>),
    Tree(Oid),
}

impl Fetched {
    /// The clone's handle: `git2()` of it opens the repository.
    fn repo(&self) -> crate::git::Repo {
        crate::git::Repo::at(&self.common)
    }

    fn refetch(&mut self) -> Result<(), DistError> {
        let run = &self.job.run_id;
        let took = {
            let _admin = crate::git::Repo::at(&self.common).admin_lock(true)?;
            remote::fetch(&self.common, &self.job.url, &run_refspecs(run))?
        };
        self.trips.fetch_ms += ms(took);
        self.trips.fetches += 1;
        let handle = self.repo();
        let repo = handle.git2()?;
        self.tip = runref::read_run_ref(repo, &remote_run_ref(run))?
            .ok_or_else(|| DistError::Refused(format!("find run `{run}` on {}", self.job.url)))?;
        Ok(())
    }

    /// Pushes `commit` as the run ref (with a lease on `self.tip`) and the
    /// extra refspecs, atomically.
    fn push(&mut self, commit: Oid, extra: &[String], claim: bool) -> Result<Pushed, DistError> {
        let name = run_ref(&self.job.run_id);
        let mut specs = vec![format!("{commit}:{name}")];
        specs.extend_from_slice(extra);
        let expected = self.tip.to_string();
        let (pushed, took) = remote::push_with_lease(
            &self.common,
            &self.job.url,
            (&name, Some(&expected)),
            &specs,
        )?;
        self.trips.pushes += 1;
        if claim {
            self.trips.claim_ms += ms(took);
        } else {
            self.trips.publish_ms += ms(took);
        }
        if pushed == Pushed::Done {
            self.tip = commit;
            let handle = self.repo();
            let repo = handle.git2()?;
            let _admin = crate::git::Repo::at(&self.common).admin_lock(true)?;
            for r in [remote_run_ref(&self.job.run_id), name] {
                repo.reference(&r, commit, true, "orch stage: pushed")
                    .map_err(git2_err(format!("set `{r}`")))?;
            }
        }
        Ok(pushed)
    }

    /// Step 2 and 3: settle, check and claim (retrying on contention).
    /// `Ok(None)`: claimed, go on; `Ok(Some(outcome))`: stop there.
    fn claim(&mut self) -> Result<Option<Outcome>, DistError> {
        for attempt in 0..LEASE_ATTEMPTS {
            if attempt > 0 {
                self.refetch()?;
            }
            let handle = self.repo();
            let repo = handle.git2()?;
            let (mut state, plan, claim) = read_record(repo, self.tip, &self.job.stage)?;
            let settled = settle(&plan, &mut state);
            let decision = decide(&self.job, &state, &plan, claim);
            let mut files = Vec::new();
            let (outcome, message) = match decision {
                Decision::Stop(outcome) if !settled => return Ok(Some(outcome)),
                Decision::Stop(outcome) => (
                    Some(outcome),
                    format!("orch: settle run {}", self.job.run_id),
                ),
                Decision::Claim => {
                    if let Some(rec) = state.stage_mut(&self.job.stage) {
                        rec.status = StageStatus::Running;
                        rec.reason = None;
                    }
                    let claim = Claim {
                        worker: self.job.worker.clone(),
                        claimed_at: now(),
                    };
                    let bytes = serde_json::to_vec_pretty(&claim)
                        .map_err(|e| DistError::Refused(format!("write the claim: {e}")))?;
                    files.push((
                        format!("claims/{}.json", self.job.stage),
                        Entry::Blob(bytes),
                    ));
                    let message = format!(
                        "orch: {} claims stage {} of run {}",
                        self.job.worker, self.job.stage, self.job.run_id
                    );
                    (None, message)
                }
            };
            state.updated = now();
            files.push(("state.json".to_owned(), Entry::Blob(state_bytes(&state)?)));
            let commit = commit_over(repo, self.tip, &files, &message)?;
            if self.push(commit, &[], true)? == Pushed::Stale {
                continue;
            }
            self.state = state;
            self.plan = plan;
            return Ok(outcome);
        }
        Err(contention(&self.job))
    }

    /// Writes the claimed record into the clone's run directory, so the
    /// runner finds the run as a local one.
    fn materialize(&self) -> Result<RunDir, DistError> {
        let run = &self.job.run_id;
        let run_dir = match RunDir::open(&self.common, run.as_str()) {
            Ok(d) => d,
            Err(_) => RunDir::create(&self.common, run)?,
        };
        let handle = self.repo();
        let repo = handle.git2()?;
        let tree = repo
            .find_commit(self.tip)
            .and_then(|c| c.tree())
            .map_err(git2_err("read the run ref"))?;
        let mut failed = None;
        tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
            if entry.kind() != Some(git2::ObjectType::Blob) {
                return git2::TreeWalkResult::Ok;
            }
            let rel = format!("{dir}{}", entry.name().unwrap_or_default());
            let written = repo
                .find_blob(entry.id())
                .map_err(git2_err(format!("read `{rel}`")))
                .and_then(|b| {
                    run_dir
                        .write_file(&rel, b.content())
                        .map_err(DistError::from)
                });
            match written {
                Ok(_) => git2::TreeWalkResult::Ok,
                Err(e) => {
                    failed = Some(e);
                    git2::TreeWalkResult::Abort
                }
            }
        })
        .ok();
        if let Some(e) = failed {
            return Err(e);
        }
        let _admin = crate::git::Repo::at(&self.common).admin_lock(true)?;
        repo.reference(&run_ref(run), self.tip, true, "orch stage: claimed")
            .map_err(git2_err("set the run ref"))?;
        Ok(run_dir)
    }

    /// Step 5: merges this stage's record into the remote's latest and
    /// pushes it with the stage branch; finishes the run when it is the
    /// last stage. Returns the run's status.
    async fn publish(
        &mut self,
        record: &StageRecord,
        run_dir: &RunDir,
        session: &Session,
    ) -> Result<RunStatus, DistError> {
        let run = self.job.run_id.clone();
        let stage = self.job.stage.clone();
        for attempt in 0..LEASE_ATTEMPTS {
            if attempt > 0 {
                blocking_io(|| self.refetch())?;
            }
            let handle = self.repo();
            let repo = handle.git2()?;
            let (mut state, plan, _) = read_record(repo, self.tip, &stage)?;
            if let Some(rec) = state.stage_mut(&stage) {
                *rec = record.clone();
            }
            settle(&plan, &mut state);
            state.updated = now();
            let finished = state.stages.iter().all(|s| {
                !matches!(
                    s.status,
                    StageStatus::Pending | StageStatus::Running | StageStatus::RolledBack
                )
            });
            let mut files = Vec::new();
            let mut extra = Vec::new();
            if let Some(branch) = &record.branch {
                extra.push(format!("+refs/heads/{branch}:refs/heads/{branch}"));
            }
            if finished {
                // Every fetch is consistent with the tip it gave: the branches
                // of the stages this record shows done are here.
                run_dir.write_state(&state)?;
                state = runner::finish_distributed(&self.job.repo, &run, session.clone()).await?;
                if state.status == RunStatus::Succeeded {
                    let b = &state.final_branch;
                    extra.push(format!("+refs/heads/{b}:refs/heads/{b}"));
                    if let Ok(pr) = std::fs::read(run_dir.root.join("pr.md")) {
                        files.push(("pr.md".to_owned(), Entry::Blob(pr)));
                    }
                }
            }
            files.push(("state.json".to_owned(), Entry::Blob(state_bytes(&state)?)));
            let stage_dir = run_dir.root.join("stages").join(&stage);
            if let Some(tree) = runref::tree_of_dir(repo, &stage_dir)? {
                files.push((format!("stages/{stage}"), Entry::Tree(tree)));
            }
            let message = format!(
                "orch: {} finished stage {stage} of run {run}: {}",
                self.job.worker,
                record.status.as_str()
            );
            let commit = commit_over(repo, self.tip, &files, &message)?;
            if blocking_io(|| self.push(commit, &extra, false))? == Pushed::Stale {
                continue;
            }
            // The clone's record shows the run as the remote has it now.
            crate::runlog::write_atomic(&run_dir.state_path(), &state_bytes(&state)?)?;
            return Ok(state.status);
        }
        Err(contention(&self.job))
    }
}

fn contention(job: &StageJob) -> DistError {
    DistError::Remote {
        op: format!("write run `{}` ({})", job.run_id, job.stage),
        url: job.url.clone(),
        detail: format!(
            "the run ref changed under {LEASE_ATTEMPTS} attempts in a row; too many workers write it at once"
        ),
    }
}

/// Steps 2 to 5 on a fetched run, with the session built from its record.
/// Returns the outcome and the remote round trips it took.
pub(crate) async fn claim_and_run(
    mut fetched: Fetched,
    session: Session,
    ui: &Ui,
) -> Result<(Outcome, RoundTrips), DistError> {
    if let Some(outcome) = blocking_io(|| fetched.claim())? {
        return Ok((outcome, fetched.trips));
    }
    let run_dir = blocking_io(|| fetched.materialize())?;
    let job = fetched.job.clone();
    let summary = runner::resume_run(
        &job.repo,
        &job.run_id,
        session.clone(),
        ResumeOptions {
            retry_failed: true,
            only: Some(job.stage.clone()),
        },
        ui,
    )
    .await?;
    let record = summary.state.stage(&job.stage).cloned().ok_or_else(|| {
        DistError::Refused(format!("find stage `{}` after running it", job.stage))
    })?;
    let interrupted = summary.state.status == RunStatus::Interrupted
        || !matches!(
            record.status,
            StageStatus::Succeeded | StageStatus::Failed | StageStatus::NoChange
        );
    let run_status = if interrupted {
        summary.state.status
    } else {
        fetched.publish(&record, &run_dir, &session).await?
    };
    Ok((
        Outcome::Ran {
            record: Box::new(record),
            run_status,
            model_failed: summary.model_failed,
            internal_failed: summary.internal_failed,
            interrupted,
        },
        fetched.trips,
    ))
}

/// `orch run --remote URL --no-local`: pushes a planned run (its run ref,
/// and its base commit under [`base_ref`]) to `url`, refusing to overwrite
/// a run of the same id. Returns the push's duration.
pub(crate) fn push_planned(
    common: &Path,
    url: &str,
    run_id: &RunId,
    base: &crate::git::CommitId,
) -> Result<Duration, DistError> {
    let handle = crate::git::Repo::at(common);
    let repo = handle.git2()?;
    let name = run_ref(run_id);
    let tip = runref::read_run_ref(repo, &name)?
        .ok_or_else(|| DistError::Refused(format!("find the run ref `{name}`")))?;
    let specs = vec![
        format!("{tip}:{name}"),
        format!("{base}:{}", base_ref(run_id)),
    ];
    match remote::push_with_lease(common, url, (&name, None), &specs)? {
        (Pushed::Done, took) => Ok(took),
        (Pushed::Stale, _) => Err(DistError::Refused(format!(
            "push run `{run_id}` to {url}: the remote has a run of that id already"
        ))),
    }
}
