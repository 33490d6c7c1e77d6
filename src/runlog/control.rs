//! The run's control channel: what a user (`orch answer`, `orch guide`,
//! `orch ui`'s buttons) tells a live run from outside it, as files under
//! `<run>/control/` (layout in docs/run-record.md):
//!
//! ```text
//! control/asks/<n>.json                   a tool call waiting for approval (written by the run)
//! control/asks/<n>.answer.json            its answer: allow or deny, by whom (first writer wins)
//! control/guidance/<stage>/<n>.json       a note for the stage's next model turn
//! control/guidance/<stage>/<n>.consumed.json  the turn that received it (written by the run)
//! ```
//!
//! Invariants:
//! - Every file is written whole (a temp file in the same directory, then
//!   a rename or a hard link), so a reader sees all of it or nothing.
//! - Numbers are allocated by creating the file exclusively (a hard link of
//!   the temp file fails when the name exists), so two writers never share
//!   one, and an answer is never replaced: the first answer is the answer,
//!   whoever wrote it (the user, the terminal, or the run giving up).
//! - Nothing here blocks or waits: the run side polls ([`read_answer`],
//!   [`unconsumed_guidance`]) at its own pace; the user side only writes.
//! - The user side refuses work for a run no live process drives
//!   ([`super::run_is_live`]): nobody would read it.

use super::RunDir;
use super::state::StageStatus;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The longest guidance note accepted (bytes), so one note cannot fill a
/// model's context.
pub(crate) const MAX_GUIDANCE_BYTES: usize = 16 * 1024;

/// The longest `by` kept (characters): a name, not a message.
const MAX_BY_CHARS: usize = 64;

/// How a run without `--yes` answers a call an `ask` rule names
/// (`--ask-via`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum AskVia {
    /// On a terminal: the `[y/N]` prompt or a control answer (`orch
    /// answer`, `orch ui`), whichever comes first. Without one: denied at
    /// once, so a run in CI never waits.
    #[default]
    Auto,
    /// Also without a terminal: the call waits for a control answer
    /// (until `--ask-timeout`, the stage's time budget, or an interrupt).
    Control,
}

/// A tool call waiting for a user's approval (`control/asks/<id>.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PendingAsk {
    /// The ask's id within the run (`1`, `2`, …): what `orch answer` takes.
    pub id: String,
    /// The stage whose tool call asks.
    pub stage: String,
    /// The tool: `bash`, or an MCP tool's `mcp__server__tool` name.
    pub tool: String,
    /// The command line (`bash`), or the call's JSON arguments (MCP).
    pub command: String,
    /// Why it asks: the rule that matched (`role ask rule `touch*``).
    pub why: String,
    /// When it was asked (RFC 3339, UTC, milliseconds).
    pub created: String,
    /// When the run stops waiting and denies it (`--ask-timeout`); `None`:
    /// until the stage's time budget runs out, or the stage stops.
    pub expires: Option<String>,
}

/// The answer to an ask (`control/asks/<id>.answer.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AskAnswer {
    /// The ask answered.
    pub id: String,
    /// Whether the call may run.
    pub allow: bool,
    /// Who answered: `cli`, `ui`, `terminal`, a name given with `--by`,
    /// or `orch` when the run gave up waiting.
    pub by: String,
    /// When (RFC 3339, UTC, milliseconds).
    pub at: String,
    /// Why the run answered itself (no answer in time, the stage stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A note for a stage's next model turn (`control/guidance/<stage>/<id>.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Guidance {
    /// The note's id within its stage (`1`, `2`, …).
    pub id: String,
    /// The stage it is for.
    pub stage: String,
    /// What the user wrote.
    pub text: String,
    /// Who sent it (`cli`, `ui`, a name given with `--by`).
    pub by: String,
    /// When (RFC 3339, UTC, milliseconds).
    pub created: String,
}

/// Marks a note as received (`control/guidance/<stage>/<id>.consumed.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Consumed {
    /// The model turn whose request first held the note.
    pub turn: u32,
    /// When (RFC 3339, UTC, milliseconds).
    pub at: String,
}

