//! Settling a stage's changes: git stages the lane, and what must not be
//! committed (a read-only role's changes, a known secret) is dropped.

use super::read_only::discard_changes_of_read_only_role;
use super::state::StageRun;
use crate::git::{self, GitError};
use crate::runlog::{ActionEvent, event};
use crate::runner::error::{RunError, blocking};
use crate::runner::lanes::Lane;
use std::path::Path;

/// What settling a stage's changes left to commit.
pub(super) struct Settled {
    /// The tree to commit (the start commit's when nothing may be kept).
    pub(super) tree: String,
    /// Why the changes were refused: a changed file holds a known secret.
    pub(super) leaked: Option<String>,
    /// Whether the lane's watcher said what changed (else: walked).
    pub(super) from_watch: bool,
}

impl StageRun<'_> {
    /// git stages the lane (only the paths its watcher marked, when it can
    /// vouch for them); what changed is read from the tree git wrote.
    pub(super) async fn settle_changes(&mut self) -> Result<Settled, RunError> {
        let (ctx, role, lane, start) = (self.ctx, self.role, self.lane, self.start);
        let staged = stage_lane(lane, &ctx.common, start).await?;
        let from_watch = staged.how == "paths";
        let mut tree = staged.tree;
        let mut changed = staged.changed;
        self.log.append(&ActionEvent::Staged(event::Staged {
            how: staged.how.to_owned(),
            changed: changed.len(),
        }))?;
        if role.read_only && !changed.is_empty() {
            discard_changes_of_read_only_role(&lane.path, start, &changed, &mut self.log).await?;
            tree = staged.start_tree.clone();
            changed.clear();
        }
        // A known secret value in a changed file is never committed: the
        // stage fails, its changes are discarded.
        let leaked = self.refuse_secrets(&changed).await?;
        if leaked.is_some() {
            tree = staged.start_tree.clone();
        }
        // The staged objects reach the user's store only if the stage's tree
        // is committed: a refused or discarded one's never do.
        if let Some(held) = staged.held {
            let keep = tree != staged.start_tree;
            blocking(move || {
                if keep {
                    held.keep()?;
                } else {
                    held.discard();
                }
                Ok(())
            })
            .await?;
        }
        Ok(Settled {
            tree,
            leaked,
            from_watch,
        })
    }
}

/// A lane staged by git at a stage's end.
struct StagedLane {
    /// The tree git wrote for the lane.
    tree: String,
    /// The start commit's tree.
    start_tree: String,
    /// Paths whose entries differ between the two, sorted.
    changed: Vec<String>,
    /// How it was staged: `paths` (the watcher's marks) or `whole`.
    how: &'static str,
    /// The objects git wrote, held out of the user's store until the
    /// commit is decided.
    held: Option<git::Quarantine>,
}

/// Stages the lane with git ([`git::stage_tree`], given the watcher's
/// marks when it can vouch for them) and reads what changed since `start`.
async fn stage_lane(
    lane: &Lane,
    common: &Path,
    start: &git::CommitId,
) -> Result<StagedLane, RunError> {
    // A pooled lane whose last user's files could not be removed holds more
    // than the stage did: nothing of it is committed.
    if let Some(why) = lane.watch.failure().await {
        return Err(RunError::Git(GitError::Cli {
            command: format!("ready the lane {}", lane.path.display()),
            detail: why,
        }));
    }
    let watch = lane.watch.get().await;
    let (path, common, start) = (lane.path.clone(), common.to_path_buf(), start.clone());
    blocking(move || {
        let marks = watch.and_then(|w| w.changes());
        let (tree, how, held) = git::stage_tree_held(&path, &start, marks.as_ref())?;
        let repo = git::Repo::at(common);
        let changed = repo.changed_between(&start, &tree, held.as_ref())?;
        let start_tree = repo.tree_of(&start)?;
        Ok(StagedLane {
            tree,
            start_tree,
            changed,
            held,
            how: match how {
                git::Staged::Paths(_) => "paths",
                git::Staged::Whole => "whole",
            },
        })
    })
    .await
}
