//! The run state (`state.json`): one owner (the runner) rewrites it whole,
//! atomically, after every stage transition.

use crate::git::CommitId;
use crate::ids::Verdict;
use crate::llm::settings::Sampling;
use serde::{Deserialize, Serialize};

/// The version tag written into every `state.json`.
pub(crate) const RUN_FORMAT: &str = "orch-run/1";

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// The run record exists; lanes, refs and worktrees are being made (a
    /// run killed now is listed and resumable like any other).
    Starting,
    /// Stages are being run (or the process died while they were).
    Running,
    /// Every stage succeeded or was skipped.
    Succeeded,
    /// A stage failed; the run stopped.
    Failed,
    /// Stopped by the user (Ctrl-C) or killed; resumable.
    Interrupted,
    /// Rolled back to an earlier stage; `orch resume` re-runs what follows.
    RolledBack,
}

/// Where a stage stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageStatus {
    /// Not started yet.
    Pending,
    /// Its agent is running.
    Running,
    /// Finished and committed.
    Succeeded,
    /// Failed; its partial work is committed on its branch when there was any.
    Failed,
    /// Not run: its rework condition did not hold (its input passes through).
    Skipped,
    /// Not run: a stage it depends on failed.
    Blocked,
    /// Rolled back by `orch rollback`; its branch is kept, `resume` re-runs it.
    RolledBack,
    /// Ran but produced no result, and the pipeline does not require it
    /// (`required: false`): the run goes on without it (its input passes
    /// through); its partial work, if any, stays on its branch only.
    NoChange,
}

impl StageStatus {
    /// The wire name (`succeeded`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            StageStatus::Pending => "pending",
            StageStatus::Running => "running",
            StageStatus::Succeeded => "succeeded",
            StageStatus::Failed => "failed",
            StageStatus::Skipped => "skipped",
            StageStatus::Blocked => "blocked",
            StageStatus::RolledBack => "rolled_back",
            StageStatus::NoChange => "no_change",
        }
    }
}

impl RunStatus {
    /// The wire name (`succeeded`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Starting => "starting",
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
            RunStatus::RolledBack => "rolled_back",
        }
    }
}

pub(crate) use crate::budget::TokenCount;

/// One stage's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageRecord {
    /// Stage id (`code`, `review.r2`, …).
    pub id: String,
    /// Role name.
    pub role: String,
    /// Status.
    pub status: StageStatus,
    /// `orch/<run>/<stage>` once committed.
    pub branch: Option<String>,
    /// The stage's commit.
    pub commit: Option<CommitId>,
    /// The commit the stage started from.
    pub parent_commit: Option<CommitId>,
    /// A reviewer's verdict.
    pub verdict: Option<Verdict>,
    /// The agent's final summary (or the failure reason).
    pub summary: Option<String>,
    /// Model turns used.
    pub turns: u32,
    /// Tokens used.
    pub tokens: TokenCount,
    /// Wall time of the stage.
    pub duration_ms: u64,
    /// Why it failed or was skipped.
    pub reason: Option<String>,
    /// One line per tool call (the last [`DIGEST_LINES`]), for hand-offs and reviews.
    #[serde(default)]
    pub digest: Vec<String>,
    /// The stage's budget and what it used (absent before it ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::BudgetReport>,
    /// The verdict was read from the reviewer's text, not from `finish`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verdict_from_text: bool,
    /// The stage ended on prose taken as its `finish` after its verify passed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub finish_from_text: bool,
    /// The reviewer approved again after it was told the change failed its verify.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approved_despite_failed_verify: bool,
    /// The stage's verify gate (absent when it has no `verify:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<super::verify::VerifyReport>,
    /// The lane's setup command for this stage: run, or skipped as cached
    /// (absent when no setup command is configured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<SetupRecord>,
    /// The verify commands run on the start commit before the agent began
    /// (first rounds of stages with `verify:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<super::verify::BaselineReport>,
    /// Earlier attempts of this stage (interrupted, failed or rolled back
    /// ones), oldest first, with what each used: the run's totals count
    /// them too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
    /// The model of the attempt whose commit the record holds (absent
    /// before the stage ran, and in records written before orch kept it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// A best-of-N stage's choice among its replicas (docs/best-of-n.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<Selection>,
    /// A replica's selection check: the `tests` strategy's commands, run
    /// on the replica's result in its lane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<super::verify::BaselineReport>,
}