/// What the control channel refuses, or could not do.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ControlError {
    /// Reading or writing a control file failed.
    #[error("write the run's control file {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// No live process drives the run.
    #[error(
        "reach run `{run}`: it is not running (no live orch process drives it), so nothing would read this"
    )]
    NotLive {
        /// The run id.
        run: String,
    },
    /// No ask with this id.
    #[error("answer ask `{id}` of run `{run}`: it has no such ask ({known})")]
    UnknownAsk {
        /// The run id.
        run: String,
        /// The id given.
        id: String,
        /// What the run's pending asks are, in words.
        known: String,
    },
    /// The ask has its answer already.
    #[error(
        "answer ask `{id}` of run `{run}`: it was already answered ({}) by {by} at {at}; an answer is final",
        if *.allow { "allowed" } else { "denied" }
    )]
    AlreadyAnswered {
        /// The run id.
        run: String,
        /// The ask.
        id: String,
        /// The answer it has.
        allow: bool,
        /// Who gave it.
        by: String,
        /// When.
        at: String,
    },
    /// No stage with this id in the run.
    #[error(
        "guide stage `{stage}` of run `{run}`: the run has no such stage (its stages: {known})"
    )]
    UnknownStage {
        /// The run id.
        run: String,
        /// The stage given.
        stage: String,
        /// The run's stage ids.
        known: String,
    },
    /// The stage is done (or will not run).
    #[error(
        "guide stage `{stage}` of run `{run}`: the stage is {status}; guidance goes only to a running or pending stage"
    )]
    StageNotRunning {
        /// The run id.
        run: String,
        /// The stage.
        stage: String,
        /// Its status.
        status: String,
    },
    /// An empty or oversized note.
    #[error("guide stage `{stage}`: {why}")]
    BadText {
        /// The stage.
        stage: String,
        /// What is wrong with it.
        why: String,
    },
    /// The run's state could not be read.
    #[error("{0}")]
    Record(#[from] super::RecordError),
}

/// The asks of the run at `run_dir` that wait for an answer, oldest first.
/// Empty when no live process drives the run (a killed run's asks wait for
/// nobody). Files that cannot be read are skipped.
pub(crate) fn pending_asks(run_dir: &Path) -> Vec<PendingAsk> {
    if !super::run_is_live(run_dir) {
        return Vec::new();
    }
    let dir = asks_dir(run_dir);
    let mut asks: Vec<PendingAsk> = numbered(&dir, ".json")
        .into_iter()
        .filter(|n| !dir.join(format!("{n}.answer.json")).exists())
        .filter_map(|n| read_json(&dir.join(format!("{n}.json"))))
        .collect();
    asks.sort_by_key(|a| a.id.parse::<u64>().unwrap_or(u64::MAX));
    asks
}

/// Answers ask `id` of the live run at `run_dir`: `allow` lets the call run,
/// otherwise the model is told the user denied it. The first answer is
/// final: a second one (also the same answer again) is refused with
/// [`ControlError::AlreadyAnswered`], naming the answer that stands; an id
/// the run never asked is [`ControlError::UnknownAsk`]. `by` says who
/// answers (`cli`, `ui`, a name).
pub(crate) fn answer_ask(
    run_dir: &Path,
    id: &str,
    allow: bool,
    by: &str,
) -> Result<AskAnswer, ControlError> {
    let run = run_name(run_dir);
    let dir = asks_dir(run_dir);
    let ask_path = dir.join(format!("{id}.json"));
    if id.parse::<u64>().is_err() || !ask_path.is_file() {
        let pending: Vec<String> = pending_asks(run_dir).into_iter().map(|a| a.id).collect();
        let known = if pending.is_empty() {
            "it has no pending ask".to_owned()
        } else {
            format!("pending: {}", pending.join(", "))
        };
        return Err(ControlError::UnknownAsk {
            run,
            id: id.to_owned(),
            known,
        });
    }
    if let Some(a) = read_answer(run_dir, id) {
        return Err(already(&run, a));
    }
    if !super::run_is_live(run_dir) {
        return Err(ControlError::NotLive { run });
    }
    resolve_ask(run_dir, id, allow, by, None)
}

