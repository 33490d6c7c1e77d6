//! The request body of the Messages API, from the internal [`ChatRequest`],
//! with the prompt-cache breakpoints.
//!
//! Translation:
//! - the leading system message becomes the top-level `system` (one text
//!   block); a system message later in the conversation (orch sends none
//!   today) becomes user text, as Messages has no system role there;
//! - an assistant message becomes a text block (when it has text) and one
//!   `tool_use` block per call, its `input` the parsed arguments (arguments
//!   that are not a JSON object are sent as `{"_unparsed_arguments": text}`:
//!   the API takes only objects, and the tool already answered the model
//!   that they were malformed);
//! - tool results become `tool_result` blocks of a user message, before any
//!   user text of the same turn; consecutive messages of one role are merged
//!   into one message, so roles alternate as the API requires;
//! - an empty text (which the API refuses) is left out, and a message left
//!   with no block says `(no content)`;
//! - tools are `{name, description, input_schema}`; `tool_choice` `auto` is
//!   `{"type":"auto"}`, `required` is `{"type":"any"}`, and both are sent only
//!   with tools; `max_tokens` is always sent (the API requires it: the
//!   profile's, else [`DEFAULT_MAX_TOKENS`]); `temperature` when set; `seed`
//!   never (the API has none).
//!
//! Prompt caching ([`breakpoints`]): `cache_control: {"type":"ephemeral"}`
//! (the default 5-minute TTL; orch never asks for the 1-hour one) on the last
//! tool, on the system block and on the last block of the last message, each
//! only when the prompt up to it reaches the model's minimum cacheable length
//! ([`min_cacheable_tokens`]) and caching is on for the stage
//! ([`crate::llm::PromptCache`]).

use super::super::constrained;
use super::super::settings::{CallMode, DEFAULT_MAX_TOKENS, ModelSettings, ToolChoice};
use super::super::{BYTES_PER_TOKEN, ChatMessage, ChatRequest, MessageRole, ToolDef};
use serde::Serialize;
use serde_json::{Value, json};

/// The smallest prompt (in tokens, up to a breakpoint) the API caches for
/// `model`: 2,048 for Haiku-class models, 1,024 for the others (Anthropic's
/// prompt-caching documentation). A breakpoint below it would be ignored by
/// the API; orch sends none.
pub fn min_cacheable_tokens(model: &str) -> u64 {
    if model.to_ascii_lowercase().contains("haiku") {
        2048
    } else {
        1024
    }
}

/// The request body as sent.
#[derive(Serialize)]
pub(super) struct Body<'a> {
    model: &'a str,
    max_tokens: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Value>,
    messages: Vec<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

/// The body for `req`; `cache` says whether breakpoints may be placed.
pub(super) fn body<'a>(
    settings: &'a ModelSettings,
    req: &ChatRequest,
    stream: bool,
    cache: bool,
) -> Body<'a> {
    let mode = constrained::effective_mode(req);
    // Constrained and text turns send no tools: the tools are described in
    // the system prompt (the Messages API has no `response_format`, so a
    // constrained turn is a text turn whose JSON reply is taken as the call).
    let tools: &[ToolDef] = match mode {
        CallMode::Native => &req.tools,
        CallMode::Constrained | CallMode::Text => &[],
    };
    let catalogue = (mode != CallMode::Native)
        .then(|| constrained::system_with_catalogue(&req.messages, &req.tools));
    let mut rest = req.messages.as_slice();
    let mut system_text = String::new();
    if let Some(first) = rest.first()
        && first.role == MessageRole::System
    {
        system_text = first.content.clone().unwrap_or_default();
        rest = &rest[1..];
    }
    if let Some(c) = &catalogue {
        system_text = c.content.clone().unwrap_or_default();
    }
    let mut system = Vec::new();
    if !system_text.trim().is_empty() {
        system.push(json!({"type": "text", "text": system_text}));
    }
    let mut tools: Vec<Value> = tools
        .iter()
        .map(
            |t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}),
        )
        .collect();
    let mut messages = messages(rest);
    if cache {
        breakpoints(
            min_cacheable_tokens(&settings.model),
            &mut tools,
            &mut system,
            &mut messages,
        );
    }
    let tool_choice = (!tools.is_empty()).then(|| {
        match settings.sampling.tool_choice.unwrap_or(ToolChoice::Auto) {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::Required => json!({"type": "any"}),
        }
    });
    Body {
        model: &settings.model,
        max_tokens: settings.sampling.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        system,
        messages,
        tools,
        tool_choice,
        temperature: settings.sampling.temperature,
        stream,
    }
}

