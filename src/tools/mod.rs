//! The agent's tools: their JSON schemas ([`definitions`]) and one entry point
//! that runs a call ([`dispatch`]).
//!
//! Invariants:
//! - `dispatch` never fails and never panics on model input: an unknown or
//!   disallowed tool, malformed or oversized arguments, a path outside the
//!   worktree, a missing file, a denied command all become a [`ToolOutcome`]
//!   with `is_error: true` and a `content` starting with `error: ` that names
//!   the tool, the argument and what is expected;
//! - every path goes through [`fence`]: it stays inside the worktree root,
//!   through `..` and symlinks alike, and write tools never touch `.git`;
//! - `read_only` blocks `write_file` and `edit_file`; `bash` is governed by the
//!   role's tool allowlist and its bash policy (the stage commit records
//!   whatever a command changed).
//!
//! - tool errors come in two kinds ([`ToolError`]): *respond to the model*
//!   (its call was wrong or the work failed; the loop goes on) and *fatal*
//!   (orch's own fault — a panicked or cancelled tool task, a run record that
//!   could not be written): [`call`] returns the fatal ones as an `Err`, and
//!   the agent loop ends the stage as an internal error without telling the
//!   model.
//!
//! Tool names and argument names are a public contract with the model.
//!
//! Test-only trigger (debug builds only): with `ORCH_TEST_PANIC_TOOL=<tool>`
//! in orch's environment, every call of that tool panics in its task, so the
//! fatal path can be tested through the real binary.

mod args;
mod bash;
mod edit_file;
pub mod fence;
mod finish;
mod grep;
mod list_files;
mod read_file;
mod readonly;
mod schema;
mod spawn_agent;
mod write_file;

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::budget::TokenCount;
use crate::exec::ExecLimits;
use crate::ids::Verdict;
use crate::policy::BashPolicy;
use crate::text::one_line;
use crate::toolname::ToolName;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub(crate) use args::{Args, io_message};
pub(crate) use bash::run_sandboxed;
pub use readonly::{ReadOnlyGuard, Snapshot};
use schema::schema;
pub use schema::{definitions, offered, offered_names};

pub use spawn_agent::{call_concurrently, dispatch_concurrently};

/// Every tool name orch knows, in the order they are offered
/// ([`ToolName::ALL`]).
pub const ALL_TOOLS: &[&str] = &crate::toolname::NAMES;

/// Largest `arguments` text accepted from the model.
pub const MAX_ARGUMENT_BYTES: usize = 1 << 20;

/// Longest one-line summary.
const SUMMARY_CHARS: usize = 120;

/// Why a tool call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// The model's call was wrong, or the work failed in a way the model can
    /// act on: an `error: <tool>: …` result, and the loop goes on.
    RespondToModel(String),
    /// orch's own fault: the stage ends as an internal error and nothing
    /// reaches the model.
    Fatal(String),
}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        ToolError::RespondToModel(message)
    }
}

/// A tool fault that is orch's own (see [`ToolError::Fatal`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("run the tool `{tool}`: {reason}")]
pub struct FatalToolError {
    /// The tool.
    pub tool: String,
    /// What went wrong.
    pub reason: String,
}

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
        })
    }
}

/// A `finish` call: the stage is over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishCall {
    /// The agent's final report.
    pub summary: String,
    /// The reviewer's verdict, when given.
    pub verdict: Option<Verdict>,
}

/// The result of one tool call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolOutcome {
    /// What goes back to the model.
    pub content: String,
    /// A tool error the model should see and recover from.
    pub is_error: bool,
    /// One line (≤ 120 chars) for digests, e.g. "bash `cargo test` → exit 0 (1.2s)".
    pub summary: String,
    /// Exit code (bash only).
    pub exit_code: Option<i32>,
    /// Wall time of the call.
    pub duration_ms: u64,
    /// Set by `finish`.
    pub finish: Option<FinishCall>,
    /// Bash policy decision, e.g. `allow` or `deny: recursive delete of / (built-in deny list)`.
    pub policy: Option<String>,
    /// `write_file`/`edit_file`: the path written, relative to the root.
    pub changed_path: Option<String>,
    /// `spawn_agent`: tokens the subagent (and its own subagents) used; they
    /// count towards the caller's tokens (its budget was already charged by
    /// the [`Spawner`]).
    pub child_tokens: Option<TokenCount>,
    /// `bash`: what the sandbox enforced for this call, e.g.
    /// `workspace-write, network on: landlock ABI 7: writable …` or
    /// `off, network on: sandbox off`.
    pub sandbox: Option<String>,
}

