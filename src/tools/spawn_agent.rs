//! `spawn_agent`: runs `orch agent` as a child process with a fresh history
//! and returns its report through the context's [`super::Spawner`]
//! (implemented by `crate::subagent`, the process side).
//!
//! Several `spawn_agent` calls of one model turn run concurrently
//! ([`dispatch_concurrently`]); their results keep call order.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use serde_json::json;

use super::{Args, FatalToolError, ToolContext, ToolError, ToolOutcome, call, schema};
use crate::llm::ToolDef;

/// The schema offered to the model.
pub(crate) fn definition() -> ToolDef {
    ToolDef {
        name: "spawn_agent",
        description: "Run a subagent (fresh history) on a subtask; returns its report.",
        parameters: schema(
            json!({"role": {"type": "string", "description": "e.g. explore (read-only)"}, "task": {"type": "string"}}),
            &["role", "task"],
        ),
    }
}

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

/// Runs the calls `(name, arguments)` concurrently and returns their results
/// in call order (see [`call`]). Used for the `spawn_agent` calls of one
/// model turn; other tools run one after another.
///
/// The futures are polled in call order on one task (nothing is spawned), so
/// dropping the returned future cancels every call at once, and each
/// `spawn_agent` call numbers its subagent in call order.
pub async fn call_concurrently(
    ctx: &ToolContext,
    calls: &[(&str, &str)],
) -> Vec<Result<ToolOutcome, FatalToolError>> {
    type Call<'a> = Pin<Box<dyn Future<Output = Result<ToolOutcome, FatalToolError>> + Send + 'a>>;
    let mut futures: Vec<Call<'_>> = calls
        .iter()
        .map(|(name, arguments)| Box::pin(call(ctx, name, arguments)) as Call<'_>)
        .collect();
    let mut done: Vec<Option<Result<ToolOutcome, FatalToolError>>> =
        calls.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, slot) in futures.iter_mut().zip(done.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(outcome) => *slot = Some(outcome),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    done.into_iter().flatten().collect()
}

/// [`call_concurrently`] where there is no stage to end (see
/// [`super::dispatch`]).
pub async fn dispatch_concurrently(ctx: &ToolContext, calls: &[(&str, &str)]) -> Vec<ToolOutcome> {
    call_concurrently(ctx, calls)
        .await
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|f| {
                ToolOutcome::error(&f.tool, &format!("internal error: {}", f.reason))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::dispatch;
    use super::super::test_support::ctx;
    use super::*;

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
