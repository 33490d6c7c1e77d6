//! `orch agent`: one agent with a fresh history, its report on stdout.
//!
//! It is a one-stage run: the agent works in a worktree of its own (so even
//! a writing role never touches the user's tree), its work is committed on
//! `orch/<run>/<role>` and recorded like any run.
//!
//! Child mode (`--worktree`, set by `spawn_agent`; hidden flags): the agent
//! works directly in its parent's worktree, writes its result under the
//! parent run's record and leaves committing to the parent stage; see
//! [`crate::subagent`].

use super::args::{EventArgs, InstructionArgs, LimitArgs, ModelArgs};
use super::error::CliError;
use super::model::choose_for_repo;
use super::output::{Out, ignore_closed};
use super::session::{SessionBuilder, roles_for, route_role_models};
use super::summary::{check_events, end_events, exit_code_of};
use crate::catalog::Catalog;
use crate::events::Events;
use crate::ids::StageId;
use crate::pipeline::{Pipeline, Stage};
use crate::runner::{RunOptions, run_pipeline};
use crate::subagent::{self, AgentStatus, SpawnLimits, child};
use crate::ui::Ui;
use std::path::PathBuf;
use std::time::Duration;

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
    pub limits: LimitArgs,
    /// Project instructions.
    #[command(flatten)]
    pub instructions: InstructionArgs,
    /// Allow commands that the role's `ask` rules would ask about
    #[arg(long)]
    pub yes: bool,
    /// How asks are answered without --yes.
    #[command(flatten)]
    pub asks: super::args::AskArgs,
    /// Print a JSON object (report, status, turns, tokens, transcript) instead of the report
    #[arg(long)]
    pub json: bool,
    /// Resolve and print the plan (prompt, tools, settings); call no model and create nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Keep the branches of a read-only role's run (by default a question leaves none)
    #[arg(long)]
    pub keep: bool,
    /// The event stream.
    #[command(flatten)]
    pub events: EventArgs,
    /// Child mode: work directly in this worktree (set by `spawn_agent`)
    #[arg(long, hide = true, requires_all = ["record_dir", "agent_path"])]
    pub worktree: Option<PathBuf>,
    /// Child mode: the run's record directory
    #[arg(long, hide = true)]
    pub record_dir: Option<PathBuf>,
    /// Child mode: this agent's path, e.g. code/explore-1
    #[arg(long, hide = true)]
    pub agent_path: Option<String>,
    /// Child mode: this agent's depth
    #[arg(long, hide = true, default_value_t = 1)]
    pub depth: u32,
    /// Child mode: the deepest agent allowed
    #[arg(long, hide = true, default_value_t = subagent::DEFAULT_MAX_DEPTH)]
    pub max_depth: u32,
    /// Child mode: children of this agent running at once
    #[arg(long, hide = true, default_value_t = subagent::DEFAULT_MAX_CHILDREN)]
    pub max_children: u32,
    /// Child mode: wall time of each child of this agent
    #[arg(long, hide = true, default_value_t = subagent::DEFAULT_CHILD_TIME.as_secs())]
    pub child_time_secs: u64,
    /// Child mode: token budget of each child of this agent
    #[arg(long, hide = true, default_value_t = subagent::DEFAULT_CHILD_TOKENS)]
    pub child_tokens: u64,
    /// Child mode: this agent's token budget
    #[arg(long, hide = true)]
    pub token_budget: Option<u64>,
    /// Child mode: this agent's wall time
    #[arg(long, hide = true)]
    pub time_budget_secs: Option<u64>,
    /// Child mode: the inherited descriptor carrying the model key and the
    /// values to redact (never the environment)
    #[arg(long, hide = true)]
    pub secrets_fd: Option<i32>,
}

impl AgentArgs {
    /// Child mode: reads the secret pipe the parent passed (`--secrets-fd`),
    /// sets its variables (`ORCH_API_KEY`) in this process's environment and
    /// returns the values to redact. Outside child mode: nothing.
    ///
    /// The variables are set with `setenv`, which copies them to the heap:
    /// `/proc/<pid>/environ` (the original block) never shows them.
    ///
    /// # Safety
    /// Call from `main` while the process is single-threaded (`setenv`), at
    /// most once (the descriptor is consumed).
    pub unsafe fn take_inherited_secrets(&self) -> Result<Vec<String>, String> {
        let Some(fd) = self.secrets_fd.filter(|_| self.worktree.is_some()) else {
            return Ok(Vec::new());
        };
        // SAFETY: the parent put the pipe on this descriptor for us alone.
        let secrets = unsafe { crate::sandbox::read_secret_fd(fd) }
            .map_err(|e| format!("failed to read the secret pipe (fd {fd}): {e}"))?;
        for (k, v) in &secrets.env {
            // SAFETY: single-threaded, per this function's contract.
            unsafe { std::env::set_var(k, v) };
        }
        Ok(secrets.redact)
    }
}

/// `orch agent`.
pub(super) async fn cmd_agent(args: AgentArgs) -> Result<i32, CliError> {
    if args.worktree.is_some() {
        return cmd_child(args).await;
    }
    let events = args.events.open();
    end_events(&events, agent(args, &events).await)
}

