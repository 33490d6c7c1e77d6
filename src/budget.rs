//! Budgets: the one model of limits on tokens, wall time and cost, for a
//! run, its stages and their subagents alike. A leaf: it depends on `std`
//! and `serde` only, so the parser, the runner, the agent loop, the tools and
//! the subagent layer can all speak it without importing each other.
//!
//! - [`Budget`] is a limit as a user writes it (a stage's `budget:` key, the
//!   run's `--max-*` flags, a subagent's cap); `None` means no limit.
//! - [`RunLedger`] is the run's budget and what its finished stages used of
//!   it. Each stage gets, per dimension, the smaller of its own limit and
//!   what is left of the run's ([`RunLedger::stage_budget`]).
//! - [`StageBudget`] is one agent's account: its effective limits and what
//!   has been used of them so far. Clones share the use: the agent loop's
//!   [`Tracker`] charges every model call into it, the spawner charges every
//!   finished child, and a child's budget is carved out of what is *left*
//!   ([`StageBudget::carve`]) — the stage's own turns included.
//! - [`Tracker`] is the agent loop's view of the account: it counts turns and
//!   says when a limit is reached (`token budget exceeded: 4000 of 3500
//!   tokens`).
//!
//! Cost comes from what the server reported for a call, else from a
//! [`Pricing`] supplied by the caller (the model's price table). When
//! neither knows a call's cost, a cost limit cannot be enforced: the stage
//! says so once (a note in its budget report and action log) and runs on
//! without it.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Limits as a user writes them (a stage's `budget:` key, the run's flags, a
/// subagent's cap); `None` means no limit. Parsing guarantees the numbers are
/// finite and positive.
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

/// For people: `unlimited`, or the limits set, e.g. `200000 tokens, 600 s,
/// $2.50`.
impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(t) = self.tokens {
            parts.push(format!("{t} tokens"));
        }
        if let Some(s) = self.time_secs {
            parts.push(format!("{s} s"));
        }
        if let Some(c) = self.cost_usd {
            parts.push(format!("${c:.2}"));
        }
        if parts.is_empty() {
            f.write_str("unlimited")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// Prompt and completion tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCount {
    /// Tokens sent.
    pub prompt: u64,
    /// Tokens generated.
    pub completion: u64,
    /// Of `prompt`, the tokens the server read from its prompt cache (billed
    /// at the cache-read rate). Absent in records when 0, so records of
    /// servers that report no cache read as before.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read: u64,
    /// Of `prompt`, the tokens the server wrote to its prompt cache (billed
    /// at the cache-write rate); absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl TokenCount {
    /// A count without cache reads or writes.
    pub fn new(prompt: u64, completion: u64) -> Self {
        TokenCount {
            prompt,
            completion,
            ..TokenCount::default()
        }
    }

    /// Both together.
    pub fn total(&self) -> u64 {
        self.prompt + self.completion
    }

    /// Adds another count.
    pub fn add(&mut self, other: TokenCount) {
        self.prompt += other.prompt;
        self.completion += other.completion;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
    }

    /// The share of prompt tokens read from the server's cache, 0 to 1;
    /// `None` without prompt tokens.
    pub fn cache_hit_share(&self) -> Option<f64> {
        (self.prompt > 0).then(|| self.cache_read.min(self.prompt) as f64 / self.prompt as f64)
    }

    /// True when the server reported any cache read or write.
    pub fn has_cache(&self) -> bool {
        self.cache_read > 0 || self.cache_write > 0
    }

    /// The cache hit share for people: `62.5%`, or `-` without prompt tokens.
    pub fn cache_hit_label(&self) -> String {
        self.cache_hit_share()
            .map_or("-".to_owned(), |s| format!("{:.1}%", s * 100.0))
    }
}

/// What model calls cost (the model client's price table, or
/// [`UnknownPrice`]).
pub trait Pricing: Send + Sync + fmt::Debug {
    /// The cost in US dollars of one call, `None` when unknown. Cache reads
    /// and writes (parts of `tokens.prompt`) are priced at their own rates.
    fn cost(&self, tokens: TokenCount) -> Option<f64>;
}

