//! The events of an action log (`stages/<id>/actions.jsonl`, and each
//! subagent's), as one type: [`ActionEvent`].
//!
//! Every writer of the log appends a variant ([`super::ActionLog::append`]),
//! and every reader matches variants: token recovery
//! ([`super::attempts_from_log`]), the public event stream (`events.rs`,
//! which maps each variant to its public events or says it has none) and
//! `orch log`'s renderer. Both the mapping and the renderer match without a
//! catch-all arm, so a new variant without a rendering and a public-event
//! decision does not compile.
//!
//! Invariants:
//! - The JSON of a variant is the line format of `orch-run/1`
//!   (docs/run-record.md): the tag is the `event` key, the fields are the
//!   variant's, keys in sorted order (the log serializes through
//!   [`serde_json::Value`], whose maps are sorted), `null` for a field that
//!   is `None` unless the field says it is left out.
//! - Reading is tolerant: a field missing from an older line takes its
//!   default, and a line whose event is unknown (a newer orch) or whose
//!   fields do not fit is kept as it is ([`Logged::Unknown`]), so old and
//!   new logs stay readable.

use crate::budget::{BudgetReport, ReportLimits};
use crate::ids::Verdict;
use crate::llm::{Sampling, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One action-log event. `ts` and `elapsed_ms` are added by the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum ActionEvent {
    /// A stage's attempt starts (one per attempt; recovery splits on it).
    StageStart(StageStart),
    /// A role's notes worth keeping: warnings, model note, sampling keys.
    RoleNotes(RoleNotes),
    /// The stage's kernel sandbox.
    Sandbox(Sandbox),
    /// The repository's instruction files given to the stage.
    ProjectInstructions(ProjectInstructions),
    /// The files the task names, shown in the first message.
    ContextFiles(ContextFiles),
    /// The Agent Skills offered to the stage (docs/skills.md).
    Skills(Skills),
    /// A `load_skill` call read a skill file.
    SkillLoad(SkillLoad),
    /// The lessons injected into the task.
    Memory(Memory),
    /// Counting the uses of injected lessons failed.
    MemoryUses(MemoryUses),
    /// What distilling a lesson after the stage came to.
    Distill(Distill),
    /// Files copied into the lane (`worktree_include`).
    WorktreeInclude(WorktreeInclude),
    /// The lane setup command: ran, or skipped as already done.
    LaneSetup(LaneSetup),
    /// An agent's loop starts.
    AgentStart(AgentStart),
    /// A subagent's process starts (its own log).
    ChildStart(ChildStart),
    /// The model server named its context window.
    ContextWindow(ContextWindow),
    /// A request is sent to the model.
    Request(Request),
    /// The model client retried a request.
    Retry(Retry),
    /// The model client stopped streaming.
    StreamFallback(StreamFallback),
    /// The model answered (one per model turn; recovery counts them).
    Response(Response),
    /// Tool calls the model wrote as text, recovered.
    ToolCallsRecovered(ToolCallsRecovered),
    /// The agent's turns switched how they ask for tool calls.
    ToolCallingSwitch(ToolCallingSwitch),
    /// One tool call and its result.
    Tool(Tool),
    /// The conversation was compacted.
    Compaction(Compaction),
    /// The model failed.
    ModelError(ModelError),
    /// A token, time or cost budget ran out.
    BudgetExceeded(BudgetExceeded),
    /// A tool fault that is orch's own (the stage ends).
    ToolFault(ToolFault),
    /// The stage's MCP servers and the tools offered from them.
    McpServers(McpServers),
    /// One call of an MCP tool (beside its `tool` event).
    McpCall(McpCall),
    /// A reviewer's verdict was read from its text.
    VerdictFromText(VerdictFromText),
    /// A writing stage's prose was taken as its `finish`, for its verify
    /// gate to judge.
    FinishFromText(FinishFromText),
    /// A reply that gave no result, answered with a nudge.
    Nudge(Nudge),
    /// A hook ran (`src/hooks`).
    HookRun(HookRun),
    /// A tool call waits for a user's approval (`control/asks/`).
    Ask(Ask),
    /// The answer to an ask: who, allow or deny.
    AskAnswer(AskAnswer),
    /// A user's guidance note went into the next request.
    Guidance(Guidance),
    /// The same after the nudge: no result.
    NoResult(NoResult),
    /// The model repeated itself and was stopped.
    Stuck(Stuck),
    /// A verify command run on the stage's start commit, before the agent.
    Baseline(Baseline),
    /// A verify command run after the agent finished.
    Verify(Verify),
    /// The verify gate did not pass.
    VerifyFailed(VerifyFailed),
    /// A read-only role changed the tree; its changes were discarded.
    ReadOnlyViolation(ReadOnlyViolation),
    /// The lane's changes were staged.
    Staged(Staged),
    /// A subagent was killed.
    Killed(Killed),
    /// An agent's loop ended.
    AgentEnd(AgentEnd),
    /// A stage's attempt ended (recovery reads its status).
    StageEnd(StageEnd),
    /// A failed attempt is retried once with the stage's `escalate_to:`
    /// profile (written between its `stage_end` and the next `stage_start`).
    Escalated(Escalated),
    /// A best-of-N stage chose one of its replicas (docs/best-of-n.md).
    Selected(Selected),
}

/// `stage_start`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct StageStart {
    pub run: String,
    pub stage: String,
    pub role: String,
    /// The commit the stage starts from.
    pub parent: String,
    pub lane: String,
    /// `created`, `reset` or `clean`.
    pub lane_checkout: String,
    pub model: String,
    pub model_source: String,
    pub base_url: Option<String>,
}

