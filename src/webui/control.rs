//! The thin adapter between the UI's ask and guidance buttons and the run's
//! control channel (`crate::runlog::control`, the code behind `orch answer`
//! and `orch guide`). The pages and actions call only these functions.

use super::UiError;
use std::path::Path;

/// One ask a live run waits on, as the pages show it.
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    /// Its id (what the answer names).
    pub id: String,
    /// The stage that asked.
    pub stage: String,
    /// The tool (`bash`, an MCP tool).
    pub tool: String,
    /// The command or the arguments.
    pub command: String,
    /// Why it is asked about.
    pub why: String,
}

/// The asks the run in `root` waits on.
pub(crate) fn pending_asks(_root: &Path) -> Vec<Ask> {
    Vec::new()
}

/// Answers ask `id` of the run in `root`.
pub(crate) fn answer(_root: &Path, _id: &str, _allow: bool, _by: &str) -> Result<(), UiError> {
    Err(UiError::Refused(
        "failed to answer the ask: this build has no control channel".into(),
    ))
}

/// Sends guidance to `stage` of the live run in `root`.
pub(crate) fn guide(_root: &Path, _stage: &str, _text: &str, _by: &str) -> Result<(), UiError> {
    Err(UiError::Refused(
        "failed to send guidance: this build has no control channel".into(),
    ))
}
