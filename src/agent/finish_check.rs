//! What orch checks of the agent's work itself, at once (issue 28, points 4
//! and 5): the syntax of every file a write tool changed (its check goes
//! into the tool's result, [`crate::tools::syntax`]), and before a `finish`
//! is accepted, the lane's changes:
//!
//! - a writing stage (its role may `write_file`/`edit_file`; not a review,
//!   not a text-result role, not a stage that may decline the change: a
//!   `required: false` docs stage with nothing to document, a rework round
//!   whose coder disagrees with the review, answers so by finishing) whose
//!   lane has no change is recorded as
//!   `no_change: true`; when its model writes its tool calls as text, or is
//!   set to `constrained` or `text` calls (the small models of issue 28,
//!   which claimed "Resolved the issue" with nothing done), it is first told so once — the `finish` is refused with
//!   [`NO_CHANGE`] as its tool error — and a second `finish` still without
//!   a change ends the agent with no result ([`NO_CHANGE_AFTER_TOLD`]): a
//!   required stage fails, an optional one ends `no_change`, and
//!   `escalate_to` applies — the run never reports it as done. A
//!   model that calls tools natively is taken at its word: a `finish`
//!   without a change is a deliberate answer often enough (a docs stage with
//!   nothing to document, a check that found nothing to fix) that refusing
//!   it would cost every such stage a turn;
//! - changed files (what `git status` lists in the lane: written by tools
//!   or by `bash`) that do not parse refuse the `finish` once with their
//!   errors; a second `finish` is accepted, recorded as `syntax_errors`, and
//!   its summary says the changed files do not parse — except in a stage
//!   whose result is optional (`required: false`: the built-in docs stage,
//!   which runs after the review): there it ends the agent with no result
//!   ([`NOT_KEPT`]), so the stage ends `no_change` and the run keeps what
//!   came before it, never an unreviewed change that breaks files. The
//!   same holds for a small model's change that removed what its task
//!   names, told once.
//!
//! A read-only role's `finish` is never checked, and a lane whose changes
//! cannot be read (not a git worktree) is not judged at all.

use super::Agent;
use crate::tools::syntax::{self, SyntaxCheck};
use crate::tools::{ToolContext, ToolOutcome};
use std::collections::BTreeSet;

/// What a writing stage's `finish` without a change is told.
pub(crate) const NO_CHANGE: &str = "the task asks for a change; nothing in the lane changed";

/// Why an agent that was told nothing changed and finished again without a
/// change has no result.
pub(crate) const NO_CHANGE_AFTER_TOLD: &str =
    "finished without changing anything after it was told the task asks for a change";

/// Why an optional stage's change that breaks what it was told of is not
/// kept (the issue-to-pr docs stage of a 1.5B model wrote three lines of
/// grep output over the reviewed `solution.py`, and the run delivered it).
pub(crate) const NOT_KEPT: &str =
    "the change is not kept: the stage's result is optional, and its change breaks files";

/// Changed files checked before a `finish` (the rest are named as not
/// checked): each check is a child process.
const MAX_FINISH_CHECKS: usize = 20;

/// Bytes of syntax errors a refused `finish` shows (head and tail).
const REFUSAL_BYTES: usize = 6 * 1024;

/// Longest one-line tool summary (as the tools keep theirs).
const SUMMARY_CHARS: usize = 120;

/// What the agent was already told.
#[derive(Debug, Default)]
pub(super) struct FinishChecks {
    /// A `finish` was refused because nothing changed.
    told_no_change: bool,
    /// A `finish` was refused because changed files do not parse.
    told_syntax: bool,
    /// The first errors of the files whose `finish` was refused because
    /// they do not parse.
    syntax_told: Vec<String>,
    /// The names a small model's `finish` was refused for: the task named
    /// them, the files it showed held them, the change removed them.
    lost_told: Vec<String>,
    /// Why an optional stage's accepted `finish` is not its result: told
    /// once, it still left changed files that do not parse, or removed
    /// what its task names (set when that `finish` is taken).
    not_kept: Option<String>,
    /// Checkers already said to be unavailable (said once each).
    said_not_checked: BTreeSet<&'static str>,
    /// The model wrote tool calls as text in this conversation (a small
    /// model's sign): only such a model is told about a `finish` without
    /// a change; one that calls tools natively is taken at its word.
    calls_as_text: bool,
}

