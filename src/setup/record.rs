//! The setup record: one directory per `orch setup`, outside any
//! repository (there may be none): `$ORCH_SETUP_DIR/<id>/`, else
//! `$XDG_STATE_HOME/orch/setup/<id>/`, else `~/.local/state/orch/setup/<id>/`.
//!
//! Files: `state.json` (goal, mode, rounds, per-step status; written
//! atomically after every change, so a kill leaves the last completed
//! step), `plan.json` (the current plan; earlier versions `plan.vN.json`),
//! `transcript.json` (the conversation, so a resumed setup can ask the
//! model again), `log.jsonl` (append-only events: each model request with
//! the `tool_choice` it sent, each answer's tokens and latency, tool calls, questions and
//! answers, step runs) and `report.md`. Secret values are redacted.

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::event::SetupEvent;
use super::plan::Plan;
use super::status::{CheckBefore, StepStatus};
use crate::llm::ChatMessage;

/// Overrides where setup records live (tests, packaging).
pub const SETUP_DIR_VAR: &str = crate::environment::ORCH_SETUP_DIR;

/// What is known about one step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub(crate) struct StepState {
    /// Progress.
    pub(crate) status: StepStatus,
    /// The command's exit code.
    #[serde(default)]
    pub(crate) exit_code: Option<i32>,
    /// The check's exit code.
    #[serde(default)]
    pub(crate) check_exit_code: Option<i32>,
    /// The first line of the check's output (the version now).
    #[serde(default)]
    pub(crate) check_line: Option<String>,
    /// What the check said when it last ran before the step (at plan time,
    /// then right before the step); `failed` once it was seen failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) check_before: Option<CheckBefore>,
}

/// `state.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SetupState {
    /// The setup id.
    pub(crate) id: String,
    /// The goal as given.
    pub(crate) goal: String,
    /// The directory commands run in.
    pub(crate) cwd: PathBuf,
    /// `planning`, `planned`, `running`, `done`, `failed`, `not_confirmed`.
    pub(crate) status: String,
    /// Model rounds used so far (at most [`super::options::MAX_ROUNDS`]).
    pub(crate) rounds: u32,
    /// How many plans the model made.
    pub(crate) plan_version: u32,
    /// Per step of the current plan.
    pub(crate) steps: Vec<StepState>,
    /// Step positions (0-based) that already had their one retry or plan change.
    #[serde(default)]
    pub(crate) recovered: Vec<usize>,
    /// The steps (1-based, of the plan then) whose checks passed before
    /// their steps when orch sent the plan back for it: once per setup.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) sent_back: Vec<usize>,
    /// The model settings the setup was started (or last resumed) with, so
    /// `orch setup --resume ID` without model flags talks to the same model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<ModelFlags>,
    /// A `--lane` setup: its scratch lane is gone when it ends, so it is
    /// run again, not resumed.
    #[serde(default)]
    pub(crate) lane: bool,
}

/// The model flags of a setup as recorded (never the API key: that stays
/// in the environment or the profile).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct ModelFlags {
    /// `--base-url` (or `ORCH_BASE_URL` when no flag gave it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) base_url: Option<String>,
    /// `--model` (or `ORCH_MODEL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<String>,
    /// `--replay FILE`, absolute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) replay: Option<PathBuf>,
    /// `--profile` (or `ORCH_PROFILE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) profile: Option<String>,
    /// `--no-stream`.
    #[serde(default)]
    pub(crate) no_stream: bool,
    /// `--temperature`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) temperature: Option<f64>,
    /// `--seed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) seed: Option<u64>,
    /// `--max-output-tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_output_tokens: Option<u64>,
    /// `--tool-choice`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tool_choice: Option<crate::llm::ToolChoice>,
}

impl ModelFlags {
    /// The flags as command-line words (shell-quoted), for a printed hint.
    pub(crate) fn to_args(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut flag = |name: &str, value: Option<String>| {
            if let Some(v) = value {
                out.push(format!("--{name} {}", shell_word(&v)));
            }
        };
        flag(
            "replay",
            self.replay.as_ref().map(|p| p.display().to_string()),
        );
        flag("base-url", self.base_url.clone());
        flag("model", self.model.clone());
        flag("profile", self.profile.clone());
        flag("temperature", self.temperature.map(|t| t.to_string()));
        flag("seed", self.seed.map(|t| t.to_string()));
        flag(
            "max-output-tokens",
            self.max_output_tokens.map(|t| t.to_string()),
        );
        flag(
            "tool-choice",
            self.tool_choice.map(|c| match c {
                crate::llm::ToolChoice::Auto => "auto".to_owned(),
                crate::llm::ToolChoice::Required => "required".to_owned(),
            }),
        );
        if self.no_stream {
            out.push("--no-stream".to_owned());
        }
        out
    }
}

/// `s` as one shell word: as is when it is plain, else single-quoted.
pub(crate) fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./:=@%+,-".contains(c));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The model flags recorded for setup `id`; `None` when there is no such
/// setup or it recorded none.
pub(crate) fn recorded_model(id: &str) -> Option<ModelFlags> {
    SetupRecord::open(id, Vec::new())
        .ok()?
        .read_state()
        .ok()?
        .model
}

