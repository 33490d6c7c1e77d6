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
use crate::llm::{ChatMessage, ChatModel, ChatRequest, MessageRole};
use crate::runlog::VerifyReport;
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

/// Programs that run tests whatever their arguments.
const TEST_RUNNERS: &[&str] = &[
    "pytest", "py.test", "jest", "vitest", "mocha", "rspec", "ctest", "tox", "nox", "phpunit",
    "ava", "karma", "busted", "prove", "bats", "unittest", "nextest",
];
/// Programs whose subcommand (the first word after them) runs tests when it
/// is one of the words given.
const TEST_SUBCOMMANDS: &[(&str, &[&str])] = &[
    ("go", &["test"]),
    ("cargo", &["test", "nextest"]),
    ("npm", &["test", "t", "run"]),
    ("yarn", &["test", "run"]),
    ("pnpm", &["test", "run"]),
    ("bun", &["test", "run"]),
    ("deno", &["test"]),
    ("dotnet", &["test"]),
    ("mvn", &["test", "verify"]),
    ("gradle", &["test", "check"]),
    ("gradlew", &["test", "check"]),
    ("mix", &["test"]),
    ("swift", &["test"]),
    ("zig", &["test", "build"]),
];
/// Interpreters and shells whose script argument is looked at.
const INTERPRETERS: &[&str] = &[
    "python", "python3", "python2", "pypy", "pypy3", "sh", "bash", "zsh", "dash", "ksh", "node",
    "ruby", "perl", "php", "tsx", "ts-node", "coverage", "uv", "poetry", "pipenv", "bundle",
];

/// Whether the file name `name` (a basename) names a test script.
fn is_test_file(name: &str) -> bool {
    let (stem, ext) = name.rsplit_once('.').unwrap_or((name, ""));
    let stem_l = stem.to_ascii_lowercase();
    let script = matches!(
        ext,
        "py" | "sh"
            | "bash"
            | "go"
            | "rb"
            | "js"
            | "ts"
            | "mjs"
            | "cjs"
            | "jsx"
            | "tsx"
            | "pl"
            | "t"
            | "php"
            | ""
    );
    script
        && (stem_l == "test"
            || stem_l == "tests"
            || stem_l == "run_tests"
            || stem_l == "runtests"
            || stem_l.starts_with("test_")
            || stem_l.ends_with("_test")
            || stem_l.ends_with("_tests")
            || stem_l.ends_with("_spec")
            || stem_l.ends_with(".spec")
            || stem_l.ends_with(".test")
            || stem_l.starts_with("run_tests"))
}

/// Whether `segment` (one simple command, split at `&&`, `||`, `;`, `|`)
/// runs tests: a test runner, a build tool's test subcommand, `make`
/// with a `test`/`check` target, `python -m pytest|unittest`, or an
/// interpreter (or the script itself) running a test file.
fn is_test_segment(segment: &str) -> bool {
    let mut words = segment.split_whitespace().peekable();
    // Leading assignments and wrappers (`FOO=1 timeout 60 pytest`).
    while let Some(w) = words.peek() {
        let is_assign = w.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        let numeric = w.starts_with(|c: char| c.is_ascii_digit())
            && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '.');
        if is_assign
            || numeric
            || matches!(
                *w,
                "env" | "time" | "timeout" | "nice" | "exec" | "command" | "xvfb-run"
            )
        {
            words.next();
        } else {
            break;
        }
    }
    let Some(first) = words.next() else {
        return false;
    };
    let program = first.rsplit('/').next().unwrap_or(first);
    let rest: Vec<&str> = words.collect();
    let args = || rest.iter().copied().filter(|w| !w.starts_with('-'));
    let script = first.contains('/') || program.ends_with(".sh");
    if TEST_RUNNERS.contains(&program) || (script && is_test_file(program)) {
        return true;
    }
    if program == "make" || program == "gmake" {
        return args().any(|t| t.contains("test") || t.contains("check"));
    }
    if let Some((_, subs)) = TEST_SUBCOMMANDS.iter().find(|(p, _)| *p == program) {
        let Some(sub) = args().next() else {
            return false;
        };
        return match sub {
            // `npm run test:unit`, `yarn run check`: a script named for tests.
            "run" => args()
                .nth(1)
                .is_some_and(|s| s.contains("test") || s.contains("check")),
            s => subs.contains(&s) || (s.contains("test") && program != "go"),
        };
    }
    let interpreter = INTERPRETERS.contains(&program)
        || program.starts_with("python3.")
        || program.starts_with("python2.");
    if !interpreter {
        return false;
    }
    // `python -m pytest`, `uv run pytest`, `coverage run -m unittest`.
    if rest
        .windows(2)
        .any(|w| w[0] == "-m" && matches!(w[1], "pytest" | "unittest" | "nose2" | "tox" | "nox"))
    {
        return true;
    }
    args().any(|a| {
        let base = a.rsplit('/').next().unwrap_or(a);
        TEST_RUNNERS.contains(&base) || is_test_file(base)
    })
}

/// Whether `command` runs tests: one of its simple commands does (see
/// [`is_test_segment`]), or it is one of the stage's verify commands.
pub(crate) fn is_test_command(command: &str, verify: &[String]) -> bool {
    let trimmed = command.trim();
    if verify
        .iter()
        .any(|v| !v.trim().is_empty() && v.trim() == trimmed)
    {
        return true;
    }
    trimmed
        .split(['\n', ';', '|', '&', '(', ')', '{', '}', '"', '\'', '`'])
        .any(is_test_segment)
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
    let verify_commands = f.verify.map(|v| v.commands.as_slice()).unwrap_or_default();
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
        if is_test_command(cmd, verify_commands) {
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
        call_mode: crate::llm::CallMode::Native,
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