impl FinishChecks {
    /// The checks of an agent whose first turn asks for calls in `mode`: a
    /// model set to `constrained` or `text` calls is one that does not call
    /// tools natively, as one that wrote a call as text.
    pub(super) fn for_mode(mode: crate::llm::CallMode) -> Self {
        let mut checks = Self::default();
        if mode != crate::llm::CallMode::Native {
            checks.saw_calls_as_text();
        }
        checks
    }

    /// The model wrote a tool call as text (recovered and run).
    pub(super) fn saw_calls_as_text(&mut self) {
        self.calls_as_text = true;
    }

    /// Why the `finish` just taken is not the stage's result (an optional
    /// stage's change that breaks what it was told of), once.
    pub(super) fn take_not_kept(&mut self) -> Option<String> {
        self.not_kept.take()
    }

    /// Whether the model writes its tool calls as text (or is set to
    /// constrained or text calls): a small model's sign.
    pub(super) fn calls_as_text(&self) -> bool {
        self.calls_as_text
    }

    /// Whether a `finish` was refused because nothing changed.
    pub(super) fn told_no_change(&self) -> bool {
        self.told_no_change
    }

    /// The first errors of the changed files when a `finish` was refused
    /// because they do not parse (empty: not refused for that).
    pub(super) fn syntax_told(&self) -> &[String] {
        &self.syntax_told
    }

    /// The names a `finish` was refused for because the change removed
    /// them (empty: not refused for that).
    pub(super) fn lost_told(&self) -> &[String] {
        &self.lost_told
    }
}

impl Agent<'_> {
    /// After a write tool changed a file: the file's syntax check, its
    /// errors (or why it could not be checked, once a checker) added to
    /// the tool's result.
    pub(super) async fn check_written(
        &mut self,
        tool_ctx: &ToolContext,
        outcome: &mut ToolOutcome,
    ) {
        let Some(rel) = outcome.changed_path.clone() else {
            return;
        };
        if outcome.is_error || outcome.finish.is_some() || !syntax::has_checker(&rel) {
            return;
        }
        let checked = syntax::check(tool_ctx, &rel).await;
        if let SyntaxCheck::NotChecked { tool, .. } = &checked
            && !self.checks.said_not_checked.insert(tool)
        {
            return;
        }
        let Some(note) = checked.note(&rel) else {
            return;
        };
        outcome.content.push_str("\n\n");
        outcome
            .content
            .push_str(&crate::secrets::redact(&note, &[]));
        if let SyntaxCheck::Errors { first, .. } = &checked {
            outcome.summary = crate::text::one_line(
                &format!("{}; does not parse: {first}", outcome.summary),
                SUMMARY_CHARS,
            );
        }
    }

    /// Before the `finish` in `outcome` is accepted: refuses it once (the
    /// outcome becomes the tool error the model sees) when a writing stage
    /// changed nothing, and once when changed files do not parse; records
    /// what an accepted one leaves ([`super::AgentOutcome::no_change`],
    /// [`super::AgentOutcome::syntax_errors`]).
    pub(super) async fn check_finish(&mut self, tool_ctx: &ToolContext, outcome: &mut ToolOutcome) {
        let Some(fin) = &outcome.finish else {
            return;
        };
        // A review without a verdict is refused anyway (`take_finish`).
        if tool_ctx.read_only || (self.cfg.require_verdict && fin.verdict.is_none()) {
            return;
        }
        let root = tool_ctx.root.clone();
        let Ok(Ok(changed)) =
            tokio::task::spawn_blocking(move || crate::git::status_paths(&root)).await
        else {
            return;
        };
        self.out.no_change = false;
        self.out.syntax_errors.clear();
        if changed.is_empty() {
            if !self.writes(tool_ctx) {
                return;
            }
            if self.asks_for_change(tool_ctx)
                && self.checks.calls_as_text
                && !self.checks.told_no_change
            {
                self.checks.told_no_change = true;
                refuse(
                    outcome,
                    &format!(
                        "{NO_CHANGE}. Make the change the task asks for (write_file or edit_file), then call `finish` again. If the task truly needs no change, call `finish` again and say why in the summary."
                    ),
                    "nothing in the lane changed",
                );
                return;
            }
            self.out.no_change = true;
            return;
        }
        let (errors, text) = check_changed(tool_ctx, &changed).await;
        if errors.is_empty() {
            self.check_names_kept(tool_ctx, outcome);
            return;
        }
        if !self.checks.told_syntax {
            self.checks.told_syntax = true;
            self.checks.syntax_told = errors.clone();
            refuse(
                outcome,
                &format!(
                    "these changed files do not parse:\n\n{}\n\nFix them, then call `finish` again.",
                    crate::text::head_tail_lines(&text, REFUSAL_BYTES)
                ),
                "changed files do not parse",
            );
            return;
        }
        if self.cfg.change_optional {
            self.checks.not_kept = Some(format!(
                "{NOT_KEPT}: its changed files do not parse after it was told ({})",
                errors.join("; ")
            ));
        }
        if let Some(fin) = outcome.finish.as_mut() {
            fin.summary.push_str(&format!(
                "\n\nNote from orch: the changed files do not parse: {}",
                errors.join("; ")
            ));
        }
        self.out.syntax_errors = errors;
    }

    /// A small model's change that parses but removed what its task names
    /// — the 1.5B model replaced `solution.py` with `[]` (its own test
    /// command's output) and finished, a false success — is refused once
    /// with the names; a second `finish` is taken, its summary noting it.
    fn check_names_kept(&mut self, tool_ctx: &ToolContext, outcome: &mut ToolOutcome) {
        if !self.checks.calls_as_text {
            return;
        }
        let lost = self.names_lost(tool_ctx);
        if lost.is_empty() {
            return;
        }
        let names = lost
            .iter()
            .map(|(name, path)| format!("`{name}` (was in `{path}`)"))
            .collect::<Vec<_>>()
            .join(", ");
        if self.checks.lost_told.is_empty() {
            self.checks.lost_told = lost.iter().map(|(n, _)| n.clone()).collect();
            refuse(
                outcome,
                &format!(
                    "the task names {names}, and the change removed it. Write the complete file with it implemented, then call `finish` again."
                ),
                "the change removed what the task names",
            );
            return;
        }
        if self.cfg.change_optional {
            self.checks.not_kept = Some(format!(
                "{NOT_KEPT}: its change removed what the task names after it was told: {names}"
            ));
        }
        if let Some(fin) = outcome.finish.as_mut() {
            fin.summary.push_str(&format!(
                "\n\nNote from orch: the change removed what the task names: {names}"
            ));
        }
    }

    /// Whether this agent's task is a change: a writing stage's
    /// ([`Agent::writes`]) that may not decline it
    /// ([`super::AgentConfig::decline_allowed`]: an optional stage, a
    /// rework round).
    pub(super) fn asks_for_change(&self, tool_ctx: &ToolContext) -> bool {
        !self.cfg.decline_allowed && self.writes(tool_ctx)
    }

    /// Whether this agent is a writing stage's: its role may change files,
    /// and its result is neither a review nor a text answer.
    pub(super) fn writes(&self, tool_ctx: &ToolContext) -> bool {
        !self.cfg.require_verdict
            && !self.cfg.text_result
            && tool_ctx
                .allowed
                .iter()
                .any(|t| t == "write_file" || t == "edit_file")
    }
}

