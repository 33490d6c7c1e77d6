//! Where hooks come from, and which of them run.
//!
//! Sources, each in Claude Code's `hooks` shape:
//!
//! | source | whose | runs |
//! |---|---|---|
//! | `<user config dir>/orch.toml` `[hooks]` | the user's | always |
//! | `.claude/settings.local.json`, untracked | the user's | always |
//! | `.claude/settings.json` | the repository's | when trusted |
//! | `.claude/settings.local.json`, tracked by git | the repository's | when trusted |
//! | `<repo>/.orch/orch.toml` `[hooks]` | the repository's | when trusted |
//! | a role's `hooks:`, file under the user config dir | the user's | always |
//! | a role's `hooks:`, file in the repository | the repository's | when trusted |
//!
//! A repository's hooks are code from whoever wrote the repository, run on
//! the user's machine at every tool call: they run only when the user says
//! so, with `--trust-hooks` or `trust_hooks = true` in the user's own
//! `orch.toml` (a repository's `orch.toml` cannot trust itself: that is an
//! error). Hooks that do not run are named once per run with how to enable
//! them — never ignored silently — and so is every other key of
//! `.claude/settings.json` orch reads but does not honour.

use super::{Hook, parse};
use crate::role::Role;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The `orch.toml` key that trusts a repository's hooks (user file only).
pub(crate) const TRUST_KEY: &str = "trust_hooks";

/// How to enable a repository's hooks, as notes say it.
const HOW_TO_TRUST: &str =
    "pass --trust-hooks, or set `trust_hooks = true` in your own orch.toml, to run them";

/// Keys of `.claude/settings.json` that other parts of orch read (MCP
/// servers): not named here.
const READ_ELSEWHERE: &[&str] = &[
    "hooks",
    "$schema",
    "mcpServers",
    "enableAllProjectMcpServers",
    "enabledMcpjsonServers",
    "disabledMcpjsonServers",
];

/// What orch offers instead of a Claude Code setting it does not honour.
const INSTEAD: &[(&str, &str)] = &[
    (
        "permissions",
        "write the rules as a role's `bash: { allow, ask, deny }` or `disallowedTools:`, or list allowed commands in `.orch/allowlist`",
    ),
    (
        "env",
        "tool processes get a scrubbed environment (docs/sandbox.md); set what the lane needs with `[setup]` in .orch/orch.toml",
    ),
    (
        "model",
        "choose the model with --model, a profile in orch.toml, or a role's or stage's `model:`",
    ),
    (
        "apiKeyHelper",
        "give the key through the environment variable the profile's `api_key_env` names",
    ),
    (
        "disableAllHooks",
        "leave out --trust-hooks (a repository's hooks then do not run)",
    ),
    (
        "statusLine",
        "orch shows progress on stderr; use `orch watch` or `orch log --follow`",
    ),
    (
        "outputStyle",
        "write the style into the role's prompt or AGENTS.md",
    ),
];

/// The file of a run's record that hands its hooks to its subagents
/// (`orch agent` child processes read it from the record directory).
pub(crate) const RUN_FILE: &str = "hooks.json";

/// The hooks of a run: the ones that run for every stage, the trusted
/// hooks of each role, and what was said about the rest.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct HookConfig {
    /// Hooks every stage gets, in source order.
    pub global: Vec<Hook>,
    /// Trusted role hooks, by role name.
    pub roles: BTreeMap<String, Vec<Hook>>,
    /// The user trusts the repository's hooks.
    pub trusted: bool,
    /// One line per hook source not run, key not honoured or event not
    /// supported (printed once when the run starts).
    pub notes: Vec<String>,
}

/// A file that could not be read as hooks.
#[derive(Debug, thiserror::Error)]
#[error("read hooks from {path}: {message}")]
pub(crate) struct HookConfigError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub message: String,
}

impl HookConfig {
    /// Reads the hooks of a run in the repository whose working tree is at
    /// `workdir`, with the user's config dir `user_dir`, `--trust-hooks`
    /// as `trust_flag`, and the run's `roles`.
    pub(crate) fn load(
        workdir: &Path,
        user_dir: Option<&Path>,
        trust_flag: bool,
        roles: &[&Role],
    ) -> Result<HookConfig, HookConfigError> {
        let mut c = HookConfig::default();
        let user_toml = user_dir.map(|d| d.join(crate::config::CONFIG_FILE));
        let user = match &user_toml {
            Some(p) => read_toml(p)?,
            None => None,
        };
        let repo_toml = workdir.join(".orch").join(crate::config::CONFIG_FILE);
        let repo = read_toml(&repo_toml)?;
        if repo.as_ref().is_some_and(|t| t.contains_key(TRUST_KEY)) {
            return Err(HookConfigError {
                path: repo_toml,
                message: format!(
                    "`{TRUST_KEY}` may only be set in your own orch.toml (the user config dir): a repository cannot trust its own hooks"
                ),
            });
        }
        let user_trust = match (user.as_ref().and_then(|t| t.get(TRUST_KEY)), &user_toml) {
            (None, _) | (_, None) => false,
            (Some(toml::Value::Boolean(b)), _) => *b,
            (Some(other), Some(path)) => {
                return Err(HookConfigError {
                    path: path.clone(),
                    message: format!(
                        "`{TRUST_KEY}` must be true or false, not {}",
                        other.type_str()
                    ),
                });
            }
        };
        c.trusted = trust_flag || user_trust;

        // The user's own hooks first, then the repository's.
        if let (Some(table), Some(path)) = (&user, &user_toml) {
            c.add_toml(table, path, true)?;
        }
        let local = workdir.join(".claude").join("settings.local.json");
        let local_is_users = !tracked(workdir, ".claude/settings.local.json");
        c.add_settings(&local, ".claude/settings.local.json", local_is_users)?;
        c.add_settings(
            &workdir.join(".claude").join("settings.json"),
            ".claude/settings.json",
            false,
        )?;
        if let Some(table) = &repo {
            c.add_toml(table, &repo_toml, false)?;
        }
        for role in roles {
            if role.hooks.is_empty() {
                continue;
            }
            let users = user_dir.is_some_and(|d| Path::new(&role.origin).starts_with(d));
            if users || c.trusted {
                c.roles.insert(role.name.clone(), role.hooks.clone());
            } else {
                c.notes.push(format!(
                    "role `{}` ({}): its {} hook(s) are the repository's and do not run; {HOW_TO_TRUST}",
                    role.name,
                    role.origin,
                    role.hooks.len()
                ));
            }
        }
        Ok(c)
    }

