//! `orch setup "<goal>"`: the environment-setup agent (see
//! [`crate::setup`] and `docs/setup.md`). Works outside any repository: the
//! record lives under the user's state dir, the role comes from the
//! catalog (a repository's `.orch/roles/setup.md` or the user's override
//! the built-in), house rules from `setup.md` files.
//!
//! Exit codes: 0 the plan was printed (`--plan-only`) or every step was
//! verified; 1 a step failed after its retry, or the model made no plan;
//! 9 steps that change the system were not confirmed (headless without
//! `--yes`, or the user said no or quit) — nothing unconfirmed ran; 2, 3, 5
//! as everywhere.

use super::args::ModelArgs;
use super::error::CliError;
use super::model::choose_for_repo;
use super::output::{Out, ignore_closed};
use crate::catalog::Catalog;
use crate::setup::{self, Confirm, Console, SetupEnd, SetupOptions};
use std::io::{BufRead, Write};
use std::path::PathBuf;

/// Arguments of `orch setup`.
#[derive(Debug, clap::Args)]
pub struct SetupArgs {
    /// What to set up, in plain words (e.g. "a python virtualenv in ./venv with requests")
    #[arg(required_unless_present_any = ["resume", "lane"])]
    pub goal: Option<String>,
    /// Only reconnaissance runs; print the plan (and save plan.json), change nothing
    #[arg(long)]
    pub plan_only: bool,
    /// Run project-local (install) steps without a terminal (CI); `ask_user` is answered yes. System steps (risk `system`, `sudo`) are not covered: they need --yes-system
    #[arg(long)]
    pub yes: bool,
    /// Also run system steps (risk `system`, anything with `sudo`, which runs outside the sandbox) without a terminal; implies --yes. Without it, on a terminal each system step is confirmed on its own
    #[arg(long)]
    pub yes_system: bool,
    /// Continue a setup from its first unverified step, with the model settings it recorded (a model flag given now wins)
    #[arg(long, value_name = "ID", conflicts_with = "goal")]
    pub resume: Option<String>,
    /// Prepare a scratch lane of the repository and save the verified
    /// install steps as its lane setup (`.orch/setup.sh`)
    #[arg(long, conflicts_with_all = ["resume", "plan_only"])]
    pub lane: bool,
    /// The repository `--lane` prepares (default: the current directory's)
    #[arg(long, value_name = "DIR", requires = "lane")]
    pub repo: Option<PathBuf>,
    /// Model settings.
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Runs `orch setup`.
pub(super) async fn cmd_setup(args: SetupArgs) -> Result<i32, CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::Internal(format!("failed to read the current directory: {e}")))?;
    let lane = if args.lane {
        let at = args.repo.clone().unwrap_or_else(|| cwd.clone());
        let lane = setup::ScratchLane::take(&at)
            .map_err(|e| CliError::Invalid(format!("orch setup --lane: {e}")))?;
        Some(lane)
    } else {
        None
    };
    let repo = match &lane {
        Some(l) => Some(l.workdir.clone()),
        None => cwd
            .ancestors()
            .find(|d| d.join(".git").exists())
            .map(PathBuf::from),
    };
    let catalog = Catalog::load(repo.as_deref())?;
    let role = catalog.role("setup")?;
    // A resume talks to the model the setup recorded, flag by flag unless
    // a flag given now says otherwise.
    let recorded = args.resume.as_deref().and_then(setup::recorded_model);
    let model_args = merged(&args.model, recorded.as_ref());
    let model_flags = flags_of(&model_args, &cwd);
    let chosen = choose_for_repo(&model_args, repo.as_deref())?;
    // As `orch run` does: a dead server or a refused key fails at once (exit
    // 3), before any round, not after the client's retries.
    if let Err(e) = super::preflight::check(chosen.model.as_ref()).await {
        if let Some(lane) = lane {
            let _ = lane.retire();
        }
        return Err(e);
    }
    let goal = match (&args.goal, &lane) {
        (Some(g), _) => g.clone(),
        (None, Some(_)) => DEFAULT_LANE_GOAL.to_owned(),
        (None, None) => String::new(),
    };
    let rerun = lane.as_ref().map(|_| {
        let at = args.repo.clone().unwrap_or_else(|| cwd.clone());
        let at = std::path::absolute(&at).unwrap_or(at);
        let mut before = format!(
            "orch setup --lane --repo {}",
            setup::shell_word(&at.display().to_string())
        );
        for a in model_flags.to_args() {
            before.push(' ');
            before.push_str(&a);
        }
        let after = args
            .goal
            .as_deref()
            .map(|g| format!(" {}", setup::shell_word(g)))
            .unwrap_or_default();
        (before, after)
    });
    let opts = SetupOptions {
        goal,
        house_rules: setup::house_rules(repo.as_deref().unwrap_or(&cwd)),
        cwd: lane.as_ref().map_or(cwd, |l| l.path().to_path_buf()),
        lane: lane.is_some(),
        plan_only: args.plan_only,
        yes: args.yes || args.yes_system,
        yes_system: args.yes_system,
        model: Some(model_flags),
        rerun,
        interactive: crate::policy::detect_interactive(),
        prompt: role.prompt.clone(),
        max_rounds: role.max_turns.clamp(1, setup::MAX_ROUNDS),
        resume: args.resume.clone(),
        secrets: chosen.secrets.clone(),
        sampling: role.sampling,
        base_tool_choice: chosen.sampling.and_then(|s| s.tool_choice),
    };
    let console = TermConsole;
    let outcome = setup::run_setup(opts, chosen.model, &console).await;
    let outcome = match (outcome, lane) {
        (Ok(o), Some(lane)) => {
            let saved = match (&o.end, &o.plan) {
                (SetupEnd::Done, Some(plan)) => {
                    Some(setup::save_lane_setup(&lane.workdir, &o.id, plan))
                }
                _ => None,
            };
            let retired = lane.retire();
            match saved {
                Some(Ok(saved)) => console.say(&saved_lines(&saved)),
                Some(Err(e)) => {
                    return Err(CliError::Internal(format!(
                        "setup {}: failed to save the lane setup: {e}",
                        o.id
                    )));
                }
                None => {}
            }
            if let Err(e) = retired {
                crate::ui::status_line(&format!("setup {}: the scratch lane: {e}", o.id));
            }
            Ok(o)
        }
        (o, lane) => {
            if let Some(lane) = lane {
                let _ = lane.retire();
            }
            o
        }
    };
    let outcome = match outcome {
        Ok(o) => o,
        Err(setup::SetupError::Model(e)) => return Err(CliError::Model(e)),
        Err(setup::SetupError::Invalid(e)) => {
            return Err(CliError::Invalid(format!("failed to resume: {e}")));
        }
        Err(setup::SetupError::Other(e)) if args.resume.is_some() && e.starts_with("no setup") => {
            return Err(CliError::Invalid(format!("failed to resume: {e}")));
        }
        Err(setup::SetupError::Other(e)) => return Err(CliError::Internal(e)),
    };
    let (code, line) = match &outcome.end {
        SetupEnd::Planned | SetupEnd::Done => (crate::exit::OK, None),
        SetupEnd::NotConfirmed(why) => (
            crate::exit::NOT_CONFIRMED,
            Some(format!("setup {}: not confirmed: {why}", outcome.id)),
        ),
        SetupEnd::Failed(why) => (
            crate::exit::STAGE_FAILED,
            Some(format!(
                "setup {}: failed: {why} (record: {}; `{}` {})",
                outcome.id,
                outcome.dir.display(),
                outcome.resume_hint,
                if args.lane {
                    "runs it again"
                } else {
                    "continues"
                }
            )),
        ),
    };
    if let Some(line) = line {
        crate::ui::status_line(&line);
    }
    Ok(code)
}