/// What one marker adds: `{"type": "ephemeral"}`, the default 5-minute TTL.
fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// Estimated tokens of some JSON (serialized bytes / 4, as elsewhere).
fn tokens(v: &impl Serialize) -> u64 {
    (serde_json::to_vec(v).map_or(0, |b| b.len()) / BYTES_PER_TOKEN) as u64
}

/// Places the cache breakpoints: the prompt is cached in the order tools,
/// system, messages, so each breakpoint caches everything before it; one
/// is placed only where that prefix reaches `min` tokens.
pub(super) fn breakpoints(
    min: u64,
    tools: &mut [Value],
    system: &mut [Value],
    messages: &mut [Value],
) {
    let tools_tokens = tokens(&tools);
    let system_tokens = tools_tokens + tokens(&system);
    let all_tokens = system_tokens + tokens(&messages);
    if tools_tokens >= min
        && let Some(last) = tools.last_mut()
    {
        last["cache_control"] = ephemeral();
    }
    if system_tokens >= min
        && let Some(block) = system.last_mut()
    {
        block["cache_control"] = ephemeral();
    }
    if all_tokens >= min
        && let Some(block) = messages
            .last_mut()
            .and_then(|m| m["content"].as_array_mut())
            .and_then(|blocks| blocks.last_mut())
    {
        block["cache_control"] = ephemeral();
    }
}

/// Where a message's blocks go: its API role.
fn api_role(role: MessageRole) -> &'static str {
    match role {
        MessageRole::Assistant => "assistant",
        MessageRole::User | MessageRole::Tool | MessageRole::System => "user",
    }
}

/// The conversation after the system prompt as Messages `messages`.
fn messages(rest: &[ChatMessage]) -> Vec<Value> {
    // (role, tool_result blocks, other blocks): results go first in a user
    // message, as the API requires.
    let mut turns: Vec<(&'static str, Vec<Value>, Vec<Value>)> = Vec::new();
    for m in rest {
        let role = api_role(m.role);
        if turns.last().is_none_or(|(r, _, _)| *r != role) {
            turns.push((role, Vec::new(), Vec::new()));
        }
        let Some((_, results, blocks)) = turns.last_mut() else {
            continue;
        };
        let text = m.content.as_deref().unwrap_or("");
        match m.role {
            MessageRole::Tool => {
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                });
                if !text.is_empty() {
                    block["content"] = json!(text);
                }
                results.push(block);
            }
            MessageRole::Assistant => {
                if !text.trim().is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for call in &m.tool_calls {
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.function.name,
                        "input": input_of(&call.function.arguments),
                    }));
                }
            }
            MessageRole::User | MessageRole::System => {
                if !text.trim().is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
            }
        }
    }
    turns
        .into_iter()
        .map(|(role, mut results, blocks)| {
            results.extend(blocks);
            if results.is_empty() {
                results.push(json!({"type": "text", "text": "(no content)"}));
            }
            json!({"role": role, "content": results})
        })
        .collect()
}