/// `role_notes`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct RoleNotes {
    pub role: String,
    pub origin: String,
    pub warnings: Vec<String>,
    pub model_note: Option<String>,
    pub sampling: Sampling,
}

/// `sandbox`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Sandbox {
    pub profile: String,
    pub kernel: String,
}

/// One instruction file that was found (`project_instructions`' `files`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct InstructionFile {
    /// The path in the repository, e.g. `AGENTS.md` or `src/api/CLAUDE.md`.
    pub path: String,
    /// Its git blob id (SHA-1 of the blob, as `git hash-object` prints it).
    pub blob: String,
    /// Its size in bytes.
    pub bytes: usize,
    /// The bytes of it the prompt holds (less than `bytes` when cut, 0 when
    /// the budget was used up before it).
    pub included: usize,
}

/// `project_instructions`: off (`enabled: false, files: []` only), or the
/// files read from `commit`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ProjectInstructions {
    pub enabled: bool,
    pub files: Vec<InstructionFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<usize>,
}

/// One skill offered to a stage (`skills`' `offered`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct OfferedSkill {
    pub name: String,
    /// Its `SKILL.md`: repository-relative, or a path in the user config dir.
    pub path: String,
    /// The git blob id of its `SKILL.md`.
    pub blob: String,
    /// `repository` or `user`.
    pub source: String,
}

/// `skills`: the skills found at `commit` and in the user config dir, what
/// the role selected (`selected`: its `skills:`, `null` for all), the ones
/// offered, those whose description did not fit the prompt's limit
/// (`cut`), the bytes the catalogue adds, every file skipped with why, and
/// what orch ignores in the skills it uses (`notes`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Skills {
    pub commit: String,
    pub selected: Option<Vec<String>>,
    pub offered: Vec<OfferedSkill>,
    pub cut: Vec<String>,
    pub prompt_bytes: usize,
    pub limit_bytes: usize,
    pub skipped: Vec<String>,
    /// What orch ignores in the skills it uses (`allowed-tools`, keys).
    pub notes: Vec<String>,
}

/// `skill_load`: a `load_skill` call (`call_id`) read `path` (blob `blob`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct SkillLoad {
    pub turn: u32,
    pub call_id: String,
    pub name: String,
    pub path: String,
    pub blob: String,
    pub source: String,
}

