//! Flag groups shared by several subcommands, each flattened into their
//! `Args` (`#[command(flatten)]`), so a subcommand never borrows another's
//! flags: model selection and sampling, budgets and compaction, parallelism.

use super::error::CliError;
use crate::agent::RunLimits;
use crate::agent::compact::{CompactConfig, DEFAULT_COMPACT_AT, DEFAULT_CONTEXT_WINDOW};
use crate::budget::Budget;
use crate::config::Overrides;
use crate::llm::settings::{Sampling, ToolChoice};
use std::path::PathBuf;

/// The `--base` value that snapshots the user's working tree.
pub(super) const WORKTREE_BASE: &str = "worktree";

/// Model flags shared by the commands that run agents.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ModelArgs {
    /// Wire format: `openai-chat` (default), `anthropic` or `openai-responses` (default: the profile's `provider`)
    #[arg(long, value_name = "NAME")]
    pub provider: Option<String>,
    /// OpenAI-compatible base URL, e.g. https://api.openai.com/v1 [env: ORCH_BASE_URL]
    #[arg(long)]
    pub base_url: Option<String>,
    /// Model name; `replay:FILE` selects the offline replay model [env: ORCH_MODEL]
    #[arg(long)]
    pub model: Option<String>,
    /// Replay recorded responses from FILE instead of calling a model (offline)
    #[arg(long, value_name = "FILE", conflicts_with_all = ["base_url"])]
    pub replay: Option<PathBuf>,
    /// Provider profile from orch.toml (.orch/orch.toml, then the user config dir) [env: ORCH_PROFILE]
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Send plain requests instead of streaming (for servers that cannot stream)
    #[arg(long)]
    pub no_stream: bool,
    /// Sampling and tool-choice settings sent with every request.
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Sampling flags, part of [`ModelArgs`]. Each wins over the profile's key of
/// the same meaning; `orch resume` reuses the run's recorded values for the
/// ones not given. There are no environment variables for them.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct SamplingArgs {
    /// Sampling temperature, 0 to 2 (default: the profile's `temperature`, else none is sent)
    #[arg(long, value_name = "T")]
    pub temperature: Option<f64>,
    /// Sampling seed (default: the profile's `seed`, else none is sent)
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Cap on the tokens of one model reply (`max_tokens`); 0 sends no cap (default: the profile's `max_tokens`, else 4096)
    #[arg(long, value_name = "N")]
    pub max_output_tokens: Option<u64>,
    /// `auto` or `required` (the model must call a tool every turn, so `finish` ends it); default: the profile's `tool_choice`, else `auto`
    #[arg(long, value_name = "CHOICE")]
    pub tool_choice: Option<ToolChoice>,
}

impl From<SamplingArgs> for Sampling {
    fn from(a: SamplingArgs) -> Sampling {
        Sampling {
            temperature: a.temperature,
            seed: a.seed,
            max_tokens: a.max_output_tokens,
            tool_choice: a.tool_choice,
        }
    }
}

impl ModelArgs {
    /// The flags as config overrides.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            provider: self.provider.clone(),
            base_url: self.base_url.clone(),
            model: self.model.clone(),
            profile: self.profile.clone(),
            no_stream: self.no_stream,
            sampling: self.sampling.into(),
        }
    }

    /// Whether a flag names the model (`--base-url`, `--model`, `--replay`):
    /// then `resume` uses the flags, not the model the run recorded.
    pub fn names_a_model(&self) -> bool {
        self.base_url.is_some() || self.model.is_some() || self.replay.is_some()
    }

    /// The replay file, from `--replay FILE` or `--model replay:FILE`.
    pub fn replay_file(&self) -> Option<PathBuf> {
        self.replay.clone().or_else(|| {
            self.model
                .as_deref()
                .and_then(|m| m.strip_prefix("replay:"))
                .map(PathBuf::from)
        })
    }
}

/// Project-instruction and hook flags shared by `run` and `agent`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct InstructionArgs {
    /// Do not put the repository's AGENTS.md / CLAUDE.md files into the agents' system prompts
    #[arg(long)]
    pub no_project_instructions: bool,
    /// Run the repository's hooks (.claude/settings.json, .orch/orch.toml [hooks], its agent files' `hooks:`); without it only your own hooks run (docs/hooks.md)
    #[arg(long)]
    pub trust_hooks: bool,
}

/// How a call a role's `ask` rule names is answered without `--yes`
/// (`run`, `resume`, `agent`; docs/cli.md "Answering asks and guiding a run").
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AskArgs {
    /// Where an `ask` is answered without --yes: `auto` asks on a terminal (or takes `orch answer`, whichever comes first) and denies at once without one; `control` waits for `orch answer` / `orch ui` even without a terminal
    #[arg(long, value_enum, value_name = "HOW", default_value_t)]
    pub(crate) ask_via: crate::runlog::control::AskVia,
    /// How long a call waits for its answer before it is denied, in seconds [default: until the stage's time budget runs out]
    #[arg(long, value_name = "SECS", value_parser = parse_ask_timeout)]
    pub ask_timeout: Option<f64>,
}

impl AskArgs {
    /// `--ask-timeout` as a duration.
    pub fn ask_timeout_duration(&self) -> Option<std::time::Duration> {
        self.ask_timeout.map(std::time::Duration::from_secs_f64)
    }
}

