//! The pages: plain HTML, every text that is not the UI's own markup
//! escaped through [`html`]. The run page draws the DAG as inline SVG, one
//! column per layer (a stage's layer is one more than its deepest need).

use super::control::Ask;
use super::data::{self, RunView, duration, run_cost, stage_cost, usd};
use super::escape::{html, url_segment};
use super::server::Ui;
use crate::runlog::{RunState, StageRecord};
use serde_json::Value;
use std::collections::HashMap;
use std::fmt::Write as _;

const NODE_W: usize = 170;
const NODE_H: usize = 46;
/// A node's height in a run with replicas: a third line says what a
/// replica or a selection is.
const NODE_H_REPLICAS: usize = 64;
const COL_GAP: usize = 60;
const ROW_GAP: usize = 18;
const PAD: usize = 12;

/// The frame of every page.
fn page(ui: &Ui, title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"orch-token\" content=\"{token}\">\
<title>{title} · orch</title><link rel=\"stylesheet\" href=\"/assets/style.css\">\
<script src=\"/assets/app.js\" defer></script></head>\n<body>\
<header><a href=\"/\" class=\"home\">orch</a> <span class=\"repo\">{repo}</span></header>\n\
<main>{body}</main></body></html>\n",
        token = ui.token,
        title = html(title),
        repo = html(&ui.repo.display().to_string()),
    )
}

fn badge(status: &str) -> String {
    format!("<span class=\"badge st-{s}\">{s}</span>", s = html(status))
}

/// The runs of the repository, newest first.
pub(super) fn runs_page(ui: &Ui, runs: &[RunView]) -> String {
    let mut b = String::from("<h1>Runs</h1>\n");
    if runs.is_empty() {
        b.push_str("<p class=\"empty\">No runs in this repository yet (<code>orch run …</code> makes one).</p>");
        return page(ui, "runs", &b);
    }
    b.push_str("<table class=\"runs\" id=\"runs\"><thead><tr><th>run</th><th>pipeline</th><th>status</th><th>created</th><th>duration</th><th>tokens</th><th>cost</th><th>model</th></tr></thead><tbody>\n");
    for v in runs {
        let s = &v.state;
        let _ = writeln!(
            b,
            "<tr><td><a class=\"run-link\" href=\"/run/{href}\">{id}</a></td><td>{pipe}</td><td>{st}</td><td>{created}</td><td>{dur}</td><td class=\"num\">{tok}</td><td class=\"num\">{cost}</td><td>{model}</td></tr>",
            id = html(s.run_id.as_str()),
            href = html(&url_segment(s.run_id.as_str())),
            pipe = html(&s.pipeline),
            st = badge(s.status.as_str()),
            created = html(&s.created),
            dur = data::run_duration(s),
            tok = s.tokens().total(),
            cost = usd(run_cost(s)),
            model = html(&s.model_label),
        );
    }
    b.push_str("</tbody></table>");
    page(ui, "runs", &b)
}

/// The DAG laid out by layers.
struct Layout {
    /// Stage ids per column (a stage's layer is one more than its deepest
    /// need's).
    cols: Vec<Vec<String>>,
    /// `(need, stage)` pairs.
    edges: Vec<(String, String)>,
    /// Each stage's rework round (1: not a rework round).
    rounds: HashMap<String, u32>,
}

/// The layout from the plan's needs (a stage the plan does not know goes
/// after the others).
fn layers(view: &RunView) -> Layout {
    let plan = view.plan();
    let mut layer: HashMap<String, usize> = HashMap::new();
    let mut edges = Vec::new();
    let mut rounds = HashMap::new();
    for (id, needs, round) in &plan {
        let l = needs
            .iter()
            .filter_map(|n| layer.get(n))
            .map(|l| l + 1)
            .max()
            .unwrap_or(0);
        layer.insert(id.clone(), l);
        rounds.insert(id.clone(), *round);
        for n in needs {
            edges.push((n.clone(), id.clone()));
        }
    }
    let mut cols: Vec<Vec<String>> = Vec::new();
    let mut next = layer.values().max().map_or(0, |m| m + 1);
    for st in &view.state.stages {
        let l = *layer.entry(st.id.clone()).or_insert_with(|| {
            next += 1;
            next - 1
        });
        if cols.len() <= l {
            cols.resize(l + 1, Vec::new());
        }
        cols[l].push(st.id.clone());
    }
    cols.retain(|c| !c.is_empty());
    Layout {
        cols,
        edges,
        rounds,
    }
}

