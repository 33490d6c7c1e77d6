//! Verify gates: after an agent finishes, orch runs the stage's `verify`
//! commands in the lane (the same exec path, environment, limits and
//! kernel sandbox as the `bash` tool, but not the model's shell policy: the
//! commands are the pipeline author's). When one fails, its output goes back
//! to the same agent as a new user message, up to `verify_rounds` more
//! times; the stage succeeds only when every command passes.
//!
//! A review stage's gate runs on the change it reviews, which the reviewer
//! cannot fix: a failure is not sent back as work. When the reviewer
//! approved, it is told once that the change failed its verify; an approve
//! after that is recorded as approved despite a failed verify.

use super::{Agent, AgentEnd};
use crate::ids::Verdict;
use crate::llm::ChatModel;
use crate::runlog::{ActionEvent, ActionLog, RecordError, TokenCount, event};
use crate::runlog::{BaselineReport, BaselineRun, VerifyReport, VerifyRun};
use crate::tools::ToolContext;

/// Bytes of a failing command's output sent back to the agent (head and tail).
const FEEDBACK_BYTES: usize = 8 * 1024;

/// What the gate needs besides the agent.
pub(crate) struct Gate<'a> {
    /// The commands (none: no gate).
    pub commands: &'a [String],
    /// Extra rounds after the first failure.
    pub rounds: u32,
    /// The agent reviews the change (a reviewer): a failure is reported to
    /// its verdict, not sent back as work.
    pub review: bool,
}

/// Runs the gate after `agent` ended: while the agent ended on its own terms
/// and a command fails, the failure goes back to it and it runs again. A
/// gate that does not pass ends the agent as [`AgentEnd::VerifyFailed`].
/// `None` when there are no commands.
pub(crate) async fn run_gate(
    gate: &Gate<'_>,
    agent: &mut Agent<'_>,
    model: &dyn ChatModel,
    tool_ctx: &ToolContext,
    log: &mut ActionLog,
    on_turn: &(dyn Fn(u32, TokenCount) + Sync),
) -> Result<Option<VerifyReport>, RecordError> {
    if gate.commands.is_empty() {
        return Ok(None);
    }
    let mut report = VerifyReport {
        commands: gate.commands.to_vec(),
        max_rounds: gate.rounds,
        ..VerifyReport::default()
    };
    loop {
        if !agent.end().is_success() {
            // The agent's own failure is the stage's reason; verify did not pass.
            return Ok(Some(report));
        }
        let round = report.rounds.len() as u32 + 1;
        let (runs, failure) = run_commands(gate.commands, tool_ctx, round, log).await?;
        report.rounds.push(runs);
        let Some(failure) = failure else {
            report.passed = true;
            report.output_tail.clear();
            return Ok(Some(report));
        };
        report.output_tail =
            crate::text::tail_bytes(failure.output.trim_end(), OUTPUT_TAIL_BYTES).to_owned();
        if gate.review {
            review_failed(&failure, agent, model, tool_ctx, log, on_turn).await?;
            return Ok(Some(report));
        }
        let Failure { command, .. } = &failure;
        let text = failure.feedback();
        if round > gate.rounds {
            let why = format!(
                "verify failed: `{command}` did not pass after {round} round{} ({} more allowed by verify_rounds)",
                if round == 1 { "" } else { "s" },
                gate.rounds
            );
            log.append(&ActionEvent::VerifyFailed(event::VerifyFailed {
                rounds: round,
                reason: why.clone(),
            }))?;
            agent.fail(AgentEnd::VerifyFailed(why));
            return Ok(Some(report));
        }
        let left = gate.rounds + 1 - round;
        agent.tell(format!(
            "{text} {left} more verify round{} allowed.",
            if left == 1 { " is" } else { "s are" }
        ));
        // A small model that never touched the named files: asked for them.
        agent.ask_whole_after_verify(tool_ctx, &text, log)?;
        agent.run(model, tool_ctx, log, on_turn).await?;
    }
}

/// Runs one verify command in the lane as the gate does — inside the
/// stage's kernel sandbox, like a `bash` call (the command is the pipeline
/// author's, but what it runs — tests, scripts — is the agent's work); its
/// record, its whole (capped) output and what the sandbox enforced.
async fn run_one(command: &str, ctx: &ToolContext) -> (VerifyRun, String, Option<String>) {
    let ctx = &from_source(ctx);
    let failed = |output: String| {
        (
            VerifyRun {
                command: command.to_owned(),
                exit_code: None,
                timed_out: false,
                duration_ms: 0,
            },
            output,
        )
    };
    let (result, sandbox) =
        match crate::tools::run_sandboxed(ctx, command, ctx.limits.max_timeout).await {
            Ok(ran) => ran,
            Err(fatal) => {
                let (run, output) = failed(format!("orch could not run it: {fatal}"));
                return (run, output, None);
            }
        };
    let (run, output) = match result {
        Ok(r) => (
            VerifyRun {
                command: command.to_owned(),
                exit_code: r.exit_code,
                timed_out: r.timed_out,
                duration_ms: r.duration.as_millis() as u64,
            },
            r.output,
        ),
        Err(e) => failed(format!("could not start bash: {e}")),
    };
    (run, output, sandbox)
}

/// Environment of the baseline and the gate so they test the lane's source
/// as it is now (issue 26.10). Python validates cached bytecode by the
/// source's size and mtime in whole seconds, so a same-size edit (`a - b` →
/// `a + b`) within the second after a run that cached it would run the old
/// code: these runs write no bytecode, and read none either — the cache
/// prefix is a path that cannot exist (nothing lives under `/dev/null`), so
/// a stale `__pycache__` left by the agent's own commands is not read.
const FROM_SOURCE_ENV: [(&str, &str); 2] = [
    ("PYTHONDONTWRITEBYTECODE", "1"),
    ("PYTHONPYCACHEPREFIX", "/dev/null/orch-no-bytecode-cache"),
];

