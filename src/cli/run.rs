//! `orch run <pipeline>`: an issue in, a PR branch and PR text out.

use super::CliError;
use super::args::{InstructionArgs, LimitArgs, ModelArgs, ParallelArgs};
use super::output::ignore_closed;
use super::session::{SessionBuilder, roles_for, route_role_models};
use super::summary::{exit_code_of, print_summary};
use crate::catalog::Catalog;
use crate::runner::{RunOptions, run_pipeline};
use crate::ui::Ui;
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
    /// Project instructions.
    #[command(flatten)]
    pub instructions: InstructionArgs,
    /// Allow commands that a role's `ask` rules would ask about (non-interactive runs deny them otherwise)
    #[arg(long)]
    pub yes: bool,
    /// Parallelism.
    #[command(flatten)]
    pub parallel: ParallelArgs,
    /// Print one JSON object on stdout instead of the human summary
    #[arg(long)]
    pub json: bool,
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

/// `orch run`.
pub(super) async fn cmd_run(args: RunArgs) -> Result<i32, CliError> {
    let catalog = Catalog::load(Some(&args.repo))?;
    let mut pipeline = catalog.pipeline(&args.pipeline)?;
    pipeline.project_instructions &= !args.instructions.no_project_instructions;
    let mut roles = roles_for(&catalog, &pipeline)?;
    route_role_models(&mut roles, &args.model, &args.repo, None)?;
    let issue = read_issue(&args.issue)?;
    let session = SessionBuilder::new(&args.model, Some(&args.repo))?
        .assume_yes(args.yes)
        .max_parallel(args.parallel.max_parallel)
        .build(&args.limits)?;
    let ui = Ui::new(false);
    let summary = run_pipeline(
        RunOptions {
            repo: args.repo.clone(),
            pipeline,
            roles,
            issue,
            base: args.base.clone(),
            session,
        },
        &ui,
    )
    .await?;
    ignore_closed(print_summary(&summary, args.json))?;
    Ok(exit_code_of(&summary))
}
