//! The agent loop: request → model → tool calls → results → repeat, until the
//! model calls `finish`, gives the text answer its role allows, or a limit
//! is hit ([`outcome`] says what a reply without tool calls means). Tool
//! calls written as text are recovered ([`crate::llm::textcalls`]) and run
//! like native ones; the same call made again and again is caught
//! ([`repeat`]). An [`Agent`] can be told more after it finished (a failed
//! verify gate, [`verify`]) and goes on with the same conversation.
//!
//! Tool errors (unknown tool, malformed arguments, missing file, denied
//! command) go back to the model as tool results and the loop goes on; only
//! a model/provider error, a fatal tool fault (orch's own: a panicked or
//! cancelled tool task, a record it could not write — never shown to the
//! model) or a failure to write the record ends it early.
//! Every request, response and tool call is appended to the action log as it
//! happens, so a killed process loses at most the turn in flight.

pub(crate) mod budget;
pub(crate) mod compact;
pub(crate) mod instructions;
pub(crate) mod outcome;
pub(crate) mod prompt;
pub(crate) mod repeat;
pub(crate) mod verify;

use crate::ids::Verdict;
use crate::llm::{ChatMessage, ChatModel, ChatRequest, LlmError, MessageRole};
use crate::runlog::{ActionEvent, ActionLog, RecordError, TokenCount, event};
use crate::text::cap_bytes;
// The compaction's field cap (`super::cap` there) is the same policy.
use crate::text::cap_bytes as cap;
use crate::tools::{self, ToolContext};
use repeat::MAX_IDENTICAL_FAILURES;

/// Cap on tool arguments and results copied into the action log; the
/// transcript keeps everything.
const LOG_FIELD_CAP: usize = 4096;

/// What one agent is asked to do.
#[derive(Debug, Clone)]
pub(crate) struct AgentConfig {
    /// Where the agent sits in the run (`code`, `review.r2`, …); the model
    /// server sees it as the `X-Orch-Agent` header.
    pub agent_path: String,
    /// The rendered system prompt.
    pub system_prompt: String,
    /// The rendered task (first user message).
    pub task: String,
    /// Model turns allowed.
    pub max_turns: u32,
    /// A reviewer stage: `finish` must carry a verdict.
    pub require_verdict: bool,
    /// A non-empty text answer is the role's result (`result: text` roles,
    /// `orch agent`); otherwise only `finish` ends the agent as a success.
    pub text_result: bool,
    /// Recover tool calls the model wrote as text (on unless a stage sets
    /// `text_tool_calls: false`).
    pub text_tool_calls: bool,
    /// Token, time and cost limits ([`budget`]).
    pub budget: crate::budget::StageBudget,
    /// When the conversation is condensed ([`compact`]).
    pub compaction: compact::CompactConfig,
}

/// Everything a run is limited by: its budget and the compaction policy.
/// The price of model calls comes from the model itself (its price table).
#[derive(Debug, Clone, Default)]
pub struct RunLimits {
    /// The run's budget, shared by all stages.
    pub budget: crate::budget::Budget,
    /// When and how conversations are compacted.
    pub compaction: compact::CompactConfig,
}

/// How an agent's loop ended.
#[derive(Debug)]
pub(crate) enum AgentEnd {
    /// The model called `finish`.
    Finished,
    /// The model answered without tool calls.
    Answered,
    /// `max_turns` model turns were used without finishing.
    TurnLimit,
    /// The model repeated the same failing call [`MAX_IDENTICAL_FAILURES`]
    /// times, or the same call after it was told it repeats itself.
    Stuck(String),
    /// The model's replies gave no result (empty, cut off, text from a role
    /// whose result is `finish`, a review without a verdict), after a nudge.
    NoResult(String),
    /// The agent finished but its verify gate did not pass.
    VerifyFailed(String),
    /// The lane could not be prepared (its setup command failed): the
    /// agent never ran and no model was called.
    SetupFailed(String),
    /// The model backend failed (after its own retries).
    ModelError(LlmError),
    /// A token, time or cost budget ran out; the reason says which.
    Budget(String),
    /// A tool fault that is orch's own ([`tools::ToolError::Fatal`]): the
    /// stage ends as an internal error; the model was not told.
    ToolFault(tools::FatalToolError),
}

