//! Tool names: the closed set of tools orch can offer a model. A leaf (std
//! only), so roles and the catalog can check tool lists without depending on
//! the tool runtime. The names are a public contract with the model and
//! with role files.

use std::fmt;
use std::str::FromStr;

/// One orch tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum ToolName {
    /// `bash`: a shell command in the worktree.
    Bash,
    /// `read_file`.
    ReadFile,
    /// `write_file`.
    WriteFile,
    /// `edit_file`.
    EditFile,
    /// `list_files`.
    ListFiles,
    /// `grep`.
    Grep,
    /// `spawn_agent`: a subagent with a fresh history.
    SpawnAgent,
    /// `finish`: ends the agent's stage.
    Finish,
}

impl ToolName {
    /// Every tool, in the order they are offered and roles list them.
    pub(crate) const ALL: [ToolName; 8] = [
        ToolName::Bash,
        ToolName::ReadFile,
        ToolName::WriteFile,
        ToolName::EditFile,
        ToolName::ListFiles,
        ToolName::Grep,
        ToolName::SpawnAgent,
        ToolName::Finish,
    ];

    /// The name the model calls it by.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            ToolName::Bash => "bash",
            ToolName::ReadFile => "read_file",
            ToolName::WriteFile => "write_file",
            ToolName::EditFile => "edit_file",
            ToolName::ListFiles => "list_files",
            ToolName::Grep => "grep",
            ToolName::SpawnAgent => "spawn_agent",
            ToolName::Finish => "finish",
        }
    }

    /// True for tools that change files directly (refused for read-only
    /// roles); `bash` is governed by its policy instead.
    pub(crate) const fn is_write(self) -> bool {
        matches!(self, ToolName::WriteFile | ToolName::EditFile)
    }

    /// True when `name` is a tool that changes files directly.
    pub(crate) fn is_write_name(name: &str) -> bool {
        name.parse::<ToolName>().is_ok_and(ToolName::is_write)
    }
}

/// Every tool name as text, in [`ToolName::ALL`] order.
pub(crate) const NAMES: [&str; 8] = {
    let mut names = [""; 8];
    let mut i = 0;
    while i < names.len() {
        names[i] = ToolName::ALL[i].as_str();
        i += 1;
    }
    names
};

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not an orch tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnknownTool(pub String);

impl fmt::Display for UnknownTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown tool `{}` (known: {})", self.0, NAMES.join(", "))
    }
}

impl std::error::Error for UnknownTool {}

impl FromStr for ToolName {
    type Err = UnknownTool;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ToolName::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| UnknownTool(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_only_file_writers_are_write_tools() {
        for t in ToolName::ALL {
            assert_eq!(t.as_str().parse::<ToolName>(), Ok(t));
            assert_eq!(t.to_string(), t.as_str());
        }
        let writers: Vec<&str> = ToolName::ALL
            .into_iter()
            .filter(|t| t.is_write())
            .map(ToolName::as_str)
            .collect();
        assert_eq!(writers, ["write_file", "edit_file"]);
        assert!(ToolName::is_write_name("edit_file"));
        assert!(!ToolName::is_write_name("bash"));
        let err = "Bash".parse::<ToolName>().unwrap_err();
        assert!(
            err.to_string()
                .starts_with("unknown tool `Bash` (known: bash, read_file")
        );
        assert_eq!(NAMES.len(), ToolName::ALL.len());
    }
}