/// What a best-of-N stage chose, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    /// `tests`, `reviewer` or `tests+reviewer`.
    pub strategy: String,
    /// The chosen replica, 1-based (the best attempt when none passed).
    pub chosen: u32,
    /// How many replicas there were.
    pub of: u32,
    /// Why it was chosen (the reviewer's reason, or the ranking's).
    pub reason: String,
    /// Whether the chosen replica passed its checks (`None`: no checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed: Option<bool>,
    /// Every replica as the selection saw it.
    pub candidates: Vec<Candidate>,
    /// Tokens of the replicas plus the selection (the stage's whole use).
    pub tokens: TokenCount,
    /// Cost of the replicas plus the selection, when every part is priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// One replica as a selection saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// 1-based.
    pub k: u32,
    /// Its stage id (`code#2`).
    pub stage: String,
    /// Its status (`succeeded`, `failed`, …).
    pub status: String,
    /// Its commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<CommitId>,
    /// Whether its checks passed (`None`: none ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed: Option<bool>,
    /// How many of its check commands failed.
    pub failures: u32,
    /// Lines inserted plus deleted.
    pub diff_lines: usize,
    /// Its tokens.
    pub tokens: TokenCount,
    /// Its cost, when priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// The run record's shape of [`Sampling`]: every field written, `null`
/// when unset (not sent), so the record says what was not sent rather than
/// leaving the reader to guess. Read back by `Sampling`'s own `Deserialize`.
fn every_key<S: serde::Serializer>(v: &Option<Sampling>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    let Some(Sampling {
        temperature,
        seed,
        max_tokens,
        tool_choice,
    }) = v
    else {
        return s.serialize_none();
    };
    let mut m = s.serialize_struct("Sampling", 4)?;
    m.serialize_field("temperature", temperature)?;
    m.serialize_field("seed", seed)?;
    m.serialize_field("max_tokens", max_tokens)?;
    m.serialize_field("tool_choice", tool_choice)?;
    m.end()
}

/// The flags that shaped a run besides its model and sampling: its budget,
/// compaction and the profile it resolved, so a resumed run keeps them (a
/// flag given to `resume` overrides its field and is recorded in turn).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// `--max-tokens`: prompt + completion tokens of the whole run.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// `--max-time`: seconds of each process that runs the run's stages.
    #[serde(default)]
    pub max_time_secs: Option<f64>,
    /// `--max-cost`: US dollars of the whole run.
    #[serde(default)]
    pub max_cost_usd: Option<f64>,
    /// `--compact-at`, when given.
    #[serde(default)]
    pub compact_at: Option<f64>,
    /// `--context-window`, when given (else the profile's applies).
    #[serde(default)]
    pub context_window: Option<u64>,
    /// The `orch.toml` profile the model was resolved through.
    #[serde(default)]
    pub profile: Option<String>,
    /// `--no-stream`.
    #[serde(default)]
    pub no_stream: bool,
    /// The wire format (`provider`), so a resumed run speaks it again;
    /// absent in records of older runs and of replays (Chat Completions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

/// What the lane's setup command did before a stage.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetupRecord {
    /// The command line.
    pub command: String,
    /// The cache key: a hash of the command and the lockfiles found.
    pub key: String,
    /// The lockfiles that went into the key (paths in the lane).
    pub lockfiles: Vec<String>,
    /// False when the lane already had this key: nothing ran.
    pub ran: bool,
    /// Whether it passed (a cached setup passed when it ran).
    pub passed: bool,
    /// Its exit code when it ran (`None`: killed, timed out, or cached).
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// True when its timeout fired.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// Wall time of the run (0 when cached).
    pub duration_ms: u64,
    /// Its output, in the run record (`stages/<id>/setup.log`), when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
}

/// One earlier attempt of a stage, as its action log tells it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// How it ended: `succeeded`, `failed` (it logged its end) or
    /// `interrupted` (it never did: killed or stopped).
    pub status: String,
    /// Model turns it used.
    pub turns: u32,
    /// Tokens it used.
    pub tokens: TokenCount,
    /// What it cost, when the price is known.
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// The model it asked (absent in records written before orch kept it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The `escalate_to:` profile the stage was retried with after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalated_to: Option<String>,
}

/// How many action-digest lines a stage record keeps.
pub(crate) const DIGEST_LINES: usize = 50;

impl StageRecord {
    /// A pending record for a planned stage.
    pub fn pending(id: &str, role: &str) -> StageRecord {
        StageRecord {
            id: id.to_owned(),
            role: role.to_owned(),
            status: StageStatus::Pending,
            branch: None,
            commit: None,
            parent_commit: None,
            verdict: None,
            summary: None,
            turns: 0,
            tokens: TokenCount::default(),
            duration_ms: 0,
            reason: None,
            digest: Vec::new(),
            budget: None,
            verdict_from_text: false,
            finish_from_text: false,
            approved_despite_failed_verify: false,
            verify: None,
            setup: None,
            baseline: None,
            attempts: Vec::new(),
            model: None,
            selection: None,
            check: None,
        }
    }
}

