//! Distillation on key events only: after a stage, its transcript and
//! verify report are checked for an event worth remembering (tests that
//! failed at least twice and then passed, a policy denial worked around, a
//! review round approving after one that requested changes, a stage that
//! failed and then succeeded on `--retry`); on one, a single
//! model call with the built-in `distill` role over the relevant slice of
//! the transcript yields 0–3 lessons as JSON, which are written `proposed`
//! (or `accepted` with `memory = "auto-accept"`) with their evidence. No
//! event, no call.

use super::{Evidence, Kind, Lesson, MemoryError, Origin, Scope, Status};
use crate::agent::verify::VerifyReport;
use crate::llm::{ChatMessage, ChatModel, ChatRequest, MessageRole};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;

/// The built-in `distill` role.
pub(crate) const DISTILL_ROLE: &str = include_str!("../../roles/distill.md");
/// Most lessons one event yields.
const MAX_LESSONS: usize = 3;
/// Bytes of the transcript slice sent to the distiller.
const SLICE_BYTES: usize = 8 * 1024;
/// Bytes of one tool result or message inside the slice.
const MESSAGE_BYTES: usize = 700;
/// Failures of a test command before its pass makes an event.
const MIN_FAILURES: usize = 2;

/// A key event of a stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyEvent {
    /// `verify_fixed`, `tests_fixed`, `denial_worked_around`, `retry_succeeded`.
    pub kind: &'static str,
    /// One sentence for the distiller.
    pub what: String,
    /// Index of the first transcript message of the slice.
    pub from: usize,
}

/// What [`detect`] looks at.
pub(crate) struct StageFacts<'a> {
    /// The stage's transcript.
    pub transcript: &'a [ChatMessage],
    /// Its verify gate.
    pub verify: Option<&'a VerifyReport>,
    /// True when it succeeded.
    pub succeeded: bool,
    /// True when an earlier attempt of this stage had failed.
    pub retried_after_failure: bool,
    /// True for a review round after one that requested changes, approving.
    pub approved_after_changes: bool,
}

/// Whether `command` looks like a test command.
fn is_test_command(command: &str) -> bool {
    let c = command.to_ascii_lowercase();
    c.split(|ch: char| !(ch.is_alphanumeric() || ch == '_' || ch == '-'))
        .any(|w| {
            matches!(
                w,
                "test"
                    | "tests"
                    | "pytest"
                    | "jest"
                    | "vitest"
                    | "mocha"
                    | "rspec"
                    | "check"
                    | "unittest"
                    | "ctest"
                    | "nextest"
            )
        })
}

/// The exit code a bash tool result ends with (`[exit 1, 0.1s]`); `None`
/// for a denial, a timeout or anything else.
fn exit_code_of(result: &str) -> Option<i32> {
    let tail = result.trim_end().rsplit_once("[exit ")?.1;
    tail.split(',').next()?.trim().parse().ok()
}

