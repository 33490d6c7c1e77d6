//! `orch guide`: send a note to a stage of a live run; its next model turn
//! receives it as a user message ("Guidance from …") and its action log
//! records a `guidance` event — the same code `orch ui`'s button calls
//! ([`crate::runlog::control`]).

use super::error::CliError;
use super::output::{Out, ignore_closed};
use super::record::resolve_run_id;
use crate::exit;
use crate::runlog::control;
use std::path::PathBuf;

/// Arguments of `orch guide`.
#[derive(Debug, clap::Args)]
pub struct GuideArgs {
    /// The run (`last` is the newest)
    pub run: String,
    /// The stage (running or pending) the note is for
    pub stage: String,
    /// The note (`-`: read it from stdin)
    pub text: String,
    /// Who sends it, as the model and the action log see it
    #[arg(long, default_value = "the user")]
    pub by: String,
    /// The repository the run belongs to
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Print JSON on stdout
    #[arg(long)]
    pub json: bool,
}

pub(super) fn cmd_guide(args: GuideArgs) -> Result<i32, CliError> {
    let run_id = resolve_run_id(&args.repo, &args.run)?;
    let info = crate::git::open_repo(&args.repo)?;
    let root = crate::runlog::RunDir::open(&info.common_dir, run_id.as_str())?.root;
    let text = if args.text == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| CliError::Invalid(format!("failed to read the note from stdin: {e}")))?;
        s
    } else {
        args.text.clone()
    };
    let note = control::send_guidance(&root, &args.stage, &text, &args.by)?;
    let mut out = Out::stdout();
    if args.json {
        let value = serde_json::json!({
            "run_id": run_id.as_str(),
            "stage": note.stage,
            "id": note.id,
            "by": note.by,
            "created": note.created,
        });
        ignore_closed(writeln!(out, "{value}").and_then(|()| out.finish()))?;
        return Ok(exit::OK);
    }
    writeln!(
        out,
        "guidance {} for stage `{}` of run {run_id}: its next model turn receives it",
        note.id, note.stage
    )?;
    ignore_closed(out.finish())?;
    Ok(exit::OK)
}