/// A call's arguments as the `input` object the API takes.
fn input_of(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({"_unparsed_arguments": arguments}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{FunctionCall, ToolCall};

    fn settings() -> ModelSettings {
        ModelSettings::new("http://127.0.0.1:9", "claude-sonnet-4-5")
    }

    fn req(system: &str, tools: Vec<ToolDef>) -> ChatRequest {
        let call = ToolCall {
            id: "toolu_1".into(),
            kind: "function".into(),
            function: FunctionCall {
                name: "bash".into(),
                arguments: r#"{"command":"ls"}"#.into(),
            },
        };
        ChatRequest {
            messages: vec![
                ChatMessage::system(system),
                ChatMessage::user("task"),
                ChatMessage {
                    role: MessageRole::Assistant,
                    content: None,
                    tool_calls: vec![call],
                    tool_call_id: None,
                },
                ChatMessage::tool("toolu_1", "a.txt"),
                ChatMessage::user("go on"),
            ],
            tools,
            agent_path: "code".into(),
            call_mode: CallMode::Native,
        }
    }

    fn bash() -> ToolDef {
        ToolDef {
            name: "bash",
            description: "run",
            parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
        }
    }

    fn to_value(b: Body<'_>) -> Value {
        serde_json::to_value(b).unwrap()
    }

    #[test]
    fn tools_results_and_roles_are_translated() {
        let s = settings();
        let v = to_value(body(&s, &req("sys", vec![bash()]), true, true));
        assert_eq!(v["system"], json!([{"type": "text", "text": "sys"}]));
        assert_eq!(v["max_tokens"], 4096);
        assert_eq!(v["stream"], true);
        assert_eq!(
            v["tools"],
            json!([{"name": "bash", "description": "run",
                    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}])
        );
        assert_eq!(v["tool_choice"], json!({"type": "auto"}));
        assert!(v.get("seed").is_none() && v.get("temperature").is_none());
        assert_eq!(
            v["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "task"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                    "name": "bash", "input": {"command": "ls"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"},
                    {"type": "text", "text": "go on"}]},
            ])
        );
        // Small: no breakpoint anywhere.
        assert!(!v.to_string().contains("cache_control"), "{v}");
    }

    #[test]
    fn tool_choice_required_is_any_and_no_tools_send_no_choice() {
        let mut s = settings();
        s.sampling.tool_choice = Some(ToolChoice::Required);
        s.sampling.max_tokens = None;
        s.sampling.temperature = Some(0.2);
        let v = to_value(body(&s, &req("sys", vec![bash()]), false, true));
        assert_eq!(v["tool_choice"], json!({"type": "any"}));
        assert_eq!(v["max_tokens"], 4096, "always sent");
        assert_eq!(v["temperature"], 0.2);
        assert!(v.get("stream").is_none());
        let v = to_value(body(&s, &req("sys", vec![]), false, true));
        assert!(
            v.get("tools").is_none() && v.get("tool_choice").is_none(),
            "{v}"
        );
    }

    #[test]
    fn breakpoints_go_where_the_prefix_reaches_the_minimum() {
        let s = settings();
        // A 6,000-byte system prompt: ~1,500 tokens with the tools, above
        // Sonnet's 1,024 but not Haiku's 2,048.
        let big = "x".repeat(6000);
        let v = to_value(body(&s, &req(&big, vec![bash()]), true, true));
        assert!(
            v["tools"][0].get("cache_control").is_none(),
            "tools alone are small"
        );
        assert_eq!(
            v["system"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
        let last = &v["messages"][2]["content"][1];
        assert_eq!(last["cache_control"], json!({"type": "ephemeral"}), "{v}");
        assert_eq!(v.to_string().matches("cache_control").count(), 2);
        // Caching off for the stage: none.
        let v = to_value(body(&s, &req(&big, vec![bash()]), true, false));
        assert!(!v.to_string().contains("cache_control"));
        // Haiku's minimum is 2,048: the same prompt gets none.
        let haiku = ModelSettings::new("http://127.0.0.1:9", "claude-haiku-4-5");
        let v = to_value(body(&haiku, &req(&big, vec![bash()]), true, true));
        assert!(!v.to_string().contains("cache_control"), "{v}");
        assert_eq!(min_cacheable_tokens("claude-3-5-haiku-latest"), 2048);
        assert_eq!(min_cacheable_tokens("claude-opus-4-1"), 1024);
    }

    #[test]
    fn odd_messages_stay_valid_for_the_api() {
        let s = settings();
        let mut r = req("sys", vec![bash()]);
        r.messages[2].tool_calls[0].function.arguments = "{not json".into();
        r.messages[2].content = Some("  ".into());
        r.messages.push(ChatMessage {
            role: MessageRole::Assistant,
            content: Some(String::new()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        });
        let v = to_value(body(&s, &r, false, false));
        assert_eq!(
            v["messages"][1]["content"],
            json!([{"type": "tool_use", "id": "toolu_1", "name": "bash",
                    "input": {"_unparsed_arguments": "{not json"}}])
        );
        assert_eq!(
            v["messages"][3]["content"],
            json!([{"type": "text", "text": "(no content)"}])
        );
    }
}
