//! Forges (GitHub, GitLab): reading an issue through the REST API
//! (`--issue github:OWNER/REPO#N`), and publishing a run as a pull or merge
//! request (`orch publish`). See `docs/forge.md`.
//!
//! Invariant: the forge token is orch's alone. It is read from orch's own
//! environment (`GH_TOKEN`/`GITHUB_TOKEN`, `GITLAB_TOKEN`, names that the
//! sandbox treats as secrets: wiped from `/proc/<orch>/environ`, never passed
//! to a tool process, redacted from every record) or from `gh auth token`,
//! whose value `main` registers with the secrets registry before anything
//! runs ([`startup_token`]). It only ever goes into an HTTP header of a
//! request to the configured API.

mod api;
mod issue;
mod pull;
mod push;
mod settings;

pub(crate) use api::ForgeApi;
pub(crate) use issue::{FrozenIssue, fetch_issue};
pub(crate) use pull::{PullRequest, upsert_pull};
pub(crate) use push::{project_of_url, push_refs, remote_url, without_userinfo};
pub(crate) use settings::ForgeSettings;

use std::path::Path;
use std::sync::OnceLock;

/// A forge orch speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Forge {
    /// GitHub or GitHub Enterprise (REST v3).
    GitHub,
    /// GitLab, hosted or self-managed (REST v4).
    GitLab,
}

impl Forge {
    /// The name used in `--issue` and `orch.toml` (`github`, `gitlab`).
    pub fn as_str(self) -> &'static str {
        match self {
            Forge::GitHub => "github",
            Forge::GitLab => "gitlab",
        }
    }

    /// The public API of the hosted forge.
    pub(crate) fn default_api(self) -> &'static str {
        match self {
            Forge::GitHub => "https://api.github.com",
            Forge::GitLab => "https://gitlab.com/api/v4",
        }
    }

    /// Environment variables holding a token, in the order they are tried.
    pub(crate) fn token_vars(self) -> &'static [&'static str] {
        match self {
            Forge::GitHub => &["GH_TOKEN", "GITHUB_TOKEN"],
            Forge::GitLab => &["GITLAB_TOKEN"],
        }
    }

    /// What the forge calls the thing `orch publish` opens.
    pub(crate) fn pr_noun(self) -> &'static str {
        match self {
            Forge::GitHub => "pull request",
            Forge::GitLab => "merge request",
        }
    }
}

/// A project on a forge: `github:OWNER/REPO` or `gitlab:GROUP/SUB/PROJECT`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Project {
    /// Which forge.
    pub forge: Forge,
    /// `OWNER/REPO` (GitHub) or the full path with groups (GitLab).
    pub path: String,
}

impl std::fmt::Display for Project {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.forge.as_str(), self.path)
    }
}

impl Project {
    /// Parses `github:OWNER/REPO` or `gitlab:GROUP/PROJECT` (also given
    /// to `orch publish --forge`).
    pub fn parse(spec: &str) -> Result<Project, ForgeError> {
        let bad = |why: &str| {
            ForgeError::Invalid(format!(
                "failed to read the forge project `{spec}`: {why} (expected github:OWNER/REPO or gitlab:GROUP/PROJECT)"
            ))
        };
        let (forge, path) = match spec.split_once(':') {
            Some(("github", p)) => (Forge::GitHub, p),
            Some(("gitlab", p)) => (Forge::GitLab, p),
            _ => return Err(bad("unknown forge")),
        };
        let segments: Vec<&str> = path.split('/').collect();
        let ok_segment = |s: &&str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if segments.len() < 2 || !segments.iter().all(ok_segment) {
            return Err(bad("not a project path"));
        }
        if forge == Forge::GitHub && segments.len() != 2 {
            return Err(bad("a GitHub repository is OWNER/REPO"));
        }
        Ok(Project {
            forge,
            path: path.to_owned(),
        })
    }

    /// The project path percent-encoded as one URL segment (GitLab's `:id`).
    pub(crate) fn encoded(&self) -> String {
        percent_encode(&self.path)
    }

    /// The owner part (`OWNER` of `OWNER/REPO`).
    pub(crate) fn owner(&self) -> &str {
        self.path.split('/').next().unwrap_or(&self.path)
    }
}

/// An issue on a forge: `github:OWNER/REPO#N`, `gitlab:GROUP/PROJECT#N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueRef {
    /// The project.
    pub project: Project,
    /// The issue's number (GitLab: its `iid`).
    pub number: u64,
}

impl IssueRef {
    /// Whether `--issue` names a forge issue rather than a file.
    pub fn is_forge_spec(spec: &str) -> bool {
        spec.starts_with("github:") || spec.starts_with("gitlab:")
    }