/// One named file shown in the first message (`context_files`' `files`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ContextFile {
    /// The path in the lane, e.g. `solution.py`.
    pub path: String,
    /// Its size on disk.
    pub bytes: u64,
    /// Bytes of numbered text the message holds for it.
    pub included: usize,
    /// Whether it was cut at its cap.
    pub truncated: bool,
}

/// A named path that exists but was not shown (`context_files`' `skipped`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ContextSkip {
    pub path: String,
    pub reason: String,
}

/// `context_files`: off (`enabled: false` and nothing else), or the files
/// the task names that the first message shows, and those it does not.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ContextFiles {
    pub enabled: bool,
    pub files: Vec<ContextFile>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<ContextSkip>,
    /// Bytes the section adds to the first message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<usize>,
}

/// `memory`: the lessons used, and either what was seen or the error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Memory {
    pub memory_used: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lessons: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problems: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `memory_uses`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct MemoryUses {
    pub error: String,
}

/// `distill`: one of three shapes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Distill {
    /// Lessons were distilled (`memory_commit` is `null` when none came out).
    Done {
        key_event: String,
        what: String,
        lessons: Vec<String>,
        status: String,
        memory_commit: Option<String>,
        usage: Usage,
    },
    /// The distill call failed.
    Failed { key_event: String, error: String },
    /// No key event: nothing to distill.
    Skipped { skipped: bool, reason: String },
}

/// `worktree_include`: what was copied, or the error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct WorktreeInclude {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copied: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unchanged: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_ignored_in_lane: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<Vec<String>>,
    /// `reflink`, `copy` or `none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `lane_setup`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LaneSetup {
    pub command: String,
    pub origin: String,
    pub key: String,
    pub lockfiles: Vec<String>,
    /// False when the lane had the key already.
    pub ran: bool,
    #[serde(flatten)]
    pub outcome: SetupOutcome,
}

/// What a `lane_setup` came to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum SetupOutcome {
    /// The command ran.
    Ran {
        exit_code: Option<i32>,
        timed_out: bool,
        duration_ms: u64,
        sandbox: Option<String>,
        passed: bool,
        /// Tracked paths it changed.
        changed: Vec<String>,
        /// Head and tail of its output.
        output: String,
    },
    /// It did not run, and why.
    Skipped { reason: String },
}

/// `agent_start`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct AgentStart {
    pub agent: String,
    pub max_turns: u32,
    /// The tools offered.
    pub tools: Vec<String>,
    pub system_prompt_bytes: usize,
    pub task_bytes: usize,
    pub budget: ReportLimits,
    pub budget_notes: Vec<String>,
    pub compact_at_tokens: u64,
    pub text_result: bool,
    pub text_tool_calls: bool,
}

/// `child_start`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ChildStart {
    pub agent: String,
    pub role: String,
    pub depth: u32,
    pub max_depth: u32,
    pub pid: u32,
    pub token_budget: Option<u64>,
    pub time_budget_secs: Option<u64>,
}

/// `context_window`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ContextWindow {
    pub turn: u32,
    /// `server`.
    pub source: String,
    pub tokens: u64,
    pub configured: u64,
    pub used: u64,
}

/// `request`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Request {
    pub turn: u32,
    pub messages: usize,
    /// Of the request sent, after compaction.
    pub approx_bytes: usize,
    /// The turn asked for one call under a JSON schema (left out when not).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tool_calls_constrained: bool,
    /// A constrained turn's reply cap (`constrained_max_tokens`), when it
    /// is below the one every turn has (left out when not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The turn sent no tools and asked for calls as text (left out when not).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tool_calls_as_text: bool,
}

/// `tool_calling_switch`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ToolCallingSwitch {
    pub turn: u32,
    /// `native`.
    pub from: String,
    /// `constrained`.
    pub to: String,
    pub reason: String,
}

/// `retry`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Retry {
    pub turn: u32,
    /// `turn` or `summary`.
    pub request: String,
    pub attempt: u32,
    pub of: u32,
    pub wait_ms: u64,
    pub status: Option<u16>,
    pub reason: String,
}

