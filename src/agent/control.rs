//! The agent loop's end of the run's control channel
//! ([`crate::runlog::control`]): guidance notes a user sends to the stage
//! become a user message before the next model turn, and the asks a tool
//! call makes while it waits for approval are logged as they happen.
//!
//! Invariant: guidance is only ever appended to the conversation (after
//! the last message, which answers every tool call by then), so the
//! request's prefix stays byte-stable for the server's prompt cache.

use crate::llm::ChatMessage;
use crate::runlog::control;
use crate::runlog::{ActionEvent, ActionLog, RecordError, event};
use crate::text::cap_bytes;
use crate::tools::{self, ToolContext};

/// Cap on the note text a `guidance` event copies into the log.
const LOGGED_GUIDANCE_BYTES: usize = 4096;

/// Appends the stage's new guidance notes to `messages` as one user
/// message (oldest first), logs a `guidance` event per note and marks each
/// received by `turn`. Without a control channel, or without notes (one
/// `read_dir` of a directory that usually does not exist), nothing.
pub(super) fn take_guidance(
    tool_ctx: &ToolContext,
    turn: u32,
    messages: &mut Vec<ChatMessage>,
    log: &mut ActionLog,
) -> Result<(), RecordError> {
    let Some(channel) = &tool_ctx.control else {
        return Ok(());
    };
    let notes = control::unconsumed_guidance(channel.run_dir(), channel.stage());
    if notes.is_empty() {
        return Ok(());
    }
    let text: Vec<String> = notes.iter().map(control::guidance_message).collect();
    messages.push(ChatMessage::user(text.join("\n\n")));
    for note in &notes {
        log.append(&ActionEvent::Guidance(event::Guidance {
            turn,
            id: note.id.clone(),
            by: note.by.clone(),
            text: cap_bytes(&note.text, LOGGED_GUIDANCE_BYTES),
            bytes: note.text.len(),
        }))?;
        if let Err(e) = control::mark_consumed(channel.run_dir(), channel.stage(), &note.id, turn) {
            // The note is in the conversation; at worst it is sent again.
            tracing::warn!("could not mark guidance {} as received: {e}", note.id);
        }
    }
    Ok(())
}

/// Runs tool call `call_id` (`name(arguments)`) and logs the `ask` and
/// `ask_answer` events it leaves, as they happen (an ask may wait long).
pub(super) async fn call_logging_asks(
    tool_ctx: &ToolContext,
    name: &str,
    arguments: &str,
    turn: u32,
    call_id: &str,
    log: &mut ActionLog,
) -> Result<Result<tools::ToolOutcome, tools::FatalToolError>, RecordError> {
    let Some(channel) = tool_ctx.control.clone() else {
        return Ok(tools::call(tool_ctx, name, arguments).await);
    };
    let call = tools::call(tool_ctx, name, arguments);
    tokio::pin!(call);
    loop {
        tokio::select! {
            out = &mut call => {
                log_asks(tool_ctx, turn, call_id, log)?;
                return Ok(out);
            }
            () = channel.has_events() => log_asks(tool_ctx, turn, call_id, log)?,
        }
    }
}

/// Logs the ask events the stage's control channel holds, stamped with
/// `turn` and `call_id` (also after a call cut short: its ask was denied
/// on the way out).
pub(super) fn log_asks(
    tool_ctx: &ToolContext,
    turn: u32,
    call_id: &str,
    log: &mut ActionLog,
) -> Result<(), RecordError> {
    let Some(channel) = &tool_ctx.control else {
        return Ok(());
    };
    for mut e in channel.take_events() {
        match &mut e {
            ActionEvent::Ask(a) => (a.turn, a.call_id) = (turn, call_id.to_owned()),
            ActionEvent::AskAnswer(a) => (a.turn, a.call_id) = (turn, call_id.to_owned()),
            _ => {}
        }
        log.append(&e)?;
    }
    Ok(())
}
