//! Running the hooks of one agent ([`StageHooks`]) at its points:
//! [`StageHooks::on_start`] (SessionStart, UserPromptSubmit),
//! [`StageHooks::before_tool`] (PreToolUse), [`StageHooks::after_tool`]
//! (PostToolUse) and [`StageHooks::on_finish`] (Stop, SubagentStop).
//!
//! A hook gets Claude Code's JSON on stdin and runs as a `bash` call runs
//! ([`crate::tools::run_sandboxed`]: the lane as its working directory, the
//! scrubbed environment plus `CLAUDE_PROJECT_DIR`, the stage's kernel
//! sandbox, its own process group, killed at its timeout). Its stdin and
//! stderr go through two files in the sandbox's private temp dir, so the
//! exec layer keeps its one-pipe, closed-stdin rule. What it says:
//!
//! - exit 0: stdout, when it is a JSON object, is read as Claude Code's
//!   (`continue: false` + `stopReason`, `decision: "block"` + `reason`,
//!   PreToolUse's `hookSpecificOutput.permissionDecision`,
//!   `additionalContext`); plain stdout of SessionStart and
//!   UserPromptSubmit is context added to the task;
//! - exit 2: blocks, stderr is the reason (PreToolUse: the call is refused;
//!   PostToolUse: the reason is added to the result; Stop: the `finish` is
//!   sent back; UserPromptSubmit: the task is refused and the agent ends);
//! - any other exit, a timeout, a hook that could not start: a non-blocking
//!   error, logged and shown on stderr.
//!
//! Every run is one `hook_run` event in the action log.

use super::{Hook, HookEvent, claude_names};
use crate::runlog::{ActionEvent, ActionLog, RecordError, event};
use crate::tools::{ToolContext, ToolOutcome};
use serde_json::{Value, json};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Bytes of a hook's stderr read back (its reason).
const STDERR_BYTES: u64 = 16 * 1024;

/// Bytes of a hook's reason kept in the `hook_run` event.
const REASON_LOG_BYTES: usize = 1024;

/// The hooks of one agent and what they need to describe it.
#[derive(Debug, Default)]
pub(crate) struct StageHooks {
    hooks: Vec<Hook>,
    /// `<run id>/<agent path>`: Claude Code's `session_id`.
    session_id: String,
    /// The agent's action log (what the agent did so far).
    transcript_path: PathBuf,
    /// The event a `finish` runs: `Stop`, or `SubagentStop` in a subagent.
    stop_event: Option<HookEvent>,
    /// A Stop hook already sent the agent back (`stop_hook_active`).
    stop_active: Mutex<bool>,
    /// Why a hook said `continue: false` (or refused the task): the agent
    /// ends at its next turn.
    stopped: Mutex<Option<String>>,
}

/// What the hooks of one event came to.
#[derive(Debug, Default)]
struct Said {
    /// Reasons of the hooks that block.
    block: Vec<String>,
    /// Reasons of the PreToolUse hooks that ask for approval (without
    /// `--yes`): the call waits for it as a role's `ask` rule does.
    ask: Vec<String>,
    /// Text to add (additional context, a PostToolUse note).
    context: Vec<String>,
}

/// One hook's process: how it ended and what it wrote.
struct Ran {
    exit_code: Option<i32>,
    timed_out: bool,
    stdout: String,
    stderr: String,
    duration_ms: u64,
    /// Why it did not run at all.
    failed: Option<String>,
}

impl StageHooks {
    /// The hooks of the agent `session_id` (`<run>/<agent path>`), whose
    /// action log is at `transcript_path`; `subagent`: its `finish` runs
    /// the `SubagentStop` hooks, else the `Stop` ones.
    pub(crate) fn new(
        hooks: Vec<Hook>,
        session_id: String,
        transcript_path: PathBuf,
        subagent: bool,
    ) -> StageHooks {
        StageHooks {
            hooks,
            session_id,
            transcript_path,
            stop_event: Some(if subagent {
                HookEvent::SubagentStop
            } else {
                HookEvent::Stop
            }),
            ..StageHooks::default()
        }
    }

