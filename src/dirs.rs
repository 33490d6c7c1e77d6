//! Where orch's own files are: a leaf, so the sandbox (which hides the
//! config dir from tools) and the catalog (which reads pipelines and roles
//! from it) both take it from below.

use std::path::PathBuf;

/// The user config dir: `$ORCH_CONFIG_DIR`, else `$XDG_CONFIG_HOME/orch`,
/// else `$HOME/.config/orch`. Empty or relative XDG values are ignored, as
/// the XDG spec asks.
pub(crate) fn user_config_dir() -> Option<PathBuf> {
    let env = crate::environment::current();
    let var = |name: &str| env.var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("ORCH_CONFIG_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(xdg) = var("XDG_CONFIG_HOME").map(PathBuf::from)
        && xdg.is_absolute()
    {
        return Some(xdg.join("orch"));
    }
    var("HOME").map(|home| PathBuf::from(home).join(".config").join("orch"))
}

/// The user cache dir: `$XDG_CACHE_HOME/orch`, else `$HOME/.cache/orch`
/// (what orch learned about model servers; nothing secret, nothing that
/// cannot be learned again). Empty or relative XDG values are ignored.
pub(crate) fn user_cache_dir() -> Option<PathBuf> {
    let env = crate::environment::current();
    let var = |name: &str| env.var_os(name).filter(|v| !v.is_empty());
    if let Some(xdg) = var("XDG_CACHE_HOME").map(PathBuf::from)
        && xdg.is_absolute()
    {
        return Some(xdg.join("orch"));
    }
    var("HOME").map(|home| PathBuf::from(home).join(".cache").join("orch"))
}
