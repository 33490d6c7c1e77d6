//! The tool names a role file writes: orch's own and Claude Code's, the
//! `tools:` value as written, and the shell policy.

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;
use std::fmt;

/// Every tool orch can offer a model, in the order roles list them (one
/// source of truth: [`ToolName`]).
pub const KNOWN_TOOLS: &[&str] = &crate::toolname::NAMES;

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
    ("Agent", "spawn_agent"),
];

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

/// `tools:` as written: a list, or a comma-separated string (Claude Code style).
#[derive(Debug)]
pub(super) struct ToolsSpec(pub(super) Vec<Spanned<String>>);

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

/// The orch name of a tool written as an orch or Claude Code name.
pub(super) fn orch_tool_name(written: &str) -> Option<&'static str> {
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
