//! `orch.toml`: provider profiles and prices, resolved with flags and the
//! environment into [`ModelSettings`], remembering where each value came from.
//!
//! Files (both optional): `<repo>/.orch/orch.toml` and
//! `<user config dir>/orch.toml` ([`crate::dirs::user_config_dir`]).
//!
//! ```toml
//! default_profile = "openai"
//! memory = "propose"   # or "off", "auto-accept" (docs/memory.md)
//!
//! [profiles.openai]
//! provider = "openai-chat"   # or "anthropic", "openai-responses" (docs/model-client.md)
//! base_url = "https://api.openai.com/v1"
//! model = "gpt-4o-mini"
//! api_key_env = "OPENAI_API_KEY"   # the NAME of the env var holding the key
//! context_window = 128000
//! stream = true
//! prices = { prompt = 0.15, completion = 0.6, cache_read = 0.075 }   # USD per 1M tokens
//! temperature = 0.2          # sampling; each sent only when set
//! seed = 7
//! max_tokens = 2048          # cap on one reply; default 4096, 0 sends none
//! tool_choice = "required"   # or "auto" (what is sent when unset)
//! tool_calling = "constrained"   # or "auto" (default), "native", "text"
//! constrained_dialect = "llamacpp"   # or "openai" (default), "vllm", "ollama"
//! constrained_max_tokens = 1024   # cap on a constrained turn's reply (default); 0: max_tokens
//! prompt_cache = "auto"   # or "on", "off" (Anthropic's cache breakpoints)
//!
//! [prices."qwen2.5-coder"]
//! prompt = 0
//! completion = 0
//!
//! [prices."claude-sonnet-4-5"]   # cache_read / cache_write: cached prompt
//! prompt = 3                     # tokens (unset: the prompt rate)
//! completion = 15
//! cache_read = 0.3
//! cache_write = 3.75
//!
//! [models]
//! aliases = { sonnet = "qwen2.5-coder", "claude-sonnet-4-5-20250929" = "qwen2.5-coder" }
//!
//! [lanes]
//! pool = 4   # warm lanes kept for later runs; 0: none (default: --max-parallel)
//! ```
//!
//! `[models] aliases` maps a role's `model:` (a Claude Code agent file's
//! `sonnet` or full Claude id), or a stage's `model:` that names no profile,
//! to a model the server serves. A stage's `model:` that names a profile
//! uses that profile whole (see `cli::model::choose_profile`).
//!
//! Precedence, per setting: flag > environment > repo file > user file >
//! default. The sampling keys (`temperature`, `seed`, `max_tokens`,
//! `tool_choice`) have flags but no environment variables: they belong to a
//! profile or to one command, not to a shell session. The profile is chosen by `--profile`, else `ORCH_PROFILE`, else
//! `default_profile` (repo file, then user file); a profile defined in both
//! files is merged key by key, the repo's keys winning. The API key is read
//! from `ORCH_API_KEY`, else from the variable the profile's `api_key_env`
//! names, else (only when the profile names none) from `OPENAI_API_KEY`;
//! keys are never written in the file. Unknown keys and wrong types are errors
//! naming `file:line:column`.
//!
//! Each plain setting is one entry of the table in `config/table.rs`
//! (flag, variable, file key, check, default), which [`resolve`] walks.
//!
//! The resolver reads nothing implicitly: the caller passes the directories
//! and an environment lookup, so tests need no `set_var`.

use crate::llm::openai::ModelSettings;
use crate::llm::price::{BUILTIN_PRICES_DATE, Price, PriceTable};
use crate::llm::settings::{ConstrainedDialect, Provider, Sampling, ToolCalling, ToolChoice};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

mod table;
mod types;

pub use types::{ConfigError, MAX_TEMPERATURE, Overrides, Setting, Source, mask_secret};
use types::{LoadedFile, ProfileSpec, line_col};

