//! Asking a writing agent that changed nothing for the complete new content
//! of the file its task names — what a small model does well when asked
//! directly ("reply with the complete new solution.py in one code block"),
//! and badly as a JSON `write_file` call (it copies the file unchanged, or
//! writes a raw `"""` that breaks the JSON).
//!
//! When: a writing agent (its role may write, text edits on, not read-only,
//! its stage's result not optional; the asks for "nothing changed" — after
//! prose, a refused `finish`, a repeat — not for a rework round either,
//! which may decline the review's findings)
//! whose lane has no change, whose task named files its first message
//! showed whole, either answered in text without a call (instead of the
//! usual "call `finish`" nudge) or had its `finish` refused because nothing
//! changed; or — when it writes its calls as text (a small model) — whose
//! `finish` was refused because the files it changed do not parse (the ask
//! shows the files as the task found them); or — such a model again —
//! that repeated a call (warned as a repeat, or failing the same way twice
//! in a row: reading the file its task already showed it is the usual
//! case) while the named files stayed as they were. At most once per
//! agent — and,
//! for such a model, once more after each failed verify round once it has
//! changed the named files: the ask then shows them as they are now, with
//! what the gate said, as Aider sends a failing test's output back for a
//! whole-file edit.
//!
//! How: a user message names the file(s); the next turn is sent as the
//! system prompt, the task (with the files it names) and that message —
//! without the tools (no `tools`, no schema, no catalogue) and without the
//! turns in between (nothing in the lane changed in them; a small model
//! repeats the broken JSON it wrote there) — so the model answers as it
//! would asked directly (the conversation keeps every turn); its reply's
//! first fenced block
//! (prose around it allowed) becomes a `write_file` of the one file asked
//! for — several files are asked in the whole-file format with paths
//! ([`crate::llm::textedits`]). The write goes through the same fence,
//! atomic write, diff, syntax check and action log as any `write_file`
//! (logged `recovered_from: asked_whole_file`); the turns after it offer
//! the tools again. A reply without a block gets the loop's usual handling
//! (the ask counted as its nudge).

use super::Agent;
use super::turn::logged_calls;
use crate::llm::textedits::{self, TextEdit};
use crate::llm::{ChatMessage, ChatRequest};
use crate::runlog::{ActionEvent, ActionLog, RecordError, event};
use crate::tools::ToolContext;

/// What this agent was asked for.
#[derive(Debug, Default)]
pub(super) struct WholeFileAsk {
    /// An ask was made (once per agent).
    asked: bool,
    /// The files the next turn answers for (its tools are withheld).
    next: Option<Vec<String>>,
    /// The files the turn being judged answered for.
    answering: Option<Vec<String>>,
    /// The id of the `write_file` call made from the answer.
    written: Option<String>,
    /// The named files as the task found them (read when the agent
    /// started); empty when one could not be read, and then nothing is
    /// asked.
    originals: Vec<(String, String)>,
    /// A call of this turn repeated itself (its tool's name): warned, or
    /// failing the same way twice in a row.
    repeating: Option<String>,
    /// The files the last ask showed.
    shown: Vec<(String, String)>,
}

impl WholeFileAsk {
    /// The ask state of an agent whose task showed `paths` whole: their
    /// content in the lane now, before any turn.
    pub(super) fn at_start(tool_ctx: &ToolContext, paths: &[String]) -> Self {
        Self {
            originals: read_all(tool_ctx, paths.iter()).unwrap_or_default(),
            ..Self::default()
        }
    }
}

/// `paths` in the lane now, each with its text; `None` when one cannot be
/// read as text.
fn read_all<'a>(
    tool_ctx: &ToolContext,
    paths: impl Iterator<Item = &'a String>,
) -> Option<Vec<(String, String)>> {
    paths
        .map(|p| {
            std::fs::read_to_string(tool_ctx.root.join(p))
                .ok()
                .map(|c| (p.clone(), c))
        })
        .collect()
}

