//! The secret values orch knows and keeps out of everything that leaves it:
//! tool results sent to the model, every record file, stage commits.
//!
//! One process-wide registry ([`register_secrets`], read by [`known_secrets`]),
//! filled once at start by `main`: the values of secret-looking variables in
//! orch's environment ([`super::take_secrets_from_environ`]), passwords and
//! tokens from `~/.netrc`, and credentials embedded in URLs of `~/.gitconfig`
//! and `~/.git-credentials` ([`home_secrets`]); an `orch agent` child gets its
//! parent's list through an inherited pipe ([`write_secret_pipe`],
//! [`read_secret_fd`]), never through its environment.
//!
//! Invariant: a value shorter than [`MIN_SECRET_LEN`] is not registered —
//! redacting it would mangle ordinary text, and it reveals too little.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use crate::secrets::{MIN_SECRET_LEN, known_secrets};

/// Largest secrets file orch reads from `$HOME` (a larger `~/.netrc` is not a
/// netrc).
const MAX_HOME_FILE: u64 = 1 << 20;

/// Secret values in files of `home` orch reads at start, only those that
/// exist: `~/.netrc` `password`/`account` values, and `user:password@` parts
/// of URLs in `~/.gitconfig` and `~/.git-credentials`. Unreadable files are
/// skipped (the sandbox hides them from tools either way).
pub fn home_secrets(home: &Path) -> Vec<String> {
    let read = |rel: &str| -> Option<String> {
        let p = home.join(rel);
        let meta = std::fs::metadata(&p).ok()?;
        if !meta.is_file() || meta.len() > MAX_HOME_FILE {
            return None;
        }
        std::fs::read_to_string(p).ok()
    };
    let mut out = Vec::new();
    if let Some(text) = read(".netrc") {
        out.extend(netrc_secrets(&text));
    }
    for rel in [".gitconfig", ".git-credentials", ".config/git/credentials"] {
        if let Some(text) = read(rel) {
            out.extend(url_credentials(&text));
        }
    }
    out
}

/// The `password` and `account` tokens of a netrc file.
fn netrc_secrets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if (w == "password" || w == "account")
            && let Some(v) = words.next()
        {
            out.push(v.to_owned());
        }
    }
    out
}

/// The `password` (or token-as-user) parts of `scheme://user:password@host`
/// URLs anywhere in `text`; a lone `https://token@host` yields the token.
fn url_credentials(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("://") {
        let rest = &text[at + 3..];
        let end = rest
            .find(|c: char| c.is_whitespace() || c == '"' || c == '/')
            .unwrap_or(rest.len());
        let authority = &rest[..end];
        let Some((userinfo, _host)) = authority.rsplit_once('@') else {
            continue;
        };
        match userinfo.split_once(':') {
            Some((user, pass)) => {
                out.push(pass.to_owned());
                // `https://<token>:x-oauth-basic@github.com` puts the token first.
                if user.len() >= 20 {
                    out.push(user.to_owned());
                }
            }
            None => out.push(userinfo.to_owned()),
        }
    }
    out
}

/// What a parent hands an `orch agent` child through the secret pipe.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChildSecrets {
    /// Variables the child sets in its own (libc) environment at start, e.g.
    /// `ORCH_API_KEY` — so they never appear in its `/proc/<pid>/environ`.
    pub env: Vec<(String, String)>,
    /// Every value the child must redact.
    pub redact: Vec<String>,
}

/// Creates a pipe holding `secrets` (JSON, written whole, write end closed)
/// and returns its read end, to be inherited by the child. The payload is
/// small (well under the pipe buffer), so the write never blocks.
pub fn write_secret_pipe(secrets: &ChildSecrets) -> std::io::Result<OwnedFd> {
    let payload = serde_json::to_vec(secrets).map_err(std::io::Error::other)?;
    // `std::io::pipe` is `pipe2(O_CLOEXEC)` on Linux.
    let (read, mut write) = std::io::pipe()?;
    std::io::Write::write_all(&mut write, &payload)?;
    drop(write);
    Ok(read.into())
}

