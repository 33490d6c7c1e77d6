//! `bash`: runs a command through the bash policy (the approval layer) and
//! [`crate::exec::run_shell`], inside the kernel sandbox of
//! [`ToolContext::sandbox`] with the user's repository fingerprinted around
//! the call.
//!
//! A command that changed the user's repository (refs, HEAD, hooks, config,
//! the lane's own git files) is a fatal tool error: the change is restored
//! and the stage ends as an internal error (exit 5), naming what changed —
//! the model is not told, since nothing it does next can be trusted.

use std::sync::Arc;
use std::time::Duration;

use super::args::Args;
use super::context::ToolContext;
use super::outcome::{SUMMARY_CHARS, ToolError, ToolOutcome};
use crate::exec;
use crate::policy::Decision;
use crate::text::one_line;

pub(crate) async fn run(ctx: &ToolContext, args: &Args) -> Result<ToolOutcome, ToolError> {
    let command = args.string("command", "a bash command line")?;
    if command.trim().is_empty() {
        return Err("argument `command` is empty; give a bash command line"
            .to_owned()
            .into());
    }
    let timeout = match args.opt_u64("timeout_secs")? {
        Some(secs) => {
            Duration::from_secs(secs).clamp(Duration::from_secs(1), ctx.limits.max_timeout)
        }
        None => ctx.limits.default_timeout,
    };
    let shown = one_line(&command, 60);

    let evaluation = ctx.policy.evaluate(&command);
    let policy = match evaluation.decision {
        Decision::Allow => Ok(evaluation.allow_label()),
        Decision::Deny(reason) => Err(reason),
        Decision::Ask(why) => super::approval::ask(ctx, "bash", &command, &why).await,
    };
    let policy = match policy {
        Ok(p) => p,
        Err(reason) => {
            let mut out = ToolOutcome::error(
                "bash",
                &format!("command not run: denied by policy: {reason}"),
            );
            out.summary = one_line(&format!("bash `{shown}` → denied: {reason}"), SUMMARY_CHARS);
            out.policy = Some(format!("deny: {reason}"));
            out.sandbox = ctx.sandbox.as_ref().map(|s| s.choice().label());
            return Ok(out);
        }
    };

    let (result, sandbox) = run_sandboxed(ctx, &command, timeout)
        .await
        .map_err(ToolError::Fatal)?;
    let result = result.map_err(|e| format!("could not start bash: {e}"))?;
    let secs = result.duration.as_secs_f64();
    let mut body = result.output;
    if body.is_empty() {
        body.push_str("(no output)\n");
    } else if !body.ends_with('\n') {
        body.push('\n');
    }
    let mut out = if result.timed_out {
        let mut o = ToolOutcome::error(
            "bash",
            &format!(
                "command timed out after {}s and its process group was killed (pass a larger timeout_secs, max {}); output so far:\n{body}",
                timeout.as_secs(),
                ctx.limits.max_timeout.as_secs()
            ),
        );
        o.summary = one_line(
            &format!("bash `{shown}` → timed out ({secs:.1}s)"),
            SUMMARY_CHARS,
        );
        o
    } else {
        let status = match (result.exit_code, result.signal) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            (None, None) => "exit unknown".to_owned(),
        };
        body.push_str(&format!("[{status}, {secs:.1}s]"));
        ToolOutcome::ok(body, format!("bash `{shown}` → {status} ({secs:.1}s)"))
    };
    out.exit_code = result.exit_code;
    out.policy = Some(policy);
    out.sandbox = sandbox;
    Ok(out)
}

/// Runs `command` as a `bash` call runs it — `ctx`'s environment, limits
/// and pre-exec hook, inside `ctx`'s sandbox with the user's repository
/// fingerprinted around it — without the model's shell policy (for commands
/// the user configured). Returns the run (its `Err`: bash did not start) and
/// what the sandbox enforced; `Err` is orch's own failure: the sandbox could
/// not be set up, or the command changed the user's repository (restored).
pub(crate) async fn run_sandboxed(
    ctx: &ToolContext,
    command: &str,
    timeout: Duration,
) -> Result<(std::io::Result<exec::ExecResult>, Option<String>), String> {
    if let Some(ready) = &ctx.ready {
        ready.clone().await;
    }
    let call = match &ctx.sandbox {
        Some(sb) => Some(sb.begin(&ctx.root).await?),
        None => None,
    };
    let mut env = ctx.env.clone();
    let mut hook = ctx.pre_exec.clone();
    if let Some(call) = &call {
        env.retain(|(k, _)| !call.env.iter().any(|(ck, _)| ck == k));
        env.extend(call.env.iter().cloned());
        let prepared = Arc::clone(&call.prepared);
        let outer = ctx.pre_exec.clone();
        hook = Some(exec::PreExec::new(move || {
            if let Some(outer) = &outer {
                outer.run()?;
            }
            prepared.apply_in_child()
        }));
    }
    let sandbox = call.as_ref().map(|c| c.summary.clone());
    let result = exec::run_shell_with(
        command,
        &ctx.root,
        &env,
        timeout,
        &ctx.limits,
        hook.as_ref(),
    )
    .await;
    if let (Some(sb), Some(call)) = (&ctx.sandbox, call)
        && let Some(note) = sb.finish(call)?
    {
        tracing::info!("{note}");
        crate::ui::status_line(&format!("orch: note: {note}"));
    }
    Ok((result, sandbox))
}

#[cfg(test)]
mod tests {
    use crate::policy::BashPolicy;
    use crate::tools::test_support::{call, ctx};
    use crate::tools::{ToolContext, dispatch};
    use serde_json::json;
    use std::time::{Duration, Instant};

