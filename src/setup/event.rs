//! The events of a setup's `log.jsonl`, as one type: [`SetupEvent`].
//!
//! Every writer of the log appends a variant
//! ([`super::record::SetupRecord::log`]). Nothing in orch reads the log
//! back (it is for people, and the integration tests read its JSON); the
//! unit tests read it as these variants, with a fallback for a line they
//! do not know.
//!
//! Invariants:
//! - The JSON of a variant is the line format (docs/setup.md): the tag is
//!   the `event` key, the fields are the variant's, keys in sorted order
//!   (the log serializes through [`serde_json::Value`], whose maps are
//!   sorted), `null` for a field that is `None` unless the field says it
//!   is left out; the log adds `ts`.
//! - Reading is tolerant: a field missing from an older line takes its
//!   default where the struct has one, and a line whose event is unknown
//!   (a newer orch) or whose fields do not fit stays a JSON value.

use super::plan::{Plan, Risk};
use super::status::{CheckBefore, StepStatus};
use crate::llm::{Sampling, ToolChoice};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;

/// One setup-log event. `ts` is added by the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum SetupEvent {
    /// A new setup starts.
    Start(Start),
    /// `orch setup --resume` takes a setup up again.
    Resume(Resume),
    /// A request is sent to the model.
    Request(Request),
    /// The model answered.
    Response(Response),
    /// Tool calls the model wrote as text, recovered.
    ToolCallsRecovered(ToolCallsRecovered),
    /// How requests ask for calls changed (`tool_calling = "auto"`).
    ToolCallingSwitch(ToolCallingSwitch),
    /// The model answered with text and no tool call.
    ModelText(ModelText),
    /// One tool call and its (capped) result.
    Tool(Tool),
    /// A question to the user and the answer.
    AskUser(AskUser),
    /// The model made a plan (or a new one after a failed step).
    Plan(NewPlan),
    /// A step's check ran before the step: at plan time or right before it.
    CheckBefore(CheckRunBefore),
    /// A plan whose checks already passed before their steps went back to
    /// the model (once per setup).
    PlanSentBack(PlanSentBack),
    /// After the one send-back, a check that still passed before its step
    /// was replaced by one orch built from the step's own command.
    CheckReplaced(CheckReplaced),
    /// A step ran, or the user skipped it.
    Step(StepEvent),
    /// The setup ended.
    End(End),
}

/// `start`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Start {
    pub goal: String,
    /// The directory commands run in.
    pub cwd: PathBuf,
    pub plan_only: bool,
    pub yes: bool,
    pub yes_system: bool,
    pub interactive: bool,
    /// The house-rule files read.
    pub house_rules: Vec<PathBuf>,
    /// The dependency manifests shown in the first message (left out
    /// when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub manifests: Vec<String>,
    /// Manifests there but not shown, each `name: why` (left out when
    /// none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub manifests_not_shown: Vec<String>,
}

/// `resume`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Resume {
    /// The status the setup had when it was taken up.
    pub status: String,
}

/// `request`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Request {
    pub round: u32,
    /// The `tool_choice` sent.
    pub tool_choice: ToolChoice,
    /// Why: `role`, `re-ask after a prose answer`, `flags or profile` or
    /// `default`.
    pub tool_choice_from: String,
    /// The setup role's sampling keys.
    pub sampling: Sampling,
    /// How many messages the request holds.
    pub messages: usize,
    /// How it asks for calls: `native` (a `tools` array), `constrained`
    /// (one call under a JSON schema) or `text`; left out of lines
    /// written before orch logged it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tool_calls: String,
}

/// `tool_calling_switch`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ToolCallingSwitch {
    pub round: u32,
    pub from: String,
    pub to: String,
    pub reason: String,
}

/// `response`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Response {
    pub round: u32,
    pub latency_ms: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub finish_reason: Option<String>,
    /// How many tool calls the answer holds.
    pub tool_calls: usize,
}

/// `tool_calls_recovered`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ToolCallsRecovered {
    /// `text`.
    pub recovered_from: String,
    pub format: String,
}

/// `model_text`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ModelText {
    pub text: String,
}

/// `tool`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Tool {
    /// The tool's name.
    pub tool: String,
    /// The call's arguments as the model wrote them.
    pub args: Value,
    /// The result's beginning (capped).
    pub result: String,
}

/// `ask_user`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct AskUser {
    pub question: String,
    pub answer: String,
    /// How it was answered: `terminal`, `headless, --yes`, ….
    pub how: String,
}

/// `plan`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct NewPlan {
    /// How many plans the model made, this one included.
    pub version: u32,
    /// The step (1-based) the plan starts at.
    pub from_step: usize,
    pub plan: Plan,
}

/// `check_before`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CheckRunBefore {
    /// 1-based, in the plan as it was then.
    pub step: usize,
    /// `plan` (when the plan was made, before it was accepted) or `step`
    /// (right before the step would run).
    pub when: String,
    pub check: String,
    /// `None` when it was not run or was killed.
    pub exit_code: Option<i32>,
    /// Head and tail of its output, or why it was not run.
    pub output: String,
    pub outcome: CheckBefore,
}

/// `plan_sent_back`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PlanSentBack {
    /// The steps (1-based) whose checks passed before their steps.
    pub steps: Vec<usize>,
    /// What the model was told.
    pub message: String,
}

/// `check_replaced`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct CheckReplaced {
    /// The step (1-based).
    pub step: usize,
    /// The model's check (it passed before the step).
    pub was: String,
    /// orch's check (it failed before the step).
    pub now: String,
    /// What orch's check exited with before the step.
    pub exit_code: Option<i32>,
}

/// `step`: one of three shapes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum StepEvent {
    /// The step ran (and its check, when it has one and the step passed).
    Ran {
        /// 1-based.
        step: usize,
        command: String,
        risk: Risk,
        exit_code: Option<i32>,
        timed_out: bool,
        /// What the sandbox enforced.
        sandbox: String,
        /// Head and tail of its output.
        output: String,
        check: Option<String>,
        check_exit_code: Option<i32>,
        check_output: Option<String>,
        verified: bool,
        /// The check passed before the step too, never having been seen
        /// failing: the step is not verified (left out when false).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        check_passed_before: bool,
    },
    /// Not run: its check, seen failing earlier, passed right before the
    /// step (`status` is `satisfied`).
    Satisfied {
        step: usize,
        status: StepStatus,
        check: String,
        check_output: String,
    },
    /// The user said no (`status` is `skipped`).
    Skipped { step: usize, status: StepStatus },
}

/// `end`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct End {
    /// The setup's final status (`planned`, `done`, `failed`, …).
    pub status: String,
    /// The error that ended it, when one did (left out otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl SetupEvent {
    /// The event's line object: its fields, `event`, and the `ts` the log
    /// adds (keys sorted, as every line has them).
    pub(crate) fn to_line(&self, ts: &str) -> Result<Value, serde_json::Error> {
        let mut line = serde_json::to_value(self)?;
        if let Value::Object(o) = &mut line {
            o.insert("ts".to_owned(), Value::from(ts));
        }
        Ok(line)
    }
}

#[cfg(test)]
mod tests;
