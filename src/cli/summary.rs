//! A finished run on stdout: the human summary or the `--json` object, and
//! the exit code its outcome maps to. Shared by `run`, `resume`, `agent` and
//! `demo`.

use super::error::CliError;
use super::output::Out;
use crate::events::Events;
use crate::exit;
use crate::ids::RunId;
use crate::runlog::{RunStatus, StageStatus};
use crate::runner::RunSummary;
use std::fmt::Write as _;
use std::path::Path;

/// The exit code of a finished run.
pub(super) fn exit_code_of(summary: &RunSummary) -> i32 {
    match summary.state.status {
        RunStatus::Succeeded
            if summary
                .state
                .stages
                .iter()
                .any(|s| s.status == StageStatus::NoChange) =>
        {
            exit::OPTIONAL_NOT_DONE
        }
        RunStatus::Succeeded => exit::OK,
        RunStatus::Interrupted => exit::INTERRUPTED,
        _ if summary.internal_failed => exit::INTERNAL,
        _ if summary.model_failed => exit::MODEL,
        _ => exit::STAGE_FAILED,
    }
}

/// The run result as JSON (the `--json` contract).
pub(super) fn summary_json(summary: &RunSummary) -> serde_json::Value {
    let s = &summary.state;
    serde_json::json!({
        "run_id": s.run_id,
        "status": s.status.as_str(),
        "pipeline": s.pipeline,
        "model": s.model_label,
        "base_commit": s.base_commit,
        "stages": s.stages.iter().map(|st| serde_json::json!({
            "id": st.id,
            "role": st.role,
            "status": st.status.as_str(),
            "branch": st.branch,
            "commit": st.commit,
            "verdict": st.verdict,
            "turns": st.turns,
            "tokens": st.tokens.total(),
            "reason": st.reason,
        })).collect::<Vec<_>>(),
        "final_branch": (s.status == RunStatus::Succeeded).then_some(&s.final_branch),
        "final_commit": s.stages.iter().rev().find_map(|st| st.commit.clone()),
        "pr_title": s.pr_title,
        "tokens": {"prompt": s.tokens().prompt, "completion": s.tokens().completion},
        "cost_usd": super::record::run_cost_usd(s),
        "record": summary.record_dir.display().to_string(),
    })
}

/// A finished run's result: with `--events`, kept for the final event
/// (stdout carries only events then); else [`print_summary`].
pub(super) fn report_summary(
    summary: &RunSummary,
    json: bool,
    events: &Events,
) -> Result<(), CliError> {
    if events.is_on() {
        events.set_result(summary.state.status.as_str(), summary_json(summary));
        return Ok(());
    }
    print_summary(summary, json)
}

/// The start of a command with `--events`: `--json` and `--dry-run` print
/// on stdout, which then belongs to the events, so they are refused.
pub(super) fn check_events(events: &Events, json: bool, dry_run: bool) -> Result<(), CliError> {
    match (events.is_on(), json, dry_run) {
        (true, true, _) => Err(CliError::Invalid(
            "failed to use --events with --json: the final event carries the summary".to_owned(),
        )),
        (true, _, true) => Err(CliError::Invalid(
            "failed to use --events with --dry-run: a dry run has no events".to_owned(),
        )),
        _ => Ok(()),
    }
}

/// The end of a command with `--events`: the final `run_finished` event
/// with the exit code `result` maps to (and its error, which stderr shows
/// too). `result` is returned as it is.
pub(super) fn end_events(events: &Events, result: Result<i32, CliError>) -> Result<i32, CliError> {
    match &result {
        Ok(code) => events.run_finished(*code, None),
        // Nobody reads stdout any more.
        Err(CliError::StdoutClosed) => {}
        Err(e) => events.run_finished(e.exit_code(), Some(&e.to_string())),
    }
    result
}

/// Prints the human summary or the JSON object on stdout.
pub(super) fn print_summary(summary: &RunSummary, json: bool) -> Result<(), CliError> {
    let mut out = Out::stdout();
    if json {
        writeln!(out, "{}", summary_json(summary))?;
        return out.finish();
    }
    // Titles, reasons and labels quote models and forges.
    let mut o = String::new();
    let s = &summary.state;
    let _ = writeln!(
        o,
        "run {}: {} (pipeline {})",
        s.run_id,
        s.status.as_str(),
        s.pipeline
    );
    let _ = writeln!(o, "model: {}", s.model_label);
    let t = s.tokens();
    let _ = writeln!(
        o,
        "tokens: {} (prompt {}, completion {}), cost: {}",
        t.total(),
        t.prompt,
        t.completion,
        super::record::run_cost(s)
    );
    let _ = writeln!(o);
    for st in &s.stages {
        let commit = st.commit.as_deref().map_or("-", |c| &c[..c.len().min(10)]);
        let verdict = st
            .verdict
            .map_or(String::new(), |v| format!(" verdict={v}"));
        let detail = match st.status {
            StageStatus::Skipped | StageStatus::Failed | StageStatus::NoChange => {
                format!("  ({})", st.reason.as_deref().unwrap_or(""))
            }
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "  {:<10} {:<9} {:<9} {:>3} {:<5} {:>7} {:<6}  {}  {}{verdict}{detail}",
            st.id,
            st.role,
            st.status.as_str(),
            st.turns,
            if st.turns == 1 { "turn" } else { "turns" },
            st.tokens.total(),
            if st.tokens.total() == 1 {
                "token"
            } else {
                "tokens"
            },
            commit,
            st.branch.as_deref().unwrap_or("-"),
        );
    }
    let _ = writeln!(o);
    if s.status == RunStatus::Succeeded {
        let _ = writeln!(o, "final branch: {}", s.final_branch);
    } else {
        let _ = writeln!(
            o,
            "partial work is on the stage branches: orch review {}",
            s.run_id
        );
    }
    if let Some((title, _)) = &summary.pr {
        let _ = writeln!(o, "PR title: {title}");
        let _ = writeln!(
            o,
            "PR body:  {}",
            summary.record_dir.join("pr.md").display()
        );
    }
    let _ = writeln!(o, "record:   {}", summary.record_dir.display());
    out.untrusted(&o)?;
    out.finish()
}

/// After a failed run: its lanes go (the stage branches keep its work; see
/// `orch review`). Failing to clear them is said, not fatal.
pub(super) fn clear_failed_run(repo: &Path, run_id: &RunId) {
    let cleared = crate::git::open_repo(repo).and_then(|info| {
        crate::git::Repo::at(&info.common_dir).remove_lanes(run_id.as_str(), false)
    });
    if let Err(e) = cleared {
        crate::ui::status_line(&format!(
            "orch: warning: failed to remove the worktrees of run {run_id}: {e} (`orch gc` retries)"
        ));
    }
}

/// After a read-only `orch agent` question: its lanes and all its branches
/// go (nothing was written worth keeping); the record stays.
pub(super) fn clear_question(repo: &Path, run_id: &RunId) {
    let cleared = crate::git::open_repo(repo).and_then(|info| {
        let repo = crate::git::Repo::at(&info.common_dir);
        repo.remove_lanes(run_id.as_str(), false)?;
        repo.remove_run_branches(run_id.as_str(), true, false)
    });
    if let Err(e) = cleared {
        crate::ui::status_line(&format!(
            "orch: warning: failed to remove the branches of run {run_id}: {e} (`orch gc` retries)"
        ));
    }
}
