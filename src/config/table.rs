//! The settings table of [`super::resolve`]: one entry per setting, saying
//! where the setting may come from (highest precedence first: flag,
//! environment variable, then the file — the selected profile's section, repo
//! file before user file, or a top-level key) and what a usable value is.
//! [`Sources::get`] walks an entry; adding a setting is one entry here, one
//! key in `ProfileSpec` (or `FileSpec`) and one field in `ResolvedConfig`.
//!
//! The settings that are not a plain walk stay in `resolve`: the profile
//! itself (it selects the sections the table reads), the API key (read from
//! the variable another setting names), the prices and the model aliases
//! (merged across files rather than taken from the first that sets them).

use super::types::{
    ConfigError, FileSpec, LoadedFile, MAX_TEMPERATURE, Overrides, ProfileSpec, Setting, Source,
    mask_secret,
};
use crate::llm::openai::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_RETRIES, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_RETRY_MAX_TOTAL, DEFAULT_STREAM_IDLE_TIMEOUT,
};
use crate::llm::settings::{
    ConstrainedDialect, DEFAULT_CONSTRAINED_MAX_TOKENS, DEFAULT_FIRST_TOKEN_TIMEOUT,
    DEFAULT_MAX_REPLY_BYTES, DEFAULT_MAX_TOKENS, DEFAULT_PROMPT_EVAL_RATE,
    DEFAULT_REQUEST_DEADLINE, PromptCache, Provider, ToolCalling, ToolChoice,
};
use crate::memory::MemoryMode;
use std::time::Duration;
use toml::Spanned;

/// One setting: its sources in precedence order and its check.
///
/// `R` is the value as written (flag, variable, file); `V` the value kept;
/// `D` is [`Optional`] (no default: the setting may stay unset) or [`Or`]
/// (the default when no source sets it; a default is not checked).
pub(super) struct Key<R: 'static, V, D> {
    /// The flag's name and how to read it from the command line.
    pub(super) flag: Option<(&'static str, FromFlag<R>)>,
    /// The environment variable and how to read its (trimmed, non-empty)
    /// value; `Err` is what is wrong with it.
    pub(super) env: Option<(&'static str, FromEnv<R>)>,
    /// Where in `orch.toml` it is written.
    pub(super) file: FileKey<R>,
    /// What a usable value is (`Err`: the message, said of its source).
    pub(super) check: fn(R) -> Result<V, String>,
    /// What it is when no source sets it.
    pub(super) default: D,
}

/// How a setting is read from the command line.
pub(super) type FromFlag<R> = fn(&Overrides) -> Option<R>;

/// How a setting is parsed from an environment variable.
pub(super) type FromEnv<R> = fn(&str) -> Result<R, String>;

/// Where in `orch.toml` a setting is written.
pub(super) enum FileKey<R: 'static> {
    /// A key of the selected profile's section (repo file's section first).
    Profile(for<'a> fn(&'a ProfileSpec) -> Option<&'a Spanned<R>>),
    /// A top-level key (repo file first).
    Top(for<'a> fn(&'a FileSpec) -> Option<&'a Spanned<R>>),
}

/// No default: the resolved setting is an `Option`.
pub(super) struct Optional;

/// The default (the resolved setting is always there).
pub(super) struct Or<V>(pub V);

/// What a setting resolves to, given its kind of default.
pub(super) trait Fallback<V> {
    /// `Option<Setting<V>>` or `Setting<V>`.
    type Out;
    /// The found setting, or the default.
    fn or_default(&self, found: Option<Setting<V>>) -> Self::Out;
}

impl<V> Fallback<V> for Optional {
    type Out = Option<Setting<V>>;
    fn or_default(&self, found: Option<Setting<V>>) -> Self::Out {
        found
    }
}

impl<V: Clone> Fallback<V> for Or<V> {
    type Out = Setting<V>;
    fn or_default(&self, found: Option<Setting<V>>) -> Self::Out {
        found.unwrap_or_else(|| Setting {
            value: self.0.clone(),
            source: Source::Default,
        })
    }
}

/// What the table is walked over.
pub(super) struct Sources<'a> {
    /// The command line.
    pub(super) overrides: &'a Overrides,
    /// The environment, trimmed, empty values dropped.
    pub(super) env: &'a dyn Fn(&str) -> Option<String>,
    /// The files, repo first.
    pub(super) loaded: &'a [LoadedFile],
    /// The selected profile's sections, repo first.
    pub(super) sections: &'a [(&'a LoadedFile, &'a ProfileSpec)],
}

