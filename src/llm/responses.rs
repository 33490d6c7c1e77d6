//! The OpenAI Responses wire format (`POST {base_url}/responses`), for
//! OpenAI's reasoning models and Ollama's stateless `/v1/responses`.
//!
//! Pure: no I/O. The HTTP client sends what [`request_body`] builds and
//! gives the answer to [`parse_response`] (plain) or a
//! [`ResponsesAssembler`] (streamed); both yield the same
//! [`Assembled`] the Chat Completions path yields, so everything after the
//! wire (call ids, usage estimates, text-call recovery, the agent loop) is
//! shared.
//!
//! Request (from the internal [`ChatRequest`]):
//! - the leading system message becomes `instructions` (the Responses
//!   field for it: the same text at the same place every turn, so the
//!   server's prefix cache keeps hitting, and no guess between `system` and
//!   `developer` roles, which servers treat differently); a system message
//!   later in the conversation stays an input `message` with role `system`;
//! - user and assistant text become `message` items, an assistant's tool
//!   calls `function_call` items (`call_id`, `name`, `arguments`), tool
//!   results `function_call_output` items (`call_id`, `output`);
//! - tools are `{type: "function", name, description, parameters}`;
//!   `tool_choice` is `auto` or `required` (as configured, `auto` by
//!   default) and only sent with tools; the reply cap is
//!   `max_output_tokens`; `temperature` when set (the Responses API has no
//!   `seed`: it is not sent);
//! - `store: false` always: orch keeps the conversation and sends it whole
//!   every turn; no response is stored and no `previous_response_id` used
//!   (Ollama's endpoint is stateless anyway);
//! - a constrained turn sends no `tools`, the catalogue in `instructions`
//!   and the call schema as `text.format` (`json_schema`); a text turn only
//!   the catalogue.
//! - Nothing in the body depends on the time or on chance: the same
//!   request gives the same bytes.
//!
//! Reply: `message` items' `output_text` (and `refusal`) parts are the text,
//! `function_call` items the calls; `reasoning` items are not text and are
//! left out. `finish_reason` is `tool_calls` when calls came, else `stop`;
//! an `incomplete` response is `length` when the cause is
//! `max_output_tokens` (else the cause as given). Usage: `input_tokens`,
//! `output_tokens`, `input_tokens_details.cached_tokens` (the cache read).
//! A `failed` response, or an `error`, is [`ChunkError::Server`] with the
//! error object, classified by the client as any server error.
//!
//! Bounds: as [`super::stream`]: at most `limit` bytes of text
//! ([`reply_bytes`]) and [`super::stream::MAX_TOOL_CALLS`] calls.

use super::constrained;
use super::settings::{CallMode, Sampling, ToolChoice};
use super::stream::{Assembled, ChunkError, oversize};
use super::{ChatMessage, ChatRequest, FunctionCall, MessageRole, ToolCall, ToolDef, Usage};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The path under the base URL: `{base_url}/responses`.
pub const PATH: &str = "responses";

/// The endpoint for `base_url`.
pub fn endpoint(base_url: &str) -> String {
    format!("{}/{PATH}", base_url.trim_end_matches('/'))
}

/// The JSON body of a Responses request for `req`, streamed or not, for
/// `model` with `sampling` (see the module docs), its keys in a fixed order.
pub fn request_body(model: &str, sampling: &Sampling, req: &ChatRequest, stream: bool) -> Vec<u8> {
    let mode = constrained::effective_mode(req);
    let tools: &[ToolDef] = match mode {
        CallMode::Native => &req.tools,
        CallMode::Constrained | CallMode::Text => &[],
    };
    let catalogue = (mode != CallMode::Native)
        .then(|| constrained::system_with_catalogue(&req.messages, &req.tools));
    let mut rest = req.messages.as_slice();
    let mut instructions: Option<String> = None;
    if let Some(first) = rest.first()
        && first.role == MessageRole::System
    {
        instructions = Some(first.content.clone().unwrap_or_default());
        rest = &rest[1..];
    }
    if let Some(system) = catalogue {
        instructions = system.content;
    }
    let input: Vec<Value> = rest.iter().flat_map(input_items).collect();
    let text = (mode == CallMode::Constrained).then(|| {
        json!({"format": {
            "type": "json_schema",
            "name": constrained::SCHEMA_NAME,
            "schema": constrained::call_schema(&req.tools),
            "strict": false,
        }})
    });
    let body = WireRequest {
        model,
        instructions,
        input,
        tools: tools.iter().map(tool).collect(),
        tool_choice: (!tools.is_empty())
            .then(|| sampling.tool_choice.unwrap_or(ToolChoice::Auto).as_str()),
        temperature: sampling.temperature,
        max_output_tokens: sampling.max_tokens,
        text,
        store: false,
        stream,
    };
    // A struct of plain fields and JSON values always serializes.
    serde_json::to_vec(&body).unwrap_or_default()
}

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<String>,
    input: Vec<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<Value>,
    store: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

