//! The turn sender: builds each turn's request through the [`Compactor`],
//! waits for the model within the time budget, and handles a context-length
//! error by compacting harder and retrying once.

use super::state::{Compactor, Trigger};
use crate::agent::budget::Tracker;
use crate::llm::{ChatModel, ChatRequest, ChatResponse, LlmError};
use crate::runlog::{ActionEvent, ActionLog, RecordError, event};

/// What sending one turn came to.
#[derive(Debug)]
pub(crate) enum Sent {
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
/// error compacts harder and retries once — unless compaction could not
/// shrink the refused request, which then fails with the numbers instead of
/// being sent again. Logs the `request` event.
///
/// Until the model's server told its real context window
/// ([`ChatModel::probe_context_window`]) each call takes it if it has
/// arrived (event `context_window`; it applies from this turn) and else
/// lets the probe run beside the request, never waiting for it; and the
/// first time the client stops streaming it logs why (event
/// `stream_fallback`). Each retry the client made is logged (event `retry`).
pub(crate) async fn send_turn(
    model: &dyn ChatModel,
    full: &ChatRequest,
    turn: u32,
    compactor: &mut Compactor,
    tracker: &mut Tracker,
    log: &mut ActionLog,
) -> Result<Sent, RecordError> {
    // The server's window, until it is known: taken when it has arrived,
    // else the probe goes on beside this turn's request (never delaying it)
    // and its answer is taken by the next turn.
    let mut probe = None;
    if !compactor.probed {
        let mut asking = model.probe_context_window();
        match futures_util::FutureExt::now_or_never(&mut asking) {
            Some(window) => {
                compactor.probed = true;
                if let Some(tokens) = window {
                    compactor.learn_window(tokens);
                    log.append(&ActionEvent::ContextWindow(event::ContextWindow {
                        turn,
                        source: "server".to_owned(),
                        tokens,
                        configured: compactor.cfg.context_window,
                        used: compactor.window(),
                    }))?;
                }
            }
            None => probe = Some(asking),
        }
    }
    let mut trigger = Trigger::Threshold;
    // The request the server refused as too long: its size, and the error.
    let mut refused: Option<(usize, LlmError)> = None;
    loop {
        let (req, bytes) = compactor
            .prepare(model, full, turn, trigger, tracker, log)
            .await?;
        if let Some((refused_bytes, e)) = refused.take()
            && bytes >= refused_bytes
        {
            let err = unshrinkable(e, bytes, compactor.est(bytes), compactor.window());
            log.append(&ActionEvent::ModelError(event::ModelError {
                turn,
                error: format!("failed to {err}"),
                retry: Some("none: compaction could not shrink the request".to_owned()),
            }))?;
            return Ok(Sent::Failed(err));
        }
        // Retries of a compaction summary, made while preparing.
        log_retries(model, &full.agent_path, turn, log)?;
        let constrained =
            crate::llm::constrained::effective_mode(&req) == crate::llm::CallMode::Constrained;
        log.append(&ActionEvent::Request(event::Request {
            turn,
            messages: req.messages.len(),
            approx_bytes: bytes,
            tool_calls_constrained: constrained,
            max_tokens: model.constrained_max_tokens().filter(|_| constrained),
            tool_calls_as_text: crate::llm::constrained::effective_mode(&req)
                == crate::llm::CallMode::Text,
        }))?;
        let result = match probe.as_mut() {
            Some(asking) => {
                let (result, done) = beside(tracker.bounded(model.complete(&req)), asking).await;
                if done {
                    probe = None;
                }
                result
            }
            None => tracker.bounded(model.complete(&req)).await,
        };
        log_retries(model, &full.agent_path, turn, log)?;
        log_stream_fallback(model, turn, compactor, log)?;
        match result {
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
                log.append(&ActionEvent::ModelError(event::ModelError {
                    turn,
                    error: format!("failed to {e}"),
                    retry: Some("compacting the conversation and retrying once".to_owned()),
                }))?;
                // The server refused this size: the real window is no larger
                // than the one it names, nor than this request.
                if let LlmError::ContextLength {
                    window: Some(named),
                    ..
                } = &e
                {
                    compactor.learn_window(*named);
                }
                compactor.learn_window(compactor.est(bytes).max(1));
                refused = Some((bytes, e));
                trigger = Trigger::ContextLengthError;
            }
            Ok(Err(e)) => return Ok(Sent::Failed(e)),
        }
    }
}

/// Runs `main` to its end while driving `probe` beside it (the probe's
/// answer is kept by the client, where the next turn finds it); whether the
/// probe ended. A probe still running when `main` ends is dropped: the
/// client's own background ask goes on, and the next turn asks again.
async fn beside<T>(
    main: impl std::future::Future<Output = T>,
    probe: &mut crate::llm::BoxFuture<'_, Option<u64>>,
) -> (T, bool) {
    let mut main = std::pin::pin!(main);
    let mut done = false;
    loop {
        tokio::select! {
            biased;
            out = &mut main => return (out, done),
            _ = &mut *probe, if !done => done = true,
        }
    }
}

/// Logs each retry the model client made for this agent's requests, and
/// for its compaction summaries (`<agent>/compact`, `"request": "summary"`),
/// since the last look (event `retry`: attempt, of, wait_ms, status,
/// reason; no URL).
fn log_retries(
    model: &dyn ChatModel,
    agent_path: &str,
    turn: u32,
    log: &mut ActionLog,
) -> Result<(), RecordError> {
    let summary_path = format!("{agent_path}{}", super::state::SUMMARY_AGENT_SUFFIX);
    for (path, request) in [(agent_path, "turn"), (summary_path.as_str(), "summary")] {
        for note in model.take_retries(path) {
            log.append(&ActionEvent::Retry(event::Retry {
                turn,
                request: request.to_owned(),
                attempt: note.attempt,
                of: note.of,
                wait_ms: note.wait_ms,
                status: note.status,
                reason: note.reason,
            }))?;
        }
    }
    Ok(())
}

/// Logs, once, that the model client stopped streaming, and why.
fn log_stream_fallback(
    model: &dyn ChatModel,
    turn: u32,
    compactor: &mut Compactor,
    log: &mut ActionLog,
) -> Result<(), RecordError> {
    if compactor.stream_fallback_logged {
        return Ok(());
    }
    if let Some(why) = model.stream_fallback() {
        compactor.stream_fallback_logged = true;
        log.append(&ActionEvent::StreamFallback(event::StreamFallback {
            turn,
            reason: why.to_string(),
            streaming: false,
        }))?;
    }
    Ok(())
}

/// The context-length error `refused`, told that compaction could not bring
/// the request below the window (so it was not sent again).
fn unshrinkable(refused: LlmError, bytes: usize, est_tokens: u64, window: u64) -> LlmError {
    let (url, status, body, named) = match refused {
        LlmError::ContextLength {
            url,
            status,
            body,
            window,
        } => (url, status, body, window),
        LlmError::Rejected { url, status, body } => (url, status, body, None),
        other => (String::new(), 0, other.to_string(), None),
    };
    let limit = match named {
        Some(n) if n != window => {
            format!("the server's context window of {n} tokens (compaction aimed at {window})")
        }
        Some(n) => format!("the server's context window of {n} tokens"),
        None => format!("the context window of {window} tokens"),
    };
    LlmError::ContextLength {
        url,
        status,
        body: format!(
            "{body}; compaction could not shrink the request (still {bytes} bytes, about {est_tokens} tokens by estimate) below {limit}, so it was not sent again"
        ),
        window: named.or(Some(window)),
    }
}
