//! Budgets: limits on the tokens, wall time and cost of a stage and of a run.
//!
//! A run's budget (`orch run --max-tokens/--max-time/--max-cost`) is shared
//! by all its stages; a stage's own budget (the pipeline's `budget:` key) caps
//! that stage alone. Each stage gets, per dimension, the smaller of its own
//! limit and what is left of the run's ([`RunLedger::stage_budget`]).
//!
//! Inside the agent loop a [`Tracker`] counts what the stage used. Tokens and
//! cost are checked before and after every model turn; wall time bounds each
//! model call and each tool call ([`Tracker::bounded`]), so a hung model or a
//! slow command cannot outlive the budget. Exceeding a limit ends the stage
//! with a reason such as `token budget exceeded: 4000 of 3500 tokens`; the
//! runner records it as a failed stage, whose partial work is committed.
//!
//! Cost comes from a [`Pricing`] supplied by the caller. When the price is
//! unknown, a cost limit cannot be enforced: the stage says so once (a note in
//! its budget report and action log) and runs on without it.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::compact::CompactConfig;

/// Limits as a user writes them (a stage's `budget:` key, or the run's
/// flags); `None` means no limit. Parsing guarantees the numbers are finite
/// and positive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// Prompt plus completion tokens, summed over every model call.
    pub tokens: Option<u64>,
    /// Wall time in seconds.
    pub time_secs: Option<f64>,
    /// Cost in US dollars.
    pub cost_usd: Option<f64>,
}

// The floats are never NaN: the pipeline parser and the CLI reject
// non-finite values, so equality is an equivalence relation here.
impl Eq for Budget {}

impl Budget {
    /// True when no dimension is limited.
    pub fn is_unlimited(&self) -> bool {
        self.tokens.is_none() && self.time_secs.is_none() && self.cost_usd.is_none()
    }
}

/// What model calls cost. Until the model client has a price table, callers
/// supply one (or [`UnknownPrice`]).
pub trait Pricing: Send + Sync + fmt::Debug {
    /// The cost in US dollars of one call, `None` when unknown.
    fn cost(&self, prompt_tokens: u64, completion_tokens: u64) -> Option<f64>;
}

/// A model whose price is unknown: cost limits cannot be enforced.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnknownPrice;

impl Pricing for UnknownPrice {
    fn cost(&self, _: u64, _: u64) -> Option<f64> {
        None
    }
}

/// A flat price in US dollars per million prompt and completion tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerMillionTokens {
    /// Dollars per million prompt tokens.
    pub prompt_usd: f64,
    /// Dollars per million completion tokens.
    pub completion_usd: f64,
}

impl Pricing for PerMillionTokens {
    fn cost(&self, prompt_tokens: u64, completion_tokens: u64) -> Option<f64> {
        Some(
            (prompt_tokens as f64 * self.prompt_usd
                + completion_tokens as f64 * self.completion_usd)
                / 1e6,
        )
    }
}

/// Everything a run is limited by: its budget, the compaction policy and
/// the price used for cost budgets.
#[derive(Debug, Clone)]
pub struct RunLimits {
    /// The run's budget, shared by all stages.
    pub budget: Budget,
    /// When and how conversations are compacted.
    pub compaction: CompactConfig,
    /// What model calls cost.
    pub pricing: Arc<dyn Pricing>,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            budget: Budget::default(),
            compaction: CompactConfig::default(),
            pricing: Arc::new(UnknownPrice),
        }
    }
}

/// One effective limit and whether it is what was left of the run's budget
/// (rather than the stage's own).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit<T> {
    /// The limit.
    pub max: T,
    /// True when the run's remainder was the smaller limit.
    pub from_run: bool,
}

/// The effective limits of one stage.
#[derive(Debug, Clone)]
pub struct StageBudget {
    /// Tokens.
    pub tokens: Option<Limit<u64>>,
    /// Wall time.
    pub time: Option<Limit<Duration>>,
    /// Cost in US dollars.
    pub cost_usd: Option<Limit<f64>>,
    /// What model calls cost.
    pub pricing: Arc<dyn Pricing>,
}

impl Default for StageBudget {
    fn default() -> Self {
        StageBudget {
            tokens: None,
            time: None,
            cost_usd: None,
            pricing: Arc::new(UnknownPrice),
        }
    }
}

/// The smaller of a stage's own limit and the run's remainder.
fn tighter<T: PartialOrd + Copy>(stage: Option<T>, run: Option<T>) -> Option<Limit<T>> {
    match (stage, run) {
        (None, None) => None,
        (Some(s), None) => Some(Limit {
            max: s,
            from_run: false,
        }),
        (None, Some(r)) => Some(Limit {
            max: r,
            from_run: true,
        }),
        (Some(s), Some(r)) if r < s => Some(Limit {
            max: r,
            from_run: true,
        }),
        (Some(s), Some(_)) => Some(Limit {
            max: s,
            from_run: false,
        }),
    }
}

