//! Where and how to reach a model: [`ModelSettings`] and its defaults.
//!
//! Re-exported from [`super::openai`], whose client takes them. The full
//! resolution from flags, environment and `orch.toml` is in
//! [`crate::config`]; [`ModelSettings::resolve`] is the flags-and-env-only
//! shortcut.

use super::error::LlmError;
use super::price::PriceTable;
use super::retry::RetryPolicy;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Default limit on one non-streamed request (connect, send, wait, read), and
/// on waiting for the response headers of a streamed one.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// Default limit on establishing a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default number of retries after the first attempt.
pub const DEFAULT_MAX_RETRIES: u32 = 4;
/// Default first backoff delay; doubled on every retry.
pub const DEFAULT_RETRY_BASE_DELAY: Duration = Duration::from_millis(500);
/// Default cap on one backoff delay (also caps `Retry-After`).
pub const DEFAULT_RETRY_MAX_DELAY: Duration = Duration::from_secs(30);
/// Default cap on the time from the first attempt to the start of the last retry.
pub const DEFAULT_RETRY_MAX_TOTAL: Duration = Duration::from_secs(120);
/// Default longest silence of a streamed response: no `data` line for this
/// long (keep-alive comments do not count) abandons it.
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default base of the wait for a stream's first `data` line, before the
/// prompt's allowance is added ([`ModelSettings::first_token_wait`]).
pub const DEFAULT_FIRST_TOKEN_TIMEOUT: Duration = Duration::from_secs(60);
/// Default prompt-evaluation rate the first-token wait assumes, in tokens
/// per second: a slow CPU server (a 1.5B model on 2 loaded cores evaluated
/// orch's ~970-token first prompt in more than 60 s; SmolLM2-135M here, at
/// rest, 22 tokens/s), so a real server is rarely slower.
pub const DEFAULT_PROMPT_EVAL_RATE: f64 = 5.0;
/// Request bytes per prompt token, for the first-token wait (the same
/// estimate as usage a server does not report).
pub const BYTES_PER_TOKEN: usize = 4;
/// Default bound on one completion as a whole: every attempt, every retry
/// wait, streamed or not.
pub const DEFAULT_REQUEST_DEADLINE: Duration = Duration::from_secs(600);
/// Default cap on the text of one reply (content plus tool-call ids, names
/// and arguments), in bytes: 2 MiB, some 500,000 tokens, far beyond any
/// `max_tokens` a turn asks for. Twice the tools' own 1 MiB limit on one
/// call's arguments, so an over-long call is still answered by the tool
/// layer (the model can split the work) rather than failing the stage.
pub const DEFAULT_MAX_REPLY_BYTES: usize = 2 << 20;
/// Default context window, in tokens, when none is configured.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;
/// Default cap on the tokens one reply may generate (`max_tokens`), so no
/// turn runs unbounded (llama.cpp generates until its context is full).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;
/// Default cap on the tokens of one constrained turn's reply
/// (`constrained_max_tokens`). A call a small model writes under the
/// schema is rarely over ~300 tokens; a runaway (a string argument escaped
/// over and over, measured: 4,096 tokens, 14 minutes on a 2-core CPU) is
/// cut here instead, and a file too long for it is asked for whole, in an
/// unconstrained turn ([`crate::agent`]'s whole-file ask).
pub const DEFAULT_CONSTRAINED_MAX_TOKENS: u64 = 1024;

/// The sampling settings of a request: `temperature`, `seed`, `max_tokens`,
/// `tool_choice`. The one type for them: what a client sends
/// ([`ModelSettings::sampling`], where `None` sends none), what overrides a
/// profile (a role's front matter, [`Sampling::apply`]: `None` keeps the
/// profile's), what the run record keeps and what the command line and
/// `orch.toml` resolve to. Serialized, unset fields are left out (a role
/// file's shape); the run record writes them as `null`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// `temperature`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// `seed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// `max_tokens` of one reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// `tool_choice`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
}

impl Sampling {
    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        *self == Sampling::default()
    }

    /// Writes the set fields over `settings`.
    pub fn apply(&self, settings: &mut ModelSettings) {
        settings.sampling = self.over(settings.sampling);
    }

    /// Each field of `self`, else `base`'s.
    pub fn over(self, base: Sampling) -> Sampling {
        let Sampling {
            temperature,
            seed,
            max_tokens,
            tool_choice,
        } = self;
        Sampling {
            temperature: temperature.or(base.temperature),
            seed: seed.or(base.seed),
            max_tokens: max_tokens.or(base.max_tokens),
            tool_choice: tool_choice.or(base.tool_choice),
        }
    }
}

