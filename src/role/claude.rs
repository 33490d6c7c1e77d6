//! Claude Code's permission and limit keys, mapped onto orch's.
//!
//! An agent file that narrows what its agent may do keeps that narrowing in
//! orch, or does not load: `permissionMode`, `disallowedTools` and
//! `maxTurns` are read here (docs/project-conventions.md has the table);
//! `hooks` run as `crate::hooks` says.
//! Nothing here ever widens a role: a mode orch knows no mapping for, or a
//! key whose narrowing orch cannot enforce, is an error naming the file,
//! the key and the value.

use super::tools::{BashRules, ToolsSpec, orch_tool_name};
use crate::pipeline::SpecError;
use crate::toolname::ToolName;
use serde_saphyr::{Location, Spanned};

/// What `permissionMode:` asks of orch's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// `default`, `acceptEdits`, `bypassPermissions` (or no key): orch's
    /// normal policy — edits in the lane (they land on the stage branch),
    /// bash under the built-in deny list, the role's rules and the sandbox.
    Normal,
    /// `plan`, `dontAsk`: read-only, and nothing that would need a prompt:
    /// no `write_file`, `edit_file`, `bash` or `spawn_agent`.
    ReadOnly,
    /// `ask`: every bash command asks first (refused in a non-interactive
    /// run without `--yes`).
    AskBash,
}

/// The modes orch maps, as written in Claude Code files.
const MODES: &[(&str, Mode)] = &[
    ("default", Mode::Normal),
    ("acceptEdits", Mode::Normal),
    ("bypassPermissions", Mode::Normal),
    ("plan", Mode::ReadOnly),
    ("dontAsk", Mode::ReadOnly),
    ("ask", Mode::AskBash),
];

/// Tools a [`Mode::ReadOnly`] role never holds: they change the tree, run
/// commands or start agents that could.
const READ_ONLY_REMOVES: &[&str] = &["bash", "write_file", "edit_file", "spawn_agent"];

type At<'a> = &'a dyn Fn(&Location, String) -> SpecError;

/// Reads `permissionMode:`; an unknown value is an error (its narrowing
/// cannot be known, so it cannot be honoured).
pub(super) fn mode(written: Option<&Spanned<String>>, at: At<'_>) -> Result<Mode, SpecError> {
    let Some(m) = written else {
        return Ok(Mode::Normal);
    };
    let value = m.value.trim();
    MODES
        .iter()
        .find(|(name, _)| *name == value)
        .map(|(_, mode)| *mode)
        .ok_or_else(|| {
            let known: Vec<&str> = MODES.iter().map(|(n, _)| *n).collect();
            at(
                &m.referenced,
                format!(
                    "permissionMode: {value:?} has no orch equivalent (known: {}); the role is not loaded, as running it could allow more than the file does",
                    known.join(", ")
                ),
            )
        })
}

/// What a role's Claude Code keys take away: tools and bash patterns.
#[derive(Debug, Default)]
pub(super) struct Narrowing {
    /// orch tools not offered.
    pub remove: Vec<&'static str>,
    /// Bash patterns refused (`Bash(git push:*)` → `git push`).
    pub bash_deny: Vec<String>,
    /// Bash patterns that ask first.
    pub bash_ask: Vec<String>,
}

impl Narrowing {
    fn remove(&mut self, tool: &'static str) {
        if !self.remove.contains(&tool) {
            self.remove.push(tool);
        }
    }
}

/// The narrowing of `mode` and `disallowedTools:`; `warnings` gets one
/// line for each rule orch applies more strictly than written.
pub(super) fn narrowing(
    mode: Mode,
    disallowed: Option<&ToolsSpec>,
    at: At<'_>,
    warnings: &mut Vec<String>,
) -> Result<Narrowing, SpecError> {
    let mut n = Narrowing::default();
    match mode {
        Mode::Normal => {}
        Mode::ReadOnly => READ_ONLY_REMOVES.iter().for_each(|t| n.remove(t)),
        Mode::AskBash => n.bash_ask.push("*".to_owned()),
    }
    for item in disallowed.map(|d| d.0.as_slice()).unwrap_or_default() {
        let written = item.value.trim();
        let Some(open) = written.find('(') else {
            // A tool orch has is removed; one it has not is never offered.
            if let Some(tool) = orch_tool_name(written) {
                n.remove(tool);
            }
            continue;
        };
        let (tool_name, rest) = written.split_at(open);
        let Some(inner) = rest
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .map(str::trim)
        else {
            return Err(at(
                &item.referenced,
                format!("disallowedTools: {written:?} is not `Tool` or `Tool(pattern)`"),
            ));
        };
        let Some(tool) = orch_tool_name(tool_name.trim()) else {
            continue;
        };
        if tool == "bash" {
            // Claude Code's `git push:*` is a prefix; orch's patterns are
            // prefixes already (`git push` also refuses `git push origin`).
            let pattern = inner.strip_suffix(":*").unwrap_or(inner).trim();
            if pattern.is_empty() || pattern.chars().all(|c| c == '*') {
                n.remove("bash");
            } else {
                n.bash_deny.push(pattern.to_owned());
            }
        } else {
            // orch cannot refuse a file tool for some paths only: the
            // whole tool goes, which keeps every path the file refuses.
            n.remove(tool);
            warnings.push(format!(
                "disallowedTools: {written:?}: orch cannot refuse `{tool}` for some paths only, so it is not offered at all"
            ));
        }
    }
    Ok(n)
}

/// Applies `n` to a role's tools and policy, and says what the mode took.
pub(super) fn apply(
    n: &Narrowing,
    mode: Mode,
    tools: &mut Vec<String>,
    bash: &mut BashRules,
    warnings: &mut Vec<String>,
) {
    let taken: Vec<String> = tools
        .iter()
        .filter(|t| mode == Mode::ReadOnly && READ_ONLY_REMOVES.contains(&t.as_str()))
        .cloned()
        .collect();
    if !taken.is_empty() {
        warnings.push(format!(
            "permissionMode makes the role read-only: {} not offered",
            taken.join(", ")
        ));
    }
    tools.retain(|t| !n.remove.contains(&t.as_str()) || t == ToolName::Finish.as_str());
    bash.deny.extend(n.bash_deny.iter().cloned());
    bash.ask.extend(n.bash_ask.iter().cloned());
}

/// `maxTurns:` and `max_turns:` together must agree.
pub(super) fn max_turns(
    orch: Option<&Spanned<u32>>,
    claude: Option<&Spanned<u32>>,
    at: At<'_>,
) -> Result<Option<Spanned<u32>>, SpecError> {
    match (orch, claude) {
        (Some(o), Some(c)) if o.value != c.value => Err(at(
            &c.referenced,
            format!(
                "maxTurns: {} and max_turns: {} disagree; keep one",
                c.value, o.value
            ),
        )),
        (Some(o), _) => Ok(Some(o.clone())),
        (None, c) => Ok(c.cloned()),
    }
}
