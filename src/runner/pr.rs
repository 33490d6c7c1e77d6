//! Texts the runner writes: stage commit messages (with trailers) and the
//! PR title and body.

use crate::ids::Verdict;
use crate::runlog::{RunState, StageRecord, StageStatus, TokenCount};
use std::collections::BTreeSet;

pub(super) struct CommitInfo<'a> {
    pub(super) run_id: &'a str,
    pub(super) stage: &'a str,
    pub(super) role: &'a str,
    pub(super) model: &'a str,
    pub(super) summary: &'a str,
    pub(super) verdict: Option<Verdict>,
    pub(super) turns: u32,
    pub(super) tokens: TokenCount,
    pub(super) cost_usd: Option<f64>,
    pub(super) duration_ms: u64,
    pub(super) failed: bool,
    /// The stage is not `required` and produced no result (`failed` too).
    pub(super) no_change: bool,
    /// The stage ended on prose taken as its `finish` (its verify passed).
    pub(super) finish_from_text: bool,
    /// The verify gate's result (`None`: the stage has none).
    pub(super) verify: Option<bool>,
    /// The ids of the lessons injected into the stage.
    pub(super) memory: &'a [String],
    /// For an escalated attempt: the model whose attempt failed, and why.
    pub(super) escalated_from: Option<&'a str>,
}

/// The stage commit's message: a subject, the summary, and trailers.
pub(super) fn commit_message(c: &CommitInfo<'_>) -> String {
    let first = c
        .summary
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let first = shorten(first.trim(), 60);
    let status = match (c.failed, c.no_change) {
        (true, true) => " [no change]",
        (true, false) => " [failed]",
        _ => "",
    };
    let mut m = format!("orch({}){status}: {first}\n\n", c.stage);
    if !c.summary.trim().is_empty() {
        m.push_str(c.summary.trim());
        m.push_str("\n\n");
    }
    m.push_str(&format!(
        "Orch-Run: {}\nOrch-Stage: {}\nOrch-Role: {}\nOrch-Model: {}\nOrch-Turns: {}\nOrch-Tokens: {} (prompt {}, completion {}{})\nOrch-Duration: {:.1}s\n",
        c.run_id,
        c.stage,
        c.role,
        c.model,
        c.turns,
        c.tokens.total(),
        c.tokens.prompt,
        c.tokens.completion,
        if c.tokens.has_cache() {
            format!(
                ", cache read {}, cache write {}",
                c.tokens.cache_read, c.tokens.cache_write
            )
        } else {
            String::new()
        },
        c.duration_ms as f64 / 1000.0,
    ));
    m.push_str(&format!(
        "Orch-Cost: {}\n",
        c.cost_usd
            .map_or("unknown".to_owned(), |usd| format!("${usd:.4}"))
    ));
    if let Some(v) = c.verdict {
        m.push_str(&format!("Orch-Verdict: {v}\n"));
    }
    if let Some(passed) = c.verify {
        m.push_str(&format!(
            "Orch-Verify: {}\n",
            if passed { "pass" } else { "fail" }
        ));
    }
    if c.finish_from_text {
        m.push_str("Orch-Finish: text (verify passed)\n");
    }
    if !c.memory.is_empty() {
        m.push_str(&format!("Orch-Memory: {}\n", c.memory.join(",")));
    }
    if let Some(from) = c.escalated_from {
        m.push_str(&format!(
            "Orch-Attempt: 2\nOrch-Escalated-From: {}\n",
            from.replace('\n', " ")
        ));
    }
    m
}

/// Cuts `s` to at most `max` chars at a word boundary, marking the cut with `…`.
pub(super) fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let cut: String = s.chars().take(max - 1).collect();
    let at = cut.rfind(' ').filter(|&i| i > max / 2).unwrap_or(cut.len());
    format!("{}…", cut[..at].trim_end())
}

/// The ids of the pipeline's review stages: those whose role is read-only
/// (the built-in `reviewer`) or whose verdict gates a rework round. Only
/// their verdicts are reviews; a coder's own `finish` verdict is not.
pub(super) fn review_stages(plan: &super::session::Plan) -> BTreeSet<String> {
    let p = &plan.pipeline;
    p.stages
        .iter()
        .filter(|s| {
            plan.roles.get(&s.role).is_some_and(|r| r.read_only)
                || super::stage::requires_verdict(p, s)
        })
        .map(|s| s.id.as_str().to_owned())
        .collect()
}

