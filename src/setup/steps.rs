//! Running one setup command — a reconnaissance command, a plan step or a
//! step's check — through the tool layer's process handling (`bash -c` in
//! its own process group, stdin closed, a timeout that kills the group,
//! output capped head + tail) inside the setup sandbox.
//!
//! The setup sandbox profiles (Landlock where the kernel has it; otherwise
//! `no_new_privs` and the capability drop, see `docs/sandbox.md`):
//! - reconnaissance and checks: `read-only` — only the private temp dir is
//!   writable; a check run when the plan is made (before anything was
//!   confirmed, also under `--plan-only`) runs only where that is kept:
//!   Landlock enforces it, or the check is a known read-only command;
//! - `install` steps: the setup directory, the private temp dir and the
//!   per-user package-manager directories that exist ([`USER_PACKAGE_DIRS`]
//!   under `$HOME`: `~/.local`, `~/.cache`, `~/.cargo`, …) and `/usr/local`,
//!   `/opt`;
//! - `install` steps of `orch setup --lane`: only the lane and the private
//!   temp dir (what the lane's setup command may write when it runs again);
//! - `system` steps: the same as `install` plus the system package trees ([`SYSTEM_DIRS`]);
//! - in every profile the secret paths (`~/.ssh`, `~/.aws`, orch's config
//!   dir, …) stay unreadable: no writable root contains one (a setup
//!   directory that does, `$HOME` or `/`, stays read-only);
//! - a step that uses `sudo` runs outside the sandbox: `no_new_privs` would
//!   make `sudo` powerless. The plan must mark it `system` and the user must
//!   confirm it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::plan::Risk;
use super::readonly::not_read_only;
use crate::exec::{self, ExecLimits, PreExec};
use crate::sandbox::Policy;
use crate::sandbox_profile::Profile;

/// Output bytes of a command shown to the model and the user (head + tail).
pub(crate) const MAX_OUTPUT_BYTES: usize = 4000;

/// Per-user directories package managers and version managers write.
const USER_PACKAGE_DIRS: &[&str] = &[
    ".local",
    ".cache",
    ".cargo",
    ".rustup",
    ".npm",
    ".nvm",
    ".pyenv",
    ".fnm",
    ".volta",
    ".bun",
    ".deno",
    "go",
    ".sdkman",
    ".pixi",
    ".conda",
    "miniconda3",
];

/// Directories system package managers write (effective only as root).
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/etc", "/var", "/opt", "/srv", "/lib", "/lib64", "/bin", "/sbin",
];

/// Environment variables passed to setup commands beyond the tool
/// allowlist: package managers need the proxy settings.
const PROXY_VARS: &[&str] = &[
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SHELL",
];

/// How a command is sandboxed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sandboxing {
    /// Reconnaissance and checks.
    ReadOnly,
    /// A plan step of this risk.
    Step(Risk),
    /// An `install` step of `orch setup --lane`: only the lane (the
    /// working directory) and the private temp dir are writable.
    Lane,
    /// A confirmed `sudo` step: no sandbox.
    Unsandboxed,
}

/// What one command did.
#[derive(Debug, Clone)]
pub(crate) struct Ran {
    /// Exit code, when it exited.
    pub(crate) exit_code: Option<i32>,
    /// Whether the timeout killed it.
    pub(crate) timed_out: bool,
    /// Output, capped.
    pub(crate) output: String,
    /// Wall time.
    pub(crate) secs: f64,
    /// What the sandbox enforced.
    pub(crate) sandbox: String,
}

impl Ran {
    /// Exit 0 and not timed out.
    pub(crate) fn ok(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }

    /// `exit 0 (0.1s)`, `timed out after 5s`, `killed by a signal`.
    pub(crate) fn status(&self, timeout: Duration) -> String {
        match (self.timed_out, self.exit_code) {
            (true, _) => format!(
                "timed out after {}s; its process group was killed",
                timeout.as_secs()
            ),
            (false, Some(c)) => format!("exit {c} ({:.1}s)", self.secs),
            (false, None) => format!("killed by a signal ({:.1}s)", self.secs),
        }
    }
}

