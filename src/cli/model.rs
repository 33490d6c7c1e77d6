//! Choosing the model backend: the OpenAI-compatible client or the replay
//! model, from flags, environment and `orch.toml` (see [`crate::config`]),
//! plus the secrets to redact from records and the sampling settings to
//! record. Used by the session builder and `orch config`.

use super::args::{ModelArgs, SamplingArgs};
use super::error::CliError;
use crate::config::{self, ConfigError, ResolvedConfig};
use crate::llm::ChatModel;
use crate::llm::Sampling;
use crate::llm::openai::{ModelSettings, OpenAiClient};
use crate::llm::replay::ReplayModel;
use std::path::Path;
use std::sync::Arc;

/// Resolves flags, the process environment and the config files of `repo`
/// and the user config dir.
pub(super) fn resolve_config(
    args: &ModelArgs,
    repo: Option<&Path>,
) -> Result<ResolvedConfig, CliError> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let user_dir = crate::dirs::user_config_dir();
    config::resolve(&args.overrides(), repo, user_dir.as_deref(), &env).map_err(config_error)
}

/// A config problem is invalid input (exit 2).
fn config_error(e: ConfigError) -> CliError {
    CliError::Invalid(format!("failed to {e}"))
}

/// The chosen backend, the base URL for the record, and secrets to redact.
pub(super) struct Chosen {
    /// The backend.
    pub model: Arc<dyn ChatModel>,
    /// The base URL (not for replays).
    pub base_url: Option<String>,
    /// API keys to redact from records.
    pub secrets: Vec<String>,
    /// The replay file, when replaying.
    pub replay_file: Option<String>,
    /// The sampling settings every request carries (not for replays).
    pub sampling: Option<Sampling>,
    /// The `orch.toml` profile the model was resolved through.
    pub profile: Option<String>,
    /// The wire format (not for replays).
    pub provider: Option<crate::llm::Provider>,
}

/// Resolves flags, environment and the `orch.toml` files of `repo` (when
/// given) and the user config dir into a model backend.
pub(super) fn choose_for_repo(args: &ModelArgs, repo: Option<&Path>) -> Result<Chosen, CliError> {
    choose_with_record(args, repo, None)
}

/// [`choose_for_repo`] for a resumed run: each sampling setting that no flag
/// of `args` gives is taken from `recorded` (the run's record) instead of
/// the profile, so the resumed stages send what the first ones sent.
pub(super) fn choose_with_record(
    args: &ModelArgs,
    repo: Option<&Path>,
    recorded: Option<&Sampling>,
) -> Result<Chosen, CliError> {
    if let Some(file) = args.replay_file() {
        let model = ReplayModel::from_file(&file)?;
        return Ok(Chosen {
            model: Arc::new(model),
            base_url: None,
            secrets: secrets(),
            replay_file: Some(file.display().to_string()),
            sampling: None,
            profile: None,
            provider: None,
        });
    }
    let resolved = resolve_config(args, repo)?;
    chosen_from(&resolved, &args.sampling, recorded)
}

/// The backend of `resolved`, with `recorded` sampling for the fields no
/// flag gives.
fn chosen_from(
    resolved: &ResolvedConfig,
    flags: &SamplingArgs,
    recorded: Option<&Sampling>,
) -> Result<Chosen, CliError> {
    let mut settings = with_knobs(resolved.model_settings()?);
    if let Some(recorded) = recorded {
        apply_recorded(&mut settings, flags, recorded);
    }
    let sampling = Some(settings.sampling);
    let settings_provider = settings.provider;
    let base_url = Some(settings.base_url.clone());
    let mut secrets = secrets();
    if let Some(k) = &resolved.api_key {
        let name = match &k.source {
            config::Source::Env(name) => name.as_str(),
            _ => "the API key",
        };
        if crate::secrets::redactable(name, &k.value) {
            secrets.push(k.value.clone());
        }
    }
    Ok(Chosen {
        model: Arc::new(OpenAiClient::new(settings)?),
        base_url,
        secrets,
        replay_file: None,
        sampling,
        profile: resolved.profile.as_ref().map(|p| p.value.clone()),
        provider: Some(settings_provider),
    })
}

