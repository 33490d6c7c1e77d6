//! `orch log`: a stage's or a subagent's action log, one line per event;
//! with `--follow`, the lines of a live run as they are appended.

use super::render::render_event;
use super::shared::stage;
use crate::cli::error::CliError;
use crate::cli::output::Out;
use crate::cli::record::open;
use crate::exit;
use crate::runlog::StageRecord;
use crate::text::plural;
use std::path::PathBuf;

/// Arguments of `orch log`.
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// The run id (`last` is the newest; left out: the newest, with
    /// --follow the newest running run)
    pub run: Option<String>,
    /// Only this stage, or subagent (`code/explore-1`: its log and its
    /// children's)
    pub stage: Option<String>,
    /// Keep printing lines as they are appended until the run ends, then
    /// exit with the run's exit code (as `orch run` would)
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// The repository
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// The raw JSONL events
    #[arg(long)]
    pub json: bool,
}

/// `orch log`: a stage's action log (`<stage>`), a subagent's
/// (`<stage>/<agent path>`, e.g. `code/explore-1`), or every stage's.
pub(in crate::cli) fn cmd_log(args: LogArgs) -> Result<i32, CliError> {
    if args.follow {
        let root = super::follow::pick_run(&args.repo, args.run.as_deref())?;
        return super::follow::follow_log(&root, args.stage.as_deref(), args.json);
    }
    let (_, root, state) = open(&args.repo, args.run.as_deref().unwrap_or("last"))?;
    let tree = crate::subagent::agent_tree(&root);
    let mut agents = Vec::new();
    flatten(&tree, &mut agents);
    let mut out = Out::stdout();
    if let Some(path) = args.stage.as_deref().filter(|p| p.contains('/')) {
        let file = crate::subagent::agent_dir(&root, path).join("actions.jsonl");
        let text = std::fs::read_to_string(&file).map_err(|e| {
            let known: Vec<&str> = agents.iter().map(|n| n.agent_path.as_str()).collect();
            CliError::Invalid(format!(
                "failed to read the log of subagent `{path}` in run {} ({}: {e}; subagents: {})",
                state.run_id,
                file.display(),
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ))
        })?;
        if args.json {
            out.text(&text)?;
        } else {
            let role = agents
                .iter()
                .find(|n| n.agent_path == path)
                .map_or("?", |n| n.role.as_str());
            out.untrusted(&format!("=== {path} ({role})\n"))?;
            render_lines(&mut out, &text)?;
        }
        out.finish()?;
        return Ok(exit::OK);
    }
    let stages: Vec<&StageRecord> = match &args.stage {
        Some(id) => vec![stage(&state, id)?],
        None => state.stages.iter().collect(),
    };
    for st in stages {
        let path = root.join("stages").join(&st.id).join("actions.jsonl");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if args.json {
            out.text(&text)?;
            continue;
        }
        out.untrusted(&format!("=== {} ({})\n", st.id, st.role))?;
        render_lines(&mut out, &text)?;
        let prefix = format!("{}/", st.id);
        for n in agents.iter().filter(|n| n.agent_path.starts_with(&prefix)) {
            out.untrusted(&format!(
                "  subagent {} ({}) {}, {}, {}: orch log {} {}\n",
                n.agent_path,
                n.role,
                n.status.as_str(),
                plural(u64::from(n.turns), "turn", "turns"),
                plural(n.tokens.total(), "token", "tokens"),
                state.run_id,
                n.agent_path
            ))?;
        }
    }
    out.finish()?;
    Ok(exit::OK)
}

/// Every agent of `tree`, parents before their children.
fn flatten<'a>(
    tree: &'a [crate::subagent::AgentNode],
    out: &mut Vec<&'a crate::subagent::AgentNode>,
) {
    for n in tree {
        out.push(n);
        flatten(&n.children, out);
    }
}

/// Each JSONL line of an action log as one readable line.
fn render_lines(out: &mut Out, text: &str) -> Result<(), CliError> {
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match crate::runlog::event::parse_line(line) {
            Some(ev) => out.untrusted(&format!("{}\n", render_event(&ev)))?,
            None => out.untrusted(&format!(
                "  [unreadable line: {}]\n",
                crate::text::cap_bytes(line, 80)
            ))?,
        }
    }
    Ok(())
}
