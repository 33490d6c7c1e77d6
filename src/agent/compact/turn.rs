//! The turn sender: builds each turn's request through the [`Compactor`],
//! waits for the model within the time budget, and handles a context-length
//! error by compacting harder and retrying once.

use super::{Compactor, Trigger};
use crate::agent::budget::Tracker;
use crate::llm::{ChatModel, ChatRequest, ChatResponse, LlmError};
use crate::runlog::{ActionLog, RecordError};
use serde_json::json;

/// What sending one turn came to.
#[derive(Debug)]
pub enum Sent {
    /// The model answered.
    Reply(ChatResponse),
    /// The model failed (after its own retries, and after one compaction
    /// retry for a context-length error).
    Failed(LlmError),
    /// The time budget ran out while waiting.
    OutOfBudget(String),
}

/// Sends one turn: builds the request from `full` (compacting when needed),
/// waits for the model within the time budget, and on a context-length
/// error compacts harder and retries once. Logs the `request` event.
pub async fn send_turn(
    model: &dyn ChatModel,
    full: &ChatRequest,
    turn: u32,
    compactor: &mut Compactor,
    tracker: &mut Tracker,
    log: &mut ActionLog,
) -> Result<Sent, RecordError> {
    let mut trigger = Trigger::Threshold;
    loop {
        let (req, bytes) = compactor
            .prepare(model, full, turn, trigger, tracker, log)
            .await?;
        log.append(
            "request",
            json!({"turn": turn, "messages": req.messages.len(), "approx_bytes": bytes}),
        )?;
        match tracker.bounded(model.complete(&req)).await {
            Err(why) => return Ok(Sent::OutOfBudget(why)),
            Ok(Ok(resp)) => {
                // An estimated usage is bytes / 4 of the client's own body:
                // calibrating on it would only measure our own guess.
                if !resp.usage.estimated {
                    compactor.calibrate(bytes, resp.usage.prompt_tokens);
                }
                return Ok(Sent::Reply(resp));
            }
            Ok(Err(e)) if trigger == Trigger::Threshold && e.is_context_length() => {
                log.append(
                    "model_error",
                    json!({"turn": turn, "error": format!("failed to {e}"), "retry": "compacting the conversation and retrying once"}),
                )?;
                // The server refused this size: the real window is smaller.
                compactor.window_cap = Some(compactor.est(bytes).max(1));
                trigger = Trigger::ContextLengthError;
            }
            Ok(Err(e)) => return Ok(Sent::Failed(e)),
        }
    }
}
