//! Model selection shared by `run`, `agent` and `config`: the
//! OpenAI-compatible client or the replay model, from flags, environment and
//! `orch.toml` (see [`crate::config`]).

use super::CliError;
use crate::config::{self, ConfigError, Overrides, ResolvedConfig};
use crate::llm::ChatModel;
use crate::llm::openai::OpenAiClient;
use crate::llm::replay::ReplayModel;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Model flags shared by the commands that run agents.
#[derive(Debug, Clone, Default, clap::Args)]
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
    /// Provider profile from orch.toml (.orch/orch.toml, then the user config dir) [env: ORCH_PROFILE]
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Send plain requests instead of streaming (for servers that cannot stream)
    #[arg(long)]
    pub no_stream: bool,
}

impl ModelArgs {
    /// The flags as config overrides.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            base_url: self.base_url.clone(),
            model: self.model.clone(),
            profile: self.profile.clone(),
            no_stream: self.no_stream,
        }
    }

    /// The replay file, from `--replay FILE` or `--model replay:FILE`.
    pub fn replay_file(&self) -> Option<PathBuf> {
        self.replay.clone().or_else(|| {
            self.model
                .as_deref()
                .and_then(|m| m.strip_prefix("replay:"))
                .map(PathBuf::from)
        })
    }
}

/// Resolves flags, the process environment and the config files of `repo`
/// and the user config dir.
pub fn resolve_config(args: &ModelArgs, repo: Option<&Path>) -> Result<ResolvedConfig, CliError> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let user_dir = crate::catalog::user_config_dir();
    config::resolve(&args.overrides(), repo, user_dir.as_deref(), &env).map_err(config_error)
}

/// A config problem is invalid input (exit 2).
pub fn config_error(e: ConfigError) -> CliError {
    CliError::Invalid(format!("failed to {e}"))
}

/// The chosen backend, the base URL for the record, and secrets to redact.
pub struct Chosen {
    /// The backend.
    pub model: Arc<dyn ChatModel>,
    /// The base URL (not for replays).
    pub base_url: Option<String>,
    /// API keys to redact from records.
    pub secrets: Vec<String>,
}

/// Resolves flags and environment into a model backend, without config files
/// from a repository (the user's `orch.toml` still applies).
pub fn choose(args: &ModelArgs) -> Result<Chosen, CliError> {
    choose_for_repo(args, None)
}

/// Resolves flags, environment and the `orch.toml` files of `repo` and the
/// user config dir into a model backend.
pub fn choose_for_repo(args: &ModelArgs, repo: Option<&Path>) -> Result<Chosen, CliError> {
    if let Some(file) = args.replay_file() {
        let model = ReplayModel::from_file(&file)?;
        return Ok(Chosen {
            model: Arc::new(model),
            base_url: None,
            secrets: secrets(),
        });
    }
    let resolved = resolve_config(args, repo)?;
    let settings = resolved.model_settings()?;
    let base_url = Some(settings.base_url.clone());
    let mut secrets = secrets();
    if let Some(k) = &settings.api_key {
        secrets.push(k.clone());
    }
    Ok(Chosen {
        model: Arc::new(OpenAiClient::new(settings)?),
        base_url,
        secrets,
    })
}

/// Values of secret-looking environment variables, to redact from records.
fn secrets() -> Vec<String> {
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