/// The first key event of a stage, or `None`.
pub(crate) fn detect(f: &StageFacts<'_>) -> Option<KeyEvent> {
    if let Some(v) = f.verify {
        let failed = v.rounds.len().saturating_sub(1);
        if v.passed && failed >= MIN_FAILURES {
            // Verify feedback reaches the agent as a user message after the task.
            let from = f
                .transcript
                .iter()
                .enumerate()
                .skip(2)
                .find(|(_, m)| m.role == MessageRole::User)
                .map_or(0, |(i, _)| i);
            return Some(KeyEvent {
                kind: "verify_fixed",
                what: format!(
                    "the stage's verify command (`{}`) failed {failed} times, then passed",
                    v.commands.join("`, `")
                ),
                from,
            });
        }
    }
    let mut commands: HashMap<&str, String> = HashMap::new();
    let mut test_failures: Vec<(usize, String)> = Vec::new();
    let mut denied: Option<(usize, String)> = None;
    for (i, m) in f.transcript.iter().enumerate() {
        for c in m.tool_calls.iter().filter(|c| c.function.name == "bash") {
            let cmd = serde_json::from_str::<serde_json::Value>(&c.function.arguments)
                .ok()
                .and_then(|v| v["command"].as_str().map(str::to_owned))
                .unwrap_or_default();
            commands.insert(c.id.as_str(), cmd);
        }
        if m.role != MessageRole::Tool {
            continue;
        }
        let Some(cmd) = m.tool_call_id.as_deref().and_then(|id| commands.get(id)) else {
            continue;
        };
        let text = m.content.as_deref().unwrap_or("");
        if text.starts_with("error: bash: command not run: denied by policy") {
            denied.get_or_insert((i, cmd.clone()));
            continue;
        }
        let Some(code) = exit_code_of(text) else {
            continue;
        };
        if is_test_command(cmd) {
            if code != 0 {
                test_failures.push((i, cmd.clone()));
            } else if test_failures.len() >= MIN_FAILURES {
                return Some(KeyEvent {
                    kind: "tests_fixed",
                    what: format!(
                        "the test command `{}` failed {} times, then `{cmd}` passed",
                        test_failures[0].1,
                        test_failures.len()
                    ),
                    from: test_failures[0].0.saturating_sub(1),
                });
            }
        }
        if code == 0
            && let Some((at, d)) = &denied
        {
            return Some(KeyEvent {
                kind: "denial_worked_around",
                what: format!("`{d}` was denied by policy; `{cmd}` then succeeded instead"),
                from: at.saturating_sub(1),
            });
        }
    }
    if f.approved_after_changes && f.succeeded {
        // The task message holds the reworked change and the earlier findings.
        return Some(KeyEvent {
            kind: "review_approved_after_changes",
            what: "an earlier review round requested changes; this round approved the rework"
                .into(),
            from: 1,
        });
    }
    (f.retried_after_failure && f.succeeded).then(|| KeyEvent {
        kind: "retry_succeeded",
        what: "an earlier attempt of this stage failed; this attempt (--retry) succeeded".into(),
        from: 1,
    })
}

/// The slice of the transcript the distiller sees: from the event on, each
/// message capped, the whole capped (head and tail).
pub(crate) fn slice(transcript: &[ChatMessage], from: usize) -> String {
    let mut s = String::new();
    for m in transcript.iter().skip(from.max(1)) {
        let who = match m.role {
            MessageRole::System => "system",
            MessageRole::User => "user",
            MessageRole::Assistant => "assistant",
            MessageRole::Tool => "tool result",
        };
        if let Some(t) = m.content.as_deref().filter(|t| !t.trim().is_empty()) {
            s.push_str(&format!(
                "{who}: {}\n",
                crate::text::head_tail_lines(t.trim(), MESSAGE_BYTES)
            ));
        }
        for c in &m.tool_calls {
            s.push_str(&format!(
                "{who} calls {}: {}\n",
                c.function.name,
                crate::text::cap_bytes(&c.function.arguments, MESSAGE_BYTES)
            ));
        }
    }
    crate::text::head_tail_lines(&s, SLICE_BYTES)
}