impl Sources<'_> {
    /// Resolves `key`: the first source that sets it, checked, else its default.
    pub(super) fn get<R: Clone, V, D: Fallback<V>>(
        &self,
        key: &Key<R, V, D>,
    ) -> Result<D::Out, ConfigError> {
        let found = match self.raw(key)? {
            None => None,
            Some(raw) => match (key.check)(raw.value) {
                Ok(value) => Some(Setting {
                    value,
                    source: raw.source,
                }),
                Err(message) => {
                    return Err(ConfigError::Invalid {
                        at: raw.source,
                        message,
                    });
                }
            },
        };
        Ok(key.default.or_default(found))
    }

    /// The value as written, from the first source that sets it.
    fn raw<R: Clone, V, D>(&self, key: &Key<R, V, D>) -> Result<Option<Setting<R>>, ConfigError> {
        if let Some((name, read)) = key.flag
            && let Some(value) = read(self.overrides)
        {
            return Ok(Some(Setting {
                value,
                source: Source::Flag(name),
            }));
        }
        if let Some((var, parse)) = key.env
            && let Some(text) = (self.env)(var)
        {
            let at = Source::Env(var.to_owned());
            return match parse(&text) {
                Ok(value) => Ok(Some(Setting { value, source: at })),
                Err(message) => Err(ConfigError::Invalid { at, message }),
            };
        }
        Ok(self.in_file(&key.file))
    }

    /// The value the files give, first file that sets it.
    pub(super) fn in_file<R: Clone>(&self, file: &FileKey<R>) -> Option<Setting<R>> {
        match file {
            FileKey::Profile(key) => self
                .sections
                .iter()
                .find_map(|(f, s)| key(s).map(|v| f.setting(v))),
            FileKey::Top(key) => self
                .loaded
                .iter()
                .find_map(|f| key(&f.spec).map(|v| f.setting(v))),
        }
    }
}

/// A flag's text, trimmed; `None` when unset or blank.
fn trimmed(flag: &Option<String>) -> Option<String> {
    flag.as_ref()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// An environment variable's text, as it is.
fn text(s: &str) -> Result<String, String> {
    Ok(s.to_owned())
}

/// Any value as written.
fn any<T>(v: T) -> Result<T, String> {
    Ok(v)
}

/// Seconds as a timeout: above 0, at most a day.
fn seconds(s: f64) -> Result<Duration, String> {
    if s.is_finite() && s > 0.0 && s <= 86_400.0 {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(format!(
            "a timeout is a number of seconds above 0 and at most 86400, not {s}"
        ))
    }
}

/// A timeout of the selected profile, in seconds.
const fn timeout(
    key: for<'a> fn(&'a ProfileSpec) -> Option<&'a Spanned<f64>>,
    default: Duration,
) -> Key<f64, Duration, Or<Duration>> {
    Key {
        flag: None,
        env: None,
        file: FileKey::Profile(key),
        check: seconds,
        default: Or(default),
    }
}

// ---- the table ----

/// `--provider`, `provider` (default `openai-chat`).
pub(super) const PROVIDER: Key<String, Provider, Or<Provider>> = Key {
    flag: Some(("--provider", |o| trimmed(&o.provider))),
    env: None,
    file: FileKey::Profile(|p| p.provider.as_ref()),
    check: |name| name.parse(),
    default: Or(Provider::OpenAiChat),
};

/// `--base-url`, `ORCH_BASE_URL`, `base_url`.
pub(super) const BASE_URL: Key<String, String, Optional> = Key {
    flag: Some(("--base-url", |o| trimmed(&o.base_url))),
    env: Some(("ORCH_BASE_URL", text)),
    file: FileKey::Profile(|p| p.base_url.as_ref()),
    check: any,
    default: Optional,
};

/// `--model`, `ORCH_MODEL`, `model`.
pub(super) const MODEL: Key<String, String, Optional> = Key {
    flag: Some(("--model", |o| trimmed(&o.model))),
    env: Some(("ORCH_MODEL", text)),
    file: FileKey::Profile(|p| p.model.as_ref()),
    check: any,
    default: Optional,
};

