//! Roles: Markdown files with YAML front matter that say who an agent is.
//!
//! The format is compatible with Claude Code agent files (`name`,
//! `description`, `tools`, `model`, `color`) plus orch's own keys
//! (`read_only`, `max_turns`, `bash`). The body after the front matter is the
//! system prompt template, kept verbatim apart from surrounding blank lines.
//!
//! Invariants of a parsed [`Role`]: `tools` holds orch tool names only, in
//! [`KNOWN_TOOLS`] order, without duplicates, always including `finish`; a
//! read-only role never holds `write_file` or `edit_file`.

use crate::pipeline::SpecError;
use crate::toolname::ToolName;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;
use std::fmt;
use std::path::Path;

/// Every tool orch can offer a model, in the order roles list them (one
/// source of truth: [`ToolName`]).
pub const KNOWN_TOOLS: &[&str] = &crate::toolname::NAMES;

/// `model:` values that mean "the run's model" (Claude Code's aliases).
pub const CLAUDE_MODEL_ALIASES: &[&str] = &["inherit", "sonnet", "opus", "haiku"];

/// Claude Code tool names and the orch tools they stand for.
const CLAUDE_CODE_TOOLS: &[(&str, &str)] = &[
    ("Read", "read_file"),
    ("Write", "write_file"),
    ("Edit", "edit_file"),
    ("MultiEdit", "edit_file"),
    ("Bash", "bash"),
    ("Grep", "grep"),
    ("Glob", "list_files"),
    ("LS", "list_files"),
    ("Task", "spawn_agent"),
];

/// The turn limit of a role that does not set `max_turns`.
pub const DEFAULT_MAX_TURNS: u32 = 30;

/// A role's shell policy: command patterns that run, ask first, or are refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BashRules {
    /// Patterns that run without asking.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Patterns that need confirmation (denied in non-interactive runs without `--yes`).
    #[serde(default)]
    pub ask: Vec<String>,
    /// Patterns that are always refused.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// A validated role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Role {
    /// The role name; equals the file stem.
    pub name: String,
    /// One line saying what the role is for.
    pub description: String,
    /// The orch tools the role may call, in [`KNOWN_TOOLS`] order; always has `finish`.
    pub tools: Vec<String>,
    /// The model to use instead of the run's default; `None` also for Claude Code's `inherit`.
    pub model: Option<String>,
    /// Whether the role may not change the tree (no `write_file`/`edit_file`).
    pub read_only: bool,
    /// The turn limit of one agent run of this role.
    pub max_turns: u32,
    /// The role's shell policy.
    pub bash: BashRules,
    /// `sandbox:` — the kernel sandbox profile of its tool processes
    /// (default: `read-only` for read-only roles, else `workspace-write`).
    #[serde(default)]
    pub sandbox: Option<crate::sandbox::Profile>,
    /// `network: on | off` — TCP for its tool processes (default: on for
    /// writing roles, off for read-only ones).
    #[serde(default)]
    pub network: Option<bool>,
    /// The system prompt template (the Markdown body).
    pub prompt: String,
    /// Where the role came from: a file path, or `built-in roles/<name>.md`.
    pub origin: String,
}

/// The front matter as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RoleSpec {
    name: Spanned<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    tools: Option<ToolsSpec>,
    #[serde(default)]
    model: Option<String>,
    /// Claude Code's display colour: accepted so its files load, not used.
    #[serde(default)]
    #[allow(dead_code)]
    color: Option<IgnoredAny>,
    #[serde(default)]
    read_only: bool,
    #[serde(default)]
    max_turns: Option<Spanned<u32>>,
    #[serde(default)]
    bash: BashRules,
    #[serde(default)]
    sandbox: Option<Spanned<String>>,
    #[serde(default)]
    network: Option<Spanned<OnOff>>,
}

/// `network:` as written: `on`/`off` or a YAML boolean.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OnOff {
    Bool(bool),
    Word(String),
}

/// `tools:` as written: a list, or a comma-separated string (Claude Code style).
#[derive(Debug)]
struct ToolsSpec(Vec<Spanned<String>>);

enum ToolsInner {
    CommaSeparated(String),
    List(Vec<Spanned<String>>),
}

impl<'de> Deserialize<'de> for ToolsSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = Spanned::<ToolsInner>::deserialize(deserializer)?;
        let items = match spanned.value {
            // One location for the whole string: the parser gives no finer one.
            ToolsInner::CommaSeparated(text) => text
                .split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(|name| Spanned::new(name.to_owned(), spanned.referenced, spanned.defined))
                .collect(),
            ToolsInner::List(items) => items,
        };
        Ok(ToolsSpec(items))
    }
}

impl<'de> Deserialize<'de> for ToolsInner {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ToolsVisitor;

        impl<'de> Visitor<'de> for ToolsVisitor {
            type Value = ToolsInner;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of tool names or a comma-separated string")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<ToolsInner, E> {
                Ok(ToolsInner::CommaSeparated(v.to_owned()))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ToolsInner, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Spanned<String>>()? {
                    items.push(item);
                }
                Ok(ToolsInner::List(items))
            }
        }

        deserializer.deserialize_any(ToolsVisitor)
    }
}

