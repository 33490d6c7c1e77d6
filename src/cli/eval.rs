//! `orch eval`: run a pipeline on every task of a task set and report how
//! many runs its hidden checks call solved; `--compare A B` measures two
//! pipelines on the same tasks side by side (see `docs/eval.md`).

use super::args::{LimitArgs, ModelArgs, SamplingArgs};
use super::error::CliError;
use super::output::{Out, ignore_closed};
use crate::catalog::Catalog;
use crate::eval::{
    CompareReport, EvalError, EvalOptions, EvalReport, RunRow, Side, TaskSet, default_out_dir,
    run_eval, side_letter,
};
use crate::exit;
use crate::ui::Ui;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The pipeline a task set may carry for itself, used when `--pipeline` is not given.
const TASK_SET_PIPELINE: &str = "eval.yaml";
/// The pipeline when neither `--pipeline` nor the task set names one.
const FALLBACK_PIPELINE: &str = "issue-to-pr";

/// Arguments of `orch eval`.
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// The task set: a directory of task directories (each with repo/ or repo.bundle, issue.md, check.sh), or one task directory
    #[arg(long, value_name = "DIR", required = true)]
    pub tasks: Option<PathBuf>,
    /// The pipeline of every run: a name or a .yaml path (default: the task set's eval.yaml, else issue-to-pr)
    #[arg(long, value_name = "PIPELINE")]
    pub pipeline: Option<String>,
    /// Measure two pipelines (names or .yaml paths) on the same tasks, runs and model flags, and print them side by side
    #[arg(long, num_args = 2, value_names = ["A", "B"], visible_alias = "ab", conflicts_with = "pipeline")]
    pub compare: Vec<String>,
    /// Runs per task, each on a fresh copy of its repository
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub runs: u32,
    /// Run only this task (repeatable)
    #[arg(long = "task", value_name = "NAME")]
    pub only: Vec<String>,
    /// Offline scripted model: each task's replay.NAME.json (the fixtures ship `perfect` and `broken`)
    #[arg(long, value_name = "NAME", conflicts_with_all = ["replay", "base_url", "model", "profile"])]
    pub scripted: Option<String>,
    /// Model settings, passed to every `orch run`.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Budgets and compaction, per `orch run`.
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Allow commands that a role's `ask` rules would ask about (passed to every `orch run`)
    #[arg(long)]
    pub yes: bool,
    /// Seconds one `orch run` may take before it is killed (the task counts as not solved)
    #[arg(long, value_name = "SECS", default_value_t = crate::eval::DEFAULT_RUN_TIMEOUT.as_secs())]
    pub run_timeout: u64,
    /// Seconds one check.sh may take before it is killed (the task counts as not solved)
    #[arg(long, value_name = "SECS", default_value_t = crate::eval::DEFAULT_CHECK_TIMEOUT.as_secs())]
    pub check_timeout: u64,
    /// Exit 1 when less than PCT percent of the runs are solved
    #[arg(long, value_name = "PCT")]
    pub fail_under: Option<f64>,
    /// Directory to append results to (evals.jsonl); default: .git/orch/evals of the current repository, else $XDG_STATE_HOME/orch/evals or ~/.local/state/orch/evals
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Keep each run's work directory (repository, run record, checkout) and print its path
    #[arg(long)]
    pub keep: bool,
    /// Print one JSON object (format orch-eval/1) on stdout instead of the table
    #[arg(long)]
    pub json: bool,
    /// Memory for the runs (propose or auto-accept): every run starts from the lessons earlier runs of this eval left (a shared refs/orch/memory); default: runs use no memory
    #[arg(long, value_enum, value_name = "MODE")]
    pub memory: Option<crate::memory::MemoryMode>,
    /// Extra flags for every `orch run`, after `--` (e.g. `-- --max-parallel 2`)
    #[arg(last = true, value_name = "RUN_FLAGS")]
    pub run_flags: Vec<String>,
    /// `orch eval import …` instead of a measurement.
    #[command(subcommand)]
    pub command: Option<super::eval_import::EvalCommand>,
}