/// What the model may do about the offered tools (`tool_choice` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolChoice {
    /// The model decides whether to call a tool (the servers' default).
    Auto,
    /// The model must call a tool every turn (so `finish` is how it ends);
    /// llama.cpp then constrains small models to valid calls by grammar.
    Required,
}

impl ToolChoice {
    /// The wire value: `auto` or `required`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "required",
        }
    }
}

impl std::str::FromStr for ToolChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "required" => Ok(ToolChoice::Required),
            other => Err(format!(
                "unknown tool_choice `{other}`: expected `auto` or `required`"
            )),
        }
    }
}

impl fmt::Display for ToolChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How tool calls are asked for (`tool_calling` in a profile or a role's
/// front matter; see `docs/model-client.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolCalling {
    /// Native `tools` (the default); an agent whose model answers a turn
    /// that should have been a call with text instead switches to
    /// [`ToolCalling::Constrained`] for its following turns, once.
    #[default]
    Auto,
    /// Native `tools` only; never switched.
    Native,
    /// Every turn under a JSON schema admitting exactly one offered call
    /// ([`super::constrained`]).
    Constrained,
    /// No `tools` and no schema: the tools are described in the system
    /// prompt and calls are recovered from the reply's text.
    Text,
}

impl ToolCalling {
    /// The wire value: `auto`, `native`, `constrained` or `text`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolCalling::Auto => "auto",
            ToolCalling::Native => "native",
            ToolCalling::Constrained => "constrained",
            ToolCalling::Text => "text",
        }
    }

    /// How the first turn asks for calls.
    pub fn first_mode(self) -> CallMode {
        match self {
            ToolCalling::Auto | ToolCalling::Native => CallMode::Native,
            ToolCalling::Constrained => CallMode::Constrained,
            ToolCalling::Text => CallMode::Text,
        }
    }
}

impl std::str::FromStr for ToolCalling {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(ToolCalling::Auto),
            "native" => Ok(ToolCalling::Native),
            "constrained" => Ok(ToolCalling::Constrained),
            "text" => Ok(ToolCalling::Text),
            other => Err(format!(
                "unknown tool_calling `{other}`: expected `auto`, `native`, `constrained` or `text`"
            )),
        }
    }
}

/// How one request asks for tool calls (what [`ToolCalling`] comes to on a
/// given turn).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CallMode {
    /// The `tools` array (and `tool_choice`): the request as it always was.
    #[default]
    Native,
    /// No `tools`; a JSON schema admitting one offered call, the tools
    /// described in the system prompt; the reply's JSON is the call.
    Constrained,
    /// No `tools`, no schema; the tools described in the system prompt.
    Text,
}

/// Which request field carries a constrained turn's JSON schema
/// (`constrained_dialect` in a profile).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConstrainedDialect {
    /// `response_format: {"type": "json_schema", "json_schema": {"name",
    /// "schema"}}` (OpenAI's shape; llama.cpp, vLLM, Ollama's `/v1`,
    /// LM Studio read it). The default.
    #[default]
    OpenAi,
    /// llama.cpp's own top-level `json_schema` (every llama.cpp build,
    /// also those that read `response_format` differently).
    LlamaCpp,
    /// vLLM's `structured_outputs: {"json": …}` (vLLM 0.10.2 and later;
    /// `guided_json` was removed in 0.12).
    Vllm,
    /// Ollama: its `/v1` endpoint maps `response_format` onto its native
    /// `format`, so this sends what [`ConstrainedDialect::OpenAi`] sends.
    Ollama,
}

impl ConstrainedDialect {
    /// The configured name.
    pub fn as_str(self) -> &'static str {
        match self {
            ConstrainedDialect::OpenAi => "openai",
            ConstrainedDialect::LlamaCpp => "llamacpp",
            ConstrainedDialect::Vllm => "vllm",
            ConstrainedDialect::Ollama => "ollama",
        }
    }
}