impl AgentEnd {
    /// True when the agent ended on its own terms.
    pub(crate) fn is_success(&self) -> bool {
        matches!(self, AgentEnd::Finished | AgentEnd::Answered)
    }

    /// Why the agent did not finish, for the record; `None` on success.
    pub(crate) fn failure_reason(&self, max_turns: u32) -> Option<String> {
        match self {
            AgentEnd::Finished | AgentEnd::Answered => None,
            AgentEnd::TurnLimit => Some(format!(
                "turn limit reached: {max_turns} model turns without `finish`"
            )),
            AgentEnd::Stuck(why)
            | AgentEnd::Budget(why)
            | AgentEnd::NoResult(why)
            | AgentEnd::VerifyFailed(why)
            | AgentEnd::SetupFailed(why) => Some(why.clone()),
            AgentEnd::ModelError(e) => Some(format!("model error: failed to {e}")),
            AgentEnd::ToolFault(e) => Some(format!("internal error: failed to {e}")),
        }
    }
}

/// The result of one agent loop.
#[derive(Debug)]
pub(crate) struct AgentOutcome {
    /// How it ended.
    pub end: AgentEnd,
    /// The `finish` summary, or the final answer text.
    pub summary: String,
    /// A reviewer's verdict.
    pub verdict: Option<Verdict>,
    /// The verdict was read from the reviewer's text, not from `finish`.
    pub verdict_from_text: bool,
    /// Model turns used.
    pub turns: u32,
    /// Tokens used.
    pub tokens: TokenCount,
    /// One line per tool call, for hand-offs and reviews.
    pub digest: Vec<String>,
    /// The whole conversation (never compacted).
    pub transcript: Vec<ChatMessage>,
    /// The budget and what was used of it.
    pub budget: crate::budget::BudgetReport,
}

/// Runs one agent to its end. `on_turn` is told after each model turn (for
/// progress display). Only a failure to write the action log is an `Err`.
pub(crate) async fn run_agent(
    model: &dyn ChatModel,
    tool_ctx: &ToolContext,
    cfg: &AgentConfig,
    log: &mut ActionLog,
    on_turn: &(dyn Fn(u32, TokenCount) + Sync),
) -> Result<AgentOutcome, RecordError> {
    let mut agent = Agent::start(tool_ctx, cfg, log)?;
    agent.run(model, tool_ctx, log, on_turn).await?;
    agent.finish(log)
}

/// One agent's conversation and loop state, kept between [`Agent::run`]s so
/// it can be told more after it ended (see [`Agent::tell`]).
pub(crate) struct Agent<'c> {
    cfg: &'c AgentConfig,
    req: ChatRequest,
    out: AgentOutcome,
    tracker: crate::budget::Tracker,
    compactor: compact::Compactor,
    repeats: repeat::RepeatGuard,
    /// Nudged since the last tool call (one nudge, then the stage fails).
    nudged: bool,
}

