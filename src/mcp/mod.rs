//! MCP (Model Context Protocol) client: a role's MCP servers, started for
//! its stage and offered to the model as tools named `mcp__<server>__<tool>`.
//!
//! The protocol is the official Rust SDK's (`rmcp`, client side only); orch
//! spawns a stdio server itself, as it spawns `bash` (the lane as working
//! directory, the scrubbed environment plus the server's `env`, its own
//! process group under a reaper, the kernel sandbox of the role's `bash`),
//! and hands rmcp the server's pipes. A streamable-HTTP server (`url`) is
//! reached with rmcp's HTTP client on orch's reqwest ([`http`]).
//!
//! Invariants:
//! - a role gets only the servers and tools it names ([`RoleMcp`]); servers
//!   are started once per stage and their `tools/list` read once then;
//! - a server lives as long as the stage's [`McpSession`]: dropping it kills
//!   the server's whole process group (nothing is left running);
//! - every call passes the role's MCP rules ([`RoleMcp::decide`]) before it
//!   reaches a server; a server error, a timeout or a dead server is a tool
//!   error the model sees (a death is reported once, later calls fail at
//!   once);
//! - `${VAR}` values from the configuration are registered as secrets, so
//!   redaction covers them everywhere.

pub(crate) mod config;
pub(crate) mod dry;
mod http;
pub(crate) mod replay;
mod session;

pub use config::{McpConfig, ServerSpec};
pub use session::{Launch, McpCallInfo, McpSession, McpToolInfo, RecordedCall};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The prefix of every MCP tool name (Claude Code's).
pub const PREFIX: &str = "mcp__";

/// The protocol revision the rmcp version orch builds with targets
/// (`rmcp::model::ProtocolVersion::LATEST`); a stdio server is asked with
/// the newest revision that still has `initialize`.
pub const SPEC_VERSION: &str = "2026-07-28";

/// An MCP failure orch reports (configuration, start, listing).
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// A configuration file or role key is malformed or names nothing.
    #[error("{0}")]
    Config(String),
    /// A server could not be started or did not answer its handshake.
    #[error("failed to start MCP server `{server}`: {reason}")]
    Start {
        /// The server's name.
        server: String,
        /// Why.
        reason: String,
    },
}

/// What a role names of MCP: its servers (`mcpServers:`), the MCP tools of
/// `tools:` and the rules of its policy that name MCP tools.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoleMcp {
    /// Servers named in `mcpServers:` (by name or inline), in file order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<String>,
    /// Inline definitions of `mcpServers:`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inline: BTreeMap<String, ServerSpec>,
    /// `Some` when the role has a `tools:` list: the MCP entries in it
    /// (`mcp__s` or `mcp__s__*`: all of `s`; `mcp__s__t`: one tool). `None`:
    /// every tool of the servers in `servers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Rules of the role's policy (`bash: {allow, ask, deny}`,
    /// `disallowedTools:`) that name MCP tools.
    #[serde(default, skip_serializing_if = "Rules::is_empty")]
    pub rules: Rules,
}

/// Allow / ask / deny patterns on MCP tool names (`*` matches any run of
/// characters; `mcp__s` alone stands for every tool of `s`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rules {
    /// Run without asking.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Need approval (refused without `--yes`).
    #[serde(default)]
    pub ask: Vec<String>,
    /// Always refused.
    #[serde(default)]
    pub deny: Vec<String>,
}

impl Rules {
    /// No rule at all.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.ask.is_empty() && self.deny.is_empty()
    }
}

/// The policy's answer for one MCP call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpDecision {
    /// Run it; the text is the rule (or `allow`).
    Allow(String),
    /// Needs approval; the rule.
    Ask(String),
    /// Refused; the rule.
    Deny(String),
}