/// Why the files are asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Why {
    /// Nothing in the lane changed.
    NoChange,
    /// The changed files do not parse (their first errors).
    DoesNotParse(Vec<String>),
    /// The verify gate failed (what it said, capped), and the named files
    /// are as the task found them.
    VerifyFailed(String),
    /// The verify gate failed (what it said, capped) on the named files as
    /// the model's answer to the last ask left them — unchanged by that
    /// answer, so they are shown as the task found them.
    VerifyFailedEchoed(String),
    /// The verify gate failed (what it said, capped) on the named files as
    /// the model changed them — or, when the change removed names the task
    /// names (listed), as the task found them ([`Agent::files_to_show`]).
    VerifyFailedChanged(String, Vec<String>),
    /// The model repeated a call (the tool's name) and nothing changed.
    Repeating(String),
    /// The model repeated a call (the tool's name) while the named files,
    /// changed, do not parse (the first error of each); the names the
    /// change removed, as for [`Why::VerifyFailedChanged`].
    RepeatingBroken(String, Vec<String>, Vec<String>),
    /// The change removed names the task names (and the files held).
    LostNames(Vec<String>),
    /// A call under the schema was cut off at its cap (the tokens).
    CutOff(u64),
}

/// Bytes of a failed verify's report an ask repeats.
const VERIFY_CAP: usize = 1536;

impl Why {
    fn sentence(&self) -> String {
        match self {
            Why::NoChange => {
                "Nothing in the lane changed, and the task asks for a change.".to_owned()
            }
            Why::DoesNotParse(errors) => format!(
                "The files you changed do not parse ({}).",
                errors.join("; ")
            ),
            Why::VerifyFailed(report) => format!(
                "{}\n\nThe files the task names are unchanged.",
                crate::text::cap_bytes(report.trim(), VERIFY_CAP)
            ),
            Why::LostNames(names) => format!(
                "Your change removed {} from the file, and the task names it.",
                crate::text::backticked(names)
            ),
            Why::Repeating(name) => format!(
                "You made the same `{name}` call again, nothing in the lane changed, and the task asks for a change."
            ),
            Why::RepeatingBroken(name, errors, lost) => format!(
                "You made the same `{name}` call again, and the files you changed do not parse ({}). {}",
                errors.join("; "),
                shown(lost)
            ),
            Why::CutOff(tokens) => {
                format!("Your tool call was cut off at {tokens} tokens and did not run.")
            }
            Why::VerifyFailedEchoed(report) => format!(
                "{}\n\nYour last answer gave the files back as they were shown to you. The files below are as the task found them: write them anew, so the verify commands pass.",
                crate::text::cap_bytes(report.trim(), VERIFY_CAP)
            ),
            Why::VerifyFailedChanged(report, lost) => format!(
                "{}\n\n{} Make the verify commands pass.",
                crate::text::cap_bytes(report.trim(), VERIFY_CAP),
                shown(lost)
            ),
        }
    }
}

/// Which version of the files an ask after a change shows: as the model
/// changed them, or — when the change removed names the task names
/// (`lost`) — as the task found them.
fn shown(lost: &[String]) -> String {
    if lost.is_empty() {
        "The files below are as you changed them.".to_owned()
    } else {
        format!(
            "Your change also removed {} from the file, and the task names it: the files below are as the task found them.",
            crate::text::backticked(lost)
        )
    }
}

/// What the result of the write made from the answer adds.
const WRITTEN_NOTE: &str = "orch wrote the file from your reply. If the change is complete, call `finish` with a short summary; otherwise continue.";