/// The replicas of the run's best-of-N stages: stage id → how many.
fn replica_counts(s: &RunState) -> HashMap<&str, u32> {
    let mut n: HashMap<&str, u32> = HashMap::new();
    for st in &s.stages {
        if let Some((base, _)) = data::replica_of(&st.id) {
            *n.entry(base).or_default() += 1;
        }
    }
    n
}

/// What the page says of a replica or a selecting stage: `(replica
/// label, selection label, chosen)`. A replica: `code #1 of 3` (N from the
/// selection when there is one); a selecting stage: `selected 2 of 3
/// (tests)`, or `selects 1 of 3` before it chose.
fn best_of_n(s: &RunState, counts: &HashMap<&str, u32>, st: &StageRecord) -> BestOfN {
    if let Some((base, k)) = data::replica_of(&st.id) {
        let sel = s.stage(base).and_then(|b| b.selection.as_ref());
        let of = sel.map_or_else(|| counts.get(base).copied().unwrap_or(0), |x| x.of);
        return BestOfN::Replica {
            base: base.to_owned(),
            k,
            of,
            chosen: sel.is_some_and(|x| x.chosen == k),
        };
    }
    match (&st.selection, counts.get(st.id.as_str())) {
        (Some(x), _) => BestOfN::Selecting(format!(
            "selected {} of {} ({})",
            x.chosen, x.of, x.strategy
        )),
        (None, Some(n)) => BestOfN::Selecting(format!("selects 1 of {n}")),
        (None, None) => BestOfN::Plain,
    }
}

/// A stage's part in best of N.
enum BestOfN {
    /// An ordinary stage.
    Plain,
    /// Replica `k` of `of` of stage `base`.
    Replica {
        base: String,
        k: u32,
        of: u32,
        chosen: bool,
    },
    /// The stage that selects among its replicas, and what it says.
    Selecting(String),
}