/// Whether requests ask the server to cache their prompt (`prompt_cache` in
/// a profile or a role's front matter; Anthropic's `cache_control`
/// breakpoints, see `docs/model-client.md`). Servers that cache on their
/// own (OpenAI, llama.cpp) are not asked anything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromptCache {
    /// The profile's default: on, unless the stage's role says `off`
    /// (the built-in reviewer, whose stages end within about 2 turns, so
    /// a cache write would never be read back).
    #[default]
    Auto,
    /// On, whatever the role says.
    On,
    /// Off.
    Off,
}

impl PromptCache {
    /// The configured name.
    pub fn as_str(self) -> &'static str {
        match self {
            PromptCache::Auto => "auto",
            PromptCache::On => "on",
            PromptCache::Off => "off",
        }
    }

    /// Whether breakpoints may be placed.
    pub fn caches(self) -> bool {
        self != PromptCache::Off
    }

    /// A role's setting over a profile's: only `auto` gives way.
    pub fn with_role(self, role: PromptCache) -> PromptCache {
        match self {
            PromptCache::Auto => role,
            other => other,
        }
    }
}

impl fmt::Display for PromptCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Anthropic's API root when neither the configuration nor
/// `ANTHROPIC_BASE_URL` names one.
pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// Which wire format a profile speaks (`provider` in a profile, `--provider`;
/// see `docs/model-client.md`). Each is one [`super::openai::WireFormat`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Provider {
    /// OpenAI Chat Completions, `POST {base_url}/chat/completions` (OpenAI,
    /// llama.cpp, vLLM, Ollama, LiteLLM, DeepSeek, …). The default.
    #[default]
    #[serde(rename = "openai-chat")]
    OpenAiChat,
    /// Anthropic Messages, `POST {base}/v1/messages` ([`super::anthropic`]).
    #[serde(rename = "anthropic")]
    Anthropic,
    /// OpenAI Responses, `POST {base_url}/responses`.
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
}

impl Provider {
    /// Every provider, in the order messages list them.
    pub const ALL: [Provider; 3] = [
        Provider::OpenAiChat,
        Provider::Anthropic,
        Provider::OpenAiResponses,
    ];

    /// The environment variable the API key is read from when neither
    /// `ORCH_API_KEY` nor a profile's `api_key_env` gives one.
    pub fn key_var(self) -> &'static str {
        match self {
            Provider::Anthropic => "ANTHROPIC_API_KEY",
            Provider::OpenAiChat | Provider::OpenAiResponses => "OPENAI_API_KEY",
        }
    }

    /// The configured name: `openai-chat`, `anthropic` or `openai-responses`.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAiChat => "openai-chat",
            Provider::Anthropic => "anthropic",
            Provider::OpenAiResponses => "openai-responses",
        }
    }
}