/// The config file's name, in `<repo>/.orch/` and the user config dir.
pub const CONFIG_FILE: &str = "orch.toml";

/// Everything about the model connection, resolved, with sources.
#[derive(Clone)]
pub struct ResolvedConfig {
    /// The config files looked at, and whether each exists.
    pub files: Vec<(PathBuf, bool)>,
    /// The selected profile, if any.
    pub profile: Option<Setting<String>>,
    /// The wire format (default `openai-chat`).
    pub provider: Setting<Provider>,
    /// The API root.
    pub base_url: Option<Setting<String>>,
    /// The model name.
    pub model: Option<Setting<String>>,
    /// The API key (secret: print it with [`mask_secret`]); its source is the env var.
    pub api_key: Option<Setting<String>>,
    /// The env var the profile names for the key, if it names one.
    pub api_key_env: Option<Setting<String>>,
    /// Streaming on or off.
    pub stream: Setting<bool>,
    /// Context window in tokens.
    pub context_window: Setting<u64>,
    /// Longest silence inside a stream.
    pub stream_idle_timeout: Setting<Duration>,
    /// Base of the wait for a stream's first token.
    pub first_token_timeout: Setting<Duration>,
    /// Prompt-evaluation rate the first-token wait assumes, tokens/s.
    pub prompt_eval_rate: Setting<f64>,
    /// Limit on one request (on the headers of a stream).
    pub request_timeout: Setting<Duration>,
    /// Limit on connecting.
    pub connect_timeout: Setting<Duration>,
    /// Retries after the first attempt.
    pub max_retries: Setting<u32>,
    /// Cap on the time spent retrying.
    pub retry_max_total: Setting<Duration>,
    /// Bound on one whole completion: every attempt and wait.
    pub request_deadline: Setting<Duration>,
    /// Cap on the bytes of one reply (content and tool calls).
    pub max_reply_bytes: Setting<usize>,
    /// Sampling temperature; `None`: none is sent.
    pub temperature: Option<Setting<f64>>,
    /// Sampling seed; `None`: none is sent.
    pub seed: Option<Setting<u64>>,
    /// Cap on the tokens of one reply; a value of `None` sends no cap
    /// (configured as 0), the default is [`crate::llm::settings::DEFAULT_MAX_TOKENS`].
    pub max_tokens: Setting<Option<u64>>,
    /// `tool_choice`; `None`: `auto` is sent when tools are offered.
    pub tool_choice: Option<Setting<ToolChoice>>,
    /// `tool_calling`: native, constrained or text calls (default `auto`).
    pub tool_calling: Setting<ToolCalling>,
    /// `constrained_dialect`: where a constrained turn's schema goes.
    pub constrained_dialect: Setting<ConstrainedDialect>,
    /// `constrained_max_tokens`: the cap of a constrained turn's reply.
    pub constrained_max_tokens: Setting<Option<u64>>,
    /// `prompt_cache`: whether prompts are marked for caching (Anthropic).
    pub prompt_cache: Setting<crate::llm::PromptCache>,
    /// Prices by model, built-in ones overridden by the files.
    pub prices: PriceTable,
    /// Where each price in `prices` came from.
    pub price_sources: BTreeMap<String, Source>,
    /// `[models] aliases`: a role's `model:` → the model to ask for (the
    /// repo file's entries win over the user file's).
    pub model_aliases: BTreeMap<String, String>,
    /// `memory =`: what runs do with memory (default `propose`).
    pub memory: Setting<crate::memory::MemoryMode>,
}

impl fmt::Debug for ResolvedConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedConfig")
            .field("profile", &self.profile)
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field(
                "api_key",
                &self.api_key.as_ref().map(|k| mask_secret(&k.value)),
            )
            .field("stream", &self.stream)
            .field("context_window", &self.context_window)
            .field("temperature", &self.temperature)
            .field("seed", &self.seed)
            .field("max_tokens", &self.max_tokens)
            .field("tool_choice", &self.tool_choice)
            .finish_non_exhaustive()
    }
}

