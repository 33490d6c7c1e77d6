//! `orch agent`: one agent with a fresh history, its report on stdout.
//!
//! It is a one-stage run: the agent works in a worktree of its own (so even
//! a writing role never touches the user's tree), its work is committed on
//! `orch/<run>/<role>` and recorded like any run.

use super::CliError;
use super::model::{ModelArgs, choose_for_repo};
use super::run::{exit_code_of, roles_for};
use crate::catalog::Catalog;
use crate::ids::StageId;
use crate::pipeline::{Pipeline, Stage};
use crate::runner::{RunOptions, run_pipeline};
use crate::ui::Ui;
use std::path::PathBuf;

/// Arguments of `orch agent`.
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// The role to run (e.g. explore, coder)
    #[arg(long)]
    pub role: String,
    /// The task, in plain words
    #[arg(long)]
    pub task: String,
    /// The repository to work on
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// The revision the agent starts from
    #[arg(long, default_value = "HEAD")]
    pub base: String,
    /// Maximum model turns (default: the role's)
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Model settings.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Budget and compaction settings.
    #[command(flatten)]
    pub limits: super::run::LimitArgs,
    /// Allow commands that the role's `ask` rules would ask about
    #[arg(long)]
    pub yes: bool,
    /// Print a JSON object (report, status, turns, tokens, transcript) instead of the report
    #[arg(long)]
    pub json: bool,
}

/// `orch agent`.
pub async fn cmd_agent(args: AgentArgs) -> Result<i32, CliError> {
    let catalog = Catalog::load(Some(&args.repo))?;
    let role = catalog.role(&args.role)?;
    let id = StageId(role.name.to_ascii_lowercase().replace(
        |c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_',
        "-",
    ));
    let pipeline = Pipeline {
        name: format!("agent:{}", role.name),
        description: "a single agent".to_owned(),
        stages: vec![Stage {
            id: id.clone(),
            role: role.name.clone(),
            needs: vec![],
            task: args.task.clone(),
            max_turns: args.max_turns,
            budget: Default::default(),
            round: 1,
            base_id: id.clone(),
            run_if_changes_requested_by: None,
            on_failure: Default::default(),
        }],
        origin: "orch agent".to_owned(),
    };
    let roles = roles_for(&catalog, &pipeline)?;
    let chosen = choose_for_repo(&args.model, Some(&args.repo))?;
    let ui = Ui::new(args.json);
    let summary = run_pipeline(
        RunOptions {
            repo: args.repo.clone(),
            pipeline,
            roles,
            issue: String::new(),
            base: args.base.clone(),
            session: chosen.session(args.yes, super::interactive(), 1, args.limits.to_limits()?),
        },
        &ui,
    )
    .await?;
    let st = &summary.state.stages[0];
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "run_id": summary.state.run_id,
                "role": st.role,
                "status": st.status.as_str(),
                "report": summary.last_summary,
                "reason": st.reason,
                "turns": st.turns,
                "tokens": {"prompt": st.tokens.prompt, "completion": st.tokens.completion},
                "commit": st.commit,
                "branch": st.branch,
                "transcript": summary.record_dir.join("stages").join(&st.id).join("transcript.json").display().to_string(),
            })
        );
    } else {
        println!("{}", summary.last_summary.trim_end());
        if let Some(r) = &st.reason {
            eprintln!("orch: agent {}: {r}", st.status.as_str());
        }
    }
    Ok(exit_code_of(&summary))
}
