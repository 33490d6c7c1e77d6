//! The fake server's Anthropic mode: a request to `…/v1/messages` is an
//! Anthropic Messages request. It is checked as the real API checks it
//! ([`api_violations`], and the tool pairing of [`as_chat_messages`]), and
//! the same scripted [`super::Reply`]s answer it, translated: a
//! [`super::Reply::Message`] becomes a Messages reply (a `message` object,
//! or with `"stream": true` the event stream `message_start`,
//! `content_block_start` / `ping` / `content_block_delta`… /
//! `content_block_stop` per block, `message_delta`, `message_stop`), with
//! `stop_reason` `tool_use` or `end_turn`. A scripted usage in Chat
//! Completions form (`prompt_tokens`, `completion_tokens`,
//! `prompt_tokens_details.cached_tokens`) becomes `input_tokens` (the
//! uncached part), `cache_read_input_tokens` and `output_tokens`; a usage
//! already in Messages form (`input_tokens`, …) is sent as it is. Raw,
//! status and SSE replies are sent verbatim (recorded wire fixtures).

use super::http::{Answer, SseEnd};
use super::script::pieces;
use serde_json::{Value, json};

/// The marker [`super::script::render`] reads to answer in this mode.
pub(super) const MARKER: &str = "__fake_server_wire";

/// Whether a request to `path` is a Messages request.
pub(super) fn is_messages(path: &str) -> bool {
    path.ends_with("/v1/messages")
}

/// `body` marked so that rendering answers in the Messages format.
pub(super) fn marked(body: &Value) -> Value {
    let mut marked = body.clone();
    if let Some(obj) = marked.as_object_mut() {
        obj.insert(MARKER.to_owned(), json!("anthropic"));
    }
    marked
}

/// Whether a (marked) request is answered in the Messages format.
pub(super) fn wants_messages(request: &Value) -> bool {
    request[MARKER] == "anthropic"
}

/// What the real API would refuse in a Messages request body.
pub(super) fn api_violations(body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if body["max_tokens"].as_u64().is_none_or(|n| n == 0) {
        problems.push("`max_tokens` is required".to_owned());
    }
    if !body["model"].is_string() {
        problems.push("`model` is required".to_owned());
    }
    let Some(messages) = body["messages"].as_array() else {
        problems.push("`messages` is required".to_owned());
        return problems;
    };
    let mut breakpoints = 0;
    let mut count = |v: &Value| {
        if v.get("cache_control").is_some() {
            breakpoints += 1;
        }
    };
    for tool in body["tools"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        if !tool["name"].is_string() || !tool["input_schema"].is_object() {
            problems.push(format!("a tool is not {{name, input_schema}}: {tool}"));
        }
        count(tool);
    }
    match &body["system"] {
        Value::Null | Value::String(_) => {}
        Value::Array(blocks) => blocks.iter().for_each(&mut count),
        other => problems.push(format!("`system` is neither text nor blocks: {other}")),
    }
    let mut last_role = "";
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        if role != "user" && role != "assistant" {
            problems.push(format!(
                "messages.{i}: role {role:?} is not user or assistant"
            ));
        }
        if i == 0 && role != "user" {
            problems.push("the first message must be a user message".to_owned());
        }
        if role == last_role {
            problems.push(format!("messages.{i}: two {role} messages in a row"));
        }
        last_role = role;
        let blocks: Vec<Value> = match &m["content"] {
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(b) => b.clone(),
            other => {
                problems.push(format!("messages.{i}: content is {other}"));
                continue;
            }
        };
        if blocks.is_empty() {
            problems.push(format!("messages.{i}: no content"));
        }
        let mut seen_other = false;
        for (j, b) in blocks.iter().enumerate() {
            count(b);
            match b["type"].as_str() {
                Some("text") => {
                    if b["text"].as_str().is_none_or(|t| t.trim().is_empty()) {
                        problems.push(format!(
                            "messages.{i}.content.{j}: text content blocks must contain non-whitespace text"
                        ));
                    }
                    seen_other = true;
                }
                Some("tool_result") => {
                    if role != "user" || seen_other {
                        problems.push(format!(
                            "messages.{i}.content.{j}: tool_result blocks must come first in a user message"
                        ));
                    }
                }
                Some("tool_use") => {
                    if role != "assistant" || !b["input"].is_object() {
                        problems.push(format!(
                            "messages.{i}.content.{j}: a tool_use block belongs to an assistant message and has an object input"
                        ));
                    }
                    seen_other = true;
                }
                other => problems.push(format!("messages.{i}.content.{j}: block type {other:?}")),
            }
        }
    }
    if breakpoints > 4 {
        problems.push(format!(
            "{breakpoints} cache_control blocks: at most 4 are allowed"
        ));
    }
    problems
}