/// Checks the changed files that exist and have a checker; the first error
/// of each that does not parse, and all their errors as one text.
pub(super) async fn check_changed(
    tool_ctx: &ToolContext,
    changed: &[String],
) -> (Vec<String>, String) {
    let candidates: Vec<&String> = changed
        .iter()
        .filter(|p| syntax::has_checker(p) && tool_ctx.root.join(p).is_file())
        .collect();
    let (mut firsts, mut text) = (Vec::new(), String::new());
    for rel in candidates.iter().take(MAX_FINISH_CHECKS) {
        if let SyntaxCheck::Errors { first, text: t, .. } = syntax::check(tool_ctx, rel).await {
            firsts.push(crate::secrets::redact(&first, &[]));
            text.push_str(&crate::secrets::redact(&t, &[]));
            text.push_str("\n\n");
        }
    }
    if !firsts.is_empty() && candidates.len() > MAX_FINISH_CHECKS {
        text.push_str(&format!(
            "({} more changed files not checked)\n",
            candidates.len() - MAX_FINISH_CHECKS
        ));
    }
    (firsts, text.trim_end().to_owned())
}

/// Turns the `finish` in `outcome` into a tool error saying `why`.
fn refuse(outcome: &mut ToolOutcome, why: &str, short: &str) {
    outcome.finish = None;
    outcome.is_error = true;
    outcome.content = format!("error: finish: not accepted yet: {why}");
    outcome.summary = format!("error: finish refused: {short}");
}