impl ResolvedConfig {
    /// Settings for the HTTP client; fails (naming flag, env and profile key)
    /// when no base URL or model is set.
    pub fn model_settings(&self) -> Result<ModelSettings, crate::llm::LlmError> {
        use crate::llm::LlmError;
        let base_url = self.base_url.as_ref().ok_or_else(|| {
            LlmError::Config(
                "no model server is set: pass --base-url URL, set ORCH_BASE_URL, or select a \
                 profile with base_url in orch.toml (e.g. https://api.openai.com/v1, or \
                 http://localhost:11434/v1 for Ollama)"
                    .to_owned(),
            )
        })?;
        if !(base_url.value.starts_with("http://") || base_url.value.starts_with("https://")) {
            return Err(LlmError::Config(format!(
                "the base URL `{}` (from {}) must start with http:// or https://",
                base_url.value, base_url.source
            )));
        }
        let model = self.model.as_ref().ok_or_else(|| {
            LlmError::Config(
                "no model name is set: pass --model NAME, set ORCH_MODEL, or select a profile \
                 with model in orch.toml (e.g. gpt-4o-mini)"
                    .to_owned(),
            )
        })?;
        let mut s = ModelSettings::new(base_url.value.clone(), model.value.clone());
        s.provider = self.provider.value;
        s.api_key = self.api_key.as_ref().map(|k| k.value.clone());
        s.stream = self.stream.value;
        s.context_window = self.context_window.value;
        s.stream_idle_timeout = self.stream_idle_timeout.value;
        s.first_token_timeout = self.first_token_timeout.value;
        s.prompt_eval_rate = self.prompt_eval_rate.value;
        s.request_timeout = self.request_timeout.value;
        s.connect_timeout = self.connect_timeout.value;
        s.max_retries = self.max_retries.value;
        s.retry_max_total = self.retry_max_total.value;
        s.request_deadline = self.request_deadline.value;
        s.max_reply_bytes = self.max_reply_bytes.value;
        s.prices = self.prices.clone();
        s.sampling = Sampling {
            temperature: self.temperature.as_ref().map(|t| t.value),
            seed: self.seed.as_ref().map(|t| t.value),
            max_tokens: self.max_tokens.value,
            tool_choice: self.tool_choice.as_ref().map(|t| t.value),
        };
        s.tool_calling = self.tool_calling.value;
        s.constrained_dialect = self.constrained_dialect.value;
        s.constrained_max_tokens = self.constrained_max_tokens.value;
        s.prompt_cache = self.prompt_cache.value;
        // Anthropic's models have a known window: unless one is configured,
        // it replaces the generic default (the Models API may still say less).
        if self.provider.value == Provider::Anthropic
            && self.context_window.source == Source::Default
            && let Some(window) = crate::llm::anthropic::context_window_of(&s.model)
        {
            s.context_window = window;
        }
        Ok(s)
    }
}

// ---- the file format ----

/// Most warm lanes `[lanes] pool` may ask for.
pub const MAX_LANE_POOL: i64 = 64;