impl<'c> Agent<'c> {
    /// The conversation's start: system prompt, task, the offered tools.
    pub(crate) fn start(
        tool_ctx: &ToolContext,
        cfg: &'c AgentConfig,
        log: &mut ActionLog,
    ) -> Result<Agent<'c>, RecordError> {
        let req = ChatRequest {
            messages: vec![
                ChatMessage::system(cfg.system_prompt.clone()),
                ChatMessage::user(cfg.task.clone()),
            ],
            tools: tools::offered(tool_ctx),
            agent_path: cfg.agent_path.clone(),
        };
        // Budget and compaction state (src/agent/budget.rs, compact.rs): `req`
        // keeps the whole conversation; each turn sends a compacted view of it.
        let tracker = crate::budget::Tracker::new(cfg.budget.clone(), cfg.max_turns);
        let compactor = compact::Compactor::new(cfg.compaction);
        log.append(&ActionEvent::AgentStart(event::AgentStart {
            agent: cfg.agent_path.clone(),
            max_turns: cfg.max_turns,
            tools: req.tools.iter().map(|t| t.name.to_owned()).collect(),
            system_prompt_bytes: cfg.system_prompt.len(),
            task_bytes: cfg.task.len(),
            budget: tracker.report().limits,
            budget_notes: tracker.notes().to_vec(),
            compact_at_tokens: compactor.trigger_tokens(),
            text_result: cfg.text_result,
            text_tool_calls: cfg.text_tool_calls,
        }))?;
        Ok(Agent {
            cfg,
            req,
            out: AgentOutcome {
                end: AgentEnd::TurnLimit,
                summary: String::new(),
                verdict: None,
                verdict_from_text: false,
                turns: 0,
                tokens: TokenCount::default(),
                digest: Vec::new(),
                transcript: Vec::new(),
                budget: crate::budget::BudgetReport::default(),
            },
            tracker,
            compactor,
            repeats: repeat::RepeatGuard::default(),
            nudged: false,
        })
    }

    /// How the last [`Agent::run`] ended.
    pub(crate) fn end(&self) -> &AgentEnd {
        &self.out.end
    }

    /// Ends the agent as failed for a reason found after its loop (a verify
    /// gate that did not pass).
    pub(crate) fn fail(&mut self, end: AgentEnd) {
        self.out.end = end;
    }

    /// Tells an agent that ended on its own terms something new (a new user
    /// message); the next [`Agent::run`] goes on from there, within the same
    /// turn limit and budget.
    pub(crate) fn tell(&mut self, text: String) {
        self.req.messages.push(ChatMessage::user(text));
        self.out.end = AgentEnd::TurnLimit;
        self.nudged = false;
    }

    /// The agent's outcome; writes `agent_end` to the log.
    pub(crate) fn finish(mut self, log: &mut ActionLog) -> Result<AgentOutcome, RecordError> {
        let mut out = self.out;
        out.tokens.add(self.compactor.summary_tokens());
        out.budget = self.tracker.report();
        log.append(&ActionEvent::AgentEnd(event::AgentEnd {
            agent: self.cfg.agent_path.clone(),
            end: format!("{:?}", out.end)
                .split('(')
                .next()
                .unwrap_or_default()
                .to_owned(),
            turns: out.turns,
            prompt_tokens: out.tokens.prompt,
            completion_tokens: out.tokens.completion,
            verdict: out.verdict,
            verdict_from_text: out.verdict_from_text,
            budget: out.budget.clone(),
        }))?;
        out.transcript = std::mem::take(&mut self.req.messages);
        Ok(out)
    }

    /// Runs the loop until the agent ends (see [`AgentEnd`]).
    pub(crate) async fn run(
        &mut self,
        model: &dyn ChatModel,
        tool_ctx: &ToolContext,
        log: &mut ActionLog,
        on_turn: &(dyn Fn(u32, TokenCount) + Sync),
    ) -> Result<(), RecordError> {
        let cfg = self.cfg;
        let rules = outcome::ReplyRules {
            text_result: cfg.text_result,
            require_verdict: cfg.require_verdict,
        };
        let Agent {
            req,
            out,
            tracker,
            compactor,
            repeats,
            nudged,
            ..
        } = self;
        out.end = AgentEnd::TurnLimit;

        'turns: while out.turns < cfg.max_turns {
            // Budget hook: no turn starts once a limit is used up.
            if let Some(why) = tracker.before_turn() {
                log.append(&budget_exceeded(out.turns, None, &why))?;
                out.end = AgentEnd::Budget(why);
                break;
            }
            out.turns += 1;
            let turn = out.turns;
            let started = std::time::Instant::now();
            // Compaction and time-budget hook: sends the (compacted) request.
            let resp = match compact::send_turn(model, req, turn, compactor, tracker, log).await? {
                compact::Sent::Reply(r) => r,
                compact::Sent::OutOfBudget(why) => {
                    log.append(&budget_exceeded(turn, None, &why))?;
                    out.end = AgentEnd::Budget(why);
                    break;
                }
                compact::Sent::Failed(e) => {
                    log.append(&ActionEvent::ModelError(event::ModelError {
                        turn,
                        error: format!("failed to {e}"),
                        retry: None,
                    }))?;
                    out.end = AgentEnd::ModelError(e);
                    break;
                }
            };
            let usage = resp.usage;
            let tokens = TokenCount {
                prompt: usage.prompt_tokens,
                completion: usage.completion_tokens,
            };
            tracker.record_turn(tokens, usage.cost_usd);
            out.tokens.add(tokens);
            let mut msg = normalize_assistant(resp.message);
            log.append(&ActionEvent::Response(event::Response {
                turn,
                latency_ms: started.elapsed().as_millis() as u64,
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
                cost_usd: usage.cost_usd,
                finish_reason: resp.finish_reason.clone(),
                content: msg.content.as_deref().map(|c| cap_bytes(c, LOG_FIELD_CAP)),
                tool_calls: logged_calls(&msg.tool_calls),
            }))?;
            on_turn(turn, out.tokens);
            // Tool calls written as text run like native ones.
            if cfg.text_tool_calls
                && let Some(format) = crate::llm::textcalls::recover_into(
                    &mut msg,
                    &req.tools,
                    &format!("text{turn}"),
                )
            {
                log.append(&ActionEvent::ToolCallsRecovered(
                    event::ToolCallsRecovered {
                        turn,
                        recovered_from: "text".to_owned(),
                        format: format.as_str().to_owned(),
                        tool_calls: logged_calls(&msg.tool_calls),
                    },
                ))?;
            }
            let calls = msg.tool_calls.clone();
            let content = msg.content.clone();
            req.messages.push(msg);

            // Budget hook: tokens and cost after every turn. A turn that finishes
            // the stage may still finish it.
            if let Some(why) = tracker.after_turn()
                && !calls.is_empty()
                && !calls.iter().any(|c| c.function.name == "finish")
            {
                log.append(&budget_exceeded(turn, None, &why))?;
                answer_remaining(&mut req.messages, &calls);
                out.end = AgentEnd::Budget(why);
                break;
            }

            if calls.is_empty() {
                match outcome::judge(
                    rules,
                    content.as_deref(),
                    resp.finish_reason.as_deref(),
                    *nudged,
                ) {
                    outcome::TextReply::Accept { summary, verdict } => {
                        if verdict.is_some() {
                            out.verdict_from_text = true;
                            log.append(&ActionEvent::VerdictFromText(event::VerdictFromText {
                                turn,
                                verdict,
                            }))?;
                        }
                        out.summary = summary;
                        out.verdict = verdict;
                        out.end = AgentEnd::Answered;
                        break;
                    }
                    outcome::TextReply::Nudge(text) => {
                        *nudged = true;
                        log.append(&ActionEvent::Nudge(event::Nudge {
                            turn,
                            message: text.to_owned(),
                        }))?;
                        req.messages.push(ChatMessage::user(text));
                        continue;
                    }
                    outcome::TextReply::Fail(why) => {
                        log.append(&ActionEvent::NoResult(event::NoResult {
                            turn,
                            reason: why.clone(),
                        }))?;
                        out.summary = content.unwrap_or_default();
                        out.end = AgentEnd::NoResult(why);
                        break;
                    }
                }
            }
            *nudged = false;
            repeats.new_turn();

            let mut finished = false;
            // The subagents of one turn run concurrently; results keep call order.
            let mut spawned = spawn_concurrently(tool_ctx, &calls).await;
            for (i, call) in calls.iter().enumerate() {
                let name = call.function.name.as_str();
                let args = call.function.arguments.as_str();
                let seen = if name == "finish" || spawned[i].is_some() {
                    repeat::Repeat::Fresh
                } else {
                    repeats.observe(name, args)
                };
                if let repeat::Repeat::Stuck(times) = seen {
                    let why = format!(
                        "stopped: the model made the same `{name}` call {times} times in a row after it was told it was repeating itself"
                    );
                    log.append(&ActionEvent::Stuck(event::Stuck {
                        turn,
                        call_id: Some(call.id.clone()),
                        reason: why.clone(),
                    }))?;
                    answer_remaining(&mut req.messages, &calls);
                    out.end = AgentEnd::Stuck(why);
                    break 'turns;
                }
                let result = match spawned[i].take() {
                    Some(r) => r,
                    None if seen == repeat::Repeat::SameTurn => {
                        let mut o = tools::ToolOutcome::error(
                            name,
                            "not run: the same call was already made in this turn",
                        );
                        o.content = repeat::same_turn(name);
                        Ok(o)
                    }
                    // Time-budget hook: a tool call cannot outlive the budget.
                    None => match tracker.bounded(tools::call(tool_ctx, name, args)).await {
                        Ok(result) => result,
                        Err(why) => {
                            log.append(&budget_exceeded(turn, Some(&call.id), &why))?;
                            req.messages.push(ChatMessage::tool(
                                call.id.clone(),
                                format!("error: stopped: {why}"),
                            ));
                            answer_remaining(&mut req.messages, &calls);
                            out.end = AgentEnd::Budget(why);
                            break 'turns;
                        }
                    },
                };
                let mut outcome = match result {
                    Ok(outcome) => outcome,
                    Err(fault) => {
                        // orch's own fault: the stage ends here, and the model is
                        // never sent this call's result (nor any other request).
                        log.append(&ActionEvent::ToolFault(event::ToolFault {
                            turn,
                            call_id: call.id.clone(),
                            name: name.to_owned(),
                            reason: fault.reason.clone(),
                        }))?;
                        answer_remaining(&mut req.messages, &calls);
                        out.end = AgentEnd::ToolFault(fault);
                        break 'turns;
                    }
                };
                if let Some(t) = outcome.child_tokens {
                    // Subagents spend the stage's tokens too; the spawner has
                    // already charged them to the stage's account.
                    out.tokens.add(t);
                }
                if let Some(fin) = outcome.finish.take() {
                    if cfg.require_verdict && fin.verdict.is_none() {
                        outcome.is_error = true;
                        outcome.content = "error: finish: this stage is a review; call `finish` again with `verdict`: `approve` or `request_changes`".to_owned();
                        outcome.summary = "error: finish without verdict".to_owned();
                    } else {
                        out.summary = fin.summary;
                        out.verdict = fin.verdict;
                        out.verdict_from_text = false;
                        finished = true;
                    }
                }
                if seen == repeat::Repeat::Warn {
                    outcome.content.push_str(&repeat::warning(name));
                }
                log.append(&ActionEvent::Tool(event::Tool {
                    turn,
                    call_id: call.id.clone(),
                    name: name.to_owned(),
                    is_error: outcome.is_error,
                    summary: outcome.summary.clone(),
                    exit_code: outcome.exit_code,
                    duration_ms: outcome.duration_ms,
                    policy: outcome.policy.clone(),
                    sandbox: outcome.sandbox.clone(),
                    changed_path: outcome.changed_path.clone(),
                    repeat: match seen {
                        repeat::Repeat::Warn => Some("warned".to_owned()),
                        repeat::Repeat::SameTurn => Some("same_turn".to_owned()),
                        _ => None,
                    },
                    result_bytes: outcome.content.len(),
                    result: cap_bytes(&outcome.content, LOG_FIELD_CAP),
                }))?;
                if name != "finish" {
                    out.digest.push(outcome.summary.clone());
                }
                // A command that ran and exited non-zero failed too.
                let failed = outcome.is_error
                    || (name == "bash" && outcome.exit_code.is_some_and(|c| c != 0));
                // A call not run (same turn) is neither a new failure nor a success.
                let identical_failures = if seen == repeat::Repeat::SameTurn {
                    0
                } else {
                    repeats.record_result(name, args, failed)
                };
                req.messages
                    .push(ChatMessage::tool(call.id.clone(), outcome.content));
                if identical_failures >= MAX_IDENTICAL_FAILURES {
                    let why = format!(
                        "stopped: the model made the same failing `{name}` call {MAX_IDENTICAL_FAILURES} times in a row"
                    );
                    log.append(&ActionEvent::Stuck(event::Stuck {
                        turn,
                        call_id: None,
                        reason: why.clone(),
                    }))?;
                    // Subagents that already ran still count and report.
                    for (c, o) in calls.iter().zip(spawned.iter_mut()).skip(i + 1) {
                        if let Some(Ok(o)) = o.take() {
                            out.tokens.add(o.child_tokens.unwrap_or_default());
                            req.messages
                                .push(ChatMessage::tool(c.id.clone(), o.content));
                        }
                    }
                    answer_remaining(&mut req.messages, &calls);
                    out.end = AgentEnd::Stuck(why);
                    break 'turns;
                }
            }
            if finished {
                out.end = AgentEnd::Finished;
                break;
            }
        }
        Ok(())
    }
}