/// A run's budget and what its stages used of it. Owned by the runner.
#[derive(Debug)]
pub struct RunLedger {
    limits: Budget,
    started: Instant,
    tokens: u64,
    cost_usd: f64,
}

impl RunLedger {
    /// Starts the run's clock.
    pub fn new(limits: Budget) -> Self {
        RunLedger {
            limits,
            started: Instant::now(),
            tokens: 0,
            cost_usd: 0.0,
        }
    }

    /// The limits of a stage whose own budget is `stage`: per dimension the
    /// smaller of that and what is left of the run's budget.
    pub fn stage_budget(&self, stage: &Budget, pricing: Arc<dyn Pricing>) -> StageBudget {
        let left_tokens = self.limits.tokens.map(|t| t.saturating_sub(self.tokens));
        let left_time = self
            .limits
            .time_secs
            .map(|t| Duration::from_secs_f64(t).saturating_sub(self.started.elapsed()));
        let left_cost = self.limits.cost_usd.map(|c| (c - self.cost_usd).max(0.0));
        StageBudget {
            tokens: tighter(stage.tokens, left_tokens),
            time: tighter(stage.time_secs.map(Duration::from_secs_f64), left_time),
            cost_usd: tighter(stage.cost_usd, left_cost),
            pricing,
        }
    }

    /// Charges what a stage used to the run.
    pub fn charge(&mut self, used: &BudgetUse) {
        self.tokens += used.tokens;
        self.cost_usd += used.cost_usd.unwrap_or(0.0);
    }
}

/// What a stage used.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetUse {
    /// Model turns (summary calls of the compaction are not turns).
    pub turns: u32,
    /// Prompt plus completion tokens of every model call, summaries included.
    pub tokens: u64,
    /// Wall time of the agent loop, in seconds.
    pub time_secs: f64,
    /// Cost in US dollars; `None` when the price is unknown.
    pub cost_usd: Option<f64>,
}

/// A stage's budget and its use: the `budget` field of `agent_end` and of
/// the stage record in `state.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetReport {
    /// The effective limits (turns included).
    pub limits: ReportLimits,
    /// The limits that were what was left of the run's budget
    /// (`tokens`, `time`, `cost`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from_run: Vec<String>,
    /// What was used.
    pub used: BudgetUse,
    /// The limit that ended the stage (`tokens`, `time`, `cost`), if any.
    #[serde(default)]
    pub exceeded: Option<String>,
    /// Things the user should know (e.g. a cost limit that could not be enforced).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The effective limits in a [`BudgetReport`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReportLimits {
    /// Model turns.
    pub turns: u32,
    /// Tokens.
    pub tokens: Option<u64>,
    /// Wall time in seconds.
    pub time_secs: Option<f64>,
    /// Cost in US dollars.
    pub cost_usd: Option<f64>,
}

/// Counts what one agent loop uses and says when a limit is reached.
#[derive(Debug)]
pub struct Tracker {
    budget: StageBudget,
    max_turns: u32,
    started: Instant,
    turns: u32,
    tokens: u64,
    cost_usd: f64,
    cost_known: bool,
    exceeded: Option<&'static str>,
    notes: Vec<String>,
}

impl Tracker {
    /// Starts the stage's clock.
    pub fn new(budget: StageBudget, max_turns: u32) -> Self {
        let mut notes = Vec::new();
        let cost_known = budget.pricing.cost(1, 1).is_some();
        if let Some(limit) = budget.cost_usd
            && !cost_known
        {
            notes.push(format!(
                "cost budget of ${:.4} not enforced: the model's price is unknown",
                limit.max
            ));
        }
        Tracker {
            budget,
            max_turns,
            started: Instant::now(),
            turns: 0,
            tokens: 0,
            cost_usd: 0.0,
            cost_known,
            exceeded: None,
            notes,
        }
    }

    /// Notes for the user (logged once, at the start of the agent).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Time left, `None` without a time limit.
    pub fn time_left(&self) -> Option<Duration> {
        self.budget
            .time
            .map(|t| t.max.saturating_sub(self.started.elapsed()))
    }

    /// Counts one model turn and its usage.
    pub fn record_turn(&mut self, prompt_tokens: u64, completion_tokens: u64) {
        self.turns += 1;
        self.record_usage(prompt_tokens, completion_tokens);
    }

    /// Counts the usage of a model call that is not a turn (a summary).
    pub fn record_usage(&mut self, prompt_tokens: u64, completion_tokens: u64) {
        self.tokens += prompt_tokens + completion_tokens;
        if let Some(c) = self.budget.pricing.cost(prompt_tokens, completion_tokens) {
            self.cost_usd += c;
        } else {
            self.cost_known = false;
        }
    }

