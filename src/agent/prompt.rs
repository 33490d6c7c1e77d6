//! Prompt rendering: the system prompt of a role and the task message of a
//! stage, including the hand-off from its upstream stages (summaries,
//! verdicts, budgeted diffs and action digests).
//!
//! Prompts are kept lean on purpose: the first request of a coder stage,
//! with every tool offered, has a budget of 8 KB.

use crate::ids::Verdict;

/// Bytes of diff a stage is shown from all its upstream stages together.
pub(crate) const HANDOFF_DIFF_BUDGET: usize = 24 * 1024;
/// Action-digest lines shown per upstream stage (the last ones are kept).
pub(crate) const HANDOFF_DIGEST_LINES: usize = 20;

/// What a downstream stage is told about one upstream stage.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    /// Stage id.
    pub id: String,
    /// Role name.
    pub role: String,
    /// The agent's final summary.
    pub summary: String,
    /// A reviewer's verdict.
    pub verdict: Option<Verdict>,
    /// `git diff --stat`-like lines.
    pub diffstat: String,
    /// The unified diff (already cut to this stage's share of the budget).
    pub patch: String,
    /// One line per tool call.
    pub digest: Vec<String>,
    /// The stage's verify gate, one line (`None`: it has none).
    pub verify: Option<String>,
    /// What its verify commands did on the start commit, before the change
    /// (`None`: no baseline ran).
    pub baseline: Option<String>,
}

/// Replaces `{{ name }}` (inner spaces optional) with its value; unknown
/// names are left as written so a typo stays visible.
pub(crate) fn render(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                let name = after[..end].trim();
                match vars.iter().find(|(k, _)| *k == name) {
                    Some((_, v)) => out.push_str(v),
                    None => out.push_str(&rest[start..start + 2 + end + 2]),
                }
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The system prompt: the role's prompt plus the few facts every agent needs.
pub(crate) fn system_prompt(role_prompt: &str, tools: &[String]) -> String {
    let mut s = role_prompt.trim().to_owned();
    s.push_str("\n\nYou work in a git worktree of the user's repository; paths are relative to its root. Tools: ");
    s.push_str(&tools.join(", "));
    s.push_str(". When done, call `finish` with a short summary of what you did and found.");
    s
}

/// `system` followed by the project-instructions section (unchanged when
/// `instructions` is empty).
pub(crate) fn with_instructions(mut system: String, instructions: &str) -> String {
    if !instructions.trim().is_empty() {
        system.push_str("\n\n");
        system.push_str(instructions.trim_end());
    }
    system
}

/// The first user message of a stage: its task, the issue, and the hand-off.
pub(crate) fn task_message(task_template: &str, issue: &str, upstream: &[Upstream]) -> String {
    let task = render(task_template, &[("issue", issue)]);
    let mut s = String::with_capacity(task.len() + issue.len() + 1024);
    s.push_str("# Task\n\n");
    s.push_str(task.trim());
    s.push('\n');
    if !task_template.contains("issue") && !issue.trim().is_empty() {
        s.push_str("\n# Issue\n\n");
        s.push_str(issue.trim());
        s.push('\n');
    }
    if upstream.is_empty() {
        return s;
    }
    s.push_str("\n# Earlier stages\n");
    for u in upstream {
        s.push_str(&format!("\n## Stage `{}` ({})\n\n", u.id, u.role));
        if let Some(v) = u.verdict {
            s.push_str(&format!("Verdict: {v}\n"));
        }
        let summary = if u.summary.trim().is_empty() {
            "(no summary)"
        } else {
            u.summary.trim()
        };
        s.push_str(&format!("Summary: {summary}\n"));
        match &u.verify {
            Some(line) => s.push_str(&format!("Verify: {line}\n")),
            // A reviewer's own stage runs no tests; a writer's may.
            None if u.verdict.is_none() => {
                s.push_str("Verify: none set (orch ran no tests for this stage)\n");
            }
            None => {}
        }
        if let Some(b) = &u.baseline {
            s.push_str(b);
        }
        if !u.digest.is_empty() {
            s.push_str("Actions:\n");
            let skip = u.digest.len().saturating_sub(HANDOFF_DIGEST_LINES);
            if skip > 0 {
                s.push_str(&format!("- [… {skip} earlier actions …]\n"));
            }
            for line in &u.digest[skip..] {
                s.push_str("- ");
                s.push_str(line);
                s.push('\n');
            }
        }
        if u.patch.trim().is_empty() {
            s.push_str("Changes: none\n");
        } else {
            s.push_str("Changes:\n");
            s.push_str(u.diffstat.trim_end());
            s.push_str("\n```diff\n");
            s.push_str(u.patch.trim_end());
            s.push_str("\n```\n");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_replaces_known_and_keeps_unknown() {
        let out = render(
            "Fix {{issue}} now {{ issue }} {{ nope }} {{",
            &[("issue", "X")],
        );
        assert_eq!(out, "Fix X now X {{ nope }} {{");
    }

    #[test]
    fn task_message_carries_handoff() {
        let up = Upstream {
            id: "code".into(),
            role: "coder".into(),
            summary: "fixed the split".into(),
            verdict: None,
            verify: None,
            baseline: None,
            diffstat: " a.py | 2 +-".into(),
            patch: "--- a/a.py\n+++ b/a.py\n-x\n+y".into(),
            digest: (0..25).map(|i| format!("bash step {i}")).collect(),
        };
        let review = Upstream {
            id: "review".into(),
            role: "reviewer".into(),
            summary: "add a test".into(),
            verdict: Some(Verdict::RequestChanges),
            verify: None,
            baseline: None,
            diffstat: String::new(),
            patch: String::new(),
            digest: vec![],
        };
        let m = task_message("Review the change.", "The bug.", &[up, review]);
        assert!(m.contains("# Issue\n\nThe bug."));
        assert!(m.contains("## Stage `code` (coder)"));
        assert!(m.contains("Summary: fixed the split"));
        assert!(m.contains("[… 5 earlier actions …]"));
        assert!(m.contains("- bash step 24"));
        assert!(!m.contains("- bash step 4\n"));
        assert!(m.contains("```diff\n--- a/a.py"));
        assert!(m.contains("Verdict: request_changes"));
        assert!(m.contains("Changes: none"));
        // The issue is not repeated when the template already includes it.
        let m = task_message("Resolve: {{ issue }}", "The bug.", &[]);
        assert_eq!(m.matches("The bug.").count(), 1);
    }
}
