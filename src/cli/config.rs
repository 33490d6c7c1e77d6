//! `orch config`: the resolved model settings and where each came from
//! (flag, env, file:line, default), secrets masked.

use super::args::ModelArgs;
use super::error::CliError;
use super::model::resolve_config;
use super::output::Out;
use crate::config::{ResolvedConfig, Setting, Source, builtin_prices_note, mask_secret};
use crate::exit;
use crate::llm::price::Price;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `orch config`.
#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    /// The repository whose .orch/orch.toml applies
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub json: bool,
    /// Model settings (resolved as `run` and `agent` would).
    #[command(flatten)]
    pub model: ModelArgs,
}

/// One output row: name, shown value (`None` = not set), source or advice.
struct Row {
    name: &'static str,
    value: Option<Value>,
    shown: String,
    source: String,
}

/// `orch config`.
pub(super) fn cmd_config(args: ConfigArgs) -> Result<i32, CliError> {
    let resolved = resolve_config(&args.model, Some(&args.repo))?;
    let rows = rows(&resolved);
    let price = price_of(&resolved);
    let replay = args.model.replay_file();
    let mut stdout = Out::stdout();
    if args.json {
        let mut out = serde_json::Map::new();
        for row in &rows {
            out.insert(
                row.name.to_owned(),
                match &row.value {
                    Some(v) => json!({"value": v, "source": row.source}),
                    None => Value::Null,
                },
            );
        }
        out.insert(
            "price".into(),
            match &price {
                Some((model, p, source)) => json!({
                    "model": model, "prompt_usd_per_mtok": p.prompt,
                    "completion_usd_per_mtok": p.completion,
                    "cache_read_usd_per_mtok": p.cache_read_rate(),
                    "cache_write_usd_per_mtok": p.cache_write_rate(), "source": source,
                }),
                None => Value::Null,
            },
        );
        out.insert(
            "files".into(),
            json!(
                resolved
                    .files
                    .iter()
                    .map(|(p, exists)| json!({"path": p.display().to_string(), "exists": exists}))
                    .collect::<Vec<_>>()
            ),
        );
        out.insert(
            "replay".into(),
            json!(replay.as_ref().map(|p| p.display().to_string())),
        );
        writeln!(stdout, "{}", Value::Object(out))?;
        stdout.finish()?;
        return Ok(exit::OK);
    }
    let mut out = stdout;
    if let Some(file) = &replay {
        writeln!(
            out,
            "replay                {} (recorded responses; no model is called)",
            file.display()
        )?;
    }
    let width = rows.iter().map(|r| r.shown.len()).max().unwrap_or(0).max(8);
    for row in &rows {
        writeln!(
            out,
            "{:<21} {:<width$}  {}",
            row.name, row.shown, row.source
        )?;
    }
    let (shown, source) = match &price {
        Some((model, p, source)) => (
            format!(
                "${} prompt / ${} completion / ${} cache read / ${} cache write per 1M tokens ({model})",
                p.prompt,
                p.completion,
                p.cache_read_rate(),
                p.cache_write_rate()
            ),
            source.clone(),
        ),
        None => (
            "unknown".to_owned(),
            "no price for this model: cost is shown as unknown (add [prices.\"MODEL\"] to orch.toml)"
                .to_owned(),
        ),
    };
    writeln!(out, "{:<21} {shown:<width$}  {source}", "price")?;
    for (path, exists) in &resolved.files {
        let state = if *exists { "read" } else { "not found" };
        writeln!(out, "{:<21} {}  ({state})", "file", path.display())?;
    }
    writeln!(
        out,
        "{:<21} {}",
        "sandbox",
        crate::sandbox::availability().describe()
    )?;
    out.finish()?;
    Ok(exit::OK)
}

