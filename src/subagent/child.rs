//! The child side of a subagent: `orch agent` in child mode. It works
//! directly in its parent's worktree (no worktree, no commit of its own),
//! starts from its role's system prompt and the task only, and keeps its
//! `result.json` current after every model turn, so a child killed at any
//! moment leaves a partial report.
//!
//! The child's budget is one [`StageBudget`] account, like a stage's: its
//! agent loop refuses to start a turn once the tokens or the time are used
//! up, and its own children are carved out of what is left. Mid-turn the
//! parent enforces the limits ([`Enforcement::TurnStart`]): it kills the
//! child's process group at its limit. SIGTERM (how the parent stops a
//! child) cancels the agent loop — dropping it kills running tool processes
//! and grandchildren — and the result is written as `killed`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{AgentResult, AgentStatus, SpawnContext, SpawnLimits, agent_dir, write_result};
use crate::agent::budget::ModelPrice;
use crate::agent::compact::CompactConfig;
use crate::agent::{self, AgentConfig, AgentEnd, prompt};
use crate::budget::{Budget, Enforcement, StageBudget, TokenCount};
use crate::llm::{
    BoxFuture, ChatMessage, ChatModel, ChatRequest, ChatResponse, DeltaFn, LlmError, ModelWrapper,
};
use crate::policy::BashPolicy;
use crate::role::Role;
use crate::runlog::{ActionEvent, ActionLog, RecordError, event};
use crate::secrets::redact;
use crate::tools::{ReadOnlyGuard, ToolContext};

/// Bytes of a partial report built from the tool calls made so far.
const PARTIAL_DIGEST_BYTES: usize = 2000;

/// Everything a child agent needs.
pub struct ChildOptions {
    /// The user's repository (for the bash allowlist file).
    pub repo: PathBuf,
    /// The parent's worktree; the child works in it directly.
    pub worktree: PathBuf,
    /// The run's record directory.
    pub record_dir: PathBuf,
    /// `code/explore-1`, …
    pub agent_path: String,
    /// The role, loaded by the child from the catalog.
    pub role: Role,
    /// The task.
    pub task: String,
    /// This child's depth.
    pub depth: u32,
    /// Limits for this child's own children.
    pub limits: SpawnLimits,
    /// This child's token budget.
    pub token_budget: Option<u64>,
    /// This child's wall time.
    pub time_budget: Option<Duration>,
    /// Model turns allowed (default: the role's).
    pub max_turns: Option<u32>,
    /// When the conversation is condensed: the parent's policy, so the
    /// child compacts at the same context window.
    pub compaction: CompactConfig,
    /// The model.
    pub model: Arc<dyn ChatModel>,
    /// Values to redact from the record.
    pub secrets: Vec<String>,
    /// `--yes`.
    pub assume_yes: bool,
}

/// Records a child that could not even start its agent (unknown role, no
/// model): a final `failed` result, so the parent reads why.
pub fn record_failure(
    record_dir: &std::path::Path,
    agent_path: &str,
    role: &str,
    task: &str,
    depth: u32,
    reason: &str,
) {
    let mut r = AgentResult::running(agent_path, role, task, depth);
    r.status = AgentStatus::Failed;
    r.reason = Some(reason.to_owned());
    if let Err(e) = write_result(record_dir, &r) {
        tracing::warn!("failed to {e}");
    }
}

