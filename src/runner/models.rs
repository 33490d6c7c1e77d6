//! Which model a stage asks: `--model` > the stage's `model:` > its role's
//! `model:` > the run's profile. The command line resolves each stage's
//! `model:` once per process (into [`StageModel`]s on the [`Session`]); the
//! stage, `--dry-run` and the record read the choice from [`model_for`].

use super::session::Session;
pub(crate) use super::session::StageModel;
use crate::llm::ChatModel;
use crate::pipeline::Stage;
use crate::role::Role;
use std::sync::Arc;

/// A stage's model and where it comes from.
pub(crate) struct Chosen {
    /// The backend to ask.
    pub model: Arc<dyn ChatModel>,
    /// Its server, when known.
    pub base_url: Option<String>,
    /// `stage model: …`, `role model: …` or `run model`.
    pub source: String,
}

/// The model `stage` of `role` asks, by the precedence above (`--model`
/// already left the stage's entry out when given).
pub(crate) fn model_for(session: &Session, stage: &Stage, role: &Role) -> Chosen {
    if let Some(m) = session.stage_models.get(stage.base_id.as_str()) {
        return Chosen {
            model: Arc::clone(&m.model),
            base_url: m.base_url.clone(),
            source: m.source.clone(),
        };
    }
    // A role may name its own model (same server and key).
    if let Some((name, model)) = role
        .model
        .as_deref()
        .and_then(|m| session.model.with_model(m).map(|b| (m, b)))
    {
        return Chosen {
            model,
            base_url: session.base_url.clone(),
            source: format!("role model: `{name}` of role `{}`", role.name),
        };
    }
    Chosen {
        model: Arc::clone(&session.model),
        base_url: session.base_url.clone(),
        source: "run model".to_owned(),
    }
}

/// The profile a stage escalates to (`escalate_to:` of the stage, else of
/// its role), resolved once per process like a stage's `model:`.
#[derive(Clone)]
pub(crate) struct Escalation {
    /// The profile's name, as written.
    pub profile: String,
    /// Its backend.
    pub model: Arc<dyn ChatModel>,
    /// Its server (never a key).
    pub base_url: Option<String>,
    /// Where the key is written: `stage \`code\` of <file>` or `role …`.
    pub origin: String,
}