/// The whole run state, as written to `state.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunState {
    /// Always [`RUN_FORMAT`].
    pub format: String,
    /// The run id.
    pub run_id: crate::ids::RunId,
    /// Pipeline name.
    pub pipeline: String,
    /// Where the pipeline came from (file or built-in).
    pub pipeline_origin: String,
    /// Status.
    pub status: RunStatus,
    /// RFC 3339 creation time.
    pub created: String,
    /// RFC 3339 time of the last write.
    pub updated: String,
    /// The user's repository (top of its working tree).
    pub repo: String,
    /// The base commit the run started from.
    pub base_commit: CommitId,
    /// The run's worktree.
    pub worktree: String,
    /// `orch/<run>/pr`.
    pub final_branch: String,
    /// The model name recorded in trailers (`replay` for the replay model).
    pub model: String,
    /// Human label of the model backend (says "replay" for replays).
    pub model_label: String,
    /// The model base URL, when one was used (never a key).
    pub base_url: Option<String>,
    /// The replay file, when the replay model was used.
    #[serde(default)]
    pub replay_file: Option<String>,
    /// The sampling settings every request of the run carried, so `orch
    /// resume` sends the same ones (a flag given to `resume` overrides its
    /// field); absent for replays and in records written before orch
    /// recorded them. Each field is written even when unset (`null`: not
    /// sent; `max_tokens` may have been sent as `max_completion_tokens`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "every_key"
    )]
    pub sampling: Option<Sampling>,
    /// The limits and model flags the run was started (or last resumed)
    /// with, reused by `resume`, `orch stage` and `replay` (absent in
    /// records written before orch recorded them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<RunSettings>,
    /// The PR title, once written.
    pub pr_title: Option<String>,
    /// The pull (merge) request's URL, once `orch publish` opened it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pr_url: Option<String>,
    /// Stages in plan order.
    pub stages: Vec<StageRecord>,
}

impl RunState {
    /// The record of one stage.
    pub fn stage(&self, id: &str) -> Option<&StageRecord> {
        self.stages.iter().find(|s| s.id == id)
    }

    /// The mutable record of one stage.
    pub fn stage_mut(&mut self, id: &str) -> Option<&mut StageRecord> {
        self.stages.iter_mut().find(|s| s.id == id)
    }

    /// Total tokens of all stages, every attempt included.
    pub fn tokens(&self) -> TokenCount {
        let mut t = TokenCount::default();
        for s in &self.stages {
            t.add(s.tokens);
            for a in &s.attempts {
                t.add(a.tokens);
            }
        }
        t
    }

    #[cfg(test)]
    pub(crate) fn new_for_test(run_id: &str) -> RunState {
        RunState {
            format: RUN_FORMAT.to_owned(),
            run_id: run_id.parse().expect("a test run id"),
            pipeline: "p".into(),
            pipeline_origin: "built-in".into(),
            status: RunStatus::Running,
            created: "2026-01-01T00:00:00Z".into(),
            updated: "2026-01-01T00:00:00Z".into(),
            repo: "/r".into(),
            base_commit: CommitId::parse(&"0".repeat(40)).expect("a test commit id"),
            worktree: "/w".into(),
            final_branch: format!("orch/{run_id}/pr"),
            model: "m".into(),
            model_label: "m".into(),
            base_url: None,
            replay_file: None,
            sampling: None,
            settings: None,
            pr_title: None,
            pr_url: None,
            stages: vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::settings::ToolChoice;

    #[test]
    fn records_without_sampling_still_load_and_unset_fields_are_written_as_null() {
        let mut state = RunState::new_for_test("r1");
        let mut old = serde_json::to_value(&state).unwrap();
        assert!(old.get("sampling").is_none(), "absent when not known");
        old.as_object_mut().unwrap().remove("replay_file");
        let loaded: RunState = serde_json::from_value(old).unwrap();
        assert_eq!(loaded.sampling, None);

        state.sampling = Some(Sampling {
            temperature: Some(0.0),
            max_tokens: None,
            seed: Some(3),
            tool_choice: Some(ToolChoice::Required),
        });
        let v = serde_json::to_value(&state).unwrap();
        assert_eq!(
            v["sampling"],
            serde_json::json!({"temperature": 0.0, "seed": 3, "max_tokens": null, "tool_choice": "required"})
        );
        let back: RunState = serde_json::from_value(v).unwrap();
        assert_eq!(back.sampling, state.sampling);
    }

    #[test]
    fn commit_ids_are_plain_strings_on_disk_and_a_bad_one_is_named() {
        let state = RunState::new_for_test("r1");
        let text = serde_json::to_string(&state).unwrap();
        assert!(
            text.contains(&format!("\"base_commit\":\"{}\"", "0".repeat(40))),
            "{text}"
        );
        let back: RunState = serde_json::from_str(&text).unwrap();
        assert_eq!(back.base_commit, state.base_commit);
        let bad = text.replace(&"0".repeat(40), "main");
        let err = serde_json::from_str::<RunState>(&bad)
            .unwrap_err()
            .to_string();
        assert!(err.contains("read `main` as a commit id"), "{err}");
    }
}
