//! Reading a Messages reply, plain or streamed, into an [`Assembled`].
//!
//! A plain reply is one `message` object: `content` blocks (`text`,
//! `tool_use` with an `input` object; others, such as `thinking`, are
//! skipped), `stop_reason`, `usage`. A stream is its events, each with a
//! `type`: `message_start` (the usage so far), `content_block_start` (a
//! `text` block or a `tool_use` block with its id and name),
//! `content_block_delta` (`text_delta` pieces, `input_json_delta` pieces of
//! a call's arguments), `content_block_stop`, `message_delta` (the
//! `stop_reason` and the final usage), `message_stop` (the end), `ping`, and
//! `error` (reported as [`ChunkError::Server`]).
//!
//! Mapped onto the Chat Completions meaning the agent loop reads:
//! `stop_reason` `end_turn`/`stop_sequence` → `stop`, `tool_use` →
//! `tool_calls`, `max_tokens` → `length`, `refusal` → `content_filter`
//! (others as they are); usage `input_tokens` (which excludes cached
//! tokens) + `cache_read_input_tokens` + `cache_creation_input_tokens` →
//! `prompt_tokens`, `output_tokens` → `completion_tokens`, the two cache
//! counts → `cache_read_tokens` / `cache_write_tokens`.
//!
//! Bounds as for Chat Completions: at most `limit` bytes of text
//! ([`reply_bytes`]) and [`MAX_TOOL_CALLS`] calls.

use crate::llm::stream::{Assembled, ChunkError, MAX_TOOL_CALLS, oversize};
use crate::llm::{ChatMessage, FunctionCall, MessageRole, ToolCall, Usage};
use serde_json::Value;
use std::collections::BTreeMap;

#[cfg(doc)]
use crate::llm::stream::reply_bytes;

/// The Chat Completions `finish_reason` of a Messages `stop_reason`.
pub fn finish_reason(stop_reason: &str) -> String {
    match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" => "length",
        "refusal" => "content_filter",
        other => other,
    }
    .to_owned()
}

/// Usage from a Messages `usage` object, merged over `base` (a stream's
/// `message_delta` repeats only some fields).
pub fn usage_of(value: &Value, base: Usage) -> Usage {
    let get = |k: &str, old: u64| value.get(k).and_then(Value::as_u64).unwrap_or(old);
    let input = get("input_tokens", input_of(&base));
    let cache_read_tokens = get("cache_read_input_tokens", base.cache_read_tokens);
    let cache_write_tokens = get("cache_creation_input_tokens", base.cache_write_tokens);
    let completion_tokens = get("output_tokens", base.completion_tokens);
    let prompt_tokens = input + cache_read_tokens + cache_write_tokens;
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
        estimated: false,
        cost_usd: None,
        cache_read_tokens,
        cache_write_tokens,
    }
}

/// The uncached input tokens a usage holds.
fn input_of(u: &Usage) -> u64 {
    u.prompt_tokens
        .saturating_sub(u.cache_read_tokens + u.cache_write_tokens)
}

/// One `tool_use` block being received.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    /// The `input` of `content_block_start` (used when no delta comes).
    start_input: Option<Value>,
    /// `input_json_delta` pieces.
    json: String,
}

/// A plain reply (a `message` object).
pub fn parse_message(v: &Value, limit: usize) -> Result<Assembled, String> {
    let blocks = v["content"].as_array().ok_or("it has no `content` list")?;
    let mut content: Option<String> = None;
    let mut calls = Vec::new();
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => {
                let text = block["text"].as_str().unwrap_or("");
                if !text.is_empty() {
                    content.get_or_insert_with(String::new).push_str(text);
                }
            }
            Some("tool_use") => calls.push(PartialCall {
                id: block["id"].as_str().unwrap_or("").to_owned(),
                name: block["name"].as_str().unwrap_or("").to_owned(),
                start_input: block.get("input").cloned(),
                json: String::new(),
            }),
            _ => {}
        }
    }
    let message = message(content, calls);
    let bytes = crate::llm::stream::reply_bytes(&message);
    if let Some(why) = oversize(bytes, message.tool_calls.len(), limit) {
        return Err(why);
    }
    Ok(Assembled {
        message,
        finish_reason: v["stop_reason"].as_str().map(finish_reason),
        usage: v
            .get("usage")
            .filter(|u| u.is_object())
            .map(|u| usage_of(u, Usage::default())),
        header_cost: None,
        llama_cpp: false,
    })
}