    /// Parses `github:OWNER/REPO#N` or `gitlab:GROUP/PROJECT#N`.
    pub fn parse(spec: &str) -> Result<IssueRef, ForgeError> {
        let Some((project, number)) = spec.rsplit_once('#') else {
            return Err(ForgeError::Invalid(format!(
                "failed to read the issue `{spec}`: no `#NUMBER` (expected github:OWNER/REPO#N or gitlab:GROUP/PROJECT#N)"
            )));
        };
        let number = number
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                ForgeError::Invalid(format!(
                    "failed to read the issue `{spec}`: `{number}` is not an issue number"
                ))
            })?;
        Ok(IssueRef {
            project: Project::parse(project)?,
            number,
        })
    }
}

impl std::fmt::Display for IssueRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.project, self.number)
    }
}

/// Errors of forge access.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    /// Bad input: a spec, a config value, a run that cannot be published.
    #[error("{0}")]
    Invalid(String),
    /// The API could not be reached or answered with an error.
    #[error("{0}")]
    Api(String),
    /// `git push` failed.
    #[error("{0}")]
    Push(String),
}

/// Reads the forge issue `spec` (`github:OWNER/REPO#N`, …) through the API
/// configured for the repository at `repo`.
pub(crate) async fn read_issue(spec: &str, repo: &Path) -> Result<FrozenIssue, ForgeError> {
    let issue = IssueRef::parse(spec)?;
    let settings = ForgeSettings::load(Some(repo))?;
    let api = ForgeApi::new(issue.project.forge, &settings)?;
    let frozen = fetch_issue(&api, &issue).await?;
    crate::ui::status_line(&format!(
        "orch: read issue {issue} from {} ({} comment{})",
        api.base(),
        frozen.comments.len(),
        if frozen.comments.len() == 1 { "" } else { "s" }
    ));
    Ok(frozen)
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub(crate) fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The token `gh auth token` printed, asked at most once per process.
static GH_TOKEN: OnceLock<Option<String>> = OnceLock::new();

/// The forge token for `forge` from orch's environment, else (GitHub only)
/// from `gh auth token` when the `gh` CLI is installed. `None`: requests go
/// unauthenticated (public repositories only, low rate limits).
pub(crate) fn token(forge: Forge) -> Option<String> {
    let from_env = forge.token_vars().iter().find_map(|v| {
        std::env::var(v)
            .ok()
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
    });
    match forge {
        _ if from_env.is_some() => from_env,
        Forge::GitHub => gh_cli_token(),
        Forge::GitLab => None,
    }
}

fn gh_cli_token() -> Option<String> {
    GH_TOKEN
        .get_or_init(|| {
            let out = std::process::Command::new("gh")
                .args(["auth", "token"])
                .stdin(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .output()
                .ok()?;
            let t = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            (out.status.success() && !t.is_empty()).then_some(t)
        })
        .clone()
}

/// For `main`, before it fills the secrets registry: when a command will
/// talk to GitHub and no token variable is set, the token `gh auth token`
/// gives (so redaction knows it before any record is written). Tokens from
/// the environment are registered by the sandbox already.
pub fn startup_token(needs_forge: bool) -> Option<String> {
    let env_set = Forge::GitHub
        .token_vars()
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|t| !t.is_empty()));
    if !needs_forge || env_set {
        return None;
    }
    gh_cli_token()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_specs_parse_and_bad_ones_say_why() {
        let i = IssueRef::parse("github:octo/hello-world#7").unwrap();
        assert_eq!(i.project.forge, Forge::GitHub);
        assert_eq!(i.project.path, "octo/hello-world");
        assert_eq!(i.number, 7);
        assert_eq!(i.to_string(), "github:octo/hello-world#7");
        let g = IssueRef::parse("gitlab:grp/sub/proj#12").unwrap();
        assert_eq!(g.project.encoded(), "grp%2Fsub%2Fproj");
        for (bad, why) in [
            ("github:o/r", "no `#NUMBER`"),
            ("github:o/r#x", "`x` is not an issue number"),
            ("github:o/r#0", "`0` is not an issue number"),
            ("github:o#3", "not a project path"),
            ("github:a/b/c#3", "OWNER/REPO"),
            ("bitbucket:a/b#3", "unknown forge"),
            ("gitlab:a//b#3", "not a project path"),
        ] {
            let e = IssueRef::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(IssueRef::is_forge_spec("gitlab:x/y#1"));
        assert!(!IssueRef::is_forge_spec("ISSUE.md"));
    }
}