    /// Before a model turn: why no turn may start (a limit used up), if so.
    pub fn before_turn(&mut self) -> Option<String> {
        if let Some(t) = self.budget.time
            && self.started.elapsed() >= t.max
        {
            return Some(self.stop("time", "used up"));
        }
        self.check(|used, max| used >= max, "used up")
    }

    /// After a model turn: why the stage must stop (a limit passed), if so.
    pub fn after_turn(&mut self) -> Option<String> {
        self.check(|used, max| used > max, "exceeded")
    }

    fn check(&mut self, over: impl Fn(f64, f64) -> bool, verb: &str) -> Option<String> {
        if let Some(t) = self.budget.tokens
            && over(self.tokens as f64, t.max as f64)
        {
            return Some(self.stop("tokens", verb));
        }
        if let Some(c) = self.budget.cost_usd
            && self.cost_known
            && over(self.cost_usd, c.max)
        {
            return Some(self.stop("cost", verb));
        }
        None
    }

    /// Runs `fut` within the time left; `Err(reason)` when the time budget
    /// runs out first (the future is dropped: a running command's process
    /// group is killed by its guard).
    pub async fn bounded<F: Future>(&mut self, fut: F) -> Result<F::Output, String> {
        match self.time_left() {
            None => Ok(fut.await),
            Some(left) => match tokio::time::timeout(left, fut).await {
                Ok(out) => Ok(out),
                Err(_) => Err(self.stop("time", "exceeded")),
            },
        }
    }

    /// Marks `what` as the limit that ended the stage and words the reason.
    fn stop(&mut self, what: &'static str, verb: &str) -> String {
        self.exceeded = Some(what);
        let (used, max, from_run) = match what {
            "tokens" => {
                let l = self
                    .budget
                    .tokens
                    .map_or((0, false), |l| (l.max, l.from_run));
                (format!("{}", self.tokens), format!("{} tokens", l.0), l.1)
            }
            "cost" => {
                let l = self
                    .budget
                    .cost_usd
                    .map_or((0.0, false), |l| (l.max, l.from_run));
                (
                    format!("${:.4}", self.cost_usd),
                    format!("${:.4}", l.0),
                    l.1,
                )
            }
            _ => {
                let l = self
                    .budget
                    .time
                    .map_or((Duration::ZERO, false), |l| (l.max, l.from_run));
                (
                    format!("{:.1} s", self.started.elapsed().as_secs_f64()),
                    format!("{:.1} s", l.0.as_secs_f64()),
                    l.1,
                )
            }
        };
        let noun = match what {
            "tokens" => "token",
            other => other,
        };
        let scope = if from_run {
            " (what was left of the run's budget)"
        } else {
            ""
        };
        format!("{noun} budget {verb}: {used} of {max}{scope}")
    }

