//! `orch run <pipeline>`: an issue in, a PR branch and PR text out.

use super::model::{ModelArgs, choose};
use super::{CliError, exit};
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
    let chosen = choose(&args.model)?;
    let ui = Ui::new(false);
    let summary = run_pipeline(
        RunOptions {
            repo: args.repo.clone(),
            pipeline,
            roles,
            issue,
            base: args.base.clone(),
            session: chosen.session(args.yes, super::interactive(), args.max_parallel),
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