/// The instruction of an ask for `paths`' complete new content.
fn ask_text(paths: &[String], why: &Why) -> String {
    let why = why.sentence();
    match paths {
        [one] => format!(
            "{why} Reply with the complete new content of `{one}`, with the change the task asks for made, in one fenced code block, and nothing else; orch writes it to `{one}` for you."
        ),
        many => format!(
            "{why} For each file you change ({}), reply with its path on one line, then its complete new content in one fenced code block, and nothing else; orch writes them for you.",
            many.iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The fence's info string for a file, by its extension (the language a
/// model expects to see named); empty when unknown.
fn fence_language(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("py") => "python",
        Some("rs") => "rust",
        Some("js" | "mjs" | "cjs") => "javascript",
        Some("ts") => "typescript",
        Some("go") => "go",
        Some("rb") => "ruby",
        Some("java") => "java",
        Some("c" | "h") => "c",
        Some("cpp" | "cc" | "hpp") => "cpp",
        Some("sh") => "sh",
        Some("md") => "markdown",
        _ => "",
    }
}

/// The whole ask: the task as the stage gave it (`brief`), each file as the
/// task found it in a plain fenced block (as a user asking a model
/// directly would show it — the numbered listing of the first message is
/// what a small model echoes back), then [`ask_text`].
fn ask_message(brief: &str, files: &[(String, String)], why: &Why) -> String {
    let mut out = brief.trim_end().to_owned();
    for (path, content) in files {
        out.push_str(&format!(
            "\n\nThis is `{path}`:\n{}",
            crate::text::fenced(content, fence_language(path))
        ));
    }
    let paths: Vec<String> = files.iter().map(|(p, _)| p.clone()).collect();
    out.push_str("\n\n");
    out.push_str(&ask_text(&paths, why));
    out
}

impl Agent<'_> {
    /// Whether every named file is as the task found it (a lane can change
    /// elsewhere: a `__pycache__` the model's own test run left).
    pub(super) fn named_files_unchanged(&self, tool_ctx: &ToolContext) -> bool {
        self.named_files_now(tool_ctx).as_ref() == Some(&self.whole.originals)
    }

    /// The named files as they are in the lane now (`None`: one cannot be
    /// read as text).
    fn named_files_now(&self, tool_ctx: &ToolContext) -> Option<Vec<(String, String)>> {
        read_all(tool_ctx, self.whole.originals.iter().map(|(p, _)| p))
    }

    /// After its verify gate failed (`report`, what the agent was told): a
    /// small model (it writes its calls as text) that has not touched the
    /// files its task names is asked for them whole, once; one that has
    /// changed them is asked for them whole again, as they are now, with
    /// the report (once per failed round: the gate bounds the rounds).
    pub(crate) fn ask_whole_after_verify(
        &mut self,
        tool_ctx: &ToolContext,
        report: &str,
        log: &mut ActionLog,
    ) -> Result<(), RecordError> {
        if !self.checks.calls_as_text() || !self.may_ask_again(tool_ctx) {
            return Ok(());
        }
        let turn = self.out.turns;
        // The named files as they are now (all must still read as text).
        let Some(now) = self.named_files_now(tool_ctx) else {
            return Ok(());
        };
        if now == self.whole.originals {
            if !self.whole.asked {
                self.ask_whole_file(Why::VerifyFailed(report.to_owned()), turn, log)?;
            }
            return Ok(());
        }
        if now == self.whole.shown {
            // The model's answer to the last ask gave the files back as
            // shown (the 1.5B model on HumanEval/8 answered three failed
            // rounds with the same body): a fresh start from the task's
            // files, as the direct one-shot answer has it.
            let originals = self.whole.originals.clone();
            return self.ask_whole_files(
                Why::VerifyFailedEchoed(report.to_owned()),
                &originals,
                turn,
                log,
            );
        }
        let (shown, lost) = self.files_to_show(tool_ctx, now);
        self.ask_whole_files(
            Why::VerifyFailedChanged(report.to_owned(), lost),
            &shown,
            turn,
            log,
        )
    }

    /// The named files an ask after a change shows (`now`, as they are in
    /// the lane), with the names the change removed: when it removed names
    /// the task names, the files as the task found them — what is in the
    /// lane then holds nothing of the task, and a small model shown it
    /// echoes it back (the 1.5B model wrote the docstring's expected output
    /// `0 1 2 3 4 5` over HumanEval/15's `solution.py`, and answered three
    /// asks with that line).
    fn files_to_show(
        &self,
        tool_ctx: &ToolContext,
        now: Vec<(String, String)>,
    ) -> (Vec<(String, String)>, Vec<String>) {
        let lost: Vec<String> = self
            .names_lost(tool_ctx)
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        if lost.is_empty() {
            (now, lost)
        } else {
            (self.whole.originals.clone(), lost)
        }
    }

    /// After a small model repeated a call (`name`) while the named files
    /// are changed and one does not parse (the 1.5B model on HumanEval/0
    /// and /11 went round reading or grepping its broken file until
    /// `finish` was refused): asked for them whole as they are now, with
    /// the errors. The caller checked [`Agent::may_ask_whole_file`]. True
    /// when asked.
    pub(super) async fn ask_when_repeating_broken(
        &mut self,
        tool_ctx: &ToolContext,
        name: &str,
        turn: u32,
        log: &mut ActionLog,
    ) -> Result<bool, RecordError> {
        let Some(now) = self.named_files_now(tool_ctx) else {
            return Ok(false);
        };
        if now == self.whole.originals {
            return Ok(false);
        }
        let paths: Vec<String> = now.iter().map(|(p, _)| p.clone()).collect();
        let (errors, _) = super::finish_check::check_changed(tool_ctx, &paths).await;
        if errors.is_empty() {
            return Ok(false);
        }
        let (shown, lost) = self.files_to_show(tool_ctx, now);
        let why = Why::RepeatingBroken(name.to_owned(), errors, lost);
        self.ask_whole_files(why, &shown, turn, log)?;
        Ok(true)
    }

    /// Whether the next turn answers a whole-file ask (it is sent without
    /// tools and without the schema).
    pub(super) fn answers_ask(&self) -> bool {
        self.whole.next.is_some()
    }

    /// After a constrained turn's reply was cut off at its cap (`tokens`),
    /// before the model made any call of its own: a writer whose task
    /// named files is asked for them whole (as they are now), in a turn
    /// without the schema and under the cap of every turn. True when
    /// asked; else the usual nudge follows.
    pub(super) fn ask_after_cutoff(
        &mut self,
        tool_ctx: &ToolContext,
        tokens: u64,
        turn: u32,
        log: &mut ActionLog,
    ) -> Result<bool, RecordError> {
        if !self.may_ask_whole_file(tool_ctx) {
            return Ok(false);
        }
        let Some(now) = self.named_files_now(tool_ctx) else {
            return Ok(false);
        };
        self.ask_whole_files(Why::CutOff(tokens), &now, turn, log)?;
        Ok(true)
    }

    /// Whether this agent may be asked for a whole file at all — its role
    /// writes, its task showed files whole — whether or not it was asked
    /// before.
    fn may_ask_again(&self, tool_ctx: &ToolContext) -> bool {
        !self.whole.originals.is_empty()
            && self.cfg.text_edits
            && !tool_ctx.read_only
            && self.req.tools.iter().any(|t| t.name == "write_file")
            && self.writes(tool_ctx)
            && !self.cfg.change_optional
    }

    /// Whether this agent may be asked for a whole file (see the module
    /// docs), the lane's state aside.
    pub(super) fn may_ask_whole_file(&self, tool_ctx: &ToolContext) -> bool {
        !self.whole.asked && self.may_ask_again(tool_ctx)
    }

    /// Asks for the named files' complete new content (the caller checked
    /// [`Agent::may_ask_whole_file`], and `why` holds): the message is
    /// added (the instruction logged as a nudge), and the next turn is sent
    /// as that message alone after the system prompt.
    pub(super) fn ask_whole_file(
        &mut self,
        why: Why,
        turn: u32,
        log: &mut ActionLog,
    ) -> Result<(), RecordError> {
        let originals = std::mem::take(&mut self.whole.originals);
        let asked = self.ask_whole_files(why, &originals, turn, log);
        self.whole.originals = originals;
        asked
    }

    /// [`Agent::ask_whole_file`] showing `files` (path, content).
    fn ask_whole_files(
        &mut self,
        why: Why,
        files: &[(String, String)],
        turn: u32,
        log: &mut ActionLog,
    ) -> Result<(), RecordError> {
        self.whole.asked = true;
        self.whole.shown = files.to_vec();
        let paths: Vec<String> = files.iter().map(|(p, _)| p.clone()).collect();
        log.append(&ActionEvent::Nudge(event::Nudge {
            turn,
            message: ask_text(&paths, &why),
        }))?;
        let text = ask_message(&self.cfg.brief, files, &why);
        self.req.messages.push(ChatMessage::user(text));
        self.whole.next = Some(paths);
        Ok(())
    }

    /// The request of the turn about to be sent, when it answers a
    /// whole-file ask (the files asked for are remembered): the system
    /// prompt and the ask — without tools, and without the turns before,
    /// where nothing changed and a small model only learns to repeat the
    /// format it failed in. The conversation keeps every turn.
    pub(super) fn asked_request(&mut self) -> Option<ChatRequest> {
        let paths = self.whole.next.take()?;
        self.whole.answering = Some(paths);
        let messages = &self.req.messages;
        let sent = vec![messages.first()?.clone(), messages.last()?.clone()];
        Some(ChatRequest {
            messages: sent,
            tools: Vec::new(),
            agent_path: self.req.agent_path.clone(),
            call_mode: crate::llm::CallMode::Native,
        })
    }

    /// The reply to a whole-file ask of one file, without tool calls and
    /// not in a text edit format: its first fenced block becomes the
    /// `write_file` of that file (logged). Called after the general text
    /// edit recovery.
    pub(super) fn recover_asked_file(
        &mut self,
        msg: &mut ChatMessage,
        tool_ctx: &ToolContext,
        turn: u32,
        log: &mut ActionLog,
    ) -> Result<(), RecordError> {
        let Some(paths) = self.whole.answering.take() else {
            return Ok(());
        };
        let [path] = paths.as_slice() else {
            return Ok(());
        };
        if !msg.tool_calls.is_empty() {
            return Ok(());
        }
        let Some((content, _more)) = msg.content.as_deref().and_then(textedits::asked_block) else {
            return Ok(());
        };
        let exists = |p: &str| tool_ctx.root.join(p).is_file();
        let edit = TextEdit::Whole {
            path: path.clone(),
            content,
        };
        let Some(calls) =
            textedits::edit_calls(&[edit], &self.req.tools, &exists, &format!("asked{turn}"))
        else {
            return Ok(());
        };
        self.whole.written = calls.first().map(|c| c.id.clone());
        msg.tool_calls = calls;
        msg.content = None;
        log.append(&ActionEvent::ToolCallsRecovered(
            event::ToolCallsRecovered {
                turn,
                recovered_from: "asked_whole_file".to_owned(),
                format: textedits::TextEditFormat::WholeFile.as_str().to_owned(),
                tool_calls: logged_calls(&msg.tool_calls),
            },
        ))
    }
}

impl Agent<'_> {
    /// A call of this turn repeated itself (`name`): warned as a repeat, or
    /// failing as the call before it did.
    pub(super) fn note_repeat(&mut self, name: &str) {
        self.whole.repeating = Some(name.to_owned());
    }

    /// The names the task's brief gives in backticks (identifiers) that a
    /// named file held when the task found it and no named file holds now,
    /// each with the file that held it.
    pub(super) fn names_lost(&self, tool_ctx: &ToolContext) -> Vec<(String, String)> {
        let now: Vec<String> = self
            .whole
            .originals
            .iter()
            .filter_map(|(p, _)| std::fs::read_to_string(tool_ctx.root.join(p)).ok())
            .collect();
        let mut lost = Vec::new();
        for name in backticked_identifiers(&self.cfg.brief) {
            let held = self
                .whole
                .originals
                .iter()
                .find(|(_, text)| has_word(text, &name));
            if let Some((path, _)) = held
                && !now.iter().any(|text| has_word(text, &name))
                && !lost.iter().any(|(n, _)| n == &name)
            {
                lost.push((name, path.clone()));
            }
        }
        lost
    }

    /// The repeat noted this turn, if any (cleared).
    pub(super) fn take_repeat(&mut self) -> Option<String> {
        self.whole.repeating.take()
    }

    /// After the write made from an answer to the ask ran: its result says
    /// what happened and what comes next.
    pub(super) fn note_asked_write(
        &mut self,
        call_id: &str,
        outcome: &mut crate::tools::ToolOutcome,
    ) {
        if self.whole.written.as_deref() == Some(call_id) && !outcome.is_error {
            self.whole.written = None;
            outcome.content.push_str("\n\n");
            outcome.content.push_str(WRITTEN_NOTE);
        }
    }
}