/// The DAG as inline SVG: a box per stage coloured by status (class
/// `st-<status>`), links to its page, arrows for its needs; a rework round
/// is dashed and says its round.
fn dag_svg(view: &RunView) -> String {
    let Layout {
        cols,
        edges,
        rounds,
    } = layers(view);
    let counts = replica_counts(&view.state);
    let node_h = if counts.is_empty() {
        NODE_H
    } else {
        NODE_H_REPLICAS
    };
    let rows = cols.iter().map(Vec::len).max().unwrap_or(1);
    let width = PAD * 2 + cols.len() * NODE_W + cols.len().saturating_sub(1) * COL_GAP;
    let height = PAD * 2 + rows * node_h + rows.saturating_sub(1) * ROW_GAP;
    let mut pos: HashMap<&str, (usize, usize)> = HashMap::new();
    for (c, col) in cols.iter().enumerate() {
        for (r, id) in col.iter().enumerate() {
            pos.insert(
                id.as_str(),
                (PAD + c * (NODE_W + COL_GAP), PAD + r * (node_h + ROW_GAP)),
            );
        }
    }
    let mut s = format!(
        "<svg id=\"dag\" class=\"dag\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"stage graph\">\
<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M 0 0 L 10 5 L 0 10 z\"/></marker></defs>\n"
    );
    for (from, to) in &edges {
        if let (Some(&(x1, y1)), Some(&(x2, y2))) = (pos.get(from.as_str()), pos.get(to.as_str())) {
            let (x1, y1, x2, y2) = (x1 + NODE_W, y1 + node_h / 2, x2, y2 + node_h / 2);
            let mid = (x1 + x2) / 2;
            let _ = writeln!(
                s,
                "<path class=\"edge\" d=\"M {x1} {y1} C {mid} {y1}, {mid} {y2}, {x2} {y2}\" marker-end=\"url(#arrow)\"/>"
            );
        }
    }
    // A stage's replicas share a dashed frame (they share a layer).
    let mut groups: Vec<&str> = counts.keys().copied().collect();
    groups.sort_unstable();
    for base in groups {
        let boxes: Vec<(usize, usize)> = view
            .state
            .stages
            .iter()
            .filter(|st| data::replica_of(&st.id).is_some_and(|(b, _)| b == base))
            .filter_map(|st| pos.get(st.id.as_str()).copied())
            .collect();
        let (Some(x0), Some(x1)) = (
            boxes.iter().map(|b| b.0).min(),
            boxes.iter().map(|b| b.0).max(),
        ) else {
            continue;
        };
        let y0 = boxes.iter().map(|b| b.1).min().unwrap_or(0);
        let y1 = boxes.iter().map(|b| b.1).max().unwrap_or(0);
        let _ = writeln!(
            s,
            "<rect class=\"replica-group\" data-of=\"{b}\" x=\"{gx}\" y=\"{gy}\" width=\"{gw}\" height=\"{gh}\" rx=\"10\"><title>replicas of {b}</title></rect>",
            b = html(base),
            gx = x0.saturating_sub(5),
            gy = y0.saturating_sub(5),
            gw = x1 - x0 + NODE_W + 10,
            gh = y1 - y0 + node_h + 10,
        );
    }
    let run = html(&url_segment(view.state.run_id.as_str()));
    for st in &view.state.stages {
        let Some(&(x, y)) = pos.get(st.id.as_str()) else {
            continue;
        };
        let (name, third, bon_class) = match best_of_n(&view.state, &counts, st) {
            BestOfN::Plain => (html(&st.id), String::new(), ""),
            BestOfN::Replica {
                base,
                k,
                of,
                chosen,
            } => (
                format!(
                    "{} #{k} of {of}{}",
                    html(&base),
                    if chosen { " ✓" } else { "" }
                ),
                format!(
                    "replica of {}{}",
                    html(&base),
                    if chosen { " · chosen" } else { "" }
                ),
                if chosen {
                    " replica chosen"
                } else {
                    " replica"
                },
            ),
            BestOfN::Selecting(label) => (html(&st.id), html(&label), " selecting"),
        };
        let third = if third.is_empty() {
            String::new()
        } else {
            format!(
                "<text x=\"{}\" y=\"{}\" class=\"bon\">{third}</text>",
                x + 10,
                y + 55
            )
        };
        let round = rounds.get(&st.id).copied().unwrap_or(1);
        let extra = format!("{}{bon_class}", if round > 1 { " rework" } else { "" });
        let label = if round > 1 {
            format!("{} · round {round}", st.role)
        } else {
            st.role.clone()
        };
        let id = html(&st.id);
        let _ = writeln!(
            s,
            "<a href=\"/run/{run}/stage/{href}\"><g class=\"node st-{status}{extra}\" id=\"node-{id}\" data-stage=\"{id}\" data-status=\"{status}\">\
<rect x=\"{x}\" y=\"{y}\" width=\"{NODE_W}\" height=\"{node_h}\" rx=\"7\"/>\
<text x=\"{tx}\" y=\"{ty1}\" class=\"name\">{name}</text>\
<text x=\"{tx}\" y=\"{ty2}\" class=\"sub\">{label} · <tspan class=\"status\">{status}</tspan></text>{third}</g></a>",
            href = html(&url_segment(&st.id)),
            status = st.status.as_str(),
            tx = x + 10,
            ty1 = y + 19,
            ty2 = y + 37,
            label = html(&label),
        );
    }
    s.push_str("</svg>");
    s
}

