//! The verify commands: their baseline on the start commit before the
//! agent's first turn, and the gate after its last (which may send it back
//! to work).

use crate::agent::{self, Agent};
use crate::llm::ChatModel;
use crate::pipeline::Stage;
use crate::runlog::{ActionLog, TokenCount};
use crate::runlog::{BaselineReport, VerifyReport};
use crate::runner::bootstrap::Prepared;
use crate::runner::error::RunError;
use crate::tools::ToolContext;

/// The verify commands run once on the start commit, before any model
/// call: in a stage's first round, when it has verify commands and its lane
/// was prepared.
pub(super) async fn baseline(
    stage: &Stage,
    boot: &Prepared,
    tool_ctx: &ToolContext,
    start: &crate::git::CommitId,
    log: &mut ActionLog,
    redact: &(dyn Fn(&str) -> String + Sync),
) -> Result<Option<BaselineReport>, RunError> {
    Ok(match boot.failure {
        None if stage.round == 1 && !stage.verify.is_empty() => {
            Some(agent::verify::run_baseline(&stage.verify, tool_ctx, start, log, redact).await?)
        }
        _ => None,
    })
}

/// The stage's verify gate after the agent's run; `review`: the agent
/// reviews the change (its failure informs the verdict, see
/// [`agent::verify`]).
pub(super) async fn gate(
    stage: &Stage,
    review: bool,
    agent: &mut Agent<'_>,
    model: &dyn ChatModel,
    tool_ctx: &ToolContext,
    log: &mut ActionLog,
    on_turn: &(dyn Fn(u32, TokenCount) + Sync),
) -> Result<Option<VerifyReport>, RunError> {
    let gate = agent::verify::Gate {
        commands: &stage.verify,
        rounds: stage.verify_rounds,
        review,
    };
    Ok(agent::verify::run_gate(&gate, agent, model, tool_ctx, log, on_turn).await?)
}

/// The task message, told (only when one failed) what the verify commands
/// did before the agent's change, so it does not chase a failure it did not
/// cause; a passing baseline adds nothing to the first request.
pub(super) fn with_baseline(mut task: String, baseline: Option<&BaselineReport>) -> String {
    if let Some(b) = baseline.filter(|b| !b.passed()) {
        task.push_str("\n# Baseline\n\n");
        task.push_str(&b.handoff());
    }
    task
}