/// A tool as the Responses API takes it (flat, not under `function`).
fn tool(t: &ToolDef) -> Value {
    json!({
        "type": "function",
        "name": t.name,
        "description": t.description,
        "parameters": t.parameters,
    })
}

/// The input items of one message.
fn input_items(m: &ChatMessage) -> Vec<Value> {
    let text = m.content.as_deref().unwrap_or("");
    let message = |role: &str| json!({"type": "message", "role": role, "content": text});
    match m.role {
        MessageRole::System => vec![message("system")],
        MessageRole::User => vec![message("user")],
        MessageRole::Tool => vec![json!({
            "type": "function_call_output",
            "call_id": m.tool_call_id.as_deref().unwrap_or(""),
            "output": text,
        })],
        MessageRole::Assistant => {
            let mut items = Vec::with_capacity(m.tool_calls.len() + 1);
            // A tool-call-only turn has no text: no empty message item.
            if !text.is_empty() || m.tool_calls.is_empty() {
                items.push(message("assistant"));
            }
            items.extend(m.tool_calls.iter().map(|c| {
                json!({
                    "type": "function_call",
                    "call_id": c.id,
                    "name": c.function.name,
                    "arguments": c.function.arguments,
                })
            }));
            items
        }
    }
}

/// A `usage` object of the Responses API.
pub fn usage_of(value: &Value) -> Usage {
    let get = |k: &str| value.get(k).and_then(Value::as_u64);
    let prompt_tokens = get("input_tokens").unwrap_or(0);
    let completion_tokens = get("output_tokens").unwrap_or(0);
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: get("total_tokens").unwrap_or(prompt_tokens + completion_tokens),
        estimated: false,
        cost_usd: None,
        cache_read_tokens: value
            .pointer("/input_tokens_details/cached_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        cache_write_tokens: 0,
    }
}

/// `finish_reason` of a response whose `status` is `incomplete`:
/// `max_output_tokens` is `length` (the reply cap cut it), any other cause
/// as given (`content_filter`).
fn incomplete_reason(response: &Value) -> String {
    match response
        .pointer("/incomplete_details/reason")
        .and_then(Value::as_str)
    {
        Some("max_output_tokens") | None => "length".to_owned(),
        Some(other) => other.to_owned(),
    }
}

/// The error of a `failed` response, or a response's non-null `error`.
fn failure_of(response: &Value) -> Option<Value> {
    if let Some(err) = response.get("error").filter(|e| !e.is_null()) {
        return Some(err.clone());
    }
    (response.get("status").and_then(Value::as_str) == Some("failed"))
        .then(|| json!({"message": "the response failed without saying why"}))
}

/// A plain (non-streamed) response body, at most `limit` bytes of text.
pub fn parse_response(bytes: &[u8], limit: usize) -> Result<Assembled, ChunkError> {
    let response: Value = serde_json::from_slice(bytes)
        .map_err(|e| ChunkError::Malformed(format!("not a response ({e})")))?;
    if !response.is_object() {
        return Err(ChunkError::Malformed(
            "not a response (not a JSON object)".to_owned(),
        ));
    }
    if let Some(err) = failure_of(&response) {
        return Err(ChunkError::Server(err));
    }
    let Some(output) = response.get("output").and_then(Value::as_array) else {
        return Err(ChunkError::Malformed(
            "not a response (it has no `output` list)".to_owned(),
        ));
    };
    let mut a = ResponsesAssembler::with_limit(limit);
    for (i, item) in output.iter().enumerate() {
        a.take_item(i as u64, item, true)?;
    }
    a.end(&response);
    a.check()?;
    Ok(a.finish())
}