/// `ctx` with [`FROM_SOURCE_ENV`] in its environment.
fn from_source(ctx: &ToolContext) -> ToolContext {
    let mut ctx = ctx.clone();
    ctx.env
        .retain(|(k, _)| !FROM_SOURCE_ENV.iter().any(|(name, _)| name == k));
    ctx.env.extend(
        FROM_SOURCE_ENV
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    ctx
}

/// [`run_one`], logged as the event `as_event` makes of its run.
async fn run_logged(
    command: &str,
    ctx: &ToolContext,
    log: &mut ActionLog,
    as_event: impl FnOnce(event::CommandRun) -> ActionEvent,
) -> Result<(VerifyRun, String), RecordError> {
    let (run, output, sandbox) = run_one(command, ctx).await;
    log.append(&as_event(event::CommandRun {
        command: run.command.clone(),
        exit_code: run.exit_code,
        timed_out: run.timed_out,
        duration_ms: run.duration_ms,
        passed: run.passed(),
        output: crate::text::head_tail_lines(&output, super::LOG_FIELD_CAP),
        sandbox,
    }))?;
    Ok((run, output))
}

/// Bytes of a failing baseline command's output kept for the hand-off (its tail).
const BASELINE_TAIL_BYTES: usize = 1024;

/// Runs every command of `commands` once in the lane, which is at `commit`
/// (the stage's start, before the agent), logging a `baseline` event each;
/// `redact` cleans the output tails kept for the hand-off.
pub(crate) async fn run_baseline(
    commands: &[String],
    ctx: &ToolContext,
    commit: &crate::git::CommitId,
    log: &mut ActionLog,
    redact: &(dyn Fn(&str) -> String + Sync),
) -> Result<BaselineReport, RecordError> {
    let mut runs = Vec::new();
    for command in commands {
        let (run, output) = run_logged(command, ctx, log, |run| {
            ActionEvent::Baseline(event::Baseline {
                commit: commit.to_string(),
                run,
            })
        })
        .await?;
        let passed = run.passed();
        let output_tail = if passed {
            String::new()
        } else {
            redact(crate::text::tail_bytes(
                output.trim_end(),
                BASELINE_TAIL_BYTES,
            ))
        };
        runs.push(BaselineRun { run, output_tail });
    }
    Ok(BaselineReport {
        commit: commit.to_string(),
        runs,
    })
}

/// Bytes of a failing command's output kept in the report for the hand-off (its tail).
const OUTPUT_TAIL_BYTES: usize = 1024;

/// A verify command that failed: what it was, how it ended, its output.
struct Failure {
    command: String,
    /// `exited 1`, `timed out after 60s`, `was killed`.
    status: String,
    /// Its output, capped (head and tail).
    output: String,
}

impl Failure {
    /// The message that sends a writing agent back to work.
    fn feedback(&self) -> String {
        format!(
            "Verify failed: orch ran `{}` in your worktree and it {}. Its output:\n\n```\n{}\n```\n\nThe stage only succeeds when verify passes. Fix the problem, then call `finish` again.",
            self.command, self.status, self.output
        )
    }
}

/// A review's gate failed: a reviewer that approved is told once, and an
/// approve after that is recorded as approved despite a failed verify.
async fn review_failed(
    failure: &Failure,
    agent: &mut Agent<'_>,
    model: &dyn ChatModel,
    tool_ctx: &ToolContext,
    log: &mut ActionLog,
    on_turn: &(dyn Fn(u32, TokenCount) + Sync),
) -> Result<(), RecordError> {
    if agent.verdict() != Some(Verdict::Approve) {
        return Ok(());
    }
    let text = format!(
        "The change you approve failed its verify: orch ran `{}` on it and it {}. Its output:\n\n```\n{}\n```\n\nCall `finish` again with your verdict: `request_changes` with what must be fixed, or `approve` only if the change should be merged despite this failure.",
        failure.command, failure.status, failure.output
    );
    log.append(&ActionEvent::Nudge(event::Nudge {
        turn: agent.turns(),
        message: text.clone(),
    }))?;
    agent.tell(text);
    agent.run(model, tool_ctx, log, on_turn).await?;
    if agent.end().is_success() && agent.verdict() == Some(Verdict::Approve) {
        agent.approved_despite_failed_verify();
    }
    Ok(())
}

/// Runs the commands in order until one fails; the runs, and the failure
/// when one did.
async fn run_commands(
    commands: &[String],
    ctx: &ToolContext,
    round: u32,
    log: &mut ActionLog,
) -> Result<(Vec<VerifyRun>, Option<Failure>), RecordError> {
    let mut runs = Vec::new();
    for command in commands {
        let (run, output) = run_logged(command, ctx, log, |run| {
            ActionEvent::Verify(event::Verify { round, run })
        })
        .await?;
        let passed = run.passed();
        let status = match (run.timed_out, run.exit_code) {
            (true, _) => format!("timed out after {}s", ctx.limits.max_timeout.as_secs()),
            (false, Some(c)) => format!("exited {c}"),
            (false, None) => "was killed".to_owned(),
        };
        runs.push(run);
        if !passed {
            let output = crate::text::head_tail_lines(output.trim_end(), FEEDBACK_BYTES);
            return Ok((
                runs,
                Some(Failure {
                    command: command.clone(),
                    status,
                    output,
                }),
            ));
        }
    }
    Ok((runs, None))
}
