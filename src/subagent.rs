//! Subagents: `spawn_agent` runs `orch agent` as a child process with a clean
//! history, bounded depth, fan-out, time and tokens, and gets back only its
//! report.
//!
//! The parent side is [`spawn`]: it numbers the child in call order
//! (`code/explore-1`, `code/explore-2`, …), waits for one of
//! [`SpawnLimits::max_children`] slots, starts the current executable in its
//! own process group (stdin closed, scrubbed environment, cwd = the
//! worktree), polls the child's result file, and kills the child's group
//! (SIGTERM, grace, SIGKILL) when it passes its time or token limit. The
//! child side is [`child::run_child`].
//!
//! Record layout under the run's record directory:
//!
//! ```text
//! agents.jsonl                       one line per finished child (append-only)
//! agents/<path, / → __>/result.json  the child's result (orch-agent-result/1), atomic,
//!                                    rewritten after every turn while it runs
//! agents/<path, / → __>/actions.jsonl, transcript.json, stderr.log
//! ```
//!
//! Invariants: the parent reads results from disk, never from the child's
//! stdout; whatever happens to the child (crash, kill, timeout) the parent
//! gets a tool outcome and a final `result.json`, never a hang; when
//! [`spawn`] returns (or its future is dropped) the child and every process
//! it started — its tool commands included, also when it was SIGKILLed — are
//! gone (the child runs under a reaper, see [`crate::exec`]).

pub mod child;
mod record;

use record::append_event;
pub use record::{
    AgentEvent, AgentNode, AgentResult, AgentStatus, RESULT_FORMAT, agent_dir, agent_tree,
    parent_path, read_result, write_result,
};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::agent::compact::CompactConfig;
use crate::budget::{Budget, Dimension, StageBudget};
use crate::exec::ProcessGroup;
use crate::llm::{ChatModel, ModelSpawn};
use crate::tools::{SpawnFuture, Spawner, ToolError, ToolOutcome};

/// Default depth limit: a stage's children are depth 1, theirs depth 2.
pub const DEFAULT_MAX_DEPTH: u32 = 2;
/// Default number of children of one agent running at once.
pub const DEFAULT_MAX_CHILDREN: u32 = 3;
/// Default wall time of one child.
pub const DEFAULT_CHILD_TIME: Duration = Duration::from_secs(600);
/// Default token budget of one child (including its own children).
pub const DEFAULT_CHILD_TOKENS: u64 = 200_000;
/// How often the parent reads a running child's result file.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// SIGTERM → SIGKILL delay when a child is stopped.
pub const GRACE: Duration = crate::exec::group::GRACE;
/// Bytes of a child's stderr quoted when it crashed.
const STDERR_TAIL_BYTES: usize = 1500;
/// Bytes of a partial report quoted in a tool error.
const PARTIAL_REPORT_BYTES: usize = 4000;
/// Environment variables a child `orch` needs beyond the tool allowlist.
const CHILD_VARS: &[&str] = &[
    "ORCH_CONFIG_DIR",
    "XDG_CONFIG_HOME",
    "ORCH_LOG",
    crate::sandbox::DISABLE_VAR,
];

/// The descriptor number the secret pipe has in an `orch agent` child
/// (`--secrets-fd`): the model key and every value to redact travel there,
/// never in the child's environment.
pub const SECRET_FD: i32 = 3;

/// Limits the parent enforces on its children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpawnLimits {
    /// Deepest child allowed (a stage is depth 0).
    pub max_depth: u32,
    /// Children of one agent running at once; more calls wait.
    pub max_children: u32,
    /// The cap on one child's tokens and wall time (its own children
    /// included); each child gets the smaller of this and what its parent
    /// has left ([`StageBudget::carve`]).
    pub child: Budget,
}

impl Default for SpawnLimits {
    fn default() -> Self {
        SpawnLimits {
            max_depth: DEFAULT_MAX_DEPTH,
            max_children: DEFAULT_MAX_CHILDREN,
            child: Budget {
                tokens: Some(DEFAULT_CHILD_TOKENS),
                time_secs: Some(DEFAULT_CHILD_TIME.as_secs_f64()),
                cost_usd: None,
            },
        }
    }
}

