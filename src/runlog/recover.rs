//! Reading a run as it really stands after a crash: a `running` (or
//! `starting`) state whose lock no live process holds is an interrupted run;
//! the tokens of an attempt that never reported its end are in its action
//! log; a run directory killed before its first state write is debris.

use super::dir::{RunDir, new_state_sink, runs_dir};
use super::event::{ActionEvent, Logged};
use super::lock::{lock_run, run_is_live};
use super::state::{Attempt, RunState, RunStatus, StageStatus, TokenCount};
use std::path::Path;

/// The status to show for a run: what `state.json` says, except that a run
/// claiming to be `starting` or `running` while no live process holds its
/// lock was killed (or crashed) and is `interrupted`, and resumable.
pub(crate) fn shown_status(dir: &RunDir, state: &RunState) -> RunStatus {
    match state.status {
        RunStatus::Starting | RunStatus::Running if !run_is_live(&dir.root) => {
            RunStatus::Interrupted
        }
        s => s,
    }
}

/// The run as it stands, for display: [`shown_status`]; its `running`
/// stages with the turns and tokens their last attempt logged so far (the
/// state has them only when a stage ends), and when no live process drives
/// the run, shown as interrupted (pending with a reason, as Ctrl-C leaves
/// them).
pub(crate) fn as_shown(dir: &RunDir, mut state: RunState) -> RunState {
    let shown = shown_status(dir, &state);
    let interrupted = shown != state.status;
    state.status = shown;
    for rec in &mut state.stages {
        if rec.status != StageStatus::Running {
            continue;
        }
        let log = dir.root.join("stages").join(&rec.id).join("actions.jsonl");
        if let Some(last) = attempts_from_log(&log).pop() {
            rec.turns = last.turns;
            rec.tokens = last.tokens;
        }
        if interrupted {
            rec.status = StageStatus::Pending;
            rec.reason = Some(
                "interrupted: no live orch process drives the run (killed or crashed); `orch resume` restarts it from its start commit"
                    .into(),
            );
        }
    }
    state
}

/// The attempts recorded in a stage's action log, oldest first: each
/// `stage_start` opens one; its `response` events give its turns and tokens;
/// its `stage_end` (if any) its status. An attempt without a `stage_end` was
/// interrupted. A torn last line (a kill mid-write) is skipped.
pub(crate) fn attempts_from_log(path: &Path) -> Vec<Attempt> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut out: Vec<Attempt> = Vec::new();
    for line in super::event::parse_log(&text) {
        let Logged::Known(event) = line.event else {
            continue;
        };
        if let ActionEvent::StageStart(s) = event {
            out.push(Attempt {
                status: "interrupted".into(),
                model: Some(s.model).filter(|m| !m.is_empty()),
                ..Attempt::default()
            });
            continue;
        }
        let Some(current) = out.last_mut() else {
            continue;
        };
        match event {
            ActionEvent::Response(r) => {
                current.turns += 1;
                current.tokens.add(TokenCount {
                    prompt: r.prompt_tokens,
                    completion: r.completion_tokens,
                    cache_read: r.cache_read_tokens,
                    cache_write: r.cache_write_tokens,
                });
            }
            ActionEvent::StageEnd(e) => {
                current.status = if e.status.is_empty() {
                    "failed".into()
                } else {
                    e.status
                };
                current.reason = e.reason;
            }
            ActionEvent::Escalated(e) => current.escalated_to = Some(e.to_profile),
            // The other events carry no turns, tokens or status.
            _ => {}
        }
    }
    out
}