/// One run: header, DAG, stage table, pending asks, actions.
pub(super) fn run_page(ui: &Ui, view: &RunView, asks: &[Ask]) -> String {
    let s = &view.state;
    let run = html(s.run_id.as_str());
    let run_href = html(&url_segment(s.run_id.as_str()));
    let counts = replica_counts(s);
    let mut b = format!(
        "<h1>Run <code>{run}</code></h1>\n<p class=\"meta\" id=\"run-meta\" data-run=\"{run}\" data-live=\"{live}\" data-asks=\"{ask_ids}\">{pipe} · <span id=\"run-status\">{status}</span> · <span id=\"run-cost\">{cost}</span> · {dur} · {tok} tokens · model {model}</p>\n",
        live = view.is_live(),
        ask_ids = html(
            &asks
                .iter()
                .map(|a| a.id.as_str())
                .collect::<Vec<_>>()
                .join(",")
        ),
        pipe = html(&s.pipeline),
        status = badge(s.status.as_str()),
        cost = usd(run_cost(s)),
        dur = data::run_duration(s),
        tok = s.tokens().total(),
        model = html(&s.model_label),
    );
    if let Some(title) = &s.pr_title {
        let _ = writeln!(
            b,
            "<p class=\"pr\">PR: {} (<code>{}</code>)</p>",
            html(title),
            html(&s.final_branch)
        );
    }
    let _ = writeln!(b, "<div class=\"graph\">{}</div>", dag_svg(view));
    b.push_str("<table class=\"stages\" id=\"stages\"><thead><tr><th>stage</th><th>role</th><th>status</th><th>verdict</th><th>turns</th><th>tokens</th><th>cost</th><th>time</th><th>commit</th></tr></thead><tbody>\n");
    for st in &s.stages {
        let id = html(&st.id);
        let note = match best_of_n(s, &counts, st) {
            BestOfN::Plain => String::new(),
            BestOfN::Replica {
                base,
                k,
                of,
                chosen,
            } => format!(
                " <span class=\"bon{}\">{} #{k} of {of}{}</span>",
                if chosen { " chosen" } else { "" },
                html(&base),
                if chosen { " · chosen" } else { "" }
            ),
            BestOfN::Selecting(label) => format!(" <span class=\"bon\">{}</span>", html(&label)),
        };
        let _ = writeln!(
            b,
            "<tr data-stage=\"{id}\"><td><a class=\"stage-link\" href=\"/run/{run_href}/stage/{href}\">{id}</a>{note}</td><td>{role}</td><td class=\"c-status\">{st_badge}</td><td>{verdict}</td><td class=\"num c-turns\">{turns}</td><td class=\"num c-tokens\">{tokens}</td><td class=\"num c-cost\">{cost}</td><td class=\"num\">{time}</td><td><code>{commit}</code></td></tr>",
            href = html(&url_segment(&st.id)),
            role = html(&st.role),
            st_badge = badge(st.status.as_str()),
            verdict = st.verdict.map_or("", |v| v.as_str()),
            turns = st.turns,
            tokens = st.tokens.total(),
            cost = usd(stage_cost(st)),
            time = duration(st.duration_ms),
            commit = html(st.commit.as_deref().map_or("-", |c| &c[..c.len().min(10)])),
        );
    }
    b.push_str("</tbody></table>\n");
    if !asks.is_empty() {
        b.push_str("<h2>Waiting for you</h2><ul class=\"asks\" id=\"asks\">");
        for a in asks {
            let id = html(&a.id);
            let _ = write!(
                b,
                "<li class=\"ask\" id=\"ask-{id}\"><b>{stage}</b> wants to run <code>{tool}</code>: <pre>{cmd}</pre><span class=\"why\">{why}</span> \
<button class=\"act allow\" data-post=\"ask/{id}\" data-body='{{\"allow\":true}}'>Approve</button> \
<button class=\"act deny\" data-post=\"ask/{id}\" data-body='{{\"allow\":false}}'>Deny</button></li>",
                stage = html(&a.stage),
                tool = html(&a.tool),
                cmd = html(&a.command),
                why = html(&a.why),
            );
        }
        b.push_str("</ul>\n");
    }
    b.push_str("<h2>Actions</h2><div class=\"actions\">");
    if view.is_live() {
        b.push_str("<form class=\"guide\" data-kind=\"guide\"><select name=\"stage\">");
        for st in s.stages.iter().filter(|st| {
            matches!(
                st.status,
                crate::runlog::StageStatus::Running | crate::runlog::StageStatus::Pending
            )
        }) {
            let _ = write!(b, "<option>{}</option>", html(&st.id));
        }
        b.push_str("</select> <input name=\"text\" size=\"50\" placeholder=\"a note the stage's next turn receives\"> <button type=\"submit\">Send guidance</button></form>");
    } else {
        b.push_str(
            "<form class=\"rollback\" data-kind=\"rollback\">Roll back to <select name=\"stage\">",
        );
        for st in s.stages.iter().filter(|st| st.commit.is_some()) {
            let _ = write!(b, "<option>{}</option>", html(&st.id));
        }
        b.push_str("</select> <button type=\"submit\">Roll back</button></form> ");
        b.push_str("<button class=\"act\" id=\"resume\" data-post=\"resume\" data-body='{}'>Resume</button>");
    }
    b.push_str("<p id=\"action-result\" class=\"result\" role=\"status\"></p></div>");
    page(ui, &format!("run {}", s.run_id), &b)
}

