//! The one session builder: how every command that runs agents turns its
//! flags into the runner's [`Session`] (model backend, limits, approvals,
//! parallelism), and finds the roles a pipeline names.
//!
//! A new run resolves its model from flags, environment and `orch.toml`. A
//! resumed run does the same, with the model it recorded (base URL and model
//! name) standing in for the flags when none names a model, so the profile's
//! `stream`, timeouts, prices and `context_window` apply after a resume too.
//! The API key always comes from this process's environment; the record never
//! holds one.

use super::CliError;
use super::args::{LimitArgs, ModelArgs};
use super::model::{Chosen, choose_for_repo};
use crate::agent::RunLimits;
use crate::catalog::Catalog;
use crate::pipeline::Pipeline;
use crate::role::Role;
use crate::runlog::RunState;
use crate::runner::{DEFAULT_MAX_PARALLEL, Session};
use std::collections::HashMap;
use std::path::Path;

/// Builds a [`Session`]: choose the model first (its context window is the
/// default for `--context-window`), then set approvals and parallelism.
pub(super) struct SessionBuilder {
    chosen: Chosen,
    assume_yes: bool,
    interactive: bool,
    max_parallel: usize,
}

impl SessionBuilder {
    /// A session for a new run: the model from `model`'s flags, the
    /// environment and the `orch.toml` files of `repo` (when given) and the
    /// user config dir.
    pub(super) fn new(model: &ModelArgs, repo: Option<&Path>) -> Result<SessionBuilder, CliError> {
        Ok(SessionBuilder::with(choose_for_repo(model, repo)?))
    }

    /// A session to go on with a recorded run. Model flags, when any names a
    /// model, win; otherwise the recorded replay file is replayed again, or
    /// the recorded base URL and model are resolved through `orch.toml` like
    /// flags (with this command's `--profile` and `--no-stream`).
    pub(super) fn resumed(
        state: &RunState,
        model: &ModelArgs,
        repo: &Path,
    ) -> Result<SessionBuilder, CliError> {
        if model.names_a_model() {
            return SessionBuilder::new(model, Some(repo));
        }
        let recorded = match &state.replay_file {
            Some(file) => ModelArgs {
                replay: Some(file.into()),
                ..ModelArgs::default()
            },
            None => ModelArgs {
                base_url: state.base_url.clone(),
                model: Some(state.model.clone()),
                replay: None,
                profile: model.profile.clone(),
                no_stream: model.no_stream,
            },
        };
        SessionBuilder::new(&recorded, Some(repo))
    }

    fn with(chosen: Chosen) -> SessionBuilder {
        SessionBuilder {
            chosen,
            assume_yes: false,
            interactive: crate::policy::detect_interactive(),
            max_parallel: DEFAULT_MAX_PARALLEL,
        }
    }

    /// Allow what a role's `ask` rules would ask about (`--yes`).
    pub(super) fn assume_yes(mut self, yes: bool) -> SessionBuilder {
        self.assume_yes = yes;
        self
    }

    /// Whether someone can be asked (default: stdin and stderr are terminals).
    pub(super) fn interactive(mut self, interactive: bool) -> SessionBuilder {
        self.interactive = interactive;
        self
    }

    /// How many stages may run at once (default [`DEFAULT_MAX_PARALLEL`]).
    pub(super) fn max_parallel(mut self, n: usize) -> SessionBuilder {
        self.max_parallel = n;
        self
    }

    /// The session, with limits from the flags; the model's context window
    /// applies when `--context-window` is not given.
    pub(super) fn build(self, limits: &LimitArgs) -> Result<Session, CliError> {
        let limits = limits.to_limits(self.chosen.model.context_window())?;
        Ok(self.build_with(limits))
    }

    /// The session, with limits as given.
    pub(super) fn build_with(self, limits: RunLimits) -> Session {
        let Chosen {
            model,
            base_url,
            secrets,
            replay_file,
        } = self.chosen;
        Session {
            limits,
            model,
            base_url,
            replay_file,
            secrets,
            assume_yes: self.assume_yes,
            interactive: self.interactive,
            max_parallel: self.max_parallel,
        }
    }
}

/// The roles a pipeline's stages name.
pub(super) fn roles_for(
    catalog: &Catalog,
    pipeline: &Pipeline,
) -> Result<HashMap<String, Role>, CliError> {
    let mut roles = HashMap::new();
    for s in &pipeline.stages {
        if !roles.contains_key(&s.role) {
            roles.insert(s.role.clone(), catalog.role(&s.role)?.clone());
        }
    }
    Ok(roles)
}

/// Decides each role's model once, before the plan is frozen (see
/// [`crate::role::resolve_model`]): `--model` on the command line overrides
/// every role; else `[models] aliases` maps it; else a model the server
/// serves (`served`, from a preflight; `None` when unknown) is kept; else
/// the run's model is used. The reason lands in the role's `model_note`,
/// which the stage logs.
pub(super) fn route_role_models(
    roles: &mut HashMap<String, Role>,
    model: &ModelArgs,
    repo: &Path,
    served: Option<&[String]>,
) -> Result<(), CliError> {
    let aliases = if model.replay_file().is_some() {
        Default::default()
    } else {
        super::model::resolve_config(model, Some(repo))?.model_aliases
    };
    let routing = crate::role::ModelRouting {
        aliases: Some(&aliases),
        served,
        cli_model: model.model.is_some(),
    };
    let mut names: Vec<&String> = roles.keys().collect();
    names.sort();
    for name in names {
        let role = &roles[name];
        for warning in &role.warnings {
            crate::ui::status_line(&format!(
                "warning: {}: role `{name}`: {warning}",
                role.origin
            ));
        }
    }
    for role in roles.values_mut() {
        let choice = crate::role::resolve_model(role, routing);
        if let Some(note) = &choice.note {
            crate::ui::status_line(&format!("orch: {note}"));
        }
        role.model = choice.model;
        role.model_alias = None;
        role.model_note = choice.note;
    }
    Ok(())
}
