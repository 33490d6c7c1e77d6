//! What the pages show, read from the repository's run records: run
//! states (a running stage counted from its live action log), the plan's
//! edges, a stage's action log and diff. Every run id and stage id that
//! comes from a URL is checked here before it names a file.

use super::UiError;
use crate::ids::RunId;
use crate::pipeline;
use crate::runlog::{self, RunDir, RunState, RunStatus, StageRecord};
use serde_json::Value;
use std::path::Path;

/// The most action-log events one stage page shows (the newest are kept).
pub(crate) const MAX_EVENTS: usize = 2_000;
/// The most bytes of a diff one stage page shows.
pub(crate) const MAX_DIFF_BYTES: usize = 2 * 1024 * 1024;

/// One run as the pages see it.
pub(crate) struct RunView {
    /// Its record directory.
    pub dir: RunDir,
    /// Its state, as `orch show` shows it (a running stage counted from
    /// its log; a dead run's `running` shown as interrupted).
    pub state: RunState,
}

/// The run `id` names, when `id` is a well-formed run id of a recorded run
/// (nothing else reaches the file system).
pub(crate) fn open_run(common: &Path, id: &str) -> Result<RunView, UiError> {
    let run_id: RunId = id
        .parse()
        .map_err(|_| UiError::NotFound(format!("run id `{id}` is not a run id")))?;
    let dir = RunDir::open(common, run_id.as_str())
        .map_err(|_| UiError::NotFound(format!("no run `{id}` in this repository")))?;
    let state = dir
        .read_state()
        .map_err(|e| UiError::Internal(format!("failed to {e}")))?;
    let state = runlog::as_shown(&dir, state);
    Ok(RunView { dir, state })
}

/// The runs of the repository, newest first (unreadable records skipped).
pub(crate) fn list_runs(common: &Path, limit: usize) -> Vec<RunView> {
    runlog::list_run_ids(common)
        .into_iter()
        .take(limit)
        .filter_map(|id| open_run(common, &id).ok())
        .collect()
}

/// Whether `id` is a stage id a pipeline plans: a written stage's id
/// ([`pipeline::is_valid_stage_id`]), or one of its replicas,
/// [`pipeline::replica_id`]`(stage, k)` with `k` in 1..=the most replicas.
pub(crate) fn is_stage_id(id: &str) -> bool {
    if pipeline::is_valid_stage_id(id) {
        return true;
    }
    replica_of(id).is_some()
}

/// `(stage, k)` when `id` is replica `k` of `stage` (`code#2` → `("code", 2)`).
pub(crate) fn replica_of(id: &str) -> Option<(&str, u32)> {
    let (base, k) = id.split_once('#')?;
    let k: u32 = k.parse().ok()?;
    let ok = pipeline::is_valid_stage_id(base)
        && (1..=*pipeline::REPLICAS_RANGE.end()).contains(&k)
        && pipeline::replica_id(base, k) == id;
    ok.then_some((base, k))
}

impl RunView {
    /// The record of the stage `id` names, when the run has that stage
    /// (an exact match against the run's own stage ids).
    /// Only an id the pipeline allows ([`is_stage_id`]) is looked up.
    pub(crate) fn stage(&self, id: &str) -> Result<&StageRecord, UiError> {
        if !is_stage_id(id) {
            return Err(UiError::NotFound(format!(
                "stage id `{id}` is not a stage id"
            )));
        }
        self.state.stage(id).ok_or_else(|| {
            UiError::NotFound(format!("no stage `{id}` in run {}", self.state.run_id))
        })
    }

    /// Whether the run may still change (its page keeps listening).
    pub(crate) fn is_live(&self) -> bool {
        matches!(self.state.status, RunStatus::Running | RunStatus::Starting)
    }

