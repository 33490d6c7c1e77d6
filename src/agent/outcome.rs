//! What a reply without tool calls means for a stage: a result, a nudge,
//! or a failure. A stage succeeds by `finish`, or — for roles whose result is
//! a text answer — by a non-empty text answer; nothing else may end it as a
//! success (an empty reply, a reply cut off at the output limit, a writing
//! role that talks instead of acting, a reviewer without a verdict). One
//! exception, for small models that write prose where `finish` belongs: a
//! writing stage with a verify gate whose lane changed ends on its prose,
//! and the gate decides (a failing gate goes back to the agent as usual).

use crate::ids::Verdict;
use regex::Regex;
use std::sync::LazyLock;

/// The nudge after an empty or whitespace reply.
pub(crate) const NUDGE_EMPTY: &str = "Your reply was empty. Call a tool to continue, or call `finish` with a summary when you are done.";
/// The nudge after a reply cut off at the output token limit.
pub(crate) const NUDGE_LENGTH: &str = "Your reply was cut off at the output token limit. Be brief: call a tool to continue, or call `finish` with a short summary.";
/// The nudge after a writing role answered in text without `finish`.
pub(crate) const NUDGE_FINISH: &str = "You answered in text without calling a tool. Call `finish` with a summary, or a tool to continue.";
/// The nudge after a reviewer answered without a verdict.
pub(crate) const NUDGE_VERDICT: &str =
    "Call the `finish` tool with your summary and a verdict: `approve` or `request_changes`.";

/// Bytes of a prose reply kept as the summary of a stage it finished.
const PROSE_SUMMARY_CAP: usize = 4096;

/// Who the agent is, as far as a text reply is concerned.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReplyRules {
    /// A text answer is the role's result (`result: text`, `orch agent`).
    pub text_result: bool,
    /// A review stage: the result must carry a verdict.
    pub require_verdict: bool,
    /// A writing stage with a verify gate whose lane has changed: a prose
    /// reply is taken as its `finish`, for the gate to judge.
    pub prose_finishes: bool,
}

/// What to do with a reply that has no tool calls.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TextReply {
    /// The stage's result: its text, and a verdict read from the text.
    Accept {
        summary: String,
        verdict: Option<Verdict>,
    },
    /// A writing stage's prose, taken as its `finish` (its summary) because
    /// a verify gate will judge the lane it changed.
    FinishFromText { summary: String },
    /// Tell the model this once, then let it answer again.
    Nudge(&'static str),
    /// The stage fails with this reason.
    Fail(String),
}

/// Judges a reply without tool calls. `nudged` says whether the model was
/// already nudged since its last tool call (one nudge, then the stage fails).
pub(crate) fn judge(
    rules: ReplyRules,
    content: Option<&str>,
    finish_reason: Option<&str>,
    nudged: bool,
) -> TextReply {
    let text = content.unwrap_or_default().trim();
    if finish_reason == Some("length") {
        return if nudged {
            TextReply::Fail("the model's reply was cut off at the output token limit (finish_reason: length) again after a nudge; no result".to_owned())
        } else {
            TextReply::Nudge(NUDGE_LENGTH)
        };
    }
    if text.is_empty() {
        return if nudged {
            TextReply::Fail(
                "the model gave an empty reply again after a nudge; no result".to_owned(),
            )
        } else {
            TextReply::Nudge(NUDGE_EMPTY)
        };
    }
    if rules.require_verdict {
        if let Some(verdict) = verdict_in_text(text) {
            return TextReply::Accept {
                summary: text.to_owned(),
                verdict: Some(verdict),
            };
        }
        return if nudged {
            TextReply::Fail("the reviewer gave no verdict: it answered in text without `finish` and without one unambiguous `verdict`, after a nudge".to_owned())
        } else {
            TextReply::Nudge(NUDGE_VERDICT)
        };
    }
    if rules.text_result {
        return TextReply::Accept {
            summary: text.to_owned(),
            verdict: None,
        };
    }
    if rules.prose_finishes {
        return TextReply::FinishFromText {
            summary: crate::text::cap_bytes(text, PROSE_SUMMARY_CAP),
        };
    }
    if nudged {
        TextReply::Fail("the model answered in text without calling `finish`, after a nudge; a text answer is not this role's result".to_owned())
    } else {
        TextReply::Nudge(NUDGE_FINISH)
    }
}

/// `verdict` followed by `:` or `=` (quotes, asterisks and backticks around
/// either side allowed), then the rest of the line.
static VERDICT: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)] // a constant pattern
    Regex::new(r#"(?i)verdict[`"'*_\s]*[:=][`"'*_\s]*([^\n]*)"#).expect("a valid pattern")
});

/// The values a line may name, in the spellings models use.
static VALUE: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)] // a constant pattern
    Regex::new(r"(?i)\b(approved?|request[_ -]changes|changes[_ -]requested)\b")
        .expect("a valid pattern")
});