/// The PR title and body, from the issue, the stages' summaries, the review
/// verdict (of the `reviews` stages only: without one the body says no
/// reviewer stage ran), the diffstat and each stage's model (`models`: stage
/// id → its `Orch-Model` trailer). Stages that did not run (skipped rework
/// rounds) are left out; nothing about the machine (URLs, paths) is in the
/// body.
pub(crate) fn pr_text(
    issue: &str,
    state: &RunState,
    reviews: &BTreeSet<String>,
    diffstat: &str,
    models: &std::collections::BTreeMap<String, String>,
) -> (String, String) {
    let is_review = |s: &StageRecord| reviews.contains(&s.id);
    let issue_title = issue
        .lines()
        .map(|l| l.trim().trim_start_matches('#').trim())
        .find(|l| !l.is_empty())
        .unwrap_or("Changes by orch");
    let title = shorten(issue_title, 72);
    let ran: Vec<&StageRecord> = state
        .stages
        .iter()
        .filter(|s| s.status == StageStatus::Succeeded)
        .collect();
    let mut body = String::new();
    body.push_str("## Summary\n\n");
    for s in ran
        .iter()
        .filter(|s| !(is_review(s) && s.verdict.is_some()))
    {
        let summary = s.summary.as_deref().unwrap_or("").trim();
        if !summary.is_empty() {
            body.push_str(&format!(
                "- **{}** ({}){}: {}\n",
                s.id,
                s.role,
                if s.finish_from_text {
                    " (finished in prose without `finish`; accepted because its verify passed)"
                } else {
                    ""
                },
                summary.replace('\n', " ")
            ));
        }
    }
    not_done(&mut body, state);
    let reviewed: Vec<&&StageRecord> = ran.iter().filter(|s| is_review(s)).collect();
    if reviews.is_empty() {
        body.push_str(
            "\n## Review\n\nNo reviewer stage in this pipeline, so nothing reviewed this change.\n",
        );
    }
    if let Some(r) = reviewed.iter().rev().find(|s| s.verdict.is_some()) {
        body.push_str(&format!(
            "\n## Review\n\nFinal verdict: **{}** (`{}`{}). {}\n",
            r.verdict.map_or("none", Verdict::as_str),
            r.id,
            if r.verdict_from_text {
                ", read from the reviewer's text"
            } else {
                ""
            },
            r.summary.as_deref().unwrap_or("").trim().replace('\n', " ")
        ));
        if r.approved_despite_failed_verify {
            body.push_str("The reviewer approved despite a failed verify: it was told the change failed its verify and approved again.\n");
        }
        let rounds = reviewed.iter().filter(|s| s.verdict.is_some()).count();
        if rounds > 1 {
            body.push_str(&format!("Review rounds: {rounds}.\n"));
        }
    }
    body.push_str("\n## Verify\n\n");
    let verified: Vec<&StageRecord> = state.stages.iter().filter(|s| s.verify.is_some()).collect();
    if verified.is_empty() {
        body.push_str("No verify command was set, so orch ran no tests. A repository sets one with `verify:` on a stage of its pipeline override (e.g. `.orch/pipelines/issue-to-pr.yaml`).\n");
    }
    for s in verified {
        if let Some(v) = &s.verify {
            body.push_str(&format!("- **{}**: {}\n", s.id, v.line()));
        }
    }
    body.push_str(&format!("\n## Changes\n\n```\n{diffstat}```\n"));
    // The cache column only when a server reported its prompt cache.
    let cached = state.stages.iter().any(|s| s.tokens.has_cache());
    body.push_str(if cached {
        "\n## Provenance\n\n| stage | role | model | verdict | verify | tokens | cache hit | cost |\n|---|---|---|---|---|---|---|---|\n"
    } else {
        "\n## Provenance\n\n| stage | role | model | verdict | verify | tokens | cost |\n|---|---|---|---|---|---|---|\n"
    });
    let ran_at_all = state.stages.iter().filter(|s| {
        matches!(
            s.status,
            StageStatus::Succeeded | StageStatus::Failed | StageStatus::NoChange
        )
    });
    for s in ran_at_all {
        let cost = s
            .budget
            .as_ref()
            .and_then(|b| b.used.cost_usd)
            .map_or("unknown".to_owned(), |usd| format!("${usd:.4}"));
        let verify = s
            .verify
            .as_ref()
            .map_or("none", |v| if v.passed { "pass" } else { "fail" });
        let tokens = if cached {
            format!("{} | {}", s.tokens.total(), s.tokens.cache_hit_label())
        } else {
            s.tokens.total().to_string()
        };
        // A best-of-N stage: its choice stands in the verdict column.
        let chosen = s
            .selection
            .as_ref()
            .map(|sel| format!("selected {} of {}", sel.chosen, sel.of));
        body.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            s.id,
            s.role,
            // A reason quoted from an escalated attempt may hold a `|`.
            models
                .get(&s.id)
                .map_or(state.model.as_str(), String::as_str)
                .replace('|', "\\|"),
            chosen
                .as_deref()
                .unwrap_or(s.verdict.map_or("", Verdict::as_str)),
            verify,
            tokens,
            cost,
        ));
    }
    let selections: Vec<&StageRecord> = state
        .stages
        .iter()
        .filter(|s| s.selection.is_some())
        .collect();
    if !selections.is_empty() {
        body.push_str("\n## Best of N\n\n");
    }
    for s in selections {
        if let Some(sel) = &s.selection {
            body.push_str(&format!(
                "- **{}**: replica #{} of {} selected by `{}` ({} tokens over all replicas): {}\n",
                s.id,
                sel.chosen,
                sel.of,
                sel.strategy,
                sel.tokens.total(),
                sel.reason.replace('\n', " ").replace('|', "\\|"),
            ));
        }
    }
    body.push_str(&format!(
        "\nGenerated by orch (run `{}`, pipeline `{}`). Per-stage branches: `orch/{}/<stage>`.\n",
        state.run_id, state.pipeline, state.run_id
    ));
    // The issue (maybe a forge's) and the summaries are untrusted text: no
    // control character reaches `pr.md`, a terminal or the forge raw.
    (
        crate::text::untrusted(&title).into_owned(),
        crate::text::untrusted(&body).into_owned(),
    )
}

