//! The verify records a stage keeps: what its verify gate ran in each
//! round and what its commands did on the start commit before the agent
//! began. The agent's gate (`agent::verify`) fills them; the run record
//! stores them, so they live here, below the agent.

use serde::{Deserialize, Serialize};

/// One command's run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyRun {
    /// The command line.
    pub command: String,
    /// Its exit code (`None` when it was killed or timed out).
    pub exit_code: Option<i32>,
    /// True when the timeout fired.
    #[serde(default)]
    pub timed_out: bool,
    /// Wall time.
    pub duration_ms: u64,
}

impl VerifyRun {
    pub(crate) fn passed(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }

    /// `` `cmd` exit 1 ``, `` `cmd` timed out `` or `` `cmd` killed ``.
    pub(crate) fn status(&self) -> String {
        match (self.timed_out, self.exit_code) {
            (true, _) => format!("`{}` timed out", self.command),
            (false, Some(c)) => format!("`{}` exit {c}", self.command),
            (false, None) => format!("`{}` killed", self.command),
        }
    }
}

/// A stage's verify gate: what ran in each round and whether it passed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// The commands, in order.
    pub commands: Vec<String>,
    /// The extra rounds the agent was allowed.
    pub max_rounds: u32,
    /// Each round's runs (round 1 is after the agent's first finish; a
    /// round stops at its first failing command).
    pub rounds: Vec<Vec<VerifyRun>>,
    /// True when the last round passed every command.
    pub passed: bool,
    /// The last lines of the failing command's output in the last round
    /// (redacted, capped; empty when it passed), for the hand-off.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output_tail: String,
}

impl VerifyReport {
    /// One line for hand-offs and the PR body: `pass (`cmd` exit 0; 2 rounds)`.
    pub fn line(&self) -> String {
        let last = self.rounds.last().map(Vec::as_slice).unwrap_or_default();
        let runs: Vec<String> = last.iter().map(VerifyRun::status).collect();
        let runs = if runs.is_empty() {
            "not run: the agent did not finish".to_owned()
        } else {
            runs.join(", ")
        };
        format!(
            "{} ({runs}; {} round{})",
            if self.passed { "pass" } else { "fail" },
            self.rounds.len(),
            if self.rounds.len() == 1 { "" } else { "s" }
        )
    }

    /// [`VerifyReport::line`], and when it failed the failing command's
    /// last lines of output: what a downstream stage is told.
    pub fn handoff(&self) -> String {
        let mut s = self.line();
        if !self.passed && !self.output_tail.trim().is_empty() {
            let failing = self
                .rounds
                .last()
                .and_then(|r| r.last())
                .map_or("", |r| r.command.as_str());
            s.push_str(&format!(
                "\nOutput of `{failing}` (last lines):\n```\n{}\n```",
                self.output_tail.trim_end()
            ));
        }
        s
    }
}

/// One verify command's run on the start commit, before the agent began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaselineRun {
    /// The run, as the gate records its own.
    #[serde(flatten)]
    pub run: VerifyRun,
    /// The last lines of its output when it failed (redacted, capped).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output_tail: String,
}

/// The stage's verify commands run once on its start commit before the
/// agent began: which failures were already there before the change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaselineReport {
    /// The commit they ran on.
    pub commit: String,
    /// Every command's run (all run, even after a failure).
    pub runs: Vec<BaselineRun>,
}

impl BaselineReport {
    /// True when every command passed before the change.
    pub fn passed(&self) -> bool {
        self.runs.iter().all(|r| r.run.passed())
    }

    /// The hand-off paragraph a downstream stage (a reviewer) reads.
    pub fn handoff(&self) -> String {
        let short = &self.commit[..self.commit.len().min(12)];
        let runs: Vec<String> = self
            .runs
            .iter()
            .map(|r| {
                if r.run.passed() {
                    r.run.status()
                } else {
                    format!("{} (already failing before the change)", r.run.status())
                }
            })
            .collect();
        let mut s = format!(
            "Baseline (verify run by orch on the start commit {short}, before any change): {}.\n",
            runs.join(", ")
        );
        if self.passed() {
            s.push_str("Every verify failure after the change is therefore a regression.\n");
            return s;
        }
        s.push_str("A failure of these commands after the change is not by itself a regression: compare with their output before it.\n");
        for r in self.runs.iter().filter(|r| !r.output_tail.is_empty()) {
            s.push_str(&format!(
                "Output of `{}` before the change (last lines):\n```\n{}\n```\n",
                r.run.command,
                r.output_tail.trim_end()
            ));
        }
        s
    }
}
