//! Merge conflicts on a pull request: when the PR's base moved and the PR
//! no longer merges, [`rebase_round`] brings the new base into the run's
//! final commit. The result is a **merge commit** whose parents are the
//! run's final commit and the new base, so the PR branch moves forward
//! (pushed without force) and keeps every commit reviewers saw; see
//! docs/forge.md, "Merge conflicts".
//!
//! Steps: git first (`git merge-tree --write-tree`, in memory: no worktree,
//! no index); when it reports conflicts, a one-stage run whose `merge` stage
//! runs the run's coder role in a lane checked out at git's result (the
//! conflicted files hold their markers), with the coder stage's verify
//! commands plus a check that no marker line is left as its verify gate.
//!
//! Invariants: git is the oracle of what merges and what conflicts; the
//! user's working tree, index and `HEAD` are never touched; nothing is
//! pushed here (the caller pushes, never forced); the run's final branch
//! (`orch/<run>/pr`) moves only to a commit that contains both its old tip
//! and the new base, by compare-and-swap under the run's lock, and only when
//! every conflict was resolved and the verify gate passed. Each round is
//! recorded in the run's `merge.json`.

mod conflicts;

use crate::git::{CommitId, GitError, Repo};
use crate::ids::RunId;
use crate::llm::ChatModel;
use crate::pipeline::Pipeline;
use crate::runlog::{RunDir, RunStatus, StageStatus};
use crate::runner::{Plan, RunOptions, Session};
use conflicts::Conflicted;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The id of the stage that resolves the conflicts (in its own run).
pub const MERGE_STAGE: &str = "merge";

/// The file of the run record that lists the merge rounds.
pub const MERGE_RECORD: &str = "merge.json";

/// What [`rebase_round`] works on.
#[derive(Debug, Clone)]
pub struct RebaseRequest {
    /// Any path inside the user's repository.
    pub repo: PathBuf,
    /// The run: its id or a unique prefix of it.
    pub run: String,
    /// The PR's new base, a revision of the repository (`origin/main` after
    /// a fetch, a SHA).
    pub new_base: String,
}

/// The model (and session settings) the `merge` stage runs with.
pub struct MergeModel {
    session: Session,
}

impl MergeModel {
    /// `model` (e.g. an [`crate::llm::openai::OpenAiClient`]) with a new
    /// run's defaults: no budget beyond the role's, no `--yes`, the lane
    /// pool and memory as configured.
    pub fn new(model: Arc<dyn ChatModel>) -> MergeModel {
        MergeModel {
            session: Session {
                model,
                base_url: None,
                replay_file: None,
                sampling: None,
                settings: Default::default(),
                stage_models: Default::default(),
                escalations: Default::default(),
                secrets: Vec::new(),
                assume_yes: false,
                interactive: false,
                ask_via: Default::default(),
                ask_timeout: None,
                max_parallel: 1,
                limits: Default::default(),
                memory: Default::default(),
                lane_pool: None,
                hooks: Default::default(),
            },
        }
    }

    /// The caller's session (`orch react`: the run's own model, limits,
    /// approvals and hooks).
    pub(crate) fn from_session(session: Session) -> MergeModel {
        MergeModel { session }
    }
}

/// How a merge round ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RebaseOutcome {
    /// The new base is already in the run's final commit: nothing to do.
    UpToDate {
        /// The run's final commit.
        commit: String,
    },
    /// git merged the new base without conflicts; no model was asked.
    Merged {
        /// The merge commit, now the run's final commit.
        commit: String,
        /// The run's final commit before.
        previous: String,
        /// The new base.
        base: String,
    },
    /// The `merge` stage resolved the conflicts and its verify gate passed.
    Resolved {
        /// The merge commit, now the run's final commit.
        commit: String,
        /// The run's final commit before.
        previous: String,
        /// The new base.
        base: String,
        /// The paths that conflicted.
        files: Vec<String>,
        /// The one-stage run of the `merge` stage.
        merge_run: String,
    },
    /// The conflicts were not resolved: the run's final branch is where it
    /// was.
    Cannot {
        /// Why, in words that read after "cannot merge: ".
        reason: String,
        /// The new base.
        base: String,
        /// The paths that conflicted.
        files: Vec<String>,
        /// The `merge` stage's run, when one ran.
        merge_run: Option<String>,
    },
}

impl RebaseOutcome {
    /// The run's final commit after the round, unless it cannot merge.
    pub fn commit(&self) -> Option<&str> {
        match self {
            RebaseOutcome::UpToDate { commit }
            | RebaseOutcome::Merged { commit, .. }
            | RebaseOutcome::Resolved { commit, .. } => Some(commit),
            RebaseOutcome::Cannot { .. } => None,
        }
    }
}

