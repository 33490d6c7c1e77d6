//! The `--json` objects of `orch review`, `orch diff` and `orch rollback`
//! (one object on stdout each, like every `--json`; the readable forms live
//! with their commands).

use super::error::CliError;
use super::output::{Out, ignore_closed};
use crate::exit;
use crate::git;
use crate::ids::RunId;
use crate::runlog::{RunState, StageRecord};
use serde_json::{Value, json};
use std::path::Path;

/// Bytes of patch per stage in `orch review --json` (as the readable review).
const REVIEW_PATCH_BUDGET: usize = 256 * 1024;

/// One stage's review: its record, and its diff when it has a commit.
fn stage_review(common: &Path, st: &StageRecord, budget: usize) -> Result<Value, CliError> {
    let diff = match (&st.commit, &st.parent_commit) {
        (Some(commit), Some(parent)) => Some(git::Repo::at(common).diff(parent, commit, budget)?),
        _ => None,
    };
    Ok(json!({
        "id": st.id,
        "role": st.role,
        "status": st.status.as_str(),
        "verdict": st.verdict,
        "reason": st.reason,
        "commit": st.commit,
        "parent_commit": st.parent_commit,
        "branch": st.branch,
        "turns": st.turns,
        "tokens": st.tokens.total(),
        "duration_ms": st.duration_ms,
        "summary": st.summary,
        "actions": st.digest,
        "diffstat": diff.as_ref().map(|d| &d.stat),
        "patch": diff.as_ref().map(|d| &d.patch),
        "patch_truncated": diff.as_ref().map(|d| d.truncated),
    }))
}

/// `orch review --json`: `{run_id, status, stages: [...]}`.
pub(super) fn print_review(
    common: &Path,
    state: &RunState,
    stages: &[&StageRecord],
    rounds: serde_json::Value,
) -> Result<i32, CliError> {
    let stages = stages
        .iter()
        .map(|st| stage_review(common, st, REVIEW_PATCH_BUDGET))
        .collect::<Result<Vec<_>, _>>()?;
    let mut value = json!({
        "run_id": state.run_id,
        "status": state.status.as_str(),
        "stages": stages,
    });
    // `react` and `merge`: the rounds that came from the pull request.
    if let (Some(obj), serde_json::Value::Object(r)) = (value.as_object_mut(), rounds) {
        obj.extend(r);
    }
    print(&value)
}

/// `orch diff --json`: one stage, its whole diff.
pub(super) fn print_diff(
    common: &Path,
    state: &RunState,
    st: &StageRecord,
) -> Result<i32, CliError> {
    let mut value = stage_review(common, st, usize::MAX)?;
    value["run_id"] = json!(state.run_id);
    print(&value)
}

/// `orch rollback --json`.
pub(super) fn print_rollback(run_id: &RunId, to: &str, rolled: &[String]) -> Result<i32, CliError> {
    print(&json!({
        "run_id": run_id.as_str(),
        "to": to,
        "final_branch": format!("orch/{run_id}/pr"),
        "rolled_back": rolled,
    }))
}

fn print(value: &Value) -> Result<i32, CliError> {
    let mut out = Out::stdout();
    let written = writeln!(out, "{value}");
    ignore_closed(written.and_then(|()| out.finish()))?;
    Ok(exit::OK)
}
