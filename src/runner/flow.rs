//! The run's data flow between stages: which rework rounds are skipped,
//! where a stage starts (its input commits, merged at a fan-in), what it is
//! told about its upstream stages, what a rollback touches, and the final
//! commit and PR text at the end.

use super::ctx::RunCtx;
use super::error::{RunError, blocking};
use super::pr::pr_text;
use crate::agent::prompt;
use crate::git::{self, CommitId, MergeOutcome};
use crate::ids::Verdict;
use crate::pipeline::{Pipeline, Stage};
use crate::runlog::{RunState, StageStatus};

/// Why a conditional rework stage does not run, if it does not.
pub(crate) fn skip_reason(stage: &Stage, state: &RunState) -> Option<String> {
    let gate = stage.run_if_changes_requested_by.as_ref()?;
    let rec = state.stage(gate.as_str())?;
    match (rec.status, rec.verdict) {
        (StageStatus::Succeeded, Some(Verdict::RequestChanges)) => None,
        (StageStatus::Succeeded, v) => Some(format!(
            "`{gate}` gave verdict {}; no rework needed",
            v.map_or("none", Verdict::as_str)
        )),
        _ => Some(format!("`{gate}` did not run")),
    }
}

/// The commits a stage starts from, labelled with their branches: each
/// need's commit, looking through skipped stages (they pass their input on);
/// the base commit for a stage without needs.
pub(super) fn inputs(ctx: &RunCtx, stage: &Stage, state: &RunState) -> Vec<(String, CommitId)> {
    let mut out = Vec::new();
    for need in &stage.needs {
        let Some(rec) = state.stage(need.as_str()) else {
            continue;
        };
        match (rec.status, &rec.commit) {
            // A `no_change` stage's partial work is not its result.
            (StageStatus::Skipped | StageStatus::NoChange, _) => {
                if let Some(s) = ctx.plan.pipeline.stage(need.as_str()) {
                    out.extend(inputs(ctx, s, state));
                }
            }
            (_, Some(commit)) => out.push((format!("orch/{}/{need}", ctx.run_id), commit.clone())),
            _ => {}
        }
    }
    if out.is_empty() {
        out.push(("base".to_owned(), ctx.base_commit.clone()));
    }
    out
}

/// A stage's start commit: its single input, or a merge of several. A merge
/// conflict is an `Ok(Err(reason))`: the stage fails, nothing is lost.
pub(super) async fn start_commit(
    ctx: &RunCtx,
    stage: &Stage,
    state: &RunState,
) -> Result<Result<CommitId, String>, RunError> {
    let inputs = inputs(ctx, stage, state);
    let (c, msg) = (
        ctx.common.clone(),
        format!(
            "orch: merge for stage {}\n\nOrch-Run: {}\nOrch-Stage: {}",
            stage.id, ctx.run_id, stage.id
        ),
    );
    let outcome = blocking(move || git::Repo::at(c).merge_commits(&inputs, &msg)).await?;
    Ok(match outcome {
        MergeOutcome::Merged(sha) => Ok(sha),
        MergeOutcome::Conflict { between, paths } => Err(format!(
            "merge conflict between {} and {} in: {}",
            between.0,
            between.1,
            paths.join(", ")
        )),
    })
}