impl std::str::FromStr for Provider {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase();
        Provider::ALL
            .into_iter()
            .find(|p| p.as_str() == wanted)
            .ok_or_else(|| {
                format!(
                    "unknown provider `{}`: expected `openai-chat` (the default), `anthropic` or `openai-responses`",
                    s.trim()
                )
            })
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where and how to reach a model.
#[derive(Clone)]
pub struct ModelSettings {
    /// The wire format ([`Provider`], default Chat Completions).
    pub provider: Provider,
    /// API root, e.g. `http://127.0.0.1:8080/v1`; requests go to
    /// `{base_url}/chat/completions` (a trailing slash is tolerated).
    pub base_url: String,
    /// Model name sent in every request.
    pub model: String,
    /// Bearer token; `None` sends no `Authorization` header (local servers).
    pub api_key: Option<String>,
    /// Limit on one non-streamed request; for a streamed one, on the wait for
    /// the response headers.
    pub request_timeout: Duration,
    /// Limit on establishing a connection.
    pub connect_timeout: Duration,
    /// Retries after the first attempt for transient failures.
    pub max_retries: u32,
    /// First backoff delay; the n-th retry waits up to `base * 2^n`.
    pub retry_base_delay: Duration,
    /// Cap on one backoff delay and on an honoured `Retry-After`.
    pub retry_max_delay: Duration,
    /// No retry starts later than this after the first attempt started.
    pub retry_max_total: Duration,
    /// Stream responses (`stream: true`, SSE); false sends plain requests.
    pub stream: bool,
    /// A streamed response that sends no `data` line for this long (comment
    /// keep-alives do not count) after its first one is abandoned; it is
    /// retried once.
    pub stream_idle_timeout: Duration,
    /// The base of the wait for a stream's first `data` line; the prompt's
    /// allowance is added ([`Self::first_token_wait`]).
    pub first_token_timeout: Duration,
    /// The prompt-evaluation rate the first-token wait assumes, in tokens
    /// per second (finite and positive).
    pub prompt_eval_rate: f64,
    /// Bound on one completion as a whole (all attempts and the waits
    /// between them): when it passes, the request ends with
    /// [`super::LlmError::Exhausted`], whatever the other timeouts allow.
    pub request_deadline: Duration,
    /// Cap on one reply's text in bytes ([`super::stream::reply_bytes`]),
    /// enforced while reading: a longer reply is refused with
    /// [`super::LlmError::BadResponse`] and never held whole. The body of a
    /// non-streamed reply, and one event of a stream, may take twice this
    /// plus 64 KiB (the JSON around the text and its escapes).
    pub max_reply_bytes: usize,
    /// The model's context window in tokens (for the agent loop's compaction).
    pub context_window: u64,
    /// Prices for [`super::ChatModel::cost_usd`].
    pub prices: PriceTable,
    /// What every request carries: `temperature` and `seed` only when set;
    /// `max_tokens` [`DEFAULT_MAX_TOKENS`] unless configured, `None` sending
    /// none (the server's own limit); `tool_choice` when tools are offered,
    /// `None` sending `auto` (requests without tools never carry one).
    pub sampling: Sampling,
    /// How tool calls are asked for ([`ToolCalling`], default `auto`).
    pub tool_calling: ToolCalling,
    /// Where a constrained turn's schema goes ([`ConstrainedDialect`]).
    pub constrained_dialect: ConstrainedDialect,
    /// Cap on the tokens of a constrained turn's reply, below
    /// `sampling.max_tokens` ([`DEFAULT_CONSTRAINED_MAX_TOKENS`] unless
    /// configured; `None`: the same cap as every turn).
    pub constrained_max_tokens: Option<u64>,
    /// Whether the prompt is marked for caching ([`PromptCache`]).
    pub prompt_cache: PromptCache,
}

impl fmt::Debug for ModelSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelSettings")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_base_delay", &self.retry_base_delay)
            .field("retry_max_delay", &self.retry_max_delay)
            .field("retry_max_total", &self.retry_max_total)
            .field("stream", &self.stream)
            .field("stream_idle_timeout", &self.stream_idle_timeout)
            .field("first_token_timeout", &self.first_token_timeout)
            .field("prompt_eval_rate", &self.prompt_eval_rate)
            .field("request_deadline", &self.request_deadline)
            .field("max_reply_bytes", &self.max_reply_bytes)
            .field("context_window", &self.context_window)
            .field("sampling", &self.sampling)
            .field("tool_calling", &self.tool_calling)
            .field("constrained_dialect", &self.constrained_dialect)
            .field("constrained_max_tokens", &self.constrained_max_tokens)
            .field("prompt_cache", &self.prompt_cache)
            .finish_non_exhaustive()
    }
}

impl ModelSettings {
    /// The `max_tokens` a constrained turn sends: the smaller of the
    /// turn's cap and `constrained_max_tokens`.
    pub fn constrained_cap(&self) -> Option<u64> {
        match (self.sampling.max_tokens, self.constrained_max_tokens) {
            (Some(all), Some(constrained)) => Some(all.min(constrained)),
            (all, constrained) => all.or(constrained),
        }
    }

