//! One turn of the agent loop, as steps over the [`Agent`]: ask the model
//! ([`Agent::ask`]), then judge a reply without tool calls
//! ([`Agent::judge_text`]) or run its calls ([`Agent::run_calls`], one
//! [`Agent::run_call`] each). Each step says whether the loop goes on
//! (`Continue`) or how the agent ends (`Break`); only a failure to write
//! the action log is an `Err`.

use super::{Agent, AgentEnd, LOG_FIELD_CAP, compact, outcome, repeat, whole_file};
use crate::llm::{ChatMessage, ChatModel, MessageRole, ToolCall};
use crate::runlog::{ActionEvent, ActionLog, RecordError, TokenCount, event};
use crate::text::cap_bytes;
use crate::tools::{self, ToolContext};
use repeat::{MAX_IDENTICAL_FAILURES, Repeat};
use std::ops::ControlFlow::{self, Break, Continue};

/// What a step came to: go on (with a value), or end the agent.
type Step<T = ()> = Result<ControlFlow<AgentEnd, T>, RecordError>;

/// The outcomes of a turn's subagents run together, by call index
/// (`None`: the call runs in order).
type Spawned = Vec<Option<Result<tools::ToolOutcome, tools::FatalToolError>>>;

impl Agent<'_> {
    /// One model turn: the budget check, the model's reply, then its text
    /// judged or its tool calls run.
    pub(super) async fn turn(
        &mut self,
        model: &dyn ChatModel,
        tool_ctx: &ToolContext,
        log: &mut ActionLog,
        on_turn: &(dyn Fn(u32, TokenCount) + Sync),
    ) -> Step {
        // A hook said `continue: false` (or refused the task): no result.
        if let Some(why) = self.cfg.hooks.stopped() {
            log.append(&ActionEvent::NoResult(event::NoResult {
                turn: self.out.turns,
                reason: why.clone(),
            }))?;
            return Ok(Break(AgentEnd::NoResult(why)));
        }
        // Budget hook: no turn starts once a limit is used up.
        if let Some(why) = self.tracker.before_turn() {
            log.append(&budget_exceeded(self.out.turns, None, &why))?;
            return Ok(Break(AgentEnd::Budget(why)));
        }
        self.out.turns += 1;
        let turn = self.out.turns;
        // A user's guidance, sent while the stage runs, goes in first.
        super::control::take_guidance(tool_ctx, turn, &mut self.req.messages, log)?;
        // The cap of a constrained turn's reply, when it has one of its own.
        let constrained_cap = (!self.answers_ask()
            && crate::llm::constrained::effective_mode(&self.req)
                == crate::llm::CallMode::Constrained)
            .then(|| model.constrained_max_tokens())
            .flatten();
        let (mut msg, finish_reason) = match self.ask(model, turn, log, on_turn).await? {
            Continue(reply) => reply,
            Break(end) => return Ok(Break(end)),
        };
        self.recover_text_edits(&mut msg, tool_ctx, turn, log)?;
        self.recover_asked_file(&mut msg, tool_ctx, turn, log)?;
        let calls = msg.tool_calls.clone();
        let content = msg.content.clone();
        self.req.messages.push(msg);

        // Budget hook: tokens and cost after every turn. A turn that finishes
        // the stage may still finish it.
        if let Some(why) = self.tracker.after_turn()
            && !calls.is_empty()
            && !calls.iter().any(|c| c.function.name == "finish")
        {
            log.append(&budget_exceeded(turn, None, &why))?;
            answer_remaining(&mut self.req.messages, &calls);
            return Ok(Break(AgentEnd::Budget(why)));
        }
        if calls.is_empty() {
            if finish_reason.as_deref() == Some("length")
                && let Some(cap) = constrained_cap
                && self.ask_after_cutoff(tool_ctx, cap, turn, log)?
            {
                self.nudged = true;
                return Ok(Continue(()));
            }
            return self
                .judge_text(tool_ctx, turn, content, finish_reason.as_deref(), log)
                .await;
        }
        self.nudged = false;
        self.repeats.new_turn();
        self.run_calls(tool_ctx, turn, &calls, log).await
    }

    /// Sends the turn's (compacted) request and logs the reply, with the
    /// tool calls the model wrote as text recovered into it; the reply and
    /// its finish reason.
    async fn ask(
        &mut self,
        model: &dyn ChatModel,
        turn: u32,
        log: &mut ActionLog,
        on_turn: &(dyn Fn(u32, TokenCount) + Sync),
    ) -> Step<(ChatMessage, Option<String>)> {
        let started = std::time::Instant::now();
        // A turn answering a whole-file ask sends its own request.
        let asked = self.asked_request();
        // Compaction and time-budget hook: sends the (compacted) request.
        let mut sent = compact::send_turn(
            model,
            asked.as_ref().unwrap_or(&self.req),
            turn,
            &mut self.compactor,
            &mut self.tracker,
            log,
        )
        .await?;
        // The schema the loop switched to was refused: the turn again, native.
        if let compact::Sent::Failed(e) = &sent
            && asked.is_none()
            && self.schema_refused(turn, e, log)?
        {
            let (c, t) = (&mut self.compactor, &mut self.tracker);
            sent = compact::send_turn(model, &self.req, turn, c, t, log).await?;
        }
        let resp = match sent {
            compact::Sent::Reply(r) => r,
            compact::Sent::OutOfBudget(why) => {
                log.append(&budget_exceeded(turn, None, &why))?;
                return Ok(Break(AgentEnd::Budget(why)));
            }
            compact::Sent::Failed(e) => {
                log.append(&ActionEvent::ModelError(event::ModelError {
                    turn,
                    error: format!("failed to {e}"),
                    retry: None,
                }))?;
                return Ok(Break(AgentEnd::ModelError(e)));
            }
        };
        let usage = resp.usage;
        let tokens = usage.tokens();
        self.tracker.record_turn(tokens, usage.cost_usd);
        self.out.tokens.add(tokens);
        let mut msg = normalize_assistant(resp.message);
        log.append(&ActionEvent::Response(event::Response {
            turn,
            latency_ms: started.elapsed().as_millis() as u64,
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
            cost_usd: usage.cost_usd,
            finish_reason: resp.finish_reason.clone(),
            content: msg.content.as_deref().map(|c| cap_bytes(c, LOG_FIELD_CAP)),
            tool_calls: logged_calls(&msg.tool_calls),
        }))?;
        on_turn(turn, self.out.tokens);
        // Tool calls written as text run like native ones.
        if self.cfg.text_tool_calls
            && let Some((format, from)) = crate::llm::textcalls::recover_into(
                &mut msg,
                &self.req.tools,
                &format!("text{turn}"),
            )
        {
            self.checks.saw_calls_as_text();
            log.append(&ActionEvent::ToolCallsRecovered(
                event::ToolCallsRecovered {
                    turn,
                    recovered_from: from.to_owned(),
                    format: format.as_str().to_owned(),
                    tool_calls: logged_calls(&msg.tool_calls),
                },
            ))?;
            self.text_instead_of_call(turn, "the model wrote its tool call as text", log)?;
        }
        Ok(Continue((msg, resp.finish_reason)))
    }

    /// A reply without tool calls: the result, a nudge (the loop goes on),
    /// or no result ([`outcome::judge`]). A gated writing stage's prose is
    /// its `finish` once its lane changed (git status, asked only then).
    async fn judge_text(
        &mut self,
        tool_ctx: &ToolContext,
        turn: u32,
        content: Option<String>,
        finish_reason: Option<&str>,
        log: &mut ActionLog,
    ) -> Step {
        let prose = content.as_deref().is_some_and(|c| !c.trim().is_empty())
            && finish_reason != Some("length");
        let changed = if self.cfg.finish_from_text && prose {
            changed_paths(tool_ctx).await
        } else {
            0
        };
        let rules = outcome::ReplyRules {
            text_result: self.cfg.text_result,
            require_verdict: self.cfg.require_verdict,
            prose_finishes: changed > 0,
        };
        match outcome::judge(rules, content.as_deref(), finish_reason, self.nudged) {
            outcome::TextReply::FinishFromText { summary } => {
                log.append(&ActionEvent::FinishFromText(event::FinishFromText {
                    turn,
                    changed_paths: changed,
                }))?;
                self.out.summary = summary;
                self.out.verdict = None;
                self.out.finish_from_text = true;
                Ok(Break(AgentEnd::Answered))
            }
            outcome::TextReply::Accept { summary, verdict } => {
                // Stop hooks judge a text answer as they judge a `finish`.
                let hooks = std::sync::Arc::clone(&self.cfg.hooks);
                if let Some(back) = Box::pin(hooks.on_answer(tool_ctx, turn, log)).await? {
                    self.req.messages.push(ChatMessage::user(back));
                    return Ok(Continue(()));
                }
                if verdict.is_some() {
                    self.out.verdict_from_text = true;
                    log.append(&ActionEvent::VerdictFromText(event::VerdictFromText {
                        turn,
                        verdict,
                    }))?;
                }
                self.out.summary = summary;
                self.out.verdict = verdict;
                Ok(Break(AgentEnd::Answered))
            }
            outcome::TextReply::Nudge(text) => {
                self.nudged = true;
                // A writer that talks instead of changing anything, whose
                // task named a file: asked for that file's whole content.
                if text == outcome::NUDGE_FINISH
                    && self.asks_for_change(tool_ctx)
                    && self.may_ask_whole_file(tool_ctx)
                    && self.named_files_unchanged(tool_ctx)
                {
                    self.text_instead_of_call(turn, "the model answered in text", log)?;
                    self.ask_whole_file(whole_file::Why::NoChange, turn, log)?;
                    return Ok(Continue(()));
                }
                log.append(&ActionEvent::Nudge(event::Nudge {
                    turn,
                    message: text.to_owned(),
                }))?;
                // Text where a call was due (not an empty or cut-off reply):
                // under `auto`, the next turn asks for one call under the
                // schema — a small model's call that did not parse as JSON
                // (a raw `"""` in a string) is the usual case.
                if text == outcome::NUDGE_FINISH || text == outcome::NUDGE_VERDICT {
                    self.text_instead_of_call(turn, "the model answered in text", log)?;
                }
                self.req.messages.push(ChatMessage::user(text));
                Ok(Continue(()))
            }
            outcome::TextReply::Fail(why) => {
                log.append(&ActionEvent::NoResult(event::NoResult {
                    turn,
                    reason: why.clone(),
                }))?;
                self.out.summary = content.unwrap_or_default();
                Ok(Break(AgentEnd::NoResult(why)))
            }
        }
    }

    /// Runs a turn's tool calls in order (its subagents together); the
    /// agent ends when one of them calls `finish` or the loop must stop.
    async fn run_calls(
        &mut self,
        tool_ctx: &ToolContext,
        turn: u32,
        calls: &[ToolCall],
        log: &mut ActionLog,
    ) -> Step {
        let mut finished = false;
        let told_before = self.checks.told_no_change();
        let syntax_before = !self.checks.syntax_told().is_empty();
        let lost_before = !self.checks.lost_told().is_empty();
        // The subagents of one turn run concurrently; results keep call order.
        let mut spawned = spawn_concurrently(tool_ctx, calls).await;
        for i in 0..calls.len() {
            match self
                .run_call(tool_ctx, turn, calls, i, &mut spawned, log)
                .await?
            {
                Continue(fin) => finished |= fin,
                Break(end) => return Ok(Break(end)),
            }
        }
        // A model told once that nothing changed, finishing again without
        // a change, did not do the work: no result, never a success.
        if finished && self.out.no_change && self.checks.told_no_change() {
            let why = super::finish_check::NO_CHANGE_AFTER_TOLD.to_owned();
            log.append(&ActionEvent::NoResult(event::NoResult {
                turn,
                reason: why.clone(),
            }))?;
            return Ok(Break(AgentEnd::NoResult(why)));
        }
        // An optional stage's change that still breaks files after it was
        // told is not its result: the run keeps what came before it.
        if finished && let Some(why) = self.checks.take_not_kept() {
            log.append(&ActionEvent::NoResult(event::NoResult {
                turn,
                reason: why.clone(),
            }))?;
            return Ok(Break(AgentEnd::NoResult(why)));
        }
        // A `finish` refused because nothing changed, or because the
        // changed files do not parse: asked for the named file's whole
        // content, once.
        // Or a small model that repeated a call while the files its task
        // showed it stayed as they were: asked for them instead of going
        // round until it is stopped as stuck.
        // Or one that repeated a call while those files, changed, do not
        // parse: asked for them as they are now, with the errors.
        let repeating = self.take_repeat().filter(|_| self.checks.calls_as_text());
        if !finished && self.may_ask_whole_file(tool_ctx) {
            let asked = match repeating {
                // "Nothing changed, and the task asks for a change": not
                // for a stage that may decline (a rework round); the
                // arm below asks nothing of files as the task found them.
                Some(name)
                    if self.asks_for_change(tool_ctx) && self.named_files_unchanged(tool_ctx) =>
                {
                    self.ask_whole_file(whole_file::Why::Repeating(name), turn, log)?;
                    true
                }
                Some(name) => {
                    self.ask_when_repeating_broken(tool_ctx, &name, turn, log)
                        .await?
                }
                None => false,
            };
            if !asked {
                if !told_before && self.checks.told_no_change() {
                    self.ask_whole_file(whole_file::Why::NoChange, turn, log)?;
                } else if !syntax_before
                    && !self.checks.syntax_told().is_empty()
                    && self.checks.calls_as_text()
                {
                    // Only a model that writes its calls as text: one that
                    // calls tools natively fixes the file from the errors.
                    let errors = self.checks.syntax_told().to_vec();
                    self.ask_whole_file(whole_file::Why::DoesNotParse(errors), turn, log)?;
                } else if !lost_before && !self.checks.lost_told().is_empty() {
                    // A small model's change removed what the task names.
                    let names = self.checks.lost_told().to_vec();
                    self.ask_whole_file(whole_file::Why::LostNames(names), turn, log)?;
                }
            }
        }
        Ok(if finished {
            Break(AgentEnd::Finished)
        } else {
            Continue(())
        })
    }

    /// Runs call `i` of `calls` (or takes its subagent's outcome), logs it
    /// and answers it; `Continue(true)` when it was an accepted `finish`.
    async fn run_call(
        &mut self,
        tool_ctx: &ToolContext,
        turn: u32,
        calls: &[ToolCall],
        i: usize,
        spawned: &mut Spawned,
        log: &mut ActionLog,
    ) -> Step<bool> {
        let call = &calls[i];
        let name = call.function.name.as_str();
        let args = call.function.arguments.as_str();
        let seen = if name == "finish" || spawned[i].is_some() {
            Repeat::Fresh
        } else {
            self.repeats.observe(name, args)
        };
        if let Repeat::Stuck(times) = seen {
            let why = format!(
                "stopped: the model made the same `{name}` call {times} times in a row after it was told it was repeating itself"
            );
            log.append(&ActionEvent::Stuck(event::Stuck {
                turn,
                call_id: Some(call.id.clone()),
                reason: why.clone(),
            }))?;
            answer_remaining(&mut self.req.messages, calls);
            return Ok(Break(AgentEnd::Stuck(why)));
        }
        let slot = spawned[i].take();
        let mut outcome = match self
            .call_result(tool_ctx, turn, calls, call, slot, seen, log)
            .await?
        {
            Continue(outcome) => outcome,
            Break(end) => return Ok(Break(end)),
        };
        if let Some(t) = outcome.child_tokens {
            // Subagents spend the stage's tokens too; the spawner has
            // already charged them to the stage's account.
            self.out.tokens.add(t);
        }
        // What orch checks of the work itself (src/agent/finish_check.rs).
        self.check_written(tool_ctx, &mut outcome).await;
        self.note_asked_write(&call.id, &mut outcome);
        let hooks = std::sync::Arc::clone(&self.cfg.hooks);
        Box::pin(hooks.after_tool(tool_ctx, turn, call, &mut outcome, log)).await?;
        self.check_finish(tool_ctx, &mut outcome).await;
        Box::pin(hooks.on_finish(tool_ctx, turn, &mut outcome, log)).await?;
        let finished = self.take_finish(&mut outcome);
        if seen == Repeat::Warn {
            outcome.content.push_str(&repeat::warning(name));
            self.note_repeat(name);
        }
        log.append(&tool_event(turn, call, &outcome, seen))?;
        if let Some(s) = outcome.skill.take() {
            log.append(&ActionEvent::SkillLoad(event::SkillLoad {
                turn,
                call_id: call.id.clone(),
                name: s.name,
                path: s.path,
                blob: s.blob,
                source: s.source,
            }))?;
        }
        if let Some(m) = &outcome.mcp {
            log.append(&ActionEvent::McpCall(event::McpCall {
                turn,
                call_id: call.id.clone(),
                server: m.server.clone(),
                tool: m.tool.clone(),
                duration_ms: m.duration_ms,
                bytes: m.bytes,
                is_error: m.is_error,
            }))?;
        }
        if name != "finish" {
            self.out.digest.push(outcome.summary.clone());
        }
        // A command that ran and exited non-zero failed too.
        let failed =
            outcome.is_error || (name == "bash" && outcome.exit_code.is_some_and(|c| c != 0));
        // A call not run (same turn) is neither a new failure nor a success.
        let identical_failures = if seen == Repeat::SameTurn {
            0
        } else {
            self.repeats.record_result(name, args, failed)
        };
        self.req
            .messages
            .push(ChatMessage::tool(call.id.clone(), outcome.content));
        if identical_failures >= MAX_IDENTICAL_FAILURES {
            return self.stop_repeated_failure(turn, calls, i, spawned, log);
        }
        if identical_failures == MAX_IDENTICAL_FAILURES - 1 {
            self.note_repeat(name);
        }
        Ok(Continue(finished))
    }

    /// The outcome of `call`: its subagent's (`slot`), a "not run" for a
    /// repeat within the turn, or the tool's, run within the time budget.
    /// The agent ends when the budget runs out or the tool fault is orch's.
    #[allow(clippy::too_many_arguments)]
    async fn call_result(
        &mut self,
        tool_ctx: &ToolContext,
        turn: u32,
        calls: &[ToolCall],
        call: &ToolCall,
        slot: Option<Result<tools::ToolOutcome, tools::FatalToolError>>,
        seen: Repeat,
        log: &mut ActionLog,
    ) -> Step<tools::ToolOutcome> {
        let name = call.function.name.as_str();
        let hooks = std::sync::Arc::clone(&self.cfg.hooks);
        let result = match slot {
            Some(r) => r,
            None if seen == Repeat::SameTurn => {
                let mut o = tools::ToolOutcome::error(
                    name,
                    "not run: the same call was already made in this turn",
                );
                o.content = repeat::same_turn(name);
                Ok(o)
            }
            None if name == "write_file"
                && copies_last_tool_result(&self.req.messages, &call.function.arguments) =>
            {
                Ok(tools::ToolOutcome::error(
                    name,
                    "refused: the content is the text of the previous tool result (a report of what a tool did, not the file's content); nothing was written — write the file's full new content, or call finish if the work is done",
                ))
            }
            // Time-budget hook: a tool call cannot outlive the budget;
            // PreToolUse hooks may refuse it first.
            None => match self
                .tracker
                .bounded(async {
                    match Box::pin(hooks.before_tool(tool_ctx, turn, call, log)).await {
                        Ok(Some(refused)) => {
                            // A hook's ask, denied, is on the record too.
                            super::control::log_asks(tool_ctx, turn, &call.id, log)?;
                            Ok(Ok(refused))
                        }
                        Ok(None) => {
                            let args = call.function.arguments.as_str();
                            Box::pin(super::control::call_logging_asks(
                                tool_ctx, name, args, turn, &call.id, log,
                            ))
                            .await
                        }
                        Err(e) => Err(e),
                    }
                })
                .await
            {
                Ok(Ok(result)) => result,
                Ok(Err(record)) => return Err(record),
                Err(why) => {
                    super::control::log_asks(tool_ctx, turn, &call.id, log)?;
                    log.append(&budget_exceeded(turn, Some(&call.id), &why))?;
                    self.req.messages.push(ChatMessage::tool(
                        call.id.clone(),
                        format!("error: stopped: {why}"),
                    ));
                    answer_remaining(&mut self.req.messages, calls);
                    return Ok(Break(AgentEnd::Budget(why)));
                }
            },
        };
        match result {
            Ok(outcome) => Ok(Continue(outcome)),
            Err(fault) => {
                // orch's own fault: the stage ends here, and the model is
                // never sent this call's result (nor any other request).
                log.append(&ActionEvent::ToolFault(event::ToolFault {
                    turn,
                    call_id: call.id.clone(),
                    name: name.to_owned(),
                    reason: fault.reason.clone(),
                }))?;
                answer_remaining(&mut self.req.messages, calls);
                Ok(Break(AgentEnd::ToolFault(fault)))
            }
        }
    }

    /// Takes a `finish` out of `outcome`: the summary and verdict when it is
    /// accepted (true), or an error result for a review without a verdict.
    fn take_finish(&mut self, outcome: &mut tools::ToolOutcome) -> bool {
        let Some(fin) = outcome.finish.take() else {
            return false;
        };
        if self.cfg.require_verdict && fin.verdict.is_none() {
            outcome.is_error = true;
            outcome.content = "error: finish: this stage is a review; call `finish` again with `verdict`: `approve` or `request_changes`".to_owned();
            outcome.summary = "error: finish without verdict".to_owned();
            return false;
        }
        if let Some(n) = self.cfg.require_choice {
            match fin.choice {
                Some(k) if (1..=u64::from(n)).contains(&k) => self.out.choice = Some(k as u32),
                other => {
                    outcome.is_error = true;
                    outcome.content = format!(
                        "error: finish: choose one of the {n} attempts: call `finish` again with `choice` (1 to {n}) and the reason as `summary`{}",
                        other.map_or(String::new(), |k| format!(" (got {k})"))
                    );
                    outcome.summary = "error: finish without a valid choice".to_owned();
                    return false;
                }
            }
        }
        self.out.summary = fin.summary;
        self.out.verdict = fin.verdict;
        self.out.verdict_from_text = false;
        true
    }

    /// Ends the agent as stuck after call `i` failed the same way
    /// [`MAX_IDENTICAL_FAILURES`] times; subagents of the turn that already
    /// ran still count and report.
    fn stop_repeated_failure(
        &mut self,
        turn: u32,
        calls: &[ToolCall],
        i: usize,
        spawned: &mut Spawned,
        log: &mut ActionLog,
    ) -> Step<bool> {
        let name = calls[i].function.name.as_str();
        let why = format!(
            "stopped: the model made the same failing `{name}` call {MAX_IDENTICAL_FAILURES} times in a row"
        );
        log.append(&ActionEvent::Stuck(event::Stuck {
            turn,
            call_id: None,
            reason: why.clone(),
        }))?;
        for (c, o) in calls.iter().zip(spawned.iter_mut()).skip(i + 1) {
            if let Some(Ok(o)) = o.take() {
                self.out.tokens.add(o.child_tokens.unwrap_or_default());
                self.req
                    .messages
                    .push(ChatMessage::tool(c.id.clone(), o.content));
            }
        }
        answer_remaining(&mut self.req.messages, calls);
        Ok(Break(AgentEnd::Stuck(why)))
    }
}