/// One lesson as the distiller writes it.
#[derive(Debug, Deserialize)]
pub(crate) struct Draft {
    pub title: String,
    #[serde(default)]
    pub kind: Option<Kind>,
    pub summary: String,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub paths: Vec<String>,
    #[serde(default)]
    pub tags: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Drafts {
    Wrapped { lessons: Vec<Draft> },
    Bare(Vec<Draft>),
}

/// The lessons in a distiller's reply (a JSON object `{"lessons": […]}`
/// or a bare array, possibly in a code fence); at most [`MAX_LESSONS`].
pub(crate) fn parse_reply(text: &str) -> Result<Vec<Draft>, String> {
    let start = text.find(['{', '[']).ok_or("the reply holds no JSON")?;
    let end = text.rfind(['}', ']']).ok_or("the reply holds no JSON")?;
    if end < start {
        return Err("the reply holds no JSON".into());
    }
    let drafts: Drafts = serde_json::from_str(&text[start..=end])
        .map_err(|e| format!("the reply is not the lessons JSON: {e}"))?;
    let list = match drafts {
        Drafts::Wrapped { lessons } | Drafts::Bare(lessons) => lessons,
    };
    Ok(list
        .into_iter()
        .filter(|d| !d.title.trim().is_empty() && !d.summary.trim().is_empty())
        .take(MAX_LESSONS)
        .collect())
}

/// The request to the distiller for `event`.
pub(crate) fn request(
    event: &KeyEvent,
    task: &str,
    transcript: &[ChatMessage],
    agent_path: String,
) -> ChatRequest {
    let system = crate::role::parse_role(DISTILL_ROLE, "built-in distill.md")
        .map(|r| r.prompt)
        .unwrap_or_default();
    let user = format!(
        "Key event: {} ({}).\n\nStage task:\n{}\n\nTranscript from the event on:\n{}\n\nAnswer with JSON only: {{\"lessons\": [{{\"title\": \"…\", \"kind\": \"pitfall|convention|environment|fix-pattern|decision\", \"summary\": \"one line, at most 300 characters\", \"body\": \"at most 1000 characters\", \"paths\": [\"path globs it applies to\"], \"tags\": [\"words or symbols\"]}}]}} with 0 to 3 lessons.",
        event.kind,
        event.what,
        crate::text::head_tail_lines(task.trim(), 1024),
        slice(transcript, event.from),
    );
    ChatRequest {
        messages: vec![ChatMessage::system(system), ChatMessage::user(user)],
        tools: Vec::new(),
        agent_path,
    }
}

/// What one distillation produced.
#[derive(Debug, Default)]
pub(crate) struct Distilled {
    /// The ids written.
    pub ids: Vec<String>,
    /// The commit on the memory ref (none when no lesson came out).
    pub commit: Option<String>,
    /// Tokens the call used.
    pub usage: crate::llm::Usage,
}

/// Calls the distiller once for `event` and writes what it proposes.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn distill(
    model: &dyn ChatModel,
    common: &Path,
    event: &KeyEvent,
    task: &str,
    transcript: &[ChatMessage],
    evidence: Evidence,
    status: Status,
    secrets: &[String],
) -> Result<Distilled, String> {
    let req = request(
        event,
        task,
        transcript,
        format!("{}/distill", evidence.stage),
    );
    let reply = model
        .complete(&req)
        .await
        .map_err(|e| format!("the distill call failed: {e}"))?;
    let drafts = parse_reply(reply.message.content.as_deref().unwrap_or(""))?;
    let mut out = Distilled {
        usage: reply.usage,
        ..Distilled::default()
    };
    if drafts.is_empty() {
        return Ok(out);
    }
    let created = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let expires = (chrono::Utc::now() + chrono::Duration::days(super::DEFAULT_EXPIRY_DAYS))
        .format("%Y-%m-%d")
        .to_string();
    let (common, secrets) = (common.to_path_buf(), secrets.to_vec());
    let trailers = format!(
        "Orch-Run: {}\nOrch-Stage: {}\nOrch-Commit: {}\nOrch-Event: {}\n",
        evidence.run, evidence.stage, evidence.commit, evidence.event
    );
    let result = tokio::task::spawn_blocking(move || {
        let mut ids = Vec::new();
        let commit = super::store::update(&common, "propose", &trailers, |current| {
            let mut new: Vec<Lesson> = Vec::new();
            for d in drafts {
                let taken =
                    |id: &str| current.iter().any(|l| l.id == id) || new.iter().any(|l| l.id == id);
                let mut l = Lesson {
                    id: super::new_id(&d.title, &taken),
                    title: d.title,
                    kind: d.kind.unwrap_or(Kind::Pitfall),
                    scope: Scope {
                        paths: d.paths,
                        tags: d.tags,
                    },
                    evidence: Some(evidence.clone()),
                    created: created.clone(),
                    expires: Some(expires.clone()),
                    status,
                    uses: 0,
                    failed_uses: 0,
                    summary: d.summary,
                    body: d.body,
                    origin: Origin::Ref,
                };
                l.sanitize(&secrets);
                new.push(l);
            }
            ids = new.iter().map(|l| l.id.clone()).collect();
            Ok(new)
        });
        (commit, ids)
    })
    .await
    .map_err(|e| format!("write the distilled lessons: {e}"))?;
    out.commit = result
        .0
        .map_err(|e: MemoryError| format!("write the distilled lessons: {e}"))?;
    out.ids = result.1;
    Ok(out)
}
