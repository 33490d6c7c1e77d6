//! One more `code.rN → review.rN` round added to a finished run, for
//! `orch react` (the pull request's feedback): the rework loop's own
//! stages, appended to the run's frozen plan and run by `resume`.

use super::error::{RunError, blocking};
use super::resume::load_run;
use crate::git;
use crate::ids::{RunId, StageId};
use crate::pipeline::Stage;
use crate::runlog::{RunDir, RunStatus, StageRecord, StageStatus};
use std::path::Path;

/// The base id of the stage that records a react round's merge round.
const MERGE_BASE_ID: &str = "merge";

/// The stages of one react round.
#[derive(Debug, Clone)]
pub(crate) struct ReactStages {
    /// `code.rN`: the coder, with the findings in its task.
    pub(crate) code: String,
    /// `review.rN`: the reviewer of the whole change.
    pub(crate) review: String,
    /// N.
    pub(crate) round: u32,
}

/// Which written stages a react round repeats: the rework loop's target
/// and its review, else the first `coder` and `reviewer` stages.
fn loop_stages(p: &crate::pipeline::Pipeline) -> Option<(&Stage, &Stage)> {
    let rework = p.stages.iter().find_map(|s| {
        let review = s.run_if_changes_requested_by.as_ref()?;
        let review = p.stage(p.stage(review.as_str())?.base_id.as_str())?;
        Some((p.stage(s.base_id.as_str())?, review))
    });
    rework.or_else(|| {
        let code = p
            .stages
            .iter()
            .find(|s| s.role == "coder" && s.round == 1)?;
        let review = p
            .stages
            .iter()
            .find(|s| s.role == "reviewer" && s.round == 1)?;
        Some((code, review))
    })
}

