//! The forges orch speaks to, projects and issue references on them, and
//! the error of forge access (a leaf of `forge`).

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
