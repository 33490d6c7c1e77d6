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
mod calling;
pub(crate) use calling::mode_name;
pub(crate) mod compact;
pub(crate) mod context_files;
mod control;
pub(crate) mod finish_check;
pub(crate) mod instructions;
pub(crate) mod outcome;
pub(crate) mod prompt;
pub(crate) mod repeat;
mod textedits;
mod turn;
pub(crate) mod verify;
mod whole_file;

use crate::ids::Verdict;
use crate::llm::{ChatMessage, ChatModel, ChatRequest, LlmError};
use crate::runlog::{ActionEvent, ActionLog, RecordError, TokenCount, event};
use crate::tools::{self, ToolContext};

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
    /// A best-of-N reviewer: `finish` must carry a `choice` in `1..=n`.
    pub require_choice: Option<u32>,
    /// A non-empty text answer is the role's result (`result: text` roles,
    /// `orch agent`); otherwise only `finish` ends the agent as a success.
    pub text_result: bool,
    /// Recover tool calls the model wrote as text (on unless a stage sets
    /// `text_tool_calls: false`).
    pub text_tool_calls: bool,
    /// Apply search/replace and whole-file blocks the model wrote as text
    /// ([`crate::llm::textedits`]); only ever for a role offered the write
    /// tools.
    pub text_edits: bool,
    /// Files the task named that its first message shows whole (not cut):
    /// a writing agent that changed nothing may be asked for one's
    /// complete new content ([`whole_file`]).
    pub whole_files: Vec<String>,
    /// The task as the stage gave it, without the named files, verify
    /// baseline or memory: what a whole-file ask repeats.
    pub brief: String,
    /// A writing stage with a verify gate: a prose reply after the lane
    /// changed ends the loop as its `finish`, for the gate to judge
    /// ([`outcome::TextReply::FinishFromText`]).
    pub finish_from_text: bool,
    /// The stage's result is optional (`required: false`, the built-in
    /// docs stage): a `finish` without a change is its answer, taken at its
    /// word (recorded `no_change: true`), and it is never asked for a named
    /// file whole because nothing changed — that ask is for the stage whose
    /// task is the change (issue 28: the 1.5B docs stage was asked for
    /// `solution.py`, wrote it back unchanged, was refused, and ended with
    /// no result after 4 turns).
    pub change_optional: bool,
    /// A `finish` without a change is an answer, taken at its word
    /// (recorded `no_change: true`) and never refused or answered with a
    /// whole-file ask: a stage whose result is optional, and a rework round
    /// (`code.r2`), whose coder may decline the review's findings — the
    /// next review judges it (issue 28: the 1.5B reviewer asked for a
    /// `TypeError` the task never named, the coder rightly declined twice,
    /// and the run failed, losing its correct fix).
    pub decline_allowed: bool,
    /// Token, time and cost limits ([`budget`]).
    pub budget: crate::budget::StageBudget,
    /// When the conversation is condensed ([`compact`]).
    pub compaction: compact::CompactConfig,
    /// The hooks of this agent ([`crate::hooks`]; none by default).
    pub hooks: std::sync::Arc<crate::hooks::StageHooks>,
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
    /// The model repeated the same failing call [`repeat::MAX_IDENTICAL_FAILURES`]
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
    /// A best-of-N reviewer's choice (1-based).
    pub choice: Option<u32>,
    /// The verdict was read from the reviewer's text, not from `finish`.
    pub verdict_from_text: bool,
    /// The agent's last end was a prose reply taken as its `finish`
    /// (the verify gate judges it).
    pub finish_from_text: bool,
    /// A reviewer approved again after it was told the change it approves
    /// failed its verify.
    pub approved_despite_failed_verify: bool,
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
    /// A writing stage's `finish` was accepted with nothing changed in the
    /// lane, after it was told so once ([`finish_check`]).
    pub no_change: bool,
    /// The first error of each changed file that did not parse when the
    /// `finish` was accepted, after it was told so once.
    pub syntax_errors: Vec<String>,
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
    let mut agent = Agent::start(model, tool_ctx, cfg, log).await?;
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
    /// How turns ask for tool calls ([`crate::llm::constrained`]).
    calling: crate::llm::constrained::CallState,
    /// The model's label (model and server): what a switch to constrained
    /// calls teaches the run's later agents ([`calling`]).
    model_label: String,
    /// What the agent was told about its changes ([`finish_check`]).
    checks: finish_check::FinishChecks,
    /// Whether a file's whole content was asked for ([`whole_file`]).
    whole: whole_file::WholeFileAsk,
}