/// The model flags given now, each missing one taken from `recorded` (a
/// flag naming a model drops the recorded replay, and `--replay` the
/// recorded server).
fn merged(given: &ModelArgs, recorded: Option<&setup::ModelFlags>) -> ModelArgs {
    let Some(r) = recorded else {
        return given.clone();
    };
    let mut m = given.clone();
    let names_server = given.base_url.is_some() || given.model.is_some();
    if given.replay.is_none() && !names_server {
        m.replay = r.replay.clone();
    }
    if given.replay.is_none() {
        m.base_url = m.base_url.or_else(|| r.base_url.clone());
        m.model = m.model.or_else(|| r.model.clone());
    }
    m.profile = m.profile.or_else(|| r.profile.clone());
    m.no_stream |= r.no_stream;
    let s = &mut m.sampling;
    s.temperature = s.temperature.or(r.temperature);
    s.seed = s.seed.or(r.seed);
    s.max_output_tokens = s.max_output_tokens.or(r.max_output_tokens);
    s.tool_choice = s.tool_choice.or(r.tool_choice);
    m
}

/// What to record of the model settings: the flags, else the
/// `ORCH_BASE_URL`/`ORCH_MODEL`/`ORCH_PROFILE` they came from (never the
/// key); the replay file made absolute.
fn flags_of(m: &ModelArgs, cwd: &std::path::Path) -> setup::ModelFlags {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let replay = m.replay_file().map(|f| cwd.join(f));
    let from_env = replay.is_none();
    setup::ModelFlags {
        base_url: m
            .base_url
            .clone()
            .or_else(|| from_env.then(|| env("ORCH_BASE_URL")).flatten()),
        model: match &replay {
            Some(_) => None,
            None => m.model.clone().or_else(|| env("ORCH_MODEL")),
        },
        replay,
        profile: m.profile.clone().or_else(|| env("ORCH_PROFILE")),
        no_stream: m.no_stream,
        temperature: m.sampling.temperature,
        seed: m.sampling.seed,
        max_output_tokens: m.sampling.max_output_tokens,
        tool_choice: m.sampling.tool_choice,
    }
}

