//! Where MCP servers are defined, in Claude Code's `mcpServers` shape
//! (`type`, `command`, `args`, `env`, `url`, `headers`):
//!
//! 1. a role file's inline definitions (`mcpServers: [{name: {...}}]`);
//! 2. the repository's `.mcp.json`, read from the run's base commit (like
//!    project instructions: a stage's agent cannot add a server that a later
//!    stage would start);
//! 3. `[mcp.servers.NAME]` of the repository's `.orch/orch.toml`;
//! 4. `mcp.json` and `[mcp.servers]` of `orch.toml` in the user config dir.
//!
//! The first definition of a name wins. `${VAR}` in `env`, `url` and
//! `headers` values is expanded from orch's own environment and the value registered
//! as a secret. A malformed file is an error naming the file and the key.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

use super::McpError;

/// The project file Claude Code (and others) read.
pub(crate) const PROJECT_FILE: &str = ".mcp.json";
/// The user's file in orch's config dir.
pub(crate) const USER_FILE: &str = "mcp.json";

/// One server as written (Claude Code's shape).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    /// `stdio` (default when `command` is set), `http` or `sse`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The program of a stdio server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Variables added to its (scrubbed) environment; `${VAR}` is expanded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The endpoint of an HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers of an HTTP server; `${VAR}` is expanded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// A server definition and the file it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defined {
    /// As written.
    pub spec: ServerSpec,
    /// Where: a path, `<file>@<commit>`, or `role <name>`.
    pub origin: String,
}

/// Every server definition a run can see, by name (first definition wins).
#[derive(Debug, Clone, Default)]
pub struct McpConfig {
    /// Name → definition.
    pub servers: BTreeMap<String, Defined>,
}

#[derive(Deserialize)]
struct JsonFile {
    #[serde(rename = "mcpServers", default)]
    mcp_servers: BTreeMap<String, serde_json::Value>,
}

impl McpConfig {
    /// Adds `name` unless it is already defined.
    fn add(&mut self, name: String, spec: ServerSpec, origin: &str) {
        self.servers.entry(name).or_insert_with(|| Defined {
            spec,
            origin: origin.to_owned(),
        });
    }

    /// Reads the servers of a `.mcp.json`-shaped text (`{"mcpServers": {...}}`).
    pub fn add_json(&mut self, text: &str, origin: &str) -> Result<(), McpError> {
        let file: JsonFile = serde_json::from_str(text)
            .map_err(|e| McpError::Config(format!("failed to read {origin}: {e}")))?;
        for (name, value) in file.mcp_servers {
            let spec = parse_spec(value, &format!("{origin}: mcpServers.{name}"))?;
            self.add(name, spec, origin);
        }
        Ok(())
    }

    /// Reads `[mcp.servers]` of an `orch.toml` text.
    pub fn add_toml(&mut self, text: &str, origin: &str) -> Result<(), McpError> {
        let table: toml::Table = toml::from_str(text)
            .map_err(|e| McpError::Config(format!("failed to read {origin}: {e}")))?;
        let Some(mcp) = table.get("mcp") else {
            return Ok(());
        };
        let Some(servers) = mcp.get("servers") else {
            return Ok(());
        };
        let servers = servers.as_table().ok_or_else(|| {
            McpError::Config(format!(
                "{origin}: mcp.servers must be a table of servers ([mcp.servers.NAME])"
            ))
        })?;
        for (name, value) in servers {
            let json = serde_json::to_value(value)
                .map_err(|e| McpError::Config(format!("{origin}: mcp.servers.{name}: {e}")))?;
            let spec = parse_spec(json, &format!("{origin}: mcp.servers.{name}"))?;
            self.add(name.clone(), spec, origin);
        }
        Ok(())
    }

    /// The configured servers of a run: `.mcp.json` of `commit` in the
    /// repository at `common`, `.orch/orch.toml` of the working tree
    /// `workdir`, then the user's files.
    pub fn load(
        common: &Path,
        commit: &str,
        workdir: Option<&Path>,
        user_dir: Option<&Path>,
    ) -> Result<McpConfig, McpError> {
        let mut config = McpConfig::default();
        if let Some(text) = read_at_commit(common, commit, PROJECT_FILE)? {
            let short = commit.get(..12).unwrap_or(commit);
            config.add_json(&text, &format!("{PROJECT_FILE} at {short}"))?;
        }
        if let Some(dir) = workdir {
            let path = dir.join(".orch").join(crate::config::CONFIG_FILE);
            if let Some(text) = read_optional(&path)? {
                config.add_toml(&text, &path.display().to_string())?;
            }
        }
        if let Some(dir) = user_dir {
            let path = dir.join(USER_FILE);
            if let Some(text) = read_optional(&path)? {
                config.add_json(&text, &path.display().to_string())?;
            }
            let path = dir.join(crate::config::CONFIG_FILE);
            if let Some(text) = read_optional(&path)? {
                config.add_toml(&text, &path.display().to_string())?;
            }
        }
        Ok(config)
    }
}