/// `--ask-timeout`: a positive number of seconds.
fn parse_ask_timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 && n < 1e9 => Ok(n),
        _ => Err(format!("expected a positive number of seconds, got `{s}`")),
    }
}

/// How many stages may run at once (`run`, `resume`).
#[derive(Debug, Clone, clap::Args)]
pub struct ParallelArgs {
    /// How many stages may run at once
    #[arg(long, default_value_t = crate::runner::DEFAULT_MAX_PARALLEL, value_parser = parse_parallel)]
    pub max_parallel: usize,
    /// Keep no warm lanes for later runs: this run's lanes are removed when it ends, and so are the repository's pooled ones (`[lanes] pool = 0` in orch.toml does the same)
    #[arg(long)]
    pub no_lane_pool: bool,
}

/// `--max-parallel`: 1 to 64.
fn parse_parallel(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=64).contains(&n) => Ok(n),
        _ => Err(format!("expected a whole number from 1 to 64, got `{s}`")),
    }
}

/// Budget and compaction flags shared by `run`, `resume` and `agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct LimitArgs {
    /// Token budget of the whole run: prompt + completion tokens of all stages together
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
    /// Wall-time budget of the whole run, in seconds
    #[arg(long, value_name = "SECS")]
    pub max_time: Option<f64>,
    /// Cost budget of the whole run, in US dollars (enforced only when the model's price is known)
    #[arg(long, value_name = "USD")]
    pub max_cost: Option<f64>,
    /// Compact the conversation when a request passes this share of the context window [default: 0.7]
    #[arg(long, value_name = "SHARE")]
    pub compact_at: Option<f64>,
    /// The model's context window, in tokens (default: the profile's `context_window`, else 128000)
    #[arg(long, value_name = "N")]
    pub context_window: Option<u64>,
}

impl LimitArgs {
    /// These flags, each one not given taken from `recorded` (the run's
    /// record): a resumed run keeps the limits it was started with.
    pub fn or_recorded(&self, recorded: Option<&crate::runlog::RunSettings>) -> LimitArgs {
        let Some(r) = recorded else {
            return self.clone();
        };
        LimitArgs {
            max_tokens: self.max_tokens.or(r.max_tokens),
            max_time: self.max_time.or(r.max_time_secs),
            max_cost: self.max_cost.or(r.max_cost_usd),
            compact_at: self.compact_at.or(r.compact_at),
            context_window: self.context_window.or(r.context_window),
        }
    }

    /// The flags as the run records them (with the model's `profile` and
    /// `no_stream`).
    pub fn record(&self, profile: Option<String>, no_stream: bool) -> crate::runlog::RunSettings {
        crate::runlog::RunSettings {
            max_tokens: self.max_tokens,
            max_time_secs: self.max_time,
            max_cost_usd: self.max_cost,
            compact_at: self.compact_at,
            context_window: self.context_window,
            profile,
            no_stream,
            provider: None,
        }
    }

    /// Checks the flags and turns them into the run's limits.
    /// `model_window` is the model's configured context window, used when
    /// `--context-window` is not given.
    pub fn to_limits(&self, model_window: Option<u64>) -> Result<RunLimits, CliError> {
        let context_window = self
            .context_window
            .or(model_window)
            .unwrap_or(DEFAULT_CONTEXT_WINDOW);
        let positive = |flag: &str, v: Option<f64>| match v {
            Some(x) if !(x.is_finite() && x > 0.0) => Err(CliError::Invalid(format!(
                "failed to use {flag} {x}: expected a number greater than 0"
            ))),
            _ => Ok(v),
        };
        if self.max_tokens == Some(0) {
            return Err(CliError::Invalid(
                "failed to use --max-tokens 0: expected at least 1".to_owned(),
            ));
        }
        let compact_at = self.compact_at.unwrap_or(DEFAULT_COMPACT_AT);
        if !(compact_at > 0.0 && compact_at <= 1.0) {
            return Err(CliError::Invalid(format!(
                "failed to use --compact-at {compact_at}: expected a share of the context window, greater than 0 and at most 1"
            )));
        }
        if context_window < 1000 {
            return Err(CliError::Invalid(format!(
                "failed to use --context-window {}: expected at least 1000 tokens",
                context_window
            )));
        }
        Ok(RunLimits {
            budget: Budget {
                tokens: self.max_tokens,
                time_secs: positive("--max-time", self.max_time)?,
                cost_usd: positive("--max-cost", self.max_cost)?,
            },
            compaction: CompactConfig {
                context_window,
                compact_at,
                ..CompactConfig::default()
            },
        })
    }
}

/// `--events` of the commands that run agents (`run`, `resume`, `agent`,
/// `stage`); see `docs/events.md`.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct EventArgs {
    /// Print the run's events on stdout as they happen, one JSON object per line (`jsonl`); stdout then carries only events (docs/events.md)
    #[arg(long, value_name = "FORMAT")]
    pub events: Option<crate::events::EventFormat>,
}

impl EventArgs {
    /// The stream these flags ask for (a no-op one without `--events`).
    pub fn open(&self) -> crate::events::Events {
        crate::events::Events::new(self.events)
    }
}
