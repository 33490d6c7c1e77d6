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

/// `orch show`.
pub(super) fn cmd_show(args: ShowArgs) -> Result<i32, CliError> {
    let (common, root, state) = open(&args.repo, &args.run)?;
    let state = runlog::as_shown(&runlog::RunDir::at(root.clone()), state);
    let mut out = Out::stdout();
    if args.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&state).unwrap_or_default()
        )?;
    } else {
        out.untrusted(&render_show(&state, &root))?;
        out.untrusted(&memory_report(&common, &state))?;
    }
    out.finish()?;
    Ok(exit::OK)
}

/// The lessons a run's stages were given and those it proposed.
fn memory_report(common: &Path, s: &RunState) -> String {
    let stages: Vec<(&str, Option<&str>)> = s
        .stages
        .iter()
        .map(|st| (st.id.as_str(), st.commit.as_deref()))
        .collect();
    crate::memory::hook::run_report(common, s.run_id.as_str(), &stages)
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
    if let Some(url) = &s.pr_url {
        o.push_str(&format!("published: {url}\n"));
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
                "            ↳ attempt {} ({}): {}, {}, cost {}\n",
                n + 1,
                a.status,
                plural(u64::from(a.turns), "turn", "turns"),
                plural(a.tokens.total(), "token", "tokens"),
                a.cost_usd.map_or("unknown".to_owned(), usd),
            ));
        }
        if !st.attempts.is_empty() && st.turns > 0 {
            o.push_str(&format!(
                "            ↳ attempt {} (this one): {}, {}\n",
                st.attempts.len() + 1,
                plural(u64::from(st.turns), "turn", "turns"),
                plural(st.tokens.total(), "token", "tokens"),
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

pub(super) use crate::text::plural;

/// Dollars to four places, never `-0.0000` (a float sum of nothing is -0.0).
pub(super) fn usd(v: f64) -> String {
    format!("${:.4}", v + 0.0)
}

fn render_agent(o: &mut String, n: &crate::subagent::AgentNode, depth: usize) {
    let task = crate::text::cap_bytes(&n.task.replace('\n', " "), 60);
    o.push_str(&format!(
        "{:indent$}{} ({}) {} — {}, {} — \"{task}\"\n",
        "",
        n.agent_path,
        n.role,
        n.status.as_str(),
        plural(u64::from(n.turns), "turn", "turns"),
        plural(n.tokens.total(), "token", "tokens"),
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
        out.untrusted(&render_review(&common, st)?)?;
    }
    out.untrusted(&memory_report(&common, &state))?;
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

/// `orch log`: a stage's action log (`<stage>`), a subagent's
/// (`<stage>/<agent path>`, e.g. `code/explore-1`), or every stage's.
pub(super) fn cmd_log(args: LogArgs) -> Result<i32, CliError> {
    let (_, root, state) = open(&args.repo, &args.run)?;
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
        match serde_json::from_str::<serde_json::Value>(line) {
            Ok(ev) => out.untrusted(&format!("{}\n", render_event(&ev)))?,
            Err(_) => out.untrusted(&format!(
                "  [unreadable line: {}]\n",
                crate::text::cap_bytes(line, 80)
            ))?,
        }
    }
    Ok(())
}

/// Longest text field shown on a line.
const FIELD_CHARS: usize = 100;

/// A text field on one line, capped.
fn oneline(v: &serde_json::Value) -> String {
    let text = match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    };
    crate::text::cap_bytes(
        &text.split_whitespace().collect::<Vec<_>>().join(" "),
        FIELD_CHARS,
    )
    .to_string()
}

/// The names of a list of tool calls: `read_file, bash`.
fn call_names(v: &serde_json::Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|c| c["name"].as_str().unwrap_or("?"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// Milliseconds as `1.23s`.
fn secs(ms: u64) -> String {
    format!("{:.2}s", ms as f64 / 1000.0)
}

/// ` key value` for each field that is set (not null, not empty).
fn opt_fields(ev: &serde_json::Value, keys: &[&str]) -> String {
    let mut o = String::new();
    for k in keys {
        match &ev[*k] {
            serde_json::Value::Null => {}
            serde_json::Value::String(s) if s.is_empty() => {}
            serde_json::Value::Array(a) if a.is_empty() => {}
            v => o.push_str(&format!(", {k} {}", oneline(v))),
        }
    }
    o
}

/// One action-log event as a readable line: elapsed time, then what
/// happened. An unknown kind is shown as `kind: {compact json}`.
pub(super) fn render_event(ev: &serde_json::Value) -> String {
    let ms = ev["elapsed_ms"].as_u64().unwrap_or(0);
    let t = format!("{:>7.2}s", ms as f64 / 1000.0);
    let s = |k: &str| oneline(&ev[k]);
    let n = |k: &str| ev[k].as_u64().unwrap_or(0);
    let turn = ev["turn"]
        .as_u64()
        .map(|t| format!("turn {t}: "))
        .unwrap_or_default();
    let kind = ev["event"].as_str().unwrap_or("?");
    let body = match kind {
        "stage_start" => format!(
            "start {} ({}) from {}",
            s("stage"),
            s("role"),
            short(ev["parent"].as_str())
        ),
        "role_notes" => format!(
            "role {} from {}{}",
            s("role"),
            s("origin"),
            opt_fields(ev, &["warnings", "model_note", "sampling"])
        ),
        "sandbox" => format!(
            "sandbox {} — {}",
            s("profile"),
            s("kernel").trim_start_matches("sandbox: ")
        ),
        "memory" => match ev["memory_used"].as_array().filter(|a| !a.is_empty()) {
            Some(_) => format!(
                "memory: used {} (of {})",
                call_names_or_list(&ev["memory_used"]),
                plural(n("lessons"), "lesson", "lessons")
            ),
            None if ev["error"].is_string() => format!("memory: not read: {}", s("error")),
            None => format!("memory: no lesson applies (of {})", n("lessons")),
        },
        "distill" => match (ev["skipped"].as_bool(), ev["error"].as_str()) {
            (Some(true), _) => format!("distill: skipped ({})", s("reason")),
            (_, Some(e)) => format!("distill on {}: failed: {e}", s("key_event")),
            _ => format!(
                "distill on {}: {} proposed as {}",
                s("key_event"),
                call_names_or_list(&ev["lessons"]),
                s("status")
            ),
        },
        "project_instructions" => match ev["enabled"].as_bool() {
            Some(false) => "project instructions: off".to_owned(),
            _ => {
                let files = call_names_or_list(&ev["files"]);
                format!(
                    "project instructions: {}{}",
                    if files.is_empty() {
                        "none found".to_owned()
                    } else {
                        files
                    },
                    if ev["cut"].as_bool() == Some(true) {
                        format!(" (cut at {} bytes)", n("limit_bytes"))
                    } else {
                        String::new()
                    }
                )
            }
        },
        "agent_start" => format!(
            "agent {} starts: max {} turns, tools {}, compacts at {} tokens, system prompt {} bytes, task {} bytes{}{}{}",
            s("agent"),
            n("max_turns"),
            call_names_or_list(&ev["tools"]),
            n("compact_at_tokens"),
            n("system_prompt_bytes"),
            n("task_bytes"),
            budget_text(", budget", &ev["budget"]),
            if ev["text_tool_calls"].as_bool() == Some(true) {
                ", tool calls written as text accepted"
            } else {
                ""
            },
            opt_fields(ev, &["budget_notes"])
        ),
        "child_start" => format!(
            "subagent {} ({}) starts: depth {}/{}, pid {}{}",
            s("agent"),
            s("role"),
            n("depth"),
            n("max_depth"),
            n("pid"),
            opt_fields(ev, &["token_budget", "time_budget_secs"])
        ),
        "context_window" => format!(
            "{turn}context window {} tokens from the {} (configured {}, using {})",
            n("tokens"),
            s("source"),
            s("configured"),
            n("used")
        ),
        "request" => format!(
            "→ model turn {} ({} messages, ~{} bytes)",
            n("turn"),
            n("messages"),
            n("approx_bytes")
        ),
        "retry" => format!(
            "{turn}retry{}: attempt {}/{} failed{} ({}); waiting {}",
            if ev["request"] == "summary" {
                " of a compaction summary"
            } else {
                ""
            },
            n("attempt"),
            n("of"),
            ev["status"]
                .as_u64()
                .map(|c| format!(" with HTTP {c}"))
                .unwrap_or_default(),
            s("reason"),
            secs(n("wait_ms"))
        ),
        "stream_fallback" => format!("{turn}streaming off: {}", s("reason")),
        "response" => {
            let calls = call_names(&ev["tool_calls"]);
            let text = ev["content"]
                .as_str()
                .filter(|c| !c.trim().is_empty())
                .map(|_| format!(" \"{}\"", s("content")))
                .unwrap_or_default();
            format!(
                "← model turn {} in {}ms, {}+{} tokens{text}{}",
                n("turn"),
                n("latency_ms"),
                n("prompt_tokens"),
                n("completion_tokens"),
                if calls.is_empty() {
                    String::new()
                } else {
                    format!(" calls: {calls}")
                }
            )
        }
        "tool_calls_recovered" => format!(
            "{turn}tool calls recovered from {} ({}): {}",
            s("recovered_from"),
            s("format"),
            call_names(&ev["tool_calls"])
        ),
        "tool" => {
            // The summary names the tool (`bash `ls` → exit 0 (0.1s)`).
            let summary = s("summary");
            let mut o = format!(
                "  {}",
                if summary.is_empty() {
                    s("name")
                } else {
                    summary
                }
            );
            if ev["is_error"].as_bool() == Some(true) {
                o.push_str(" [error]");
            }
            if let Some(c) = ev["exit_code"].as_i64() {
                o.push_str(&format!(" [exit {c}]"));
            }
            // `allow` is the usual case; only other decisions are news.
            if ev["policy"].as_str().is_some_and(|p| p != "allow") {
                o.push_str(&format!(" [policy: {}]", s("policy")));
            }
            if ev["sandbox"].is_string() {
                o.push_str(&format!(" [sandbox: {}]", s("sandbox")));
            }
            if let Some(r) = ev["repeat"].as_str() {
                o.push_str(&format!(" [repeat: {r}]"));
            }
            o
        }
        "compaction" => {
            let mut o = format!(
                "{turn}compaction ({}, {}): {} → {} bytes",
                s("trigger"),
                s("method"),
                n("bytes_before"),
                n("bytes_after")
            );
            if let Some(a) = ev["stubbed"].as_array().filter(|a| !a.is_empty()) {
                o.push_str(&format!(", {} tool results stubbed", a.len()));
            }
            if ev["summarized"].is_object() {
                o.push_str(&format!(
                    ", {} messages summarized into {} bytes",
                    ev["summarized"]["messages"].as_u64().unwrap_or(0),
                    ev["summarized"]["summary_bytes"].as_u64().unwrap_or(0)
                ));
            }
            o.push_str(&opt_fields(ev, &["kept_turns", "summary_error"]));
            o
        }
        "model_error" => format!(
            "{turn}model error: {}{}",
            s("error"),
            opt_fields(ev, &["retry"])
        ),
        "budget_exceeded" => format!(
            "{turn}budget exceeded: {}{}",
            s("reason"),
            opt_fields(ev, &["call_id"])
        ),
        "tool_fault" => format!("{turn}tool fault in {}: {}", s("name"), s("reason")),
        "verdict_from_text" => format!("{turn}verdict read from the text: {}", s("verdict")),
        "nudge" => format!("{turn}nudge: {}", s("message")),
        "no_result" => format!("{turn}no result: {}", s("reason")),
        "stuck" => format!("{turn}stuck: {}", s("reason")),
        "verify" => format!(
            "verify round {}: `{}` {} in {}{}",
            n("round"),
            s("command"),
            match (ev["passed"].as_bool(), ev["timed_out"].as_bool()) {
                (_, Some(true)) => "timed out".to_owned(),
                (Some(true), _) => "passed".to_owned(),
                _ => ev["exit_code"]
                    .as_i64()
                    .map_or("failed".to_owned(), |c| format!("failed (exit {c})")),
            },
            secs(n("duration_ms")),
            ev["passed"]
                .as_bool()
                .filter(|p| !p)
                .map(|_| format!(": {}", s("output")))
                .unwrap_or_default()
        ),
        "verify_failed" => format!(
            "verify failed after {}: {}",
            plural(n("rounds"), "round", "rounds"),
            s("reason")
        ),
        "read_only_violation" => format!(
            "read-only violation: {} (discarded {})",
            s("reason"),
            call_names_or_list(&ev["discarded"])
        ),
        "killed" => format!("killed by {}", s("signal")),
        "agent_end" => format!(
            "agent {} ends: {} after {}, {}+{} tokens{}{}{}",
            s("agent"),
            s("end"),
            plural(n("turns"), "turn", "turns"),
            n("prompt_tokens"),
            n("completion_tokens"),
            budget_text(", used", &ev["budget"]["used"]),
            opt_fields(ev, &["verdict"]),
            ev["budget"]["exceeded"]
                .as_str()
                .map(|x| format!(", exceeded {x}"))
                .unwrap_or_default()
        ),
        "stage_end" => format!(
            "end: {} {} ({}, +{} -{}){}",
            s("status"),
            short(ev["commit"].as_str()),
            plural(n("files_changed"), "file", "files"),
            n("insertions"),
            n("deletions"),
            opt_fields(ev, &["reason", "verify"])
        ),
        other => {
            let mut rest = ev.clone();
            if let Some(o) = rest.as_object_mut() {
                for k in ["ts", "elapsed_ms", "event"] {
                    o.remove(k);
                }
            }
            format!(
                "{other}: {}",
                crate::text::cap_bytes(&rest.to_string(), 200)
            )
        }
    };
    format!("{t} {body}")
}

/// The set fields of a budget object (`{"turns": 40, "tokens": null, …}`)
/// after `label`: `, budget turns 40, time 60s`; empty when none is set.
fn budget_text(label: &str, v: &serde_json::Value) -> String {
    let parts: Vec<String> = [
        ("turns", ""),
        ("tokens", ""),
        ("time_secs", "s"),
        ("cost_usd", ""),
    ]
    .iter()
    .filter_map(|(k, unit)| {
        let x = &v[*k];
        let shown = match *k {
            "cost_usd" => usd(x.as_f64()?),
            "time_secs" => format!("{:.1}", x.as_f64()?),
            _ => x.as_u64()?.to_string(),
        };
        Some(format!(
            "{} {shown}{unit}",
            k.trim_end_matches("_secs").trim_end_matches("_usd")
        ))
    })
    .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("{label} {}", parts.join(", "))
    }
}

/// A JSON array of strings (or of anything) as `a, b, c`.
fn call_names_or_list(v: &serde_json::Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
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

    #[test]
    fn every_known_event_is_one_readable_line_and_unknown_ones_compact_json() {
        let kinds = [
            "stage_start",
            "role_notes",
            "sandbox",
            "project_instructions",
            "agent_start",
            "child_start",
            "context_window",
            "request",
            "retry",
            "stream_fallback",
            "response",
            "tool_calls_recovered",
            "tool",
            "compaction",
            "model_error",
            "budget_exceeded",
            "tool_fault",
            "verdict_from_text",
            "nudge",
            "no_result",
            "stuck",
            "verify",
            "verify_failed",
            "read_only_violation",
            "killed",
            "agent_end",
            "stage_end",
        ];
        for kind in kinds {
            let ev = serde_json::json!({
                "elapsed_ms": 1500, "event": kind, "turn": 2, "reason": "why\nnot",
                "output": {"nested": [1, 2]}, "passed": false, "exit_code": 1,
                "tool_calls": [{"name": "bash"}], "summarized": {"messages": 3, "summary_bytes": 9},
            });
            let line = render_event(&ev);
            assert!(line.starts_with("   1.50s "), "{kind}: {line}");
            assert!(!line.contains('\n'), "{kind}: {line}");
            assert!(
                !line.contains(&format!("{kind}: {{")),
                "{kind} fell back to JSON: {line}"
            );
        }
        let retry = serde_json::json!({"elapsed_ms": 0, "event": "retry", "turn": 1,
            "attempt": 1, "of": 5, "wait_ms": 250, "status": 429, "reason": "HTTP 429: slow down"});
        assert_eq!(
            render_event(&retry),
            "   0.00s turn 1: retry: attempt 1/5 failed with HTTP 429 (HTTP 429: slow down); waiting 0.25s"
        );
        let bash = serde_json::json!({"elapsed_ms": 0, "event": "tool", "name": "bash",
            "summary": "bash `rm -rf /` → denied", "is_error": true, "exit_code": null,
            "policy": "deny: recursive delete of /", "sandbox": "workspace-write, network off"});
        assert_eq!(
            render_event(&bash),
            "   0.00s   bash `rm -rf /` → denied [error] [policy: deny: recursive delete of /] [sandbox: workspace-write, network off]"
        );
        let odd = serde_json::json!({"elapsed_ms": 0, "ts": "x", "event": "novel", "a": {"b": 1}});
        assert_eq!(render_event(&odd), r#"   0.00s novel: {"a":{"b":1}}"#);
    }
}
