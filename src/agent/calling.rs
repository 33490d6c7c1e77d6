//! The agent's side of `tool_calling` ([`crate::llm::constrained`]): under
//! `auto`, the first turn that should have been a tool call but came as
//! text (calls written as text and recovered, or prose where `finish` was
//! due) switches the agent's following turns to constrained calls; the
//! switch is logged once (event `tool_calling_switch`), and every turn's
//! `request` event says how it asked (`tool_calls_constrained`,
//! `tool_calls_as_text`).

use super::Agent;
use crate::llm::CallMode;
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
        log.append(&ActionEvent::ToolCallingSwitch(event::ToolCallingSwitch {
            turn,
            from: mode_name(from).to_owned(),
            to: mode_name(to).to_owned(),
            reason: format!(
                "{why} instead of a native tool call; the following turns ask for one call under a JSON schema"
            ),
        }))
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
