//! What the settings table and the resolver share: the errors, where a
//! value came from, the flags, and the file format as parsed.

use crate::llm::price::Price;
use crate::llm::settings::{ConstrainedDialect, Sampling, ToolCalling, ToolChoice};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use toml::Spanned;

/// Errors reading or applying `orch.toml`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Bad TOML, an unknown key or a wrong type.
    #[error("read {path}:{line}:{column}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// A value is well-typed but unusable.
    #[error("use {at}: {message}")]
    Invalid {
        /// Where the value came from.
        at: Source,
        /// What is wrong.
        message: String,
    },
    /// An environment variable's value is unusable.
    #[error("use {var}={value}: expected {expected}")]
    EnvValue {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What it must be.
        expected: String,
    },
    /// The selected profile is defined in no file.
    #[error("select profile `{name}` (from {at}): no orch.toml defines it{known}")]
    UnknownProfile {
        /// The profile asked for.
        name: String,
        /// Where it was asked for.
        at: Source,
        /// `; defined: a, b` or `` when none is.
        known: String,
    },
}

/// Where a resolved value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A command-line flag, e.g. `--model`.
    Flag(&'static str),
    /// An environment variable.
    Env(String),
    /// A config file, at a 1-based line.
    File {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
    },
    /// The built-in default.
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag(flag) => write!(f, "flag {flag}"),
            Source::Env(var) => write!(f, "env {var}"),
            Source::File { path, line } => write!(f, "{}:{line}", path.display()),
            Source::Default => f.write_str("default"),
        }
    }
}

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting<T> {
    /// The value.
    pub value: T,
    /// Where it came from.
    pub source: Source,
}

/// What the command line asks for (the environment is passed separately).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--provider`.
    pub provider: Option<String>,
    /// `--base-url`.
    pub base_url: Option<String>,
    /// `--model`.
    pub model: Option<String>,
    /// `--profile`.
    pub profile: Option<String>,
    /// `--no-stream`.
    pub no_stream: bool,
    /// `--temperature`, `--seed`, `--max-output-tokens` (0: send no cap)
    /// and `--tool-choice`.
    pub sampling: Sampling,
}

/// Highest `temperature` accepted (OpenAI's documented range is 0 to 2, and
/// the local servers orch is used with share it).
pub const MAX_TEMPERATURE: f64 = 2.0;