    #[tokio::test]
    async fn runs_in_root_with_exit_code() {
        let (dir, ctx) = ctx();
        let out = call(
            &ctx,
            "bash",
            json!({"command": "pwd; echo oops >&2; exit 4"}),
        )
        .await;
        assert!(!out.is_error);
        assert_eq!(out.exit_code, Some(4));
        let root = dir.path().canonicalize().unwrap();
        assert!(
            out.content
                .starts_with(&format!("{}\noops\n[exit 4, ", root.display())),
            "{}",
            out.content
        );
        assert!(
            out.summary
                .starts_with("bash `pwd; echo oops >&2; exit 4` → exit 4 ("),
            "{}",
            out.summary
        );
        assert_eq!(out.policy.as_deref(), Some("allow"));
    }

    #[tokio::test]
    async fn env_is_exactly_the_context_env() {
        let (_d, mut ctx) = ctx();
        ctx.env
            .push(("ORCH_TEST_MARKER".to_owned(), "1".to_owned()));
        let out = call(&ctx, "bash", json!({"command": "env"})).await;
        let mut seen: Vec<&str> = out
            .content
            .lines()
            .filter(|l| !l.starts_with('['))
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .filter(|k| !["PWD", "SHLVL", "_", "OLDPWD"].contains(k))
            .collect();
        seen.sort();
        let mut expected: Vec<&str> = ctx.env.iter().map(|(k, _)| k.as_str()).collect();
        expected.sort();
        assert_eq!(seen, expected);
        assert!(!out.content.contains("_API_KEY"));
    }

    #[tokio::test]
    async fn stdin_is_closed() {
        let (_d, ctx) = ctx();
        let start = Instant::now();
        let out = call(&ctx, "bash", json!({"command": "cat"})).await;
        assert_eq!(out.exit_code, Some(0));
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn timeout_is_an_error_and_kills_the_group() {
        let (dir, ctx) = ctx();
        let out = call(&ctx, "bash", json!({"command": "echo $$ > pgid; sleep 1000 & echo $! > pid; sleep 1000", "timeout_secs": 1})).await;
        assert!(out.is_error);
        assert!(
            out.content
                .starts_with("error: bash: command timed out after 1s"),
            "{}",
            out.content
        );
        assert_eq!(out.exit_code, None);
        assert!(out.summary.contains("timed out"));
        let pgid: libc::pid_t = std::fs::read_to_string(dir.path().join("pgid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            crate::exec::group::tests::group_gone(pgid),
            "group {pgid} survived"
        );
    }

    #[tokio::test]
    async fn background_grandchild_does_not_block() {
        let (_d, ctx) = ctx();
        let start = Instant::now();
        let out = call(
            &ctx,
            "bash",
            json!({"command": "(sleep 100 &) ; echo done"}),
        )
        .await;
        assert!(out.content.starts_with("done\n[exit 0"), "{}", out.content);
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn output_is_capped_with_marker() {
        let (_d, ctx) = ctx();
        let out = call(&ctx, "bash", json!({"command": "seq 1 50000"})).await;
        assert!(out.content.starts_with("1\n2\n"));
        assert!(out.content.contains(" lines omitted …]\n"));
        assert!(out.content.contains("\n50000\n[exit 0"));
        assert!(out.content.len() < 17 * 1024);
    }

    #[tokio::test]
    async fn denied_commands_do_not_run() {
        let (dir, ctx) = ctx();
        let out = call(&ctx, "bash", json!({"command": "touch ran; rm -rf /"})).await;
        assert!(out.is_error);
        assert_eq!(
            out.content,
            "error: bash: command not run: denied by policy: recursive delete of / (built-in deny list)"
        );
        assert_eq!(
            out.policy.as_deref(),
            Some("deny: recursive delete of / (built-in deny list)")
        );
        assert!(!dir.path().join("ran").exists());
    }

    #[tokio::test]
    async fn ask_without_terminal_is_denied_unless_yes() {
        let dir = tempfile::tempdir().unwrap();
        let all = vec!["bash".to_owned()];
        let policy = BashPolicy {
            ask: vec!["touch".into()],
            ..BashPolicy::default()
        };
        let ctx = ToolContext::new(dir.path(), &all, false, policy.clone()).unwrap();
        let out = dispatch(&ctx, "bash", r#"{"command":"touch asked"}"#).await;
        assert!(out.is_error);
        assert!(
            out.content
                .contains("needs approval and no terminal is attached; re-run with --yes to allow (or --ask-via control"),
            "{}",
            out.content
        );
        assert!(!dir.path().join("asked").exists());

        let ctx = ToolContext::new(
            dir.path(),
            &all,
            false,
            BashPolicy {
                assume_yes: true,
                ..policy
            },
        )
        .unwrap();
        let out = dispatch(&ctx, "bash", r#"{"command":"touch asked"}"#).await;
        assert!(!out.is_error, "{}", out.content);
        assert!(out.policy.unwrap().starts_with("allow (--yes)"));
        assert!(dir.path().join("asked").exists());
    }

    #[tokio::test]
    async fn symlink_planted_by_bash_is_fenced() {
        let (_d, ctx) = ctx();
        let out = call(&ctx, "bash", json!({"command": "ln -s /etc leak"})).await;
        assert_eq!(out.exit_code, Some(0));
        let out = call(&ctx, "read_file", json!({"path": "leak/passwd"})).await;
        assert!(out.is_error);
        assert!(
            out.content
                .contains("resolves outside the worktree through a symlink"),
            "{}",
            out.content
        );
        let out = call(
            &ctx,
            "write_file",
            json!({"path": "leak/evil", "content": "x"}),
        )
        .await;
        assert!(out.is_error);
        assert!(!std::path::Path::new("/etc/evil").exists());
    }
}