/// The backend of the `orch.toml` profile `name` (a stage's `model:`), or
/// `None` when no file defines such a profile. The profile is the whole
/// choice: `ORCH_BASE_URL`, `ORCH_MODEL` and `ORCH_PROFILE` do not reach
/// it, and a profile that names its key variable (`api_key_env`) gets that
/// key, not `ORCH_API_KEY` (the run's server's key must not go to another
/// server). Sampling flags and `--no-stream` apply as to every request.
pub(super) fn choose_profile(
    name: &str,
    flags: &ModelArgs,
    repo: Option<&Path>,
) -> Result<Option<Chosen>, CliError> {
    let overrides = crate::config::Overrides {
        base_url: None,
        model: None,
        profile: Some(name.to_owned()),
        ..flags.overrides()
    };
    let user_dir = crate::dirs::user_config_dir();
    let resolve = |hidden: &[&str]| {
        let env = |k: &str| {
            (!hidden.contains(&k))
                .then(|| std::env::var(k).ok())
                .flatten()
                .filter(|v| !v.is_empty())
        };
        config::resolve(&overrides, repo, user_dir.as_deref(), &env)
    };
    const RUN_CHOICE: [&str; 3] = ["ORCH_BASE_URL", "ORCH_MODEL", "ORCH_PROFILE"];
    let resolved = match resolve(&RUN_CHOICE) {
        Err(ConfigError::UnknownProfile { .. }) => return Ok(None),
        other => other.map_err(config_error)?,
    };
    let resolved = if resolved.api_key_env.is_some() {
        let mut hidden = RUN_CHOICE.to_vec();
        hidden.push("ORCH_API_KEY");
        resolve(&hidden).map_err(config_error)?
    } else {
        resolved
    };
    chosen_from(&resolved, &flags.sampling, None).map(Some)
}

/// The recorded value of every sampling setting no flag in `flags` gives.
/// The fields are taken apart one by one so a new one cannot be forgotten.
fn apply_recorded(settings: &mut ModelSettings, flags: &SamplingArgs, recorded: &Sampling) {
    let SamplingArgs {
        temperature,
        seed,
        max_output_tokens,
        tool_choice,
    } = *flags;
    let Sampling {
        temperature: rec_temperature,
        seed: rec_seed,
        max_tokens: rec_max_tokens,
        tool_choice: rec_tool_choice,
    } = *recorded;
    let s = &mut settings.sampling;
    if temperature.is_none() {
        s.temperature = rec_temperature;
    }
    if seed.is_none() {
        s.seed = rec_seed;
    }
    if max_output_tokens.is_none() {
        s.max_tokens = rec_max_tokens;
    }
    if tool_choice.is_none() {
        s.tool_choice = rec_tool_choice;
    }
}

/// Applies the hidden environment knobs to resolved settings.
fn with_knobs(mut settings: ModelSettings) -> ModelSettings {
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
pub(super) const RETRY_BASE_ENV: &str = "ORCH_RETRY_BASE_MS";

/// Values of secret-looking environment variables, to redact from records.
fn secrets() -> Vec<String> {
    secret_values(std::env::vars_os().map(|(k, v)| {
        (
            k.to_string_lossy().into_owned(),
            v.to_string_lossy().into_owned(),
        )
    }))
}

/// The values of `vars` whose names look secret ([`crate::exec::is_secret_name`]).
fn secret_values(vars: impl Iterator<Item = (String, String)>) -> Vec<String> {
    vars.filter(|(k, v)| {
        v.len() >= crate::secrets::MIN_SECRET_LEN && crate::exec::is_secret_name(k)
    })
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
