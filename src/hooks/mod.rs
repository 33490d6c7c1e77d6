//! Hooks in Claude Code's shape: commands the user configured that run at
//! fixed points of an agent's life and may refuse or redirect what it does.
//!
//! ```json
//! {"hooks": {"PreToolUse": [{"matcher": "Bash",
//!   "hooks": [{"type": "command", "command": "./check.sh", "timeout": 30}]}]}}
//! ```
//!
//! - [`Hook`] is one command bound to one [`HookEvent`] and a matcher;
//!   [`parse`] reads the `hooks` object of any source (`.claude/settings.json`,
//!   `.claude/settings.local.json`, an agent file's `hooks:`, `orch.toml
//!   [hooks]`), naming each event or hook type orch does not run;
//! - [`config`] finds the sources and applies the trust rule: hooks written
//!   in the repository run only when the user trusts them;
//! - [`run`] runs the hooks of one agent ([`StageHooks`]): Claude Code's JSON
//!   on stdin, in the lane, under the same sandbox, environment and process
//!   group rules as `bash`, with a timeout; every run is a `hook_run` event.
//!
//! Invariants: a hook never widens what an agent may do (a PreToolUse
//! `allow` does not bypass orch's policy), and a hook's failure (a non-zero
//! exit other than 2, a timeout) is logged and never ends the stage.

pub(crate) mod config;
pub(crate) mod run;

pub(crate) use config::HookConfig;
pub(crate) use run::StageHooks;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Seconds a hook may run when it names no `timeout` (Claude Code's default).
pub(crate) const DEFAULT_TIMEOUT_SECS: u64 = 60;

/// Longest `timeout` a hook may ask for (orch's longest `bash` call).
pub(crate) const MAX_TIMEOUT_SECS: u64 = 600;

/// When a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum HookEvent {
    /// Before a tool call runs; may refuse it.
    PreToolUse,
    /// After a tool call ran; may add to its result.
    PostToolUse,
    /// Before the stage's task is sent; may add context or refuse it.
    UserPromptSubmit,
    /// Before a stage's `finish` is accepted; may send the agent back.
    Stop,
    /// Before a subagent's `finish` is accepted.
    SubagentStop,
    /// When a stage's agent starts; may add context.
    SessionStart,
}

impl HookEvent {
    /// Every event orch runs, by its Claude Code name.
    pub const ALL: [HookEvent; 6] = [
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::UserPromptSubmit,
        HookEvent::Stop,
        HookEvent::SubagentStop,
        HookEvent::SessionStart,
    ];

    /// The Claude Code name (`PreToolUse`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::Stop => "Stop",
            HookEvent::SubagentStop => "SubagentStop",
            HookEvent::SessionStart => "SessionStart",
        }
    }

    /// Whether the event's `matcher` is matched against tool names.
    fn matches_tools(self) -> bool {
        matches!(self, HookEvent::PreToolUse | HookEvent::PostToolUse)
    }
}

/// Claude Code's other events: named as not run when configured.
const NOT_RUN_EVENTS: &[(&str, &str)] = &[
    (
        "Notification",
        "orch sends no notifications (a run never waits on a prompt)",
    ),
    (
        "PreCompact",
        "orch compacts without asking (docs/budgets-and-compaction.md)",
    ),
    (
        "SessionEnd",
        "use the `stage_end` event of the event stream",
    ),
    (
        "PermissionRequest",
        "orch asks through its own policy (`bash: { ask: [...] }`, --yes)",
    ),
];

/// One hook: a command, the event it runs on and what it matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hook {
    /// When it runs.
    pub event: HookEvent,
    /// The tool-name pattern as written (`""`: every tool; only
    /// [`HookEvent::PreToolUse`] and [`HookEvent::PostToolUse`] match).
    pub matcher: String,
    /// The shell command (run by `bash -c` in the lane).
    pub command: String,
    /// Seconds it may run before its process group is killed.
    pub timeout_secs: u64,
    /// Where it was written (`.claude/settings.json`, `role coder (…)`).
    pub source: String,
}