/// Sends `text` to stage `stage` of the live run at `run_dir`: its next
/// model turn receives it as a user message ("Guidance from `by`: …") and
/// the action log records a `guidance` event. Refused when no live process
/// drives the run, the run has no such stage, or the stage is neither
/// running nor pending; an empty note or one over
/// [`MAX_GUIDANCE_BYTES`] is refused too.
pub(crate) fn send_guidance(
    run_dir: &Path,
    stage: &str,
    text: &str,
    by: &str,
) -> Result<Guidance, ControlError> {
    let run = run_name(run_dir);
    let bad = |why: String| ControlError::BadText {
        stage: stage.to_owned(),
        why,
    };
    if text.trim().is_empty() {
        return Err(bad("the note is empty".to_owned()));
    }
    if text.len() > MAX_GUIDANCE_BYTES {
        return Err(bad(format!(
            "the note is {} bytes; at most {MAX_GUIDANCE_BYTES} are accepted",
            text.len()
        )));
    }
    let state = RunDir::at(run_dir.to_path_buf()).read_state()?;
    let Some(rec) = state.stage(stage) else {
        let known: Vec<&str> = state.stages.iter().map(|s| s.id.as_str()).collect();
        return Err(ControlError::UnknownStage {
            run,
            stage: stage.to_owned(),
            known: known.join(", "),
        });
    };
    if !matches!(rec.status, StageStatus::Running | StageStatus::Pending) {
        return Err(ControlError::StageNotRunning {
            run,
            stage: stage.to_owned(),
            status: rec.status.as_str().to_owned(),
        });
    }
    if !super::run_is_live(run_dir) {
        return Err(ControlError::NotLive { run });
    }
    let dir = guidance_dir(run_dir, stage);
    let by = clean_by(by);
    let created = now();
    let (id, _) = create_numbered(&dir, |id| Guidance {
        id: id.to_owned(),
        stage: stage.to_owned(),
        text: text.to_owned(),
        by: by.clone(),
        created: created.clone(),
    })?;
    Ok(Guidance {
        id,
        stage: stage.to_owned(),
        text: text.to_owned(),
        by,
        created,
    })
}

// The run's side.

/// Writes a new pending ask for `stage`'s call of `tool`; returns it with
/// its id.
pub(crate) fn post_ask(
    run_dir: &Path,
    stage: &str,
    tool: &str,
    command: &str,
    why: &str,
    expires: Option<String>,
) -> Result<PendingAsk, ControlError> {
    let created = now();
    let make = |id: &str| PendingAsk {
        id: id.to_owned(),
        stage: stage.to_owned(),
        tool: tool.to_owned(),
        command: command.to_owned(),
        why: why.to_owned(),
        created: created.clone(),
        expires: expires.clone(),
    };
    let (id, _) = create_numbered(&asks_dir(run_dir), make)?;
    Ok(make(&id))
}

/// The answer to ask `id`, once there is one.
pub(crate) fn read_answer(run_dir: &Path, id: &str) -> Option<AskAnswer> {
    read_json(&asks_dir(run_dir).join(format!("{id}.answer.json")))
}

/// Writes the answer to ask `id` unless it has one: the answer that stands
/// (this one, or the earlier one that won); no liveness check (the run
/// itself answers: the terminal, a timeout, a stage that stopped).
pub(crate) fn settle_ask(
    run_dir: &Path,
    id: &str,
    allow: bool,
    by: &str,
    reason: Option<String>,
) -> Result<AskAnswer, ControlError> {
    match resolve_ask(run_dir, id, allow, by, reason) {
        Err(ControlError::AlreadyAnswered { .. }) => {
            read_answer(run_dir, id).ok_or_else(|| ControlError::Io {
                path: asks_dir(run_dir).join(format!("{id}.answer.json")),
                source: std::io::Error::other("the answer exists but cannot be read"),
            })
        }
        other => other,
    }
}

/// The notes for `stage` its agent has not received yet, oldest first.
/// One `read_dir` of a directory that usually does not exist.
pub(crate) fn unconsumed_guidance(run_dir: &Path, stage: &str) -> Vec<Guidance> {
    let dir = guidance_dir(run_dir, stage);
    let mut ids = numbered(&dir, ".json");
    ids.retain(|n| !dir.join(format!("{n}.consumed.json")).exists());
    ids.sort_unstable();
    ids.into_iter()
        .filter_map(|n| read_json(&dir.join(format!("{n}.json"))))
        .collect()
}

