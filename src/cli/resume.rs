//! `orch resume` and `orch rollback`.

use super::args::{EventArgs, LimitArgs, ModelArgs, ParallelArgs};
use super::error::CliError;
use super::output::{Out, ignore_closed};
use super::record::resolve_run_id;
use super::session::SessionBuilder;
use super::summary::{check_events, end_events, exit_code_of, report_summary};
use crate::events::Events;
use crate::exit;
use crate::runner::{self, ResumeOptions};
use crate::ui::Ui;
use std::path::PathBuf;

/// Arguments of `orch resume`.
#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    /// The run id (`orch runs` lists them; `last` is the newest)
    pub run: String,
    /// The repository the run belongs to
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Also re-run failed stages
    #[arg(long)]
    pub retry: bool,
    /// Parallelism.
    #[command(flatten)]
    pub parallel: ParallelArgs,
    /// Model settings (default: the ones the run was started with, through orch.toml; the key comes from the environment)
    #[command(flatten)]
    pub model: ModelArgs,
    /// Budget and compaction settings for what is left of the run (default: the ones the run recorded).
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Allow commands that a role's `ask` rules would ask about
    #[arg(long)]
    pub yes: bool,
    /// How asks are answered without --yes.
    #[command(flatten)]
    pub asks: super::args::AskArgs,
    /// Neither inject lessons nor distill new ones in this run (overrides `memory =` in orch.toml)
    #[arg(long, conflicts_with = "memory")]
    pub no_memory: bool,
    /// What this run does with memory: off, propose or auto-accept (overrides `memory =` in orch.toml)
    #[arg(long, value_enum, value_name = "MODE")]
    pub memory: Option<crate::memory::MemoryMode>,
    /// Print one JSON object on stdout instead of the human summary
    #[arg(long)]
    pub json: bool,
    /// The event stream.
    #[command(flatten)]
    pub events: EventArgs,
}

/// Arguments of `orch rollback`.
#[derive(Debug, clap::Args)]
pub struct RollbackArgs {
    /// The run id (`last` is the newest)
    pub run: String,
    /// The stage to go back to: the final branch moves to its commit
    #[arg(long)]
    pub to: String,
    /// The repository the run belongs to
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

/// `orch resume`.
pub(super) async fn cmd_resume(args: ResumeArgs) -> Result<i32, CliError> {
    let events = args.events.open();
    end_events(&events, resume(args, &events).await)
}

async fn resume(args: ResumeArgs, events: &Events) -> Result<i32, CliError> {
    check_events(events, args.json, false)?;
    let run_id = resolve_run_id(&args.repo, &args.run)?;
    let info = crate::git::open_repo(&args.repo)?;
    let (dir, state, plan) = runner::load_run(&info.common_dir, &run_id)?;
    crate::runlog::refuse_if_live(&dir.root, &run_id)?;
    let mut session = SessionBuilder::resumed(&state, &args.model, &args.repo)?
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
    super::session::resume_from_record(&mut session, &dir.root, &plan, &args.model, &args.repo)?;
    events.redacting(&session.secrets);
    let ui = Ui::new(false).with_events(events.clone());
    let summary = runner::resume_run(
        &args.repo,
        &run_id,
        session,
        ResumeOptions {
            retry_failed: args.retry,
            only: None,
        },
        &ui,
    )
    .await?;
    ignore_closed(report_summary(&summary, args.json, events))?;
    super::gc::empty_trash_in_background(&args.repo);
    Ok(exit_code_of(&summary))
}

/// `orch rollback`.
pub(super) async fn cmd_rollback(args: RollbackArgs) -> Result<i32, CliError> {
    let run_id = resolve_run_id(&args.repo, &args.run)?;
    let info = crate::git::open_repo(&args.repo)?;
    let root = crate::runlog::RunDir::open(&info.common_dir, run_id.as_str())?.root;
    crate::runlog::refuse_if_live(&root, &run_id)?;
    let rolled = runner::rollback_run(&args.repo, &run_id, &args.to).await?;
    if args.json {
        return super::stage_json::print_rollback(&run_id, &args.to, &rolled);
    }
    let mut out = Out::stdout();
    writeln!(
        out,
        "run {run_id}: final branch orch/{run_id}/pr now at stage `{}`",
        args.to
    )?;
    if rolled.is_empty() {
        writeln!(out, "no later stages to roll back")?;
    } else {
        writeln!(
            out,
            "rolled back (branches kept; `orch resume {run_id}` re-runs them): {}",
            rolled.join(", ")
        )?;
    }
    out.finish()?;
    Ok(exit::OK)
}