impl Hook {
    /// One line for `--dry-run`: `PreToolUse [Bash] ./check.sh (timeout 30s, from .claude/settings.json)`.
    pub(crate) fn describe(&self) -> String {
        let matcher = if self.event.matches_tools() && !self.matcher.trim().is_empty() {
            format!(" [{}]", self.matcher)
        } else {
            String::new()
        };
        format!(
            "{}{matcher} `{}` (timeout {}s, from {})",
            self.event.as_str(),
            self.command,
            self.timeout_secs,
            self.source
        )
    }

    /// Whether the hook runs for a call of the orch tool `tool`: its
    /// matcher, an anchored regex (`Bash`, `Edit|Write`, `mcp__.*`), matches
    /// the orch name or one of its Claude Code names; empty and `*` match
    /// every tool.
    pub fn matches_tool(&self, tool: &str) -> bool {
        if !self.event.matches_tools() {
            return true;
        }
        let m = self.matcher.trim();
        if m.is_empty() || m == "*" {
            return true;
        }
        let Ok(re) = regex::Regex::new(&format!("^(?:{m})$")) else {
            return false;
        };
        re.is_match(tool) || claude_names(tool).iter().any(|n| re.is_match(n))
    }
}

/// The Claude Code names of an orch tool (the first is the one hooks are
/// told in `tool_name`).
pub(crate) fn claude_names(tool: &str) -> &'static [&'static str] {
    match tool {
        "bash" => &["Bash"],
        "read_file" => &["Read"],
        "write_file" => &["Write"],
        "edit_file" => &["Edit", "MultiEdit"],
        "list_files" => &["Glob", "LS"],
        "grep" => &["Grep"],
        "spawn_agent" => &["Task", "Agent"],
        _ => &[],
    }
}

/// Reads a `hooks` object (`{"PreToolUse": [{"matcher": …, "hooks": [{"type":
/// "command", "command": …, "timeout": …}]}], …}`) written at `source` (the
/// hooks' [`Hook::source`]). Events and hook types orch does not run are not
/// an error: each gets one line in `notes` (without the source), saying
/// what to do instead. `Err` names what is malformed.
pub(crate) fn parse(
    hooks: &Value,
    source: &str,
    notes: &mut Vec<String>,
) -> Result<Vec<Hook>, String> {
    let Some(events) = hooks.as_object() else {
        return Err(format!(
            "`hooks` must be an object of events (PreToolUse, PostToolUse, …), not {}",
            kind(hooks)
        ));
    };
    let mut out = Vec::new();
    for (name, groups) in events {
        let Some(event) = HookEvent::ALL.iter().find(|e| e.as_str() == name) else {
            match NOT_RUN_EVENTS.iter().find(|(n, _)| n == name) {
                Some((_, instead)) => {
                    notes.push(format!("hooks.{name} is not run by orch: {instead}"))
                }
                None => notes.push(format!(
                    "hooks.{name} is not an event orch knows (it runs {}); not run",
                    HookEvent::ALL.map(HookEvent::as_str).join(", ")
                )),
            }
            continue;
        };
        let Some(groups) = groups.as_array() else {
            return Err(format!(
                "hooks.{name} must be a list of {{matcher, hooks}} objects, not {}",
                kind(groups)
            ));
        };
        for (i, group) in groups.iter().enumerate() {
            let at = format!("hooks.{name}[{i}]");
            out.extend(parse_group(*event, group, &at, source, notes)?);
        }
    }
    Ok(out)
}

