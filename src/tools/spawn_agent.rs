//! `spawn_agent`: runs `orch agent` as a child process with a fresh history
//! and returns its report through the context's [`super::Spawner`]
//! (implemented by `crate::subagent`, the process side).
//!
//! Several `spawn_agent` calls of one model turn run concurrently
//! (`dispatch::call_concurrently`); their results keep call order.

use super::args::Args;
use super::context::ToolContext;
use super::outcome::{ToolError, ToolOutcome};

pub(crate) async fn run(ctx: &ToolContext, args: &Args) -> Result<ToolOutcome, ToolError> {
    let role = args.string("role", "the subagent's role, e.g. explore")?;
    let task = args.string("task", "what the subagent should do, in plain words")?;
    if task.trim().is_empty() {
        return Err("argument `task` is empty; say what the subagent should do"
            .to_owned()
            .into());
    }
    let Some(spawn) = &ctx.spawn else {
        return Err(
            "not available here: subagents need a run record (use `orch run` or `orch agent`); do the work yourself"
                .to_owned()
                .into(),
        );
    };
    spawn.spawn(role.trim(), &task).await
}

#[cfg(test)]
mod tests {
    use super::super::dispatch;
    use super::super::dispatch::dispatch_concurrently;
    use super::super::test_support::ctx;

    #[tokio::test]
    async fn concurrent_dispatch_keeps_call_order() {
        let (_d, ctx) = ctx();
        let outs = dispatch_concurrently(
            &ctx,
            &[
                ("bash", r#"{"command": "sleep 0.3; echo first"}"#),
                ("bash", r#"{"command": "echo second"}"#),
                ("nope", "{}"),
            ],
        )
        .await;
        assert_eq!(outs.len(), 3);
        assert!(outs[0].content.contains("first"), "{}", outs[0].content);
        assert!(outs[1].content.contains("second"), "{}", outs[1].content);
        assert!(outs[2].is_error);
    }

    #[tokio::test]
    async fn without_a_spawn_context_it_is_a_tool_error() {
        let (_d, ctx) = ctx();
        let out = dispatch(&ctx, "spawn_agent", r#"{"role": "explore", "task": "x"}"#).await;
        assert!(out.is_error);
        assert!(
            out.content
                .starts_with("error: spawn_agent: not available here"),
            "{}",
            out.content
        );
        let out = dispatch(&ctx, "spawn_agent", r#"{"role": "explore"}"#).await;
        assert!(
            out.content.contains("argument `task` is required"),
            "{}",
            out.content
        );
    }
}
