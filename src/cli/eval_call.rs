//! `orch eval call --request FILE`: one model request with the tools a
//! file gives, through orch's own client (retries, timeouts, the profile's
//! sampling) and its recovery of tool calls written as text — the path one
//! agent turn takes. For tool-call benchmarks (`examples/llamacpp/bfcl_tier.py`
//! sends each BFCL question through it); prints the calls as JSON.

use super::args::ModelArgs;
use super::error::CliError;
use super::model::choose_for_repo;
use super::output::{Out, ignore_closed};
use crate::llm::{ChatMessage, ChatRequest, ToolDef};
use serde::Deserialize;
use serde_json::{Value, json};
use std::path::PathBuf;

/// Arguments of `orch eval call`.
#[derive(Debug, clap::Args)]
pub struct EvalCallArgs {
    /// JSON: {"messages": [{"role": "system"|"user", "content": "…"}], "tools": [{"name", "description", "parameters"}]}
    #[arg(long, value_name = "FILE")]
    pub request: PathBuf,
    /// Model settings.
    #[command(flatten)]
    pub model: ModelArgs,
}

#[derive(Deserialize)]
struct RequestFile {
    messages: Vec<MessageSpec>,
    #[serde(default)]
    tools: Vec<ToolSpec>,
}

#[derive(Deserialize)]
struct MessageSpec {
    role: String,
    content: String,
}

#[derive(Deserialize)]
struct ToolSpec {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default = "empty_object")]
    parameters: Value,
}

fn empty_object() -> Value {
    json!({"type": "object", "properties": {}})
}

/// Runs `orch eval call`: prints `{"tool_calls": [{"name", "arguments"}],
/// "content", "recovered_from", "finish_reason", "prompt_tokens",
/// "completion_tokens", "latency_ms"}`.
pub(super) async fn cmd_eval_call(args: EvalCallArgs) -> Result<i32, CliError> {
    let bad = |e: String| {
        CliError::Invalid(format!(
            "failed to use the request {}: {e}",
            args.request.display()
        ))
    };
    let text = std::fs::read_to_string(&args.request).map_err(|e| bad(e.to_string()))?;
    let file: RequestFile = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let mut messages = Vec::new();
    for (i, m) in file.messages.into_iter().enumerate() {
        messages.push(match m.role.as_str() {
            "system" => ChatMessage::system(m.content),
            "user" => ChatMessage::user(m.content),
            other => {
                return Err(bad(format!(
                    "messages[{i}]: role `{other}` (system or user expected)"
                )));
            }
        });
    }
    // `ToolDef` holds `&'static str` (the built-in tools are constants);
    // this process makes one request and exits, so the few names and
    // descriptions of the file are leaked on purpose.
    let tools: Vec<ToolDef> = file
        .tools
        .into_iter()
        .map(|t| ToolDef {
            name: Box::leak(t.name.into_boxed_str()),
            description: Box::leak(t.description.into_boxed_str()),
            parameters: t.parameters,
        })
        .collect();
    let chosen = choose_for_repo(&args.model, None)?;
    super::preflight::check(chosen.model.as_ref()).await?;
    let req = ChatRequest {
        messages,
        tools: tools.clone(),
        agent_path: "eval-call".to_owned(),
        // As the profile's first turn asks (`tool_calling`): a profile set to
        // `constrained` gets the one-call schema, so the tier measures it.
        call_mode: chosen.model.tool_calling().first_mode(),
    };
    let started = std::time::Instant::now();
    let resp = chosen.model.complete(&req).await.map_err(CliError::Model)?;
    let latency_ms = started.elapsed().as_millis() as u64;
    let mut message = resp.message;
    let recovered =
        crate::llm::textcalls::recover_into(&mut message, &tools, "text").map(|(_, from)| from);
    let calls: Vec<Value> = message
        .tool_calls
        .iter()
        .map(|c| {
            let arguments = serde_json::from_str::<Value>(&c.function.arguments)
                .unwrap_or_else(|_| Value::String(c.function.arguments.clone()));
            json!({"name": c.function.name, "arguments": arguments})
        })
        .collect();
    let report = json!({
        "tool_calls": calls,
        "content": message.content,
        "recovered_from": recovered,
        "finish_reason": resp.finish_reason,
        "prompt_tokens": resp.usage.prompt_tokens,
        "completion_tokens": resp.usage.completion_tokens,
        "latency_ms": latency_ms,
    });
    let mut out = Out::stdout();
    ignore_closed(writeln!(out, "{report}").and_then(|()| out.finish()))?;
    Ok(crate::exit::OK)
}
