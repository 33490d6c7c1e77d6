//! Model selection shared by `run` and `agent`: the OpenAI-compatible client
//! or the replay model, from flags and environment.

use super::CliError;
use crate::llm::ChatModel;
use crate::llm::openai::{ModelSettings, OpenAiClient};
use crate::llm::replay::ReplayModel;
use crate::runner::Session;
use std::path::PathBuf;
use std::sync::Arc;

/// Model flags shared by the commands that run agents.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// OpenAI-compatible base URL, e.g. https://api.openai.com/v1 [env: ORCH_BASE_URL]
    #[arg(long)]
    pub base_url: Option<String>,
    /// Model name; `replay:FILE` selects the offline replay model [env: ORCH_MODEL]
    #[arg(long)]
    pub model: Option<String>,
    /// Replay recorded responses from FILE instead of calling a model (offline)
    #[arg(long, value_name = "FILE", conflicts_with_all = ["base_url"])]
    pub replay: Option<PathBuf>,
}

/// The chosen backend, the base URL for the record, and secrets to redact.
pub struct Chosen {
    /// The backend.
    pub model: Arc<dyn ChatModel>,
    /// The base URL (not for replays).
    pub base_url: Option<String>,
    /// API keys to redact from records.
    pub secrets: Vec<String>,
    /// The replay file, when replaying.
    pub replay_file: Option<String>,
}

impl Chosen {
    /// The runner's session settings for this model.
    pub fn session(self, assume_yes: bool, interactive: bool, max_parallel: usize) -> Session {
        Session {
            model: self.model,
            base_url: self.base_url,
            replay_file: self.replay_file,
            secrets: self.secrets,
            assume_yes,
            interactive,
            max_parallel,
        }
    }
}

/// Whether any model flag was given (so `resume` overrides the recorded model).
pub fn any_given(args: &ModelArgs) -> bool {
    args.base_url.is_some() || args.model.is_some() || args.replay.is_some()
}

/// Resolves flags and environment into a model backend.
pub fn choose(args: &ModelArgs) -> Result<Chosen, CliError> {
    let replay = args.replay.clone().or_else(|| {
        args.model
            .as_deref()
            .and_then(|m| m.strip_prefix("replay:"))
            .map(PathBuf::from)
    });
    if let Some(file) = replay {
        let model = ReplayModel::from_file(&file)?;
        return Ok(Chosen {
            model: Arc::new(model),
            base_url: None,
            secrets: secrets(),
            replay_file: Some(file.display().to_string()),
        });
    }
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let settings = ModelSettings::resolve(args.base_url.clone(), args.model.clone(), &env)?;
    let base_url = Some(settings.base_url.clone());
    let mut secrets = secrets();
    if let Some(k) = &settings.api_key {
        secrets.push(k.clone());
    }
    Ok(Chosen {
        model: Arc::new(OpenAiClient::new(settings)?),
        base_url,
        secrets,
        replay_file: None,
    })
}

/// Values of secret-looking environment variables, to redact from records.
pub(super) fn secrets() -> Vec<String> {
    std::env::vars()
        .filter(|(k, v)| {
            let k = k.to_ascii_uppercase();
            v.len() >= 8
                && (k.ends_with("_KEY")
                    || k.ends_with("_TOKEN")
                    || k.ends_with("_SECRET")
                    || k.contains("PASSWORD"))
        })
        .map(|(_, v)| v)
        .collect()
}
