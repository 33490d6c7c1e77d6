//! `orch run <pipeline>`: an issue in, a PR branch and PR text out.

use super::args::{EventArgs, InstructionArgs, LimitArgs, ModelArgs, ParallelArgs};
use super::dryrun::dry_run;
use super::error::CliError;
use super::output::ignore_closed;
use super::session::{
    SessionBuilder, preflight_and_route, roles_for, route_role_models, route_stage_models,
    start_base,
};
use super::summary::{check_events, clear_failed_run, end_events, exit_code_of, report_summary};
use crate::catalog::Catalog;
use crate::events::Events;
use crate::runlog::RunStatus;
use crate::runner::{RunOptions, run_pipeline};
use crate::ui::Ui;
use std::path::{Path, PathBuf};

/// Arguments of `orch run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Pipeline name (looked up in .orch/pipelines, the user config dir, then built-ins) or a path to a .yaml file
    pub pipeline: String,
    /// The repository to work on (never modified: orch works in a worktree of it)
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// The issue: a Markdown file, `-` (stdin), or a forge issue `github:OWNER/REPO#N` / `gitlab:GROUP/PROJECT#N` (read once through the API and frozen into the run)
    #[arg(long, value_name = "FILE|FORGE#N")]
    pub issue: String,
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
    /// How asks are answered without --yes.
    #[command(flatten)]
    pub asks: super::args::AskArgs,
    /// Parallelism.
    #[command(flatten)]
    pub parallel: ParallelArgs,
    /// Neither inject lessons nor distill new ones in this run (overrides `memory =` in orch.toml)
    #[arg(long, conflicts_with = "memory")]
    pub no_memory: bool,
    /// What this run does with memory: off, propose or auto-accept (overrides `memory =` in orch.toml)
    #[arg(long, value_enum, value_name = "MODE")]
    pub memory: Option<crate::memory::MemoryMode>,
    /// The git remote of a distributed run (with --no-local): workers run its stages with `orch stage`
    #[arg(long, value_name = "URL", requires = "no_local")]
    pub remote: Option<String>,
    /// Plan the run and push it to --remote without running any stage here; prints the run id (for an external scheduler)
    #[arg(long, requires = "remote", conflicts_with = "dry_run")]
    pub no_local: bool,
    /// Print one JSON object on stdout instead of the human summary
    #[arg(long)]
    pub json: bool,
    /// The event stream.
    #[command(flatten)]
    pub events: EventArgs,
}

/// The issue text, and the fetched issue (`issue.json`) when `--issue`
/// names a forge issue.
async fn read_issue(spec: &str, repo: &Path) -> Result<(String, Option<String>), CliError> {
    if crate::forge::IssueRef::is_forge_spec(spec) {
        let issue = crate::forge::read_issue(spec, repo).await?;
        return Ok((issue.to_markdown(), Some(issue.to_json())));
    }
    read_issue_file(Path::new(spec)).map(|text| (text, None))
}

/// Reads the issue file (or stdin for `-`).
fn read_issue_file(path: &Path) -> Result<String, CliError> {
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
    let events = args.events.open();
    end_events(&events, run(args, &events).await)
}

async fn run(args: RunArgs, events: &Events) -> Result<i32, CliError> {
    check_events(events, args.json, args.dry_run)?;
    let catalog = Catalog::load(Some(&args.repo))?;
    let mut pipeline = catalog.pipeline(&args.pipeline)?;
    pipeline.project_instructions &= !args.instructions.no_project_instructions;
    let mut roles = roles_for(&catalog, &pipeline)?;
    let (issue, issue_json) = read_issue(&args.issue, &args.repo).await?;
    let mut session = SessionBuilder::new(&args.model, Some(&args.repo))?
        .assume_yes(args.yes)
        .asks(&args.asks)
        .max_parallel(args.parallel.max_parallel)
        .lane_pool(!args.parallel.no_lane_pool)
        .memory(super::session::memory_mode(
            &args.repo,
            args.no_memory,
            args.memory,
        )?)
        .build(&args.limits)?;
    session.hooks = super::session::hooks_for(&args.repo, args.instructions.trust_hooks, &roles)?;
    route_stage_models(&mut session, &pipeline, &args.model, &args.repo)?;
    super::escalation::route_escalations(&mut session, &pipeline, &roles, &args.model, &args.repo)?;
    events.redacting(&session.secrets);
    if args.dry_run {
        // No request at all: a role's own model is kept only when mapped.
        route_role_models(&mut roles, &args.model, &args.repo, None)?;
        let (repo, base) = (&args.repo, &args.base);
        return dry_run(repo, &pipeline, &roles, &issue, &session, base, args.json);
    }
    if let Some(url) = &args.remote {
        // No model is called here: the workers call it.
        route_role_models(&mut roles, &args.model, &args.repo, None)?;
        let (base, _dirt_note) = start_base(&args.repo, &args.base)?;
        let opts = RunOptions {
            repo: args.repo.clone(),
            pipeline,
            roles,
            issue,
            issue_json,
            base,
            session,
        };
        return plan_remote(&args, url, opts).await;
    }
    // Nothing exists yet: a wrong server or key fails here, leaving nothing.
    preflight_and_route(&mut roles, &args.model, &args.repo, &args.base, &session).await?;
    let (base, dirt_note) = start_base(&args.repo, &args.base)?;
    let ui = Ui::new(false).with_events(events.clone());
    dirt_note.attach(&ui);
    let summary = run_pipeline(
        RunOptions {
            repo: args.repo.clone(),
            pipeline,
            roles,
            issue,
            issue_json,
            base,
            session,
        },
        &ui,
    )
    .await?;
    if summary.state.status == RunStatus::Failed {
        clear_failed_run(&args.repo, &summary.state.run_id);
    }
    dirt_note.finish();
    ignore_closed(report_summary(&summary, args.json, events))?;
    super::gc::empty_trash_in_background(&args.repo);
    Ok(exit_code_of(&summary))
}

/// `orch run --remote URL --no-local`: the run is planned here and pushed;
/// its stages run wherever `orch stage` is run.
async fn plan_remote(args: &RunArgs, url: &str, opts: RunOptions) -> Result<i32, CliError> {
    let state = crate::runner::plan_run(opts).await?;
    let common = crate::git::open_repo(&args.repo)?.common_dir;
    let run_id = &state.run_id;
    crate::distributed::worker::push_planned(&common, url, run_id, &state.base_commit)?;
    let mut out = super::output::Out::stdout();
    if args.json {
        let stages: Vec<&str> = state.stages.iter().map(|s| s.id.as_str()).collect();
        let value = serde_json::json!({"run_id": run_id, "remote": url, "base_commit": state.base_commit,
            "run_ref": crate::distributed::runref::run_ref(run_id), "stages": stages});
        writeln!(out, "{value}")?;
    } else {
        writeln!(out, "{run_id}")?;
    }
    ignore_closed(out.finish())?;
    Ok(crate::exit::OK)
}