/// The hand-off of a stage: for each upstream stage that ran (looking through
/// skipped ones), its summary, verdict, digest and diff. A rework round's
/// diff is shown cumulatively from the start of its first round, so a
/// reviewer always sees the whole change it reviews.
pub(super) async fn handoff(
    ctx: &RunCtx,
    stage: &Stage,
    state: &RunState,
) -> Result<Vec<prompt::Upstream>, RunError> {
    let p = &ctx.plan.pipeline;
    let mut ids: Vec<String> = Vec::new();
    let mut queue: Vec<String> = stage.needs.iter().map(|n| n.to_string()).collect();
    while let Some(n) = queue.pop() {
        if ids.contains(&n) {
            continue;
        }
        match state.stage(&n).map(|r| r.status) {
            Some(StageStatus::Skipped | StageStatus::NoChange) => {
                if let Some(s) = p.stage(&n) {
                    queue.extend(s.needs.iter().map(|x| x.to_string()));
                }
            }
            Some(_) => ids.push(n),
            None => {}
        }
    }
    ids.sort_by_key(|id| p.stages.iter().position(|s| s.id.as_str() == id));
    let share = prompt::HANDOFF_DIFF_BUDGET / ids.len().max(1);
    let mut out = Vec::new();
    for id in ids {
        let Some(rec) = state.stage(&id) else {
            continue;
        };
        let Some(to) = rec.commit.clone() else {
            continue;
        };
        let first_round = p
            .stage(&id)
            .map(|s| s.base_id.to_string())
            .and_then(|b| state.stage(&b));
        let first = first_round.and_then(|r| r.parent_commit.clone());
        // The baseline of the change's first round: what already failed
        // before any of the rounds the reviewer sees.
        let baseline = first_round
            .and_then(|r| r.baseline.as_ref())
            .map(|b| b.handoff());
        // A committed stage's record always has its start commit (it is
        // written when the stage starts); git's answer for a missing one.
        let Some(from) = first.or_else(|| rec.parent_commit.clone()) else {
            return Err(RunError::Git(git::GitError::Resolve {
                rev: String::new(),
                source: git2::Error::from_str(&format!(
                    "stage `{id}` has no start commit in its record"
                )),
            }));
        };
        let c = ctx.common.clone();
        let diff = blocking(move || git::Repo::at(c).diff(&from, &to, share)).await?;
        out.push(prompt::Upstream {
            id: id.clone(),
            role: rec.role.clone(),
            summary: rec.summary.clone().unwrap_or_default(),
            verdict: rec.verdict,
            diffstat: diff.stat.render(),
            patch: diff.patch,
            digest: rec.digest.clone(),
            verify: rec.verify.as_ref().map(|v| v.handoff()),
            baseline,
        });
    }
    Ok(out)
}

/// Every stage that depends on `id`, directly or not.
pub(super) fn descendants(p: &Pipeline, id: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in &p.stages {
        let depends = s
            .needs
            .iter()
            .any(|n| n.as_str() == id || out.iter().any(|o| o == n.as_str()));
        if depends {
            out.push(s.id.to_string());
        }
    }
    out
}

/// The end of a successful run: the final commit (a merge of the sinks'
/// results when there are several), the final branch, and the PR text.
/// `Ok(Err(reason))` when the sinks' results conflict.
pub(super) async fn finish_run(
    ctx: &RunCtx,
    state: &mut RunState,
) -> Result<Result<(String, String), String>, RunError> {
    let p = &ctx.plan.pipeline;
    let sinks: Vec<&Stage> = p
        .stages
        .iter()
        .filter(|s| !p.stages.iter().any(|o| o.needs.contains(&s.id)))
        .collect();
    let mut tips = Vec::new();
    for s in sinks {
        match state.stage(s.id.as_str()) {
            Some(r) if r.status == StageStatus::Succeeded => {
                if let Some(c) = &r.commit {
                    tips.push((format!("orch/{}/{}", ctx.run_id, s.id), c.clone()));
                }
            }
            _ => tips.extend(inputs(ctx, s, state)),
        }
    }
    let msg = format!("orch: merge the final stages\n\nOrch-Run: {}", ctx.run_id);
    let (c, branch, base, stages) = (
        ctx.common.clone(),
        state.final_branch.clone(),
        ctx.base_commit.clone(),
        state.stages.clone(),
    );
    // One blocking task, one repository handle: the merge, the branch, the
    // diffstat (tree to tree, no patch text: `pr.md` shows only the stat) and
    // the models.
    let finished = blocking(move || {
        let repo = git::Repo::at(c);
        // Nothing here stages anything: an empty in-memory index keeps the
        // merge's attribute lookups from loading the repository's index
        // (O(tracked files)).
        repo.without_index()?;
        let final_commit = match repo.merge_commits(&tips, &msg)? {
            MergeOutcome::Merged(sha) => sha,
            MergeOutcome::Conflict { between, paths } => {
                return Ok(Err(format!(
                    "merge the final stages: conflict between {} and {} in: {}",
                    between.0,
                    between.1,
                    paths.join(", ")
                )));
            }
        };
        repo.set_branch(&branch, &final_commit)?;
        let stat = repo.diff_stat(&base, &final_commit)?;
        // Each stage's model, from its commit's `Orch-Model` trailer, and
        // the model it was escalated from (`Orch-Escalated-From`).
        let mut models = std::collections::BTreeMap::new();
        for s in stages {
            if let Some(commit) = &s.commit {
                let trailers = repo.commit_message_trailers(commit)?;
                let value = |key: &str| trailers.iter().find(|(k, _)| k == key).map(|(_, v)| v);
                if let Some(m) = value("Orch-Model") {
                    let shown = match value("Orch-Escalated-From") {
                        Some(from) => format!("{m}, escalated from {from}"),
                        None => m.clone(),
                    };
                    models.insert(s.id.clone(), shown);
                }
            }
        }
        Ok(Ok((stat, models)))
    })
    .await?;
    let (stat, models) = match finished {
        Ok(done) => done,
        Err(conflict) => return Ok(Err(conflict)),
    };
    let reviews = super::pr::review_stages(&ctx.plan);
    let (title, body) = pr_text(&ctx.issue, state, &reviews, &stat.render(), &models);
    ctx.run_dir.write_file(
        "pr.md",
        crate::secrets::redact(&format!("{title}\n\n{body}"), &ctx.session.secrets).as_bytes(),
    )?;
    state.pr_title = Some(title.clone());
    Ok(Ok((title, body)))
}

