//! The thin adapter between the UI's ask and guidance buttons and the run's
//! control channel ([`crate::runlog::control`], the code behind `orch
//! answer` and `orch guide`). The pages and actions call only these.

use super::UiError;
use crate::runlog::control::{self, ControlError};
use std::path::Path;

pub(crate) use control::PendingAsk as Ask;

/// The asks the live run in `root` waits on, oldest first.
pub(crate) fn pending_asks(root: &Path) -> Vec<Ask> {
    control::pending_asks(root)
}

/// Answers ask `id` of the run in `root`, as `orch answer` does.
pub(crate) fn answer(root: &Path, id: &str, allow: bool, by: &str) -> Result<(), UiError> {
    control::answer_ask(root, id, allow, by)
        .map(drop)
        .map_err(refused)
}

/// Sends guidance to `stage` of the live run in `root`, as `orch guide` does.
pub(crate) fn guide(root: &Path, stage: &str, text: &str, by: &str) -> Result<(), UiError> {
    control::send_guidance(root, stage, text, by)
        .map(drop)
        .map_err(refused)
}

fn refused(e: ControlError) -> UiError {
    match e {
        ControlError::UnknownAsk { .. } | ControlError::UnknownStage { .. } => {
            UiError::NotFound(format!("failed to {e}"))
        }
        ControlError::Io { .. } | ControlError::Record(_) => {
            UiError::Internal(format!("failed to {e}"))
        }
        other => UiError::Refused(format!("failed to {other}")),
    }
}
