//! The agent's step that applies edits a model wrote as text
//! (search/replace or whole-file blocks, [`crate::llm::textedits`]): they
//! become the reply's `edit_file`/`write_file` calls, which then run like
//! native ones, and a `tool_calls_recovered` entry records them with
//! `recovered_from: search_replace | whole_file`.
//!
//! Only when the stage has it on (`text_edits`), the reply has no tool
//! calls (native or recovered from text), and the role may write: a
//! read-only role, or one not offered the write tools, never gets an edit
//! from its text.

use super::Agent;
use super::turn::logged_calls;
use crate::llm::{ChatMessage, textedits};
use crate::runlog::{ActionEvent, ActionLog, RecordError, event};
use crate::tools::ToolContext;

impl Agent<'_> {
    /// Turns the edits written in `msg`'s text into its tool calls, and
    /// logs them.
    pub(super) fn recover_text_edits(
        &self,
        msg: &mut ChatMessage,
        tool_ctx: &ToolContext,
        turn: u32,
        log: &mut ActionLog,
    ) -> Result<(), RecordError> {
        if !self.cfg.text_edits || tool_ctx.read_only {
            return Ok(());
        }
        // Whether a written path names a file: decides between creating a
        // file and editing one; the tools fence the path either way.
        let exists = |path: &str| tool_ctx.root.join(path).is_file();
        let Some(format) =
            textedits::recover_into(msg, &self.req.tools, &exists, &format!("edit{turn}"))
        else {
            return Ok(());
        };
        log.append(&ActionEvent::ToolCallsRecovered(
            event::ToolCallsRecovered {
                turn,
                recovered_from: format.as_str().to_owned(),
                format: format.as_str().to_owned(),
                tool_calls: logged_calls(&msg.tool_calls),
            },
        ))
    }
}