/// The `tool` event of `call`, whose outcome is `outcome`.
fn tool_event(
    turn: u32,
    call: &ToolCall,
    outcome: &tools::ToolOutcome,
    seen: Repeat,
) -> ActionEvent {
    ActionEvent::Tool(event::Tool {
        turn,
        call_id: call.id.clone(),
        name: call.function.name.clone(),
        is_error: outcome.is_error,
        summary: outcome.summary.clone(),
        exit_code: outcome.exit_code,
        duration_ms: outcome.duration_ms,
        policy: outcome.policy.clone(),
        sandbox: outcome.sandbox.clone(),
        changed_path: outcome.changed_path.clone(),
        repeat: match seen {
            Repeat::Warn => Some("warned".to_owned()),
            Repeat::SameTurn => Some("same_turn".to_owned()),
            _ => None,
        },
        result_bytes: outcome.content.len(),
        result: cap_bytes(&outcome.content, LOG_FIELD_CAP),
    })
}

/// Runs the `spawn_agent` calls of a turn together when there are several;
/// slot `i` holds the outcome of call `i` (`None`: run it in order).
async fn spawn_concurrently(tool_ctx: &ToolContext, calls: &[ToolCall]) -> Spawned {
    let mut slots: Spawned = calls.iter().map(|_| None).collect();
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
pub(super) fn logged_calls(calls: &[ToolCall]) -> Vec<event::LoggedCall> {
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
fn answer_remaining(messages: &mut Vec<ChatMessage>, calls: &[ToolCall]) {
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

/// How many paths of the lane differ from its start commit (`git status`;
/// 0 when git cannot say, so an unknown lane never lets prose finish).
async fn changed_paths(tool_ctx: &ToolContext) -> usize {
    let root = tool_ctx.root.clone();
    tokio::task::spawn_blocking(move || crate::git::status_paths(&root).map_or(0, |p| p.len()))
        .await
        .unwrap_or(0)
}

/// Whether a `write_file` call's `content` is the text of the last tool
/// result in `messages` — all of it, or its first line (`updated
/// solution.py (+2 −13)` without the diff below it): a small model copying
/// a tool's report back into the file.
fn copies_last_tool_result(messages: &[ChatMessage], arguments: &str) -> bool {
    let Ok(args) = serde_json::from_str::<serde_json::Value>(arguments) else {
        return false;
    };
    let Some(content) = args.get("content").and_then(serde_json::Value::as_str) else {
        return false;
    };
    let content = content.trim();
    let Some(last) = messages
        .iter()
        .rev()
        .find(|m| m.role == MessageRole::Tool)
        .and_then(|m| m.content.as_deref())
        .map(str::trim)
    else {
        return false;
    };
    !content.is_empty()
        && (content == last || last.lines().next().is_some_and(|l| l.trim() == content))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remaining_calls_get_answers() {
        let call = |id: &str| ToolCall {
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
