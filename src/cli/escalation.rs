//! Resolving each stage's `escalate_to:` (the stage's, else its role's)
//! into the session, once per base stage, before anything is created: the
//! value must name an `orch.toml` profile, and one that does not is a load
//! error naming the file that wrote it and the name (exit 2).

use super::args::ModelArgs;
use super::error::CliError;
use crate::pipeline::Pipeline;
use crate::role::Role;
use crate::runner::Session;
use crate::runner::models::Escalation;
use std::collections::HashMap;
use std::path::Path;

/// Puts each stage's escalation profile into `session.escalations`. Under
/// a replay the replay answers the escalated attempt too (its requests are
/// in the recording), so the profile is not resolved.
pub(super) fn route_escalations(
    session: &mut Session,
    pipeline: &Pipeline,
    roles: &HashMap<String, Role>,
    flags: &ModelArgs,
    repo: &Path,
) -> Result<(), CliError> {
    for stage in &pipeline.stages {
        let base = stage.base_id.as_str();
        if session.escalations.contains_key(base) {
            continue;
        }
        let role = roles.get(&stage.role);
        let (profile, origin) = match (
            &stage.escalate_to,
            role.and_then(|r| r.escalate_to.as_ref()),
        ) {
            (Some(p), _) => (p, format!("stage `{base}` of {}", pipeline.origin)),
            (None, Some(p)) => (
                p,
                format!(
                    "role `{}` of {}",
                    stage.role,
                    role.map_or("?", |r| r.origin.as_str())
                ),
            ),
            (None, None) => continue,
        };
        let escalation = if session.replay_file.is_some() {
            Escalation {
                profile: profile.clone(),
                model: std::sync::Arc::clone(&session.model),
                base_url: None,
                origin,
            }
        } else {
            let Some(chosen) = super::model::choose_profile(profile, flags, Some(repo))? else {
                return Err(CliError::Invalid(format!(
                    "failed to load `escalate_to: {profile}` of {origin}: no orch.toml profile is named `{profile}` (escalate_to names a profile: its server, key and model)"
                )));
            };
            for secret in chosen.secrets {
                if !session.secrets.contains(&secret) {
                    session.secrets.push(secret);
                }
            }
            Escalation {
                profile: profile.clone(),
                model: chosen.model,
                base_url: chosen.base_url,
                origin,
            }
        };
        session.escalations.insert(base.to_owned(), escalation);
    }
    Ok(())
}