    /// The stages' dependencies from `plan.json`: `(stage, needs, round)`,
    /// in plan order; empty for a record without a readable plan.
    pub(crate) fn plan(&self) -> Vec<(String, Vec<String>, u32)> {
        let Ok(text) = std::fs::read_to_string(self.dir.root.join("plan.json")) else {
            return Vec::new();
        };
        let Ok(plan) = serde_json::from_str::<Value>(&text) else {
            return Vec::new();
        };
        let stages = plan["pipeline"]["stages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        stages
            .iter()
            .filter_map(|s| {
                let id = s["id"].as_str()?.to_owned();
                let needs = s["needs"]
                    .as_array()
                    .map(|n| {
                        n.iter()
                            .filter_map(|x| x.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                let round = s["round"].as_u64().unwrap_or(1) as u32;
                Some((id, needs, round))
            })
            .collect()
    }

    /// A checked stage's action log: every complete line as JSON, at most
    /// [`MAX_EVENTS`] (the newest), and whether older ones were left out.
    pub(crate) fn actions(&self, stage: &StageRecord) -> (Vec<Value>, usize) {
        let path = self
            .dir
            .root
            .join("stages")
            .join(&stage.id)
            .join("actions.jsonl");
        let text = std::fs::read_to_string(path).unwrap_or_default();
        // Only whole lines: a running stage may be writing its last one.
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        let mut events: Vec<Value> = complete
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let dropped = events.len().saturating_sub(MAX_EVENTS);
        events.drain(..dropped);
        (events, dropped)
    }

    /// A checked stage's diff from its record (`stages/<id>/diff.patch`),
    /// cut at [`MAX_DIFF_BYTES`] on a line boundary.
    pub(crate) fn diff(&self, stage: &StageRecord) -> Option<String> {
        let path = self
            .dir
            .root
            .join("stages")
            .join(&stage.id)
            .join("diff.patch");
        let mut text = String::from_utf8_lossy(&std::fs::read(path).ok()?).into_owned();
        if text.len() > MAX_DIFF_BYTES {
            let mut cut = MAX_DIFF_BYTES;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            let cut = text[..cut].rfind('\n').unwrap_or(cut);
            text.truncate(cut);
            text.push_str("\n[… diff cut at 2 MB; `orch diff` prints all of it …]\n");
        }
        Some(text)
    }
}

/// A stage's cost in USD (earlier attempts included), `None` when unknown.
pub(crate) fn stage_cost(st: &StageRecord) -> Option<f64> {
    let own = if st.turns > 0 {
        st.budget.as_ref().and_then(|b| b.used.cost_usd)
    } else {
        Some(0.0)
    };
    let attempts: Option<f64> = st
        .attempts
        .iter()
        .filter(|a| a.turns > 0)
        .map(|a| a.cost_usd)
        .sum();
    Some(own? + attempts? + 0.0)
}

/// The run's cost in USD, `None` when any stage's is unknown.
pub(crate) fn run_cost(s: &RunState) -> Option<f64> {
    s.stages
        .iter()
        .map(stage_cost)
        .sum::<Option<f64>>()
        .map(|c| c + 0.0)
}

/// `$0.0123`, or `unknown`.
pub(crate) fn usd(c: Option<f64>) -> String {
    c.map_or("unknown".to_owned(), |c| format!("${c:.4}"))
}

/// The run's wall time so far (`created` to `updated`), as `1m 05s`.
pub(crate) fn run_duration(s: &RunState) -> String {
    let parse = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok();
    match (parse(&s.created), parse(&s.updated)) {
        (Some(a), Some(b)) => duration((b - a).num_milliseconds().max(0) as u64),
        _ => "?".to_owned(),
    }
}

/// Milliseconds as `850 ms`, `12.3 s` or `4m 05s`.
pub(crate) fn duration(ms: u64) -> String {
    match ms {
        ms if ms < 1_000 => format!("{ms} ms"),
        ms if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        ms => format!("{}m {:02}s", ms / 60_000, (ms / 1000) % 60),
    }
}

/// The live snapshot the run page's event stream sends: the run's status
/// per stage its status, turns, tokens and cost, and the ids of the asks
/// it waits on.
pub(crate) fn snapshot(v: &RunView) -> Value {
    let stages: Vec<Value> = v
        .state
        .stages
        .iter()
        .map(|st| {
            serde_json::json!({
                "id": st.id, "status": st.status.as_str(), "turns": st.turns,
                "tokens": st.tokens.total(), "cost": usd(stage_cost(st)),
            })
        })
        .collect();
    let asks: Vec<String> = super::control::pending_asks(&v.dir.root)
        .into_iter()
        .map(|a| a.id)
        .collect();
    serde_json::json!({
        "status": v.state.status.as_str(),
        "cost": usd(run_cost(&v.state)),
        "stages": stages,
        "asks": asks.join(","),
    })
}

#[cfg(test)]
mod tests {
    use super::{is_stage_id, replica_of};

    #[test]
    fn stage_ids_are_the_pipelines_and_its_replicas() {
        for ok in ["code", "code_2", "a-b", "code#1", "code#8", "x1#3"] {
            assert!(is_stage_id(ok), "{ok}");
        }
        for bad in [
            "", "Code", "code#0", "code#9", "code#01", "code#+1", "code#", "#1", "code#1#2",
            "code#1 ", "../x", "code/1", "code#a",
        ] {
            assert!(!is_stage_id(bad), "{bad}");
        }
        assert_eq!(replica_of("code#3"), Some(("code", 3)));
        assert_eq!(replica_of("code"), None);
    }
}
