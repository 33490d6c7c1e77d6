//! The forge token: from orch's environment, else from `gh auth token`
//! (see the module docs of `forge` for how it is kept secret).

use std::sync::OnceLock;

use super::types::Forge;

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
