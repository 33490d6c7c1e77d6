//! A role's MCP keys: `mcpServers:` (server names or inline definitions, as
//! in Claude Code's agent files), the `mcp__<server>[__<tool>]` entries of
//! `tools:`, and the rules of `bash:` / `disallowedTools:` that name MCP
//! tools (they are rules on those tools, not shell patterns).

use super::tools::{BashRules, ToolsSpec};
use crate::mcp::{PREFIX, RoleMcp, split};
use crate::pipeline::SpecError;
use serde_saphyr::{Location, Spanned};

type At<'a> = &'a dyn Fn(&Location, String) -> SpecError;

/// Reads the role's MCP keys; moves the MCP rules out of `bash`.
pub(super) fn read(
    servers: Option<&Spanned<serde_json::Value>>,
    tools: Option<&ToolsSpec>,
    disallowed: Option<&ToolsSpec>,
    bash: &mut BashRules,
    at: At<'_>,
) -> Result<RoleMcp, SpecError> {
    let mut out = RoleMcp::default();
    if let Some(written) = servers {
        let bad = |what: String| at(&written.referenced, format!("mcpServers: {what}"));
        let mut add = |name: &str, def: Option<&serde_json::Value>| -> Result<(), SpecError> {
            if name.is_empty() || name.contains("__") || name.contains(char::is_whitespace) {
                return Err(bad(format!(
                    "{name:?} is not a server name (no spaces or `__`)"
                )));
            }
            if let Some(def) = def {
                let spec =
                    crate::mcp::config::parse_spec(def.clone(), &format!("mcpServers.{name}"))
                        .map_err(|e| bad(e.to_string()))?;
                out.inline.insert(name.to_owned(), spec);
            }
            if !out.servers.iter().any(|s| s == name) {
                out.servers.push(name.to_owned());
            }
            Ok(())
        };
        match &written.value {
            serde_json::Value::Array(items) => {
                for item in items {
                    match item {
                        serde_json::Value::String(name) => add(name.trim(), None)?,
                        serde_json::Value::Object(map) => {
                            for (name, def) in map {
                                add(name.trim(), Some(def))?;
                            }
                        }
                        other => {
                            return Err(bad(format!(
                                "{other} is neither a server name nor {{name: definition}}"
                            )));
                        }
                    }
                }
            }
            serde_json::Value::Object(map) => {
                for (name, def) in map {
                    add(name.trim(), Some(def))?;
                }
            }
            serde_json::Value::String(list) => {
                for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                    add(name, None)?;
                }
            }
            other => {
                return Err(bad(format!(
                    "expected a list of server names or definitions, found {other}"
                )));
            }
        }
    }
    if let Some(tools) = tools {
        let mut named = Vec::new();
        for item in &tools.0 {
            let name = item.value.trim();
            if !name.starts_with(PREFIX) {
                continue;
            }
            if split(name).is_none() {
                return Err(at(
                    &item.referenced,
                    format!("tools: {name:?} is not mcp__<server> or mcp__<server>__<tool>"),
                ));
            }
            named.push(name.to_owned());
        }
        out.tools = Some(named);
    }
    for item in disallowed.map(|d| d.0.as_slice()).unwrap_or_default() {
        let name = item.value.trim();
        if name.starts_with(PREFIX) {
            out.rules.deny.push(name.to_owned());
        }
    }
    for (from, to) in [
        (&mut bash.allow, &mut out.rules.allow),
        (&mut bash.ask, &mut out.rules.ask),
        (&mut bash.deny, &mut out.rules.deny),
    ] {
        to.extend(
            from.iter()
                .filter(|p| p.trim().starts_with(PREFIX))
                .cloned(),
        );
        from.retain(|p| !p.trim().starts_with(PREFIX));
    }
    Ok(out)
}