/// Parses a role file. `origin` names the file in errors; when it ends in
/// `.md`, the role's `name` must equal the file stem.
pub fn parse_role(text: &str, origin: &str) -> Result<Role, SpecError> {
    let (yaml, body) = split_front_matter(text, origin)?;
    // The front matter starts on line 2, after the opening `---`.
    const LINE_OFFSET: u64 = 1;
    let spec: RoleSpec = serde_saphyr::from_str(yaml)
        .map_err(|err| SpecError::from_yaml(origin, &err, LINE_OFFSET))?;
    let at = |location: &serde_saphyr::Location, message: String| {
        SpecError::at(origin, location, LINE_OFFSET, message)
    };

    let name = spec.name.value.trim().to_owned();
    if name.is_empty() {
        return Err(at(&spec.name.referenced, "role name is empty".into()));
    }
    if let Some(stem) = role_file_stem(origin)
        && stem != name
    {
        return Err(at(
            &spec.name.referenced,
            format!("role name \"{name}\" must equal the file name \"{stem}\""),
        ));
    }

    let read_only = spec.read_only;
    let tools = match &spec.tools {
        Some(tools) => resolve_tools(&tools.0, read_only, &at)?,
        None => KNOWN_TOOLS
            .iter()
            .filter(|tool| !(read_only && ToolName::is_write_name(tool)))
            .map(|tool| (*tool).to_owned())
            .collect(),
    };

    let max_turns = match spec.max_turns {
        Some(turns) if turns.value == 0 => {
            return Err(at(&turns.referenced, "max_turns must be at least 1".into()));
        }
        Some(turns) => turns.value,
        None => DEFAULT_MAX_TURNS,
    };

    // Claude Code's aliases name Anthropic models an OpenAI-compatible server
    // does not know; like `inherit`, they keep the run's model.
    let model = spec
        .model
        .map(|m| m.trim().to_owned())
        .filter(|m| !m.is_empty() && !CLAUDE_MODEL_ALIASES.contains(&m.as_str()));

    let sandbox = match &spec.sandbox {
        None => None,
        Some(p) => Some(
            crate::sandbox::Profile::parse(p.value.trim()).ok_or_else(|| {
                at(
                    &p.referenced,
                    format!(
                        "sandbox: {:?} is not a profile; use workspace-write, read-only or off",
                        p.value
                    ),
                )
            })?,
        ),
    };
    let network = match &spec.network {
        None => None,
        Some(n) => Some(match &n.value {
            OnOff::Bool(b) => *b,
            OnOff::Word(w) if w == "on" => true,
            OnOff::Word(w) if w == "off" => false,
            OnOff::Word(w) => {
                return Err(at(
                    &n.referenced,
                    format!("network: {w:?} must be on or off"),
                ));
            }
        }),
    };

    Ok(Role {
        name,
        description: spec.description.trim().to_owned(),
        tools,
        model,
        read_only,
        max_turns,
        bash: spec.bash,
        sandbox,
        network,
        prompt: body.trim_start_matches(['\r', '\n']).trim_end().to_owned(),
        origin: origin.to_owned(),
    })
}

/// Maps written tool names to orch names, checks them against `read_only`,
/// and returns them in [`KNOWN_TOOLS`] order with `finish` added.
fn resolve_tools(
    written: &[Spanned<String>],
    read_only: bool,
    at: &dyn Fn(&serde_saphyr::Location, String) -> SpecError,
) -> Result<Vec<String>, SpecError> {
    let mut granted = vec![false; KNOWN_TOOLS.len()];
    for item in written {
        let Some(tool) = orch_tool_name(item.value.trim()) else {
            let claude: Vec<&str> = CLAUDE_CODE_TOOLS.iter().map(|(c, _)| *c).collect();
            return Err(at(
                &item.referenced,
                format!(
                    "unknown tool \"{}\" (known: {}; Claude Code names: {})",
                    item.value.trim(),
                    KNOWN_TOOLS.join(", "),
                    claude.join(", ")
                ),
            ));
        };
        // Tools that change files directly; read-only roles may not hold them.
        if read_only && ToolName::is_write_name(tool) {
            return Err(at(
                &item.referenced,
                format!(
                    "a read_only role cannot have the tool \"{tool}\"; remove it or set read_only: false"
                ),
            ));
        }
        if let Some(index) = KNOWN_TOOLS.iter().position(|known| *known == tool) {
            granted[index] = true;
        }
    }
    // `finish` is how every agent ends its stage, so it is always granted.
    if let Some(last) = granted.last_mut() {
        *last = true;
    }
    Ok(KNOWN_TOOLS
        .iter()
        .zip(granted)
        .filter(|(_, on)| *on)
        .map(|(tool, _)| (*tool).to_owned())
        .collect())
}

