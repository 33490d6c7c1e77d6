//! The stage's Agent Skills ([`crate::skills`]): found at the run's base
//! commit and in the user config dir, selected by the role's `skills:`,
//! logged as a `skills` event; the catalogue goes into the system prompt
//! and the set into the tool context (`load_skill`).

use crate::role::Role;
use crate::runlog::{ActionEvent, ActionLog, event};
use crate::runner::ctx::RunCtx;
use crate::runner::error::{RunError, blocking};
use crate::skills::{Catalogue, SKILLS_BUDGET, SkillSet, for_role_file};
use std::sync::Arc;

/// What a stage gets: the skills (`None` when it has none) and the
/// system-prompt section (empty then).
pub(super) struct StageSkills {
    pub(super) set: Option<Arc<SkillSet>>,
    pub(super) section: String,
}

/// The skills found at `commit` in the repository at `common` and in the
/// user config dir.
pub(crate) async fn discover(
    common: &std::path::Path,
    commit: &crate::git::CommitId,
) -> Result<Catalogue, RunError> {
    let (common, commit) = (common.to_path_buf(), commit.clone());
    let user = crate::dirs::user_config_dir();
    blocking(move || crate::skills::discover(&common, &commit, user.as_deref())).await
}

/// Checks every role's `skills:` against the skills found (an unknown
/// name fails the run before anything is created; see
/// [`for_role_file`] for Claude Code agent files) and says, once per run,
/// which skill files were skipped and what orch ignores in the others.
pub(crate) async fn check_roles<'r>(
    common: &std::path::Path,
    commit: &crate::git::CommitId,
    roles: impl Iterator<Item = &'r Role>,
) -> Result<(), RunError> {
    let catalogue = discover(common, commit).await?;
    let mut missing = Vec::new();
    for role in roles {
        let (_, note) = for_role_file(&catalogue, &role.origin, &role.name, role.skills.as_deref())
            .map_err(RunError::Config)?;
        missing.extend(note);
    }
    for line in catalogue.problems.iter().chain(&catalogue.notes()) {
        crate::ui::status_line(&format!("orch: skill {line}"));
    }
    for line in missing {
        crate::ui::status_line(&format!("orch: {line}"));
    }
    Ok(())
}

/// The skills of a stage of `role`, logged.
pub(super) async fn stage_skills(
    ctx: &RunCtx,
    role: &Role,
    log: &mut ActionLog,
) -> Result<StageSkills, RunError> {
    let catalogue = discover(&ctx.common, &ctx.base_commit).await?;
    let (set, missing) =
        for_role_file(&catalogue, &role.origin, &role.name, role.skills.as_deref())
            .map_err(RunError::Config)?;
    let section = set.section();
    if !catalogue.skills.is_empty() || !catalogue.problems.is_empty() || role.skills.is_some() {
        log.append(&ActionEvent::Skills(event::Skills {
            commit: ctx.base_commit.to_string(),
            selected: role.skills.clone(),
            offered: set
                .skills
                .iter()
                .map(|s| event::OfferedSkill {
                    name: s.name().to_owned(),
                    path: s.path.clone(),
                    blob: s.blob.clone(),
                    source: s.source().to_owned(),
                })
                .collect(),
            cut: section.cut.clone(),
            prompt_bytes: section.text.len(),
            limit_bytes: SKILLS_BUDGET,
            skipped: catalogue.problems.clone(),
            notes: catalogue.notes().into_iter().chain(missing).collect(),
        }))?;
    }
    Ok(StageSkills {
        set: (!set.is_empty()).then(|| Arc::new(set)),
        section: section.text,
    })
}