#[derive(Debug, Default)]
struct PartialCall {
    call_id: String,
    name: String,
    arguments: String,
    /// Arguments came as deltas (a later whole copy replaces them).
    streamed: bool,
}

/// Accumulates the events of one streamed response (each event's `data`,
/// whose `type` names it; the SSE `event:` line is not needed).
#[derive(Debug)]
pub struct ResponsesAssembler {
    limit: usize,
    /// Text by output index (one message item may have several parts).
    texts: BTreeMap<u64, String>,
    calls: BTreeMap<u64, PartialCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    chars: usize,
    chunks: usize,
    done: bool,
}

impl ResponsesAssembler {
    /// A fresh assembler refusing a reply of more than `limit` bytes of text.
    pub fn with_limit(limit: usize) -> Self {
        ResponsesAssembler {
            limit,
            texts: BTreeMap::new(),
            calls: BTreeMap::new(),
            finish_reason: None,
            usage: None,
            chars: 0,
            chunks: 0,
            done: false,
        }
    }

    /// Characters of text and call arguments received so far.
    pub fn chars(&self) -> usize {
        self.chars
    }

    /// Events accepted so far.
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// Whether the response ended (`response.completed` or
    /// `response.incomplete`): nothing after it is needed.
    pub fn done(&self) -> bool {
        self.done
    }