/// One stage: its numbers, summary, verdict, verify, diff and timeline.
pub(super) fn stage_page(ui: &Ui, view: &RunView, st: &StageRecord) -> String {
    let run = html(view.state.run_id.as_str());
    let run_href = html(&url_segment(view.state.run_id.as_str()));
    let id = html(&st.id);
    let mut b = format!(
        "<p class=\"crumbs\"><a href=\"/run/{run_href}\">run {run}</a></p>\n<h1>Stage <code>{id}</code> {badge}</h1>\n\
<p class=\"meta\">role {role} · model {model} · {turns} turns · {tokens} tokens (prompt {p}, completion {c}) · cost {cost} · {time} · commit <code>{commit}</code> · branch <code>{branch}</code></p>\n",
        badge = badge(st.status.as_str()),
        role = html(&st.role),
        model = html(st.model.as_deref().unwrap_or(&view.state.model)),
        turns = st.turns,
        tokens = st.tokens.total(),
        p = st.tokens.prompt,
        c = st.tokens.completion,
        cost = usd(stage_cost(st)),
        time = duration(st.duration_ms),
        commit = html(st.commit.as_deref().unwrap_or("-")),
        branch = html(st.branch.as_deref().unwrap_or("-")),
    );
    b.push_str(&best_of_n_html(view, st));
    if let Some(v) = st.verdict {
        let _ = writeln!(
            b,
            "<p class=\"verdict v-{v}\" id=\"verdict\">verdict: <b>{v}</b></p>",
            v = v.as_str()
        );
    }
    b.push_str("<h2>Summary</h2>\n");
    let _ = writeln!(
        b,
        "<div class=\"summary\" id=\"summary\">{}</div>",
        html(st.summary.as_deref().unwrap_or("(none yet)"))
    );
    if let Some(r) = &st.reason {
        let _ = writeln!(b, "<p class=\"reason\" id=\"reason\">{}</p>", html(r));
    }
    if let Some(vr) = &st.verify {
        let _ = writeln!(
            b,
            "<h2>Verify: {}</h2><ul class=\"verify\" id=\"verify\">",
            if vr.passed { "passed" } else { "failed" }
        );
        for (n, round) in vr.rounds.iter().enumerate() {
            for r in round {
                let _ = writeln!(
                    b,
                    "<li>round {}: <code>{}</code> → {} ({})</li>",
                    n + 1,
                    html(&r.command),
                    if r.timed_out {
                        "timed out".to_owned()
                    } else {
                        r.exit_code
                            .map_or("killed".to_owned(), |c| format!("exit {c}"))
                    },
                    duration(r.duration_ms)
                );
            }
        }
        b.push_str("</ul>");
        if !vr.output_tail.is_empty() {
            let _ = writeln!(
                b,
                "<details><summary>output</summary><pre>{}</pre></details>",
                html(&vr.output_tail)
            );
        }
    }
    b.push_str("<h2>Diff</h2>\n");
    match view.diff(st) {
        Some(d) if !d.trim().is_empty() => b.push_str(&diff_html(&d)),
        _ => b.push_str("<p class=\"empty\" id=\"diff\">No changes.</p>"),
    }
    b.push_str("<h2>Actions</h2>\n");
    let (events, dropped) = view.actions(st);
    if dropped > 0 {
        let _ = writeln!(
            b,
            "<p class=\"note\">{dropped} older events not shown (<code>orch log</code> has them).</p>"
        );
    }
    b.push_str(&timeline(&events));
    page(ui, &format!("{} · run {}", st.id, view.state.run_id), &b)
}