impl ToolOutcome {
    /// A successful result.
    pub(crate) fn ok(content: String, summary: String) -> Self {
        ToolOutcome {
            content,
            summary: one_line(&summary, SUMMARY_CHARS),
            ..Default::default()
        }
    }

    /// A tool error: `error: <tool>: <message>`.
    pub(crate) fn error(tool: &str, message: &str) -> Self {
        let content = format!("error: {tool}: {message}");
        ToolOutcome {
            summary: one_line(&content, SUMMARY_CHARS),
            content,
            is_error: true,
            ..Default::default()
        }
    }
}

/// Runs one tool call for the agent loop. Every problem the model can act on
/// is an `is_error` outcome; `Err` only for orch's own faults
/// ([`ToolError::Fatal`]), which must end the stage.
pub async fn call(
    ctx: &ToolContext,
    name: &str,
    arguments: &str,
) -> Result<ToolOutcome, FatalToolError> {
    if let Some(ready) = &ctx.ready {
        ready.clone().await;
    }
    let start = Instant::now();
    let mut outcome = match check_call(ctx, name, arguments) {
        Err((tool, msg)) => ToolOutcome::error(&tool, &msg),
        Ok(args) => match catch_panic(run_tool(ctx, name, args)).await {
            Ok(outcome) => outcome,
            Err(ToolError::RespondToModel(msg)) => ToolOutcome::error(name, &msg),
            Err(ToolError::Fatal(reason)) => {
                return Err(FatalToolError {
                    tool: name.to_owned(),
                    reason,
                });
            }
        },
    };
    outcome.duration_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    // Known secret values (orch's keys, `~/.netrc`, credential URLs) never
    // reach the model, whichever tool printed them.
    if !crate::sandbox::known_secrets().is_empty() {
        outcome.content = crate::runlog::redact(&outcome.content, &[]);
        outcome.summary = crate::runlog::redact(&outcome.summary, &[]);
    }
    Ok(outcome)
}

/// Runs one tool call where there is no stage to end (tests, fuzzing): like
/// [`call`], with a fatal fault shown as an `internal error` outcome. The
/// agent loop uses [`call`].
pub async fn dispatch(ctx: &ToolContext, name: &str, arguments: &str) -> ToolOutcome {
    call(ctx, name, arguments)
        .await
        .unwrap_or_else(|f| ToolOutcome::error(&f.tool, &format!("internal error: {}", f.reason)))
}

/// A panic anywhere in a tool's own future is orch's fault, not the model's.
async fn catch_panic<F>(fut: F) -> Result<ToolOutcome, ToolError>
where
    F: Future<Output = Result<ToolOutcome, ToolError>>,
{
    use futures_util::FutureExt;
    match std::panic::AssertUnwindSafe(fut).catch_unwind().await {
        Ok(r) => r,
        Err(panic) => Err(ToolError::Fatal(format!(
            "the tool panicked: {}",
            panic_message(panic.as_ref())
        ))),
    }
}

/// The text of a panic payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// Checks name, permission and arguments; on failure, the tool label to report
/// and the message.
fn check_call(ctx: &ToolContext, name: &str, arguments: &str) -> Result<Args, (String, String)> {
    let offered = || {
        let names: Vec<&str> = offered(ctx).iter().map(|d| d.name).collect();
        names.join(", ")
    };
    if !ALL_TOOLS.contains(&name) {
        return Err((
            one_line(name, 60),
            format!("unknown tool; available tools: {}", offered()),
        ));
    }
    if !ctx.allowed.iter().any(|a| a == name) {
        return Err((
            name.to_owned(),
            format!(
                "this tool is not allowed for this role; allowed tools: {}",
                offered()
            ),
        ));
    }
    if ctx.read_only && ToolName::is_write_name(name) {
        return Err((
            name.to_owned(),
            "this role is read-only and cannot change files".to_owned(),
        ));
    }
    Args::parse(name, arguments).map_err(|msg| (name.to_owned(), msg))
}