/// The root of all setup records.
pub(crate) fn records_root() -> Option<PathBuf> {
    let env = |k: &str| {
        crate::environment::current()
            .var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env(SETUP_DIR_VAR)
        .or_else(|| env("XDG_STATE_HOME").map(|d| d.join("orch").join("setup")))
        .or_else(|| env("HOME").map(|h| h.join(".local/state/orch/setup")))
}

/// One setup's record directory.
#[derive(Debug, Clone)]
pub(crate) struct SetupRecord {
    dir: PathBuf,
    secrets: Vec<String>,
}

impl SetupRecord {
    /// Creates the directory of a new setup `id`.
    pub(crate) fn create(id: &str, secrets: Vec<String>) -> Result<Self, String> {
        let root = records_root()
            .ok_or("find a place for the setup record: set HOME or ORCH_SETUP_DIR")?;
        let dir = root.join(id);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        Ok(Self { dir, secrets })
    }

    /// Opens the record of setup `id`.
    pub(crate) fn open(id: &str, secrets: Vec<String>) -> Result<Self, String> {
        let root = records_root().ok_or("find the setup records: set HOME or ORCH_SETUP_DIR")?;
        if id.is_empty() || id.contains('/') || id.starts_with('.') {
            return Err(format!("`{id}` is not a setup id"));
        }
        let dir = root.join(id);
        if !dir.join("state.json").is_file() {
            return Err(format!("no setup `{id}` in {}", root.display()));
        }
        Ok(Self { dir, secrets })
    }

    /// The directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn write_json<T: Serialize>(&self, name: &str, value: &T) -> Result<(), String> {
        let text =
            serde_json::to_string_pretty(value).map_err(|e| format!("encode {name}: {e}"))?;
        let text = crate::secrets::redact(&text, &self.secrets);
        let path = self.dir.join(name);
        crate::runlog::write_atomic(&path, text.as_bytes()).map_err(|e| e.to_string())
    }

    fn read_json<T: for<'de> Deserialize<'de>>(&self, name: &str) -> Result<T, String> {
        let path = self.dir.join(name);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("parse {}: {e}", path.display()))
    }

    /// Writes `state.json`.
    pub(crate) fn write_state(&self, state: &SetupState) -> Result<(), String> {
        self.write_json("state.json", state)
    }

    /// Reads `state.json`.
    pub(crate) fn read_state(&self) -> Result<SetupState, String> {
        self.read_json("state.json")
    }

    /// Writes `plan.json` (and `plan.v<version>.json`, the history).
    pub(crate) fn write_plan(&self, plan: &Plan, version: u32) -> Result<(), String> {
        self.write_json(&format!("plan.v{version}.json"), plan)?;
        self.write_json("plan.json", plan)
    }

    /// Reads `plan.json`.
    pub(crate) fn read_plan(&self) -> Result<Plan, String> {
        self.read_json("plan.json")
    }

    /// Writes `transcript.json`.
    pub(crate) fn write_transcript(&self, messages: &[ChatMessage]) -> Result<(), String> {
        self.write_json("transcript.json", &messages)
    }

    /// Reads `transcript.json` (empty when there is none yet).
    pub(crate) fn read_transcript(&self) -> Vec<ChatMessage> {
        self.read_json("transcript.json").unwrap_or_default()
    }

    /// Writes `report.md`.
    pub(crate) fn write_report(&self, text: &str) -> Result<(), String> {
        let text = crate::secrets::redact(text, &self.secrets);
        crate::runlog::write_atomic(&self.dir.join("report.md"), text.as_bytes())
            .map_err(|e| e.to_string())
    }

    /// Appends one event to `log.jsonl`, with a timestamp.
    pub(crate) fn log(&self, event: &SetupEvent) {
        let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let line = match event.to_line(&ts) {
            Ok(line) => line,
            Err(e) => {
                tracing::warn!("failed to encode a setup log event: {e}");
                return;
            }
        };
        let text = crate::secrets::redact(&line.to_string(), &self.secrets);
        let path = self.dir.join("log.jsonl");
        // The log is a record of what happened; a failed append must not
        // stop a half-done installation, so it is reported, not fatal.
        let res = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| writeln!(f, "{text}"));
        if let Err(e) = res {
            tracing::warn!("failed to append to {}: {e}", path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_print_as_shell_words() {
        assert_eq!(shell_word("http://h:1/v1"), "http://h:1/v1");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
        let f = ModelFlags {
            replay: Some(PathBuf::from("/r/my replay.json")),
            temperature: Some(0.5),
            tool_choice: Some(crate::llm::ToolChoice::Required),
            no_stream: true,
            ..ModelFlags::default()
        };
        assert_eq!(
            f.to_args(),
            [
                "--replay '/r/my replay.json'",
                "--temperature 0.5",
                "--tool-choice required",
                "--no-stream"
            ]
        );
    }
}