impl std::fmt::Display for RebaseOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RebaseOutcome::UpToDate { commit } => {
                write!(f, "up to date: {commit} already contains the base")
            }
            RebaseOutcome::Merged { commit, base, .. } => {
                write!(f, "merged {base} without conflicts: {commit}")
            }
            RebaseOutcome::Resolved {
                commit,
                base,
                files,
                ..
            } => write!(
                f,
                "merged {base}, conflicts in {} resolved: {commit}",
                files.join(", ")
            ),
            RebaseOutcome::Cannot { reason, .. } => write!(f, "cannot merge: {reason}"),
        }
    }
}

/// Why a merge round could not be tried (a [`RebaseOutcome::Cannot`] is an
/// outcome, not an error).
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// A git operation failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// The run record could not be read or written.
    #[error("{0}")]
    Record(String),
    /// The round is refused as asked (a run still being driven, no final
    /// branch, a branch that moved meanwhile).
    #[error("{0}")]
    Refused(String),
}

impl From<crate::runlog::RecordError> for MergeError {
    fn from(e: crate::runlog::RecordError) -> MergeError {
        MergeError::Record(e.to_string())
    }
}

impl From<crate::runner::RunError> for MergeError {
    fn from(e: crate::runner::RunError) -> MergeError {
        MergeError::Record(e.to_string())
    }
}

/// The ref [`fetch_base`] keeps a run's fetched base under.
pub const BASE_REF_PREFIX: &str = "refs/orch/merge-base/";

