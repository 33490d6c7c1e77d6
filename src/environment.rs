//! The environment variables that are orch's settings, read once.
//!
//! A leaf: every floor may ask it, so no library module reads the process
//! environment for a setting of its own. The entry reads the variables in
//! [`VARS`] once, before any thread starts (`cli::read_environment`, called
//! by `main`), and [`install`]s them; library code asks [`current`]. Code
//! run without that entry (unit tests, the library used on its own) gets
//! the variables read from the process at its first question instead — the
//! only read of the process environment here.
//!
//! Not here, on purpose (docs/architecture.md lists them with the reason):
//! the variables a child's environment is built from (`exec`'s scrubbed
//! allowlist, a subagent's, an install step's proxies, the eval's `orch
//! run`), credentials (the API key, resolved by `config`; forge tokens, read
//! at the moment of use and never copied into a settings value), what
//! `detect_system` reports of the machine, and the test hooks.
//!
//! `config::resolve` takes its own variables (`ORCH_BASE_URL`, `ORCH_MODEL`,
//! `ORCH_PROFILE`, `ORCH_API_KEY`, …) through a lookup the caller passes,
//! so it stays hermetic for its tests.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::sync::OnceLock;

/// The user's home directory: where the config dir, the setup records and
/// the secret paths the sandbox hides are found, and what `~` means in a
/// policy.
pub const HOME: &str = "HOME";
/// orch's config dir, over `XDG_CONFIG_HOME/orch` and `~/.config/orch`.
pub const ORCH_CONFIG_DIR: &str = "ORCH_CONFIG_DIR";
/// The XDG config base (`<it>/orch` is the config dir when absolute).
pub const XDG_CONFIG_HOME: &str = "XDG_CONFIG_HOME";
/// The XDG state base (`<it>/orch/setup` holds the setup records).
pub const XDG_STATE_HOME: &str = "XDG_STATE_HOME";
/// The XDG cache base (`<it>/orch` holds what orch learned about model
/// servers, when absolute).
pub const XDG_CACHE_HOME: &str = "XDG_CACHE_HOME";
/// Where `orch setup` keeps its records, over the XDG state dir.
pub const ORCH_SETUP_DIR: &str = "ORCH_SETUP_DIR";
/// Set and not empty: no colour (<https://no-color.org>).
pub const NO_COLOR: &str = "NO_COLOR";
/// `true` on CI: no one can be asked.
pub const CI: &str = "CI";
/// How many warm lanes a repository keeps (over `[lanes] pool`).
pub const ORCH_LANE_POOL: &str = "ORCH_LANE_POOL";
/// `0`: no lane watchers.
pub const ORCH_LANE_WATCH: &str = "ORCH_LANE_WATCH";
/// `1`: the kernel sandbox is off.
pub const ORCH_SANDBOX_DISABLE: &str = "ORCH_SANDBOX_DISABLE";
/// A subagent's depth limit.
pub const ORCH_SUBAGENT_MAX_DEPTH: &str = "ORCH_SUBAGENT_MAX_DEPTH";
/// A stage's limit on subagents.
pub const ORCH_SUBAGENT_MAX_CHILDREN: &str = "ORCH_SUBAGENT_MAX_CHILDREN";
/// A subagent's time limit, seconds.
pub const ORCH_SUBAGENT_TIME_SECS: &str = "ORCH_SUBAGENT_TIME_SECS";
/// A subagent's token limit.
pub const ORCH_SUBAGENT_TOKENS: &str = "ORCH_SUBAGENT_TOKENS";
/// GitHub's API root, as GitHub Actions sets it (under `[forge] github`).
pub const GITHUB_API_URL: &str = "GITHUB_API_URL";
/// GitLab's API root, as GitLab CI sets it (under `[forge] gitlab`).
pub const CI_API_V4_URL: &str = "CI_API_V4_URL";

/// Every variable read: adding a setting from the environment is a constant
/// above and its name here.
pub const VARS: &[&str] = &[
    HOME,
    ORCH_CONFIG_DIR,
    XDG_CONFIG_HOME,
    XDG_STATE_HOME,
    XDG_CACHE_HOME,
    ORCH_SETUP_DIR,
    NO_COLOR,
    CI,
    ORCH_LANE_POOL,
    ORCH_LANE_WATCH,
    ORCH_SANDBOX_DISABLE,
    ORCH_SUBAGENT_MAX_DEPTH,
    ORCH_SUBAGENT_MAX_CHILDREN,
    ORCH_SUBAGENT_TIME_SECS,
    ORCH_SUBAGENT_TOKENS,
    GITHUB_API_URL,
    CI_API_V4_URL,
];

/// The values of [`VARS`] as they were when read (unset ones absent; empty
/// ones kept, each user decides what empty means as before).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    vars: BTreeMap<&'static str, OsString>,
}

impl Environment {
    /// Reads every name in [`VARS`] through `lookup`.
    pub fn read(lookup: &dyn Fn(&str) -> Option<OsString>) -> Self {
        Environment {
            vars: VARS
                .iter()
                .filter_map(|&name| lookup(name).map(|v| (name, v)))
                .collect(),
        }
    }

    /// The value of `name` (one of [`VARS`]), as `std::env::var_os` gives it.
    pub fn var_os(&self, name: &str) -> Option<&OsStr> {
        debug_assert!(VARS.contains(&name), "{name} is not in environment::VARS");
        self.vars.get(name).map(OsString::as_os_str)
    }

    /// The value of `name` when it is UTF-8, as `std::env::var(..).ok()`.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.var_os(name).and_then(OsStr::to_str)
    }

    /// `$HOME`, as a path (empty included, as the sites reading it did).
    pub fn home(&self) -> Option<std::path::PathBuf> {
        self.var_os(HOME).map(std::path::PathBuf::from)
    }
}

static CURRENT: OnceLock<Environment> = OnceLock::new();

/// Makes `env` what [`current`] answers for the rest of the process. The
/// entry calls it once, first; a second call (or one after a question) is
/// ignored and returns `false`.
pub fn install(env: Environment) -> bool {
    CURRENT.set(env).is_ok()
}

/// The environment the entry read (or, without one, the process's, read at
/// the first question).
pub fn current() -> &'static Environment {
    CURRENT.get_or_init(|| Environment::read(&|k| std::env::var_os(k)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_only_the_listed_names_and_keeps_empty_values() {
        let env = Environment::read(&|k| match k {
            "HOME" => Some("/h".into()),
            "NO_COLOR" => Some("".into()),
            "OTHER" => Some("x".into()),
            _ => None,
        });
        assert_eq!(env.home(), Some("/h".into()));
        assert_eq!(env.var_os(NO_COLOR), Some(OsStr::new("")));
        assert_eq!(env.var(CI), None);
        assert_eq!(env.vars.len(), 2, "{env:?}");
    }

    #[test]
    fn non_utf8_values_are_there_as_os_strings_only() {
        use std::os::unix::ffi::OsStringExt;
        let env = Environment::read(&|k| (k == CI).then(|| OsString::from_vec(vec![0xff])));
        assert!(env.var_os(CI).is_some());
        assert_eq!(env.var(CI), None);
    }
}
