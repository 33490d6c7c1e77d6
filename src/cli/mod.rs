//! The command line: one file per subcommand (an `Args` struct and a `cmd_*`
//! function). Results go to stdout, only through `output::Out`; everything
//! else goes through [`crate::ui`] or `tracing` to stderr.
//!
//! Invariant: no subcommand module imports another; what several share
//! (flag groups, the session builder, the run summary, run lookup) lives in
//! its own module below.

// One stdout writer (it knows what a closed pipe means); stderr through `ui`.
#![deny(clippy::print_stdout, clippy::print_stderr)]

// Subcommands: one file each; none imports another.
mod agent;
mod answer;
mod completions;
mod config;
mod demo;
mod eval;
mod eval_call;
mod eval_compare;
mod eval_import;
mod export;
mod gc;
mod guide;
mod inspect;
mod memory;
mod publish;
mod react;
mod replay;
mod resume;
mod run;
mod setup;
mod ui;
mod validate;
mod worker;

// Shared by the subcommands.
mod args;
mod dryrun;
mod error;
mod escalation;
mod model;
mod output;
mod preflight;
mod record;
mod session;
mod stage_json;
mod summary;

use clap::{Parser, Subcommand};
pub use error::CliError;

use crate::exit;

const EXAMPLES: &str = "\
Examples:
  orch demo                                          offline demo on a bundled repo (replay model)
  orch run issue-to-pr --repo . --issue ISSUE.md     issue in, PR branch out (needs a model)
  orch run issue-to-pr --issue ISSUE.md --base-url http://localhost:11434/v1 --model qwen2.5-coder
  orch agent --role explore --task \"Where is the config parsed?\"
  orch validate                                      check every pipeline and role orch can see
  orch graph issue-to-pr                             the DAG as a Mermaid flowchart
  orch runs; orch show last; orch review last        inspect runs, stage by stage
  orch rollback last --to review; orch resume last   undo later stages and run them again
  orch run issue-to-pr --issue ISSUE.md --dry-run    the plan and prompts; no model called, nothing created
  orch run issue-to-pr --issue github:OWNER/REPO#7    read the issue from GitHub (token: GH_TOKEN)
  orch publish last --draft                          push the PR branch and open (or update) the pull request
  orch gc --older-than 7d                            remove old runs' worktrees, records and stage branches
  orch setup \"a venv in ./venv\" --plan-only         the environment-setup agent: print a plan, change nothing

Model: --base-url/--model or ORCH_BASE_URL/ORCH_MODEL; key in ORCH_API_KEY (or OPENAI_API_KEY).
Offline: --replay FILE (or --model replay:FILE) replays recorded responses; no model is called.
Logs: ORCH_LOG=debug (stderr).";

/// orch: pipelines of LLM coding agents over a git worktree; every stage a commit.
#[derive(Debug, Parser)]
#[command(name = "orch", version, about, after_help = EXAMPLES)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a pipeline on an issue: stages, commits, a PR branch and PR text.
    Run(run::RunArgs),
    /// Re-run what is missing, interrupted or rolled back in a run (`--retry`: failed stages too).
    Resume(resume::ResumeArgs),
    /// Move a run's final branch back to a stage; the stages that depend on it are marked rolled back (branches kept).
    Rollback(resume::RollbackArgs),
    /// List recent runs, newest first.
    Runs(inspect::RunsArgs),
    /// Show a run: stages with status, role, verdict, duration, turns, tokens, commit, branch.
    Show(inspect::ShowArgs),
    /// Review a run stage by stage: commit, diffstat, diff, verdict, summary, actions.
    Review(inspect::ReviewArgs),
    /// Print one stage's diff.
    Diff(inspect::DiffArgs),
    /// Print a run's action log (readable, or raw JSONL with --json); --follow: as it grows, until the run ends.
    Log(inspect::LogArgs),
    /// Follow a live run: its stages' status, turns, tokens, cost and current call, until it ends.
    Watch(inspect::WatchArgs),
    /// Run one agent with a fresh history and print its report.
    Agent(agent::AgentArgs),
    /// Check every pipeline and role orch can see (repo .orch/, user config, built-ins).
    Validate(validate::ValidateArgs),
    /// Print a pipeline's DAG as a Mermaid flowchart.
    Graph(validate::GraphArgs),
    /// Offline demo: a bundled repo with a real bug, fixed by issue-to-pr with the replay model.
    Demo(demo::DemoArgs),
    /// Show the resolved model settings (flags, env, orch.toml) and where each came from.
    Config(config::ConfigArgs),
    /// Replay a recorded run offline (same plan, same base, recorded model turns); report divergences.
    Replay(replay::ReplayArgs),
    /// Measure a pipeline on a task set: per task, run it and a hidden check (`docs/eval.md`); `orch eval import humaneval` makes a task set.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Eval(eval::EvalArgs),
    /// Push a run's PR branch and open (or update) its pull or merge request.
    Publish(publish::PublishArgs),
    /// Turn a published run's pull request feedback (changes requested, open threads, failing checks) into one more round, pushed and summarised (docs/forge.md).
    React(react::ReactArgs),
    /// Remove the worktrees of runs that are not running; with --older-than, whole old runs.
    Gc(gc::GcArgs),
    /// Review the lessons runs remember (refs/orch/memory): list, show, accept, reject, edit, forget, log, add.
    Memory(memory::MemoryArgs),
    /// Set up a development environment: detect, plan, confirm, run, verify, report (docs/setup.md).
    Setup(setup::SetupArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(completions::CompletionsArgs),
    /// Run one stage of a distributed run through its git remote: fetch, claim, run, push (`docs/distributed.md`).
    Stage(worker::StageArgs),
    /// Allow or deny a tool call a live run waits on (a role's `ask` rule); without --allow/--deny, list the pending asks.
    Answer(answer::AnswerArgs),
    /// Send a note to a running or pending stage of a live run: its next model turn receives it as a user message.
    Guide(guide::GuideArgs),
    /// Write a pipeline as a workflow of another engine: `github-actions` or `argo`, one job per stage running `orch stage`.
    Export(export::ExportArgs),
    /// Serve a local web page of the repository's runs: live DAG, stage diffs and logs, the CLI's actions on buttons (docs/ui.md).
    Ui(ui::UiArgs),
}