/// A stage page's best-of-N part: a selecting stage's selection (choice,
/// strategy, reason, every candidate with its checks); a replica's place
/// (which stage, chosen or not) and its selection check.
fn best_of_n_html(view: &RunView, st: &StageRecord) -> String {
    let mut b = String::new();
    let run_href = html(&url_segment(view.state.run_id.as_str()));
    let link = |stage: &str, text: &str| {
        format!(
            "<a href=\"/run/{run_href}/stage/{}\">{}</a>",
            html(&url_segment(stage)),
            html(text)
        )
    };
    if let Some((base, k)) = data::replica_of(&st.id) {
        let sel = view.state.stage(base).and_then(|s| s.selection.as_ref());
        let of = sel.map_or_else(
            || replica_counts(&view.state).get(base).copied().unwrap_or(0),
            |x| x.of,
        );
        let fate = match sel {
            Some(x) if x.chosen == k => " · <b class=\"chosen\">chosen</b>".to_owned(),
            Some(x) => format!(" · not chosen (#{} was)", x.chosen),
            None => String::new(),
        };
        let _ = writeln!(
            b,
            "<p class=\"replica\" id=\"replica\">replica #{k} of {of} of stage {}{fate}</p>",
            link(base, base)
        );
        if let Some(check) = &st.check {
            let _ = writeln!(
                b,
                "<h2>Selection check: {}</h2><ul class=\"verify\" id=\"check\">",
                if check.passed() { "passed" } else { "failed" }
            );
            for r in &check.runs {
                let _ = writeln!(b, "<li><code>{}</code></li>", html(&r.run.status()));
            }
            b.push_str("</ul>\n");
        }
    }
    let Some(sel) = &st.selection else {
        return b;
    };
    let _ = writeln!(
        b,
        "<h2>Selection</h2>\n<p class=\"selection\" id=\"selection\">selected <b>#{chosen} of {of}</b> ({strategy}){passed} · {tokens} tokens, cost {cost} over the replicas and the selection</p>\n<p class=\"reason\" id=\"selection-reason\">{reason}</p>",
        chosen = sel.chosen,
        of = sel.of,
        strategy = html(&sel.strategy),
        passed = match sel.passed {
            Some(true) => ", passed its checks",
            Some(false) => ", <span class=\"err\">none passed its checks</span>",
            None => "",
        },
        tokens = sel.tokens.total(),
        cost = usd(sel.cost_usd),
        reason = html(&sel.reason),
    );
    b.push_str("<table class=\"candidates\" id=\"candidates\"><thead><tr><th>replica</th><th>status</th><th>checks</th><th>failing</th><th>diff lines</th><th>tokens</th><th>cost</th><th>commit</th></tr></thead><tbody>\n");
    for c in &sel.candidates {
        let chosen = c.k == sel.chosen;
        let _ = writeln!(
            b,
            "<tr class=\"cand{cls}\" data-k=\"{k}\"><td>{link}{mark}</td><td>{status}</td><td>{checks}</td><td class=\"num\">{fail}</td><td class=\"num\">{lines}</td><td class=\"num\">{tok}</td><td class=\"num\">{cost}</td><td><code>{commit}</code></td></tr>",
            cls = if chosen { " chosen" } else { "" },
            k = c.k,
            link = link(&c.stage, &format!("#{} {}", c.k, c.stage)),
            mark = if chosen { " ✓ chosen" } else { "" },
            status = badge(&c.status),
            checks = match c.passed {
                Some(true) => "passed",
                Some(false) => "failed",
                None => "-",
            },
            fail = c.failures,
            lines = c.diff_lines,
            tok = c.tokens.total(),
            cost = usd(c.cost_usd),
            commit = html(c.commit.as_deref().map_or("-", |x| &x[..x.len().min(10)])),
        );
    }
    b.push_str("</tbody></table>\n");
    b
}