/// A model whose price is unknown: cost limits cannot be enforced.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct UnknownPrice;

impl Pricing for UnknownPrice {
    fn cost(&self, _: TokenCount) -> Option<f64> {
        None
    }
}

/// A flat price in US dollars per million prompt and completion tokens (the
/// tests' price; the real table is `llm::price`).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PerMillionTokens {
    /// Dollars per million prompt tokens.
    pub prompt_usd: f64,
    /// Dollars per million completion tokens.
    pub completion_usd: f64,
}

#[cfg(test)]
impl Pricing for PerMillionTokens {
    fn cost(&self, tokens: TokenCount) -> Option<f64> {
        Some(
            (tokens.prompt as f64 * self.prompt_usd
                + tokens.completion as f64 * self.completion_usd)
                / 1e6,
        )
    }
}

/// One dimension of a budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dimension {
    /// Prompt plus completion tokens.
    Tokens,
    /// Wall time.
    Time,
    /// Cost in US dollars.
    Cost,
}

impl Dimension {
    /// The name in reports and records: `tokens`, `time`, `cost`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Dimension::Tokens => "tokens",
            Dimension::Time => "time",
            Dimension::Cost => "cost",
        }
    }

    /// The word before "budget" in a reason: `token`, `time`, `cost`.
    fn noun(self) -> &'static str {
        match self {
            Dimension::Tokens => "token",
            Dimension::Time => "time",
            Dimension::Cost => "cost",
        }
    }
}

/// One effective limit and whose budget it is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit<T> {
    /// The limit.
    pub max: T,
    /// Whose budget set it.
    pub source: Source<T>,
}

/// Whose budget an effective [`Limit`] is, so that a reason can say which
/// budget was spent by whom.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Source<T> {
    /// The agent's own (e.g. a subagent's cap).
    Own,
    /// The stage's own `budget:` key (smaller than what the run had left).
    Stage,
    /// What earlier stages left of the run's budget.
    Run {
        /// The run's whole budget (`--max-*`).
        total: T,
        /// What earlier stages had used of it when the stage started (for
        /// time: the run's wall time so far).
        earlier: T,
        /// How many stage runs (attempts included) had been charged to the
        /// run by then.
        stages: u32,
    },
}

impl<T> Limit<T> {
    /// A limit of the agent's own (not the run's remainder).
    pub fn own(max: T) -> Self {
        Limit {
            max,
            source: Source::Own,
        }
    }

    /// True when the run's remainder was the smaller limit.
    pub fn is_from_run(&self) -> bool {
        matches!(self.source, Source::Run { .. })
    }
}

/// Who stops an agent in the middle of a turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Enforcement {
    /// The agent loop itself: after a turn that passed a limit, and when the
    /// time runs out during a model or tool call (a stage).
    #[default]
    InLoop,
    /// Someone outside (a subagent's parent, which kills the child's process
    /// group at its limit); the loop only refuses to start a turn once a
    /// limit is used up.
    TurnStart,
}

/// What an account has used so far.
#[derive(Debug, Default)]
struct Used {
    tokens: TokenCount,
    cost_usd: f64,
    /// The price table knows the model's price.
    priced: bool,
    /// Calls charged so far.
    calls: u64,
    /// Some call's cost was unknown (neither reported nor priced).
    unknown: bool,
}

/// One agent's account: its effective limits and what has been used of them.
/// Clones share the use (see the module docs); the clock starts when the
/// account is made.
#[derive(Debug, Clone)]
pub struct StageBudget {
    pub tokens: Option<Limit<u64>>,
    /// Wall time.
    pub time: Option<Limit<Duration>>,
    /// Cost in US dollars.
    pub cost_usd: Option<Limit<f64>>,
    /// What model calls cost.
    pub pricing: Arc<dyn Pricing>,
    /// Who stops the agent mid-turn.
    pub enforcement: Enforcement,
    started: Instant,
    used: Arc<Mutex<Used>>,
}