    /// What was used so far.
    pub fn used(&self) -> BudgetUse {
        BudgetUse {
            turns: self.turns,
            tokens: self.tokens,
            time_secs: (self.started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
            cost_usd: self.cost_known.then_some(self.cost_usd),
        }
    }

    /// The limits and their use, for `agent_end` and the stage record.
    pub fn report(&self) -> BudgetReport {
        let b = &self.budget;
        let mut from_run = Vec::new();
        for (name, yes) in [
            ("tokens", b.tokens.is_some_and(|l| l.from_run)),
            ("time", b.time.is_some_and(|l| l.from_run)),
            ("cost", b.cost_usd.is_some_and(|l| l.from_run)),
        ] {
            if yes {
                from_run.push(name.to_owned());
            }
        }
        BudgetReport {
            limits: ReportLimits {
                turns: self.max_turns,
                tokens: b.tokens.map(|l| l.max),
                time_secs: b.time.map(|l| l.max.as_secs_f64()),
                cost_usd: b.cost_usd.map(|l| l.max),
            },
            from_run,
            used: self.used(),
            exceeded: self.exceeded.map(str::to_owned),
            notes: self.notes.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(tokens: Option<u64>, secs: Option<f64>, cost: Option<f64>) -> StageBudget {
        RunLedger::new(Budget::default()).stage_budget(
            &Budget {
                tokens,
                time_secs: secs,
                cost_usd: cost,
            },
            Arc::new(PerMillionTokens {
                prompt_usd: 1.0,
                completion_usd: 4.0,
            }),
        )
    }

    #[test]
    fn tokens_stop_after_the_turn_that_passes_the_limit() {
        let mut t = Tracker::new(stage(Some(3500), None, None), 30);
        for _ in 0..3 {
            assert_eq!(t.before_turn(), None);
            t.record_turn(900, 100);
            assert_eq!(t.after_turn(), None);
        }
        assert_eq!(t.before_turn(), None);
        t.record_turn(900, 100);
        assert_eq!(
            t.after_turn().as_deref(),
            Some("token budget exceeded: 4000 of 3500 tokens")
        );
        let r = t.report();
        assert_eq!(r.exceeded.as_deref(), Some("tokens"));
        assert_eq!(r.used.turns, 4);
        assert_eq!(r.used.tokens, 4000);
        assert_eq!(r.limits.tokens, Some(3500));
        assert!(r.from_run.is_empty());
    }

    #[test]
    fn a_budget_used_up_exactly_allows_no_further_turn() {
        let mut t = Tracker::new(stage(Some(2000), None, None), 30);
        t.record_turn(1500, 500);
        assert_eq!(t.after_turn(), None);
        assert_eq!(
            t.before_turn().as_deref(),
            Some("token budget used up: 2000 of 2000 tokens")
        );
    }

    #[test]
    fn cost_is_priced_per_call_and_enforced() {
        // 1 $/M prompt, 4 $/M completion: 1000 + 4 * 250 = 2000 µ$ per call.
        let mut t = Tracker::new(stage(None, None, Some(0.005)), 30);
        assert!(t.notes().is_empty());
        for _ in 0..2 {
            t.record_turn(1000, 250);
            assert_eq!(t.after_turn(), None);
        }
        t.record_turn(1000, 250);
        assert_eq!(
            t.after_turn().as_deref(),
            Some("cost budget exceeded: $0.0060 of $0.0050")
        );
        let used = t.used();
        assert!((used.cost_usd.unwrap() - 0.006).abs() < 1e-12);
    }

    #[test]
    fn an_unknown_price_cannot_enforce_a_cost_budget_and_says_so() {
        let mut b = stage(None, None, Some(0.01));
        b.pricing = Arc::new(UnknownPrice);
        let mut t = Tracker::new(b, 30);
        assert_eq!(
            t.notes(),
            ["cost budget of $0.0100 not enforced: the model's price is unknown"]
        );
        t.record_turn(1_000_000, 1_000_000);
        assert_eq!(t.after_turn(), None);
        assert_eq!(t.used().cost_usd, None);
        assert_eq!(t.report().notes.len(), 1);
    }

    #[test]
    fn stage_gets_the_smaller_of_its_own_and_the_runs_remainder() {
        let mut run = RunLedger::new(Budget {
            tokens: Some(10_000),
            time_secs: None,
            cost_usd: Some(1.0),
        });
        let own = Budget {
            tokens: Some(4000),
            time_secs: Some(60.0),
            cost_usd: None,
        };
        let b = run.stage_budget(&own, Arc::new(UnknownPrice));
        assert_eq!(
            b.tokens,
            Some(Limit {
                max: 4000,
                from_run: false
            })
        );
        assert_eq!(
            b.time.map(|l| (l.max, l.from_run)),
            Some((Duration::from_secs(60), false))
        );
        assert_eq!(
            b.cost_usd,
            Some(Limit {
                max: 1.0,
                from_run: true
            })
        );
        run.charge(&BudgetUse {
            turns: 3,
            tokens: 7000,
            time_secs: 1.0,
            cost_usd: Some(0.25),
        });
        let b = run.stage_budget(&own, Arc::new(UnknownPrice));
        assert_eq!(
            b.tokens,
            Some(Limit {
                max: 3000,
                from_run: true
            })
        );
        assert_eq!(b.cost_usd.map(|l| l.max), Some(0.75));
        let mut t = Tracker::new(b, 5);
        t.record_turn(3000, 1);
        assert_eq!(
            t.after_turn().as_deref(),
            Some("token budget exceeded: 3001 of 3000 tokens (what was left of the run's budget)")
        );
        assert_eq!(t.report().from_run, ["tokens", "cost"]);
        // A spent run leaves nothing: no turn may start.
        run.charge(&BudgetUse {
            tokens: 5000,
            ..BudgetUse::default()
        });
        let mut t = Tracker::new(
            run.stage_budget(&Budget::default(), Arc::new(UnknownPrice)),
            5,
        );
        assert_eq!(
            t.before_turn().as_deref(),
            Some("token budget used up: 0 of 0 tokens (what was left of the run's budget)")
        );
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

    #[test]
    fn unlimited_is_unlimited() {
        assert!(Budget::default().is_unlimited());
        let mut t = Tracker::new(StageBudget::default(), 3);
        t.record_turn(u32::MAX as u64, 1);
        assert_eq!(t.after_turn(), None);
        assert_eq!(t.before_turn(), None);
        assert_eq!(t.time_left(), None);
    }
}
