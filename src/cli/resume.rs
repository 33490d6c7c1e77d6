//! `orch resume` and `orch rollback`.

use super::model::{ModelArgs, any_given};
use super::output::{Out, ignore_closed};
use super::run::{exit_code_of, parse_parallel, print_summary};
use super::{CliError, exit};
use crate::llm::openai::{ModelSettings, OpenAiClient};
use crate::llm::replay::ReplayModel;
use crate::runner::{self, ResumeOptions, Session};
use crate::ui::Ui;
use std::path::PathBuf;
use std::sync::Arc;

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
    /// How many stages may run at once
    #[arg(long, default_value_t = crate::runner::DEFAULT_MAX_PARALLEL, value_parser = parse_parallel)]
    pub max_parallel: usize,
    /// Model settings (default: the ones the run was started with; the key comes from the environment)
    #[command(flatten)]
    pub model: ModelArgs,
    /// Budget and compaction settings for what is left of the run.
    #[command(flatten)]
    pub limits: super::run::LimitArgs,
    /// Allow commands that a role's `ask` rules would ask about
    #[arg(long)]
    pub yes: bool,
    /// Print one JSON object on stdout instead of the human summary
    #[arg(long)]
    pub json: bool,
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
}

/// The run id for `last`, or the id as given.
pub(super) fn resolve_run_id(repo: &std::path::Path, run: &str) -> Result<String, CliError> {
    if run != "last" {
        return Ok(run.to_owned());
    }
    let info = crate::git::open_repo(repo)?;
    crate::runlog::list_run_ids(&info.common_dir)
        .into_iter()
        .next()
        .ok_or_else(|| {
            CliError::Invalid("failed to find the last run: this repository has no runs".into())
        })
}

/// `orch resume`.
pub async fn cmd_resume(args: ResumeArgs) -> Result<i32, CliError> {
    let run_id = resolve_run_id(&args.repo, &args.run)?;
    let info = crate::git::open_repo(&args.repo)?;
    let (_, state, _) = runner::load_run(&info.common_dir, &run_id)?;
    let session = if any_given(&args.model) {
        {
            let chosen = super::model::choose_for_repo(&args.model, Some(&args.repo))?;
            let limits = args.limits.to_limits(chosen.model.context_window())?;
            chosen.session(
                args.yes,
                crate::policy::detect_interactive(),
                args.max_parallel,
                limits,
            )
        }
    } else {
        // The recorded model settings; never a recorded secret.
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let (model, base_url, replay_file): (Arc<dyn crate::llm::ChatModel>, _, _) =
            match &state.replay_file {
                Some(file) => (
                    Arc::new(ReplayModel::from_file(file)?),
                    None,
                    Some(file.clone()),
                ),
                None => {
                    let settings = super::model::with_knobs(ModelSettings::resolve(
                        state.base_url.clone(),
                        Some(state.model.clone()),
                        &env,
                    )?);
                    let url = Some(settings.base_url.clone());
                    (Arc::new(OpenAiClient::new(settings)?), url, None)
                }
            };
        let mut secrets = super::model::secrets();
        secrets.extend(env("ORCH_API_KEY").or_else(|| env("OPENAI_API_KEY")));
        Session {
            limits: args.limits.to_limits(model.context_window())?,
            model,
            base_url,
            replay_file,
            secrets,
            assume_yes: args.yes,
            interactive: crate::policy::detect_interactive(),
            max_parallel: args.max_parallel,
        }
    };
    let ui = Ui::new(false);
    let summary = runner::resume_run(
        &args.repo,
        &run_id,
        session,
        ResumeOptions {
            retry_failed: args.retry,
        },
        &ui,
    )
    .await?;
    ignore_closed(print_summary(&summary, args.json))?;
    Ok(exit_code_of(&summary))
}

/// `orch rollback`.
pub async fn cmd_rollback(args: RollbackArgs) -> Result<i32, CliError> {
    let run_id = resolve_run_id(&args.repo, &args.run)?;
    let rolled = runner::rollback_run(&args.repo, &run_id, &args.to).await?;
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