/// The orch name of a tool written as an orch or Claude Code name.
fn orch_tool_name(written: &str) -> Option<&'static str> {
    KNOWN_TOOLS
        .iter()
        .copied()
        .find(|known| *known == written)
        .or_else(|| {
            CLAUDE_CODE_TOOLS
                .iter()
                .find(|(claude, _)| *claude == written)
                .map(|(_, orch)| *orch)
        })
}

/// The file stem of `origin` when it names a `.md` file.
fn role_file_stem(origin: &str) -> Option<&str> {
    let path = Path::new(origin.strip_prefix("built-in ").unwrap_or(origin));
    if path.extension()? != "md" {
        return None;
    }
    path.file_stem()?.to_str()
}

/// Splits `---\n<yaml>\n---\n<body>`; the YAML starts on the file's line 2.
fn split_front_matter<'a>(text: &'a str, origin: &str) -> Result<(&'a str, &'a str), SpecError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        return Err(SpecError::new(
            origin,
            1,
            1,
            "expected YAML front matter: a role file starts with a `---` line",
        ));
    }
    let yaml_start = first.len();
    let mut offset = yaml_start;
    for line in lines {
        if line.trim_end() == "---" {
            let yaml = &text[yaml_start..offset];
            if yaml.trim().is_empty() {
                return Err(SpecError::new(
                    origin,
                    2,
                    1,
                    "front matter is empty: expected at least `name:`",
                ));
            }
            return Ok((yaml, &text[offset + line.len()..]));
        }
        offset += line.len();
    }
    Err(SpecError::new(
        origin,
        1,
        1,
        "front matter opened here is never closed: expected a `---` line after it",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comma_separated_claude_code_tools_map_to_orch_names() {
        let text = "---\nname: helper\ndescription: d\ntools: Read, Grep, Glob, Bash, MultiEdit, Edit\ncolor: blue\nmodel: inherit\n---\nYou help.\n";
        let role = parse_role(text, "x/helper.md").unwrap();
        assert_eq!(
            role.tools,
            [
                "bash",
                "read_file",
                "edit_file",
                "list_files",
                "grep",
                "finish"
            ]
        );
        assert_eq!(role.model, None);
        assert_eq!(role.prompt, "You help.");
        assert_eq!(role.max_turns, DEFAULT_MAX_TURNS);
    }

    #[test]
    fn list_tools_keep_known_order_and_finish_is_added() {
        let text = "---\nname: a\ntools: [grep, read_file, grep]\nmodel: gpt-5\nmax_turns: 7\nbash:\n  allow: [\"cargo test\"]\n  deny: [\"git push\"]\n---\nbody\n";
        let role = parse_role(text, "<test>").unwrap();
        assert_eq!(role.tools, ["read_file", "grep", "finish"]);
        assert_eq!(role.model.as_deref(), Some("gpt-5"));
        assert_eq!(role.max_turns, 7);
        assert_eq!(role.bash.allow, ["cargo test"]);
        assert!(role.bash.ask.is_empty());
        assert_eq!(role.bash.deny, ["git push"]);
    }

    #[test]
    fn missing_tools_means_all_but_write_tools_for_read_only() {
        let all = parse_role("---\nname: a\n---\n", "<test>").unwrap();
        assert_eq!(all.tools, KNOWN_TOOLS);
        let ro = parse_role("---\nname: a\nread_only: true\n---\n", "<test>").unwrap();
        assert!(ro.read_only);
        assert_eq!(
            ro.tools,
            [
                "bash",
                "read_file",
                "list_files",
                "grep",
                "spawn_agent",
                "finish"
            ]
        );
    }

    #[test]
    fn name_must_match_file_stem() {
        let err = parse_role("---\nname: coder\n---\n", "roles/docs.md").unwrap_err();
        assert_eq!((err.line, err.column), (2, 7));
        assert!(
            err.message.contains("must equal the file name \"docs\""),
            "{err}"
        );
        assert!(parse_role("---\nname: docs\n---\n", "built-in roles/docs.md").is_ok());
    }

    #[test]
    fn crlf_and_bom_are_accepted() {
        let text = "\u{feff}---\r\nname: a\r\ntools: Read\r\n---\r\n\r\nPrompt.\r\n";
        let role = parse_role(text, "<test>").unwrap();
        assert_eq!(role.tools, ["read_file", "finish"]);
        assert_eq!(role.prompt, "Prompt.");
    }

    #[test]
    fn no_front_matter_is_an_error_at_line_one() {
        let err = parse_role("You are a coder.\n", "a.md").unwrap_err();
        assert_eq!((err.line, err.column), (1, 1));
        assert!(err.message.contains("front matter"));
        let err = parse_role("---\n---\nbody", "a.md").unwrap_err();
        assert_eq!((err.line, err.column), (2, 1));
    }

    #[test]
    fn zero_max_turns_is_rejected() {
        let err = parse_role("---\nname: a\nmax_turns: 0\n---\n", "<t>").unwrap_err();
        assert_eq!((err.line, err.column), (3, 12));
        assert!(err.message.contains("at least 1"));
    }
}