/// `api_key_env`: the NAME of the variable holding the key.
pub(super) const API_KEY_ENV: Key<String, String, Optional> = Key {
    flag: None,
    env: None,
    file: FileKey::Profile(|p| p.api_key_env.as_ref()),
    check: |name| {
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Ok(name);
        }
        Err(format!(
            "api_key_env must be the NAME of an environment variable (e.g. OPENAI_API_KEY), not `{}`",
            if name.len() > 8 {
                mask_secret(&name)
            } else {
                name
            }
        ))
    },
    default: Optional,
};

/// `--no-stream`, `stream` (default on).
pub(super) const STREAM: Key<bool, bool, Or<bool>> = Key {
    flag: Some(("--no-stream", |o| o.no_stream.then_some(false))),
    env: None,
    file: FileKey::Profile(|p| p.stream.as_ref()),
    check: any,
    default: Or(true),
};

/// `context_window`, in tokens.
pub(super) const CONTEXT_WINDOW: Key<u64, u64, Or<u64>> = Key {
    flag: None,
    env: None,
    file: FileKey::Profile(|p| p.context_window.as_ref()),
    check: |n| {
        if n == 0 {
            Err("context_window must be a positive number of tokens".to_owned())
        } else {
            Ok(n)
        }
    },
    default: Or(DEFAULT_CONTEXT_WINDOW),
};

/// `stream_idle_timeout`, seconds.
pub(super) const STREAM_IDLE_TIMEOUT: Key<f64, Duration, Or<Duration>> = timeout(
    |p| p.stream_idle_timeout.as_ref(),
    DEFAULT_STREAM_IDLE_TIMEOUT,
);

/// `first_token_timeout`, seconds: the base of the wait for a stream's
/// first token.
pub(super) const FIRST_TOKEN_TIMEOUT: Key<f64, Duration, Or<Duration>> = timeout(
    |p| p.first_token_timeout.as_ref(),
    DEFAULT_FIRST_TOKEN_TIMEOUT,
);

/// `prompt_eval_rate`, tokens per second the first-token wait assumes.
pub(super) const PROMPT_EVAL_RATE: Key<f64, f64, Or<f64>> = Key {
    flag: None,
    env: None,
    file: FileKey::Profile(|p| p.prompt_eval_rate.as_ref()),
    check: |r| {
        if r.is_finite() && r > 0.0 {
            Ok(r)
        } else {
            Err(format!(
                "prompt_eval_rate is a positive number of tokens per second, not {r}"
            ))
        }
    },
    default: Or(DEFAULT_PROMPT_EVAL_RATE),
};

/// `request_timeout`, seconds.
pub(super) const REQUEST_TIMEOUT: Key<f64, Duration, Or<Duration>> =
    timeout(|p| p.request_timeout.as_ref(), DEFAULT_REQUEST_TIMEOUT);

/// `connect_timeout`, seconds.
pub(super) const CONNECT_TIMEOUT: Key<f64, Duration, Or<Duration>> =
    timeout(|p| p.connect_timeout.as_ref(), DEFAULT_CONNECT_TIMEOUT);

/// `retry_max_total`, seconds.
pub(super) const RETRY_MAX_TOTAL: Key<f64, Duration, Or<Duration>> =
    timeout(|p| p.retry_max_total.as_ref(), DEFAULT_RETRY_MAX_TOTAL);

/// `request_deadline`, seconds.
pub(super) const REQUEST_DEADLINE: Key<f64, Duration, Or<Duration>> =
    timeout(|p| p.request_deadline.as_ref(), DEFAULT_REQUEST_DEADLINE);

/// `max_reply_bytes`, 1 KiB to 1 GiB.
pub(super) const MAX_REPLY_BYTES: Key<u64, usize, Or<usize>> = Key {
    flag: None,
    env: None,
    file: FileKey::Profile(|p| p.max_reply_bytes.as_ref()),
    check: |n| {
        if (1024..=(1u64 << 30)).contains(&n) {
            Ok(n as usize)
        } else {
            Err(format!(
                "max_reply_bytes is a number of bytes from 1024 to 1073741824, not {n}"
            ))
        }
    },
    default: Or(DEFAULT_MAX_REPLY_BYTES),
};