/// Runs the child agent to its end and returns its final result (also in
/// `result.json`). `Err` only when the record cannot be written.
pub async fn run_child(opts: ChildOptions) -> Result<AgentResult, RecordError> {
    let started = Instant::now();
    let dir = agent_dir(&opts.record_dir, &opts.agent_path);
    let mut base = AgentResult::running(&opts.agent_path, &opts.role.name, &opts.task, opts.depth);
    write_result(&opts.record_dir, &base)?;
    let mut budget = StageBudget::own(
        &Budget {
            tokens: opts.token_budget,
            time_secs: opts.time_budget.map(|t| t.as_secs_f64()),
            cost_usd: None,
        },
        Arc::new(ModelPrice(Arc::clone(&opts.model))),
    );
    budget.enforcement = Enforcement::TurnStart;
    let model = RecordingModel {
        inner: Arc::clone(&opts.model),
        budget: budget.clone(),
        progress: Mutex::new(Progress::default()),
        record_dir: opts.record_dir.clone(),
        base: base.clone(),
        started,
        secrets: opts.secrets.clone(),
    };

    let role = &opts.role;
    let policy = BashPolicy {
        allow: role.bash.allow.clone(),
        ask: role.bash.ask.clone(),
        deny: role.bash.deny.clone(),
        allowlist: BashPolicy::load_allowlist(&opts.repo).unwrap_or_default(),
        assume_yes: opts.assume_yes,
        interactive: false,
    };
    let mut ctx = ToolContext::new(&opts.worktree, &role.tools, role.read_only, policy).map_err(
        |source| RecordError::Io {
            path: opts.worktree.clone(),
            source,
        },
    )?;
    if !role.mcp.is_empty() {
        // Not silently: the role asked for MCP tools it will not get here.
        crate::ui::status_line(&format!(
            "orch: warning: role `{}` names MCP servers ({}); a subagent starts none, so their tools are not offered (run the role as a stage or with `orch agent`)",
            role.name,
            role.mcp.granted_servers().join(", ")
        ));
    }
    // The child's own tool processes get its own role's sandbox, inside the
    // one the parent put this process in (Landlock stacks: never more).
    let sandbox = crate::sandbox::ToolSandbox::for_role(&opts.repo.join(".git"), role)
        .map_err(|source| RecordError::Io {
            path: opts.repo.clone(),
            source,
        })?
        .in_subagent();
    ctx.sandbox = Some(Arc::new(sandbox));
    let spawner = SpawnContext::new(
        &opts.repo,
        &ctx.root,
        &opts.record_dir,
        &opts.agent_path,
        opts.depth,
        opts.limits,
        opts.model.as_ref(),
        opts.assume_yes,
        budget.clone(),
        opts.compaction,
    )
    .map(|s| s.with_sandbox(ctx.sandbox.clone()))
    .map(Arc::new);
    ctx.spawn = spawner.clone().map(|s| s as Arc<dyn crate::tools::Spawner>);
    if role.read_only {
        // Unused where the kernel enforces the read-only profile.
        ctx.read_only_guard = Some(Arc::new(ReadOnlyGuard::new(&ctx.root)));
    }
    let cfg = AgentConfig {
        agent_path: opts.agent_path.clone(),
        system_prompt: prompt::system_prompt(&role.prompt, &crate::tools::offered_names(&ctx)),
        task: prompt::task_message(&opts.task, "", &[]),
        max_turns: opts.max_turns.unwrap_or(role.max_turns).max(1),
        require_verdict: false,
        // `orch agent` and subagents answer whoever asked: text is a result.
        text_result: true,
        finish_from_text: false,
        // Its text answer is its result; no change is asked of it.
        change_optional: true,
        decline_allowed: true,
        require_choice: None,
        text_tool_calls: true,
        // A subagent's task names no files it is shown.
        whole_files: Vec::new(),
        brief: String::new(),
        text_edits: crate::llm::textedits::text_edits_enabled(
            role.text_edits,
            opts.model.tool_calling(),
        ),
        budget: budget.clone(),
        compaction: opts.compaction,
        // The run's hooks; its `finish` runs the SubagentStop ones.
        hooks: Arc::new(crate::hooks::StageHooks::new(
            crate::hooks::HookConfig::of_run(&opts.record_dir).for_role(&role.name),
            opts.agent_path.clone(),
            dir.join("actions.jsonl"),
            true,
        )),
    };
    let mut log = ActionLog::open(&dir.join("actions.jsonl"), opts.secrets.clone())?;
    log.append(&ActionEvent::ChildStart(event::ChildStart {
        agent: opts.agent_path.clone(),
        role: role.name.clone(),
        depth: opts.depth,
        max_depth: opts.limits.max_depth,
        pid: std::process::id(),
        token_budget: opts.token_budget,
        time_budget_secs: opts.time_budget.map(|t| t.as_secs()),
    }))?;

    let mut sigterm =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let terminated = async {
        match sigterm.as_mut() {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let on_turn = |_: u32, _: TokenCount| {};
    let ended = tokio::select! {
        r = agent::run_agent(&model, &ctx, &cfg, &mut log, &on_turn) => Some(r?),
        () = terminated => None,
    };

    let progress = model.take_progress();
    base.children = spawner
        .as_deref()
        .map(SpawnContext::children)
        .unwrap_or_default();
    base.duration_ms = started.elapsed().as_millis() as u64;
    let transcript = match ended {
        Some(out) => {
            base.turns = out.turns;
            base.tokens = out.tokens;
            let failure = out.end.failure_reason(cfg.max_turns);
            base.status = match &out.end {
                e if e.is_success() => AgentStatus::Succeeded,
                AgentEnd::Budget(_) if out.budget.exceeded.as_deref() == Some("time") => {
                    AgentStatus::TimedOut
                }
                AgentEnd::Budget(_) => AgentStatus::BudgetExceeded,
                AgentEnd::ModelError(_) => AgentStatus::ModelError,
                _ => AgentStatus::Failed,
            };
            base.report = if base.status == AgentStatus::Succeeded {
                out.summary
            } else {
                progress.partial_report()
            };
            base.reason = failure;
            out.transcript
        }
        None => {
            log.append(&ActionEvent::Killed(event::Killed {
                signal: "SIGTERM".to_owned(),
            }))?;
            base.turns = progress.turns;
            base.tokens = budget.used_tokens();
            base.status = AgentStatus::Killed;
            base.reason = Some("stopped by SIGTERM (its parent enforces its limits)".to_owned());
            base.report = progress.partial_report();
            progress.transcript
        }
    };
    base.report = redact(&base.report, &opts.secrets);
    base.reason = base.reason.map(|r| redact(&r, &opts.secrets));
    let text = serde_json::to_string_pretty(&transcript).unwrap_or_default();
    let path = dir.join("transcript.json");
    crate::runlog::write_atomic(&path, redact(&text, &opts.secrets).as_bytes())?;
    write_result(&opts.record_dir, &base)?;
    Ok(base)
}

/// What the child has done so far, for partial results.
#[derive(Debug, Default)]
struct Progress {
    turns: u32,
    last_text: String,
    calls: Vec<String>,
    transcript: Vec<ChatMessage>,
}

impl Progress {
    /// The latest text of the model, else the tool calls it made.
    fn partial_report(&self) -> String {
        if !self.last_text.trim().is_empty() {
            return self.last_text.clone();
        }
        if self.calls.is_empty() {
            return String::new();
        }
        let text = format!(
            "(no report yet) tool calls so far: {}",
            self.calls.join("; ")
        );
        crate::text::cap_bytes(&text, PARTIAL_DIGEST_BYTES)
    }
}

/// The child's model: rewrites `result.json` after every turn, so a child
/// killed at any moment leaves a partial result with its tokens so far.
struct RecordingModel {
    inner: Arc<dyn ChatModel>,
    /// The child's account (its turns and its finished children).
    budget: StageBudget,
    progress: Mutex<Progress>,
    record_dir: PathBuf,
    base: AgentResult,
    started: Instant,
    secrets: Vec<String>,
}

impl RecordingModel {
    fn take_progress(&self) -> Progress {
        std::mem::take(&mut *self.progress.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn record(&self, req: &ChatRequest, resp: &ChatResponse) {
        let snapshot = {
            let mut p = self.progress.lock().unwrap_or_else(|e| e.into_inner());
            p.turns += 1;
            if let Some(text) = resp
                .message
                .content
                .as_deref()
                .filter(|t| !t.trim().is_empty())
            {
                p.last_text = text.to_owned();
            }
            for c in &resp.message.tool_calls {
                p.calls.push(format!(
                    "{} {}",
                    c.function.name,
                    crate::text::cap_bytes(&c.function.arguments, 120)
                ));
            }
            p.transcript = req.messages.clone();
            p.transcript.push(resp.message.clone());
            let mut r = self.base.clone();
            r.turns = p.turns;
            // The account has the earlier calls and the finished children;
            // the loop charges this call once it returns.
            r.tokens = self.budget.used_tokens();
            r.tokens.add(resp.usage.tokens());
            // A key the model echoed must not reach the record.
            r.report = redact(&p.partial_report(), &self.secrets);
            r.duration_ms = self.started.elapsed().as_millis() as u64;
            r
        };
        if let Err(e) = write_result(&self.record_dir, &snapshot) {
            tracing::warn!("failed to {e}");
        }
    }
}

impl ModelWrapper for RecordingModel {
    fn inner(&self) -> &dyn ChatModel {
        self.inner.as_ref()
    }

    fn send<'a>(
        &'a self,
        req: &'a ChatRequest,
        on_delta: Option<&'a DeltaFn<'a>>,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            let resp = match on_delta {
                Some(f) => self.inner.complete_with_progress(req, f).await?,
                None => self.inner.complete(req).await?,
            };
            self.record(req, &resp);
            Ok(resp)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::replay::ReplayModel;

    fn model(record: &std::path::Path, budget: StageBudget) -> RecordingModel {
        let replay = r#"{"format": "orch-replay/1", "agents": {"p/explore-1": [
            {"content": "looking", "usage": {"prompt_tokens": 40, "completion_tokens": 10}},
            {"content": "more", "usage": {"prompt_tokens": 40, "completion_tokens": 10}}]}}"#;
        RecordingModel {
            inner: Arc::new(ReplayModel::from_str(replay, "test").unwrap()),
            budget,
            progress: Mutex::new(Progress::default()),
            record_dir: record.to_path_buf(),
            base: AgentResult::running("p/explore-1", "explore", "t", 1),
            started: Instant::now(),
            secrets: vec!["sk-secret-value".into()],
        }
    }

    fn request() -> ChatRequest {
        ChatRequest {
            messages: vec![ChatMessage::system("s"), ChatMessage::user("t")],
            tools: vec![],
            agent_path: "p/explore-1".into(),
            call_mode: crate::llm::CallMode::Native,
        }
    }

    #[test]
    fn the_wrapper_forwards_what_the_agent_loop_reads() {
        let tmp = tempfile::tempdir().unwrap();
        let m = model(tmp.path(), StageBudget::default());
        assert_eq!(m.label(), m.inner.label());
        assert_eq!(m.model_name(), m.inner.model_name());
        assert_eq!(m.is_replay(), m.inner.is_replay());
        assert_eq!(m.context_window(), m.inner.context_window());
        assert_eq!(m.spawn_settings(), m.inner.spawn_settings());
    }

    #[tokio::test]
    async fn every_turn_leaves_a_partial_result_with_the_accounts_tokens() {
        let tmp = tempfile::tempdir().unwrap();
        let budget = StageBudget::default();
        // A finished grandchild already charged the account.
        budget.charge(TokenCount {
            prompt: 7,
            completion: 3,
            ..TokenCount::default()
        });
        let m = model(tmp.path(), budget);
        m.complete(&request()).await.unwrap();
        let partial = super::super::read_result(tmp.path(), "p/explore-1").unwrap();
        assert_eq!(partial.status, AgentStatus::Running);
        assert_eq!(partial.turns, 1);
        assert_eq!(partial.tokens.total(), 10 + 50);
        assert_eq!(partial.report, "looking");
        assert_eq!(m.take_progress().turns, 1);
    }
}