/// Removes run directories that were killed before their first state write:
/// no `state.json`, and a lock file no live process holds. Nothing else of
/// such a run exists (lanes, refs and worktrees come after the state), so
/// nothing is lost. A directory without a lock file may be a run being
/// created this instant and is left alone, as is any directory younger than
/// `min_age` (a run between its `mkdir` and its lock). Returns how many were
/// removed.
pub(crate) fn sweep_dead_starts(common_dir: &Path, min_age: std::time::Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(runs_dir(common_dir)) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let root = entry.path();
        if root.join("state.json").exists() || !root.join("lock").is_file() {
            continue;
        }
        let age = std::fs::metadata(&root)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok());
        if age.is_none_or(|a| a < min_age) {
            continue;
        }
        // Take the lock while removing, so a run starting under this id
        // this instant (impossible with fresh ids, but cheap to rule out)
        // is never removed under it.
        let Ok(_held) = lock_run(&root, "") else {
            continue;
        };
        if !root.join("state.json").exists() && std::fs::remove_dir_all(&root).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Heals the run-ref locks (`refs/orch/runs/<id>.lock`) that runs killed
/// while recording their ref left: a run killed after its final state write
/// is never resumed, so nothing else would. A lock is stale when its run's
/// lock is free (taken here while healing) or its run directory is gone;
/// the healed run's ref is then recorded again from its state. Returns how
/// many were healed.
pub(crate) fn heal_dead_run_ref_locks(common_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(common_dir.join("refs/orch/runs")) else {
        return 0;
    };
    let mut healed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(id) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".lock"))
        else {
            continue;
        };
        let root = runs_dir(common_dir).join(id);
        if !root.is_dir() {
            healed += usize::from(std::fs::remove_file(&path).is_ok());
            continue;
        }
        if run_is_live(&root) {
            continue;
        }
        let Ok(_held) = lock_run(&root, "") else {
            continue;
        };
        if std::fs::remove_file(&path).is_err() {
            continue;
        }
        healed += 1;
        let status = RunDir::open(common_dir, id)
            .ok()
            .and_then(|dir| dir.read_state().ok())
            .map(|s| s.status.as_str().to_owned());
        if let Some(status) = status {
            let recorded = new_state_sink().map_or(Ok(()), |sink| {
                sink.state_written(&root, &status, None, false)
            });
            if let Err(e) = recorded {
                tracing::debug!(run = id, "the healed run's ref was not recorded again: {e}");
            }
        }
        tracing::debug!(run = id, "healed a killed run's run-ref lock");
    }
    healed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_split_at_stage_start_and_a_missing_end_is_an_interruption() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("actions.jsonl");
        let lines = [
            r#"{"event":"stage_start"}"#,
            r#"{"event":"response","prompt_tokens":10,"completion_tokens":2}"#,
            r#"{"event":"stage_end","status":"failed"}"#,
            r#"{"event":"stage_start"}"#,
            r#"{"event":"response","prompt_tokens":7,"completion_tokens":1}"#,
            r#"{"event":"response","prompt_tokens":8,"completion_tokens":1}"#,
            r#"{"event":"resp"#,
        ];
        std::fs::write(&log, lines.join("\n")).unwrap();
        let got = attempts_from_log(&log);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].status, "failed");
        assert_eq!(got[0].tokens.total(), 12);
        assert_eq!(got[1].status, "interrupted");
        assert_eq!(got[1].turns, 2);
        assert_eq!(got[1].tokens.total(), 17);
        assert!(attempts_from_log(&tmp.path().join("none")).is_empty());
    }

    #[test]
    fn a_dead_start_is_swept_but_a_live_or_complete_run_is_not() {
        let tmp = tempfile::tempdir().unwrap();
        let dead = RunDir::create(tmp.path(), &"dead".parse().unwrap()).unwrap();
        drop(super::super::lock_run(&dead.root, "dead").unwrap());
        super::super::lock::wait_released(&dead.root);
        let live = RunDir::create(tmp.path(), &"live".parse().unwrap()).unwrap();
        let _held = super::super::lock_run(&live.root, "live").unwrap();
        let done = RunDir::create(tmp.path(), &"done".parse().unwrap()).unwrap();
        std::fs::write(done.state_path(), "{}").unwrap();
        assert_eq!(
            sweep_dead_starts(tmp.path(), std::time::Duration::from_secs(3600)),
            0
        );
        assert_eq!(sweep_dead_starts(tmp.path(), std::time::Duration::ZERO), 1);
        assert!(!dead.root.exists());
        assert!(live.root.exists() && done.root.exists());
    }
}