impl Default for StageBudget {
    fn default() -> Self {
        StageBudget::with_limits(None, None, None, Arc::new(UnknownPrice))
    }
}

impl StageBudget {
    /// An account with these limits and nothing used; its clock starts now.
    pub fn with_limits(
        tokens: Option<Limit<u64>>,
        time: Option<Limit<Duration>>,
        cost_usd: Option<Limit<f64>>,
        pricing: Arc<dyn Pricing>,
    ) -> Self {
        let priced = pricing.cost(TokenCount::new(1, 1)).is_some();
        StageBudget {
            tokens,
            time,
            cost_usd,
            pricing,
            enforcement: Enforcement::InLoop,
            started: Instant::now(),
            used: Arc::new(Mutex::new(Used {
                priced,
                ..Used::default()
            })),
        }
    }

    /// An account whose limits are all the agent's own.
    pub fn own(limits: &Budget, pricing: Arc<dyn Pricing>) -> Self {
        StageBudget::with_limits(
            limits.tokens.map(Limit::own),
            limits
                .time_secs
                .map(|s| Limit::own(Duration::from_secs_f64(s))),
            limits.cost_usd.map(Limit::own),
            pricing,
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Used> {
        // Plain counters: still consistent after a panic elsewhere.
        self.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Charges one model call (a turn, a summary, or a finished child's
    /// calls) to the account, priced by its [`Pricing`].
    pub fn charge(&self, tokens: TokenCount) {
        self.charge_call(tokens, None);
    }

    /// Charges one model call at the cost the server `reported` for it, else
    /// as priced by the account's [`Pricing`].
    pub fn charge_call(&self, tokens: TokenCount, reported: Option<f64>) {
        let cost = reported.or_else(|| self.pricing.cost(tokens));
        let mut u = self.lock();
        u.tokens.add(tokens);
        u.calls += 1;
        match cost {
            Some(c) => u.cost_usd += c,
            None => u.unknown = true,
        }
    }

    /// Tokens used so far.
    pub fn used_tokens(&self) -> TokenCount {
        self.lock().tokens
    }

    /// Cost so far; `None` when some call's cost was unknown, or before the
    /// first call when the model's price is unknown (the server may still
    /// report it).
    pub fn used_cost(&self) -> Option<f64> {
        let u = self.lock();
        let known = !u.unknown && (u.priced || u.calls > 0);
        known.then_some(u.cost_usd)
    }

    /// Wall time since the account was made.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Tokens left, `None` without a token limit.
    pub fn tokens_left(&self) -> Option<u64> {
        self.tokens
            .map(|l| l.max.saturating_sub(self.used_tokens().total()))
    }

    /// Time left, `None` without a time limit.
    pub fn time_left(&self) -> Option<Duration> {
        self.time.map(|t| t.max.saturating_sub(self.elapsed()))
    }

    /// A child's budget: per dimension the smaller of the child's `cap` and
    /// what this account has left now (its own turns and its finished
    /// children included). Cost is not carved: a child's calls are priced
    /// into this account when it finishes.
    pub fn carve(&self, cap: &Budget) -> Budget {
        fn min<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(if b < a { b } else { a }),
                (a, None) => a,
                (None, b) => b,
            }
        }
        Budget {
            tokens: min(cap.tokens, self.tokens_left()),
            time_secs: min(cap.time_secs, self.time_left().map(|d| d.as_secs_f64())),
            cost_usd: cap.cost_usd,
        }
    }
}

/// The smaller of a stage's own limit and the run's remainder; `run` is the
/// run's (remainder, whole budget, used by earlier stages).
fn tighter<T: PartialOrd + Copy>(
    stage: Option<T>,
    run: Option<(T, T, T)>,
    stages: u32,
) -> Option<Limit<T>> {
    let from_run = |(left, total, earlier)| Limit {
        max: left,
        source: Source::Run {
            total,
            earlier,
            stages,
        },
    };
    let stage_own = |max| Limit {
        max,
        source: Source::Stage,
    };
    match (stage, run) {
        (None, None) => None,
        (Some(s), None) => Some(stage_own(s)),
        (None, Some(r)) => Some(from_run(r)),
        (Some(s), Some(r)) if r.0 < s => Some(from_run(r)),
        (Some(s), Some(_)) => Some(stage_own(s)),
    }
}

/// A run's budget and what its stages used of it. Owned by the runner.
#[derive(Debug)]
pub(crate) struct RunLedger {
    limits: Budget,
    started: Instant,
    tokens: u64,
    cost_usd: f64,
    /// Stage runs charged so far.
    stages: u32,
}

impl RunLedger {
    /// Starts the run's clock.
    pub(crate) fn new(limits: Budget) -> Self {
        RunLedger {
            limits,
            started: Instant::now(),
            tokens: 0,
            cost_usd: 0.0,
            stages: 0,
        }
    }

    /// The account of a stage whose own budget is `stage`: per dimension the
    /// smaller of that and what is left of the run's budget.
    pub(crate) fn stage_budget(&self, stage: &Budget, pricing: Arc<dyn Pricing>) -> StageBudget {
        let left_tokens = self
            .limits
            .tokens
            .map(|t| (t.saturating_sub(self.tokens), t, self.tokens));
        let elapsed = self.started.elapsed();
        let left_time = self.limits.time_secs.map(|t| {
            let t = Duration::from_secs_f64(t);
            (t.saturating_sub(elapsed), t, elapsed)
        });
        let left_cost = self
            .limits
            .cost_usd
            .map(|c| ((c - self.cost_usd).max(0.0), c, self.cost_usd));
        StageBudget::with_limits(
            tighter(stage.tokens, left_tokens, self.stages),
            tighter(
                stage.time_secs.map(Duration::from_secs_f64),
                left_time,
                self.stages,
            ),
            tighter(stage.cost_usd, left_cost, self.stages),
            pricing,
        )
    }

    /// Charges what a stage used to the run.
    pub(crate) fn charge(&mut self, used: &BudgetUse) {
        self.tokens += used.tokens;
        self.cost_usd += used.cost_usd.unwrap_or(0.0);
        self.stages += 1;
    }

    /// Tokens orch itself spent for the run outside any stage's agent (the
    /// memory distiller's call): they count against the run's budget.
    pub(crate) fn charge_tokens(&mut self, tokens: u64) {
        self.tokens += tokens;
    }
}

/// What a stage used.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetUse {
    /// Model turns (summary calls of the compaction are not turns).
    pub turns: u32,
    /// Prompt plus completion tokens of every model call, summaries and
    /// subagents included.
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
    pub tokens: Option<u64>,
    /// Wall time in seconds.
    pub time_secs: Option<f64>,
    /// Cost in US dollars.
    pub cost_usd: Option<f64>,
}

/// The agent loop's view of its account: counts turns, charges model calls
/// and says when a limit is reached.
#[derive(Debug)]
pub(crate) struct Tracker {
    budget: StageBudget,
    max_turns: u32,
    turns: u32,
    exceeded: Option<Dimension>,
    notes: Vec<String>,
}

impl Tracker {
    /// A tracker over `budget` (the account's clock is already running).
    pub(crate) fn new(budget: StageBudget, max_turns: u32) -> Self {
        let mut notes = Vec::new();
        if let Some(limit) = budget.cost_usd
            && budget.pricing.cost(TokenCount::new(1, 1)).is_none()
        {
            notes.push(format!(
                "cost budget of ${:.4} not enforced unless the server reports each call's cost: the model's price is unknown",
                limit.max
            ));
        }
        Tracker {
            budget,
            max_turns,
            turns: 0,
            exceeded: None,
            notes,
        }
    }

