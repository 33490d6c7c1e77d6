//! A known secret value in a changed file is never committed.

use super::state::StageRun;
use crate::runner::error::RunError;

impl StageRun<'_> {
    /// Why the stage's changes must not be committed, when a changed file
    /// holds a known secret value (the stage then fails, its changes are
    /// discarded).
    pub(super) async fn refuse_secrets(
        &self,
        changed: &[String],
    ) -> Result<Option<String>, RunError> {
        let (ctx, lane) = (self.ctx, self.lane);
        crate::sandbox::refuse_secrets_in(
            &lane.path,
            self.start,
            &ctx.session.secrets,
            Some(changed.to_vec()),
        )
        .await
        .map_err(|source| RunError::Tools {
            stage: self.id.clone(),
            path: lane.path.clone(),
            source,
        })
    }
}