/// `stream_fallback`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct StreamFallback {
    pub turn: u32,
    pub reason: String,
    pub streaming: bool,
}

/// A tool call as the log keeps it (arguments capped).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct LoggedCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// `response`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Response {
    pub turn: u32,
    pub latency_ms: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, read from the server's prompt cache; absent
    /// when 0 (records of servers that report none stay as they were).
    #[serde(skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Of `prompt_tokens`, written to the server's prompt cache; absent when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    pub cost_usd: Option<f64>,
    pub finish_reason: Option<String>,
    pub content: Option<String>,
    pub tool_calls: Vec<LoggedCall>,
}

/// `tool_calls_recovered`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ToolCallsRecovered {
    pub turn: u32,
    /// `text`, or `schema_fit` (a nameless arguments object).
    pub recovered_from: String,
    pub format: String,
    pub tool_calls: Vec<LoggedCall>,
}

/// `tool`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Tool {
    pub turn: u32,
    pub call_id: String,
    pub name: String,
    pub is_error: bool,
    pub summary: String,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub policy: Option<String>,
    pub sandbox: Option<String>,
    pub changed_path: Option<String>,
    /// `warned`, `same_turn` or `null`.
    pub repeat: Option<String>,
    pub result_bytes: usize,
    /// The result's beginning (capped).
    pub result: String,
}

/// The messages a compaction summarized.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Summarized {
    pub messages: usize,
    pub call_ids: Vec<String>,
    pub summary_bytes: usize,
}

/// `compaction` (see docs/budgets-and-compaction.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Compaction {
    pub turn: u32,
    /// `threshold` or `context_length_error`.
    pub trigger: String,
    /// `stub`, `summary`, `stub+summary` or `none`.
    pub method: String,
    pub stubbed: Vec<String>,
    pub summarized: Option<Summarized>,
    pub summary_error: Option<String>,
    pub kept: Vec<String>,
    pub kept_turns: usize,
    pub live_from: usize,
    pub bytes_before: usize,
    pub bytes_after: usize,
    pub est_tokens_before: u64,
    pub est_tokens_after: u64,
    pub trigger_tokens: u64,
    pub context_window: u64,
    pub estimate: String,
    pub under_trigger: bool,
}

/// `model_error`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ModelError {
    pub turn: u32,
    pub error: String,
    /// What orch does about it, when it retries (left out otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<String>,
}

/// `budget_exceeded`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct BudgetExceeded {
    pub turn: u32,
    /// The tool call cut short, if one was (left out otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    pub reason: String,
}

/// `tool_fault`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ToolFault {
    pub turn: u32,
    pub call_id: String,
    pub name: String,
    pub reason: String,
}

/// `mcp_servers`: what a stage got of MCP, and the bytes its tool
/// definitions add to every request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct McpServers {
    /// The servers started, by name.
    pub servers: Vec<String>,
    /// The tools offered: `name`, `description`, `parameters` (what a
    /// replay offers without the servers).
    pub tools: Vec<Value>,
    /// Bytes of the tools' definitions in a request.
    pub bytes: usize,
    /// Servers the role names that no configuration defines (not offered).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// Set when the stage's MCP tools came from a recorded run (a replay).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replayed_from: Option<String>,
}

/// `mcp_call`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct McpCall {
    pub turn: u32,
    pub call_id: String,
    pub server: String,
    pub tool: String,
    pub duration_ms: u64,
    /// Bytes of the result as the server sent it (before capping).
    pub bytes: usize,
    pub is_error: bool,
}

/// `verdict_from_text`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct VerdictFromText {
    pub turn: u32,
    pub verdict: Option<Verdict>,
}

/// `finish_from_text`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct FinishFromText {
    pub turn: u32,
    /// Paths of the lane that differ from its start (git status).
    pub changed_paths: usize,
}