/// Marks note `id` of `stage` as received by model turn `turn`.
pub(crate) fn mark_consumed(
    run_dir: &Path,
    stage: &str,
    id: &str,
    turn: u32,
) -> Result<(), ControlError> {
    let path = guidance_dir(run_dir, stage).join(format!("{id}.consumed.json"));
    let body = json_bytes(&Consumed { turn, at: now() });
    super::write_atomic(&path, &body).map_err(|e| match e {
        super::RecordError::Io { path, source } => ControlError::Io { path, source },
        other => ControlError::Record(other),
    })
}

/// The user message a note becomes: who sent it, then the note as a quoted
/// block (each line after `> `), so the model reads it as the user's words
/// and nothing in it can pass for orch's own text.
pub(crate) fn guidance_message(g: &Guidance) -> String {
    let mut out = format!(
        "Guidance from {} (sent while you work; take it into account from now on):\n",
        g.by
    );
    for line in g.text.trim_end().lines() {
        out.push_str("> ");
        out.push_str(line);
        out.push('\n');
    }
    out.pop();
    out
}

// Files.

fn control_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("control")
}

fn asks_dir(run_dir: &Path) -> PathBuf {
    control_dir(run_dir).join("asks")
}

fn guidance_dir(run_dir: &Path, stage: &str) -> PathBuf {
    control_dir(run_dir).join("guidance").join(stage)
}

fn run_name(run_dir: &Path) -> String {
    run_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| run_dir.display().to_string())
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// `by` on one line, at most [`MAX_BY_CHARS`] characters; `cli` when empty.
fn clean_by(by: &str) -> String {
    let one: String = by
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_BY_CHARS)
        .collect();
    let one = one.trim();
    if one.is_empty() {
        "cli".to_owned()
    } else {
        one.to_owned()
    }
}

fn already(run: &str, a: AskAnswer) -> ControlError {
    ControlError::AlreadyAnswered {
        run: run.to_owned(),
        id: a.id,
        allow: a.allow,
        by: a.by,
        at: a.at,
    }
}

/// Writes the answer exclusively; [`ControlError::AlreadyAnswered`] when
/// one exists.
fn resolve_ask(
    run_dir: &Path,
    id: &str,
    allow: bool,
    by: &str,
    reason: Option<String>,
) -> Result<AskAnswer, ControlError> {
    let dir = asks_dir(run_dir);
    let answer = AskAnswer {
        id: id.to_owned(),
        allow,
        by: clean_by(by),
        at: now(),
        reason,
    };
    let path = dir.join(format!("{id}.answer.json"));
    if create_exclusive(&dir, &path, &json_bytes(&answer))? {
        Ok(answer)
    } else {
        let standing = read_answer(run_dir, id).unwrap_or(answer);
        Err(already(&run_name(run_dir), standing))
    }
}

/// The numbers `n` of the files `<n><suffix>` in `dir` (none when it does
/// not exist).
fn numbered(dir: &Path, suffix: &str) -> Vec<u64> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(suffix)?.parse::<u64>().ok()
        })
        .collect()
}

/// Creates `<n>.json` in `dir` with the next free number `n`, its content
/// `make(n)`; returns `n` and the path.
fn create_numbered<T: Serialize>(
    dir: &Path,
    make: impl Fn(&str) -> T,
) -> Result<(String, PathBuf), ControlError> {
    std::fs::create_dir_all(dir).map_err(|source| ControlError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut n = numbered(dir, ".json").into_iter().max().unwrap_or(0) + 1;
    // Another writer may take a number between the scan and the link.
    loop {
        let id = n.to_string();
        let path = dir.join(format!("{id}.json"));
        if create_exclusive(dir, &path, &json_bytes(&make(&id)))? {
            return Ok((id, path));
        }
        n += 1;
    }
}

/// Writes `bytes` to `path` whole, only if `path` does not exist: a temp
/// file in `dir`, fsynced, then hard-linked to `path` (which fails when the
/// name is taken). False when it existed.
fn create_exclusive(dir: &Path, path: &Path, bytes: &[u8]) -> Result<bool, ControlError> {
    let io = |source| ControlError::Io {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|source| ControlError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
    tmp.write_all(bytes).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    match std::fs::hard_link(tmp.path(), path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io(e)),
    }
    // `tmp` is removed on drop; `path` keeps the content.
}

fn json_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let text = std::fs::read(path).ok()?;
    serde_json::from_slice(&text).ok()
}

#[cfg(test)]
mod tests;
