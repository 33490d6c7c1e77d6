//! `orch run <pipeline>`: an issue in, a PR branch and PR text out.

use super::CliError;
use super::args::{InstructionArgs, LimitArgs, ModelArgs, ParallelArgs};
use super::dryrun::dry_run;
use super::output::ignore_closed;
use super::session::{SessionBuilder, roles_for, route_role_models, start_base};
use super::summary::{clear_failed_run, exit_code_of, print_summary};
use crate::catalog::Catalog;
use crate::runlog::RunStatus;
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
    /// The revision the run starts from; `worktree` snapshots the working tree (uncommitted and untracked files included, ignored ones not) into a commit and starts from that, leaving your index, HEAD and branch alone
    #[arg(long, default_value = "HEAD")]
    pub base: String,
    /// Resolve and print the plan (stages, prompts, tools, settings); call no model and create nothing
    #[arg(long)]
    pub dry_run: bool,
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
    let issue = read_issue(&args.issue)?;
    let session = SessionBuilder::new(&args.model, Some(&args.repo))?
        .assume_yes(args.yes)
        .max_parallel(args.parallel.max_parallel)
        .lane_pool(!args.parallel.no_lane_pool)
        .build(&args.limits)?;
    if args.dry_run {
        // No request at all: a role's own model is kept only when mapped.
        route_role_models(&mut roles, &args.model, &args.repo, None)?;
        let (repo, base) = (&args.repo, &args.base);
        return dry_run(repo, &pipeline, &roles, &issue, &session, base, args.json);
    }
    // Nothing exists yet: a wrong server or key fails here, leaving nothing.
    let served =
        super::preflight::check_run(&args.repo, &args.base, session.model.as_ref()).await?;
    tracing::debug!(served_models = ?served.served_models, "preflight passed");
    route_role_models(
        &mut roles,
        &args.model,
        &args.repo,
        served.served_models.as_deref(),
    )?;
    let base = start_base(&args.repo, &args.base)?;
    let ui = Ui::new(false);
    let summary = run_pipeline(
        RunOptions {
            repo: args.repo.clone(),
            pipeline,
            roles,
            issue,
            base,
            session,
        },
        &ui,
    )
    .await?;
    if summary.state.status == RunStatus::Failed {
        clear_failed_run(&args.repo, summary.state.run_id.as_str());
    }
    ignore_closed(print_summary(&summary, args.json))?;
    super::gc::empty_trash_in_background(&args.repo);
    Ok(exit_code_of(&summary))
}
