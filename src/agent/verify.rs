//! Verify gates: after an agent finishes, orch runs the stage's `verify`
//! commands in the lane (the same exec path, environment, limits and
//! sandbox hook as the `bash` tool, but not the model's shell policy: the
//! commands are the pipeline author's). When one fails, its output goes back
//! to the same agent as a new user message, up to `verify_rounds` more
//! times; the stage succeeds only when every command passes.

use super::{Agent, AgentEnd};
use crate::llm::ChatModel;
use crate::runlog::{ActionLog, RecordError, TokenCount};
use crate::tools::ToolContext;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The default number of extra rounds an agent gets to make verify pass.
pub(crate) const DEFAULT_VERIFY_ROUNDS: u32 = 2;

/// Bytes of a failing command's output sent back to the agent (head and tail).
const FEEDBACK_BYTES: usize = 8 * 1024;

/// One command's run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyRun {
    /// The command line.
    pub command: String,
    /// Its exit code (`None` when it was killed or timed out).
    pub exit_code: Option<i32>,
    /// True when the timeout fired.
    #[serde(default)]
    pub timed_out: bool,
    /// Wall time.
    pub duration_ms: u64,
}

impl VerifyRun {
    fn passed(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }
}

/// A stage's verify gate: what ran in each round and whether it passed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// The commands, in order.
    pub commands: Vec<String>,
    /// The extra rounds the agent was allowed.
    pub max_rounds: u32,
    /// Each round's runs (round 1 is after the agent's first finish; a
    /// round stops at its first failing command).
    pub rounds: Vec<Vec<VerifyRun>>,
    /// True when the last round passed every command.
    pub passed: bool,
}

impl VerifyReport {
    /// One line for hand-offs and the PR body: `pass (`cmd` exit 0; 2 rounds)`.
    pub fn line(&self) -> String {
        let last = self.rounds.last().map(Vec::as_slice).unwrap_or_default();
        let runs: Vec<String> = last
            .iter()
            .map(|r| match (r.timed_out, r.exit_code) {
                (true, _) => format!("`{}` timed out", r.command),
                (false, Some(c)) => format!("`{}` exit {c}", r.command),
                (false, None) => format!("`{}` killed", r.command),
            })
            .collect();
        let runs = if runs.is_empty() {
            "not run: the agent did not finish".to_owned()
        } else {
            runs.join(", ")
        };
        format!(
            "{} ({runs}; {} round{})",
            if self.passed { "pass" } else { "fail" },
            self.rounds.len(),
            if self.rounds.len() == 1 { "" } else { "s" }
        )
    }
}

/// What the gate needs besides the agent.
pub(crate) struct Gate<'a> {
    /// The commands (none: no gate).
    pub commands: &'a [String],
    /// Extra rounds after the first failure.
    pub rounds: u32,
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
        let Some((command, text)) = failure else {
            report.passed = true;
            return Ok(Some(report));
        };
        if round > gate.rounds {
            let why = format!(
                "verify failed: `{command}` did not pass after {round} round{} ({} more allowed by verify_rounds)",
                if round == 1 { "" } else { "s" },
                gate.rounds
            );
            log.append("verify_failed", json!({"rounds": round, "reason": why}))?;
            agent.fail(AgentEnd::VerifyFailed(why));
            return Ok(Some(report));
        }
        let left = gate.rounds + 1 - round;
        agent.tell(format!(
            "{text} {left} more verify round{} allowed.",
            if left == 1 { " is" } else { "s are" }
        ));
        agent.run(model, tool_ctx, log, on_turn).await?;
    }
}

/// Runs the commands in order until one fails; the failing command and the
/// message for the agent when one did.
async fn run_commands(
    commands: &[String],
    ctx: &ToolContext,
    round: u32,
    log: &mut ActionLog,
) -> Result<(Vec<VerifyRun>, Option<(String, String)>), RecordError> {
    let mut runs = Vec::new();
    for command in commands {
        let result = crate::exec::run_shell_with(
            command,
            &ctx.root,
            &ctx.env,
            ctx.limits.max_timeout,
            &ctx.limits,
            ctx.pre_exec.as_ref(),
        )
        .await;
        let (run, output) = match result {
            Ok(r) => (
                VerifyRun {
                    command: command.clone(),
                    exit_code: r.exit_code,
                    timed_out: r.timed_out,
                    duration_ms: r.duration.as_millis() as u64,
                },
                r.output,
            ),
            Err(e) => (
                VerifyRun {
                    command: command.clone(),
                    exit_code: None,
                    timed_out: false,
                    duration_ms: 0,
                },
                format!("could not start bash: {e}"),
            ),
        };
        let passed = run.passed();
        log.append(
            "verify",
            json!({
                "round": round,
                "command": run.command,
                "exit_code": run.exit_code,
                "timed_out": run.timed_out,
                "duration_ms": run.duration_ms,
                "passed": passed,
                "output": crate::text::head_tail_lines(&output, super::LOG_FIELD_CAP),
            }),
        )?;
        let status = match (run.timed_out, run.exit_code) {
            (true, _) => format!("timed out after {}s", ctx.limits.max_timeout.as_secs()),
            (false, Some(c)) => format!("exited {c}"),
            (false, None) => "was killed".to_owned(),
        };
        runs.push(run);
        if !passed {
            let output = crate::text::head_tail_lines(output.trim_end(), FEEDBACK_BYTES);
            let text = format!(
                "Verify failed: orch ran `{command}` in your worktree and it {status}. Its output:\n\n```\n{output}\n```\n\nThe stage only succeeds when verify passes. Fix the problem, then call `finish` again."
            );
            return Ok((runs, Some((command.clone(), text))));
        }
    }
    Ok((runs, None))
}
