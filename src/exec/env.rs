//! The environment of child processes: an allowlist of orch's own
//! variables, a few fixed ones, and one rule for what counts as a secret.
//! API keys and tokens never reach tool processes.

/// Environment variables copied from orch's own environment into tool processes.
const PASSED_VARS: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
    // Not a secret: marks every process of a run (see `reap_run_orphans`).
    RUN_MARKER,
];

/// The environment variable that marks every tool process (and subagent) of
/// a run with its run id, so a later `orch` can find what a killed one left.
pub(crate) const RUN_MARKER: &str = "ORCH_RUN_ID";

/// Variables forced for tool processes: no colours, pagers or git prompts,
/// and no Python bytecode: an agent's own `python -m pytest` would
/// otherwise leave `__pycache__/` in the lane, and a repository that does
/// not ignore it would get it committed with the stage.
const FIXED_VARS: &[(&str, &str)] = &[
    ("TERM", "dumb"),
    ("NO_COLOR", "1"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("PYTHONDONTWRITEBYTECODE", "1"),
];

/// The environment for tool processes, built from orch's own environment
/// through an allowlist (see [`PASSED_VARS`] and [`FIXED_VARS`]).
pub(crate) fn scrubbed_env() -> Vec<(String, String)> {
    scrub(std::env::vars_os().map(|(k, v)| {
        (
            k.to_string_lossy().into_owned(),
            v.to_string_lossy().into_owned(),
        )
    }))
}

/// Keeps only allowlisted variables and adds the fixed ones. Secrets are never
/// on the allowlist; the explicit check below guards against someone adding a
/// pattern-like name to it later.
fn scrub(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vars
        .filter(|(k, _)| PASSED_VARS.contains(&k.as_str()) && !is_secret_name(k))
        .collect();
    env.sort();
    env.dedup_by(|a, b| a.0 == b.0);
    for (k, v) in FIXED_VARS {
        env.push(((*k).to_owned(), (*v).to_owned()));
    }
    env
}

/// Endings (of upper-cased names) that mark an environment variable as secret.
const SECRET_NAME_ENDINGS: &[&str] = &[
    "_KEY",
    "APIKEY",
    "_TOKEN",
    "_SECRET",
    "PASSWORD",
    "PASSWD",
    "_PASS",
    "_CREDENTIALS",
    "_PAT",
];

/// Whether an environment variable's name marks it as a secret: one of
/// [`SECRET_NAME_ENDINGS`], or `SECRET`/`PASSWORD` anywhere in it. The one
/// rule both for what tool processes never get and for what the run record
/// redacts.
pub(crate) fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAME_ENDINGS.iter().any(|e| upper.ends_with(e))
        || upper.contains("SECRET")
        || upper.contains("PASSWORD")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_drops_secrets_and_keeps_allowlist() {
        let vars = [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/x"),
            ("ORCH_API_KEY", "sk-secret"),
            ("OPENAI_API_KEY", "sk-2"),
            ("GITHUB_TOKEN", "ghp"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("MY_SECRET", "s"),
            ("RANDOM_VAR", "r"),
            ("TERM", "xterm-256color"),
        ];
        let env = scrub(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("PATH"), Some("/usr/bin"));
        assert_eq!(get("HOME"), Some("/home/x"));
        assert_eq!(get("TERM"), Some("dumb"));
        assert_eq!(get("NO_COLOR"), Some("1"));
        assert_eq!(get("GIT_TERMINAL_PROMPT"), Some("0"));
        assert_eq!(get("PYTHONDONTWRITEBYTECODE"), Some("1"));
        for secret in [
            "ORCH_API_KEY",
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "MY_SECRET",
            "RANDOM_VAR",
        ] {
            assert_eq!(get(secret), None, "{secret} leaked");
        }
        assert!(!env.iter().any(|(_, v)| v.starts_with("sk-")));
        let names: Vec<_> = env.iter().map(|(k, _)| k.as_str()).collect();
        let mut dedup = names.clone();
        dedup.dedup();
        assert_eq!(names.len(), dedup.len(), "each variable once: {names:?}");
    }
}