/// `orch eval`.
pub(super) async fn cmd_eval(args: EvalArgs) -> Result<i32, CliError> {
    if let Some(cmd) = args.command {
        return super::eval_import::cmd_eval_command(cmd).await;
    }
    let Some(tasks_dir) = args.tasks.as_deref() else {
        return Err(CliError::Invalid("orch eval needs --tasks DIR".to_owned()));
    };
    if let Some(p) = args.fail_under
        && !(0.0..=100.0).contains(&p)
    {
        return Err(CliError::Invalid(format!(
            "failed to use --fail-under {p}: expected a percentage from 0 to 100"
        )));
    }
    for (flag, secs) in [
        ("--run-timeout", args.run_timeout),
        ("--check-timeout", args.check_timeout),
    ] {
        if secs == 0 {
            return Err(CliError::Invalid(format!(
                "failed to use {flag} 0: expected at least 1 second"
            )));
        }
    }
    if let Some(name) = &args.scripted
        && (name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
    {
        return Err(CliError::Invalid(format!(
            "failed to use --scripted `{name}`: expected a name of letters, digits, `-` or `_` (it picks replay.NAME.json in each task)"
        )));
    }
    // Only validates the limit flags; each `orch run` applies them itself.
    args.limits.to_limits(None)?;
    let tasks =
        TaskSet::load(tasks_dir, args.scripted.as_deref(), &args.only).map_err(eval_error)?;
    let pipelines = if args.compare.is_empty() {
        vec![choose_pipeline(args.pipeline.as_deref(), &tasks.dir)?]
    } else {
        args.compare
            .iter()
            .map(|p| choose_pipeline(Some(p), &tasks.dir))
            .collect::<Result<_, _>>()?
    };
    // Check each pipeline once, so a typo fails here rather than in every run.
    let catalog = Catalog::load(None)?;
    for pipeline in &pipelines {
        catalog.pipeline(pipeline)?;
    }
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::Internal(format!("failed to read the current directory: {e}")))?;
    let out_dir = match &args.out {
        Some(dir) => absolute(dir)?,
        None => {
            let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
            default_out_dir(&cwd, &env).ok_or_else(|| {
                CliError::Invalid(
                    "failed to choose where to write the eval results: not in a git repository and neither XDG_STATE_HOME nor HOME is set; pass --out DIR".to_owned(),
                )
            })?
        }
    };
    let orch_bin = std::env::current_exe()
        .map_err(|e| CliError::Internal(format!("failed to find the running orch binary: {e}")))?;
    let model_label = args.scripted.as_ref().map(|name| {
        format!(
            "scripted: replay.{name}.json of each task (recorded responses; no model is called)"
        )
    });
    let memory = args
        .memory
        .filter(|mode| *mode != crate::memory::MemoryMode::Off);
    // Each side's memory store lives as long as the eval; every run of that
    // side fetches from and pushes to it.
    let mut stores = Vec::new();
    let mut sides = Vec::new();
    for pipeline in pipelines {
        let memory_store = match memory {
            Some(_) => {
                let dir = memory_store()?;
                let path = dir.path().to_path_buf();
                stores.push(dir);
                Some(path)
            }
            None => None,
        };
        sides.push(Side {
            pipeline,
            memory_store,
        });
    }
    let mut run_args = run_flags(&args)?;
    match memory {
        Some(mode) => run_args.extend(["--memory".to_owned(), mode.as_str().to_owned()]),
        None => run_args.push("--no-memory".to_owned()),
    }
    let opts = EvalOptions {
        run_args,
        tasks,
        orch_bin,
        sides,
        runs: args.runs,
        run_timeout: Duration::from_secs(args.run_timeout),
        check_timeout: Duration::from_secs(args.check_timeout),
        keep: args.keep,
        out_dir,
        model_label,
    };
    let ui = Ui::new(false);
    let reports = match run_eval(&opts, &ui).await {
        Ok(r) => r,
        Err(e @ EvalError::Git { .. }) => {
            ui.line(&format!("error: {e}"));
            return Ok(exit::GIT);
        }
        Err(e) => return Err(eval_error(e)),
    };
    drop(stores);
    let mut out = Out::stdout();
    let printed = match reports.as_slice() {
        [a, b] => {
            let compared = CompareReport::new(a.clone(), b.clone());
            if args.json {
                json_line(&mut out, &compared)
            } else {
                super::eval_compare::print_table(&mut out, &compared)
            }
        }
        [report] if args.json => json_line(&mut out, report),
        [report] => print_table(&mut out, report),
        _ => Err(CliError::Internal(format!(
            "failed to report the eval: {} reports for {} pipelines",
            reports.len(),
            opts.sides.len()
        ))),
    };
    ignore_closed(printed.and_then(|()| out.finish()))?;
    if reports.iter().any(|r| r.interrupted) {
        return Ok(exit::INTERRUPTED);
    }
    // `--fail-under` holds for each pipeline: a comparison fails when
    // either side is under it.
    let mut under = false;
    for (i, r) in reports.iter().enumerate() {
        if let Some(pct) = args.fail_under
            && r.total.solved_pct < pct
        {
            let side = if reports.len() > 1 {
                format!("pipeline {} ({}): ", side_letter(i), r.pipeline)
            } else {
                String::new()
            };
            ui.line(&format!(
                "orch eval: {side}{:.1}% solved is under --fail-under {pct}",
                r.total.solved_pct
            ));
            under = true;
        }
    }
    Ok(if under { exit::STAGE_FAILED } else { exit::OK })
}