impl<'c> Agent<'c> {
    /// The conversation's start: system prompt, task, the offered tools.
    /// `agent_start`'s `compact_at_tokens` is `compact_at` × the window
    /// known now: the smaller of the configured one and the server's when
    /// that is cached or already answered. The server's probe is never
    /// awaited here: a window that arrives later is logged
    /// (`context_window`) and used from the turn after it arrives, and a
    /// first request the server refuses as too long is compacted and sent
    /// again ([`compact::send_turn`]), so turn 1 waits for no round trip
    /// but its own.
    pub(crate) async fn start(
        model: &dyn ChatModel,
        tool_ctx: &ToolContext,
        cfg: &'c AgentConfig,
        log: &mut ActionLog,
    ) -> Result<Agent<'c>, RecordError> {
        // Native, constrained or text calls: the profile's (or the role's)
        // `tool_calling`, switched at most once by the loop ([`calling`]).
        // An earlier agent of this run found this model writes its calls as
        // text: constrained from the first turn (logged below).
        let model_label = model.label();
        let learned =
            crate::llm::constrained::CallState::learned(model.tool_calling(), &model_label);
        let calling = learned
            .unwrap_or_else(|| crate::llm::constrained::CallState::new(model.tool_calling()));
        let first_mode = calling.mode();
        // SessionStart and UserPromptSubmit hooks may add to the task.
        let mut task = cfg.task.clone();
        Box::pin(cfg.hooks.on_start(tool_ctx, &mut task, log)).await?;
        let req = ChatRequest {
            messages: vec![
                ChatMessage::system(cfg.system_prompt.clone()),
                ChatMessage::user(task),
            ],
            tools: tools::offered(tool_ctx),
            agent_path: cfg.agent_path.clone(),
            call_mode: calling.mode(),
        };
        // Budget and compaction state (src/agent/budget.rs, compact.rs): `req`
        // keeps the whole conversation; each turn sends a compacted view of it.
        let tracker = crate::budget::Tracker::new(cfg.budget.clone(), cfg.max_turns);
        let mut compactor = compact::Compactor::new(cfg.compaction);
        // The server's window: used now when known (cached, or the probe
        // already answered); else the first request goes at once and the
        // window applies from the turn after it arrives
        // ([`compact::send_turn`]).
        let known = futures_util::FutureExt::now_or_never(model.probe_context_window()).flatten();
        if let Some(tokens) = known {
            compactor.learn_window(tokens);
        }
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
        if learned.is_some() {
            log.append(&ActionEvent::ToolCallingSwitch(event::ToolCallingSwitch {
                turn: 1,
                from: calling::mode_name(crate::llm::CallMode::Native).to_owned(),
                to: calling::mode_name(first_mode).to_owned(),
                reason: format!(
                    "an earlier agent of this run found that {model_label} writes its tool calls as text; this agent asks for one call under a JSON schema from its first turn"
                ),
            }))?;
        }
        Ok(Agent {
            cfg,
            req,
            out: AgentOutcome {
                end: AgentEnd::TurnLimit,
                summary: String::new(),
                verdict: None,
                choice: None,
                verdict_from_text: false,
                finish_from_text: false,
                approved_despite_failed_verify: false,
                turns: 0,
                tokens: TokenCount::default(),
                digest: Vec::new(),
                transcript: Vec::new(),
                budget: crate::budget::BudgetReport::default(),
                no_change: false,
                syntax_errors: Vec::new(),
            },
            tracker,
            compactor,
            repeats: repeat::RepeatGuard::default(),
            nudged: false,
            calling,
            model_label,
            checks: finish_check::FinishChecks::for_mode(first_mode),
            whole: whole_file::WholeFileAsk::at_start(tool_ctx, &cfg.whole_files),
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
        // Prose is a finish only when the gate passes.
        self.out.finish_from_text = false;
    }

    /// Tells an agent that ended on its own terms something new (a new user
    /// message); the next [`Agent::run`] goes on from there, within the same
    /// turn limit and budget.
    pub(crate) fn tell(&mut self, text: String) {
        self.req.messages.push(ChatMessage::user(text));
        self.out.end = AgentEnd::TurnLimit;
        self.nudged = false;
        // Its next end is judged afresh (by `finish` or by prose again).
        self.out.finish_from_text = false;
    }

    /// Model turns used so far.
    pub(crate) fn turns(&self) -> u32 {
        self.out.turns
    }

    /// The verdict of the agent's last end.
    pub(crate) fn verdict(&self) -> Option<Verdict> {
        self.out.verdict
    }

    /// Records that a reviewer approved again after it was told the change
    /// failed its verify.
    pub(crate) fn approved_despite_failed_verify(&mut self) {
        self.out.approved_despite_failed_verify = true;
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
            no_change: out.no_change,
        }))?;
        out.transcript = std::mem::take(&mut self.req.messages);
        Ok(out)
    }

    /// Runs the loop until the agent ends (see [`AgentEnd`]): one
    /// [`Agent::turn`] after another, within the turn limit.
    pub(crate) async fn run(
        &mut self,
        model: &dyn ChatModel,
        tool_ctx: &ToolContext,
        log: &mut ActionLog,
        on_turn: &(dyn Fn(u32, TokenCount) + Sync),
    ) -> Result<(), RecordError> {
        self.out.end = AgentEnd::TurnLimit;
        while self.out.turns < self.cfg.max_turns {
            if let std::ops::ControlFlow::Break(end) =
                self.turn(model, tool_ctx, log, on_turn).await?
            {
                self.out.end = end;
                break;
            }
        }
        Ok(())
    }
}