    /// Notes for the user (logged once, at the start of the agent).
    pub(crate) fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Time left to bound a model or tool call with; `None` without a time
    /// limit, or when someone outside enforces it ([`Enforcement::TurnStart`]).
    pub(crate) fn time_left(&self) -> Option<Duration> {
        match self.budget.enforcement {
            Enforcement::InLoop => self.budget.time_left(),
            Enforcement::TurnStart => None,
        }
    }

    /// Counts one model turn and its usage (`cost`: what the server
    /// reported for it, if it did).
    pub(crate) fn record_turn(&mut self, tokens: TokenCount, cost: Option<f64>) {
        self.turns += 1;
        self.record_usage(tokens, cost);
    }

    /// Counts the usage of a model call that is not a turn (a summary).
    pub(crate) fn record_usage(&mut self, tokens: TokenCount, cost: Option<f64>) {
        self.budget.charge_call(tokens, cost);
    }

    /// Before a model turn: why no turn may start (a limit used up), if so.
    pub(crate) fn before_turn(&mut self) -> Option<String> {
        if let Some(t) = self.budget.time
            && self.budget.elapsed() >= t.max
        {
            return Some(self.stop(Dimension::Time, "used up"));
        }
        self.check(|used, max| used >= max, "used up")
    }

    /// After a model turn: why the stage must stop (a limit passed), if so.
    pub(crate) fn after_turn(&mut self) -> Option<String> {
        match self.budget.enforcement {
            Enforcement::InLoop => self.check(|used, max| used > max, "exceeded"),
            Enforcement::TurnStart => None,
        }
    }

