//! MCP in replay files: what a recorded run's stages got of MCP (the tool
//! definitions of their `mcp_servers` event) and each MCP call's result (its
//! tool message in the transcript), so a replay offers the same tools and
//! answers the same calls with no server running.
//!
//! The `mcp` key of an `orch-replay/1` file: stage id → `{"tools": [...],
//! "calls": [{"name", "arguments", "content", "is_error"}]}`.

use crate::llm::{ChatMessage, MessageRole};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

/// The `mcp` value for the stages (agents without `/`) of `transcripts`,
/// whose action logs are under `run_root/stages/<id>/actions.jsonl`.
pub(crate) fn recorded(run_root: &Path, transcripts: &BTreeMap<String, Vec<ChatMessage>>) -> Value {
    let mut out = serde_json::Map::new();
    for (agent, messages) in transcripts.iter().filter(|(a, _)| !a.contains('/')) {
        let log = run_root.join("stages").join(agent).join("actions.jsonl");
        let tools = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["event"] == "mcp_servers")
            .map(|v| v["tools"].clone());
        let Some(tools) = tools else {
            continue;
        };
        out.insert(
            agent.clone(),
            json!({"tools": tools, "calls": calls(messages)}),
        );
    }
    Value::Object(out)
}

/// Each MCP call of `messages` with the result its tool message holds.
fn calls(messages: &[ChatMessage]) -> Vec<Value> {
    let results: BTreeMap<&str, &str> = messages
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .filter_map(|m| Some((m.tool_call_id.as_deref()?, m.content.as_deref()?)))
        .collect();
    messages
        .iter()
        .filter(|m| m.role == MessageRole::Assistant)
        .flat_map(|m| &m.tool_calls)
        .filter(|c| c.function.name.starts_with(super::PREFIX))
        .filter_map(|c| {
            let content = *results.get(c.id.as_str())?;
            let prefix = format!("error: {}: ", c.function.name);
            let (content, is_error) = match content.strip_prefix(&prefix) {
                Some(rest) => (rest, true),
                None => (content, false),
            };
            let arguments =
                serde_json::from_str::<Value>(&c.function.arguments).unwrap_or_else(|_| json!({}));
            Some(json!({
                "name": c.function.name,
                "arguments": arguments,
                "content": content,
                "is_error": is_error,
            }))
        })
        .collect()
}