/// The spans of `text` in single backticks, line by line outside fenced
/// blocks, that are identifiers of three characters or more
/// (`filter_by_substring`, `median`).
fn backticked_identifiers(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        out.extend(
            line.split('`')
                .skip(1)
                .step_by(2)
                .map(str::trim)
                .filter(|s| {
                    s.len() >= 3
                        && s.chars()
                            .next()
                            .is_some_and(|c| c.is_alphabetic() || c == '_')
                        && s.chars().all(|c| c.is_alphanumeric() || c == '_')
                })
                .map(str::to_owned),
        );
    }
    out
}

/// Whether `word` appears in `text` with no identifier character either side.
fn has_word(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(ident)
            && !text[i + word.len()..].chars().next().is_some_and(ident)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_a_brief_gives_are_its_backticked_identifiers_found_as_words() {
        let brief = "Implement `filter_by_substring` in solution.py so `x` and `a b` work, `_ok1` too.\n```\ncode `not_this`\n```\n";
        assert_eq!(
            backticked_identifiers(brief),
            ["filter_by_substring", "_ok1"]
        );
        assert!(has_word("def median(xs):", "median"));
        assert!(!has_word("def median_of(xs):", "median"));
        assert!(!has_word("[]", "median"));
    }

    #[test]
    fn the_ask_shows_each_file_plainly_after_the_brief() {
        let files = vec![("solution.py".to_owned(), "def f():\n    pass\n".to_owned())];
        let text = ask_message("# Task\n\nImplement f.\n", &files, &Why::NoChange);
        assert!(
            text.starts_with("# Task\n\nImplement f.\n\nThis is `solution.py`:\n```python\ndef f():\n    pass\n```\n\nNothing in the lane changed"),
            "{text}"
        );
        let broken = ask_message(
            "t",
            &files,
            &Why::DoesNotParse(vec!["solution.py:1:3: SyntaxError: invalid syntax".into()]),
        );
        assert!(
            broken.ends_with("The files you changed do not parse (solution.py:1:3: SyntaxError: invalid syntax). Reply with the complete new content of `solution.py`, with the change the task asks for made, in one fenced code block, and nothing else; orch writes it to `solution.py` for you."),
            "{broken}"
        );
        // A file holding a fence is shown in a longer one.
        let md = vec![("README.md".to_owned(), "```sh\nls\n```".to_owned())];
        assert!(
            ask_message("t", &md, &Why::NoChange).contains("````markdown\n```sh\nls\n```\n````")
        );
    }

    #[test]
    fn the_ask_names_the_files() {
        let one = ask_text(&["solution.py".to_owned()], &Why::NoChange);
        assert!(
            one.contains("complete new content of `solution.py`")
                && one.contains("one fenced code block"),
            "{one}"
        );
        let two = ask_text(&["a.py".to_owned(), "b.py".to_owned()], &Why::NoChange);
        assert!(
            two.contains("(`a.py`, `b.py`)") && two.contains("its path on one line"),
            "{two}"
        );
    }
}