/// A unified diff, file by file, each line escaped and lightly highlighted.
fn diff_html(diff: &str) -> String {
    let mut out = String::from("<div class=\"diff\" id=\"diff\">\n");
    let mut files: Vec<&str> = Vec::new();
    let mut start = 0;
    for (i, _) in diff.match_indices("diff --git ") {
        if (i == 0 || diff.as_bytes()[i - 1] == b'\n') && i > start {
            files.push(&diff[start..i]);
            start = i;
        }
    }
    files.push(&diff[start..]);
    for f in files.iter().filter(|f| !f.trim().is_empty()) {
        let name = f
            .lines()
            .find_map(|l| {
                l.strip_prefix("+++ b/")
                    .or_else(|| l.strip_prefix("--- a/"))
            })
            .or_else(|| f.lines().next().and_then(|l| l.rsplit(" b/").next()))
            .unwrap_or("?");
        let adds = f
            .lines()
            .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
            .count();
        let dels = f
            .lines()
            .filter(|l| l.starts_with('-') && !l.starts_with("---"))
            .count();
        let _ = write!(
            out,
            "<details open class=\"file\"><summary><code class=\"path\">{}</code> <span class=\"add\">+{adds}</span> <span class=\"del\">−{dels}</span></summary><pre class=\"code\">",
            html(name)
        );
        for line in f.lines() {
            let class = if line.starts_with("@@") {
                "hunk"
            } else if line.starts_with("+++")
                || line.starts_with("---")
                || line.starts_with("diff ")
                || line.starts_with("index ")
            {
                "meta"
            } else if line.starts_with('+') {
                "add"
            } else if line.starts_with('-') {
                "del"
            } else {
                "ctx"
            };
            let body = if matches!(class, "add" | "del" | "ctx") && !line.is_empty() {
                format!("{}{}", html(&line[..1]), highlight(&line[1..]))
            } else {
                html(line)
            };
            // No newline: each line is a block of its own inside the `<pre>`.
            let _ = write!(out, "<span class=\"l {class}\">{body}</span>");
        }
        out.push_str("</pre></details>\n");
    }
    out.push_str("</div>");
    out
}

const KEYWORDS: &[&str] = &[
    "fn", "let", "mut", "pub", "use", "mod", "struct", "enum", "impl", "trait", "match", "if",
    "else", "for", "while", "loop", "return", "def", "class", "import", "from", "as", "in",
    "const", "static", "async", "await", "function", "var", "true", "false", "None", "True",
    "False", "self", "Self", "not", "and", "or", "with", "try", "except", "raise", "yield",
    "lambda", "pass", "break", "continue", "where", "type", "null", "new",
];

/// One line of code with keywords, strings, numbers and comments marked;
/// every piece escaped on its own.
fn highlight(line: &str) -> String {
    let mut out = String::new();
    let chars: Vec<(usize, char)> = line.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        let rest = &line[at..];
        if rest.starts_with("//")
            || (c == '#' && !rest.starts_with("#[") && !rest.starts_with("#!"))
        {
            let _ = write!(out, "<span class=\"cm\">{}</span>", html(rest));
            break;
        }
        if c == '"' || c == '\'' {
            let mut j = i + 1;
            while j < chars.len() && chars[j].1 != c {
                if chars[j].1 == '\\' {
                    j += 1;
                }
                j += 1;
            }
            let end = chars.get(j + 1).map_or(line.len(), |&(e, _)| e);
            let _ = write!(out, "<span class=\"str\">{}</span>", html(&line[at..end]));
            i = j + 1;
            continue;
        }
        if c.is_alphanumeric() || c == '_' {
            let mut j = i;
            while j < chars.len() && (chars[j].1.is_alphanumeric() || chars[j].1 == '_') {
                j += 1;
            }
            let end = chars.get(j).map_or(line.len(), |&(e, _)| e);
            let word = &line[at..end];
            if KEYWORDS.contains(&word) {
                let _ = write!(out, "<span class=\"kw\">{word}</span>");
            } else if c.is_ascii_digit() {
                let _ = write!(out, "<span class=\"lit\">{}</span>", html(word));
            } else {
                out.push_str(&html(word));
            }
            i = j;
            continue;
        }
        out.push_str(&html(&c.to_string()));
        i += 1;
    }
    out
}