/// Fetches `branch` of `remote` (a remote's name or a URL) into
/// `refs/orch/merge-base/<run>` of the repository at `repo` and returns
/// that ref, to pass as [`RebaseRequest::new_base`]. The `git` CLI with the
/// user's credentials, as `orch publish` pushes; no remote-tracking branch
/// and no `FETCH_HEAD` of the user's is written.
pub async fn fetch_base(
    repo: &Path,
    remote: &str,
    branch: &str,
    run: &str,
) -> Result<String, MergeError> {
    if branch.starts_with('-') || run.contains(['/', ' ']) {
        return Err(MergeError::Refused(format!(
            "fetch the base: bad branch `{branch}` or run `{run}`"
        )));
    }
    let target = format!("{BASE_REF_PREFIX}{run}");
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["fetch", "--quiet", "--no-write-fetch-head", "--", remote])
        .arg(format!("+refs/heads/{branch}:{target}"))
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| MergeError::Refused(format!("run `git fetch`: {e}")))?;
    if !out.status.success() {
        return Err(MergeError::Refused(super::without_userinfo(&format!(
            "fetch `{branch}` from {remote}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))));
    }
    Ok(target)
}

/// Brings `req.new_base` into the final commit of run `req.run`: nothing
/// when it is already there; a merge commit made by git alone when it
/// merges cleanly; otherwise a `merge` stage with the run's coder role in a
/// lane resolves the conflicts, its verify gate included. On success the
/// run's final branch moves (fast-forward) to the merge commit; on
/// [`RebaseOutcome::Cannot`] nothing moves. Never pushes.
///
/// Call it without holding the run's lock: it takes the lock to record.
pub async fn rebase_round(
    req: &RebaseRequest,
    model: MergeModel,
) -> Result<RebaseOutcome, MergeError> {
    let r = req.clone();
    let prepared = tokio::task::spawn_blocking(move || prepare(&r))
        .await
        .map_err(|e| MergeError::Record(format!("finish a background task: {e}")))??;
    let (at, stage) = match prepared {
        Prepared::Done(outcome) => return Ok(outcome),
        Prepared::Conflicts(boxed) => *boxed,
    };
    let ui = crate::ui::Ui::new(false);
    crate::ui::status_line(&format!(
        "orch: run {}: conflicts with {} in {}; a `{MERGE_STAGE}` stage resolves them",
        at.run_id,
        short(&at.base),
        at.files.join(", ")
    ));
    let summary = crate::runner::run_pipeline(
        RunOptions {
            repo: at.workdir.clone(),
            pipeline: stage.pipeline,
            roles: stage.roles,
            issue: stage.issue,
            issue_json: None,
            base: stage.start.to_string(),
            session: model.session,
        },
        &ui,
    )
    .await?;
    let merge_run = summary.state.run_id.to_string();
    let st = summary.state.stages.first();
    let done = summary.state.status == RunStatus::Succeeded
        && st.is_some_and(|s| s.status == StageStatus::Succeeded);
    let resolved = st.and_then(|s| s.commit.clone()).filter(|_| done);
    let reason = st.and_then(|s| s.reason.clone()).unwrap_or_else(|| {
        format!(
            "the {MERGE_STAGE} run ended {}",
            summary.state.status.as_str()
        )
    });
    tokio::task::spawn_blocking(move || settle(&at, resolved, reason, merge_run))
        .await
        .map_err(|e| MergeError::Record(format!("finish a background task: {e}")))?
}

/// A run, its final commit and the new base, resolved.
struct At {
    workdir: PathBuf,
    common: PathBuf,
    run_id: RunId,
    run_root: PathBuf,
    branch: String,
    previous: CommitId,
    base: CommitId,
    files: Vec<String>,
}

/// The one-stage run that resolves the conflicts.
struct MergeStage {
    pipeline: Pipeline,
    roles: std::collections::HashMap<String, crate::role::Role>,
    issue: String,
    /// git's merge, conflict markers and all (parents: final commit, base).
    start: CommitId,
}

enum Prepared {
    Done(RebaseOutcome),
    Conflicts(Box<(At, MergeStage)>),
}

fn short(sha: &CommitId) -> &str {
    &sha.as_str()[..sha.as_str().len().min(12)]
}

/// Resolves the run and the base and lets git merge; records and returns
/// the outcome when no stage is needed.
fn prepare(req: &RebaseRequest) -> Result<Prepared, MergeError> {
    let info = crate::git::open_repo(&req.repo)?;
    let common = info.common_dir.clone();
    let id = crate::runlog::find_run_id(&common, &req.run)?;
    let run_id: RunId = id
        .parse()
        .map_err(|e: crate::ids::RunIdError| MergeError::Refused(e.to_string()))?;
    let (run_dir, state, plan) = crate::runner::load_run(&common, &run_id)?;
    crate::runlog::refuse_if_live(&run_dir.root, &run_id)?;
    let repo = Repo::at(common.clone());
    let branch = state.final_branch.clone();
    let previous = repo.branch_sha(&branch)?.ok_or_else(|| {
        MergeError::Refused(format!(
            "run `{run_id}` has no final branch `{branch}` (only a run that made one can be merged)"
        ))
    })?;
    let base = repo.resolve_commit(&req.new_base).map_err(|e| {
        MergeError::Refused(format!("resolve the new base `{}`: {e}", req.new_base))
    })?;
    let mut at = At {
        workdir: info.workdir.clone(),
        common: common.clone(),
        run_id,
        run_root: run_dir.root.clone(),
        branch,
        previous,
        base,
        files: Vec::new(),
    };
    if is_ancestor(&common, &at.base, &at.previous)? {
        return Ok(Prepared::Done(RebaseOutcome::UpToDate {
            commit: at.previous.to_string(),
        }));
    }
    let (tree, files) = merge_tree(&common, &at.previous, &at.base)?;
    at.files = files;
    if at.files.is_empty() {
        let commit = commit_merge(&repo, &at, &tree, None)?;
        let outcome = RebaseOutcome::Merged {
            commit: commit.to_string(),
            previous: at.previous.to_string(),
            base: at.base.to_string(),
        };
        move_and_record(&repo, &at, Some(&commit), &outcome)?;
        return Ok(Prepared::Done(outcome));
    }
    let start = commit_merge(
        &repo,
        &at,
        &tree,
        Some("conflicts left for the merge stage"),
    )?;
    let stage = merge_stage(&repo, &at, &plan, &run_dir, &start)?;
    Ok(Prepared::Conflicts(Box::new((at, stage))))
}

/// After the `merge` stage: checks its tree, commits the merge and moves
/// the run's final branch, or records that it cannot.
fn settle(
    at: &At,
    resolved: Option<CommitId>,
    reason: String,
    merge_run: String,
) -> Result<RebaseOutcome, MergeError> {
    let repo = Repo::at(at.common.clone());
    let cannot = |reason: String| RebaseOutcome::Cannot {
        reason,
        base: at.base.to_string(),
        files: at.files.clone(),
        merge_run: Some(merge_run.clone()),
    };
    let Some(stage_commit) = resolved else {
        let outcome = cannot(format!("the {MERGE_STAGE} stage failed: {reason}"));
        move_and_record(&repo, at, None, &outcome)?;
        return Ok(outcome);
    };
    // The verify gate checked for markers; orch checks again on what was
    // committed, so a gate the stage's verify list lost cannot let one by.
    let left: Vec<String> = at
        .files
        .iter()
        .filter_map(|p| {
            let text = blob_text(&repo, &stage_commit, p).ok().flatten()?;
            let lines = conflicts::marker_lines(&text);
            (!lines.is_empty()).then(|| format!("{p} (line {})", lines[0]))
        })
        .collect();
    if !left.is_empty() {
        let outcome = cannot(format!("conflict markers left in {}", left.join(", ")));
        move_and_record(&repo, at, None, &outcome)?;
        return Ok(outcome);
    }
    let tree = repo.tree_of(&stage_commit)?;
    let commit = commit_merge(&repo, at, &tree, None)?;
    let outcome = RebaseOutcome::Resolved {
        commit: commit.to_string(),
        previous: at.previous.to_string(),
        base: at.base.to_string(),
        files: at.files.clone(),
        merge_run,
    };
    move_and_record(&repo, at, Some(&commit), &outcome)?;
    Ok(outcome)
}

/// `git merge-base --is-ancestor a b`.
fn is_ancestor(common: &Path, a: &CommitId, b: &CommitId) -> Result<bool, MergeError> {
    let out = crate::git::cli::git(common)
        .args(["merge-base", "--is-ancestor", a.as_str(), b.as_str()])
        .output()?;
    match out.code {
        0 => Ok(true),
        1 => Ok(false),
        _ => Err(MergeError::Refused(format!(
            "git merge-base --is-ancestor {a} {b}: {}",
            crate::git::cli::failure_detail(&out)
        ))),
    }
}

/// git's merge of `ours` and `theirs`, in memory: the tree it wrote (with
/// conflict markers in conflicted files) and the conflicted paths.
fn merge_tree(
    common: &Path,
    ours: &CommitId,
    theirs: &CommitId,
) -> Result<(String, Vec<String>), MergeError> {
    let out = crate::git::cli::git(common)
        .args([
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            "-z",
            ours.as_str(),
            theirs.as_str(),
        ])
        .output()?;
    if out.code != 0 && out.code != 1 {
        return Err(MergeError::Refused(format!(
            "git merge-tree {ours} {theirs}: {}",
            crate::git::cli::failure_detail(&out)
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fields = text.split('\0').filter(|f| !f.is_empty());
    let tree = fields.next().unwrap_or_default().trim().to_owned();
    let mut files: Vec<String> = fields.map(str::to_owned).collect();
    files.sort();
    files.dedup();
    if out.code == 1 && files.is_empty() {
        return Err(MergeError::Refused(format!(
            "git merge-tree {ours} {theirs} reported conflicts but named no file"
        )));
    }
    Ok((tree, files))
}

/// A commit of `tree` with parents (the run's final commit, the new base).
fn commit_merge(
    repo: &Repo,
    at: &At,
    tree: &str,
    note: Option<&str>,
) -> Result<CommitId, MergeError> {
    let r = repo.git2()?;
    let oid = |sha: &str| {
        git2::Oid::from_str(sha).map_err(crate::git::git_err(format!("read object id `{sha}`")))
    };
    let tree = r
        .find_tree(oid(tree)?)
        .map_err(crate::git::git_err(format!("read tree {tree}")))?;
    let ours = r
        .find_commit(oid(at.previous.as_str())?)
        .map_err(crate::git::git_err("read the run's final commit"))?;
    let theirs = r
        .find_commit(oid(at.base.as_str())?)
        .map_err(crate::git::git_err("read the new base"))?;
    let sig = crate::git::signature(r)?;
    let mut msg = format!("orch: merge {} into run {}\n\n", short(&at.base), at.run_id);
    if let Some(note) = note {
        msg.push_str(&format!("({note})\n\n"));
    }
    msg.push_str(&format!(
        "Orch-Run: {}\nOrch-Merge-Base: {}\n",
        at.run_id, at.base
    ));
    if !at.files.is_empty() {
        msg.push_str(&format!("Orch-Conflicts: {}\n", at.files.join(", ")));
    }
    let id = r
        .commit(None, &sig, &sig, &msg, &tree, &[&ours, &theirs])
        .map_err(crate::git::git_err("commit the merge"))?;
    Ok(CommitId::from_oid(id))
}

/// The text of `path` at `commit` (`None`: absent or binary).
fn blob_text(repo: &Repo, commit: &CommitId, path: &str) -> Result<Option<String>, MergeError> {
    let r = repo.git2()?;
    let c = r
        .find_commit(
            git2::Oid::from_str(commit.as_str())
                .map_err(crate::git::git_err("read a commit id"))?,
        )
        .map_err(crate::git::git_err("read a commit"))?;
    let tree = c.tree().map_err(crate::git::git_err("read a tree"))?;
    let Ok(entry) = tree.get_path(Path::new(path)) else {
        return Ok(None);
    };
    let Ok(blob) = r.find_blob(entry.id()) else {
        return Ok(None);
    };
    if blob.is_binary() {
        return Ok(None);
    }
    Ok(Some(String::from_utf8_lossy(blob.content()).into_owned()))
}

/// The one-stage run that resolves the conflicts: the run's coder role and
/// the verify commands of its coder stage, plus the marker check.
fn merge_stage(
    repo: &Repo,
    at: &At,
    plan: &Plan,
    run_dir: &RunDir,
    start: &CommitId,
) -> Result<MergeStage, MergeError> {
    let coder = plan
        .pipeline
        .stages
        .iter()
        .rev()
        .find(|s| s.role == "coder")
        .or_else(|| {
            plan.pipeline.stages.iter().rev().find(|s| {
                plan.roles
                    .get(&s.role)
                    .is_some_and(|r| !r.read_only && !r.text_result)
            })
        })
        .ok_or_else(|| {
            MergeError::Refused(format!(
                "run `{}` has no coder stage whose role could resolve the conflicts",
                at.run_id
            ))
        })?;
    let role = plan.roles.get(&coder.role).cloned().ok_or_else(|| {
        MergeError::Refused(format!(
            "run `{}`: the plan lacks role `{}`",
            at.run_id, coder.role
        ))
    })?;
    let files: Vec<Conflicted> = at
        .files
        .iter()
        .map(|p| {
            Ok(Conflicted {
                path: p.clone(),
                text: blob_text(repo, start, p)?,
            })
        })
        .collect::<Result<_, MergeError>>()?;
    let mut stage = coder.clone();
    let id = crate::ids::StageId(MERGE_STAGE.to_owned());
    stage.id = id.clone();
    stage.base_id = id;
    stage.needs = Vec::new();
    stage.round = 1;
    stage.run_if_changes_requested_by = None;
    stage.model = None;
    stage.escalate_to = None;
    stage.required = true;
    stage.text_result = false;
    stage.task = conflicts::task(
        at.run_id.as_str(),
        at.previous.as_str(),
        at.base.as_str(),
        &files,
    );
    stage.verify.push(conflicts::marker_check(&at.files));
    let issue = std::fs::read_to_string(run_dir.root.join("issue.md")).unwrap_or_default();
    let mut roles = std::collections::HashMap::new();
    roles.insert(role.name.clone(), role);
    Ok(MergeStage {
        pipeline: Pipeline {
            name: format!("merge:{}", at.run_id),
            description: format!(
                "resolve the conflicts of run {} with its new base",
                at.run_id
            ),
            stages: vec![stage],
            origin: format!("orch merge round of run {}", at.run_id),
            project_instructions: plan.pipeline.project_instructions,
            setup: plan.pipeline.setup.clone(),
            react_rounds: None,
        },
        roles,
        issue,
        start: start.clone(),
    })
}

/// One round in `merge.json`.
#[derive(Serialize)]
struct Recorded<'a> {
    #[serde(flatten)]
    outcome: &'a RebaseOutcome,
    recorded: String,
}

/// Under the run's lock: moves the run's final branch to `commit` when it
/// is still at the commit the round started from, and appends the round to
/// `merge.json`.
fn move_and_record(
    repo: &Repo,
    at: &At,
    commit: Option<&CommitId>,
    outcome: &RebaseOutcome,
) -> Result<(), MergeError> {
    let _lock = crate::runlog::lock_run(&at.run_root, at.run_id.as_str())?;
    if let Some(commit) = commit {
        let now = repo.branch_sha(&at.branch)?;
        if now.as_ref() != Some(&at.previous) {
            return Err(MergeError::Refused(format!(
                "the run's final branch `{}` moved from {} while merging; the merge commit {commit} is kept but not applied",
                at.branch, at.previous
            )));
        }
        repo.set_branch(&at.branch, commit)?;
    }
    let dir = RunDir::at(at.run_root.clone());
    let path = at.run_root.join(MERGE_RECORD);
    let mut rounds: Vec<serde_json::Value> = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let entry = serde_json::to_value(Recorded {
        outcome,
        recorded: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    })
    .map_err(|e| MergeError::Record(format!("encode {MERGE_RECORD}: {e}")))?;
    rounds.push(entry);
    let json = serde_json::to_vec_pretty(&rounds)
        .map_err(|e| MergeError::Record(format!("encode {MERGE_RECORD}: {e}")))?;
    dir.write_file(MERGE_RECORD, &json)?;
    Ok(())
}