/// Runs `command` in `cwd` with `sandboxing`; `tmp` is the setup's private
/// temp dir (`TMPDIR`). `Err` when it could not be started.
pub(crate) async fn run(
    command: &str,
    cwd: &Path,
    tmp: &Path,
    timeout: Duration,
    sandboxing: Sandboxing,
) -> Result<Ran, String> {
    let (hook, sandbox) = match sandboxing {
        Sandboxing::Unsandboxed => (None, "no sandbox (sudo step)".to_owned()),
        Sandboxing::ReadOnly => hook_for(policy(Profile::ReadOnly, cwd, tmp, &[])?)?,
        Sandboxing::Lane => hook_for(policy(Profile::WorkspaceWrite, cwd, tmp, &[])?)?,
        Sandboxing::Step(risk) => {
            let mut roots = user_roots();
            if risk == Risk::System {
                roots.extend(SYSTEM_DIRS.iter().map(PathBuf::from));
            }
            let secrets = secret_paths();
            roots.retain(|r| !holds_secret(r, &secrets));
            // A setup started in `$HOME` (or `/`) must not make the secrets
            // writable and readable with it: the directory itself stays
            // read-only, the package-manager roots stay writable.
            let profile = if holds_secret(cwd, &secrets) {
                Profile::ReadOnly
            } else {
                Profile::WorkspaceWrite
            };
            hook_for(policy(profile, cwd, tmp, &roots)?)?
        }
    };
    exec_hooked(command, cwd, tmp, timeout, hook, sandbox).await
}

/// Runs a step's check before any step ran (when the plan is made, before
/// anyone confirmed anything, and under `--plan-only`): under the
/// read-only profile, and only where that is kept: Landlock enforces it,
/// or the check is one [`not_read_only`] accepts. `Ok(Err(why))` when it
/// was not run for that reason.
pub(crate) async fn probe(
    command: &str,
    cwd: &Path,
    tmp: &Path,
    timeout: Duration,
) -> Result<Result<Ran, String>, String> {
    let prepared = crate::sandbox::prepare(&policy(Profile::ReadOnly, cwd, tmp, &[])?)
        .map_err(|e| format!("failed to {e}"))?;
    if !prepared.landlock_enforced()
        && let Some(why) = not_read_only(command)
    {
        return Ok(Err(format!(
            "not run before the step: it is not a known read-only command ({why}) and no kernel sandbox (Landlock) keeps it read-only here"
        )));
    }
    let (hook, sandbox) = hook_of(prepared);
    exec_hooked(command, cwd, tmp, timeout, hook, sandbox)
        .await
        .map(Ok)
}

async fn exec_hooked(
    command: &str,
    cwd: &Path,
    tmp: &Path,
    timeout: Duration,
    hook: Option<PreExec>,
    sandbox: String,
) -> Result<Ran, String> {
    let limits = ExecLimits {
        max_output_bytes: MAX_OUTPUT_BYTES,
        max_timeout: timeout,
        ..ExecLimits::default()
    };
    let r = exec::run_shell_with(command, cwd, &env(tmp), timeout, &limits, hook.as_ref())
        .await
        .map_err(|e| format!("could not start `{command}`: {e}"))?;
    Ok(Ran {
        exit_code: r.exit_code,
        timed_out: r.timed_out,
        output: r.output,
        secs: r.duration.as_secs_f64(),
        sandbox,
    })
}

fn policy(profile: Profile, cwd: &Path, tmp: &Path, roots: &[PathBuf]) -> Result<Policy, String> {
    let mut p = Policy::new(profile, cwd, tmp).map_err(|e| format!("failed to {e}"))?;
    // The passwd entry's home holds keys too when `$HOME` points elsewhere.
    for s in passwd_secret_paths() {
        if !p.secret_paths.contains(&s) {
            p.secret_paths.push(s);
        }
    }
    p.writable.extend(roots.iter().cloned());
    p.network = true;
    Ok(p)
}

fn hook_for(policy: Policy) -> Result<(Option<PreExec>, String), String> {
    let prepared = crate::sandbox::prepare(&policy).map_err(|e| format!("failed to {e}"))?;
    Ok(hook_of(prepared))
}

