//! Moving the objects a lane's git wrote to its own store
//! ([`super::LaneGit::quarantine`]) into the user's object store, from orch
//! (outside the sandbox) after each call — git's own receive-pack
//! quarantine, done by hand ([`crate::git::shadow::migrate`]).

use super::policy::LaneGit;

pub use crate::git::shadow::MigrateError;

/// Moves every object in `git`'s quarantine into `<common>/objects` and
/// returns how many files were moved. A missing quarantine moves nothing.
pub fn migrate_objects(git: &LaneGit) -> Result<usize, MigrateError> {
    crate::git::shadow::migrate(&git.quarantine(), &git.common_dir.join("objects"))
}