/// One `{matcher, hooks: [...]}` entry of `at`.
fn parse_group(
    event: HookEvent,
    group: &Value,
    at: &str,
    source: &str,
    notes: &mut Vec<String>,
) -> Result<Vec<Hook>, String> {
    let Some(obj) = group.as_object() else {
        return Err(format!(
            "{at} must be an object with `hooks`, not {}",
            kind(group)
        ));
    };
    let matcher = match obj.get("matcher") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(m)) => m.clone(),
        Some(other) => {
            return Err(format!(
                "{at}.matcher must be a string (`Bash`, `Edit|Write`), not {}",
                kind(other)
            ));
        }
    };
    let m = matcher.trim();
    if !(m.is_empty() || m == "*") && regex::Regex::new(&format!("^(?:{m})$")).is_err() {
        return Err(format!(
            "{at}.matcher {matcher:?} is not a valid pattern (a tool name, or a regex like `Edit|Write`)"
        ));
    }
    if !matcher.trim().is_empty() && !event.matches_tools() {
        notes.push(format!(
            "{at}.matcher {matcher:?} is not used: orch matches only PreToolUse and PostToolUse hooks on tool names; this hook runs on every {}",
            event.as_str()
        ));
    }
    let Some(list) = obj.get("hooks").and_then(Value::as_array) else {
        return Err(format!("{at}.hooks must be a list of {{type, command}}"));
    };
    let mut out = Vec::new();
    for (j, h) in list.iter().enumerate() {
        let at = format!("{at}.hooks[{j}]");
        let kind_of = h.get("type").and_then(Value::as_str).unwrap_or("command");
        if kind_of != "command" {
            notes.push(format!(
                "{at} has type {kind_of:?}, which orch does not run (only `command` hooks); write it as a command"
            ));
            continue;
        }
        let Some(command) = h
            .get("command")
            .and_then(Value::as_str)
            .filter(|c| !c.trim().is_empty())
        else {
            return Err(format!("{at}.command must be a non-empty string"));
        };
        let timeout_secs = match h.get("timeout") {
            None | Some(Value::Null) => DEFAULT_TIMEOUT_SECS,
            Some(t) => match t.as_f64() {
                Some(s) if s > 0.0 && s <= MAX_TIMEOUT_SECS as f64 => s.ceil() as u64,
                _ => {
                    return Err(format!(
                        "{at}.timeout must be seconds from 1 to {MAX_TIMEOUT_SECS}, not {t}"
                    ));
                }
            },
        };
        out.push(Hook {
            event,
            matcher: matcher.clone(),
            command: command.to_owned(),
            timeout_secs,
            source: source.to_owned(),
        });
    }
    Ok(out)
}

/// What kind of JSON value `v` is, for errors.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claude_code_shape_parses_and_unknowns_are_named() {
        let v = json!({
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./a", "timeout": 5}]}],
            "PostToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "./fmt"}, {"type": "prompt", "prompt": "x"}]}],
            "Notification": [{"hooks": [{"type": "command", "command": "notify"}]}],
        });
        let mut notes = Vec::new();
        let hooks = parse(&v, "s.json", &mut notes).unwrap();
        assert_eq!(hooks.len(), 2);
        assert_eq!(hooks[0].event, HookEvent::PostToolUse);
        assert_eq!(hooks[0].timeout_secs, DEFAULT_TIMEOUT_SECS);
        assert_eq!(hooks[1].timeout_secs, 5);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes.iter().any(|n| n.contains("hooks.Notification")));
        assert!(notes.iter().any(|n| n.contains("type \"prompt\"")));
        assert!(hooks[0].matches_tool("edit_file") && hooks[0].matches_tool("write_file"));
        assert!(!hooks[0].matches_tool("bash"));
        assert!(hooks[1].matches_tool("bash") && !hooks[1].matches_tool("bash2"));
    }

    #[test]
    fn malformed_hooks_are_errors_naming_the_entry() {
        let mut n = Vec::new();
        let e = parse(
            &json!({"Stop": [{"hooks": [{"type": "command"}]}]}),
            "s",
            &mut n,
        );
        assert!(e.unwrap_err().contains("hooks.Stop[0].hooks[0].command"));
        let e = parse(
            &json!({"PreToolUse": [{"matcher": "(", "hooks": []}]}),
            "s",
            &mut n,
        );
        assert!(e.unwrap_err().contains("not a valid pattern"));
        let e = parse(
            &json!({"Stop": [{"hooks": [{"command": "x", "timeout": 0}]}]}),
            "s",
            &mut n,
        );
        assert!(e.unwrap_err().contains("timeout"));
    }
}