/// A new bare repository for one side's shared memory ref.
fn memory_store() -> Result<tempfile::TempDir, CliError> {
    let fail =
        |e: String| CliError::Internal(format!("failed to create the eval's memory store: {e}"));
    let dir = tempfile::Builder::new()
        .prefix("orch-eval-memory-")
        .tempdir()
        .map_err(|e| fail(e.to_string()))?;
    git2::Repository::init_bare(dir.path()).map_err(|e| fail(e.to_string()))?;
    Ok(dir)
}

fn json_line<T: serde::Serialize>(out: &mut Out, value: &T) -> Result<(), CliError> {
    serde_json::to_string(value)
        .map_err(|e| CliError::Internal(format!("failed to encode the report: {e}")))
        .and_then(|j| writeln!(out, "{j}"))
}

fn eval_error(e: EvalError) -> CliError {
    match e {
        EvalError::BadTask { .. }
        | EvalError::UnknownTask { .. }
        | EvalError::RunRejected { .. } => CliError::Invalid(e.to_string()),
        EvalError::Git { .. } | EvalError::Io { .. } => CliError::Internal(e.to_string()),
    }
}

/// `--pipeline`, else the task set's own `eval.yaml`, else `issue-to-pr`; a
/// path is made absolute, as every `orch run` starts in its own directory.
fn choose_pipeline(given: Option<&str>, tasks_dir: &Path) -> Result<String, CliError> {
    let own = tasks_dir.join(TASK_SET_PIPELINE);
    match given {
        Some(p) if looks_like_path(p) => Ok(absolute(Path::new(p))?.display().to_string()),
        Some(p) => Ok(p.to_owned()),
        None if own.is_file() => Ok(own.display().to_string()),
        None => Ok(FALLBACK_PIPELINE.to_owned()),
    }
}

/// The same test `Catalog::pipeline` uses to tell a path from a name.
fn looks_like_path(p: &str) -> bool {
    p.contains('/') || p.ends_with(".yaml") || p.ends_with(".yml")
}

fn absolute(path: &Path) -> Result<PathBuf, CliError> {
    std::path::absolute(path)
        .map_err(|e| CliError::Invalid(format!("failed to use the path {}: {e}", path.display())))
}

/// The model, limit and extra flags for every `orch run`. The structs are
/// taken apart field by field, so a flag added to them fails to compile here
/// until it is forwarded, instead of being dropped silently.
fn run_flags(args: &EvalArgs) -> Result<Vec<String>, CliError> {
    let ModelArgs {
        provider,
        base_url,
        model,
        replay,
        profile,
        no_stream,
        sampling,
    } = &args.model;
    let SamplingArgs {
        temperature,
        seed,
        max_output_tokens,
        tool_choice,
    } = sampling;
    let LimitArgs {
        max_tokens,
        max_time,
        max_cost,
        compact_at,
        context_window,
    } = &args.limits;
    let mut out = Vec::new();
    let mut pair = |flag: &str, value: Option<String>| {
        if let Some(v) = value {
            out.push(flag.to_owned());
            out.push(v);
        }
    };
    pair("--provider", provider.clone());
    pair("--base-url", base_url.clone());
    pair("--model", model.clone());
    pair(
        "--replay",
        replay
            .as_deref()
            .map(absolute)
            .transpose()?
            .map(|p| p.display().to_string()),
    );
    pair("--profile", profile.clone());
    pair("--temperature", temperature.map(|v| v.to_string()));
    pair("--seed", seed.map(|v| v.to_string()));
    pair(
        "--max-output-tokens",
        max_output_tokens.map(|v| v.to_string()),
    );
    pair("--tool-choice", tool_choice.map(|v| v.to_string()));
    pair("--max-tokens", max_tokens.map(|v| v.to_string()));
    pair("--max-time", max_time.map(|v| v.to_string()));
    pair("--max-cost", max_cost.map(|v| v.to_string()));
    pair("--compact-at", compact_at.map(|v| v.to_string()));
    pair("--context-window", context_window.map(|v| v.to_string()));
    if *no_stream {
        out.push("--no-stream".to_owned());
    }
    if args.yes {
        out.push("--yes".to_owned());
    }
    out.extend(args.run_flags.iter().cloned());
    Ok(out)
}

