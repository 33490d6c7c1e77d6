//! The `[sandbox]` section of `orch.toml` and the role keys `sandbox:` and
//! `network:`, resolved into a [`SandboxChoice`] per role.
//!
//! ```toml
//! [sandbox]
//! profile = "workspace-write"   # default for writing roles; "read-only", "off"
//! network = true                # default: on for writing roles, off for read-only ones
//! writable = ["~/.cache/pip"]   # extra writable roots (absolute or ~/…)
//! deny_read = ["~/.vault"]      # extra unreadable paths, on top of the defaults
//! disk_quota = "4G"             # per stage: how much its lane and temp dir may grow; "off"
//! ```
//!
//! Precedence: a role's own key, then the repository's `.orch/orch.toml`,
//! then the user's `orch.toml`, then the default (read-only roles get
//! `read-only` and no network, writing roles `workspace-write` and the
//! network). Lists add up across both files.

use std::path::{Path, PathBuf};

use crate::sandbox_profile::Profile;

/// The resolved sandbox choice of a role: profile, network, extra roots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxChoice {
    /// The profile.
    pub profile: Profile,
    /// TCP connect/bind allowed.
    pub network: bool,
    /// Extra writable roots (`sandbox.writable`).
    pub writable: Vec<PathBuf>,
    /// Extra unreadable paths (`sandbox.deny_read`), on top of the defaults.
    pub deny_read: Vec<PathBuf>,
}

impl SandboxChoice {
    /// One word per setting, for the tool event and the start message:
    /// `workspace-write, network on`.
    pub fn label(&self) -> String {
        format!(
            "{}, network {}",
            self.profile.as_str(),
            if self.network { "on" } else { "off" }
        )
    }
}

/// The `[sandbox]` settings of the config files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxSettings {
    /// `profile`, for every role without its own `sandbox:`.
    pub profile: Option<Profile>,
    /// `network`, for every role without its own `network:`.
    pub network: Option<bool>,
    /// `writable` roots.
    pub writable: Vec<PathBuf>,
    /// `deny_read` paths.
    pub deny_read: Vec<PathBuf>,
    /// `disk_quota`: `Some(None)` is `"off"`; `None`: not set (the default,
    /// [`super::quota::DEFAULT_DISK_QUOTA`]).
    pub disk_quota: Option<Option<u64>>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SectionSpec {
    #[serde(default)]
    profile: Option<String>,
    #[serde(default)]
    network: Option<bool>,
    #[serde(default)]
    writable: Vec<String>,
    #[serde(default)]
    deny_read: Vec<String>,
    #[serde(default)]
    disk_quota: Option<toml::Value>,
}

impl SandboxSettings {
    /// Reads `[sandbox]` from `<repo>/.orch/orch.toml` and `<user_dir>/orch.toml`
    /// (both optional); `home` expands `~/`. The error names the file and key.
    pub fn load(
        repo: Option<&Path>,
        user_dir: Option<&Path>,
        home: Option<&Path>,
    ) -> Result<Self, String> {
        let mut out = Self::default();
        let files = [
            repo.map(|r| r.join(".orch").join("orch.toml")),
            user_dir.map(|d| d.join("orch.toml")),
        ];
        for path in files.into_iter().flatten() {
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(format!("read {}: {e}", path.display())),
            };
            let table: toml::Table =
                toml::from_str(&text).map_err(|e| format!("parse {}: {e}", path.display()))?;
            let Some(section) = table.get("sandbox") else {
                continue;
            };
            let spec: SectionSpec = section
                .clone()
                .try_into()
                .map_err(|e| format!("parse [sandbox] in {}: {e}", path.display()))?;
            if out.profile.is_none()
                && let Some(p) = &spec.profile
            {
                out.profile = Some(Profile::parse(p).ok_or_else(|| {
                    format!(
                        "{}: sandbox.profile = {p:?}: expected \"workspace-write\", \"read-only\" or \"off\"",
                        path.display()
                    )
                })?);
            }
            out.network = out.network.or(spec.network);
            if out.disk_quota.is_none()
                && let Some(raw) = &spec.disk_quota
            {
                let text = match raw {
                    toml::Value::String(s) => s.clone(),
                    toml::Value::Integer(n) if *n >= 0 => n.to_string(),
                    other => format!("{other:?}"),
                };
                out.disk_quota = Some(
                    super::quota::parse_size(&text)
                        .map_err(|e| format!("{}: sandbox.disk_quota = {e}", path.display()))?,
                );
            }
            for (key, list, into) in [
                ("writable", &spec.writable, &mut out.writable),
                ("deny_read", &spec.deny_read, &mut out.deny_read),
            ] {
                for raw in list {
                    into.push(expand(raw, home).ok_or_else(|| {
                        format!(
                            "{}: sandbox.{key} entry {raw:?} must be an absolute path or start with ~/",
                            path.display()
                        )
                    })?);
                }
            }
        }
        Ok(out)
    }

    /// The choice for a role with its own `sandbox:`/`network:` keys (if
    /// any) that is read-only or not.
    /// The per-stage disk quota in bytes (`None`: off).
    pub fn disk_quota(&self) -> Option<u64> {
        self.disk_quota
            .unwrap_or(Some(super::quota::DEFAULT_DISK_QUOTA))
    }

    pub fn for_role(
        &self,
        role_profile: Option<Profile>,
        role_network: Option<bool>,
        read_only: bool,
    ) -> SandboxChoice {
        let default = if read_only {
            Profile::ReadOnly
        } else {
            Profile::WorkspaceWrite
        };
        let profile = role_profile.or(self.profile).unwrap_or(default);
        SandboxChoice {
            profile,
            network: role_network.or(self.network).unwrap_or(!read_only),
            writable: self.writable.clone(),
            deny_read: self.deny_read.clone(),
        }
    }
}