    /// Settings for `model` at `base_url` with no key, streaming on, the
    /// built-in prices, default timeouts and retries, `max_tokens`
    /// [`DEFAULT_MAX_TOKENS`] and no other sampling settings.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        ModelSettings {
            provider: Provider::OpenAiChat,
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            retry_base_delay: DEFAULT_RETRY_BASE_DELAY,
            retry_max_delay: DEFAULT_RETRY_MAX_DELAY,
            retry_max_total: DEFAULT_RETRY_MAX_TOTAL,
            stream: true,
            stream_idle_timeout: DEFAULT_STREAM_IDLE_TIMEOUT,
            first_token_timeout: DEFAULT_FIRST_TOKEN_TIMEOUT,
            prompt_eval_rate: DEFAULT_PROMPT_EVAL_RATE,
            request_deadline: DEFAULT_REQUEST_DEADLINE,
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
            context_window: DEFAULT_CONTEXT_WINDOW,
            prices: PriceTable::builtin(),
            sampling: Sampling {
                max_tokens: Some(DEFAULT_MAX_TOKENS),
                ..Sampling::default()
            },
            tool_calling: ToolCalling::Auto,
            constrained_dialect: ConstrainedDialect::OpenAi,
            constrained_max_tokens: Some(DEFAULT_CONSTRAINED_MAX_TOKENS),
            prompt_cache: PromptCache::Auto,
        }
    }

    /// Resolves settings from command-line flags and the environment only
    /// (no config file; see [`crate::config`] for the full resolution).
    ///
    /// Flags win over env. The environment is read through `env` so callers
    /// (and tests) decide where it comes from: `ORCH_BASE_URL`, `ORCH_MODEL`,
    /// `ORCH_API_KEY` (fallback `OPENAI_API_KEY`). Empty values count as unset.
    pub fn resolve(
        base_url: Option<String>,
        model: Option<String>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ModelSettings, LlmError> {
        let non_empty =
            |v: Option<String>| v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
        let base_url = non_empty(base_url)
            .or_else(|| non_empty(env("ORCH_BASE_URL")))
            .ok_or_else(|| {
                LlmError::Config(
                    "no model server is set: pass --base-url URL or set ORCH_BASE_URL \
                 (e.g. https://api.openai.com/v1, or http://localhost:11434/v1 for Ollama)"
                        .to_owned(),
                )
            })?;
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(LlmError::Config(format!(
                "the base URL `{base_url}` (from --base-url or ORCH_BASE_URL) must start with http:// or https://"
            )));
        }
        let model = non_empty(model)
            .or_else(|| non_empty(env("ORCH_MODEL")))
            .ok_or_else(|| {
                LlmError::Config(
                    "no model name is set: pass --model NAME or set ORCH_MODEL (e.g. gpt-4o-mini)"
                        .to_owned(),
                )
            })?;
        let api_key = non_empty(env("ORCH_API_KEY")).or_else(|| non_empty(env("OPENAI_API_KEY")));
        Ok(ModelSettings {
            api_key,
            ..ModelSettings::new(base_url, model)
        })
    }

    /// The full URL requests go to: the provider's path under `base_url`
    /// (`WireFormat::endpoint`); the base URL itself for a provider this
    /// build cannot speak.
    pub fn endpoint(&self) -> String {
        match super::openai::wire_format(self.provider) {
            Some(format) => format.endpoint(&self.base_url),
            None => self.base_url.clone(),
        }
    }

    /// Most bytes read of a non-streamed body, or held of one SSE event:
    /// twice [`Self::max_reply_bytes`] plus 64 KiB (JSON escapes can double
    /// text; the envelope is small).
    pub fn max_body_bytes(&self) -> usize {
        self.max_reply_bytes
            .saturating_mul(2)
            .saturating_add(64 << 10)
    }

    /// How long a stream may send no `data` line before its first one, for a
    /// request of `request_bytes`: a server evaluating the prompt streams
    /// nothing until the first token. The rule: `first_token_timeout` plus
    /// the prompt's tokens (`request_bytes / 4`) at `prompt_eval_rate`, and
    /// never less than `stream_idle_timeout`. With the defaults, 60 s plus
    /// 1 s for every 20 bytes: a 3.4 KB first request waits 230 s, a 32 KB
    /// one 1,698 s (then `request_deadline`, 600 s, ends it first).
    pub fn first_token_wait(&self, request_bytes: usize) -> FirstTokenWait {
        let tokens = (request_bytes / BYTES_PER_TOKEN) as f64;
        let rate = if self.prompt_eval_rate.is_finite() && self.prompt_eval_rate > 0.0 {
            self.prompt_eval_rate
        } else {
            DEFAULT_PROMPT_EVAL_RATE
        };
        let allowance = Duration::try_from_secs_f64(tokens / rate).unwrap_or(Duration::MAX);
        FirstTokenWait {
            wait: self
                .first_token_timeout
                .saturating_add(allowance)
                .max(self.stream_idle_timeout),
            tokens: tokens as u64,
            rate,
            base: self.first_token_timeout,
            idle: self.stream_idle_timeout,
        }
    }

    /// The retry bounds these settings describe.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_retries: self.max_retries,
            base_delay: self.retry_base_delay,
            max_delay: self.retry_max_delay,
            max_total: self.retry_max_total,
        }
    }
}