impl Command {
    /// Whether the command talks to a forge (`run --issue github:…`,
    /// `publish`), so `main` asks `gh auth token` before it registers the
    /// process's secrets.
    pub fn needs_forge_token(&self) -> bool {
        match self {
            Command::Run(a) => a.issue.starts_with("github:"),
            Command::Publish(_) | Command::React(_) => true,
            _ => false,
        }
    }
}

/// The variables of [`crate::environment::VARS`] from this process's
/// environment, for `main` to install before anything else runs: the one
/// place the library's environment settings are read.
pub fn read_environment() -> crate::environment::Environment {
    crate::environment::Environment::read(&|k| std::env::var_os(k))
}

/// Runs a parsed command line; returns the exit code for a finished command.
/// A closed stdout ends a command normally: `Ok(exit::OK)`, never an error.
pub async fn dispatch(cli: Cli) -> Result<i32, CliError> {
    crate::distributed::runref::install_run_ref_sink();
    match run_command(cli.command).await {
        Err(CliError::StdoutClosed) => Ok(exit::OK),
        other => other,
    }
}

async fn run_command(command: Command) -> Result<i32, CliError> {
    match command {
        Command::Run(a) => run::cmd_run(a).await,
        Command::Agent(a) => agent::cmd_agent(a).await,
        Command::Resume(a) => resume::cmd_resume(a).await,
        Command::Rollback(a) => resume::cmd_rollback(a).await,
        Command::Runs(a) => inspect::cmd_runs(a),
        Command::Show(a) => inspect::cmd_show(a),
        Command::Review(a) => inspect::cmd_review(a),
        Command::Diff(a) => inspect::cmd_diff(a),
        Command::Log(a) => inspect::cmd_log(a),
        Command::Watch(a) => inspect::cmd_watch(a),
        Command::Validate(a) => validate::cmd_validate(a),
        Command::Graph(a) => validate::cmd_graph(a),
        Command::Demo(a) => demo::cmd_demo(a).await,
        Command::Config(a) => config::cmd_config(a),
        Command::Eval(a) => eval::cmd_eval(a).await,
        Command::Gc(a) => gc::cmd_gc(a),
        Command::Publish(a) => publish::cmd_publish(a).await,
        Command::React(a) => react::cmd_react(a).await,
        Command::Memory(a) => memory::cmd_memory(a),
        Command::Completions(a) => {
            completions::cmd_completions(a, <Cli as clap::CommandFactory>::command())
        }
        Command::Replay(a) => replay::cmd_replay(a).await,
        Command::Stage(a) => worker::cmd_stage(a).await,
        Command::Export(a) => export::cmd_export(a),
        Command::Answer(a) => answer::cmd_answer(a),
        Command::Guide(a) => guide::cmd_guide(a),
        Command::Setup(a) => setup::cmd_setup(a).await,
        Command::Ui(a) => ui::cmd_ui(a).await,
    }
}