/// The lane pool's size: `ORCH_LANE_POOL` (`env`, when set and not empty),
/// else `[lanes] pool` from the repo file (`<repo>/.orch/orch.toml`), else
/// the user file (`<user_dir>/orch.toml`); `None` when none sets it. The
/// error names the variable or the file and line, and the value.
pub fn lane_pool(
    env: Option<&std::ffi::OsStr>,
    repo: Option<&Path>,
    user_dir: Option<&Path>,
) -> Result<Option<usize>, ConfigError> {
    if let Some(v) = env.filter(|v| !v.is_empty()) {
        let v = v.to_string_lossy();
        return v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n as i64 <= MAX_LANE_POOL)
            .map(Some)
            .ok_or_else(|| ConfigError::EnvValue {
                var: crate::environment::ORCH_LANE_POOL,
                value: v.into_owned(),
                expected: format!("a number of lanes from 0 (no pool) to {MAX_LANE_POOL}"),
            });
    }
    let paths = repo
        .map(|r| r.join(".orch").join(CONFIG_FILE))
        .into_iter()
        .chain(user_dir.map(|d| d.join(CONFIG_FILE)));
    for path in paths {
        let Some(file) = load(&path)? else {
            continue;
        };
        let Some(pool) = &file.spec.lanes.pool else {
            continue;
        };
        let n = *pool.get_ref();
        if !(0..=MAX_LANE_POOL).contains(&n) {
            return Err(ConfigError::Invalid {
                at: file.at(pool.span()),
                message: format!(
                    "lanes.pool = {n}: expected a number of lanes from 0 (no pool) to {MAX_LANE_POOL}"
                ),
            });
        }
        return Ok(usize::try_from(n).ok());
    }
    Ok(None)
}

/// Reads and parses `path`; `Ok(None)` when it does not exist.
fn load(path: &Path) -> Result<Option<LoadedFile>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ConfigError::Read {
                path: path.to_owned(),
                source: e,
            });
        }
    };
    let spec = parse(&text, path)?;
    Ok(Some(LoadedFile {
        path: path.to_owned(),
        text,
        spec,
    }))
}

fn parse<T: serde::de::DeserializeOwned>(text: &str, path: &Path) -> Result<T, ConfigError> {
    toml::from_str::<T>(text).map_err(|e| {
        let (line, column) = e.span().map_or((1, 1), |s| line_col(text, s.start));
        ConfigError::Parse {
            path: path.to_owned(),
            line,
            column,
            message: e.message().trim().to_owned(),
        }
    })
}

/// `[setup]` of `orch.toml`: the repository's lane setup command.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetupSectionSpec {
    command: String,
    #[serde(default)]
    lockfiles: Option<Vec<String>>,
    #[serde(default)]
    timeout_secs: Option<u64>,
}

/// The file as far as `[setup]` goes (the other sections are checked by
/// [`resolve`]).
#[derive(Debug, Deserialize)]
struct SetupFileSpec {
    #[serde(default)]
    setup: Option<Spanned<SetupSectionSpec>>,
}

/// The lane setup command of the repository at `workdir`
/// (`[setup] command`, `lockfiles`, `timeout_secs` in `<workdir>/.orch/orch.toml`;
/// only the repository's file: a setup belongs to one repository), and
/// where it was written. `Ok(None)` without a file or a section.
pub fn lane_setup(
    workdir: &Path,
) -> Result<Option<(crate::pipeline::LaneSetup, Source)>, ConfigError> {
    let path = workdir.join(".orch").join(CONFIG_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ConfigError::Read { path, source }),
    };
    let spec: SetupFileSpec = parse(&text, &path)?;
    let Some(section) = spec.setup else {
        return Ok(None);
    };
    let at = Source::File {
        path: path.clone(),
        line: line_col(&text, section.span().start).0,
    };
    let s = section.into_inner();
    let setup = crate::pipeline::LaneSetup {
        command: s.command,
        lockfiles: s.lockfiles,
        timeout_secs: s.timeout_secs,
    };
    if let Some(message) = setup.problem() {
        return Err(ConfigError::Invalid { at, message });
    }
    Ok(Some((setup, at)))
}

