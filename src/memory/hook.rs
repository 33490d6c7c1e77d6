//! What a stage does with memory: before the agent, the relevant accepted
//! lessons for its task and paths (logged as `memory_used`); after its
//! commit, the uses counted on the ref and, on a key event only, one
//! distillation. Memory is auxiliary: its own failures are logged and never
//! fail the stage.

use super::distill::{self, KeyEvent, StageFacts};
use super::load::load_all_at;
use super::{Evidence, MemoryMode, Origin, Query, Status, store};
use crate::git::CommitId;
use crate::llm::{ChatMessage, ChatModel};
use crate::runlog::{ActionEvent, ActionLog, RecordError, event};
use std::path::{Path, PathBuf};

/// Lessons chosen for a stage.
#[derive(Debug, Default)]
pub(crate) struct Injected {
    /// The section for the task message (empty when none).
    pub text: String,
    /// Their ids, in order.
    pub ids: Vec<String>,
}

/// File names in `git diff --stat`-like lines (`src/a.rs | 3 +-`).
pub(crate) fn diffstat_paths(diffstat: &str) -> impl Iterator<Item = String> + '_ {
    diffstat
        .lines()
        .filter_map(|l| l.split_once(" | ").map(|(p, _)| p.trim().to_owned()))
        .filter(|p| !p.is_empty())
}

/// The lessons to inject into a stage whose text is `text` and whose known
/// paths are `paths`, read from the ref and `lane`'s `.orch/memory/` (the
/// base commit's checked-in lessons) and the user config dir, redacted of
/// `secrets` and the known ones like every other part of the request. Logs
/// a `memory` event with `memory_used` whenever memory is on.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn inject(
    mode: MemoryMode,
    common: &Path,
    lane: &Path,
    start: &CommitId,
    text: String,
    mut paths: Vec<String>,
    secrets: &[String],
    log: &mut ActionLog,
) -> Result<Injected, RecordError> {
    if mode == MemoryMode::Off {
        return Ok(Injected::default());
    }
    paths.extend(super::paths_in(&text));
    let (common, lane, start) = (common.to_path_buf(), lane.to_path_buf(), start.clone());
    let secrets = secrets.to_vec();
    let found = tokio::task::spawn_blocking(move || {
        let (lessons, problems) = load_all_at(&common, Some(&start), &lane)?;
        Ok::<_, super::MemoryError>(choose(lessons, problems, &text, &paths, &secrets))
    })
    .await;
    match found {
        Ok(Ok((injected, known, problems))) => {
            log.append(&ActionEvent::Memory(event::Memory {
                memory_used: injected.ids.clone(),
                lessons: Some(known),
                problems: Some(problems),
                bytes: Some(injected.text.len()),
                error: None,
            }))?;
            Ok(injected)
        }
        Ok(Err(e)) => {
            log.append(&memory_error(e.to_string()))?;
            Ok(Injected::default())
        }
        Err(e) => {
            log.append(&memory_error(e.to_string()))?;
            Ok(Injected::default())
        }
    }
}

/// A `memory` event for lessons that could not be read.
fn memory_error(error: String) -> ActionEvent {
    ActionEvent::Memory(event::Memory {
        error: Some(error),
        ..event::Memory::default()
    })
}

/// The notes for a stage whose text is `text` and known paths `paths`
/// (path-like words of `text` are added by the caller) that starts at
/// `commit` (checked-in lessons named under `dir`), the number of lessons
/// seen, and the malformed files skipped.
pub(crate) fn notes_for(
    common: &Path,
    commit: Option<&CommitId>,
    dir: &Path,
    text: &str,
    paths: &[String],
) -> Result<(Injected, usize, Vec<String>), super::MemoryError> {
    let (lessons, problems) = load_all_at(common, commit, dir)?;
    Ok(choose(lessons, problems, text, paths, &[]))
}

/// The lessons of `lessons` chosen for `text` and `paths`, rendered and
/// redacted of `secrets` (and the known ones).
fn choose(
    lessons: Vec<super::Lesson>,
    problems: Vec<super::MemoryError>,
    text: &str,
    paths: &[String],
    secrets: &[String],
) -> (Injected, usize, Vec<String>) {
    let chosen = super::select(&lessons, &Query { text, paths }, &super::today());
    let (text, ids) = super::render_notes(&chosen);
    let text = crate::secrets::redact(&text, secrets);
    let problems = problems.iter().map(ToString::to_string).collect();
    (Injected { text, ids }, lessons.len(), problems)
}

/// Whether the current tip of `branch` (an earlier attempt of the stage,
/// before it is moved aside) is a failed stage commit.
pub(crate) fn prior_attempt_failed(handle: &crate::git::Repo, branch: &str) -> bool {
    let Ok(repo) = handle.git2() else {
        return false;
    };
    repo.find_reference(&format!("refs/heads/{branch}"))
        .and_then(|r| r.peel_to_commit())
        .is_ok_and(|c| {
            c.summary()
                .ok()
                .flatten()
                .is_some_and(|s| s.contains("[failed]"))
        })
}