/// Runs the `spawn_agent` calls of a turn together when there are several;
/// slot `i` holds the outcome of call `i` (`None`: run it in order).
async fn spawn_concurrently(
    tool_ctx: &ToolContext,
    calls: &[crate::llm::ToolCall],
) -> Vec<Option<Result<tools::ToolOutcome, tools::FatalToolError>>> {
    let mut slots: Vec<Option<Result<tools::ToolOutcome, tools::FatalToolError>>> =
        calls.iter().map(|_| None).collect();
    let idx: Vec<usize> = (0..calls.len())
        .filter(|&i| calls[i].function.name == "spawn_agent")
        .collect();
    if idx.len() < 2 {
        return slots;
    }
    let batch: Vec<(&str, &str)> = idx
        .iter()
        .map(|&i| ("spawn_agent", calls[i].function.arguments.as_str()))
        .collect();
    let outs = tools::call_concurrently(tool_ctx, &batch).await;
    for (i, o) in idx.into_iter().zip(outs) {
        slots[i] = Some(o);
    }
    slots
}

/// A `budget_exceeded` event (`call_id`: the tool call cut short).
fn budget_exceeded(turn: u32, call_id: Option<&str>, why: &str) -> ActionEvent {
    ActionEvent::BudgetExceeded(event::BudgetExceeded {
        turn,
        call_id: call_id.map(str::to_owned),
        reason: why.to_owned(),
    })
}

