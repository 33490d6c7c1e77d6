//! The agent loop's side of budgets: the time bound of model and tool calls.
//! The budget model itself (limits, the run's ledger, a stage's account and
//! its tracker) lives in the leaf [`crate::budget`]; this adds what needs the
//! runtime and the model: the time bound and the model's price.
//!
//! Tokens and cost are checked before and after every model turn; wall time
//! bounds each model call and each tool call ([`Tracker::bounded`]), so a
//! hung model or a slow command cannot outlive the budget. Exceeding a limit
//! ends the stage with a reason such as `token budget exceeded: 4000 of 3500
//! tokens`; the runner records it as a failed stage, whose partial work is
//! committed.

use std::future::Future;
use std::sync::Arc;

use crate::llm::ChatModel;

// The compaction reaches the tracker through here (`super::budget::Tracker`).
use crate::budget::Pricing;
pub(crate) use crate::budget::Tracker;

/// Cost budgets priced by the model's own price table (`orch.toml` or the
/// built-in list); unknown models leave cost budgets unenforced.
pub(crate) struct ModelPrice(pub Arc<dyn ChatModel>);

impl std::fmt::Debug for ModelPrice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ModelPrice({})", self.0.model_name())
    }
}

impl Pricing for ModelPrice {
    fn cost(&self, tokens: crate::budget::TokenCount) -> Option<f64> {
        self.0.cost_usd(&crate::llm::Usage::of(tokens))
    }
}

impl Tracker {
    /// Runs `fut` within the time left; `Err(reason)` when the time budget
    /// runs out first (the future is dropped: a running command's process
    /// group is killed by its guard).
    pub(crate) async fn bounded<F: Future>(&mut self, fut: F) -> Result<F::Output, String> {
        match self.time_left() {
            None => Ok(fut.await),
            Some(left) => match tokio::time::timeout(left, fut).await {
                Ok(out) => Ok(out),
                Err(_) => Err(self.time_exceeded()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{Budget, StageBudget, UnknownPrice};
    use std::time::Duration;

    fn stage(tokens: Option<u64>, secs: Option<f64>, cost: Option<f64>) -> StageBudget {
        StageBudget::own(
            &Budget {
                tokens,
                time_secs: secs,
                cost_usd: cost,
            },
            Arc::new(UnknownPrice),
        )
    }

    #[tokio::test]
    async fn time_bounds_a_slow_call() {
        let mut t = Tracker::new(stage(None, Some(0.2), None), 30);
        let fast = t.bounded(async { 7 }).await;
        assert_eq!(fast, Ok(7));
        let slow = t
            .bounded(tokio::time::sleep(Duration::from_secs(30)))
            .await
            .unwrap_err();
        assert!(
            slow.starts_with("time budget exceeded: ") && slow.ends_with(" of 0.2 s"),
            "{slow}"
        );
        assert_eq!(t.report().exceeded.as_deref(), Some("time"));
        assert!(t.before_turn().unwrap().starts_with("time budget used up"));
    }
}