/// `1.5s`, `250ms`.
pub(crate) fn human_duration(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{}s", d.as_secs_f64())
    } else {
        format!("{}ms", d.as_millis())
    }
}

impl FirstTokenWait {
    /// The wait as a message shows it, to a tenth of a second (`4.4s`).
    pub fn shown(&self) -> String {
        let tenths = (self.wait.as_millis() + 50) / 100;
        human_duration(Duration::from_millis(
            u64::try_from(tenths * 100).unwrap_or(u64::MAX),
        ))
    }
}

/// The wait for a stream's first `data` line and how it was reckoned
/// ([`ModelSettings::first_token_wait`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FirstTokenWait {
    /// The wait.
    pub wait: Duration,
    /// The prompt's estimated tokens.
    pub tokens: u64,
    /// The assumed rate, tokens per second.
    pub rate: f64,
    /// `first_token_timeout`.
    pub base: Duration,
    /// `stream_idle_timeout` (the least the wait is).
    pub idle: Duration,
}

impl fmt::Display for FirstTokenWait {
    /// How the wait was reckoned, for an error message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "first_token_timeout {} + ~{} prompt tokens at prompt_eval_rate {} tokens/s, at least stream_idle_timeout {}",
            human_duration(self.base),
            self.tokens,
            self.rate,
            human_duration(self.idle)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn flags_win_over_env_and_key_falls_back() {
        let env = env_of(&[
            ("ORCH_BASE_URL", "http://env/v1"),
            ("ORCH_MODEL", "env-model"),
            ("OPENAI_API_KEY", "sk-openai"),
        ]);
        let s = ModelSettings::resolve(Some("http://flag/v1/".into()), None, &env).unwrap();
        assert_eq!(s.base_url, "http://flag/v1/");
        assert_eq!(s.model, "env-model");
        assert_eq!(s.api_key.as_deref(), Some("sk-openai"));
        assert_eq!(s.endpoint(), "http://flag/v1/chat/completions");
        assert!(!format!("{s:?}").contains("sk-openai"));

        let env = env_of(&[("ORCH_API_KEY", "sk-orch"), ("OPENAI_API_KEY", "sk-openai")]);
        let s =
            ModelSettings::resolve(Some("https://x/v1".into()), Some("m".into()), &env).unwrap();
        assert_eq!(s.api_key.as_deref(), Some("sk-orch"));
        assert_eq!(s.max_retries, DEFAULT_MAX_RETRIES);
    }

    #[test]
    fn the_first_token_wait_grows_with_the_prompt_and_is_at_least_the_idle_timeout() {
        let mut s = ModelSettings::new("http://x/v1", "m");
        // 60 s + 3400 / 4 = 850 tokens at 5 tokens/s = 170 s.
        assert_eq!(s.first_token_wait(3400).wait, Duration::from_secs(230));
        assert_eq!(s.first_token_wait(0).wait, Duration::from_secs(60));
        s.stream_idle_timeout = Duration::from_secs(600);
        assert_eq!(s.first_token_wait(3400).wait, Duration::from_secs(600));
        s.stream_idle_timeout = Duration::from_secs(1);
        s.first_token_timeout = Duration::from_secs(2);
        s.prompt_eval_rate = 100.0;
        let w = s.first_token_wait(4000);
        assert_eq!(w.wait, Duration::from_secs(12));
        assert_eq!(
            w.to_string(),
            "first_token_timeout 2s + ~1000 prompt tokens at prompt_eval_rate 100 tokens/s, at least stream_idle_timeout 1s"
        );
    }

    #[test]
    fn missing_settings_name_flag_and_env() {
        let none = |_: &str| None;
        let err = ModelSettings::resolve(None, Some("m".into()), &none)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--base-url") && err.contains("ORCH_BASE_URL"),
            "{err}"
        );
        let err = ModelSettings::resolve(Some("http://x/v1".into()), Some("  ".into()), &none)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--model") && err.contains("ORCH_MODEL"),
            "{err}"
        );
        let err = ModelSettings::resolve(Some("localhost:8080".into()), Some("m".into()), &none)
            .unwrap_err()
            .to_string();
        assert!(err.contains("http://"), "{err}");
    }
}