/// The goal of `orch setup --lane` without one.
const DEFAULT_LANE_GOAL: &str = "install this project's dependencies";

/// What `--lane` saved, for the user.
fn saved_lines(saved: &setup::lane::Saved) -> String {
    let mut lines = match &saved.path {
        Some(p) => format!(
            "lane setup saved to {}: {}\nthe next lanes run it (cached per lockfile state) unless a `setup:` or `[setup] command` is set",
            p.display(),
            saved.command
        ),
        None => "lane setup: the plan had no install step; nothing saved".to_owned(),
    };
    for l in &saved.left_out {
        lines.push_str(&format!("\nnot saved: {l}"));
    }
    lines
}

/// Results on stdout (flushed per message, so they interleave with
/// prompts), questions on `/dev/tty` with the prompt on stderr.
struct TermConsole;

impl Console for TermConsole {
    fn say(&self, text: &str) {
        let mut out = Out::stdout();
        let printed = out
            .text(text)
            .and_then(|()| out.text("\n"))
            .and_then(|()| out.finish());
        // A closed stdout does not stop an installation half-way; the
        // record has everything.
        let _ = ignore_closed(printed);
    }

    fn confirm(&self, prompt: &str) -> Option<Confirm> {
        loop {
            let answer = ask_tty(prompt)?;
            return Some(match answer.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => Confirm::Yes,
                "n" | "no" | "" => Confirm::No,
                "a" | "all" => Confirm::All,
                "q" | "quit" => Confirm::Quit,
                _ => continue,
            });
        }
    }

    fn ask(&self, question: &str) -> Option<String> {
        ask_tty(&format!("{question} ")).map(|a| a.trim().to_owned())
    }
}

fn ask_tty(prompt: &str) -> Option<String> {
    let tty = std::fs::File::open("/dev/tty").ok()?;
    let mut stderr = std::io::stderr().lock();
    write!(stderr, "orch: {prompt} ")
        .and_then(|()| stderr.flush())
        .ok()?;
    let mut line = String::new();
    std::io::BufReader::new(tty).read_line(&mut line).ok()?;
    Some(line)
}
