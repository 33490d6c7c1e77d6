//! Model selection shared by `run`, `agent` and `config`: the
//! OpenAI-compatible client or the replay model, from flags, environment and
//! `orch.toml` (see [`crate::config`]).

use super::CliError;
use crate::config::{self, ConfigError, Overrides, ResolvedConfig};
use crate::llm::ChatModel;
use crate::llm::openai::{ModelSettings, OpenAiClient};
use crate::llm::replay::ReplayModel;
use crate::runner::Session;
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
    /// The replay file, when replaying.
    pub replay_file: Option<String>,
}

impl Chosen {
    /// The runner's session settings for this model.
    pub fn session(
        self,
        assume_yes: bool,
        interactive: bool,
        max_parallel: usize,
        limits: crate::agent::RunLimits,
    ) -> Session {
        Session {
            limits,
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
            replay_file: Some(file.display().to_string()),
        });
    }
    let resolved = resolve_config(args, repo)?;
    let settings = with_knobs(resolved.model_settings()?);
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

/// Applies the hidden environment knobs to resolved settings.
pub(super) fn with_knobs(mut settings: ModelSettings) -> ModelSettings {
    if let Some(ms) = std::env::var(RETRY_BASE_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        settings.retry_base_delay = std::time::Duration::from_millis(ms);
    }
    settings
}

/// Hidden knob: the first retry delay in milliseconds (default 500). Tests set
/// it low so exhausting the retries against a broken server stays fast.
pub const RETRY_BASE_ENV: &str = "ORCH_RETRY_BASE_MS";

/// Shortest value treated as a secret: shorter ones are not keys, and
/// redacting them would mangle ordinary text.
const MIN_SECRET_LEN: usize = 8;

/// Values of secret-looking environment variables, to redact from records.
pub(super) fn secrets() -> Vec<String> {
    secret_values(std::env::vars_os().map(|(k, v)| {
        (
            k.to_string_lossy().into_owned(),
            v.to_string_lossy().into_owned(),
        )
    }))
}

/// The values of `vars` whose names look secret ([`crate::exec::is_secret_name`]).
fn secret_values(vars: impl Iterator<Item = (String, String)>) -> Vec<String> {
    vars.filter(|(k, v)| v.len() >= MIN_SECRET_LEN && crate::exec::is_secret_name(k))
        .map(|(_, v)| v)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_looking_variables_are_collected() {
        let vars = [
            ("ORCH_API_KEY", "sk-orch-1234"),
            ("OPENAI_API_KEY", "sk-openai-1234"),
            ("GITHUB_TOKEN", "ghp_abcdefgh"),
            ("MY_SERVICE_SECRET", "service-secret"),
            ("AWS_SECRET_ACCESS_KEY", "aws-secret-1"),
            ("DB_PASSWORD", "hunter2hunter2"),
            ("SECRET_SAUCE_VALUE", "saucy-value"),
            ("GITLAB_PAT", "glpat-12345678"),
            ("SHORT_TOKEN", "abc"),
            ("PATH", "/usr/bin:/bin"),
            ("KEYBOARD", "us-international"),
            ("TOKENIZER", "tiktoken-v1"),
        ];
        let found = secret_values(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        assert_eq!(
            found,
            [
                "sk-orch-1234",
                "sk-openai-1234",
                "ghp_abcdefgh",
                "service-secret",
                "aws-secret-1",
                "hunter2hunter2",
                "saucy-value",
                "glpat-12345678"
            ]
        );
    }
}