/// The `## Not done` section: the stages not `required` that produced no
/// result (`no_change`), with why; nothing when every stage did its work.
fn not_done(body: &mut String, state: &RunState) {
    let none: Vec<&StageRecord> = state
        .stages
        .iter()
        .filter(|s| s.status == StageStatus::NoChange)
        .collect();
    if none.is_empty() {
        return;
    }
    body.push_str("\n## Not done\n\n");
    for s in none {
        body.push_str(&format!(
            "- **{}** ({}) produced no change: {}. The pipeline does not require it, so this change goes without it; its partial work, if any, is only on `orch/{}/{}`.\n",
            s.id,
            s.role,
            s.reason
                .as_deref()
                .unwrap_or("no reason recorded")
                .trim()
                .replace('\n', " "),
            state.run_id,
            s.id
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_titles_are_cut_at_a_word() {
        assert_eq!(shorten("short title", 72), "short title");
        let t = shorten(
            "word_count miscounts words separated by repeated spaces, tabs or newlines",
            72,
        );
        assert_eq!(
            t,
            "word_count miscounts words separated by repeated spaces, tabs or…"
        );
        assert!(t.chars().count() <= 72);
    }

    #[test]
    fn commit_message_has_trailers() {
        let m = commit_message(&CommitInfo {
            run_id: "r1",
            stage: "review",
            role: "reviewer",
            model: "replay",
            summary: "Looks good.\nMore.",
            verdict: Some(Verdict::Approve),
            turns: 3,
            tokens: TokenCount {
                prompt: 10,
                completion: 5,
                ..TokenCount::default()
            },
            duration_ms: 1500,
            cost_usd: Some(0.0123),
            failed: false,
            no_change: false,
            finish_from_text: true,
            verify: Some(true),
            memory: &[],
            escalated_from: None,
        });
        assert!(m.starts_with("orch(review): Looks good.\n\n"));
        for t in [
            "Orch-Run: r1",
            "Orch-Stage: review",
            "Orch-Role: reviewer",
            "Orch-Model: replay",
            "Orch-Turns: 3",
            "Orch-Tokens: 15",
            "Orch-Duration: 1.5s",
            "Orch-Verdict: approve",
            "Orch-Cost: $0.0123",
            "Orch-Verify: pass",
            "Orch-Finish: text (verify passed)",
        ] {
            assert!(m.contains(t), "{t} missing in {m}");
        }
    }
}
