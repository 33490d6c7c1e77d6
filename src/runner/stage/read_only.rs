//! A read-only role's changes, discarded.

use crate::git;
use crate::runlog::{ActionEvent, ActionLog, event};
use crate::runner::error::{RunError, blocking};
use std::path::Path;

/// A read-only role must not change the tree; if its shell commands did,
/// the changes (`changed`, non-empty) are discarded and the log says so.
pub(super) async fn discard_changes_of_read_only_role(
    worktree: &Path,
    head: &git::CommitId,
    changed: &[String],
    log: &mut ActionLog,
) -> Result<(), RunError> {
    let (wt, h) = (worktree.to_path_buf(), head.clone());
    blocking(move || git::reset_worktree(&wt, &h)).await?;
    log.append(&ActionEvent::ReadOnlyViolation(event::ReadOnlyViolation {
        discarded: changed.to_vec(),
        reason: "a read-only role changed the worktree; its changes were discarded".to_owned(),
    }))?;
    Ok(())
}