impl RoleMcp {
    /// True when the role names no MCP server or tool.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty() && self.tools.as_ref().is_none_or(Vec::is_empty)
    }

    /// The servers the role gets, in name order.
    pub fn granted_servers(&self) -> Vec<String> {
        let mut out: Vec<String> = match &self.tools {
            None => self.servers.clone(),
            Some(tools) => tools
                .iter()
                .filter_map(|t| split(t).map(|(s, _)| s.to_owned()))
                .collect(),
        };
        out.sort();
        out.dedup();
        out
    }

    /// Whether the role gets `tool` of `server`.
    pub fn grants(&self, server: &str, tool: &str) -> bool {
        match &self.tools {
            None => self.servers.iter().any(|s| s == server),
            Some(tools) => tools.iter().any(|t| match split(t) {
                Some((s, None)) => s == server,
                Some((s, Some(t))) => s == server && (t == "*" || t == tool),
                None => false,
            }),
        }
    }

    /// Deny, then ask, then allow rules; no rule: allowed (naming the tool
    /// granted it).
    pub fn decide(&self, full_name: &str) -> McpDecision {
        let hit = |patterns: &[String]| {
            patterns
                .iter()
                .find(|p| rule_matches(p, full_name))
                .cloned()
        };
        if let Some(p) = hit(&self.rules.deny) {
            return McpDecision::Deny(format!("role rule deny `{p}`"));
        }
        if let Some(p) = hit(&self.rules.ask) {
            return McpDecision::Ask(format!("role rule ask `{p}`"));
        }
        match hit(&self.rules.allow) {
            Some(p) => McpDecision::Allow(format!("allow (role rule `{p}`)")),
            None => McpDecision::Allow("allow".to_owned()),
        }
    }
}

/// `mcp__s__t` → `(s, Some(t))`, `mcp__s` → `(s, None)`.
pub fn split(name: &str) -> Option<(&str, Option<&str>)> {
    let rest = name.strip_prefix(PREFIX)?;
    match rest.split_once("__") {
        Some((s, t)) if !s.is_empty() && !t.is_empty() => Some((s, Some(t))),
        Some(_) => None,
        None if !rest.is_empty() => Some((rest, None)),
        None => None,
    }
}

/// The name a model calls: `mcp__<server>__<tool>`.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("{PREFIX}{server}__{tool}")
}

/// Whether rule `pattern` covers `name` (`*` wildcards; a bare server
/// covers all its tools).
fn rule_matches(pattern: &str, name: &str) -> bool {
    let pattern = pattern.trim();
    if let Some((s, None)) = split(pattern) {
        return split(name).is_some_and(|(n, _)| n == s);
    }
    glob(pattern.as_bytes(), name.as_bytes())
}

fn glob(p: &[u8], s: &[u8]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|i| glob(rest, &s[i..])),
        Some((c, rest)) => s.first() == Some(c) && glob(rest, &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_and_rules_follow_the_names() {
        let role = RoleMcp {
            servers: vec!["gh".into()],
            tools: Some(vec!["mcp__fx__echo".into(), "mcp__web".into()]),
            rules: Rules {
                deny: vec!["mcp__fx__e*".into()],
                ask: vec!["mcp__web".into()],
                ..Rules::default()
            },
            ..RoleMcp::default()
        };
        assert_eq!(role.granted_servers(), ["fx", "web"]);
        assert!(role.grants("fx", "echo") && !role.grants("fx", "other"));
        assert!(role.grants("web", "anything") && !role.grants("gh", "x"));
        assert!(matches!(role.decide("mcp__fx__echo"), McpDecision::Deny(_)));
        assert!(matches!(role.decide("mcp__web__get"), McpDecision::Ask(_)));
        assert_eq!(
            role.decide("mcp__fx__x"),
            McpDecision::Allow("allow".into())
        );
        let all = RoleMcp {
            servers: vec!["gh".into()],
            ..RoleMcp::default()
        };
        assert!(all.grants("gh", "x") && !all.grants("fx", "x"));
        assert_eq!(split("mcp__a__b__c"), Some(("a", Some("b__c"))));
        assert_eq!(split("mcp__"), None);
    }
}