/// `max_retries`.
pub(super) const MAX_RETRIES: Key<u32, u32, Or<u32>> = Key {
    flag: None,
    env: None,
    file: FileKey::Profile(|p| p.max_retries.as_ref()),
    check: any,
    default: Or(DEFAULT_MAX_RETRIES),
};

// Sampling: flag > profile > default; no environment variables (they belong
// to a profile or to one command, not to a shell session).

/// `--temperature`, `temperature` (0 to [`MAX_TEMPERATURE`]; unset: none sent).
pub(super) const TEMPERATURE: Key<f64, f64, Optional> = Key {
    flag: Some(("--temperature", |o| o.sampling.temperature)),
    env: None,
    file: FileKey::Profile(|p| p.temperature.as_ref()),
    check: |t| {
        if t.is_finite() && (0.0..=MAX_TEMPERATURE).contains(&t) {
            Ok(t)
        } else {
            Err(format!(
                "temperature must be a number from 0 to {MAX_TEMPERATURE}, not {t}"
            ))
        }
    },
    default: Optional,
};

/// `--seed`, `seed` (unset: none sent).
pub(super) const SEED: Key<u64, u64, Optional> = Key {
    flag: Some(("--seed", |o| o.sampling.seed)),
    env: None,
    file: FileKey::Profile(|p| p.seed.as_ref()),
    check: any,
    default: Optional,
};

/// `--max-output-tokens`, `max_tokens` (0: send no cap).
pub(super) const MAX_TOKENS: Key<u64, Option<u64>, Or<Option<u64>>> = Key {
    flag: Some(("--max-output-tokens", |o| o.sampling.max_tokens)),
    env: None,
    file: FileKey::Profile(|p| p.max_tokens.as_ref()),
    check: |n| Ok(Some(n).filter(|&n| n > 0)),
    default: Or(Some(DEFAULT_MAX_TOKENS)),
};

/// `--tool-choice`, `tool_choice` (unset: `auto` when tools are offered).
pub(super) const TOOL_CHOICE: Key<ToolChoice, ToolChoice, Optional> = Key {
    flag: Some(("--tool-choice", |o| o.sampling.tool_choice)),
    env: None,
    file: FileKey::Profile(|p| p.tool_choice.as_ref()),
    check: any,
    default: Optional,
};

/// `tool_calling` (default `auto`: native, switched to constrained when the
/// model writes its calls as text).
pub(super) const TOOL_CALLING: Key<ToolCalling, ToolCalling, Or<ToolCalling>> = Key {
    flag: None,
    env: None,
    file: FileKey::Profile(|p| p.tool_calling.as_ref()),
    check: any,
    default: Or(ToolCalling::Auto),
};

/// `constrained_dialect` (default `openai`: `response_format`).
pub(super) const CONSTRAINED_DIALECT: Key<
    ConstrainedDialect,
    ConstrainedDialect,
    Or<ConstrainedDialect>,
> = Key {
    flag: None,
    env: None,
    file: FileKey::Profile(|p| p.constrained_dialect.as_ref()),
    check: any,
    default: Or(ConstrainedDialect::OpenAi),
};

/// `constrained_max_tokens` (0: none of its own; default
/// [`DEFAULT_CONSTRAINED_MAX_TOKENS`]).
pub(super) const CONSTRAINED_MAX_TOKENS: Key<u64, Option<u64>, Or<Option<u64>>> = Key {
    flag: None,
    env: None,
    file: FileKey::Profile(|p| p.constrained_max_tokens.as_ref()),
    check: |n| Ok(Some(n).filter(|&n| n > 0)),
    default: Or(Some(DEFAULT_CONSTRAINED_MAX_TOKENS)),
};

/// `prompt_cache` (default `auto`: on unless the role says `off`).
pub(super) const PROMPT_CACHE: Key<PromptCache, PromptCache, Or<PromptCache>> = Key {
    flag: None,
    env: None,
    file: FileKey::Profile(|p| p.prompt_cache.as_ref()),
    check: any,
    default: Or(PromptCache::Auto),
};

/// `memory =` (a top-level key; default `propose`).
pub(super) const MEMORY: Key<MemoryMode, MemoryMode, Or<MemoryMode>> = Key {
    flag: None,
    env: None,
    file: FileKey::Top(|f| f.memory.as_ref()),
    check: any,
    default: Or(MemoryMode::Propose),
};