/// One server's definition, checked: `what` names the file and key.
pub(crate) fn parse_spec(value: serde_json::Value, what: &str) -> Result<ServerSpec, McpError> {
    let spec: ServerSpec = serde_json::from_value(value).map_err(|e| {
        McpError::Config(format!(
            "{what}: {e} (expected type, command, args, env, url, headers)"
        ))
    })?;
    match (spec.kind.as_deref(), &spec.command, &spec.url) {
        (None | Some("stdio"), Some(c), None) if !c.trim().is_empty() => Ok(spec),
        (None | Some("http") | Some("sse"), None, Some(_)) => Ok(spec),
        (Some(kind), _, _) if !["stdio", "http", "sse"].contains(&kind) => Err(McpError::Config(
            format!("{what}: type {kind:?} is not stdio, http or sse"),
        )),
        _ => Err(McpError::Config(format!(
            "{what}: give either `command` (a stdio server) or `url` (an HTTP server)"
        ))),
    }
}

/// `${VAR}` (and `$VAR`-free text) in `value`, expanded from orch's own
/// environment; each expanded value is returned for registration as a
/// secret. An unset variable is an error naming it and `what`.
pub(crate) fn expand(value: &str, what: &str) -> Result<(String, Vec<String>), McpError> {
    let mut out = String::with_capacity(value.len());
    let mut secrets = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(McpError::Config(format!(
                "{what}: `${{` without a closing `}}`"
            )));
        };
        let (name, default) = match after[..end].split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (&after[..end], None),
        };
        // Credentials are read at the moment of use and never kept in a
        // settings value (as forge tokens; see `crate::environment`).
        let found = std::env::var(name).ok().filter(|v| !v.is_empty());
        match found.as_deref().or(default) {
            Some(v) => {
                out.push_str(v);
                secrets.push(v.to_owned());
            }
            None => {
                return Err(McpError::Config(format!(
                    "{what}: ${{{name}}} is not set in orch's environment"
                )));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok((out, secrets))
}

fn read_optional(path: &Path) -> Result<Option<String>, McpError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(McpError::Config(format!(
            "failed to read {}: {e}",
            path.display()
        ))),
    }
}

/// The text of `path` in `commit` (`None` when the commit has no such file).
fn read_at_commit(common: &Path, commit: &str, path: &str) -> Result<Option<String>, McpError> {
    let fail = |e: &dyn std::fmt::Display| {
        McpError::Config(format!("failed to read {path} at {commit}: {e}"))
    };
    let handle = crate::git::Repo::at(common);
    let repo = handle.git2().map_err(|e| fail(&e))?;
    let oid = git2::Oid::from_str(commit).map_err(|e| fail(&e))?;
    let tree = repo
        .find_commit(oid)
        .and_then(|c| c.tree())
        .map_err(|e| fail(&e))?;
    let Ok(entry) = tree.get_path(Path::new(path)) else {
        return Ok(None);
    };
    let blob = repo.find_blob(entry.id()).map_err(|e| fail(&e))?;
    String::from_utf8(blob.content().to_vec())
        .map(Some)
        .map_err(|_| fail(&"not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_code_shape_is_read_and_bad_keys_name_file_and_key() {
        let mut c = McpConfig::default();
        c.add_json(
            r#"{"mcpServers": {"gh": {"command": "gh-mcp", "args": ["-v"], "env": {"T": "${HOME}"}}, "web": {"type": "http", "url": "http://127.0.0.1:1/mcp"}}}"#,
            ".mcp.json",
        )
        .unwrap();
        assert_eq!(c.servers["gh"].spec.command.as_deref(), Some("gh-mcp"));
        assert_eq!(
            c.servers["web"].spec.url.as_deref(),
            Some("http://127.0.0.1:1/mcp")
        );
        let err = c
            .add_json(r#"{"mcpServers": {"x": {"comand": "y"}}}"#, "a/.mcp.json")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("a/.mcp.json: mcpServers.x: unknown field `comand`"),
            "{err}"
        );
        let err = c
            .add_toml("[mcp.servers.y]\nargs = [\"a\"]\n", "orch.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("orch.toml: mcp.servers.y: give either `command`"),
            "{err}"
        );
        c.add_toml("[mcp.servers.z]\ncommand = \"z\"\n", "orch.toml")
            .unwrap();
        assert!(c.servers.contains_key("z"));
    }

    #[test]
    fn expansion_names_the_missing_variable() {
        let err = expand("Bearer ${ORCH_SURELY_UNSET_VAR_42}", "x: headers.A")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("${ORCH_SURELY_UNSET_VAR_42} is not set"),
            "{err}"
        );
        let (v, s) = expand("a ${ORCH_SURELY_UNSET_VAR_42:-dflt} b", "w").unwrap();
        assert_eq!(v, "a dflt b");
        assert_eq!(s, ["dflt"]);
    }
}