    fn check(&mut self, over: impl Fn(f64, f64) -> bool, verb: &str) -> Option<String> {
        let used = self.budget.used_tokens().total();
        if let Some(t) = self.budget.tokens
            && over(used as f64, t.max as f64)
        {
            return Some(self.stop(Dimension::Tokens, verb));
        }
        if let Some(c) = self.budget.cost_usd
            && let Some(cost) = self.budget.used_cost()
            && over(cost, c.max)
        {
            return Some(self.stop(Dimension::Cost, verb));
        }
        None
    }

    /// The time limit ran out during a call: marks it as what ended the
    /// stage and words the reason.
    pub(crate) fn time_exceeded(&mut self) -> String {
        self.stop(Dimension::Time, "exceeded")
    }

    /// Marks `what` as the limit that ended the stage and words the reason:
    /// whose budget it was (the stage's own, what earlier stages left of the
    /// run's, or an agent's own) and, when earlier stages had used it all,
    /// that they did (never `0 of 0 tokens`).
    fn stop(&mut self, what: Dimension, verb: &str) -> String {
        self.exceeded = Some(what);
        let b = &self.budget;
        match what {
            Dimension::Tokens => {
                let l = b.tokens.unwrap_or(Limit::own(0));
                let source = match l.source {
                    Source::Run {
                        total,
                        earlier,
                        stages,
                    } => Whose::Run {
                        total: total.to_string(),
                        phrase: format!("{total}-token budget"),
                        earlier: earlier.to_string(),
                        first: stages == 0,
                        all_left: l.max == total,
                        none_left: l.max == 0,
                    },
                    Source::Own => Whose::Own,
                    Source::Stage => Whose::Stage,
                };
                word(
                    what,
                    verb,
                    b.used_tokens().total().to_string(),
                    l.max.to_string(),
                    " tokens",
                    source,
                )
            }
            Dimension::Cost => {
                let l = b.cost_usd.unwrap_or(Limit::own(0.0));
                let usd = |c: f64| format!("${c:.4}");
                let source = match l.source {
                    Source::Run {
                        total,
                        earlier,
                        stages,
                    } => Whose::Run {
                        total: usd(total),
                        phrase: format!("{} cost budget", usd(total)),
                        earlier: usd(earlier),
                        first: stages == 0,
                        all_left: total - l.max < 0.00005,
                        none_left: l.max < 0.00005,
                    },
                    Source::Own => Whose::Own,
                    Source::Stage => Whose::Stage,
                };
                word(
                    what,
                    verb,
                    usd(b.used_cost().unwrap_or(0.0)),
                    usd(l.max),
                    "",
                    source,
                )
            }
            Dimension::Time => {
                let l = b.time.unwrap_or(Limit::own(Duration::ZERO));
                let secs = |d: Duration| format!("{:.1}", d.as_secs_f64());
                let source = match l.source {
                    Source::Run {
                        total,
                        earlier,
                        stages,
                    } => Whose::Run {
                        total: format!("{} s", total.as_secs_f64()),
                        phrase: format!("{} s time budget", total.as_secs_f64()),
                        earlier: format!("{} s", secs(earlier)),
                        first: stages == 0,
                        all_left: total.saturating_sub(l.max) < Duration::from_millis(50),
                        none_left: l.max < Duration::from_millis(50),
                    },
                    Source::Own => Whose::Own,
                    Source::Stage => Whose::Stage,
                };
                word(
                    what,
                    verb,
                    format!("{} s", secs(b.elapsed())),
                    secs(l.max),
                    " s",
                    source,
                )
            }
        }
    }