/// `hook_run`: one hook's command ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct HookRun {
    /// The model turn it ran in (none before the first).
    pub turn: Option<u32>,
    /// `PreToolUse`, `PostToolUse`, `Stop`, …
    pub hook_event: String,
    /// Its matcher as written.
    pub matcher: String,
    pub command: String,
    /// Where it was written (`.claude/settings.json`, …).
    pub source: String,
    /// The orch tool it ran for (tool events).
    pub tool: Option<String>,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: u64,
    /// `none`, `context`, `allow`, `block`, `deny`, `ask`, `stop` or
    /// `error` (a non-blocking failure).
    pub decision: String,
    /// The reason it gave (capped), or why it failed.
    pub reason: Option<String>,
}

/// `ask`: a call an `ask` rule names waits for an answer
/// (`control/asks/<id>.json`, [`crate::runlog::control`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Ask {
    pub turn: u32,
    pub call_id: String,
    /// The ask's id within the run (what `orch answer` takes).
    pub id: String,
    /// `bash`, or the MCP tool's name.
    pub tool: String,
    /// The command line or MCP arguments (capped).
    pub command: String,
    /// The rule that asks.
    pub why: String,
    /// `control` or `terminal+control`.
    pub via: String,
    /// When the run stops waiting (`--ask-timeout`), if it does.
    pub expires: Option<String>,
}

/// `ask_answer`: the answer that stands.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct AskAnswer {
    pub turn: u32,
    pub call_id: String,
    pub id: String,
    pub allow: bool,
    /// `cli`, `ui`, `terminal`, a `--by` name, or `orch` (gave up waiting).
    pub by: String,
    /// Why orch answered itself.
    pub reason: Option<String>,
    pub waited_ms: u64,
}

/// `guidance`: a user's note, sent as a user message before a turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Guidance {
    /// The model turn whose request first holds it.
    pub turn: u32,
    /// The note's id within the stage (`control/guidance/<stage>/<id>.json`).
    pub id: String,
    pub by: String,
    /// The note (capped).
    pub text: String,
    /// Its whole length.
    pub bytes: usize,
}

/// `nudge`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Nudge {
    pub turn: u32,
    pub message: String,
}

/// `no_result`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct NoResult {
    pub turn: u32,
    pub reason: String,
}

/// `stuck`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Stuck {
    pub turn: u32,
    /// The repeated call, when it was stopped before running (left out
    /// otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    pub reason: String,
}

/// One verify (or baseline) command's run, as `verify` and `baseline` log it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct CommandRun {
    pub command: String,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: u64,
    pub passed: bool,
    /// Head and tail of its output.
    pub output: String,
    /// What the sandbox enforced (left out when it could not run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
}

/// `baseline`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Baseline {
    /// The stage's start commit.
    pub commit: String,
    #[serde(flatten)]
    pub run: CommandRun,
}

/// `verify`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Verify {
    pub round: u32,
    #[serde(flatten)]
    pub run: CommandRun,
}

/// `verify_failed`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct VerifyFailed {
    pub rounds: u32,
    pub reason: String,
}

/// `read_only_violation`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ReadOnlyViolation {
    /// The paths discarded.
    pub discarded: Vec<String>,
    pub reason: String,
}

/// `staged`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Staged {
    /// `paths` (the watcher's) or how else the lane was staged.
    pub how: String,
    /// How many paths changed.
    pub changed: usize,
}

/// `killed`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Killed {
    pub signal: String,
}

/// `agent_end`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct AgentEnd {
    pub agent: String,
    /// How the loop ended (`Finished`, `Answered`, `TurnLimit`, …).
    pub end: String,
    pub turns: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub verdict: Option<Verdict>,
    pub verdict_from_text: bool,
    pub budget: BudgetReport,
    /// A writing stage finished with nothing changed (left out when false;
    /// changed files that did not parse are on `stage_end`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_change: bool,
}