/// The verdict a reviewer wrote in its text (`VERDICT: approve`,
/// `"verdict": "request_changes"`), only when it is unambiguous: every
/// `verdict:` found names the same one value, and no line names two.
pub(crate) fn verdict_in_text(text: &str) -> Option<Verdict> {
    let mut found: Option<Verdict> = None;
    for m in VERDICT.captures_iter(text) {
        let rest = m.get(1).map_or("", |r| r.as_str());
        let mut values = VALUE.find_iter(rest);
        // The value comes first after the colon ("verdict: approve").
        let first = values.next().filter(|v| v.start() == 0)?;
        let first = value_of(first.as_str());
        if values.any(|v| value_of(v.as_str()) != first) || found.is_some_and(|f| f != first) {
            return None;
        }
        found = Some(first);
    }
    found
}

fn value_of(word: &str) -> Verdict {
    if word.to_ascii_lowercase().starts_with("approve") {
        Verdict::Approve
    } else {
        Verdict::RequestChanges
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRITER: ReplyRules = ReplyRules {
        text_result: false,
        require_verdict: false,
        prose_finishes: false,
    };
    const EXPLORER: ReplyRules = ReplyRules {
        text_result: true,
        require_verdict: false,
        prose_finishes: false,
    };
    const REVIEWER: ReplyRules = ReplyRules {
        text_result: false,
        require_verdict: true,
        prose_finishes: false,
    };
    /// A writer with a verify gate whose lane changed.
    const GATED_WRITER: ReplyRules = ReplyRules {
        prose_finishes: true,
        ..WRITER
    };

    #[test]
    fn a_gated_writers_prose_finishes_but_not_an_empty_or_cut_off_reply() {
        assert_eq!(
            judge(GATED_WRITER, Some(" I fixed it. "), Some("stop"), false),
            TextReply::FinishFromText {
                summary: "I fixed it.".into()
            }
        );
        let long = "x".repeat(PROSE_SUMMARY_CAP * 2);
        assert!(matches!(
            judge(GATED_WRITER, Some(&long), None, true),
            TextReply::FinishFromText { summary } if summary.len() <= PROSE_SUMMARY_CAP + 64
        ));
        assert_eq!(
            judge(GATED_WRITER, Some(""), None, false),
            TextReply::Nudge(NUDGE_EMPTY)
        );
        assert_eq!(
            judge(GATED_WRITER, Some("half"), Some("length"), false),
            TextReply::Nudge(NUDGE_LENGTH)
        );
    }

    #[test]
    fn verdicts_in_text() {
        assert_eq!(verdict_in_text("VERDICT: approve"), Some(Verdict::Approve));
        assert_eq!(
            verdict_in_text("```json\n{\"verdict\": \"request_changes\", \"summary\": \"x\"}\n```"),
            Some(Verdict::RequestChanges)
        );
        assert_eq!(
            verdict_in_text("**Verdict:** Approved."),
            Some(Verdict::Approve)
        );
        assert_eq!(
            verdict_in_text("Verdict: approve\n...\nverdict = approve"),
            Some(Verdict::Approve)
        );
        // Ambiguous or absent.
        assert_eq!(verdict_in_text("verdict: approve or request_changes"), None);
        assert_eq!(
            verdict_in_text("Verdict: approve\nverdict: request changes"),
            None
        );
        assert_eq!(verdict_in_text("I approve of this change."), None);
        assert_eq!(verdict_in_text("verdict: not sure yet"), None);
        assert_eq!(verdict_in_text(""), None);
    }

    #[test]
    fn text_replies_are_judged_by_role() {
        assert_eq!(
            judge(EXPLORER, Some(" found it in a.rs:3 "), Some("stop"), false),
            TextReply::Accept {
                summary: "found it in a.rs:3".into(),
                verdict: None
            }
        );
        assert_eq!(
            judge(WRITER, Some("I fixed it."), None, false),
            TextReply::Nudge(NUDGE_FINISH)
        );
        assert!(matches!(
            judge(WRITER, Some("I fixed it."), None, true),
            TextReply::Fail(_)
        ));
        assert_eq!(
            judge(REVIEWER, Some("Looks fine."), None, false),
            TextReply::Nudge(NUDGE_VERDICT)
        );
        assert!(matches!(
            judge(REVIEWER, Some("Looks fine."), None, true),
            TextReply::Fail(_)
        ));
        assert_eq!(
            judge(REVIEWER, Some("VERDICT: approve"), None, true),
            TextReply::Accept {
                summary: "VERDICT: approve".into(),
                verdict: Some(Verdict::Approve)
            }
        );
    }

    #[test]
    fn empty_and_cut_off_replies_get_one_nudge() {
        for rules in [WRITER, EXPLORER, REVIEWER] {
            assert_eq!(
                judge(rules, Some(" \n"), None, false),
                TextReply::Nudge(NUDGE_EMPTY)
            );
            assert_eq!(
                judge(rules, None, None, false),
                TextReply::Nudge(NUDGE_EMPTY)
            );
            assert!(
                matches!(judge(rules, Some("\n"), None, true), TextReply::Fail(r) if r.contains("empty"))
            );
            assert_eq!(
                judge(rules, Some("half an ans"), Some("length"), false),
                TextReply::Nudge(NUDGE_LENGTH)
            );
            assert!(
                matches!(judge(rules, Some("half"), Some("length"), true), TextReply::Fail(r) if r.contains("length"))
            );
        }
    }
}