    /// The limit that ended the stage, if any.
    #[cfg(test)]
    pub(crate) fn exceeded(&self) -> Option<Dimension> {
        self.exceeded
    }

    /// What was used so far.
    pub(crate) fn used(&self) -> BudgetUse {
        BudgetUse {
            turns: self.turns,
            tokens: self.budget.used_tokens().total(),
            time_secs: (self.budget.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
            cost_usd: self.budget.used_cost(),
        }
    }

    /// The limits and their use, for `agent_end` and the stage record.
    pub(crate) fn report(&self) -> BudgetReport {
        let b = &self.budget;
        let mut from_run = Vec::new();
        for (d, yes) in [
            (Dimension::Tokens, b.tokens.is_some_and(|l| l.is_from_run())),
            (Dimension::Time, b.time.is_some_and(|l| l.is_from_run())),
            (Dimension::Cost, b.cost_usd.is_some_and(|l| l.is_from_run())),
        ] {
            if yes {
                from_run.push(d.as_str().to_owned());
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
            exceeded: self.exceeded.map(|d| d.as_str().to_owned()),
            notes: self.notes.clone(),
        }
    }
}

/// Whose budget a reason is about, in words.
enum Whose {
    Own,
    Stage,
    /// What earlier stages left of the run's budget.
    Run {
        /// The run's budget (`1000`, `3 s`, `$0.0100`).
        total: String,
        /// Its name (`1000-token budget`).
        phrase: String,
        /// What earlier stages used.
        earlier: String,
        /// No stage ran before this one.
        first: bool,
        /// The stage got the whole budget (at the shown precision).
        all_left: bool,
        /// Earlier stages left nothing (at the shown precision).
        none_left: bool,
    },
}

/// A reason in words: `used` of `max` (`unit` after the number), and whose
/// budget it was.
fn word(
    what: Dimension,
    verb: &str,
    used: String,
    max: String,
    unit: &str,
    whose: Whose,
) -> String {
    let noun = what.noun();
    match whose {
        Whose::Own => format!("{noun} budget {verb}: {used} of {max}{unit}"),
        Whose::Stage => format!("{noun} budget {verb}: {used} of the stage's {max}{unit}"),
        Whose::Run {
            total,
            phrase,
            earlier,
            first: false,
            none_left: true,
            ..
        } => {
            let by = if what == Dimension::Time {
                "used"
            } else {
                "used up"
            };
            let unit = if what == Dimension::Tokens {
                " tokens"
            } else {
                ""
            };
            format!("the run's {phrase} was {by} by earlier stages ({earlier} of {total}{unit})")
        }
        Whose::Run {
            first: true,
            all_left: true,
            ..
        } => format!("{noun} budget {verb}: {used} of the run's {max}{unit}"),
        Whose::Run {
            total, first: true, ..
        } => format!("{noun} budget {verb}: {used} of the {max}{unit} left of the run's {total}"),
        Whose::Run { total, .. } => format!(
            "{noun} budget {verb}: {used} of the {max}{unit} earlier stages left of the run's {total}"
        ),
    }
}

#[cfg(test)]
mod tests;