async fn run_tool(ctx: &ToolContext, name: &str, args: Args) -> Result<ToolOutcome, ToolError> {
    let root = ctx.root.clone();
    #[cfg(debug_assertions)]
    if test_panic_requested(name) {
        let name = name.to_owned();
        return blocking(move || panic!("ORCH_TEST_PANIC_TOOL: `{name}` panics on purpose")).await;
    }
    match name {
        // The kernel's read-only profile, where enforced, replaces the
        // snapshot/restore guard.
        "bash" => match ctx
            .read_only_guard
            .clone()
            .filter(|_| !ctx.sandbox.as_ref().is_some_and(|s| s.enforces_read_only()))
        {
            None => bash::run(ctx, &args).await,
            Some(guard) => {
                let before = guard.snapshot().await;
                let out = bash::run(ctx, &args).await;
                guard.discard_changes(before, out).await
            }
        },
        "spawn_agent" => spawn_agent::run(ctx, &args).await,
        "finish" => Ok(finish::run(&args)?),
        "read_file" => blocking(move || read_file::run(&root, &args)).await,
        "write_file" => blocking(move || write_file::run(&root, &args)).await,
        "edit_file" => blocking(move || edit_file::run(&root, &args)).await,
        "list_files" => blocking(move || list_files::run(&root, &args)).await,
        "grep" => blocking(move || grep::run(&root, &args)).await,
        _ => Err("not available in this version of orch".to_owned().into()),
    }
}

/// The debug-build test trigger (see the module docs).
#[cfg(debug_assertions)]
fn test_panic_requested(name: &str) -> bool {
    std::env::var("ORCH_TEST_PANIC_TOOL").is_ok_and(|t| t == name)
}

/// Runs file-system work off the async workers; a panicked or cancelled
/// task is fatal.
async fn blocking<F>(f: F) -> Result<ToolOutcome, ToolError>
where
    F: FnOnce() -> Result<ToolOutcome, String> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => Ok(r?),
        Err(e) => Err(ToolError::Fatal(join_failure(&e))),
    }
}