fn message(content: Option<String>, calls: Vec<PartialCall>) -> ChatMessage {
    let tool_calls = calls
        .into_iter()
        .enumerate()
        .map(|(i, c)| ToolCall {
            id: if c.id.is_empty() {
                format!("call_{i}")
            } else {
                c.id
            },
            kind: "function".to_owned(),
            function: FunctionCall {
                name: c.name,
                arguments: if c.json.is_empty() {
                    c.start_input.map_or_else(String::new, |v| v.to_string())
                } else {
                    c.json
                },
            },
        })
        .collect();
    ChatMessage {
        role: MessageRole::Assistant,
        content,
        tool_calls,
        tool_call_id: None,
    }
}

/// Assembles one streamed Messages reply from its events.
#[derive(Debug)]
pub struct EventAssembler {
    limit: usize,
    bytes: usize,
    chars: usize,
    events: usize,
    content: Option<String>,
    /// Blocks by their `index`: the calls among them.
    calls: BTreeMap<u64, PartialCall>,
    stop_reason: Option<String>,
    usage: Option<Usage>,
    ended: bool,
}

impl EventAssembler {
    /// A fresh assembler refusing more than `limit` bytes of text.
    pub fn with_limit(limit: usize) -> Self {
        EventAssembler {
            limit,
            bytes: 0,
            chars: 0,
            events: 0,
            content: None,
            calls: BTreeMap::new(),
            stop_reason: None,
            usage: None,
            ended: false,
        }
    }