    /// Whether no hook runs at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.global.is_empty() && self.roles.is_empty()
    }

    /// The hooks of the run whose record directory is `record_dir`, as its
    /// stages wrote them ([`RUN_FILE`]); none when there is no file.
    pub(crate) fn of_run(record_dir: &Path) -> HookConfig {
        std::fs::read(record_dir.join(RUN_FILE))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// The hooks a stage of `role` gets: every stage's, then the role's.
    pub(crate) fn for_role(&self, role: &str) -> Vec<Hook> {
        let mut hooks = self.global.clone();
        hooks.extend(self.roles.get(role).into_iter().flatten().cloned());
        hooks
    }

    /// Prints the notes on stderr (once per run: the run's command calls it).
    pub(crate) fn print_notes(&self) {
        for n in &self.notes {
            crate::ui::status_line(&format!("orch: note: {n}"));
        }
    }

    /// Adds the hooks of `hooks` (an object in Claude Code's shape) from
    /// `source`; `users`: written by the user, so they run untrusted.
    fn add(&mut self, hooks: &Value, source: &str, users: bool) -> Result<(), String> {
        let mut notes = Vec::new();
        let found = parse(hooks, source, &mut notes)?;
        self.notes
            .extend(notes.into_iter().map(|n| format!("{source}: {n}")));
        if found.is_empty() {
            return Ok(());
        }
        if users || self.trusted {
            self.global.extend(found);
        } else {
            self.notes.push(format!(
                "{source}: {} hook(s) of the repository do not run; {HOW_TO_TRUST}",
                found.len()
            ));
        }
        Ok(())
    }

    /// `.claude/settings*.json` at `path` (absent: nothing): its hooks, and
    /// a note for each other key orch does not honour.
    fn add_settings(
        &mut self,
        path: &Path,
        source: &str,
        users: bool,
    ) -> Result<(), HookConfigError> {
        let err = |message: String| HookConfigError {
            path: path.to_owned(),
            message,
        };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(err(e.to_string())),
        };
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| err(format!("line {}, column {}: {e}", e.line(), e.column())))?;
        let Some(obj) = v.as_object() else {
            return Err(err("expected a JSON object".to_owned()));
        };
        for key in obj.keys().filter(|k| !READ_ELSEWHERE.contains(&k.as_str())) {
            let instead = INSTEAD.iter().find(|(k, _)| k == key).map_or(
                "orch has no equivalent; remove it to silence this note",
                |(_, i)| *i,
            );
            self.notes
                .push(format!("{source}: `{key}` is not used by orch: {instead}"));
        }
        if let Some(hooks) = obj.get("hooks") {
            self.add(hooks, source, users).map_err(err)?;
        }
        Ok(())
    }

    /// `[hooks]` of the `orch.toml` at `path`.
    fn add_toml(
        &mut self,
        table: &toml::Table,
        path: &Path,
        users: bool,
    ) -> Result<(), HookConfigError> {
        let Some(hooks) = table.get("hooks") else {
            return Ok(());
        };
        let err = |message: String| HookConfigError {
            path: path.to_owned(),
            message,
        };
        let json = serde_json::to_value(hooks).map_err(|e| err(e.to_string()))?;
        self.add(&json, &path.display().to_string(), users)
            .map_err(err)
    }
}

/// The `orch.toml` at `path` as a table (absent: `None`); its syntax and
/// other keys are checked by [`crate::config`].
fn read_toml(path: &Path) -> Result<Option<toml::Table>, HookConfigError> {
    let err = |message: String| HookConfigError {
        path: path.to_owned(),
        message,
    };
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .parse::<toml::Table>()
            .map(Some)
            .map_err(|e| err(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err(e.to_string())),
    }
}

/// Whether `rel` is in the index of the repository at `workdir` (a file
/// the repository ships, not one the user keeps next to it).
fn tracked(workdir: &Path, rel: &str) -> bool {
    // A repository orch cannot read counts as shipping it: never trusted
    // by mistake.
    git2::Repository::open(workdir)
        .and_then(|r| r.index())
        .map_or(true, |i| i.get_path(Path::new(rel), 0).is_some())
}