/// Resolves the model configuration from `overrides` (flags), `env`, the repo
/// file (`<repo>/.orch/orch.toml`) and the user file (`<user_dir>/orch.toml`).
///
/// The plain settings come from the table in `config/table.rs`, walked in
/// the order below (the order their errors are found in); the rest is the
/// profile selection, the API key and the prices.
pub fn resolve(
    overrides: &Overrides,
    repo: Option<&Path>,
    user_dir: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ResolvedConfig, ConfigError> {
    use table::*;
    let env = |k: &str| {
        env(k)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let (files, loaded) = load_files(repo, user_dir)?;
    let profile = select_profile(overrides, &env, &loaded);
    let sections = profile_sections(profile.as_ref(), &loaded)?;
    let s = Sources {
        overrides,
        env: &env,
        loaded: &loaded,
        sections: &sections,
    };
    let provider = s.get(&PROVIDER)?;
    let api_key_env = s.get(&API_KEY_ENV)?;
    let api_key = api_key(&env, api_key_env.as_ref(), provider.value);
    let base_url = s
        .get(&BASE_URL)?
        .or_else(|| provider_base_url(&env, provider.value));
    let mut config = ResolvedConfig {
        provider,
        base_url,
        model: s.get(&MODEL)?,
        api_key,
        api_key_env,
        stream: s.get(&STREAM)?,
        context_window: s.get(&CONTEXT_WINDOW)?,
        stream_idle_timeout: s.get(&STREAM_IDLE_TIMEOUT)?,
        first_token_timeout: s.get(&FIRST_TOKEN_TIMEOUT)?,
        prompt_eval_rate: s.get(&PROMPT_EVAL_RATE)?,
        request_timeout: s.get(&REQUEST_TIMEOUT)?,
        connect_timeout: s.get(&CONNECT_TIMEOUT)?,
        retry_max_total: s.get(&RETRY_MAX_TOTAL)?,
        request_deadline: s.get(&REQUEST_DEADLINE)?,
        max_reply_bytes: s.get(&MAX_REPLY_BYTES)?,
        max_retries: s.get(&MAX_RETRIES)?,
        temperature: s.get(&TEMPERATURE)?,
        seed: s.get(&SEED)?,
        max_tokens: s.get(&MAX_TOKENS)?,
        tool_choice: s.get(&TOOL_CHOICE)?,
        tool_calling: s.get(&TOOL_CALLING)?,
        constrained_dialect: s.get(&CONSTRAINED_DIALECT)?,
        constrained_max_tokens: s.get(&CONSTRAINED_MAX_TOKENS)?,
        prompt_cache: s.get(&PROMPT_CACHE)?,
        memory: s.get(&MEMORY)?,
        model_aliases: loaded
            .iter()
            .rev()
            .flat_map(|f| f.spec.models.aliases.clone())
            .collect(),
        // Filled below: a bad price is reported after the settings' errors.
        prices: PriceTable::builtin(),
        price_sources: BTreeMap::new(),
        files,
        profile,
    };
    // A profile's `prices` are the price of the profile's own model.
    let profile_model = s
        .in_file(&MODEL.file)
        .or_else(|| config.model.clone())
        .map(|m| m.value);
    let profile_name = config.profile.as_ref().map(|p| p.value.as_str());
    (config.prices, config.price_sources) = prices(&loaded, profile_name, profile_model)?;
    Ok(config)
}

/// The provider's own default base URL when no flag, `ORCH_BASE_URL` or
/// profile sets one: for Anthropic, `ANTHROPIC_BASE_URL` (as Anthropic's
/// SDKs read it), else `https://api.anthropic.com`. Chat Completions and
/// Responses servers have no default (a local server is as likely as
/// OpenAI).
fn provider_base_url(
    env: &dyn Fn(&str) -> Option<String>,
    provider: Provider,
) -> Option<Setting<String>> {
    match provider {
        Provider::Anthropic => Some(match env(ANTHROPIC_BASE_URL) {
            Some(value) => Setting {
                value,
                source: Source::Env(ANTHROPIC_BASE_URL.to_owned()),
            },
            None => Setting {
                value: crate::llm::settings::ANTHROPIC_DEFAULT_BASE_URL.to_owned(),
                source: Source::Default,
            },
        }),
        Provider::OpenAiChat | Provider::OpenAiResponses => None,
    }
}

/// Where Anthropic's SDKs read their base URL from.
const ANTHROPIC_BASE_URL: &str = "ANTHROPIC_BASE_URL";

/// The API key: `ORCH_API_KEY`, else the variable `api_key_env` names, else
/// (only when the profile names none) the provider's own variable:
/// `ANTHROPIC_API_KEY` for Anthropic, `OPENAI_API_KEY` otherwise.
fn api_key(
    env: &dyn Fn(&str) -> Option<String>,
    api_key_env: Option<&Setting<String>>,
    provider: Provider,
) -> Option<Setting<String>> {
    let from_env = |var: &str| {
        env(var).map(|value| Setting {
            value,
            source: Source::Env(var.to_owned()),
        })
    };
    from_env("ORCH_API_KEY").or_else(|| match api_key_env {
        Some(var) => from_env(&var.value),
        None => from_env(provider.key_var()),
    })
}

/// The files looked at (and whether each exists), and the loaded ones.
type Files = (Vec<(PathBuf, bool)>, Vec<LoadedFile>);

/// The files, highest precedence first (repo, then user): which were looked
/// at and whether each exists, and the ones that do, parsed.
fn load_files(repo: Option<&Path>, user_dir: Option<&Path>) -> Result<Files, ConfigError> {
    let paths = repo
        .map(|r| r.join(".orch").join(CONFIG_FILE))
        .into_iter()
        .chain(user_dir.map(|d| d.join(CONFIG_FILE)));
    let mut loaded = Vec::new();
    let mut files = Vec::new();
    for path in paths {
        let file = load(&path)?;
        files.push((path, file.is_some()));
        loaded.extend(file);
    }
    Ok((files, loaded))
}

/// The profile: `--profile`, else `ORCH_PROFILE`, else the first file's
/// non-blank `default_profile`.
fn select_profile(
    overrides: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
    loaded: &[LoadedFile],
) -> Option<Setting<String>> {
    let flag = overrides
        .profile
        .as_ref()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .map(|value| Setting {
            value,
            source: Source::Flag("--profile"),
        });
    flag.or_else(|| {
        env("ORCH_PROFILE").map(|value| Setting {
            value,
            source: Source::Env("ORCH_PROFILE".to_owned()),
        })
    })
    .or_else(|| {
        loaded.iter().find_map(|f| {
            f.spec
                .default_profile
                .as_ref()
                .map(|p| f.setting(p))
                .filter(|s| !s.value.trim().is_empty())
        })
    })
}

/// The selected profile's sections, repo first; an error naming the
/// defined profiles when no file defines it.
fn profile_sections<'a>(
    profile: Option<&Setting<String>>,
    loaded: &'a [LoadedFile],
) -> Result<Vec<(&'a LoadedFile, &'a ProfileSpec)>, ConfigError> {
    let Some(p) = profile else {
        return Ok(Vec::new());
    };
    let found: Vec<_> = loaded
        .iter()
        .filter_map(|f| f.spec.profiles.get(&p.value).map(|s| (f, s.get_ref())))
        .collect();
    if !found.is_empty() {
        return Ok(found);
    }
    let mut names: Vec<&str> = loaded
        .iter()
        .flat_map(|f| f.spec.profiles.keys().map(String::as_str))
        .collect();
    names.sort_unstable();
    names.dedup();
    Err(ConfigError::UnknownProfile {
        name: p.value.clone(),
        at: p.source.clone(),
        known: if names.is_empty() {
            String::new()
        } else {
            format!("; defined: {}", names.join(", "))
        },
    })
}

/// Prices: built-in, then the user file, then the repo file; in each file
/// `[prices]` first, then the selected profile's `prices` (the price of
/// `profile_model`). With where each came from.
fn prices(
    loaded: &[LoadedFile],
    profile: Option<&str>,
    profile_model: Option<String>,
) -> Result<(PriceTable, BTreeMap<String, Source>), ConfigError> {
    let mut prices = PriceTable::builtin();
    let mut sources: BTreeMap<String, Source> = prices
        .iter()
        .map(|(m, _)| (m.to_owned(), Source::Default))
        .collect();
    for file in loaded.iter().rev() {
        for (name, price) in &file.spec.prices {
            check_price(price.get_ref(), || file.at(price.span()))?;
            prices.set(name, *price.get_ref());
            sources.insert(name.clone(), file.at(price.span()));
        }
        let profile_prices = profile
            .and_then(|p| file.spec.profiles.get(p))
            .and_then(|s| s.get_ref().prices.as_ref());
        if let (Some(price), Some(name)) = (profile_prices, &profile_model) {
            check_price(price.get_ref(), || file.at(price.span()))?;
            prices.set(name, *price.get_ref());
            sources.insert(name.clone(), file.at(price.span()));
        }
    }
    Ok((prices, sources))
}

fn check_price(price: &Price, at: impl Fn() -> Source) -> Result<(), ConfigError> {
    let ok = |v: f64| v.is_finite() && v >= 0.0;
    match price
        .rates()
        .into_iter()
        .find(|(_, v)| v.is_some_and(|v| !ok(v)))
    {
        None => Ok(()),
        Some((key, v)) => Err(ConfigError::Invalid {
            at: at(),
            message: format!(
                "prices are USD per 1M tokens: numbers of at least 0 (`{key}` is {})",
                v.unwrap_or_default()
            ),
        }),
    }
}

/// A description of the built-in price table's date, for output.
pub fn builtin_prices_note() -> String {
    format!("built-in table ({BUILTIN_PRICES_DATE} list prices)")
}

#[cfg(test)]
mod tests {
    use super::types::FileSpec;
    use super::*;
    use crate::llm::openai::DEFAULT_CONTEXT_WINDOW;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn unknown_keys_and_bad_types_name_line_and_column() {
        let text = "default_profile = \"a\"\n[profiles.a]\nmodel = \"m\"\napi_key = \"sk-x\"\n";
        let err = parse::<FileSpec>(text, Path::new("/x/orch.toml")).unwrap_err();
        let ConfigError::Parse {
            line,
            column,
            message,
            ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!((*line, *column), (4, 1), "{err}");
        assert!(message.contains("api_key"), "{message}");
        assert!(
            err.to_string().starts_with("read /x/orch.toml:4:1: "),
            "{err}"
        );

        let err =
            parse::<FileSpec>("[profiles.a]\nstream = \"yes\"\n", Path::new("f")).unwrap_err();
        assert!(err.to_string().contains("f:2:10"), "{err}");
        let err = parse::<FileSpec>(
            "[prices.m]\nprompt = 1\ncompletion = 2\ncurrency = 3\n",
            Path::new("f"),
        )
        .unwrap_err();
        assert!(err.to_string().contains("f:4:1"), "{err}");
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("é\nx", 3), (2, 1));
    }

    #[test]
    fn masking_keeps_a_prefix_and_four_chars() {
        assert_eq!(mask_secret("sk-proj-abcdefgh1234"), "sk-****1234");
        assert_eq!(mask_secret("abcdefghijklmnop"), "****mnop");
        assert_eq!(mask_secret("short"), "****");
    }

    #[test]
    fn no_files_no_flags_means_defaults_and_nothing_set() {
        let r = resolve(&Overrides::default(), None, None, &env_of(&[])).unwrap();
        assert!(r.profile.is_none() && r.base_url.is_none() && r.model.is_none());
        assert_eq!(
            r.stream,
            Setting {
                value: true,
                source: Source::Default
            }
        );
        assert_eq!(r.context_window.value, DEFAULT_CONTEXT_WINDOW);
        assert!(r.model_settings().is_err());
    }
}

#[cfg(test)]
mod bounds_tests {
    use super::*;
    use crate::llm::settings::{DEFAULT_MAX_REPLY_BYTES, DEFAULT_REQUEST_DEADLINE};

    fn resolve_text(text: &str) -> Result<ResolvedConfig, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CONFIG_FILE), text).unwrap();
        resolve(&Overrides::default(), None, Some(dir.path()), &|_| None)
    }

    #[test]
    fn lane_pool_env_wins_over_the_files_and_a_bad_value_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CONFIG_FILE), "[lanes]\npool = 3\n").unwrap();
        let user = Some(dir.path());
        let env = |v: &str| Some(std::ffi::OsString::from(v));
        assert_eq!(lane_pool(None, None, user).unwrap(), Some(3));
        assert_eq!(lane_pool(env("").as_deref(), None, user).unwrap(), Some(3));
        assert_eq!(
            lane_pool(env(" 0 ").as_deref(), None, user).unwrap(),
            Some(0)
        );
        let err = lane_pool(env("65").as_deref(), None, user).unwrap_err();
        assert_eq!(
            err.to_string(),
            "use ORCH_LANE_POOL=65: expected a number of lanes from 0 (no pool) to 64"
        );
    }

    #[test]
    fn tool_calling_and_constrained_dialect_are_profile_keys() {
        let r = resolve_text(
            "default_profile = \"p\"\n[profiles.p]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\ntool_calling = \"text\"\nconstrained_dialect = \"vllm\"\n",
        )
        .unwrap();
        let s = r.model_settings().unwrap();
        assert_eq!(s.tool_calling, crate::llm::ToolCalling::Text);
        assert_eq!(s.constrained_dialect, crate::llm::ConstrainedDialect::Vllm);
        assert_eq!(s.constrained_max_tokens, Some(1024), "the default");
        assert_eq!(s.constrained_cap(), Some(1024));
        let capped = |text: &str| {
            resolve_text(&format!("default_profile = \"p\"\n[profiles.p]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n{text}"))
                .unwrap()
                .model_settings()
                .unwrap()
                .constrained_cap()
        };
        assert_eq!(capped("constrained_max_tokens = 300\n"), Some(300));
        assert_eq!(capped("max_tokens = 200\n"), Some(200), "the smaller");
        assert_eq!(
            capped("constrained_max_tokens = 0\n"),
            Some(4096),
            "max_tokens'"
        );
        assert_eq!(capped("constrained_max_tokens = 0\nmax_tokens = 0\n"), None);
        let d = resolve_text("").unwrap();
        assert_eq!(d.tool_calling.value, crate::llm::ToolCalling::Auto);
        assert_eq!(
            d.constrained_dialect.value,
            crate::llm::ConstrainedDialect::OpenAi
        );
        let err =
            resolve_text("default_profile = \"p\"\n[profiles.p]\ntool_calling = \"grammar\"\n")
                .unwrap_err();
        assert!(err.to_string().contains(":3:"), "{err}");
    }

    #[test]
    fn request_deadline_and_max_reply_bytes_are_profile_keys() {
        let r = resolve_text(
            "default_profile = \"p\"\n[profiles.p]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\nrequest_deadline = 30\nmax_reply_bytes = 4096\n",
        )
        .unwrap();
        let s = r.model_settings().unwrap();
        assert_eq!(s.request_deadline, Duration::from_secs(30));
        assert_eq!(s.max_reply_bytes, 4096);
        let d = resolve_text("").unwrap();
        assert_eq!(d.request_deadline.value, DEFAULT_REQUEST_DEADLINE);
        assert_eq!(d.max_reply_bytes.value, DEFAULT_MAX_REPLY_BYTES);
        let err = resolve_text("default_profile = \"p\"\n[profiles.p]\nmax_reply_bytes = 10\n")
            .unwrap_err();
        assert!(err.to_string().contains("max_reply_bytes"), "{err}");
    }
}
