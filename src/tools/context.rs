//! What tools need to run ([`ToolContext`]) and the seam through which
//! `spawn_agent` starts a subagent ([`Spawner`], implemented by
//! `crate::subagent`).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use super::outcome::{ToolError, ToolOutcome};
use super::readonly::ReadOnlyGuard;
use crate::exec::ExecLimits;
use crate::policy::BashPolicy;

/// A future a [`Spawner`] returns.
pub type SpawnFuture<'a> =
    Pin<Box<dyn Future<Output = Result<ToolOutcome, ToolError>> + Send + 'a>>;

/// What `spawn_agent` needs from the layer that can start subagents (the
/// tools define the seam; `crate::subagent` implements it).
pub trait Spawner: Send + Sync + std::fmt::Debug {
    /// True when this agent may still spawn (it is above the depth limit);
    /// `spawn_agent` is offered only then.
    fn can_spawn(&self) -> bool;

    /// Runs one child agent of `role` on `task` to its end and turns what
    /// happened into a tool outcome; `Err` is a tool error before the child
    /// started ([`ToolError::Fatal`] when orch could not record it). The
    /// child's tokens are charged to the caller's budget by the
    /// spawner and reported in [`ToolOutcome::child_tokens`].
    fn spawn<'a>(&'a self, role: &'a str, task: &'a str) -> SpawnFuture<'a>;
}

/// What tools need to run: where, what is allowed, and with which environment.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// Canonical worktree root; every path is fenced to it.
    pub root: PathBuf,
    /// Tool names this role may call.
    pub allowed: Vec<String>,
    /// When true, `write_file` and `edit_file` are refused.
    pub read_only: bool,
    /// The bash policy of the role.
    pub policy: BashPolicy,
    /// The exact environment of tool processes.
    pub env: Vec<(String, String)>,
    /// Child-process limits.
    pub limits: ExecLimits,
    /// What `spawn_agent` needs; `None` where subagents are not available.
    pub spawn: Option<Arc<dyn Spawner>>,
    /// For a read-only subagent: undoes what its `bash` commands change.
    pub read_only_guard: Option<Arc<ReadOnlyGuard>>,
    /// Run in every `bash` child between fork and exec (besides the sandbox).
    pub pre_exec: Option<crate::exec::PreExec>,
    /// The kernel sandbox and repository guard of every `bash` call; `None`
    /// runs commands unsandboxed (unit tests of the tools themselves).
    pub sandbox: Option<Arc<crate::sandbox::ToolSandbox>>,
    /// Ready once the lane may be touched (its change watcher is up): every
    /// tool call and sandboxed command waits for it first.
    pub ready: Option<Barrier>,
    /// The stage's Agent Skills (`load_skill` is offered when not empty).
    pub(crate) skills: Option<Arc<crate::skills::SkillSet>>,
    /// The stage's MCP servers and the tools offered from them.
    pub mcp: Option<Arc<crate::mcp::McpSession>>,
    /// The role's MCP rules (allow / ask / deny on `mcp__…` names).
    pub mcp_role: crate::mcp::RoleMcp,
    /// Where a call an `ask` rule names asks (the run's control channel,
    /// [`super::approval`]); `None`: the terminal if there is one, else
    /// denied.
    pub(crate) control: Option<Arc<super::channel::ControlChannel>>,
    /// A best-of-N reviewer: `finish` takes (and requires) `choice`, one
    /// of `1..=choices` (`None`: every other agent).
    pub choices: Option<u32>,
}

/// A one-time readiness gate (cloned freely, ready forever once ready).
pub type Barrier = futures_util::future::Shared<futures_util::future::BoxFuture<'static, ()>>;

impl ToolContext {
    /// A context for the worktree at `root` (canonicalized), with the scrubbed
    /// environment and default limits.
    pub fn new(
        root: &Path,
        allowed: &[String],
        read_only: bool,
        policy: BashPolicy,
    ) -> std::io::Result<Self> {
        Ok(ToolContext {
            root: root.canonicalize()?,
            allowed: allowed.to_vec(),
            read_only,
            policy,
            env: crate::exec::scrubbed_env(),
            limits: ExecLimits::default(),
            spawn: None,
            read_only_guard: None,
            pre_exec: None,
            sandbox: None,
            ready: None,
            skills: None,
            mcp: None,
            mcp_role: crate::mcp::RoleMcp::default(),
            control: None,
            choices: None,
        })
    }
}
