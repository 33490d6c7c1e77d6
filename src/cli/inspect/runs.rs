//! `orch runs`: the runs of a repository, newest first.

use crate::cli::error::CliError;
use crate::cli::output::Out;
use crate::exit;
use crate::git;
use crate::runlog;
use std::path::PathBuf;

/// Arguments of `orch runs`.
#[derive(Debug, clap::Args)]
pub struct RunsArgs {
    /// The repository
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// At most this many runs
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// A JSON array, newest first
    #[arg(long)]
    pub json: bool,
}

/// A compact age like `3m`, `5h`, `2d`.
fn age(created: &str) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(created) else {
        return "?".into();
    };
    let secs = (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// `orch runs`.
pub(in crate::cli) fn cmd_runs(args: RunsArgs) -> Result<i32, CliError> {
    let info = match git::open_repo(&args.repo) {
        // No commit, so no run: nothing to list, not a failure.
        Err(git::GitError::NoCommits { path }) => {
            let mut out = Out::stdout();
            if args.json {
                writeln!(out, "[]")?;
            } else {
                writeln!(out, "no runs in {} (it has no commits yet)", path.display())?;
            }
            out.finish()?;
            return Ok(exit::OK);
        }
        other => other?,
    };
    let mut rows = Vec::new();
    for id in runlog::list_run_ids(&info.common_dir)
        .into_iter()
        .take(args.limit)
    {
        let Ok(dir) = runlog::RunDir::open(&info.common_dir, &id) else {
            continue;
        };
        match dir.read_state() {
            // A `running` run whose lock no live process holds is shown as
            // the interrupted run it is.
            Ok(s) => rows.push(runlog::as_shown(&dir, s)),
            Err(e) => crate::ui::status_line(&format!("warning: failed to {e}")),
        }
    }
    let mut out = Out::stdout();
    if args.json {
        let arr: Vec<_> = rows
            .iter()
            .map(|s| {
                serde_json::json!({
                    "run_id": s.run_id, "pipeline": s.pipeline, "status": s.status.as_str(),
                    "created": s.created, "tokens": s.tokens().total(), "model": s.model,
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::Value::Array(arr))?;
        out.finish()?;
        return Ok(exit::OK);
    }
    if rows.is_empty() {
        writeln!(out, "no runs in {}", info.workdir.display())?;
        out.finish()?;
        return Ok(exit::OK);
    }
    // The id column fits the longest id plus two spaces (older records hold
    // shorter ids than new ones).
    let id_width = rows
        .iter()
        .map(|s| s.run_id.as_str().len())
        .max()
        .unwrap_or(0)
        .max(20)
        + 2;
    writeln!(
        out,
        "{:<id_width$} {:<14} {:<12} {:>5} {:>9}  model",
        "run", "pipeline", "status", "age", "tokens"
    )?;
    for s in rows {
        out.untrusted(&format!(
            "{:<id_width$} {:<14} {:<12} {:>5} {:>9}  {}\n",
            s.run_id,
            s.pipeline,
            s.status.as_str(),
            age(&s.created),
            s.tokens().total(),
            s.model
        ))?;
    }
    out.finish()?;
    Ok(exit::OK)
}
