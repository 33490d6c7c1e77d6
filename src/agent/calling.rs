//! The agent's side of `tool_calling` ([`crate::llm::constrained`]): under
//! `auto`, the first turn whose tool calls came as text (recovered from the
//! reply) switches the agent's following turns to constrained calls, and a
//! server that refuses the schema (HTTP 4xx) switches them back for good,
//! the refused turn sent again natively; the run's later agents with the
//! same model start where the switch left off (constrained, logged as a
//! switch at turn 1; [`crate::llm::constrained::CallState::learned`]);
//! each switch is logged (event
//! `tool_calling_switch`), and every turn's `request` event says how it
//! asked (`tool_calls_constrained`, `tool_calls_as_text`).

use super::Agent;
use crate::llm::{CallMode, LlmError};
use crate::runlog::{ActionEvent, ActionLog, RecordError, event};

impl Agent<'_> {
    /// Turn `turn` should have been a tool call and came as text (`why`):
    /// switches to constrained calls when `tool_calling` is `auto` and the
    /// agent still asks natively, and logs it; otherwise nothing.
    pub(super) fn text_instead_of_call(
        &mut self,
        turn: u32,
        why: &str,
        log: &mut ActionLog,
    ) -> Result<(), RecordError> {
        let from = self.calling.mode();
        let Some(to) = self.calling.text_instead_of_call() else {
            return Ok(());
        };
        self.req.call_mode = to;
        // The run's later agents with this model start constrained.
        crate::llm::constrained::learn_calls_as_text(&self.model_label);
        // A model switched off native calls is one that does not make them:
        // its `finish` without a change is told so once.
        self.checks.saw_calls_as_text();
        log.append(&ActionEvent::ToolCallingSwitch(event::ToolCallingSwitch {
            turn,
            from: mode_name(from).to_owned(),
            to: mode_name(to).to_owned(),
            reason: format!(
                "{why} instead of a native tool call; the following turns ask for one call under a JSON schema"
            ),
        }))
    }

    /// The server refused turn `turn`'s request with `e`: when that request
    /// was constrained because the loop switched to it, the agent goes back
    /// to native calls (logged) and the turn is sent again (true).
    pub(super) fn schema_refused(
        &mut self,
        turn: u32,
        e: &LlmError,
        log: &mut ActionLog,
    ) -> Result<bool, RecordError> {
        let LlmError::Rejected { status, body, .. } = e else {
            return Ok(false);
        };
        let Some(to) = self.calling.schema_refused() else {
            return Ok(false);
        };
        self.req.call_mode = to;
        crate::llm::constrained::forget_calls_as_text(&self.model_label);
        log.append(&ActionEvent::ToolCallingSwitch(event::ToolCallingSwitch {
            turn,
            from: mode_name(CallMode::Constrained).to_owned(),
            to: mode_name(to).to_owned(),
            reason: format!(
                "the server refused the constrained request (HTTP {status}: {}); the turn is sent again with native tools, and the agent stays native",
                crate::text::cap_bytes(body, 512)
            ),
        }))?;
        Ok(true)
    }
}

/// A mode's name in the log.
pub(crate) fn mode_name(mode: CallMode) -> &'static str {
    match mode {
        CallMode::Native => "native",
        CallMode::Constrained => "constrained",
        CallMode::Text => "text",
    }
}