/// The action log as a timeline: turns, tool calls (output folded),
/// retries, compaction, subagents; other events by kind.
fn timeline(events: &[Value]) -> String {
    let mut out = String::from("<ol class=\"timeline\" id=\"timeline\">\n");
    for e in events {
        let kind = e["event"].as_str().unwrap_or("?");
        let t = e["elapsed_ms"].as_u64().map(duration).unwrap_or_default();
        let _ = write!(
            out,
            "<li class=\"ev ev-{k}\"><span class=\"t\">{t}</span> ",
            k = html(kind)
        );
        match kind {
            "request" => {
                let _ = write!(
                    out,
                    "<b>turn {}</b> → model ({} messages, {} bytes)",
                    e["turn"], e["messages"], e["approx_bytes"]
                );
            }
            "response" => {
                let calls: Vec<String> = e["tool_calls"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|c| html(c["name"].as_str().unwrap_or("?")))
                            .collect()
                    })
                    .unwrap_or_default();
                let _ = write!(
                    out,
                    "<b>turn {}</b> ← model in {} · {} + {} tokens{}{}",
                    e["turn"],
                    duration(e["latency_ms"].as_u64().unwrap_or(0)),
                    e["prompt_tokens"],
                    e["completion_tokens"],
                    e["cost_usd"]
                        .as_f64()
                        .map(|c| format!(" · ${c:.4}"))
                        .unwrap_or_default(),
                    if calls.is_empty() {
                        String::new()
                    } else {
                        format!(" · calls {}", calls.join(", "))
                    },
                );
                if let Some(c) = e["content"].as_str().filter(|c| !c.is_empty()) {
                    let _ = write!(out, "<div class=\"said\">{}</div>", html(c));
                }
            }
            "tool" => {
                let _ = write!(
                    out,
                    "<b>{}</b> {}{}{} <span class=\"dim\">{}</span><details><summary>output ({} bytes)</summary><pre>{}</pre></details>",
                    html(e["name"].as_str().unwrap_or("?")),
                    html(e["summary"].as_str().unwrap_or("")),
                    e["exit_code"]
                        .as_i64()
                        .map(|c| format!(" · exit {c}"))
                        .unwrap_or_default(),
                    if e["is_error"].as_bool() == Some(true) {
                        " · <span class=\"err\">error</span>"
                    } else {
                        ""
                    },
                    duration(e["duration_ms"].as_u64().unwrap_or(0)),
                    e["result_bytes"],
                    html(e["result"].as_str().unwrap_or("")),
                );
            }
            _ => {
                let mut rest = e.clone();
                if let Some(o) = rest.as_object_mut() {
                    o.remove("event");
                    o.remove("elapsed_ms");
                }
                let _ = write!(
                    out,
                    "<b>{}</b> <details><summary>details</summary><pre>{}</pre></details>",
                    html(&kind.replace('_', " ")),
                    html(&serde_json::to_string_pretty(&rest).unwrap_or_default())
                );
            }
        }
        out.push_str("</li>\n");
    }
    out.push_str("</ol>");
    out
}

#[cfg(test)]
mod tests {
    use super::{diff_html, highlight};

    #[test]
    fn highlighted_code_is_escaped_piece_by_piece() {
        let h = highlight(r#"let s = "<b>"; // </pre><script>"#);
        assert!(h.contains("<span class=\"kw\">let</span>"), "{h}");
        assert!(
            h.contains("<span class=\"str\">&quot;&lt;b&gt;&quot;</span>"),
            "{h}"
        );
        assert!(
            h.contains("<span class=\"cm\">// &lt;/pre&gt;&lt;script&gt;</span>"),
            "{h}"
        );
        assert!(!h.contains("<script>") && !h.contains("<b>"), "{h}");
    }

    #[test]
    fn a_diff_is_split_file_by_file() {
        let d = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a - b\n+a + b\ndiff --git a/y.rs b/y.rs\n--- a/y.rs\n+++ b/y.rs\n@@ -0,0 +1 @@\n+fn main() {}\n";
        let h = diff_html(d);
        assert_eq!(h.matches("<details open class=\"file\">").count(), 2, "{h}");
        assert!(h.contains("<code class=\"path\">x.py</code> <span class=\"add\">+1</span> <span class=\"del\">−1</span>"), "{h}");
        assert!(
            h.contains("<span class=\"l add\">+<span class=\"kw\">fn</span> main() {}</span>"),
            "{h}"
        );
    }
}
