//! Pushing a run's branches with the `git` CLI.
//!
//! Why the CLI and not git2: orch's libgit2 is built without transports
//! (no OpenSSL, no libssh2, see `DEPS.md`), so it can only push to local
//! paths. The CLI speaks file, ssh and https remotes with the user's own
//! credentials (ssh agent, credential helpers, the `extraheader` that
//! `actions/checkout` configures) and none of orch's.

use super::types::{Forge, ForgeError, Project};
use std::path::Path;

/// Pushes `refspecs` (`<src>:refs/heads/<dst>`) to `remote` (a remote's
/// name or a URL) from the repository at `repo`. Never forced: a remote
/// branch that moved elsewhere is refused by git, and the error says so.
pub(crate) async fn push_refs(
    repo: &Path,
    remote: &str,
    refspecs: &[String],
) -> Result<(), ForgeError> {
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["push", "--porcelain", "--", remote])
        .args(refspecs)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| ForgeError::Push(format!("failed to run `git push`: {e}")))?;
    if !out.status.success() {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let hint = if text.contains("[rejected]") || text.contains("non-fast-forward") {
            "\n(the remote branch has commits the run's branch lacks; orch never force-pushes: pass --branch NAME to publish under another name)"
        } else {
            ""
        };
        return Err(ForgeError::Push(without_userinfo(&crate::secrets::redact(
            &format!("failed to push to {remote}:\n{}{hint}", text.trim()),
            &[],
        ))));
    }
    Ok(())
}

/// `text` with the `user:password@` part of every URL in it replaced by
/// `***@` (a remote URL may carry a credential that no registry knows).
pub(crate) fn without_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '/' | '\'' | '"'))
            .unwrap_or(tail.len());
        match tail[..end].rfind('@') {
            Some(i) => {
                out.push_str("***");
                rest = &tail[i..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

/// The URL of the remote `name` of the repository at `repo` (`name` itself
/// when it is already a URL or a path).
pub(crate) fn remote_url(repo: &Path, name: &str) -> Option<String> {
    let r = crate::git::Repo::discover(repo).ok()?;
    Some(
        r.remote_url(name)
            .ok()
            .flatten()
            .unwrap_or_else(|| name.to_owned()),
    )
}

/// The forge project a remote URL points at, for `github.com` and hosts
/// whose name contains `gitlab`: `git@github.com:o/r.git`,
/// `https://github.com/o/r`, `ssh://git@gitlab.example.com/g/p.git`.
pub(crate) fn project_of_url(url: &str) -> Option<Project> {
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .unwrap_or(url)
        .trim_end_matches('/');
    // `user@host:path` (scp form) or `[user@]host[:port]/path`.
    let after_user = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let (host, path) = match after_user.split_once('/') {
        Some((h, p)) if !h.contains(':') || url.contains("://") => (h, p),
        _ => after_user.split_once(':')?,
    };
    let host = host.split(':').next().unwrap_or(host).to_ascii_lowercase();
    let forge = if host == "github.com" || host.ends_with(".github.com") {
        Forge::GitHub
    } else if host.contains("gitlab") {
        Forge::GitLab
    } else {
        return None;
    };
    let path = path.trim_end_matches(".git");
    Project::parse(&format!("{}:{path}", forge.as_str())).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_urls_are_masked() {
        assert_eq!(
            without_userinfo(
                "fatal: 'https://bot:s3cret@github.com/o/r' and ssh://git@h/x, /plain/path"
            ),
            "fatal: 'https://***@github.com/o/r' and ssh://***@h/x, /plain/path"
        );
    }

    #[test]
    fn remote_urls_name_their_project() {
        for (url, want) in [
            ("git@github.com:octo/hello.git", Some("github:octo/hello")),
            ("https://github.com/octo/hello", Some("github:octo/hello")),
            (
                "https://x-access-token@github.com/octo/hello.git",
                Some("github:octo/hello"),
            ),
            (
                "ssh://git@gitlab.example.com:2222/grp/sub/proj.git",
                Some("gitlab:grp/sub/proj"),
            ),
            ("git@gitlab.com:grp/proj.git", Some("gitlab:grp/proj")),
            ("/srv/git/repo.git", None),
            ("https://example.com/a/b", None),
        ] {
            assert_eq!(
                project_of_url(url).map(|p| p.to_string()).as_deref(),
                want,
                "{url}"
            );
        }
    }
}