/// A failed blocking task, in words.
pub(crate) fn join_failure(e: &tokio::task::JoinError) -> String {
    if e.is_panic() {
        format!("the tool's task panicked: {e}")
    } else {
        format!("the tool's task was cancelled: {e}")
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;
    use serde_json::Value;

    /// A context over a fresh temp dir with every tool allowed.
    pub(crate) fn ctx() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().expect("tempdir");
        let all: Vec<String> = ALL_TOOLS.iter().map(|s| s.to_string()).collect();
        let ctx = ToolContext::new(dir.path(), &all, false, BashPolicy::default()).expect("ctx");
        (dir, ctx)
    }

    /// Runs a call with a timeout, so a hang fails the test instead of blocking it.
    pub(crate) async fn call(ctx: &ToolContext, name: &str, args: Value) -> ToolOutcome {
        tokio::time::timeout(
            std::time::Duration::from_secs(60),
            dispatch(ctx, name, &args.to_string()),
        )
        .await
        .expect("tool call hung")
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{call, ctx};
    use super::*;
    use serde_json::json;

    #[test]
    fn definitions_are_lean() {
        let all: Vec<String> = ALL_TOOLS.iter().map(|s| s.to_string()).collect();
        let defs = definitions(&all);
        let names: Vec<&str> = defs.iter().map(|d| d.name).collect();
        assert_eq!(
            names,
            [
                "bash",
                "read_file",
                "write_file",
                "edit_file",
                "list_files",
                "grep",
                "finish"
            ]
        );
        let size = serde_json::to_string(&defs).unwrap().len();
        assert!(size < 3 * 1024, "tool schemas are {size} bytes");
        let some = definitions(&["grep".to_owned(), "nope".to_owned()]);
        assert_eq!(some.len(), 1);
    }

    #[tokio::test]
    async fn unknown_tool() {
        let (_d, ctx) = ctx();
        let out = dispatch(&ctx, "rm_everything", "{}").await;
        assert!(out.is_error);
        assert!(
            out.content.starts_with(
                "error: rm_everything: unknown tool; available tools: bash, read_file"
            ),
            "{}",
            out.content
        );
    }

    #[tokio::test]
    async fn tool_not_allowed() {
        let (_d, mut ctx) = ctx();
        ctx.allowed = vec!["read_file".into(), "finish".into()];
        let out = call(&ctx, "bash", json!({"command": "ls"})).await;
        assert!(out.is_error);
        assert_eq!(
            out.content,
            "error: bash: this tool is not allowed for this role; allowed tools: read_file, finish"
        );
    }

    #[tokio::test]
    async fn write_tools_refused_when_read_only() {
        let (dir, mut ctx) = ctx();
        ctx.read_only = true;
        for (tool, args) in [
            ("write_file", json!({"path": "a.txt", "content": "x"})),
            (
                "edit_file",
                json!({"path": "a.txt", "old_string": "x", "new_string": "y"}),
            ),
        ] {
            let out = call(&ctx, tool, args).await;
            assert!(out.is_error);
            assert!(out.content.contains("read-only"), "{}", out.content);
        }
        assert!(!dir.path().join("a.txt").exists());
        let ok = call(&ctx, "list_files", json!({})).await;
        assert!(!ok.is_error);
    }

    #[tokio::test]
    async fn malformed_arguments() {
        let (_d, ctx) = ctx();
        let out = dispatch(&ctx, "read_file", "{\"path\": ").await;
        assert!(out.is_error);
        assert!(
            out.content
                .starts_with("error: read_file: arguments are not valid JSON"),
            "{}",
            out.content
        );

        let out = dispatch(&ctx, "read_file", "[1,2]").await;
        assert!(
            out.content.contains("must be a JSON object"),
            "{}",
            out.content
        );

        let out = dispatch(&ctx, "read_file", "").await;
        assert_eq!(
            out.content,
            "error: read_file: argument `path` is required: a file path relative to the worktree root"
        );

        let out = call(&ctx, "read_file", json!({"path": 42})).await;
        assert!(
            out.content.contains("argument `path` must be a string"),
            "{}",
            out.content
        );
        assert!(out.content.contains("the number 42"), "{}", out.content);

        let out = call(&ctx, "read_file", json!({"path": "a", "offset": "ten"})).await;
        assert!(
            out.content
                .contains("argument `offset` must be a non-negative integer"),
            "{}",
            out.content
        );

        let big = format!("{{\"command\": \"{}\"}}", "x".repeat(MAX_ARGUMENT_BYTES));
        let out = dispatch(&ctx, "bash", &big).await;
        assert!(out.is_error);
        assert!(out.content.contains("limit"), "{}", &out.content[..100]);
        assert!(out.summary.chars().count() <= SUMMARY_CHARS);
    }

    #[tokio::test]
    async fn spawn_agent_is_not_offered_and_errors_cleanly() {
        let (_d, ctx) = ctx();
        assert!(
            definitions(&ctx.allowed)
                .iter()
                .all(|d| d.name != "spawn_agent")
        );
        let out = call(&ctx, "spawn_agent", json!({"role": "explore", "task": "x"})).await;
        assert!(out.is_error);
        assert!(out.content.starts_with("error: spawn_agent: "));
    }

    #[tokio::test]
    async fn a_panic_in_a_tool_task_or_future_is_fatal_not_a_tool_result() {
        let joined = blocking(|| panic!("boom in the task")).await;
        match joined {
            Err(ToolError::Fatal(why)) => {
                assert!(why.starts_with("the tool's task panicked"), "{why}")
            }
            other => panic!("expected a fatal error, got {other:?}"),
        }
        let caught = catch_panic(async { panic!("boom in the future") }).await;
        assert_eq!(
            caught,
            Err(ToolError::Fatal(
                "the tool panicked: boom in the future".to_owned()
            ))
        );
        // A plain tool error still goes back to the model.
        let (_d, ctx) = ctx();
        let out = super::call(&ctx, "read_file", r#"{"path": "missing.txt"}"#)
            .await
            .expect("not fatal");
        assert!(out.is_error);
    }
}
