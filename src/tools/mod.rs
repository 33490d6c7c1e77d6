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

pub(crate) mod approval;
mod args;
mod bash;
mod channel;
mod context;
mod dispatch;
mod edit_file;
pub mod fence;
mod finish;
mod fuzzy;
mod grep;
mod list_files;
mod load_skill;
mod mcp;
mod outcome;
mod read_file;
mod readonly;
mod schema;
mod spawn_agent;
pub(crate) mod syntax;
mod write_file;

pub(crate) use bash::run_sandboxed;
pub(crate) use channel::ControlChannel;
pub use context::{Barrier, SpawnFuture, Spawner, ToolContext};
pub(crate) use dispatch::with_required;
pub use dispatch::{call, call_concurrently, dispatch, dispatch_concurrently};
pub(crate) use load_skill::{NAME as LOAD_SKILL, definition_bytes as load_skill_definition_bytes};
pub use outcome::{
    ALL_TOOLS, FatalToolError, FinishCall, MAX_ARGUMENT_BYTES, ToolError, ToolOutcome,
};
pub(crate) use read_file::numbered_line;
pub use readonly::{ReadOnlyGuard, Snapshot};
pub use schema::{definitions, offered, offered_names};

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;
    use crate::policy::BashPolicy;
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