/// What happened in a stage, for [`after_stage`].
pub(crate) struct StageEnd<'a> {
    /// The memory mode.
    pub mode: MemoryMode,
    /// The common git dir.
    pub common: PathBuf,
    /// The lessons injected.
    pub used: &'a [String],
    /// Run, stage and commit (the event is filled in here).
    pub evidence: Evidence,
    /// The stage's rendered task.
    pub task: &'a str,
    /// Its transcript.
    pub transcript: &'a [ChatMessage],
    /// Its verify gate.
    pub verify: Option<&'a crate::runlog::VerifyReport>,
    /// True when it failed.
    pub failed: bool,
    /// True when an earlier attempt had failed.
    pub retried_after_failure: bool,
    /// True for a review round approving after one that requested changes.
    pub approved_after_changes: bool,
    /// Values to redact.
    pub secrets: &'a [String],
}

/// Counts the uses of the injected lessons (and the failed ones), then
/// distills once if the stage had a key event; logs both. Returns the
/// tokens the distill call used (0 when none was made).
pub(crate) async fn after_stage(
    end: StageEnd<'_>,
    model: &dyn ChatModel,
    log: &mut ActionLog,
) -> Result<u64, RecordError> {
    if end.mode == MemoryMode::Off {
        return Ok(0);
    }
    if !end.used.is_empty() {
        let (common, used, failed) = (end.common.clone(), end.used.to_vec(), end.failed);
        let trailers = format!(
            "Orch-Run: {}\nOrch-Stage: {}\nOrch-Outcome: {}\n",
            end.evidence.run,
            end.evidence.stage,
            if failed { "failed" } else { "succeeded" }
        );
        let counted = tokio::task::spawn_blocking(move || {
            store::update(&common, "use", &trailers, |current| {
                Ok(current
                    .iter()
                    .filter(|l| l.origin == Origin::Ref && used.contains(&l.id))
                    .map(|l| {
                        let mut l = l.clone();
                        l.uses += 1;
                        l.failed_uses += u32::from(failed);
                        l
                    })
                    .collect())
            })
        })
        .await;
        if let Ok(Err(e)) = counted {
            log.append(&ActionEvent::MemoryUses(event::MemoryUses {
                error: e.to_string(),
            }))?;
        }
    }
    let event: Option<KeyEvent> = distill::detect(&StageFacts {
        transcript: end.transcript,
        verify: end.verify,
        succeeded: !end.failed,
        retried_after_failure: end.retried_after_failure,
        approved_after_changes: end.approved_after_changes,
    });
    let Some(event) = event else {
        log.append(&ActionEvent::Distill(event::Distill::Skipped {
            skipped: true,
            reason: "no key event".to_owned(),
        }))?;
        return Ok(0);
    };
    let status = if end.mode == MemoryMode::AutoAccept {
        Status::Accepted
    } else {
        Status::Proposed
    };
    let evidence = Evidence {
        event: event.kind.to_owned(),
        ..end.evidence
    };
    let done = distill::distill(
        model,
        &end.common,
        &event,
        end.task,
        end.transcript,
        evidence,
        status,
        end.secrets,
    )
    .await;
    match done {
        Ok(d) => {
            log.append(&ActionEvent::Distill(event::Distill::Done {
                key_event: event.kind.to_owned(),
                what: event.what.clone(),
                lessons: d.ids,
                status: status.as_str().to_owned(),
                memory_commit: d.commit,
                usage: d.usage,
            }))?;
            Ok(d.usage.prompt_tokens + d.usage.completion_tokens)
        }
        Err(e) => {
            log.append(&ActionEvent::Distill(event::Distill::Failed {
                key_event: event.kind.to_owned(),
                error: e,
            }))?;
            Ok(0)
        }
    }
}

/// Lines for `orch show` and `orch review`: the lessons each stage was
/// given (its commit's `Orch-Memory` trailer) and those the run proposed.
/// Empty when the run touched no memory.
pub(crate) fn run_report(
    common: &Path,
    run_id: &crate::ids::RunId,
    stages: &[(&str, Option<&crate::git::CommitId>)],
) -> String {
    let mut o = String::new();
    let repo = crate::git::Repo::at(common);
    for (stage, commit) in stages {
        let Some(sha) = commit else { continue };
        let used = repo
            .commit_message_trailers(sha)
            .unwrap_or_default()
            .into_iter()
            .find(|(k, _)| k == "Orch-Memory");
        if let Some((_, ids)) = used {
            o.push_str(&format!("memory used by {stage}: {ids}\n"));
        }
    }
    let proposed: Vec<String> = store::read(common)
        .unwrap_or_default()
        .into_iter()
        .filter(|l| {
            l.evidence
                .as_ref()
                .is_some_and(|e| e.run == run_id.as_str())
        })
        .map(|l| {
            let e = l.evidence.as_ref().map_or("", |e| e.event.as_str());
            format!(
                "  {} [{}] ({}): {}\n",
                l.id,
                l.status.as_str(),
                crate::text::untrusted(e),
                crate::text::untrusted(&l.summary)
            )
        })
        .collect();
    if !proposed.is_empty() {
        o.push_str("lessons proposed by this run (orch memory accept|reject ID):\n");
        o.extend(proposed);
    }
    if o.is_empty() { o } else { format!("\n{o}") }
}
