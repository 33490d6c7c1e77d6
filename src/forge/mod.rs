//! Forges (GitHub, GitLab): reading an issue through the REST API
//! (`--issue github:OWNER/REPO#N`), and publishing a run as a pull or merge
//! request (`orch publish`). See `docs/forge.md`.
//!
//! Invariant: the forge token is orch's alone. It is read from orch's own
//! environment (`GH_TOKEN`/`GITHUB_TOKEN`, `GITLAB_TOKEN`, names that the
//! sandbox treats as secrets: wiped from `/proc/<orch>/environ`, never passed
//! to a tool process, redacted from every record) or from `gh auth token`,
//! whose value `main` registers with the secrets registry before anything
//! runs ([`startup_token`]). It only ever goes into an HTTP header of a
//! request to the configured API.

mod api;
mod feedback;
mod issue;
pub mod merge;
mod pull;
mod push;
mod settings;
mod token;
mod types;

pub(crate) use api::ForgeApi;
pub(crate) use feedback::{Feedback, Finding, MARKER, PrRef, fetch_feedback, post_comment};
pub(crate) use issue::{FrozenIssue, fetch_issue};
pub(crate) use pull::{PullRequest, upsert_pull};
pub(crate) use push::{project_of_url, push_refs, remote_url, without_userinfo};
pub(crate) use settings::ForgeSettings;
pub use token::startup_token;
pub use types::{Forge, ForgeError, IssueRef, Project};

use std::path::Path;

/// Reads the forge issue `spec` (`github:OWNER/REPO#N`, …) through the API
/// configured for the repository at `repo`.
pub(crate) async fn read_issue(spec: &str, repo: &Path) -> Result<FrozenIssue, ForgeError> {
    let issue = IssueRef::parse(spec)?;
    let settings = ForgeSettings::load(Some(repo))?;
    let api = ForgeApi::new(issue.project.forge, &settings)?;
    let frozen = fetch_issue(&api, &issue).await?;
    crate::ui::status_line(&format!(
        "orch: read issue {issue} from {} ({} comment{})",
        api.base(),
        frozen.comments.len(),
        if frozen.comments.len() == 1 { "" } else { "s" }
    ));
    Ok(frozen)
}
