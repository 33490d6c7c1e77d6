//! The table of `orch eval --compare A B`: both pipelines' totals side by
//! side, then one row per task. The numbers are the two sides'
//! [`EvalReport`]s, summed by the same code as a single eval's; this file
//! only lays them out.

use super::error::CliError;
use super::eval::{cost, unsolved_because};
use super::output::Out;
use crate::eval::{CompareReport, EvalReport, Score};

/// Width of the label column of the totals and of the task column.
const LABEL: usize = 24;
/// Width of each side's column.
const COLUMN: usize = 16;

/// How one line of the totals reads a side's value.
type Cell = fn(&EvalReport) -> String;

/// Prints the comparison for a person.
pub(super) fn print_table(out: &mut Out, c: &CompareReport) -> Result<(), CliError> {
    let (a, b) = (&c.a, &c.b);
    writeln!(
        out,
        "eval {}: two pipelines on the same {} × {}, model: {}",
        c.compare_id,
        crate::text::plural(c.tasks.len() as u64, "task", "tasks"),
        crate::text::plural(u64::from(a.runs_per_task), "run", "runs"),
        a.model
            .as_deref()
            .or(b.model.as_deref())
            .unwrap_or("unknown")
    )?;
    writeln!(out, "  A: {}", a.pipeline)?;
    writeln!(out, "  B: {}", b.pipeline)?;
    writeln!(out)?;
    writeln!(out, "  {:<LABEL$} {:<COLUMN$} B", "", "A")?;
    let rows: [(&str, Cell); 9] = [
        ("solved", |r| {
            format!(
                "{}/{} ({:.1}%)",
                r.total.solved, r.total.runs, r.total.solved_pct
            )
        }),
        ("false successes", |r| r.total.false_successes.to_string()),
        ("tokens", |r| r.total.tokens.total.to_string()),
        ("  prompt", |r| r.total.tokens.prompt.to_string()),
        ("  completion", |r| r.total.tokens.completion.to_string()),
        ("turns", |r| r.total.turns.to_string()),
        ("cost", |r| cost(r.total.cost_usd)),
        ("run time", |r| format!("{:.1}s", r.total.run_secs)),
        ("wall time", |r| format!("{:.1}s", r.total.wall_secs)),
    ];
    for (label, value) in rows {
        writeln!(out, "  {label:<LABEL$} {:<COLUMN$} {}", value(a), value(b))?;
    }
    writeln!(out)?;
    writeln!(out, "  {:<LABEL$} {:<COLUMN$} B", "task", "A")?;
    let one_run = a.runs_per_task == 1;
    for pair in &c.tasks {
        let cell = |s: Option<Score>| match s {
            None => "-".to_owned(),
            Some(s) if one_run => (if s.solved == 1 { "yes" } else { "no" }).to_owned(),
            Some(s) => format!("{}/{}", s.solved, s.runs),
        };
        let better = match (pair.a, pair.b) {
            (Some(x), Some(y)) if x.solved != y.solved => {
                let (side, by) = if x.solved > y.solved {
                    ('A', x.solved - y.solved)
                } else {
                    ('B', y.solved - x.solved)
                };
                if one_run {
                    format!("{side} only")
                } else {
                    format!("{side} +{by}")
                }
            }
            _ => String::new(),
        };
        let line = format!(
            "  {:<LABEL$} {:<COLUMN$} {:<COLUMN$} {better}",
            pair.task,
            cell(pair.a),
            cell(pair.b)
        );
        writeln!(out, "{}", line.trim_end())?;
        for (side, report) in [('A', a), ('B', b)] {
            for row in report.results.iter().filter(|r| r.task == pair.task) {
                let run = if one_run {
                    String::new()
                } else {
                    format!(" run {}", row.run)
                };
                if let Some(why) = unsolved_because(row) {
                    out.untrusted(&format!("      {side}{run}: {why}\n"))?;
                }
                if let Some(dir) = &row.workdir {
                    writeln!(out, "      {side}{run} kept: {dir}")?;
                }
            }
        }
    }
    writeln!(out)?;
    if c.interrupted {
        writeln!(out, "interrupted: the sides hold the runs that finished")?;
    }
    writeln!(out, "results appended to {}", a.results_file)?;
    Ok(())
}