fn hook_of(prepared: crate::sandbox::Prepared) -> (Option<PreExec>, String) {
    let prepared = Arc::new(prepared);
    let summary = prepared.summary().to_owned();
    let hook = PreExec::new(move || prepared.apply_in_child());
    (Some(hook), summary)
}

/// The secret paths that exist, resolved.
fn secret_paths() -> Vec<PathBuf> {
    let home = crate::environment::current().home();
    crate::sandbox::default_secret_paths(home.as_deref(), crate::dirs::user_config_dir().as_deref())
        .into_iter()
        .chain(passwd_secret_paths())
        .filter_map(|p| p.canonicalize().ok())
        .collect()
}

/// The secret paths under the passwd entry's home.
fn passwd_secret_paths() -> Vec<PathBuf> {
    crate::policy::passwd_home()
        .map(|h| crate::sandbox::default_secret_paths(Some(&h), None))
        .unwrap_or_default()
}

/// Whether granting `root` would grant one of `secrets` too.
fn holds_secret(root: &Path, secrets: &[PathBuf]) -> bool {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    secrets.iter().any(|s| s.starts_with(&root))
}

/// `/usr/local`, `/opt` and the per-user package dirs that exist.
fn user_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = vec!["/usr/local".into(), "/opt".into()];
    if let Some(home) = crate::environment::current().home() {
        roots.extend(USER_PACKAGE_DIRS.iter().map(|d| home.join(d)));
    }
    roots
}

fn env(tmp: &Path) -> Vec<(String, String)> {
    let mut env = exec::scrubbed_env();
    for k in PROXY_VARS {
        if let Ok(v) = std::env::var(k) {
            env.retain(|(ek, _)| ek != k);
            env.push(((*k).to_owned(), v));
        }
    }
    env.retain(|(k, _)| k != "TMPDIR");
    env.push(("TMPDIR".into(), tmp.display().to_string()));
    env
}

/// `text` with every known secret value ([`crate::secrets::redact`]: the
/// model key, secret-looking variables, `~/.netrc` passwords, …) and every
/// PEM private key block (`-----BEGIN … PRIVATE KEY-----` to its end, or
/// to the end of the text when a cap cut it) replaced.
pub(crate) fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = crate::secrets::redact(text, secrets);
    let mut from = 0;
    while let Some(at) = out[from..].find("-----BEGIN ").map(|i| i + from) {
        let header_end = out[at..].find('\n').map_or(out.len(), |i| at + i);
        if !out[at..header_end].contains("PRIVATE KEY") {
            from = header_end;
            continue;
        }
        let end = out[header_end..]
            .find("-----END ")
            .map(|i| header_end + i)
            .map_or(out.len(), |e| {
                let close = out[e + 9..]
                    .find("-----")
                    .map_or(out.len(), |c| e + 9 + c + 5);
                close.min(out.len())
            });
        out.replace_range(at..end, PRIVATE_KEY_REDACTED);
        from = at + PRIVATE_KEY_REDACTED.len();
    }
    out
}

/// What a private key block becomes.
const PRIVATE_KEY_REDACTED: &str = "[REDACTED private key]";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_above_a_secret_holds_it() {
        let t = tempfile::tempdir().unwrap();
        let ssh = t.path().join(".ssh");
        std::fs::create_dir_all(&ssh).unwrap();
        let secrets = [ssh.canonicalize().unwrap()];
        assert!(holds_secret(t.path(), &secrets));
        assert!(holds_secret(Path::new("/"), &secrets));
        assert!(!holds_secret(&t.path().join(".local"), &secrets));
    }

    #[test]
    fn private_key_blocks_are_redacted() {
        let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----";
        let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----";
        let out = redact(&format!("a\n{key}\nb\n{cert}\n{key}"), &[]);
        assert_eq!(
            out,
            format!("a\n[REDACTED private key]\nb\n{cert}\n[REDACTED private key]")
        );
        let cut = redact("x -----BEGIN RSA PRIVATE KEY-----\nMII", &[]);
        assert_eq!(cut, "x [REDACTED private key]");
    }
}