impl SpawnLimits {
    /// The defaults, overridden by `ORCH_SUBAGENT_MAX_DEPTH`,
    /// `ORCH_SUBAGENT_MAX_CHILDREN`, `ORCH_SUBAGENT_TIME_SECS` and
    /// `ORCH_SUBAGENT_TOKENS` (invalid values are ignored with a warning).
    pub fn from_env() -> Self {
        let env = crate::environment::current();
        Self::from_lookup(&|k| env.var(k).map(str::to_owned))
    }

    fn from_lookup(env: &dyn Fn(&str) -> Option<String>) -> Self {
        let num = |k: &str| -> Option<u64> {
            let v = env(k)?;
            match v.trim().parse::<u64>() {
                Ok(n) if n > 0 || k == "ORCH_SUBAGENT_MAX_DEPTH" => Some(n),
                _ => {
                    tracing::warn!("ignoring {k}={v:?}: expected a positive integer");
                    None
                }
            }
        };
        let d = SpawnLimits::default();
        SpawnLimits {
            max_depth: num("ORCH_SUBAGENT_MAX_DEPTH").map_or(d.max_depth, |n| n as u32),
            max_children: num("ORCH_SUBAGENT_MAX_CHILDREN").map_or(d.max_children, |n| n as u32),
            child: Budget {
                tokens: num("ORCH_SUBAGENT_TOKENS").or(d.child.tokens),
                time_secs: num("ORCH_SUBAGENT_TIME_SECS")
                    .map(|n| n as f64)
                    .or(d.child.time_secs),
                cost_usd: None,
            },
        }
    }

    /// The cap on one child's wall time.
    pub fn child_time(&self) -> Option<Duration> {
        self.child.time_secs.map(Duration::from_secs_f64)
    }
}

/// Shared by all `spawn_agent` calls of one agent.
#[derive(Debug)]
struct SpawnState {
    next_index: Mutex<HashMap<String, u32>>,
    slots: tokio::sync::Semaphore,
    children: Mutex<Vec<String>>,
}

/// What `spawn_agent` needs to start children of one agent.
#[derive(Debug, Clone)]
pub struct SpawnContext {
    /// The `orch` executable.
    pub exe: PathBuf,
    /// The user's repository (children load roles from its catalog).
    pub repo: PathBuf,
    /// The worktree children work in.
    pub worktree: PathBuf,
    /// The run's record directory.
    pub record_dir: PathBuf,
    /// The spawning agent's path (`code`, `code/explore-1`, …).
    pub agent_path: String,
    /// The spawning agent's depth (a stage is 0).
    pub depth: u32,
    /// Limits on children.
    pub limits: SpawnLimits,
    /// How children reach the model.
    pub model: ModelSpawn,
    /// `--yes`: `ask` rules of children's bash policy allow.
    pub assume_yes: bool,
    /// The spawning agent's account: children are carved out of what it has
    /// left, and charged to it when they finish.
    pub budget: StageBudget,
    /// The spawning agent's compaction policy; children compact alike (at
    /// the same context window).
    pub compaction: CompactConfig,
    /// The spawning agent's sandbox: each child process runs inside it
    /// (widened for a subagent: network, its record dir, orch's config).
    pub sandbox: Option<Arc<crate::sandbox::ToolSandbox>>,
    state: Arc<SpawnState>,
}