/// Writes stage `id`'s `diff.patch` (the diff from its start commit `from`
/// to its commit `to`, redacted) and returns the diff's stat. The patch is
/// streamed to the file one file's patch at a time, never held whole; the
/// file is replaced atomically but not fsynced: it is derived from the two
/// commits (`orch inspect` recomputes it), nothing resumes from it.
pub(super) async fn write_stage_patch(
    ctx: &RunCtx,
    id: &str,
    from: &CommitId,
    to: &CommitId,
) -> Result<git::DiffStat, RunError> {
    let dir = ctx.run_dir.stage_dir(id)?;
    let (c, from, to, secrets) = (
        ctx.common.clone(),
        from.clone(),
        to.clone(),
        ctx.session.secrets.clone(),
    );
    blocking(move || {
        let path = dir.join("diff.patch");
        let tmp = tempfile::NamedTempFile::new_in(&dir)
            .map_err(git::io_err("create a temp file in", &dir))?;
        let mut out = std::io::BufWriter::new(tmp);
        let redact = |text: &str| crate::secrets::redact(text, &secrets);
        let stat = git::Repo::at(c)
            .write_patch(&from, &to, &mut out, &redact)
            .map_err(|e| match e {
                git::GitError::Io { op, source, .. } => git::GitError::Io {
                    op,
                    path: path.clone(),
                    source,
                },
                e => e,
            })?;
        let tmp = out
            .into_inner()
            .map_err(|e| git::io_err("write the patch", &path)(e.into_error()))?;
        tmp.persist(&path)
            .map_err(|e| git::io_err("replace the patch", &path)(e.error))?;
        Ok(stat)
    })
    .await
}

/// The file in a run's record dir that holds disk space for the run's last
/// state write (issue 25.5): when the disk fills, an error ends the run, and
/// its `failed` state must still reach the disk or the run would stay
/// `running`. Named `.tmp…` so the run ref leaves it out.
const SPACE_RESERVE: &str = ".tmp-space-reserve";

/// How much space is held: a run state with many stages fits many times.
const RESERVE_BYTES: u64 = 256 << 10;

/// Holds [`RESERVE_BYTES`] in `run_dir` (allocated, not sparse). Best
/// effort: without it a full disk may leave the state unwritten, as before.
pub(super) fn reserve_space(run_dir: &std::path::Path) {
    let path = run_dir.join(SPACE_RESERVE);
    let Ok(file) = std::fs::File::create(&path) else {
        return;
    };
    let mode = rustix::fs::FallocateFlags::empty();
    if rustix::fs::fallocate(&file, mode, 0, RESERVE_BYTES).is_err() {
        // Not supported here (or no space): no reserve rather than a sparse one.
        let _ = std::fs::remove_file(&path);
    }
}

/// Gives the reserved space back; true when there was a reserve to free.
pub(super) fn release_space(run_dir: &std::path::Path) -> bool {
    std::fs::remove_file(run_dir.join(SPACE_RESERVE)).is_ok()
}