fn rows(r: &ResolvedConfig) -> Vec<Row> {
    fn text(name: &'static str, s: &Option<Setting<String>>, unset: &str) -> Row {
        match s {
            Some(s) => Row {
                name,
                value: Some(json!(s.value)),
                shown: s.value.clone(),
                source: s.source.to_string(),
            },
            None => Row {
                name,
                value: None,
                shown: "(not set)".to_owned(),
                source: unset.to_owned(),
            },
        }
    }
    fn plain<T: ToString + serde::Serialize>(name: &'static str, s: &Setting<T>) -> Row {
        Row {
            name,
            value: Some(json!(s.value)),
            shown: s.value.to_string(),
            source: s.source.to_string(),
        }
    }
    fn secs(name: &'static str, s: &Setting<Duration>) -> Row {
        Row {
            name,
            value: Some(json!(s.value.as_secs_f64())),
            shown: format!("{}s", s.value.as_secs_f64()),
            source: s.source.to_string(),
        }
    }
    let key_hint = match &r.api_key_env {
        Some(var) => format!(
            "set ORCH_API_KEY or {} (named by api_key_env at {})",
            var.value, var.source
        ),
        None => format!(
            "set ORCH_API_KEY (or {}); local servers need none",
            r.provider.value.key_var()
        ),
    };
    let api_key = match &r.api_key {
        Some(k) => Row {
            name: "api_key",
            value: Some(json!(mask_secret(&k.value))),
            shown: mask_secret(&k.value),
            source: k.source.to_string(),
        },
        None => Row {
            name: "api_key",
            value: None,
            shown: "(not set)".to_owned(),
            source: key_hint,
        },
    };
    let sampling = |name: &'static str, s: Option<(Value, String, String)>, unset: &str| match s {
        Some((value, shown, source)) => Row {
            name,
            value: Some(value),
            shown,
            source,
        },
        None => Row {
            name,
            value: None,
            shown: "(not set)".to_owned(),
            source: unset.to_owned(),
        },
    };
    let max_tokens = Row {
        name: "max_tokens",
        value: Some(json!(r.max_tokens.value)),
        shown: match r.max_tokens.value {
            Some(n) => n.to_string(),
            None => "none (no cap is sent)".to_owned(),
        },
        source: r.max_tokens.source.to_string(),
    };
    vec![
        text(
            "profile",
            &r.profile,
            "none: --profile, ORCH_PROFILE or default_profile",
        ),
        plain("provider", &r.provider),
        plain("prompt_cache", &r.prompt_cache),
        text(
            "base_url",
            &r.base_url,
            "set --base-url, ORCH_BASE_URL or a profile's base_url",
        ),
        text(
            "model",
            &r.model,
            "set --model, ORCH_MODEL or a profile's model",
        ),
        api_key,
        text("api_key_env", &r.api_key_env, "-"),
        plain("stream", &r.stream),
        plain("context_window", &r.context_window),
        secs("stream_idle_timeout", &r.stream_idle_timeout),
        secs("first_token_timeout", &r.first_token_timeout),
        plain("prompt_eval_rate", &r.prompt_eval_rate),
        secs("request_timeout", &r.request_timeout),
        secs("connect_timeout", &r.connect_timeout),
        plain("max_retries", &r.max_retries),
        secs("retry_max_total", &r.retry_max_total),
        sampling(
            "temperature",
            r.temperature
                .as_ref()
                .map(|t| (json!(t.value), t.value.to_string(), t.source.to_string())),
            "not sent (the server's default): set --temperature or a profile's temperature",
        ),
        sampling(
            "seed",
            r.seed
                .as_ref()
                .map(|t| (json!(t.value), t.value.to_string(), t.source.to_string())),
            "not sent: set --seed or a profile's seed",
        ),
        max_tokens,
        sampling(
            "tool_choice",
            r.tool_choice
                .as_ref()
                .map(|t| (json!(t.value), t.value.to_string(), t.source.to_string())),
            "`auto` is sent with tools: set --tool-choice or a profile's tool_choice",
        ),
    ]
}

/// The price of the resolved model, with the name it was found under and its source.
fn price_of(r: &ResolvedConfig) -> Option<(String, Price, String)> {
    let model = &r.model.as_ref()?.value;
    let (name, price) = r.prices.find(model)?;
    let source = r
        .price_sources
        .get(name)
        .cloned()
        .unwrap_or(Source::Default);
    let source = match source {
        Source::Default => builtin_prices_note(),
        other => other.to_string(),
    };
    Some((name.to_owned(), price, source))
}
