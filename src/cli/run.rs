//! `orch run <pipeline>`: an issue in, a PR branch and PR text out.

use super::model::{ModelArgs, choose_for_repo};
use super::{CliError, exit};
use crate::agent::RunLimits;
use crate::agent::compact::{CompactConfig, DEFAULT_COMPACT_AT, DEFAULT_CONTEXT_WINDOW};
use crate::budget::Budget;
use crate::catalog::Catalog;
use crate::pipeline::Pipeline;
use crate::role::Role;
use crate::runlog::{RunStatus, StageStatus};
use crate::runner::{RunOptions, RunSummary, run_pipeline};
use crate::ui::Ui;
use std::collections::HashMap;
use std::path::PathBuf;

/// Arguments of `orch run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Pipeline name (looked up in .orch/pipelines, the user config dir, then built-ins) or a path to a .yaml file
    pub pipeline: String,
    /// The repository to work on (never modified: orch works in a worktree of it)
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// The issue text, a Markdown file (`-` reads stdin)
    #[arg(long, value_name = "FILE")]
    pub issue: PathBuf,
    /// The revision the run starts from
    #[arg(long, default_value = "HEAD")]
    pub base: String,
    /// Model settings.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Budget and compaction settings.
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Allow commands that a role's `ask` rules would ask about (non-interactive runs deny them otherwise)
    #[arg(long)]
    pub yes: bool,
    /// How many stages may run at once
    #[arg(long, default_value_t = crate::runner::DEFAULT_MAX_PARALLEL, value_parser = parse_parallel)]
    pub max_parallel: usize,
    /// Print one JSON object on stdout instead of the human summary
    #[arg(long)]
    pub json: bool,
}

/// `--max-parallel`: 1 to 64.
pub(super) fn parse_parallel(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=64).contains(&n) => Ok(n),
        _ => Err(format!("expected a whole number from 1 to 64, got `{s}`")),
    }
}

/// Budget and compaction flags shared by `run` and `agent`.
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
    /// Compact the conversation when a request passes this share of the context window
    #[arg(long, value_name = "SHARE", default_value_t = DEFAULT_COMPACT_AT)]
    pub compact_at: f64,
    /// The model's context window, in tokens (default: the profile's `context_window`, else 128000)
    #[arg(long, value_name = "N")]
    pub context_window: Option<u64>,
}

impl LimitArgs {
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
        if !(self.compact_at > 0.0 && self.compact_at <= 1.0) {
            return Err(CliError::Invalid(format!(
                "failed to use --compact-at {}: expected a share of the context window, greater than 0 and at most 1",
                self.compact_at
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
                compact_at: self.compact_at,
                ..CompactConfig::default()
            },
        })
    }
}

/// Reads the issue file (or stdin for `-`).
fn read_issue(path: &PathBuf) -> Result<String, CliError> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
            .map_err(|e| CliError::Invalid(format!("failed to read the issue from stdin: {e}")))?
    } else {
        std::fs::read_to_string(path).map_err(|e| {
            CliError::Invalid(format!(
                "failed to read the issue file {}: {e}",
                path.display()
            ))
        })?
    };
    if text.trim().is_empty() {
        return Err(CliError::Invalid(format!(
            "failed to use the issue {}: it is empty",
            path.display()
        )));
    }
    Ok(text)
}

/// The roles a pipeline's stages name.
pub(super) fn roles_for(
    catalog: &Catalog,
    pipeline: &Pipeline,
) -> Result<HashMap<String, Role>, CliError> {
    let mut roles = HashMap::new();
    for s in &pipeline.stages {
        if !roles.contains_key(&s.role) {
            roles.insert(s.role.clone(), catalog.role(&s.role)?.clone());
        }
    }
    Ok(roles)
}