/// Tool calls as the log keeps them: arguments capped at [`LOG_FIELD_CAP`].
fn logged_calls(calls: &[crate::llm::ToolCall]) -> Vec<event::LoggedCall> {
    calls
        .iter()
        .map(|c| event::LoggedCall {
            id: c.id.clone(),
            name: c.function.name.clone(),
            arguments: cap_bytes(&c.function.arguments, LOG_FIELD_CAP),
        })
        .collect()
}

/// Gives every tool call of an assistant message an id (some servers omit
/// them) so each tool result can answer exactly one call.
fn normalize_assistant(mut msg: ChatMessage) -> ChatMessage {
    msg.role = MessageRole::Assistant;
    for (i, call) in msg.tool_calls.iter_mut().enumerate() {
        if call.id.is_empty() {
            call.id = format!("call_{i}");
        }
    }
    msg
}

/// Adds a "not run" result for calls left unanswered when the loop stops
/// mid-turn, so the saved transcript stays a valid conversation.
fn answer_remaining(messages: &mut Vec<ChatMessage>, calls: &[crate::llm::ToolCall]) {
    for call in calls {
        let answered = messages
            .iter()
            .any(|m| m.tool_call_id.as_deref() == Some(call.id.as_str()));
        if !answered {
            messages.push(ChatMessage::tool(
                call.id.clone(),
                "error: not run: the stage was stopped",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remaining_calls_get_answers() {
        let call = |id: &str| crate::llm::ToolCall {
            id: id.into(),
            kind: "function".into(),
            function: crate::llm::FunctionCall {
                name: "bash".into(),
                arguments: "{}".into(),
            },
        };
        let mut msgs = vec![ChatMessage::tool("a", "done")];
        answer_remaining(&mut msgs, &[call("a"), call("b")]);
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[1].tool_call_id.as_deref(), Some("b"));
    }
}