/// The conversation in Chat Completions form (system, user, assistant with
/// `tool_calls`, `tool` results), for the tool-pairing checks.
pub(super) fn as_chat_messages(body: &Value) -> Value {
    let mut out = Vec::new();
    for m in body["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        let role = m["role"].as_str().unwrap_or("");
        let blocks = m["content"].as_array().cloned().unwrap_or_default();
        if role == "assistant" {
            let calls: Vec<Value> = blocks
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .map(|b| {
                    json!({"id": b["id"], "type": "function",
                    "function": {"name": b["name"], "arguments": b["input"].to_string()}})
                })
                .collect();
            out.push(json!({"role": "assistant", "content": "", "tool_calls": calls}));
            continue;
        }
        for b in &blocks {
            if b["type"] == "tool_result" {
                out.push(json!({"role": "tool", "tool_call_id": b["tool_use_id"], "content": b["content"]}));
            }
        }
        if blocks.iter().any(|b| b["type"] != "tool_result") || blocks.is_empty() {
            out.push(json!({"role": "user", "content": "…"}));
        }
    }
    Value::Array(out)
}

/// Messages usage from a scripted usage (see the module docs).
fn usage_of(usage: Option<&Value>) -> Value {
    let Some(u) = usage else {
        return json!({"input_tokens": 0, "output_tokens": 0});
    };
    if u.get("input_tokens").is_some() {
        return u.clone();
    }
    let prompt = u["prompt_tokens"].as_u64().unwrap_or(0);
    let cached = u
        .pointer("/prompt_tokens_details/cached_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    json!({
        "input_tokens": prompt.saturating_sub(cached),
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
        "output_tokens": u["completion_tokens"].as_u64().unwrap_or(0),
    })
}

/// The content blocks of a scripted assistant message.
fn blocks_of(message: &Value) -> Vec<Value> {
    let mut blocks = Vec::new();
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        blocks.push(json!({"type": "text", "text": text}));
    }
    for call in message["tool_calls"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        let args = call["function"]["arguments"].as_str().unwrap_or("{}");
        let input: Value = serde_json::from_str(args).unwrap_or_else(|_| json!({"_raw": args}));
        blocks.push(json!({"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": input}));
    }
    blocks
}

/// A scripted [`super::Reply::Message`] as a Messages answer, streamed when
/// the request asks.
pub(super) fn render_message(message: &Value, usage: Option<&Value>, request: &Value) -> Answer {
    let blocks = blocks_of(message);
    let stop = if blocks.iter().any(|b| b["type"] == "tool_use") {
        "tool_use"
    } else {
        "end_turn"
    };
    let usage = usage_of(usage);
    if request["stream"] != json!(true) {
        let reply = json!({
            "id": "msg_fake", "type": "message", "role": "assistant",
            "model": request["model"], "content": blocks,
            "stop_reason": stop, "stop_sequence": null, "usage": usage,
        });
        return Answer::Send {
            status: 200,
            content_type: "application/json",
            extra: Vec::new(),
            body: reply.to_string(),
        };
    }
    Answer::Sse {
        chunks: sse_events(&blocks, stop, &usage, request),
        end: SseEnd::Finish,
    }
}

/// A reply as Anthropic streams it (see the module docs).
fn sse_events(blocks: &[Value], stop: &str, usage: &Value, request: &Value) -> Vec<Vec<u8>> {
    let mut start_usage = usage.clone();
    start_usage["output_tokens"] = json!(1);
    let mut events = vec![
        json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message",
            "role": "assistant", "model": request["model"], "content": [],
            "stop_reason": null, "stop_sequence": null, "usage": start_usage}}),
        json!({"type": "ping"}),
    ];
    for (index, block) in blocks.iter().enumerate() {
        if block["type"] == "text" {
            events.push(json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "text", "text": ""}}));
            for piece in pieces(block["text"].as_str().unwrap_or(""), 3) {
                events.push(json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "text_delta", "text": piece}}));
            }
        } else {
            events.push(json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}));
            let json = block["input"].to_string();
            let size = json.chars().count().div_ceil(3).max(1);
            for piece in pieces(&json, size) {
                events.push(json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece}}));
            }
        }
        events.push(json!({"type": "content_block_stop", "index": index}));
    }
    events.push(json!({"type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": null},
        "usage": {"output_tokens": usage["output_tokens"]}}));
    events.push(json!({"type": "message_stop"}));
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")).into_bytes())
        .collect()
}
