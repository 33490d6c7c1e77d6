//! Identifier newtypes shared across modules, and the reviewer verdict.
//!
//! Invariant: a `StageId` is a valid single git ref component made of
//! `[a-z0-9_-]` plus, for unrolled rework rounds only, a `.rN` suffix
//! (e.g. `code.r2`); user-written ids never contain a dot.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The id of one run: sortable by creation time, e.g. `20261130-160512-a3f9`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub String);

/// The id of one stage of a pipeline, e.g. `code`, `review`, `code.r2`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StageId(pub String);

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for StageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StageId {
    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl RunId {
    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A reviewer's verdict, given through the `finish` tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The change is good to go.
    Approve,
    /// The change needs another coder round; the summary carries the findings.
    RequestChanges,
}

impl Verdict {
    /// The wire name, as the model writes it (`approve`, `request_changes`).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Approve => "approve",
            Verdict::RequestChanges => "request_changes",
        }
    }

    /// Parses the wire name; `None` for anything else.
    pub fn parse(s: &str) -> Option<Verdict> {
        match s.trim() {
            "approve" => Some(Verdict::Approve),
            "request_changes" => Some(Verdict::RequestChanges),
            _ => None,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
