//! The sandbox [`Profile`] a role or `orch.toml` names: a leaf, so `role`
//! parses it without importing the sandbox (which itself reads roles).

/// How much a tool process may change (`sandbox:` in a role or `orch.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// The lane worktree, its git admin dir, the private temp dir and the
    /// configured extra roots are writable; everything else is read-only.
    WorkspaceWrite,
    /// Only the private temp dir (and extra roots) are writable: the lane is
    /// read-only too (explore, reviewer).
    ReadOnly,
    /// No restriction at all (explicit opt-out; the caller logs it per call).
    Off,
}

impl Profile {
    /// Parses the config spelling: `workspace-write`, `read-only`, `off`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "workspace-write" => Some(Self::WorkspaceWrite),
            "read-only" => Some(Self::ReadOnly),
            "off" => Some(Self::Off),
            _ => None,
        }
    }

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WorkspaceWrite => "workspace-write",
            Self::ReadOnly => "read-only",
            Self::Off => "off",
        }
    }
}