    /// Why a hook stopped the agent (`continue: false`, a refused task):
    /// the agent ends without a result.
    pub(crate) fn stopped(&self) -> Option<String> {
        self.stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// SessionStart, then UserPromptSubmit with the task: the context they
    /// add is appended to `task`; a refused task stops the agent
    /// ([`StageHooks::stopped`]) before its first request.
    pub(crate) async fn on_start(
        &self,
        ctx: &ToolContext,
        task: &mut String,
        log: &mut ActionLog,
    ) -> Result<(), RecordError> {
        let start = json!({"source": "startup"});
        let said = self
            .fire(ctx, HookEvent::SessionStart, None, None, start, log)
            .await?;
        let mut context = said.context;
        let prompt = json!({"prompt": task.as_str()});
        let said = self
            .fire(ctx, HookEvent::UserPromptSubmit, None, None, prompt, log)
            .await?;
        context.extend(said.context);
        if !said.block.is_empty() {
            self.stop(format!(
                "a UserPromptSubmit hook refused the task: {}",
                said.block.join("; ")
            ));
        }
        if !context.is_empty() {
            task.push_str("\n\n# Context from hooks\n\n");
            task.push_str(&context.join("\n\n"));
        }
        Ok(())
    }

    /// PreToolUse for the call `name(arguments)`: the refusal the model
    /// sees when a hook refuses it, else `None` (the call runs, under
    /// orch's policy as always).
    pub(crate) async fn before_tool(
        &self,
        ctx: &ToolContext,
        turn: u32,
        call: &crate::llm::ToolCall,
        log: &mut ActionLog,
    ) -> Result<Option<ToolOutcome>, RecordError> {
        let name = call.function.name.as_str();
        if name == "finish" || !self.any(HookEvent::PreToolUse, Some(name)) {
            return Ok(None);
        }
        let input = tool_fields(ctx, call);
        let said = self
            .fire(
                ctx,
                HookEvent::PreToolUse,
                Some(turn),
                Some(name),
                input,
                log,
            )
            .await?;
        if said.block.is_empty() && said.ask.is_empty() {
            return Ok(None);
        }
        if said.block.is_empty() {
            // Asked for approval: the terminal, `orch answer`, `orch ui`
            // (a run with a control channel) — or denied at once when
            // nobody can be asked, so a run in CI never hangs.
            let why = format!("a PreToolUse hook asks: {}", said.ask.join("; "));
            let shown = shown_call(call);
            return Ok(
                match crate::tools::approval::ask(ctx, name, &shown, &why).await {
                    Ok(_) => None,
                    Err(reason) => Some(refused(
                        name,
                        &format!("not run: {reason}"),
                        &format!("not approved: {reason}"),
                        &format!("deny: {reason}"),
                    )),
                },
            );
        }
        let why = said.block.join("; ");
        Ok(Some(refused(
            name,
            &format!("not run: refused by a PreToolUse hook: {why}"),
            &format!("refused by a hook: {why}"),
            &format!("deny: PreToolUse hook: {why}"),
        )))
    }

    /// PostToolUse for `call`, whose result is `outcome`: what the hooks
    /// say (a blocking reason, additional context) is added to the result.
    pub(crate) async fn after_tool(
        &self,
        ctx: &ToolContext,
        turn: u32,
        call: &crate::llm::ToolCall,
        outcome: &mut ToolOutcome,
        log: &mut ActionLog,
    ) -> Result<(), RecordError> {
        let name = call.function.name.as_str();
        if name == "finish" || !self.any(HookEvent::PostToolUse, Some(name)) {
            return Ok(());
        }
        let mut input = tool_fields(ctx, call);
        input["tool_response"] = json!({
            "content": outcome.content,
            "success": !outcome.is_error,
            "exit_code": outcome.exit_code,
            "filePath": outcome.changed_path.as_ref().map(|p| ctx.root.join(p)),
        });
        let said = self
            .fire(
                ctx,
                HookEvent::PostToolUse,
                Some(turn),
                Some(name),
                input,
                log,
            )
            .await?;
        for why in &said.block {
            outcome
                .content
                .push_str(&format!("\n\nPostToolUse hook: {why}"));
        }
        for c in &said.context {
            outcome.content.push_str(&format!("\n\n{c}"));
        }
        Ok(())
    }

    /// Stop (SubagentStop in a subagent) before the `finish` in `outcome`
    /// is accepted: a hook that blocks turns it into a tool error carrying
    /// its reason, so the agent goes on, as after a failed verify.
    pub(crate) async fn on_finish(
        &self,
        ctx: &ToolContext,
        turn: u32,
        outcome: &mut ToolOutcome,
        log: &mut ActionLog,
    ) -> Result<(), RecordError> {
        if outcome.finish.is_none() {
            return Ok(());
        }
        let Some((event, why)) = self.stop_hooks(ctx, turn, log).await? else {
            return Ok(());
        };
        outcome.finish = None;
        outcome.is_error = true;
        outcome.content = format!(
            "error: finish: not accepted yet: a {} hook says:\n\n{why}\n\nDo what it asks, then call `finish` again.",
            event.as_str()
        );
        outcome.summary = crate::text::one_line(
            &format!("error: finish refused by a {} hook: {why}", event.as_str()),
            120,
        );
        Ok(())
    }

    /// Stop (SubagentStop) before a text answer is accepted as the agent's
    /// result: the message that sends the agent back, when a hook blocks.
    pub(crate) async fn on_answer(
        &self,
        ctx: &ToolContext,
        turn: u32,
        log: &mut ActionLog,
    ) -> Result<Option<String>, RecordError> {
        Ok(self.stop_hooks(ctx, turn, log).await?.map(|(event, why)| {
            format!(
                "Your answer is not accepted yet: a {} hook says:\n\n{why}\n\nDo what it asks, then answer again.",
                event.as_str()
            )
        }))
    }

    /// Runs the Stop (or SubagentStop) hooks; the event and the reasons
    /// when one blocks (the next run is told `stop_hook_active: true`).
    async fn stop_hooks(
        &self,
        ctx: &ToolContext,
        turn: u32,
        log: &mut ActionLog,
    ) -> Result<Option<(HookEvent, String)>, RecordError> {
        let Some(event) = self.stop_event else {
            return Ok(None);
        };
        if !self.any(event, None) {
            return Ok(None);
        }
        let active = *self.stop_active.lock().unwrap_or_else(|e| e.into_inner());
        let input = json!({"stop_hook_active": active});
        let said = self.fire(ctx, event, Some(turn), None, input, log).await?;
        if said.block.is_empty() {
            return Ok(None);
        }
        *self.stop_active.lock().unwrap_or_else(|e| e.into_inner()) = true;
        Ok(Some((event, said.block.join("\n\n"))))
    }

    /// Whether a hook of `event` would run (for `tool`, when it is a tool event).
    fn any(&self, event: HookEvent, tool: Option<&str>) -> bool {
        self.hooks
            .iter()
            .any(|h| h.event == event && tool.is_none_or(|t| h.matches_tool(t)))
    }

    fn stop(&self, why: String) {
        let mut s = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
        if s.is_none() {
            *s = Some(why);
        }
    }

    /// Runs every hook of `event` (matching `tool`) in order with the
    /// common fields plus `fields` on stdin; logs each run.
    async fn fire(
        &self,
        ctx: &ToolContext,
        event: HookEvent,
        turn: Option<u32>,
        tool: Option<&str>,
        mut fields: Value,
        log: &mut ActionLog,
    ) -> Result<Said, RecordError> {
        let mut said = Said::default();
        let hooks: Vec<&Hook> = self
            .hooks
            .iter()
            .filter(|h| h.event == event && tool.is_none_or(|t| h.matches_tool(t)))
            .collect();
        if hooks.is_empty() {
            return Ok(said);
        }
        fields["session_id"] = json!(self.session_id);
        fields["transcript_path"] = json!(self.transcript_path);
        fields["cwd"] = json!(ctx.root);
        fields["permission_mode"] = json!("default");
        fields["hook_event_name"] = json!(event.as_str());
        for hook in hooks {
            // Boxed: the agent loop's futures stay small (they nest).
            let ran = Box::pin(run_hook(ctx, hook, &fields)).await;
            let (decision, reason) = judge(ctx, event, &ran, &mut said);
            if decision == "stop" {
                self.stop(format!(
                    "a {} hook stopped the agent: {}",
                    event.as_str(),
                    reason.as_deref().unwrap_or("(no reason given)")
                ));
            }
            if decision == "error" {
                crate::ui::status_line(&format!(
                    "orch: note: {} hook `{}` ({}) failed: {}",
                    event.as_str(),
                    crate::text::one_line(&hook.command, 60),
                    hook.source,
                    reason.as_deref().unwrap_or("")
                ));
            }
            log.append(&ActionEvent::HookRun(event::HookRun {
                turn,
                hook_event: event.as_str().to_owned(),
                matcher: hook.matcher.clone(),
                command: hook.command.clone(),
                source: hook.source.clone(),
                tool: tool.map(str::to_owned),
                exit_code: ran.exit_code,
                timed_out: ran.timed_out,
                duration_ms: ran.duration_ms,
                decision: decision.to_owned(),
                reason: reason.map(|r| crate::text::cap_bytes(&r, REASON_LOG_BYTES)),
            }))?;
        }
        Ok(said)
    }
}

/// What an approval shows of `call`: a `bash` call's command, else the
/// tool's name and its arguments.
fn shown_call(call: &crate::llm::ToolCall) -> String {
    let args = call.function.arguments.as_str();
    let command = serde_json::from_str::<Value>(args)
        .ok()
        .and_then(|v| v.get("command")?.as_str().map(str::to_owned));
    match command {
        Some(c) if call.function.name == "bash" => c,
        _ => format!("{} {args}", call.function.name),
    }
}

/// The tool fields of the input: `tool_name` (Claude Code's name, else
/// orch's), `tool_input` (orch's arguments plus Claude Code's `file_path`,
/// absolute, for a `path`) and `tool_use_id`.
fn tool_fields(ctx: &ToolContext, call: &crate::llm::ToolCall) -> Value {
    let name = call.function.name.as_str();
    let mut input: Value =
        serde_json::from_str(&call.function.arguments).unwrap_or_else(|_| json!({}));
    if let Some(path) = input.get("path").and_then(Value::as_str) {
        let abs = ctx.root.join(path);
        input["file_path"] = json!(abs);
    }
    json!({
        "tool_name": claude_names(name).first().copied().unwrap_or(name),
        "tool_input": input,
        "tool_use_id": call.id,
    })
}

/// What `ran` says for `event`: the decision word of the `hook_run` event
/// and its reason; blocks and context are added to `said`.
fn judge(
    ctx: &ToolContext,
    event: HookEvent,
    ran: &Ran,
    said: &mut Said,
) -> (&'static str, Option<String>) {
    if let Some(why) = &ran.failed {
        return ("error", Some(why.clone()));
    }
    if ran.timed_out {
        return (
            "error",
            Some("timed out; its process group was killed".to_owned()),
        );
    }
    let stderr = ran.stderr.trim();
    match ran.exit_code {
        Some(0) => {}
        Some(2) => {
            let why = if stderr.is_empty() {
                "(the hook gave no reason on stderr)".to_owned()
            } else {
                stderr.to_owned()
            };
            if event == HookEvent::SessionStart {
                // Claude Code shows it to the user only.
                return ("error", Some(why));
            }
            said.block.push(why.clone());
            return ("block", Some(why));
        }
        Some(code) => return ("error", Some(format!("exit {code}: {stderr}"))),
        None => return ("error", Some("killed by a signal".to_owned())),
    }
    let stdout = ran.stdout.trim();
    let Some(out) = serde_json::from_str::<Value>(stdout)
        .ok()
        .filter(Value::is_object)
    else {
        if !stdout.is_empty()
            && matches!(event, HookEvent::SessionStart | HookEvent::UserPromptSubmit)
        {
            said.context.push(stdout.to_owned());
            return ("context", None);
        }
        return ("none", None);
    };
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    name_unhonoured(event, &out);
    if let Some(msg) = text(&out, "systemMessage") {
        crate::ui::status_line(&format!("orch: {} hook: {msg}", event.as_str()));
    }
    if out.get("continue") == Some(&Value::Bool(false)) {
        let why = text(&out, "stopReason").unwrap_or_else(|| "(no reason given)".to_owned());
        said.block.push(why.clone());
        return ("stop", Some(why));
    }
    let specific = out.get("hookSpecificOutput").cloned().unwrap_or_default();
    if let Some(c) = text(&specific, "additionalContext") {
        said.context.push(c);
    }
    if event == HookEvent::PreToolUse {
        let why = text(&specific, "permissionDecisionReason")
            .or_else(|| text(&out, "reason"))
            .unwrap_or_else(|| "(no reason given)".to_owned());
        match text(&specific, "permissionDecision").as_deref() {
            Some("deny") => {
                said.block.push(why.clone());
                return ("deny", Some(why));
            }
            // `--yes` allows what asks; otherwise the call is asked about
            // as a role's `ask` rule is ([`crate::tools::approval`]).
            Some("ask") if ctx.policy.assume_yes => return ("allow", Some(why)),
            Some("ask") => {
                said.ask.push(why.clone());
                return ("ask", Some(why));
            }
            // `allow` never widens orch's policy: the call is still checked.
            Some("allow") => return ("allow", None),
            _ => {}
        }
    }
    if text(&out, "decision").as_deref() == Some("block") {
        let why = text(&out, "reason").unwrap_or_else(|| "(no reason given)".to_owned());
        said.block.push(why.clone());
        return ("block", Some(why));
    }
    if said.context.is_empty() {
        ("none", None)
    } else {
        ("context", None)
    }
}

/// Runs `hook` with `input` on its stdin, as a `bash` call runs.
async fn run_hook(ctx: &ToolContext, hook: &Hook, input: &Value) -> Ran {
    let failed = |why: String| Ran {
        exit_code: None,
        timed_out: false,
        stdout: String::new(),
        stderr: String::new(),
        duration_ms: 0,
        failed: Some(why),
    };
    // The sandbox's private temp dir is writable by the hook (its stderr).
    let dir = match &ctx.sandbox {
        Some(sb) => sb.tmp_dir().to_path_buf(),
        None => std::env::temp_dir(),
    };
    let files = temp_file(&dir, "in").and_then(|i| Ok((i, temp_file(&dir, "err")?)));
    let (stdin, stderr) = match files {
        Ok(f) => f,
        Err(e) => return failed(format!("could not write its input: {e}")),
    };
    if let Err(e) = std::fs::write(stdin.path(), input.to_string()) {
        return failed(format!("could not write its input: {e}"));
    }
    let command = format!(
        "{{\n{}\n}} <{} 2>{}",
        hook.command,
        quote(stdin.path()),
        quote(stderr.path())
    );
    let mut ctx = ctx.clone();
    ctx.env.retain(|(k, _)| k != "CLAUDE_PROJECT_DIR");
    ctx.env.push((
        "CLAUDE_PROJECT_DIR".to_owned(),
        ctx.root.display().to_string(),
    ));
    let timeout = Duration::from_secs(hook.timeout_secs);
    let result = match crate::tools::run_sandboxed(&ctx, &command, timeout).await {
        Ok((Ok(r), _)) => r,
        Ok((Err(e), _)) => return failed(format!("could not start bash: {e}")),
        Err(fatal) => return failed(fatal),
    };
    let mut err = String::new();
    if let Ok(f) = std::fs::File::open(stderr.path()) {
        let mut bytes = Vec::new();
        let _ = f.take(STDERR_BYTES).read_to_end(&mut bytes);
        err = String::from_utf8_lossy(&bytes).into_owned();
    }
    Ran {
        exit_code: result.exit_code,
        timed_out: result.timed_out,
        stdout: result.output,
        stderr: crate::secrets::redact(&err, &[]),
        duration_ms: result.duration.as_millis() as u64,
        failed: None,
    }
}

/// A new empty file in `dir` (removed when dropped).
fn temp_file(dir: &Path, what: &str) -> std::io::Result<tempfile::NamedTempFile> {
    tempfile::Builder::new()
        .prefix(&format!("orch-hook-{what}-"))
        .tempfile_in(dir)
}

/// `path` quoted for bash.
fn quote(path: &Path) -> String {
    crate::text::shell_quote(&path.display().to_string())
}

/// The output keys Claude Code defines that orch reads and does not apply.
const UNHONOURED_OUTPUT: [(&str, &str); 2] = [
    (
        "suppressOutput",
        "orch keeps every hook run in the action log",
    ),
    (
        "updatedInput",
        "orch runs the tool call as the model wrote it; deny it and say why instead",
    ),
];

/// Names, once per process, each key of a hook's JSON output that orch
/// reads and does not apply (nothing is dropped silently).
fn name_unhonoured(event: HookEvent, out: &Value) {
    static NAMED: std::sync::Mutex<Vec<&str>> = std::sync::Mutex::new(Vec::new());
    let specific = out.get("hookSpecificOutput");
    for (key, instead) in UNHONOURED_OUTPUT {
        let present = out.get(key).is_some() || specific.is_some_and(|s| s.get(key).is_some());
        if !present {
            continue;
        }
        let mut named = NAMED.lock().unwrap_or_else(|e| e.into_inner());
        if named.contains(&key) {
            continue;
        }
        named.push(key);
        crate::ui::status_line(&format!(
            "orch: a {} hook's output has `{key}`, which orch does not apply: {instead} (docs/hooks.md)",
            event.as_str()
        ));
    }
}

/// The result the model sees for a call a hook did not let run: `text`
/// for the model, `said` after the tool's name in the one-line summary,
/// `policy` on the record.
fn refused(name: &str, text: &str, said: &str, policy: &str) -> ToolOutcome {
    let mut out = ToolOutcome::error(name, text);
    out.summary = crate::text::one_line(&format!("{name} → {said}"), 120);
    out.policy = Some(policy.to_owned());
    out
}