async fn agent(args: AgentArgs, events: &Events) -> Result<i32, CliError> {
    check_events(events, args.json, args.dry_run)?;
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
            verify: vec![],
            verify_rounds: 0,
            text_tool_calls: true,
            // An `orch agent` question is answered in text or by `finish`.
            text_result: true,
            model: None,
            escalate_to: None,
            required: true,
            context_files: true,
            replica: None,
            select: None,
            sampling: Default::default(),
        }],
        origin: "orch agent".to_owned(),
        project_instructions: !args.instructions.no_project_instructions,
        setup: None,
        react_rounds: None,
    };
    let mut roles = roles_for(&catalog, &pipeline)?;
    let mut session = SessionBuilder::new(&args.model, Some(&args.repo))?
        .assume_yes(args.yes)
        .asks(&args.asks)
        .max_parallel(1)
        .build(&args.limits)?;
    session.hooks = super::session::hooks_for(&args.repo, args.instructions.trust_hooks, &roles)?;
    events.redacting(&session.secrets);
    if args.dry_run {
        // No request at all: a role's own model is kept only when mapped.
        route_role_models(&mut roles, &args.model, &args.repo, None)?;
        let (repo, base) = (&args.repo, &args.base);
        return super::dryrun::dry_run(repo, &pipeline, &roles, "", &session, base, args.json);
    }
    // As `orch run`: the role's model is kept when the server lists it.
    super::session::preflight_and_route(&mut roles, &args.model, &args.repo, &args.base, &session)
        .await?;
    let read_only = role.read_only;
    let ui = Ui::new(false).with_events(events.clone());
    let summary = run_pipeline(
        RunOptions {
            repo: args.repo.clone(),
            pipeline,
            roles,
            issue: String::new(),
            issue_json: None,
            base: args.base.clone(),
            session,
        },
        &ui,
    )
    .await?;
    // A question's branches go: it reports no branch then, not a deleted one.
    let cleared = read_only && !args.keep;
    if cleared {
        super::summary::clear_question(&args.repo, &summary.state.run_id);
    } else if summary.state.status == crate::runlog::RunStatus::Failed {
        super::summary::clear_failed_run(&args.repo, &summary.state.run_id);
    }
    let st = &summary.state.stages[0];
    let result = serde_json::json!({
        "run_id": summary.state.run_id,
        "role": st.role,
        "status": st.status.as_str(),
        "report": summary.last_summary,
        "reason": st.reason,
        "turns": st.turns,
        "tokens": {"prompt": st.tokens.prompt, "completion": st.tokens.completion},
        "commit": st.commit,
        "branch": st.branch.as_ref().filter(|_| !cleared),
        "transcript": summary.record_dir.join("stages").join(&st.id).join("transcript.json").display().to_string(),
    });
    if events.is_on() {
        events.set_result(summary.state.status.as_str(), result);
        return Ok(exit_code_of(&summary));
    }
    let mut out = Out::stdout();
    let printed = if args.json {
        writeln!(out, "{result}")
    } else {
        if let Some(r) = &st.reason {
            crate::ui::status_line(&format!("orch: agent {}: {r}", st.status.as_str()));
        }
        out.untrusted(&format!("{}\n", summary.last_summary.trim_end()))
    };
    ignore_closed(printed.and_then(|()| out.finish()))?;
    super::gc::empty_trash_in_background(&args.repo);
    Ok(exit_code_of(&summary))
}

/// `orch agent` in child mode: started by `spawn_agent`.
async fn cmd_child(args: AgentArgs) -> Result<i32, CliError> {
    let (Some(worktree), Some(record_dir), Some(agent_path)) = (
        args.worktree.clone(),
        args.record_dir.clone(),
        args.agent_path.clone(),
    ) else {
        return Err(CliError::Invalid(
            "--worktree needs --record-dir and --agent-path".to_owned(),
        ));
    };
    let fail = |e: CliError| {
        child::record_failure(
            &record_dir,
            &agent_path,
            &args.role,
            &args.task,
            args.depth,
            &e.to_string(),
        );
        e
    };
    // The child loads its role itself: it gets the tools its role grants,
    // whatever the parent asked for.
    let catalog = Catalog::load(Some(&args.repo)).map_err(|e| fail(e.into()))?;
    let role = catalog
        .role(&args.role)
        .map_err(|e| fail(e.into()))?
        .clone();
    let chosen = choose_for_repo(&args.model, Some(&args.repo)).map_err(fail)?;
    // No preflight here (the parent's passed), but the parent's answers
    // about the server: a child asks no probe its parent already asked.
    super::preflight::open_server_cache();
    // The parent passes its compaction flags: the child compacts alike.
    let compaction = args
        .limits
        .to_limits(chosen.model.context_window())
        .map_err(fail)?
        .compaction;
    let result = child::run_child(child::ChildOptions {
        repo: args.repo.clone(),
        worktree,
        record_dir: record_dir.clone(),
        agent_path,
        role,
        task: args.task.clone(),
        depth: args.depth,
        limits: SpawnLimits {
            max_depth: args.max_depth,
            max_children: args.max_children,
            child: crate::budget::Budget {
                tokens: Some(args.child_tokens),
                time_secs: Some(args.child_time_secs as f64),
                cost_usd: None,
            },
        },
        compaction,
        token_budget: args.token_budget,
        time_budget: args.time_budget_secs.map(Duration::from_secs),
        max_turns: args.max_turns,
        model: chosen.model,
        secrets: chosen.secrets,
        assume_yes: args.yes,
    })
    .await?;
    let mut out = Out::stdout();
    let printed = if args.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string(&result).unwrap_or_default()
        )
    } else {
        if let Some(r) = &result.reason {
            crate::ui::status_line(&format!("orch: agent {}: {r}", result.status.as_str()));
        }
        out.untrusted(&format!("{}\n", result.report.trim_end()))
    };
    ignore_closed(printed.and_then(|()| out.finish()))?;
    Ok(match result.status {
        AgentStatus::Succeeded => crate::exit::OK,
        AgentStatus::ModelError => crate::exit::MODEL,
        _ => crate::exit::STAGE_FAILED,
    })
}
