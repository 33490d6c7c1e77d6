//! Running a tool call: check the name, permission and arguments, run the
//! tool (a panic or a cancelled task is fatal), redact known secrets
//! (see the module docs of `tools`).

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Instant;

use super::args::Args;
use super::context::ToolContext;
use super::outcome::{ALL_TOOLS, FatalToolError, ToolError, ToolOutcome, join_failure};
use super::schema::offered;
use super::{
    bash, edit_file, finish, grep, list_files, load_skill, read_file, spawn_agent, write_file,
};
use crate::text::one_line;
use crate::toolname::ToolName;

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
    let mut outcome = if super::mcp::offers(ctx, name) {
        super::mcp::run(ctx, name, arguments).await
    } else {
        match check_call(ctx, name, arguments) {
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
        }
    };
    outcome.duration_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    // Known secret values (orch's keys, `~/.netrc`, credential URLs) never
    // reach the model, whichever tool printed them.
    if !crate::secrets::known_secrets().is_empty() {
        outcome.content = crate::secrets::redact(&outcome.content, &[]);
        outcome.summary = crate::secrets::redact(&outcome.summary, &[]);
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
    if name == load_skill::NAME && load_skill::offered(ctx) {
        return Args::parse(name, arguments).map_err(|msg| (name.to_owned(), msg));
    }
    if !ALL_TOOLS.contains(&name) {
        return Err((
            one_line(name, 60),
            format!(
                "unknown tool; call one of the offered tools by name, with its required arguments: {}",
                with_required(&super::schema::offered(ctx))
            ),
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

/// The tools as `name(required, arguments)`, comma-separated: what a model
/// that named a tool that does not exist needs to call one that does.
pub(crate) fn with_required(defs: &[crate::llm::ToolDef]) -> String {
    let sig = |d: &crate::llm::ToolDef| {
        let required: Vec<&str> = d
            .parameters
            .get("required")
            .and_then(serde_json::Value::as_array)
            .map(|r| r.iter().filter_map(serde_json::Value::as_str).collect())
            .unwrap_or_default();
        format!("{}({})", d.name, required.join(", "))
    };
    defs.iter().map(sig).collect::<Vec<_>>().join(", ")
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
        load_skill::NAME => load_skill::run(ctx, &args).await,
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
    use super::super::outcome::{MAX_ARGUMENT_BYTES, SUMMARY_CHARS};
    use super::super::test_support::{call, ctx};
    use super::*;
    use crate::tools::definitions;
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
                "error: rm_everything: unknown tool; call one of the offered tools by name, with its required arguments: bash(command), read_file(path)"
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