fn expand(raw: &str, home: Option<&Path>) -> Option<PathBuf> {
    if let Some(rest) = raw.strip_prefix("~/") {
        return home.map(|h| h.join(rest));
    }
    let p = PathBuf::from(raw);
    p.is_absolute().then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_roles_and_defaults_resolve_in_order() {
        let t = tempfile::tempdir().unwrap();
        let repo = t.path().join("repo");
        let user = t.path().join("user");
        std::fs::create_dir_all(repo.join(".orch")).unwrap();
        std::fs::create_dir_all(&user).unwrap();
        std::fs::write(
            repo.join(".orch/orch.toml"),
            "[sandbox]\nprofile = \"off\"\nwritable = [\"~/.cache/pip\"]\n",
        )
        .unwrap();
        std::fs::write(
            user.join("orch.toml"),
            "default_profile = \"x\"\n[sandbox]\nprofile = \"read-only\"\nnetwork = false\ndeny_read = [\"/srv/keys\"]\n",
        )
        .unwrap();
        let s = SandboxSettings::load(Some(&repo), Some(&user), Some(Path::new("/h"))).unwrap();
        assert_eq!(s.profile, Some(Profile::Off));
        assert_eq!(s.network, Some(false));
        assert_eq!(s.writable, [PathBuf::from("/h/.cache/pip")]);
        assert_eq!(s.deny_read, [PathBuf::from("/srv/keys")]);
        let c = s.for_role(Some(Profile::WorkspaceWrite), None, false);
        assert_eq!(c.label(), "workspace-write, network off");

        let none = SandboxSettings::default();
        assert_eq!(
            none.for_role(None, None, false).label(),
            "workspace-write, network on"
        );
        assert_eq!(
            none.for_role(None, None, true).label(),
            "read-only, network off"
        );
    }

    #[test]
    fn role_keys_parse_and_win_over_the_files() {
        let r =
            crate::role::parse_role("---\nname: a\nsandbox: off\nnetwork: off\n---\n", "<test>")
                .unwrap();
        assert_eq!((r.sandbox, r.network), (Some(Profile::Off), Some(false)));
        let on = crate::role::parse_role("---\nname: a\nnetwork: on\n---\n", "<test>").unwrap();
        assert_eq!(on.network, Some(true));
        let files = SandboxSettings {
            profile: Some(Profile::ReadOnly),
            network: Some(true),
            ..Default::default()
        };
        assert_eq!(
            files.for_role(r.sandbox, r.network, false).label(),
            "off, network off"
        );
        let e = crate::role::parse_role("---\nname: a\nsandbox: loose\n---\n", "<test>")
            .unwrap_err()
            .to_string();
        assert!(e.contains("use workspace-write, read-only or off"), "{e}");
        let e = crate::role::parse_role("---\nname: a\nnetwork: maybe\n---\n", "<test>")
            .unwrap_err()
            .to_string();
        assert!(e.contains("network: \"maybe\" must be on or off"), "{e}");
    }

    #[test]
    fn bad_entries_name_the_file_and_key() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(
            t.path().join("orch.toml"),
            "[sandbox]\nwritable = [\"rel/dir\"]\n",
        )
        .unwrap();
        let e = SandboxSettings::load(None, Some(t.path()), None).unwrap_err();
        assert!(e.contains("sandbox.writable entry \"rel/dir\""), "{e}");
        std::fs::write(
            t.path().join("orch.toml"),
            "[sandbox]\nprofile = \"loose\"\n",
        )
        .unwrap();
        let e = SandboxSettings::load(None, Some(t.path()), None).unwrap_err();
        assert!(e.contains("orch.toml: sandbox.profile = \"loose\""), "{e}");
    }
}