/// Appends one round to the succeeded run `run_id`: `code.rN` (the coder
/// stage's task followed by `findings`) starts from `start_from`'s commit
/// (the previous react round's coder stage), else from the run's final
/// stages (the stages of the `earlier` react rounds left out); `review.rN`
/// reviews it. The run is left `interrupted`, so
/// `resume` runs exactly the new stages.
///
/// `merged` (the commit before, the merge commit): the merge round that
/// brought the pull request's new base in before this round. It is
/// recorded as a finished stage `merge.rN` (no model ran in it; its record
/// holds the two commits), and `code.rN` starts from it.
pub(crate) async fn add_react_round(
    repo: &Path,
    run_id: &RunId,
    findings: &str,
    start_from: Option<&str>,
    earlier: &[String],
    merged: Option<(git::CommitId, git::CommitId)>,
) -> Result<ReactStages, RunError> {
    let repo_path = repo.to_path_buf();
    let info = blocking(move || git::open_repo(&repo_path)).await?;
    let common = info.common_dir;
    let _lock = crate::runlog::lock_run(
        &RunDir::open(&common, run_id.as_str())?.root,
        run_id.as_str(),
    )?;
    let (run_dir, mut state, mut plan) = load_run(&common, run_id)?;
    if state.status != RunStatus::Succeeded {
        return Err(RunError::Refused(format!(
            "react on run `{run_id}`: it is {}, and only a succeeded run has a change to rework",
            state.status.as_str()
        )));
    }
    let p = &plan.pipeline;
    let Some((code, review)) = loop_stages(p) else {
        return Err(RunError::Refused(format!(
            "react on run `{run_id}`: its pipeline `{}` has no coder and reviewer stages to run another round with",
            p.name
        )));
    };
    let (code, review) = (code.clone(), review.clone());
    let round = p
        .stages
        .iter()
        .filter(|s| s.base_id == code.base_id || s.base_id == review.base_id)
        .map(|s| s.round)
        .max()
        .unwrap_or(1)
        + 1;
    // Where the round starts: the previous react round's result (what the
    // pull request holds), else the run's final stages (what `publish`
    // pushed), earlier react rounds (`earlier`) left out.
    let planned = |s: &&Stage| !earlier.iter().any(|e| e == s.id.as_str());
    let needs: Vec<StageId> = match start_from {
        Some(id) => vec![StageId(id.to_owned())],
        None => p
            .stages
            .iter()
            .filter(planned)
            .filter(|s| {
                !p.stages
                    .iter()
                    .filter(planned)
                    .any(|o| o.needs.contains(&s.id))
            })
            .map(|s| s.id.clone())
            .collect(),
    };
    let (needs, merge_stage) = match merged {
        Some((previous, commit)) => {
            let id = StageId(format!("{MERGE_BASE_ID}.r{round}"));
            let mut rec = StageRecord::pending(id.as_str(), &code.role);
            rec.status = StageStatus::Succeeded;
            rec.parent_commit = Some(previous.clone());
            rec.commit = Some(commit.clone());
            rec.summary = Some(format!(
                "merged the pull request's new base into {previous}: {commit}"
            ));
            let stage = Stage {
                id: id.clone(),
                base_id: StageId(MERGE_BASE_ID.to_owned()),
                needs,
                task: "Bring the pull request's new base in (done by `orch react`'s merge round; see merge.json).".to_owned(),
                round,
                run_if_changes_requested_by: None,
                ..code.clone()
            };
            (vec![id], Some((stage, rec)))
        }
        None => (needs, None),
    };
    let code_id = StageId(format!("{}.r{round}", code.base_id));
    let review_id = StageId(format!("{}.r{round}", review.base_id));
    let mut task = code.task.trim_end().to_owned();
    task.push_str("\n\n");
    task.push_str(findings);
    let new_code = Stage {
        id: code_id.clone(),
        needs,
        task,
        round,
        run_if_changes_requested_by: None,
        ..code
    };
    let new_review = Stage {
        id: review_id.clone(),
        needs: vec![code_id.clone()],
        round,
        run_if_changes_requested_by: None,
        ..review
    };
    if let Some((stage, rec)) = merge_stage {
        state.stages.push(rec);
        plan.pipeline.stages.push(stage);
    }
    state
        .stages
        .push(StageRecord::pending(code_id.as_str(), &new_code.role));
    state
        .stages
        .push(StageRecord::pending(review_id.as_str(), &new_review.role));
    plan.pipeline.stages.push(new_code);
    plan.pipeline.stages.push(new_review);
    let plan_json = serde_json::to_vec_pretty(&plan).unwrap_or_default();
    run_dir.write_file("plan.json", &plan_json)?;
    state.status = RunStatus::Interrupted;
    state.updated = super::session::now();
    run_dir.write_state(&state)?;
    Ok(ReactStages {
        code: code_id.0,
        review: review_id.0,
        round,
    })
}

/// Ends a react round: the run is `succeeded` again and, when the round's
/// change is kept (`keep`), its final branch points at it.
pub(crate) async fn end_react_round(
    repo: &Path,
    run_id: &RunId,
    keep: Option<&git::CommitId>,
) -> Result<(), RunError> {
    let repo_path = repo.to_path_buf();
    let info = blocking(move || git::open_repo(&repo_path)).await?;
    let common = info.common_dir;
    let _lock = crate::runlog::lock_run(
        &RunDir::open(&common, run_id.as_str())?.root,
        run_id.as_str(),
    )?;
    let (run_dir, mut state, _) = load_run(&common, run_id)?;
    if let Some(commit) = keep {
        let (c, b, s) = (common.clone(), state.final_branch.clone(), commit.clone());
        blocking(move || git::Repo::at(c).set_branch(&b, &s)).await?;
    }
    // A round that did not run to its end leaves pending stages: they are
    // the round's, not the run's, and do not make the run resumable.
    for rec in &mut state.stages {
        if rec.status == StageStatus::Pending || rec.status == StageStatus::Running {
            rec.status = StageStatus::Blocked;
            rec.reason = Some("the react round ended before it ran".to_owned());
        }
    }
    state.status = RunStatus::Succeeded;
    state.updated = super::session::now();
    run_dir.write_state(&state)?;
    Ok(())
}