/// `sk-proj-abcdef123456` → `sk-****3456`; short values → `****`.
pub fn mask_secret(secret: &str) -> String {
    let chars: Vec<char> = secret.chars().collect();
    if chars.len() < 12 {
        return "****".to_owned();
    }
    let prefix: String = match secret.find('-') {
        Some(i) if i <= 4 => secret[..=i].to_owned(),
        _ => String::new(),
    };
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{prefix}****{tail}")
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSpec {
    #[serde(default)]
    pub(super) default_profile: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) profiles: BTreeMap<String, Spanned<ProfileSpec>>,
    #[serde(default)]
    pub(super) prices: BTreeMap<String, Spanned<Price>>,
    /// `[sandbox]`: read by [`crate::sandbox::SandboxSettings`].
    #[serde(default)]
    #[allow(dead_code)]
    pub(super) sandbox: Option<toml::Value>,
    /// `[setup]`: the repository's lane setup command, read by [`lane_setup`].
    #[serde(default)]
    #[allow(dead_code)]
    pub(super) setup: Option<toml::Value>,
    /// `[mcp]`: MCP servers, read by `crate::mcp::McpConfig`.
    #[serde(default)]
    #[allow(dead_code)]
    pub(super) mcp: Option<toml::Value>,
    /// `[forge]`: read by `crate::forge::ForgeSettings`.
    #[serde(default)]
    #[allow(dead_code)]
    pub(super) forge: Option<toml::Value>,
    /// `[models] aliases = { sonnet = "qwen2.5-coder" }`: what a role's
    /// `model:` is sent as.
    #[serde(default)]
    pub(super) models: ModelsSpec,
    /// `memory = "off" | "propose" | "auto-accept"` (see `docs/memory.md`).
    #[serde(default)]
    pub(super) memory: Option<Spanned<crate::memory::MemoryMode>>,
    /// `[lanes] pool = N`: how many warm lanes the repository keeps.
    #[serde(default)]
    pub(super) lanes: LanesSpec,
    /// `[hooks]` and `trust_hooks`: read by `crate::hooks::config`.
    #[serde(default)]
    #[allow(dead_code)]
    pub(super) hooks: Option<toml::Value>,
    #[serde(default)]
    #[allow(dead_code)]
    pub(super) trust_hooks: Option<toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LanesSpec {
    #[serde(default)]
    pub(super) pool: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ModelsSpec {
    #[serde(default)]
    pub(super) aliases: BTreeMap<String, String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProfileSpec {
    /// `openai-chat`, `anthropic` or `openai-responses` (checked by the
    /// table, so a bad value names the file and line).
    #[serde(default)]
    pub(super) provider: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) base_url: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) model: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) api_key_env: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) context_window: Option<Spanned<u64>>,
    #[serde(default)]
    pub(super) stream: Option<Spanned<bool>>,
    /// Seconds.
    #[serde(default)]
    pub(super) stream_idle_timeout: Option<Spanned<f64>>,
    /// Seconds.
    #[serde(default)]
    pub(super) first_token_timeout: Option<Spanned<f64>>,
    /// Tokens per second.
    #[serde(default)]
    pub(super) prompt_eval_rate: Option<Spanned<f64>>,
    /// Seconds.
    #[serde(default)]
    pub(super) request_timeout: Option<Spanned<f64>>,
    /// Seconds.
    #[serde(default)]
    pub(super) connect_timeout: Option<Spanned<f64>>,
    #[serde(default)]
    pub(super) max_retries: Option<Spanned<u32>>,
    /// Seconds.
    #[serde(default)]
    pub(super) retry_max_total: Option<Spanned<f64>>,
    /// Seconds.
    #[serde(default)]
    pub(super) request_deadline: Option<Spanned<f64>>,
    #[serde(default)]
    pub(super) max_reply_bytes: Option<Spanned<u64>>,
    #[serde(default)]
    pub(super) prices: Option<Spanned<Price>>,
    #[serde(default)]
    pub(super) temperature: Option<Spanned<f64>>,
    #[serde(default)]
    pub(super) seed: Option<Spanned<u64>>,
    /// 0: send no cap.
    #[serde(default)]
    pub(super) max_tokens: Option<Spanned<u64>>,
    #[serde(default)]
    pub(super) tool_choice: Option<Spanned<ToolChoice>>,
    /// `auto`, `native`, `constrained` or `text`.
    #[serde(default)]
    pub(super) tool_calling: Option<Spanned<ToolCalling>>,
    /// `openai`, `llamacpp`, `vllm` or `ollama`.
    #[serde(default)]
    pub(super) constrained_dialect: Option<Spanned<ConstrainedDialect>>,
    /// 0: no cap of its own (the same as `max_tokens`).
    #[serde(default)]
    pub(super) constrained_max_tokens: Option<Spanned<u64>>,
    /// `auto`, `on` or `off`.
    #[serde(default)]
    pub(super) prompt_cache: Option<Spanned<crate::llm::PromptCache>>,
}

/// One parsed file, with its text for turning spans into lines.
pub(super) struct LoadedFile {
    pub(super) path: PathBuf,
    pub(super) text: String,
    pub(super) spec: FileSpec,
}

impl LoadedFile {
    pub(super) fn at(&self, span: std::ops::Range<usize>) -> Source {
        Source::File {
            path: self.path.clone(),
            line: line_col(&self.text, span.start).0,
        }
    }

    pub(super) fn setting<T: Clone>(&self, v: &Spanned<T>) -> Setting<T> {
        Setting {
            value: v.get_ref().clone(),
            source: self.at(v.span()),
        }
    }
}

/// 1-based line and column (in characters) of byte `offset`.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}