/// `stage_end`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct StageEnd {
    /// `succeeded`, `failed` or `no_change` (a stage not `required` that
    /// produced no result).
    pub status: String,
    pub commit: String,
    pub branch: String,
    pub reason: Option<String>,
    pub files_changed: usize,
    pub insertions: usize,
    pub deletions: usize,
    pub duration_ms: u64,
    /// `pass`, `fail` or `null` (no gate).
    pub verify: Option<String>,
    pub verdict_from_text: bool,
    /// The stage ended on prose taken as its `finish` after its verify
    /// passed (written only when true, as are the keys added after it).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub finish_from_text: bool,
    /// The reviewer approved again after it was told the change failed its verify.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub approved_despite_failed_verify: bool,
    /// The lane watcher said what changed (false: the lane was walked).
    pub changes_from_watch: bool,
    /// A writing stage finished with nothing changed (left out when false).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_change: bool,
    /// The changed files that did not parse when the stage finished, one
    /// first error each (left out when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub syntax_errors: Vec<String>,
}

/// `escalated`: the attempt that just ended failed in a way a stronger
/// model may not, and the stage runs once more, from its start commit,
/// with `to_profile`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Escalated {
    /// The attempt that failed (1).
    pub attempt: u32,
    /// Its model.
    pub from_model: String,
    /// Where its model came from (`run model`, `stage model: …`).
    pub from_source: String,
    /// The profile the next attempt uses.
    pub to_profile: String,
    /// That profile's model.
    pub to_model: String,
    /// `stuck`, `no_result`, `verify_failed`, `turn_limit` or `budget`.
    pub cause: String,
    /// Why the attempt failed, as its `stage_end` says.
    pub reason: String,
    /// The commit the next attempt starts from (the stage's start commit).
    pub restart_from: String,
}

/// `selected`: a best-of-N stage chose replica `chosen` of `of`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Selected {
    /// `tests`, `reviewer` or `tests+reviewer`.
    pub strategy: String,
    /// The chosen replica, 1-based (the best attempt when none passed).
    pub chosen: u32,
    /// How many replicas there were.
    pub of: u32,
    /// Whether the chosen replica passed its checks (`None`: no checks ran).
    pub passed: Option<bool>,
    /// Why it was chosen.
    pub reason: String,
    /// One line per replica: `#k status, checks, diff lines, tokens`.
    pub candidates: Vec<String>,
    /// The commit the stage records (the chosen replica's tree).
    pub commit: String,
}

impl ActionEvent {
    /// The event's line object: its fields, `event`, and the `ts` and
    /// `elapsed_ms` the log adds (keys sorted, as every line has them).
    pub(crate) fn to_line(&self, ts: &str, elapsed_ms: u64) -> Result<Value, serde_json::Error> {
        let mut line = serde_json::to_value(self)?;
        if let Value::Object(o) = &mut line {
            o.insert("ts".to_owned(), Value::from(ts));
            o.insert("elapsed_ms".to_owned(), Value::from(elapsed_ms));
        }
        Ok(line)
    }
}

/// One line of an action log as read back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LogLine {
    /// Milliseconds since the stage (or subagent) started; 0 when absent.
    pub elapsed_ms: u64,
    /// The event.
    pub event: Logged,
}

/// An event read back: one this orch knows, or a line it does not (an
/// event a newer orch writes, or fields that do not fit), kept whole.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Logged {
    /// A known event.
    Known(ActionEvent),
    /// Any other JSON object: its `event` name (`?` when none) and the
    /// whole object.
    Unknown { name: String, line: Value },
}

/// Parses one line of an action log; `None` when it is not JSON (a torn
/// last line left by a kill mid-write).
pub(crate) fn parse_line(line: &str) -> Option<LogLine> {
    let value: Value = serde_json::from_str(line).ok()?;
    let elapsed_ms = value.get("elapsed_ms").and_then(Value::as_u64).unwrap_or(0);
    let event = match ActionEvent::deserialize(&value) {
        Ok(known) => Logged::Known(known),
        Err(_) => Logged::Unknown {
            name: value
                .get("event")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned(),
            line: value,
        },
    };
    Some(LogLine { elapsed_ms, event })
}

/// The lines of a whole action log that parse ([`parse_line`]), in order.
pub(crate) fn parse_log(text: &str) -> impl Iterator<Item = LogLine> + '_ {
    text.lines().filter_map(parse_line)
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests;
