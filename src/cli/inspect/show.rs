//! `orch show`: a run's stages, attempts and subagents.

use super::shared::{memory_report, short};
use crate::cli::error::CliError;
use crate::cli::output::Out;
use crate::cli::output::usd;
use crate::cli::record::{open, run_cost};
use crate::exit;
use crate::runlog::{self, RunState};
use crate::text::plural;
use std::path::{Path, PathBuf};

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

/// `orch show`.
pub(in crate::cli) fn cmd_show(args: ShowArgs) -> Result<i32, CliError> {
    let (common, root, state) = open(&args.repo, &args.run)?;
    let state = runlog::as_shown(&runlog::RunDir::at(root.clone()), state);
    let cost = shown_cost(&state, &root);
    let mut out = Out::stdout();
    if args.json {
        let mut value = serde_json::to_value(&state).unwrap_or_default();
        if let (Some(obj), serde_json::Value::Object(rounds)) =
            (value.as_object_mut(), crate::cli::react::rounds_json(&root))
        {
            // The react and merge rounds beside the stages.
            obj.extend(rounds);
        }
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        )?;
    } else {
        out.untrusted(&render_show(&state, &root, &cost))?;
        out.untrusted(&crate::cli::react::react_section(&root))?;
        out.untrusted(&memory_report(&common, &state))?;
    }
    out.finish()?;
    Ok(exit::OK)
}

/// The run's cost as `orch show` says it: the recorded costs, and while a
/// stage runs, its turns so far priced from its live log (`$0.0012 so
/// far`), `unknown` when a price is not known.
fn shown_cost(s: &RunState, root: &Path) -> String {
    let running = s
        .stages
        .iter()
        .any(|st| st.status == runlog::StageStatus::Running && st.turns > 0);
    if !running {
        return run_cost(s);
    }
    match runlog::live::read_run(root, runlog::live::prices_for(s)) {
        Ok(view) => view
            .cost_usd
            .map_or("unknown".to_owned(), |c| format!("{} so far", usd(c))),
        Err(e) => {
            tracing::debug!("the live cost was not read: {e}");
            run_cost(s)
        }
    }
}

/// The text of `orch show`; `cost` is the run's cost as shown.
pub(super) fn render_show(s: &RunState, root: &Path, cost: &str) -> String {
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
        "tokens {} (prompt {}, completion {}{}), cost {}\n",
        t.total(),
        t.prompt,
        t.completion,
        cache_note(&t),
        cost
    ));
    if let Some(title) = &s.pr_title {
        o.push_str(&format!("PR: {title} ({})\n", s.final_branch));
    }
    if let Some(url) = &s.pr_url {
        o.push_str(&format!("published: {url}\n"));
    }
    // The cache column only when a server reported its prompt cache, so
    // runs against servers that report none show as they always did.
    let cached = s.stages.iter().any(|st| st.tokens.has_cache());
    let cache_head = if cached {
        format!(" {:>6}", "cache")
    } else {
        String::new()
    };
    o.push_str(&format!(
        "\n{:<11} {:<12} {:<9} {:<16} {:>7} {:>5} {:>8}{cache_head}  {:<10} branch\n",
        "stage", "status", "role", "verdict", "time", "turns", "tokens", "commit"
    ));
    for st in &s.stages {
        let cache = if cached {
            format!(" {:>6}", st.tokens.cache_hit_label())
        } else {
            String::new()
        };
        o.push_str(&format!(
            "{:<11} {:<12} {:<9} {:<16} {:>6.1}s {:>5} {:>8}{cache}  {:<10} {}\n",
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
        // Best of N: the choice, and what the stage used over its replicas.
        if let Some(sel) = &st.selection {
            o.push_str(&format!(
                "            ↳ selected replica #{} of {} ({}{}): {}\n            ↳ best of {}: {} over the replicas and the selection, cost {}\n",
                sel.chosen,
                sel.of,
                sel.strategy,
                match sel.passed {
                    Some(true) => ", passed its checks",
                    Some(false) => ", none passed",
                    None => "",
                },
                crate::text::cap_bytes(&sel.reason.replace('\n', " "), 300),
                sel.of,
                plural(sel.tokens.total(), "token", "tokens"),
                sel.cost_usd.map_or("unknown".to_owned(), usd),
            ));
        }
        for (n, a) in st.attempts.iter().enumerate() {
            o.push_str(&format!(
                "            ↳ attempt {} ({}): {}, {}, cost {}{}\n",
                n + 1,
                a.status,
                plural(u64::from(a.turns), "turn", "turns"),
                plural(a.tokens.total(), "token", "tokens"),
                a.cost_usd.map_or("unknown".to_owned(), usd),
                a.model
                    .as_deref()
                    .map(|m| format!(", model {m}"))
                    .unwrap_or_default(),
            ));
            // An escalated attempt: which model failed, why, and what next.
            if let Some(to) = &a.escalated_to {
                o.push_str(&format!(
                    "              attempt {} with {} failed because: {}; escalated to profile `{to}`\n",
                    n + 1,
                    a.model.as_deref().unwrap_or("its model"),
                    crate::text::cap_bytes(
                        &a.reason.as_deref().unwrap_or("-").replace('\n', " "),
                        300
                    ),
                ));
            }
        }
        if !st.attempts.is_empty() && (st.turns > 0 || st.model.is_some()) {
            o.push_str(&format!(
                "            ↳ attempt {} (this one): {}, {}{}\n",
                st.attempts.len() + 1,
                plural(u64::from(st.turns), "turn", "turns"),
                plural(st.tokens.total(), "token", "tokens"),
                st.model
                    .as_deref()
                    .map(|m| format!(", model {m}"))
                    .unwrap_or_default(),
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

/// `, cache read 1200 (62.5% of prompt), written 300` when the server
/// reported its prompt cache; nothing otherwise.
fn cache_note(t: &crate::runlog::TokenCount) -> String {
    if !t.has_cache() {
        return String::new();
    }
    let mut note = format!(
        ", cache read {} ({} of prompt)",
        t.cache_read,
        t.cache_hit_label()
    );
    if t.cache_write > 0 {
        note.push_str(&format!(", written {}", t.cache_write));
    }
    note
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