/// Reads (and closes) the secret pipe a parent passed as descriptor `fd`.
///
/// # Safety
/// `fd` must be an open descriptor this process owns and nothing else uses.
pub unsafe fn read_secret_fd(fd: RawFd) -> std::io::Result<ChildSecrets> {
    // SAFETY: the caller's contract.
    let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut buf = Vec::new();
    f.by_ref().take(8 << 20).read_to_end(&mut buf)?;
    serde_json::from_slice(&buf).map_err(|e| std::io::Error::other(format!("secret pipe: {e}")))
}

/// A secret found in a file about to be committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretInFile {
    /// The file, relative to the worktree.
    pub path: String,
    /// The value, masked (`sk-o…[28 chars]`).
    pub masked: String,
}

impl std::fmt::Display for SecretInFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} contains a known secret value ({})",
            self.path, self.masked
        )
    }
}

/// A secret value masked for messages: the first 4 characters and the length.
pub fn mask(secret: &str) -> String {
    let head: String = secret.chars().take(4).collect();
    format!("{head}…[{} chars]", secret.chars().count())
}

/// Looks for any of `secrets` (plus [`known_secrets`]) in the files `paths`
/// (relative to `root`) that exist; returns the first hit per file.
pub fn scan_files(root: &Path, paths: &[String], secrets: &[String]) -> Vec<SecretInFile> {
    let all: Vec<&str> = secrets
        .iter()
        .chain(known_secrets())
        .map(String::as_str)
        .filter(|s| s.len() >= MIN_SECRET_LEN)
        .collect();
    if all.is_empty() {
        return Vec::new();
    }
    let mut hits = Vec::new();
    for rel in paths {
        let p: PathBuf = root.join(rel);
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        let bytes = if meta.is_symlink() {
            std::fs::read_link(&p)
                .map(|t| t.as_os_str().as_encoded_bytes().to_vec())
                .unwrap_or_default()
        } else if meta.is_file() {
            std::fs::read(&p).unwrap_or_default()
        } else {
            continue;
        };
        if let Some(s) = all.iter().find(|s| contains(&bytes, s.as_bytes())) {
            hits.push(SecretInFile {
                path: rel.clone(),
                masked: mask(s),
            });
        }
    }
    hits
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netrc_and_credential_urls_yield_their_secrets() {
        let netrc = "machine api.example.com login me password s3cretNetrcPw\n\
                     default login x password other-pass-123\n";
        assert_eq!(
            netrc_secrets(netrc),
            ["s3cretNetrcPw".to_owned(), "other-pass-123".to_owned()]
        );
        let gitconfig = "[url \"https://bot:ghp_tokenInUrl123456@github.com/\"]\n\
                         \tinsteadOf = https://github.com/\n\
                         [remote]\n\turl = https://plain.example.com/x\n";
        assert_eq!(url_credentials(gitconfig), ["ghp_tokenInUrl123456"]);
        let creds = "https://ghp_aLoneTokenAsUser000@github.com\n";
        assert_eq!(url_credentials(creds), ["ghp_aLoneTokenAsUser000"]);
    }

    #[test]
    fn home_secrets_reads_only_existing_files() {
        let t = tempfile::tempdir().unwrap();
        assert!(home_secrets(t.path()).is_empty());
        std::fs::write(
            t.path().join(".netrc"),
            "machine m login u password pw-netrc-99\n",
        )
        .unwrap();
        assert_eq!(home_secrets(t.path()), ["pw-netrc-99"]);
    }

    #[test]
    fn the_pipe_carries_env_and_values_to_the_reader() {
        let s = ChildSecrets {
            env: vec![("ORCH_API_KEY".into(), "sk-pipe-123456".into())],
            redact: vec!["v1-long-value".into()],
        };
        let fd = write_secret_pipe(&s).unwrap();
        let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
        // SAFETY: we own `raw` (just released from its OwnedFd).
        let back = unsafe { read_secret_fd(raw) }.unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn a_scan_names_the_file_and_masks_the_value() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("ok.txt"), "nothing here").unwrap();
        std::fs::write(t.path().join("leak.env"), "KEY=sk-scan-0123456789\n").unwrap();
        let hits = scan_files(
            t.path(),
            &["ok.txt".into(), "leak.env".into(), "gone.txt".into()],
            &["sk-scan-0123456789".into()],
        );
        assert_eq!(hits.len(), 1);
        assert_eq!(
            hits[0].to_string(),
            "leak.env contains a known secret value (sk-s…[18 chars])"
        );
    }
}
