//! `orch answer`: allow or deny a tool call a live run waits on (an `ask`
//! of a role's `ask` rule), through the run's control channel — the same
//! code `orch ui`'s buttons call ([`crate::runlog::control`]).

use super::error::CliError;
use super::output::{Out, ignore_closed};
use super::record::resolve_run_id;
use crate::exit;
use crate::runlog::control::{self, PendingAsk};
use std::path::PathBuf;

/// Arguments of `orch answer`.
#[derive(Debug, clap::Args)]
pub struct AnswerArgs {
    /// The run (`last` is the newest)
    pub run: String,
    /// The ask's id (without --allow/--deny, `orch answer RUN` lists the pending ones); may be left out when the run waits on one ask only
    pub ask: Option<String>,
    /// Let the call run
    #[arg(long, conflicts_with = "deny")]
    pub allow: bool,
    /// Refuse it: the model is told the user denied it
    #[arg(long)]
    pub deny: bool,
    /// Who answers, for the action log
    #[arg(long, default_value = "cli")]
    pub by: String,
    /// The repository the run belongs to
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Print JSON on stdout
    #[arg(long)]
    pub json: bool,
}

pub(super) fn cmd_answer(args: AnswerArgs) -> Result<i32, CliError> {
    let run_id = resolve_run_id(&args.repo, &args.run)?;
    let info = crate::git::open_repo(&args.repo)?;
    let root = crate::runlog::RunDir::open(&info.common_dir, run_id.as_str())?.root;
    let pending = control::pending_asks(&root);
    if !args.allow && !args.deny {
        return list(run_id.as_str(), &pending, args.json);
    }
    let id = match (&args.ask, pending.as_slice()) {
        (Some(id), _) => id.clone(),
        (None, [one]) => one.id.clone(),
        (None, []) => {
            return Err(CliError::Invalid(format!(
                "failed to answer run `{run_id}`: it waits on no ask{}",
                if crate::runlog::run_is_live(&root) {
                    ""
                } else {
                    " (it is not running)"
                }
            )));
        }
        (None, many) => {
            let ids: Vec<&str> = many.iter().map(|a| a.id.as_str()).collect();
            return Err(CliError::Invalid(format!(
                "failed to answer run `{run_id}`: it waits on {} asks ({}); name one: `orch answer {run_id} ID --allow`",
                ids.len(),
                ids.join(", ")
            )));
        }
    };
    let ask = pending.iter().find(|a| a.id == id).cloned();
    let answer = control::answer_ask(&root, &id, args.allow, &args.by)?;
    let mut out = Out::stdout();
    if args.json {
        let value = serde_json::json!({
            "run_id": run_id.as_str(),
            "id": answer.id,
            "allow": answer.allow,
            "by": answer.by,
            "at": answer.at,
            "stage": ask.as_ref().map(|a| a.stage.as_str()),
            "command": ask.as_ref().map(|a| a.command.as_str()),
        });
        ignore_closed(writeln!(out, "{value}").and_then(|()| out.finish()))?;
        return Ok(exit::OK);
    }
    write!(
        out,
        "ask {} of run {run_id}: {}",
        answer.id,
        if answer.allow { "allowed" } else { "denied" }
    )?;
    if let Some(a) = &ask {
        write!(out, " (stage `{}`: {} `", a.stage, a.tool)?;
        out.untrusted(&crate::text::one_line(&a.command, 80))?;
        write!(out, "`)")?;
    }
    writeln!(out)?;
    ignore_closed(out.finish())?;
    Ok(exit::OK)
}

/// Prints the pending asks (none: says so).
fn list(run: &str, pending: &[PendingAsk], json: bool) -> Result<i32, CliError> {
    let mut out = Out::stdout();
    if json {
        let value = serde_json::to_string(pending).unwrap_or_else(|_| "[]".to_owned());
        ignore_closed(writeln!(out, "{value}").and_then(|()| out.finish()))?;
        return Ok(exit::OK);
    }
    if pending.is_empty() {
        writeln!(out, "run {run} waits on no ask")?;
    }
    for a in pending {
        write!(out, "{}  {}  {}  `", a.id, a.stage, a.tool)?;
        out.untrusted(&crate::text::one_line(&a.command, 80))?;
        write!(out, "`  ({}; since {})", a.why, a.created)?;
        writeln!(out)?;
    }
    ignore_closed(out.finish())?;
    Ok(exit::OK)
}