/// `orch run`.
pub async fn cmd_run(args: RunArgs) -> Result<i32, CliError> {
    let catalog = Catalog::load(Some(&args.repo))?;
    let pipeline = catalog.pipeline(&args.pipeline)?;
    let roles = roles_for(&catalog, &pipeline)?;
    let issue = read_issue(&args.issue)?;
    let chosen = choose_for_repo(&args.model, Some(&args.repo))?;
    let ui = Ui::new(false);
    let summary = run_pipeline(
        RunOptions {
            repo: args.repo.clone(),
            pipeline,
            roles,
            issue,
            base: args.base.clone(),
            session: {
                let limits = args.limits.to_limits(chosen.model.context_window())?;
                chosen.session(
                    args.yes,
                    crate::policy::detect_interactive(),
                    args.max_parallel,
                    limits,
                )
            },
        },
        &ui,
    )
    .await?;
    print_summary(&summary, args.json);
    Ok(exit_code_of(&summary))
}

/// The exit code of a finished run.
pub(super) fn exit_code_of(summary: &RunSummary) -> i32 {
    match summary.state.status {
        RunStatus::Succeeded => exit::OK,
        RunStatus::Interrupted => exit::INTERRUPTED,
        _ if summary.internal_failed => exit::INTERNAL,
        _ if summary.model_failed => exit::MODEL,
        _ => exit::STAGE_FAILED,
    }
}

/// The run result as JSON (the `--json` contract).
pub(super) fn summary_json(summary: &RunSummary) -> serde_json::Value {
    let s = &summary.state;
    serde_json::json!({
        "run_id": s.run_id,
        "status": s.status.as_str(),
        "pipeline": s.pipeline,
        "model": s.model_label,
        "base_commit": s.base_commit,
        "stages": s.stages.iter().map(|st| serde_json::json!({
            "id": st.id,
            "role": st.role,
            "status": st.status.as_str(),
            "branch": st.branch,
            "commit": st.commit,
            "verdict": st.verdict,
            "turns": st.turns,
            "tokens": st.tokens.total(),
            "reason": st.reason,
        })).collect::<Vec<_>>(),
        "final_branch": (s.status == RunStatus::Succeeded).then_some(&s.final_branch),
        "final_commit": s.stages.iter().rev().find_map(|st| st.commit.clone()),
        "pr_title": s.pr_title,
        "tokens": {"prompt": s.tokens().prompt, "completion": s.tokens().completion},
        "cost_usd": super::inspect::run_cost_usd(s),
        "record": summary.record_dir.display().to_string(),
    })
}

/// Prints the human summary or the JSON object on stdout.
pub(super) fn print_summary(summary: &RunSummary, json: bool) {
    if json {
        println!("{}", summary_json(summary));
        return;
    }
    let s = &summary.state;
    println!(
        "run {}: {} (pipeline {})",
        s.run_id,
        s.status.as_str(),
        s.pipeline
    );
    println!("model: {}", s.model_label);
    let t = s.tokens();
    println!(
        "tokens: {} (prompt {}, completion {}), cost: {}",
        t.total(),
        t.prompt,
        t.completion,
        super::inspect::run_cost(s)
    );
    println!();
    for st in &s.stages {
        let commit = st.commit.as_deref().map_or("-", |c| &c[..c.len().min(10)]);
        let verdict = st
            .verdict
            .map_or(String::new(), |v| format!(" verdict={v}"));
        let detail = match st.status {
            StageStatus::Skipped | StageStatus::Failed => {
                format!("  ({})", st.reason.as_deref().unwrap_or(""))
            }
            _ => String::new(),
        };
        println!(
            "  {:<10} {:<9} {:<9} {:>3} turns {:>7} tokens  {}  {}{verdict}{detail}",
            st.id,
            st.role,
            st.status.as_str(),
            st.turns,
            st.tokens.total(),
            commit,
            st.branch.as_deref().unwrap_or("-"),
        );
    }
    println!();
    if s.status == RunStatus::Succeeded {
        println!("final branch: {}", s.final_branch);
    } else {
        println!("worktree kept for inspection: {}", s.worktree);
    }
    if let Some((title, _)) = &summary.pr {
        println!("PR title: {title}");
        println!("PR body:  {}", summary.record_dir.join("pr.md").display());
    }
    println!("record:   {}", summary.record_dir.display());
}