/// The human summary: one line per task run, per-task sums when a task ran
/// more than once, and the total.
fn print_table(out: &mut Out, r: &EvalReport) -> Result<(), CliError> {
    writeln!(
        out,
        "eval {}: pipeline {}, model: {}",
        r.eval_id,
        r.pipeline,
        r.model.as_deref().unwrap_or("unknown")
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "  {:<24} {:>3}  {:<6} {:>5} {:>8} {:>9} {:>7}  stages",
        "task", "run", "solved", "turns", "tokens", "cost", "wall"
    )?;
    for row in &r.results {
        // Skipped stages (rework rounds not needed) are in the JSON only.
        let stages: Vec<String> = row
            .stages
            .iter()
            .filter(|s| s.status != "skipped")
            .map(|s| format!("{}:{}", s.id, s.status))
            .collect();
        writeln!(
            out,
            "  {:<24} {:>3}  {:<6} {:>5} {:>8} {:>9} {:>6.1}s  {}",
            row.task,
            row.run,
            if row.solved { "yes" } else { "no" },
            row.turns,
            row.tokens.total,
            cost(row.cost_usd),
            row.wall_secs,
            if stages.is_empty() {
                "-".to_owned()
            } else {
                stages.join(" ")
            },
        )?;
        if let Some(why) = unsolved_because(row) {
            out.untrusted(&format!("      {why}\n"))?;
        }
        if let Some(dir) = &row.workdir {
            writeln!(out, "      kept: {dir}")?;
        }
    }
    if r.runs_per_task > 1 {
        writeln!(out)?;
        for t in &r.tasks {
            writeln!(out, "  {:<24} solved {}/{}", t.task, t.solved, t.runs)?;
        }
    }
    let t = &r.total;
    writeln!(out)?;
    writeln!(
        out,
        "total: {}/{} runs solved ({:.1}%) over {}; {}, {}, cost {}, {:.1}s{}",
        t.solved,
        t.runs,
        t.solved_pct,
        crate::text::plural(t.tasks as u64, "task", "tasks"),
        crate::text::plural(t.turns, "turn", "turns"),
        crate::text::plural(t.tokens.total, "token", "tokens"),
        cost(t.cost_usd),
        t.wall_secs,
        if r.interrupted { " (interrupted)" } else { "" }
    )?;
    writeln!(out, "results appended to {}", r.results_file)?;
    Ok(())
}

/// Why a run is not solved, with the check's last words (where test runners
/// print the failure); `None` when solved.
pub(super) fn unsolved_because(row: &RunRow) -> Option<String> {
    let reason = row.reason.as_ref()?;
    let detail = row
        .check
        .as_ref()
        .and_then(|c| c.output.lines().rev().find(|l| !l.trim().is_empty()))
        .map(|l| format!(": {}", l.trim()))
        .unwrap_or_default();
    Some(format!("{reason}{detail}"))
}

pub(super) fn cost(usd: Option<f64>) -> String {
    usd.map_or("unknown".to_owned(), |c| format!("${c:.4}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn eval_args(flags: &[&str]) -> EvalArgs {
        let argv = ["orch", "eval", "--tasks", "t"].iter().chain(flags);
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::Eval(a) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sampling_flags_are_forwarded_to_every_run() {
        let args = eval_args(&[
            "--temperature",
            "0",
            "--seed",
            "5",
            "--max-output-tokens",
            "0",
            "--tool-choice",
            "required",
        ]);
        assert_eq!(
            run_flags(&args).unwrap(),
            [
                "--temperature",
                "0",
                "--seed",
                "5",
                "--max-output-tokens",
                "0",
                "--tool-choice",
                "required"
            ]
        );
        assert!(run_flags(&eval_args(&[])).unwrap().is_empty());
    }

    #[test]
    fn compare_takes_two_pipelines_and_not_pipeline() {
        assert_eq!(
            eval_args(&["--compare", "a", "b.yaml"]).compare,
            ["a", "b.yaml"]
        );
        assert_eq!(eval_args(&["--ab", "a", "b"]).compare, ["a", "b"]);
        assert!(eval_args(&[]).compare.is_empty());
        let parse = |flags: &[&str]| {
            let argv = ["orch", "eval", "--tasks", "t"].iter().chain(flags);
            crate::cli::Cli::try_parse_from(argv).map(|_| ())
        };
        assert!(parse(&["--compare", "a"]).is_err());
        assert!(parse(&["--compare", "a", "b", "--pipeline", "c"]).is_err());
    }
}
