//! The `[forge]` section of `orch.toml`: the API base of each forge, for
//! GitHub Enterprise and self-managed GitLab.
//!
//! ```toml
//! [forge.github]
//! api_url = "https://github.example.com/api/v3"
//!
//! [forge.gitlab]
//! api_url = "https://gitlab.example.com/api/v4"
//! ```
//!
//! Precedence per forge: the repository's `.orch/orch.toml`, then the
//! user's `orch.toml`, then the variable the forge's CI sets
//! (`GITHUB_API_URL` in GitHub Actions, `CI_API_V4_URL` in GitLab CI), then
//! the public API. Tokens are never written here (see `super::token`).

use super::types::{Forge, ForgeError};
use std::path::Path;

/// The API base per forge, where one was configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ForgeSettings {
    github: Option<String>,
    gitlab: Option<String>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SectionSpec {
    #[serde(default)]
    github: Option<ForgeSpec>,
    #[serde(default)]
    gitlab: Option<ForgeSpec>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ForgeSpec {
    #[serde(default)]
    api_url: Option<String>,
}

impl ForgeSettings {
    /// Reads `[forge]` from `<repo>/.orch/orch.toml` and the user's
    /// `orch.toml` (both optional); errors name the file and the key.
    pub(crate) fn load(repo: Option<&Path>) -> Result<ForgeSettings, ForgeError> {
        let mut out = ForgeSettings::default();
        let files = [
            repo.map(|r| r.join(".orch").join(crate::config::CONFIG_FILE)),
            crate::dirs::user_config_dir().map(|d| d.join(crate::config::CONFIG_FILE)),
        ];
        for path in files.into_iter().flatten() {
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(ForgeError::Invalid(format!(
                        "failed to read {}: {e}",
                        path.display()
                    )));
                }
            };
            let invalid = |e: &dyn std::fmt::Display| {
                ForgeError::Invalid(format!(
                    "failed to read [forge] in {}: {}",
                    path.display(),
                    e.to_string().trim()
                ))
            };
            let table: toml::Table = toml::from_str(&text).map_err(|e| invalid(&e))?;
            let Some(section) = table.get("forge") else {
                continue;
            };
            let spec: SectionSpec = section.clone().try_into().map_err(|e| invalid(&e))?;
            for (forge, spec, slot) in [
                (Forge::GitHub, spec.github, &mut out.github),
                (Forge::GitLab, spec.gitlab, &mut out.gitlab),
            ] {
                let Some(url) = spec.and_then(|s| s.api_url) else {
                    continue;
                };
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(ForgeError::Invalid(format!(
                        "failed to use forge.{}.api_url = {url:?} in {}: expected an http:// or https:// URL",
                        forge.as_str(),
                        path.display()
                    )));
                }
                slot.get_or_insert(url);
            }
        }
        Ok(out)
    }

    /// The API base for `forge`, without a trailing slash.
    pub(crate) fn api_url(&self, forge: Forge) -> String {
        let (configured, ci_var) = match forge {
            Forge::GitHub => (&self.github, crate::environment::GITHUB_API_URL),
            Forge::GitLab => (&self.gitlab, crate::environment::CI_API_V4_URL),
        };
        configured
            .clone()
            .or_else(|| {
                crate::environment::current()
                    .var(ci_var)
                    .filter(|v| !v.trim().is_empty())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| forge.default_api().to_owned())
            .trim()
            .trim_end_matches('/')
            .to_owned()
    }
}
