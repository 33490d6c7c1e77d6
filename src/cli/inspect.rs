//! Reviewing runs: `orch runs`, `show`, `review`, `diff`, `log`. All read the
//! run record and git; none changes anything.

use super::output::Out;
use super::record::{open, run_cost};
use super::{CliError, exit};
use crate::git;
use crate::runlog::{self, RunState, StageRecord};
use std::path::{Path, PathBuf};

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

/// Arguments of `orch show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The run id (`last` is the newest)
    pub run: String,
    /// The repository
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// The run state as JSON
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `orch review`.
#[derive(Debug, clap::Args)]
pub struct ReviewArgs {
    /// The run id (`last` is the newest)
    pub run: String,
    /// Only this stage
    pub stage: Option<String>,
    /// The repository
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `orch diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The run id (`last` is the newest)
    pub run: String,
    /// The stage
    pub stage: String,
    /// The repository
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `orch log`.
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// The run id (`last` is the newest)
    pub run: String,
    /// Only this stage
    pub stage: Option<String>,
    /// The repository
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// The raw JSONL events
    #[arg(long)]
    pub json: bool,
}

fn stage<'a>(state: &'a RunState, id: &str) -> Result<&'a StageRecord, CliError> {
    state.stage(id).ok_or_else(|| {
        let known: Vec<&str> = state.stages.iter().map(|s| s.id.as_str()).collect();
        CliError::Invalid(format!(
            "failed to find stage `{id}` in run {} (stages: {})",
            state.run_id,
            known.join(", ")
        ))
    })
}

fn short(sha: Option<&str>) -> &str {
    sha.map_or("-", |c| &c[..c.len().min(10)])
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
pub(super) fn cmd_runs(args: RunsArgs) -> Result<i32, CliError> {
    let info = git::open_repo(&args.repo)?;
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
        writeln!(
            out,
            "{:<id_width$} {:<14} {:<12} {:>5} {:>9}  {}",
            s.run_id,
            s.pipeline,
            s.status.as_str(),
            age(&s.created),
            s.tokens().total(),
            s.model
        )?;
    }
    out.finish()?;
    Ok(exit::OK)
}

/// `orch show`.
pub(super) fn cmd_show(args: ShowArgs) -> Result<i32, CliError> {
    let (_, root, state) = open(&args.repo, &args.run)?;
    let state = runlog::as_shown(&runlog::RunDir { root: root.clone() }, state);
    let mut out = Out::stdout();
    if args.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&state).unwrap_or_default()
        )?;
    } else {
        out.text(&render_show(&state, &root))?;
    }
    out.finish()?;
    Ok(exit::OK)
}

/// The text of `orch show`.
pub(super) fn render_show(s: &RunState, root: &Path) -> String {
    let mut o = String::new();
    let t = s.tokens();
    o.push_str(&format!(
        "run {} ({}): {}\n",
        s.run_id,
        s.pipeline,
        s.status.as_str()
    ));
    o.push_str(&format!(
        "created {}  base {}  model {}\n",
        s.created,
        short(Some(&s.base_commit)),
        s.model_label
    ));
    o.push_str(&format!(
        "tokens {} (prompt {}, completion {}), cost {}\n",
        t.total(),
        t.prompt,
        t.completion,
        run_cost(s)
    ));
    if let Some(title) = &s.pr_title {
        o.push_str(&format!("PR: {title} ({})\n", s.final_branch));
    }
    o.push_str(&format!(
        "\n{:<11} {:<12} {:<9} {:<16} {:>7} {:>5} {:>8}  {:<10} branch\n",
        "stage", "status", "role", "verdict", "time", "turns", "tokens", "commit"
    ));
    for st in &s.stages {
        o.push_str(&format!(
            "{:<11} {:<12} {:<9} {:<16} {:>6.1}s {:>5} {:>8}  {:<10} {}\n",
            st.id,
            st.status.as_str(),
            st.role,
            st.verdict.map_or("-", |v| v.as_str()),
            st.duration_ms as f64 / 1000.0,
            st.turns,
            st.tokens.total(),
            short(st.commit.as_deref()),
            st.branch.as_deref().unwrap_or("-"),
        ));
        if let Some(r) = &st.reason {
            o.push_str(&format!("            ↳ {r}\n"));
        }
        for (n, a) in st.attempts.iter().enumerate() {
            o.push_str(&format!(
                "            ↳ attempt {} ({}): {}, {} tokens, cost {}\n",
                n + 1,
                a.status,
                plural(u64::from(a.turns), "turn", "turns"),
                a.tokens.total(),
                a.cost_usd.map_or("unknown".to_owned(), usd),
            ));
        }
        if !st.attempts.is_empty() && st.turns > 0 {
            o.push_str(&format!(
                "            ↳ attempt {} (this one): {}, {} tokens\n",
                st.attempts.len() + 1,
                plural(u64::from(st.turns), "turn", "turns"),
                st.tokens.total(),
            ));
        }
    }
    let tree = crate::subagent::agent_tree(root);
    if !tree.is_empty() {
        o.push_str("\nsubagents (who spawned whom):\n");
        for node in &tree {
            render_agent(&mut o, node, 1);
        }
    }
    o.push_str(&format!("\nrecord: {}\n", root.display()));
    o
}

/// `n` with the singular or plural noun: `1 turn`, `2 turns`.
pub(super) fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Dollars to four places, never `-0.0000` (a float sum of nothing is -0.0).
pub(super) fn usd(v: f64) -> String {
    format!("${:.4}", v + 0.0)
}

fn render_agent(o: &mut String, n: &crate::subagent::AgentNode, depth: usize) {
    let task = crate::text::cap_bytes(&n.task.replace('\n', " "), 60);
    o.push_str(&format!(
        "{:indent$}{} ({}) {} — {} turns, {} tokens — \"{task}\"\n",
        "",
        n.agent_path,
        n.role,
        n.status.as_str(),
        n.turns,
        n.tokens.total(),
        indent = depth * 2
    ));
    for c in &n.children {
        render_agent(o, c, depth + 1);
    }
}

/// `orch review`.
pub(super) fn cmd_review(args: ReviewArgs) -> Result<i32, CliError> {
    let (common, _, state) = open(&args.repo, &args.run)?;
    let stages: Vec<&StageRecord> = match &args.stage {
        Some(id) => vec![stage(&state, id)?],
        None => state.stages.iter().collect(),
    };
    if args.json {
        return super::stage_json::print_review(&common, &state, &stages);
    }
    let mut out = Out::stdout();
    for st in stages {
        out.text(&render_review(&common, st)?)?;
    }
    out.finish()?;
    Ok(exit::OK)
}

/// The text of `orch review` for one stage.
pub(super) fn render_review(common: &Path, st: &StageRecord) -> Result<String, CliError> {
    let mut o = format!("=== stage {} ({}) — {}", st.id, st.role, st.status.as_str());
    if let Some(v) = st.verdict {
        o.push_str(&format!(", verdict {v}"));
    }
    o.push('\n');
    if let Some(r) = &st.reason {
        o.push_str(&format!("reason: {r}\n"));
    }
    let (Some(commit), Some(parent)) = (&st.commit, &st.parent_commit) else {
        o.push_str("(no commit)\n\n");
        return Ok(o);
    };
    o.push_str(&format!(
        "commit {commit} on {}\n",
        st.branch.as_deref().unwrap_or("-")
    ));
    o.push_str(&format!(
        "turns {}, tokens {}, {:.1}s\n",
        st.turns,
        st.tokens.total(),
        st.duration_ms as f64 / 1000.0
    ));
    if let Some(sum) = st.summary.as_deref().filter(|s| !s.trim().is_empty()) {
        o.push_str(&format!(
            "\nsummary:\n  {}\n",
            sum.trim().replace('\n', "\n  ")
        ));
    }
    if !st.digest.is_empty() {
        o.push_str("\nactions:\n");
        for line in &st.digest {
            o.push_str(&format!("  - {line}\n"));
        }
    }
    let d = git::diff(common, parent, commit, 256 * 1024)?;
    o.push_str(&format!("\n{}", d.stat.render()));
    if !d.patch.is_empty() {
        o.push('\n');
        o.push_str(&d.patch);
        if !d.patch.ends_with('\n') {
            o.push('\n');
        }
    }
    o.push('\n');
    Ok(o)
}

/// `orch diff`.
pub(super) fn cmd_diff(args: DiffArgs) -> Result<i32, CliError> {
    let (common, _, state) = open(&args.repo, &args.run)?;
    let st = stage(&state, &args.stage)?;
    if args.json {
        return super::stage_json::print_diff(&common, &state, st);
    }
    let (Some(commit), Some(parent)) = (&st.commit, &st.parent_commit) else {
        return Err(CliError::Invalid(format!(
            "failed to show the diff of stage `{}`: it has no commit (it is {})",
            st.id,
            st.status.as_str()
        )));
    };
    let mut out = Out::stdout();
    out.text(&git::diff(&common, parent, commit, usize::MAX)?.patch)?;
    out.finish()?;
    Ok(exit::OK)
}

/// `orch log`.
pub(super) fn cmd_log(args: LogArgs) -> Result<i32, CliError> {
    let (_, root, state) = open(&args.repo, &args.run)?;
    let stages: Vec<&StageRecord> = match &args.stage {
        Some(id) => vec![stage(&state, id)?],
        None => state.stages.iter().collect(),
    };
    let mut out = Out::stdout();
    for st in stages {
        let path = root.join("stages").join(&st.id).join("actions.jsonl");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if args.json {
            out.text(&text)?;
            continue;
        }
        writeln!(out, "=== {} ({})", st.id, st.role)?;
        for line in text.lines() {
            match serde_json::from_str::<serde_json::Value>(line) {
                Ok(ev) => writeln!(out, "{}", render_event(&ev))?,
                Err(_) => writeln!(
                    out,
                    "  [unreadable line: {}]",
                    crate::text::cap_bytes(line, 80)
                )?,
            }
        }
    }
    out.finish()?;
    Ok(exit::OK)
}

/// One action-log event as a readable line.
pub(super) fn render_event(ev: &serde_json::Value) -> String {
    let ms = ev["elapsed_ms"].as_u64().unwrap_or(0);
    let t = format!("{:>7.2}s", ms as f64 / 1000.0);
    let s = |k: &str| ev[k].as_str().unwrap_or("").to_owned();
    let n = |k: &str| ev[k].as_u64().unwrap_or(0);
    match ev["event"].as_str().unwrap_or("?") {
        "stage_start" => format!(
            "{t} start {} ({}) from {}",
            s("stage"),
            s("role"),
            short(ev["parent"].as_str())
        ),
        "request" => format!(
            "{t} → model turn {} ({} messages, ~{} bytes)",
            n("turn"),
            n("messages"),
            n("approx_bytes")
        ),
        "response" => {
            let calls: Vec<String> = ev["tool_calls"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|c| c["name"].as_str().unwrap_or("?").to_owned())
                        .collect()
                })
                .unwrap_or_default();
            let text = ev["content"]
                .as_str()
                .map(|c| format!(" \"{}\"", crate::text::cap_bytes(&c.replace('\n', " "), 60)))
                .unwrap_or_default();
            format!(
                "{t} ← model turn {} in {}ms, {}+{} tokens{text}{}",
                n("turn"),
                n("latency_ms"),
                n("prompt_tokens"),
                n("completion_tokens"),
                if calls.is_empty() {
                    String::new()
                } else {
                    format!(" calls: {}", calls.join(", "))
                }
            )
        }
        "tool" => format!(
            "{t}   {}{}",
            s("summary"),
            ev["policy"]
                .as_str()
                .filter(|p| *p != "allow")
                .map(|p| format!(" [policy: {p}]"))
                .unwrap_or_default()
        ),
        "stage_end" => format!(
            "{t} end: {} {} ({} files, +{} -{})",
            s("status"),
            short(ev["commit"].as_str()),
            n("files_changed"),
            n("insertions"),
            n("deletions")
        ),
        other => format!(
            "{t} {other} {}",
            crate::text::cap_bytes(&ev.to_string(), 160)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_singular_or_plural_and_costs_never_negative_zero() {
        assert_eq!(plural(1, "error", "errors"), "1 error");
        assert_eq!(plural(0, "error", "errors"), "0 errors");
        assert_eq!(plural(2, "turn", "turns"), "2 turns");
        let nothing: f64 = std::iter::empty::<f64>().sum();
        assert_eq!(usd(nothing), "$0.0000");
        assert_eq!(usd(-0.0), "$0.0000");
        assert_eq!(usd(0.01234), "$0.0123");
    }
}