    /// Adds one event's `data`. Returns whether it carried text (content or
    /// arguments), i.e. whether progress should be reported.
    pub fn push(&mut self, data: &str) -> Result<bool, ChunkError> {
        let event: Value = serde_json::from_str(data)
            .map_err(|e| ChunkError::Malformed(format!("an event is not JSON ({e})")))?;
        let Some(kind) = event.get("type").and_then(Value::as_str) else {
            return Err(ChunkError::Malformed(
                "an event is not a JSON object with a `type`".to_owned(),
            ));
        };
        let before = self.chars;
        let index = event
            .get("output_index")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let delta = || event.get("delta").and_then(Value::as_str).unwrap_or("");
        match kind {
            "error" => return Err(ChunkError::Server(event.clone())),
            "response.failed" => {
                let response = event.get("response").cloned().unwrap_or(Value::Null);
                return Err(ChunkError::Server(failure_of(&response).unwrap_or(json!({
                    "message": "the response failed without saying why"
                }))));
            }
            "response.output_item.added" => {
                if let Some(item) = event.get("item") {
                    self.take_item(index, item, false)?;
                }
            }
            "response.output_item.done" => {
                if let Some(item) = event.get("item") {
                    self.take_item(index, item, true)?;
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let piece = delta();
                self.chars += piece.chars().count();
                self.texts.entry(index).or_default().push_str(piece);
            }
            "response.function_call_arguments.delta" => {
                let piece = delta();
                self.chars += piece.chars().count();
                let call = self.calls.entry(index).or_default();
                call.arguments.push_str(piece);
                call.streamed = true;
            }
            "response.function_call_arguments.done" => {
                if let Some(whole) = event.get("arguments").and_then(Value::as_str) {
                    let call = self.calls.entry(index).or_default();
                    if call.arguments.is_empty() {
                        self.chars += whole.chars().count();
                    }
                    call.arguments = whole.to_owned();
                }
            }
            "response.completed" | "response.incomplete" => {
                let response = event.get("response").cloned().unwrap_or(Value::Null);
                // A server that sent the items only in the final response.
                if self.texts.is_empty()
                    && self.calls.is_empty()
                    && let Some(output) = response.get("output").and_then(Value::as_array)
                {
                    for (i, item) in output.iter().enumerate() {
                        self.take_item(i as u64, item, true)?;
                    }
                }
                self.end(&response);
                if kind == "response.incomplete" && self.finish_reason.is_none() {
                    self.finish_reason = Some("length".to_owned());
                }
            }
            // `response.created`, `.in_progress`, `.content_part.*`,
            // `.output_text.done` (the deltas made it), reasoning summaries.
            _ => {}
        }
        self.chunks += 1;
        self.check()?;
        Ok(self.chars > before)
    }

    /// An output item, as announced (`whole` false: a call's id and name)
    /// or complete (`whole`: the authoritative text and arguments).
    fn take_item(&mut self, index: u64, item: &Value, whole: bool) -> Result<(), ChunkError> {
        let text_field = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("");
        match item.get("type").and_then(Value::as_str) {
            Some("message") if whole && !self.texts.contains_key(&index) => {
                let parts = item
                    .get("content")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                let text: String = parts
                    .iter()
                    .filter_map(|p| match p.get("type").and_then(Value::as_str) {
                        Some("output_text") => p.get("text").and_then(Value::as_str),
                        Some("refusal") => p.get("refusal").and_then(Value::as_str),
                        _ => None,
                    })
                    .collect();
                if !text.is_empty() {
                    self.chars += text.chars().count();
                    self.texts.insert(index, text);
                }
            }
            Some("function_call") => {
                let call = self.calls.entry(index).or_default();
                if call.call_id.is_empty() {
                    call.call_id = text_field("call_id").to_owned();
                }
                if call.name.is_empty() {
                    call.name = text_field("name").to_owned();
                }
                let arguments = match item.get("arguments") {
                    Some(Value::String(s)) => s.clone(),
                    None | Some(Value::Null) => String::new(),
                    Some(other) => other.to_string(),
                };
                // The complete item is authoritative; an announced one only
                // starts the arguments when no delta has.
                if (whole && !arguments.is_empty()) || (!call.streamed && !arguments.is_empty()) {
                    if call.arguments.is_empty() {
                        self.chars += arguments.chars().count();
                    }
                    call.arguments = arguments;
                }
            }
            // `reasoning` items are the model's thinking, not its answer.
            _ => {}
        }
        Ok(())
    }

    /// The end of the response: usage and why it ended.
    fn end(&mut self, response: &Value) {
        if let Some(usage) = response.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage_of(usage));
        }
        self.finish_reason = match response.get("status").and_then(Value::as_str) {
            Some("incomplete") => Some(incomplete_reason(response)),
            _ if !self.calls.is_empty() => Some("tool_calls".to_owned()),
            _ => Some("stop".to_owned()),
        };
        self.done = true;
    }

    fn bytes(&self) -> usize {
        self.texts.values().map(String::len).sum::<usize>()
            + self
                .calls
                .values()
                .map(|c| c.call_id.len() + c.name.len() + c.arguments.len())
                .sum::<usize>()
    }

    fn check(&self) -> Result<(), ChunkError> {
        match oversize(self.bytes(), self.calls.len(), self.limit) {
            Some(why) => Err(ChunkError::TooLarge(why)),
            None => Ok(()),
        }
    }

    /// The assembled reply.
    pub fn finish(self) -> Assembled {
        let text: String = self.texts.into_values().collect();
        let tool_calls = self
            .calls
            .into_values()
            .enumerate()
            .map(|(i, c)| ToolCall {
                id: if c.call_id.is_empty() {
                    format!("call_{i}")
                } else {
                    c.call_id
                },
                kind: "function".to_owned(),
                function: FunctionCall {
                    name: c.name,
                    arguments: c.arguments,
                },
            })
            .collect();
        Assembled {
            message: ChatMessage {
                role: MessageRole::Assistant,
                content: (!text.is_empty()).then_some(text),
                tool_calls,
                tool_call_id: None,
            },
            finish_reason: self.finish_reason,
            usage: self.usage,
            header_cost: None,
            // Responses replies carry no llama.cpp `timings` to tell by.
            llama_cpp: false,
        }
    }
}

mod format;
pub(crate) use format::Responses;

#[cfg(test)]
mod tests;