impl SpawnContext {
    /// A context for an agent; `None` when the model cannot be handed to a
    /// child process or the executable cannot be found.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        repo: &Path,
        worktree: &Path,
        record_dir: &Path,
        agent_path: &str,
        depth: u32,
        limits: SpawnLimits,
        model: &dyn ChatModel,
        assume_yes: bool,
        budget: StageBudget,
        compaction: CompactConfig,
    ) -> Option<SpawnContext> {
        let model = model.spawn_settings()?;
        let exe = std::env::current_exe().ok()?;
        Some(SpawnContext {
            exe,
            repo: repo.to_path_buf(),
            worktree: worktree.to_path_buf(),
            record_dir: record_dir.to_path_buf(),
            agent_path: agent_path.to_owned(),
            depth,
            limits,
            model,
            assume_yes,
            budget,
            compaction,
            sandbox: None,
            state: Arc::new(SpawnState {
                next_index: Mutex::new(HashMap::new()),
                slots: tokio::sync::Semaphore::new(limits.max_children.max(1) as usize),
                children: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The context of a pipeline stage (depth 0, limits from the
    /// environment, children carved out of the stage's account). `repo` is any path of the user's
    /// repository (its common git dir will do): children load their roles
    /// from its working tree's catalog, like the run did.
    #[allow(clippy::too_many_arguments)]
    pub fn for_stage(
        repo: &Path,
        worktree: &Path,
        record_dir: &Path,
        stage: &str,
        model: &dyn ChatModel,
        assume_yes: bool,
        stage_budget: StageBudget,
        compaction: CompactConfig,
    ) -> Option<SpawnContext> {
        let workdir =
            crate::git::open_repo(repo).map_or_else(|_| repo.to_path_buf(), |i| i.workdir);
        // Each child is carved out of what the stage has left, the stage's
        // own turns included, so no child is given more than that.
        Self::new(
            &workdir,
            worktree,
            record_dir,
            stage,
            0,
            SpawnLimits::from_env(),
            model,
            assume_yes,
            stage_budget,
            compaction,
        )
    }

    /// The same context with children sandboxed by `sandbox`.
    pub fn with_sandbox(mut self, sandbox: Option<Arc<crate::sandbox::ToolSandbox>>) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// True when this agent may still spawn (it is above the depth limit).
    pub fn can_spawn(&self) -> bool {
        self.depth < self.limits.max_depth
    }

    /// Paths of the children spawned so far, in call order.
    pub fn children(&self) -> Vec<String> {
        lock(&self.state.children).clone()
    }

    fn next_path(&self, role: &str) -> String {
        let mut map = lock(&self.state.next_index);
        let n = map.entry(role.to_owned()).or_insert(0);
        *n += 1;
        format!("{}/{role}-{n}", self.agent_path)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain data: still consistent after a panic elsewhere.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A role name as an agent-path segment: `[a-z0-9_-]`, other characters `-`.
pub fn path_segment(role: &str) -> String {
    role.to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

impl Spawner for SpawnContext {
    fn can_spawn(&self) -> bool {
        SpawnContext::can_spawn(self)
    }

    fn spawn<'a>(&'a self, role: &'a str, task: &'a str) -> SpawnFuture<'a> {
        Box::pin(spawn(self, role, task))
    }
}

/// Runs one child `orch agent` for `spawn_agent` and turns what happened
/// into a tool outcome. `Err` is a tool error before the child started;
/// failing to create the child's record is orch's own fault
/// ([`ToolError::Fatal`]).
pub async fn spawn(ctx: &SpawnContext, role: &str, task: &str) -> Result<ToolOutcome, ToolError> {
    let segment = path_segment(role);
    if segment.is_empty() {
        return Err("argument `role` is empty; name a role, e.g. explore"
            .to_owned()
            .into());
    }
    if !ctx.can_spawn() {
        return Err(ToolError::RespondToModel(format!(
            "depth limit reached: this agent is at depth {} of at most {}; do the work yourself",
            ctx.depth, ctx.limits.max_depth
        )));
    }
    // Numbered before waiting for a slot, so numbers follow call order.
    let path = ctx.next_path(&segment);
    let _slot = ctx
        .state
        .slots
        .acquire()
        .await
        .map_err(|_| ToolError::Fatal("the subagent slots were closed".to_owned()))?;

    let carved = ctx.budget.carve(&ctx.limits.child);
    let time = carved.time_secs.map(Duration::from_secs_f64);
    if time.is_some_and(|t| t < Duration::from_secs(1)) {
        return Err("no time left in this agent's budget for a subagent"
            .to_owned()
            .into());
    }
    let tokens = carved.tokens;
    if tokens == Some(0) {
        return Err("no tokens left in this agent's budget for a subagent"
            .to_owned()
            .into());
    }

    let dir = agent_dir(&ctx.record_dir, &path);
    // The child's record is orch's own: failing to write it is fatal.
    std::fs::create_dir_all(&dir)
        .map_err(|e| ToolError::Fatal(format!("could not create {}: {e}", dir.display())))?;
    let stderr = std::fs::File::create(dir.join("stderr.log")).map_err(|e| {
        ToolError::Fatal(format!(
            "could not create {}: {e}",
            dir.join("stderr.log").display()
        ))
    })?;
    lock(&ctx.state.children).push(path.clone());

    let mut cmd = tokio::process::Command::new(&ctx.exe);
    cmd.args(child_args(ctx, &path, role, task, tokens, time))
        .current_dir(&ctx.worktree)
        .env_clear()
        .envs(child_env())
        .envs(
            ctx.record_dir
                .file_name()
                .and_then(|n| n.to_str())
                .map(|run| (crate::exec::RUN_MARKER, run)),
        )
        // Inside the sandbox the spawning agent's temp dir is the one
        // writable place for the child's own temp dirs.
        .envs(
            ctx.sandbox
                .as_ref()
                .map(|sb| ("TMPDIR", sb.tmp_dir().as_os_str().to_owned())),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr));
    let started = Instant::now();
    let spawned_at_us = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let hook = child_hook(ctx)?;
    let spawned = ProcessGroup::spawn(&mut cmd, Some(&hook));
    drop(hook);
    let mut group = spawned.map_err(|e| format!("could not start {}: {e}", ctx.exe.display()))?;
    let pid = group.pid();
    tracing::debug!(agent = %path, pid, "subagent started");

    let deadline = time.map(|t| started + t);
    let mut limit: Option<(Dimension, String)> = None;
    let status = loop {
        tokio::select! {
            st = group.wait() => break st.ok(),
            _ = tokio::time::sleep(POLL_INTERVAL) => {
                if let (Some(deadline), Some(t)) = (deadline, time)
                    && Instant::now() >= deadline
                {
                    limit = Some((
                        Dimension::Time,
                        format!("killed at its time limit of {}s", t.as_secs()),
                    ));
                } else if let Some(budget) = tokens
                    && let Some(r) = read_result(&ctx.record_dir, &path)
                    && r.tokens.total() > budget
                {
                    limit = Some((
                        Dimension::Tokens,
                        format!(
                            "killed at its token budget: {} tokens used of {budget}",
                            r.tokens.total()
                        ),
                    ));
                }
                if limit.is_some() {
                    break group.stop(GRACE).await.ok();
                }
            }
        }
    };
    // The wait returned: the child and everything it started are gone (its
    // reaper killed what was left), so nothing holds the lane any more.
    drop(group);
    // The child's tool processes wrote new git objects into the lane's
    // quarantine; move them where orch's own git work finds them. Inside a
    // sandboxed child the store is read-only: the top agent migrates.
    if let Ok(Some(git)) = crate::sandbox::LaneGit::discover(&ctx.worktree)
        && let Err(e) = crate::sandbox::migrate_objects(&git)
    {
        tracing::debug!("objects stay in the lane quarantine: {e}");
    }
    let duration_ms = started.elapsed().as_millis() as u64;

    let mut result = read_result(&ctx.record_dir, &path)
        .unwrap_or_else(|| AgentResult::running(&path, role, task, ctx.depth + 1));
    result.pid = pid;
    match &limit {
        Some((dimension, reason)) => {
            result.status = if *dimension == Dimension::Time {
                AgentStatus::TimedOut
            } else {
                AgentStatus::BudgetExceeded
            };
            result.reason = Some(reason.clone());
        }
        None if result.status == AgentStatus::Running => {
            result.status = AgentStatus::Crashed;
            result.reason = Some(format!(
                "exited without a result ({}){}",
                describe_exit(status),
                stderr_tail(&dir.join("stderr.log"))
            ));
        }
        None => {}
    }
    if result.duration_ms == 0 {
        result.duration_ms = duration_ms;
    }
    // The record must show the final status even when the child could not write it.
    if let Err(e) = write_result(&ctx.record_dir, &result) {
        tracing::warn!("failed to {e}");
    }
    let event = AgentEvent {
        agent_path: path.clone(),
        parent: ctx.agent_path.clone(),
        role: result.role.clone(),
        task: task.to_owned(),
        status: result.status,
        limit: limit.as_ref().map(|(d, _)| d.as_str().to_owned()),
        reason: result.reason.clone(),
        turns: result.turns,
        tokens: result.tokens,
        duration_ms,
        pid,
        spawned_at_us,
    };
    append_event(&ctx.record_dir, &event);
    // Charged now, so a sibling that starts next is carved out of the rest.
    ctx.budget.charge(result.tokens);
    Ok(outcome(&result, limit.map(|(d, _)| d)))
}

/// The hidden child-mode flags of `orch agent`.
fn child_args(
    ctx: &SpawnContext,
    path: &str,
    role: &str,
    task: &str,
    tokens: Option<u64>,
    time: Option<Duration>,
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "agent".into(),
        "--role".into(),
        role.into(),
        "--task".into(),
        task.into(),
        "--repo".into(),
        ctx.repo.display().to_string(),
        "--worktree".into(),
        ctx.worktree.display().to_string(),
        "--record-dir".into(),
        ctx.record_dir.display().to_string(),
        "--agent-path".into(),
        path.into(),
        "--depth".into(),
        (ctx.depth + 1).to_string(),
        "--max-depth".into(),
        ctx.limits.max_depth.to_string(),
        "--max-children".into(),
        ctx.limits.max_children.to_string(),
        "--context-window".into(),
        ctx.compaction.context_window.to_string(),
        "--compact-at".into(),
        ctx.compaction.compact_at.to_string(),
    ];
    if let Some(t) = ctx.limits.child_time() {
        a.extend(["--child-time-secs".into(), t.as_secs().to_string()]);
    }
    if let Some(t) = ctx.limits.child.tokens {
        a.extend(["--child-tokens".into(), t.to_string()]);
    }
    if let Some(t) = tokens {
        a.extend(["--token-budget".into(), t.to_string()]);
    }
    if let Some(t) = time {
        a.extend(["--time-budget-secs".into(), t.as_secs().max(1).to_string()]);
    }
    match &ctx.model {
        ModelSpawn::Http {
            provider,
            base_url,
            model,
            ..
        } => {
            a.extend([
                "--provider".into(),
                provider.as_str().to_owned(),
                "--base-url".into(),
                base_url.clone(),
                "--model".into(),
                model.clone(),
            ]);
        }
        ModelSpawn::Replay(file) => a.extend(["--replay".into(), file.display().to_string()]),
    }
    if ctx.assume_yes {
        a.push("--yes".into());
    }
    a.extend(["--secrets-fd".into(), SECRET_FD.to_string()]);
    a
}

/// The child's `pre_exec` hook: the secret pipe (model key and values to
/// redact) put on [`SECRET_FD`], then the spawning agent's sandbox widened
/// for a subagent. Everything is prepared here, in the parent.
fn child_hook(ctx: &SpawnContext) -> Result<crate::exec::PreExec, ToolError> {
    use std::os::fd::AsRawFd;
    let mut secrets = crate::sandbox::ChildSecrets {
        env: Vec::new(),
        redact: crate::secrets::known_secrets().to_vec(),
    };
    if let ModelSpawn::Http {
        api_key: Some(key), ..
    } = &ctx.model
    {
        secrets.env.push(("ORCH_API_KEY".to_owned(), key.clone()));
        secrets.redact.push(key.clone());
    }
    let pipe = crate::sandbox::write_secret_pipe(&secrets)
        .map_err(|e| ToolError::Fatal(format!("could not create the secret pipe: {e}")))?;
    let prepared = match &ctx.sandbox {
        Some(sb) => {
            let policy = sb
                .policy(&ctx.worktree)
                .map_err(|e| ToolError::Fatal(format!("failed to set up the sandbox: {e}")))?
                .for_subagent(
                    &ctx.record_dir.join("agents"),
                    crate::dirs::user_config_dir().as_deref(),
                );
            Some(
                crate::sandbox::prepare(&policy)
                    .map_err(|e| ToolError::Fatal(format!("failed to set up the sandbox: {e}")))?,
            )
        }
        None => None,
    };
    Ok(crate::exec::PreExec::new(move || {
        let fd = pipe.as_raw_fd();
        // SAFETY: dup2/fcntl on descriptors this process owns; both are
        // async-signal-safe. dup2 clears close-on-exec on the new number;
        // when the pipe already is that number, clear it by hand.
        let rc = unsafe {
            if fd == SECRET_FD {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, SECRET_FD)
            }
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        match &prepared {
            Some(p) => p.apply_in_child(),
            None => Ok(()),
        }
    }))
}

/// The child's environment: the tool allowlist and what orch itself needs
/// (the child's own tool processes get the scrubbed set only).
fn child_env() -> Vec<(String, String)> {
    let mut env = crate::exec::scrubbed_env();
    for k in CHILD_VARS {
        if let Ok(v) = std::env::var(k) {
            env.push(((*k).to_owned(), v));
        }
    }
    // The model key goes through the secret pipe (`child_hook`), not here:
    // a child's environment block is readable in /proc.
    env
}

fn describe_exit(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) if s.signal() == Some(libc::SIGKILL) => "killed by SIGKILL".to_owned(),
        Some(s) if s.signal().is_some() => format!("killed by signal {}", s.signal().unwrap_or(0)),
        Some(s) => format!("exit code {}", s.code().unwrap_or(-1)),
        None => "exit status unknown".to_owned(),
    }
}

fn stderr_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let text = text.trim();
    if text.is_empty() {
        return String::new();
    }
    format!(
        "; its stderr ends with:\n{}",
        crate::text::tail_bytes(text, STDERR_TAIL_BYTES)
    )
}

/// The tool outcome of a finished child.
fn outcome(r: &AgentResult, limit: Option<Dimension>) -> ToolOutcome {
    let head = format!(
        "agent {} ({}) {}: {} turns, {} tokens",
        r.agent_path,
        r.role,
        r.status.as_str(),
        r.turns,
        r.tokens.total()
    );
    let task = crate::text::one_line(&r.task, 40);
    let mut out = if r.status == AgentStatus::Succeeded {
        ToolOutcome::ok(
            format!("[{head}]\n{}", r.report.trim()),
            format!(
                "spawn_agent {} `{task}` → {} ({} tokens)",
                r.role,
                r.status.as_str(),
                r.tokens.total()
            ),
        )
    } else {
        let which = match limit {
            Some(Dimension::Time) => "time limit hit; ",
            Some(Dimension::Tokens) => "token limit hit; ",
            Some(Dimension::Cost) => "cost limit hit; ",
            None => "",
        };
        let partial = r.report.trim();
        let partial = if partial.is_empty() {
            "(none)".to_owned()
        } else {
            crate::text::cap_bytes(partial, PARTIAL_REPORT_BYTES)
        };
        let mut o = ToolOutcome::error(
            "spawn_agent",
            &format!(
                "{head}; {which}{}\npartial report: {partial}",
                r.reason.as_deref().unwrap_or("it did not finish")
            ),
        );
        o.summary = crate::text::one_line(
            &format!(
                "spawn_agent {} `{task}` → {} ({which}{} tokens)",
                r.role,
                r.status.as_str(),
                r.tokens.total()
            ),
            120,
        );
        o
    };
    out.child_tokens = Some(r.tokens);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_from_env() {
        let vars = |k: &str| match k {
            "ORCH_SUBAGENT_MAX_DEPTH" => Some("0".to_owned()),
            "ORCH_SUBAGENT_TIME_SECS" => Some("7".to_owned()),
            "ORCH_SUBAGENT_TOKENS" => Some("lots".to_owned()),
            _ => None,
        };
        let l = SpawnLimits::from_lookup(&vars);
        assert_eq!(l.max_depth, 0);
        assert_eq!(l.child_time(), Some(Duration::from_secs(7)));
        assert_eq!(l.child.tokens, Some(DEFAULT_CHILD_TOKENS));
        assert_eq!(l.max_children, DEFAULT_MAX_CHILDREN);
    }

    #[test]
    fn segments() {
        assert_eq!(path_segment("Explore"), "explore");
        assert_eq!(path_segment("my role"), "my-role");
    }
}