    /// Adds one event's data; true when it carried text.
    pub fn push(&mut self, data: &str) -> Result<bool, ChunkError> {
        let event: Value = serde_json::from_str(data)
            .map_err(|e| ChunkError::Malformed(format!("an event is not JSON ({e})")))?;
        let Some(kind) = event.get("type").and_then(Value::as_str) else {
            return Err(ChunkError::Malformed("an event has no `type`".to_owned()));
        };
        if kind == "error" {
            return Err(ChunkError::Server(event["error"].clone()));
        }
        self.events += 1;
        let before = self.chars;
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                if let Some(u) = event.pointer("/message/usage").filter(|u| u.is_object()) {
                    self.usage = Some(usage_of(u, Usage::default()));
                }
            }
            "content_block_start" => {
                let block = &event["content_block"];
                match block["type"].as_str() {
                    Some("tool_use") => {
                        let id = block["id"].as_str().unwrap_or("").to_owned();
                        let name = block["name"].as_str().unwrap_or("").to_owned();
                        self.bytes += id.len() + name.len();
                        self.calls.insert(
                            index,
                            PartialCall {
                                id,
                                name,
                                start_input: block.get("input").cloned(),
                                json: String::new(),
                            },
                        );
                    }
                    Some("text") => {
                        if let Some(text) = block["text"].as_str() {
                            self.add_text(text);
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = &event["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => {
                        self.add_text(delta["text"].as_str().unwrap_or(""));
                    }
                    Some("input_json_delta") => {
                        let piece = delta["partial_json"].as_str().unwrap_or("");
                        let Some(call) = self.calls.get_mut(&index) else {
                            return Err(ChunkError::Malformed(format!(
                                "an input_json_delta for block {index}, which is not a tool_use block"
                            )));
                        };
                        call.json.push_str(piece);
                        self.bytes += piece.len();
                        self.chars += piece.chars().count();
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = event.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(u) = event.get("usage").filter(|u| u.is_object()) {
                    self.usage = Some(usage_of(u, self.usage.unwrap_or_default()));
                }
            }
            "message_stop" => self.ended = true,
            // `ping`, `content_block_stop` and event types added later.
            _ => {}
        }
        if let Some(why) = oversize(self.bytes, self.calls.len(), self.limit) {
            return Err(ChunkError::TooLarge(why));
        }
        if self.calls.len() > MAX_TOOL_CALLS {
            return Err(ChunkError::TooLarge(format!(
                "the reply holds more than {MAX_TOOL_CALLS} tool calls"
            )));
        }
        Ok(self.chars > before)
    }

    fn add_text(&mut self, piece: &str) {
        if piece.is_empty() {
            return;
        }
        self.chars += piece.chars().count();
        self.bytes += piece.len();
        self.content.get_or_insert_with(String::new).push_str(piece);
    }

    /// Characters of text and arguments so far.
    pub fn chars(&self) -> usize {
        self.chars
    }

    /// Events accepted so far.
    pub fn events(&self) -> usize {
        self.events
    }

    /// Whether `message_stop` arrived.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The reply.
    pub fn finish(self) -> Assembled {
        Assembled {
            message: message(self.content, self.calls.into_values().collect()),
            finish_reason: self.stop_reason.as_deref().map(finish_reason),
            usage: self.usage,
            header_cost: None,
            llama_cpp: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_streamed_tool_use_turn_is_assembled_with_its_usage() {
        let mut a = EventAssembler::with_limit(1 << 20);
        let events = [
            json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 10,
                "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "ping"}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "look."}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_9", "name": "bash", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"comm"}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "and\": \"ls\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 42}}),
            json!({"type": "message_stop"}),
        ];
        for e in &events {
            a.push(&e.to_string()).unwrap();
        }
        assert!(a.ended());
        let r = a.finish();
        assert_eq!(r.message.content.as_deref(), Some("Let me look."));
        assert_eq!(r.message.tool_calls[0].id, "toolu_9");
        assert_eq!(
            r.message.tool_calls[0].function.arguments,
            "{\"command\": \"ls\"}"
        );
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        let u = r.usage.unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.total_tokens),
            (1210, 42, 1252)
        );
        assert_eq!((u.cache_read_tokens, u.cache_write_tokens), (1000, 200));
    }

    #[test]
    fn errors_and_bounds_in_a_stream() {
        let mut a = EventAssembler::with_limit(8);
        let err = a
            .push(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#)
            .unwrap_err();
        assert_eq!(
            err,
            ChunkError::Server(json!({"type": "overloaded_error", "message": "Overloaded"}))
        );
        assert!(matches!(a.push("nope"), Err(ChunkError::Malformed(_))));
        let big = json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "0123456789"}});
        assert!(matches!(
            a.push(&big.to_string()),
            Err(ChunkError::TooLarge(_))
        ));
    }

    #[test]
    fn a_plain_reply_cut_at_the_output_limit() {
        let v = json!({"type": "message", "role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm"},
            {"type": "text", "text": "partial"}],
            "stop_reason": "max_tokens", "usage": {"input_tokens": 5, "output_tokens": 7}});
        let r = parse_message(&v, 1 << 20).unwrap();
        assert_eq!(r.message.content.as_deref(), Some("partial"));
        assert_eq!(r.finish_reason.as_deref(), Some("length"));
        assert_eq!(r.usage.unwrap().prompt_tokens, 5);
        let v = json!({"content": [{"type": "tool_use", "id": "t", "name": "finish", "input": {"summary": "ok"}}],
            "stop_reason": "tool_use"});
        let r = parse_message(&v, 1 << 20).unwrap();
        assert_eq!(
            r.message.tool_calls[0].function.arguments,
            r#"{"summary":"ok"}"#
        );
        assert!(parse_message(&json!({"x": 1}), 10).is_err());
    }
}
