//! Assembling a streamed chat completion from its `chat.completion.chunk`s.
//!
//! The HTTP client decodes the SSE framing with [`super::sse`] (which also
//! reassembles UTF-8 characters and JSON split across network reads) and
//! feeds each event's `data` to a [`StreamAssembler`]. This module is pure: no
//! I/O, so every delta rule is unit-tested here.
//!
//! Delta rules (OpenAI's, plus what other servers do):
//! - `delta.content` pieces are concatenated; a stream with no non-empty
//!   content piece yields `content: None` (as a non-streamed tool-call
//!   message does).
//! - `delta.tool_calls[]` entries are keyed by `index`: the first delta of a
//!   call usually carries `id`, `type` and `function.name`, later ones only
//!   `function.arguments` pieces, which are concatenated in arrival order.
//!   Several calls may interleave. An entry without `index` (some local
//!   servers) continues the latest call unless it brings a new `id`, which
//!   starts a new call. A call that never got an id becomes `call_<n>`.
//! - `finish_reason` is taken from the chunk that has one. It is advisory:
//!   the reply is what arrived (calls under `stop` are kept); the client
//!   only uses it to notice tool calls lost in a stream (`tool_calls` with
//!   none assembled).
//! - `usage` is taken from any chunk that carries a non-null one (OpenAI sends
//!   it in a final chunk with empty `choices` when asked with
//!   `stream_options.include_usage`).
//! - An `{"error": …}` chunk is reported as [`ChunkError::Server`].
//! - `[DONE]` is handled by the caller; the end of the body ends the stream
//!   just as well.
//!
//! Bound: a reply holds at most `limit` bytes of text (content, tool-call
//! ids, names and arguments: [`reply_bytes`]) and [`MAX_TOOL_CALLS`] calls;
//! the chunk that passes either is refused ([`ChunkError::TooLarge`]), so a
//! hostile server cannot make the assembler hold more.

use super::{ChatMessage, FunctionCall, MessageRole, ToolCall, Usage};
use serde_json::Value;
use std::collections::BTreeMap;

/// What is wrong with one chunk.
#[derive(Debug, Clone, PartialEq)]
pub enum ChunkError {
    /// The chunk is not JSON or not shaped like a completion chunk.
    Malformed(String),
    /// The server sent an error object inside the stream.
    Server(Value),
    /// The reply passed its size bound; the text says which and where.
    TooLarge(String),
}

/// Most tool calls one reply may hold (a model makes a handful per turn).
pub const MAX_TOOL_CALLS: usize = 256;

/// Bytes of text a reply holds: content, and every tool call's id, name and
/// arguments (what the agent loop keeps, records and sends back).
pub fn reply_bytes(message: &ChatMessage) -> usize {
    message.content.as_ref().map_or(0, String::len)
        + message
            .tool_calls
            .iter()
            .map(|c| c.id.len() + c.function.name.len() + c.function.arguments.len())
            .sum::<usize>()
}

/// Why a reply of `bytes` bytes of text and `calls` tool calls passes
/// `limit`, if it does.
pub fn oversize(bytes: usize, calls: usize, limit: usize) -> Option<String> {
    if bytes > limit {
        Some(format!(
            "the reply is larger than the cap of {limit} bytes (max_reply_bytes): refused at {bytes} bytes of content and tool calls"
        ))
    } else if calls > MAX_TOOL_CALLS {
        Some(format!(
            "the reply holds more than {MAX_TOOL_CALLS} tool calls"
        ))
    } else {
        None
    }
}

/// A completion put together from its chunks.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembled {
    /// The assistant message.
    pub message: ChatMessage,
    /// `stop`, `tool_calls`, `length`, … if the server said.
    pub finish_reason: Option<String>,
    /// Usage, if the server reported it.
    pub usage: Option<Usage>,
    /// The cost a response header reported (LiteLLM's
    /// `x-litellm-response-cost`), used when the usage carries none.
    pub header_cost: Option<f64>,
    /// The reply carried llama.cpp's `timings`: the server is llama.cpp.
    pub llama_cpp: bool,
}

#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Accumulates chunks of one streamed completion.
#[derive(Debug)]
pub struct StreamAssembler {
    limit: usize,
    /// [`reply_bytes`] of what is held.
    bytes: usize,
    content: Option<String>,
    calls: BTreeMap<u64, PartialCall>,
    last_index: Option<u64>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    /// llama.cpp's `timings` (the last chunk's).
    timings: Option<Value>,
    chars: usize,
    chunks: usize,
}

impl Default for StreamAssembler {
    fn default() -> Self {
        StreamAssembler::new()
    }
}

impl StreamAssembler {
    /// A fresh assembler without a size bound.
    pub fn new() -> Self {
        StreamAssembler::with_limit(usize::MAX)
    }

    /// A fresh assembler that refuses a reply of more than `limit` bytes of
    /// text (see the module docs).
    pub fn with_limit(limit: usize) -> Self {
        StreamAssembler {
            limit,
            bytes: 0,
            content: None,
            calls: BTreeMap::new(),
            last_index: None,
            finish_reason: None,
            usage: None,
            timings: None,
            chars: 0,
            chunks: 0,
        }
    }

    /// Characters of content and tool-call arguments received so far.
    pub fn chars(&self) -> usize {
        self.chars
    }

    /// Chunks accepted so far.
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// Adds one event's `data` (a JSON chunk). Returns whether it carried text
    /// (content or arguments), i.e. whether progress should be reported.
    pub fn push(&mut self, data: &str) -> Result<bool, ChunkError> {
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| ChunkError::Malformed(format!("a chunk is not JSON ({e})")))?;
        if !chunk.is_object() {
            return Err(ChunkError::Malformed(
                "a chunk is not a JSON object".to_owned(),
            ));
        }
        if let Some(err) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(ChunkError::Server(err.clone()));
        }
        self.chunks += 1;
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage_of(usage));
        }
        if let Some(timings) = chunk.get("timings").filter(|t| t.is_object()) {
            self.timings = Some(timings.clone());
        }
        let before = self.chars;
        let choices = match chunk.get("choices") {
            None | Some(Value::Null) => return Ok(false),
            Some(Value::Array(c)) => c,
            Some(_) => {
                return Err(ChunkError::Malformed(
                    "a chunk's `choices` is not a list".to_owned(),
                ));
            }
        };
        // Only the first choice is used (orch never asks for n > 1).
        let Some(choice) = choices
            .iter()
            .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        else {
            return Ok(false);
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        let Some(delta) = choice.get("delta").filter(|d| d.is_object()) else {
            return Ok(false);
        };
        match delta.get("content") {
            Some(Value::String(piece)) => self.add_content(piece),
            // Content parts (a few servers): keep their text.
            Some(Value::Array(parts)) => {
                for part in parts {
                    if let Some(text) = part.get("text").and_then(Value::as_str) {
                        self.add_content(text);
                    }
                }
            }
            _ => {}
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for call in calls {
                self.add_call_delta(call);
            }
        }
        if let Some(why) = oversize(self.bytes, self.calls.len(), self.limit) {
            return Err(ChunkError::TooLarge(why));
        }
        Ok(self.chars > before)
    }

    fn add_content(&mut self, piece: &str) {
        // OpenAI opens even tool-call-only streams with `"content": ""`; an
        // empty piece must not turn "no content" into an empty text.
        if piece.is_empty() {
            return;
        }
        self.chars += piece.chars().count();
        self.bytes += piece.len();
        self.content.get_or_insert_with(String::new).push_str(piece);
    }

    fn add_call_delta(&mut self, delta: &Value) {
        let id = delta
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let index = match delta.get("index").and_then(Value::as_u64) {
            Some(i) => i,
            None => match (self.last_index, id) {
                // A new id without an index starts a new call.
                (Some(last), Some(id))
                    if self.calls.get(&last).and_then(|c| c.id.as_deref()) != Some(id) =>
                {
                    self.calls.keys().next_back().map_or(0, |k| k + 1)
                }
                (Some(last), _) => last,
                (None, _) => 0,
            },
        };
        self.last_index = Some(index);
        let call = self.calls.entry(index).or_default();
        if let Some(id) = id
            && call.id.is_none()
        {
            self.bytes += id.len();
            call.id = Some(id.to_owned());
        }
        let function = delta.get("function");
        if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
            // The name comes whole in one delta; a server that repeats it
            // must not double it.
            if call.name.is_empty() {
                self.bytes += name.len();
                call.name = name.to_owned();
            } else if call.name != name {
                self.bytes += name.len();
                call.name.push_str(name);
            }
        }
        match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(piece)) => {
                self.chars += piece.chars().count();
                self.bytes += piece.len();
                call.arguments.push_str(piece);
            }
            Some(Value::Null) | None => {}
            // Arguments sent as a JSON object (a few servers): its text.
            Some(other) => {
                let text = other.to_string();
                self.chars += text.chars().count();
                self.bytes += text.len();
                call.arguments.push_str(&text);
            }
        }
    }

    /// The assembled completion.
    pub fn finish(self) -> Assembled {
        let tool_calls = self
            .calls
            .into_values()
            .enumerate()
            .map(|(i, call)| ToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{i}")),
                kind: "function".to_owned(),
                function: FunctionCall {
                    name: call.name,
                    arguments: call.arguments,
                },
            })
            .collect();
        Assembled {
            message: ChatMessage {
                role: MessageRole::Assistant,
                content: self.content,
                tool_calls,
                tool_call_id: None,
            },
            finish_reason: self.finish_reason,
            usage: self.usage.map(|u| with_timings(u, self.timings.as_ref())),
            header_cost: None,
            llama_cpp: self.timings.is_some(),
        }
    }
}

/// Gives every tool call of `reply` an id no other call in `history` or
/// earlier in `reply` has: a missing or empty id becomes `call_<n>` (`n` its
/// position), and a taken one gets a `_<k>` suffix. Servers that omit ids, or
/// number them from 0 every turn, would otherwise make two calls answerable
/// by the same tool result.
pub(crate) fn unique_call_ids(reply: &mut ChatMessage, history: &[ChatMessage]) {
    let mut taken: std::collections::HashSet<String> = history
        .iter()
        .flat_map(|m| m.tool_calls.iter().map(|c| c.id.clone()))
        .collect();
    for (i, call) in reply.tool_calls.iter_mut().enumerate() {
        let base = if call.id.trim().is_empty() {
            format!("call_{i}")
        } else {
            call.id.clone()
        };
        let mut id = base.clone();
        let mut k = 1;
        while taken.contains(&id) {
            id = format!("{base}_{k}");
            k += 1;
        }
        taken.insert(id.clone());
        call.id = id;
    }
}

/// A `usage` object as servers send it; a missing total is the sum.
pub(crate) fn usage_of(value: &Value) -> Usage {
    let get = |k: &str| value.get(k).and_then(Value::as_u64);
    let prompt_tokens = get("prompt_tokens").unwrap_or(0);
    let completion_tokens = get("completion_tokens").unwrap_or(0);
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: get("total_tokens").unwrap_or(prompt_tokens + completion_tokens),
        estimated: false,
        // OpenRouter reports the call's cost here (streamed or not).
        cost_usd: value
            .get("cost")
            .and_then(Value::as_f64)
            .and_then(super::reported_cost),
        // OpenAI (and servers copying it) say how much of the prompt came
        // from their automatic prefix cache.
        cache_read_tokens: value
            .pointer("/prompt_tokens_details/cached_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        cache_write_tokens: 0,
    }
}

/// `usage` with llama.cpp's `timings` read: `cache_n` prompt tokens were
/// reused from the slot's cache (`prompt_n` evaluated). Builds that report
/// `prompt_tokens_details.cached_tokens` too say the same number there;
/// older ones only here.
pub(crate) fn with_timings(mut usage: Usage, timings: Option<&Value>) -> Usage {
    if usage.cache_read_tokens == 0
        && let Some(n) = timings
            .and_then(|t| t.get("cache_n"))
            .and_then(Value::as_u64)
    {
        usage.cache_read_tokens = n.min(usage.prompt_tokens);
    }
    usage
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_reported_cost_is_read_from_usage_when_it_is_an_amount() {
        let u = usage_of(&json!({"prompt_tokens": 5, "completion_tokens": 2, "cost": 0.00042}));
        assert_eq!((u.total_tokens, u.cost_usd), (7, Some(0.00042)));
        for bad in [json!(-1.0), json!("0.1"), json!(null)] {
            assert_eq!(usage_of(&json!({"cost": bad})).cost_usd, None, "{bad}");
        }
    }

    fn feed(chunks: &[Value]) -> Assembled {
        let mut a = StreamAssembler::new();
        for c in chunks {
            a.push(&c.to_string()).unwrap();
        }
        a.finish()
    }

    fn delta(d: Value) -> Value {
        json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": null}]})
    }

    #[test]
    fn content_pieces_are_joined_and_counted() {
        let mut a = StreamAssembler::new();
        assert!(
            !a.push(&delta(json!({"role": "assistant"})).to_string())
                .unwrap()
        );
        assert!(
            a.push(&delta(json!({"content": "Hé"})).to_string())
                .unwrap()
        );
        assert!(
            a.push(&delta(json!({"content": "llo"})).to_string())
                .unwrap()
        );
        assert_eq!(a.chars(), 5);
        a.push(
            &json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}).to_string(),
        )
        .unwrap();
        let r = a.finish();
        assert_eq!(r.message.content.as_deref(), Some("Héllo"));
        assert_eq!(r.finish_reason.as_deref(), Some("stop"));
        assert_eq!(r.usage, None);
    }

    #[test]
    fn interleaved_tool_calls_are_keyed_by_index() {
        let r = feed(&[
            delta(
                json!({"tool_calls": [{"index": 0, "id": "a", "type": "function", "function": {"name": "read_file", "arguments": ""}}]}),
            ),
            delta(
                json!({"tool_calls": [{"index": 1, "id": "b", "type": "function", "function": {"name": "bash", "arguments": "{\"comm"}}]}),
            ),
            delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\":"}}]})),
            delta(
                json!({"tool_calls": [{"index": 1, "function": {"arguments": "and\":\"ls\"}"}}]}),
            ),
            delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"a.rs\"}"}}]})),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}),
        ]);
        assert_eq!(r.message.content, None);
        let calls: Vec<(&str, &str, &str)> = r
            .message
            .tool_calls
            .iter()
            .map(|c| {
                (
                    c.id.as_str(),
                    c.function.name.as_str(),
                    c.function.arguments.as_str(),
                )
            })
            .collect();
        assert_eq!(
            calls,
            [
                ("a", "read_file", r#"{"path":"a.rs"}"#),
                ("b", "bash", r#"{"command":"ls"}"#)
            ]
        );
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            r.usage,
            Some(Usage {
                prompt_tokens: 7,
                completion_tokens: 3,
                total_tokens: 10,
                estimated: false,
                cost_usd: None,
                ..Default::default()
            })
        );
    }

    #[test]
    fn calls_without_index_or_id_still_assemble() {
        let r = feed(&[
            delta(
                json!({"tool_calls": [{"id": "x", "function": {"name": "bash", "arguments": "{}"}}]}),
            ),
            delta(json!({"tool_calls": [{"id": "y", "function": {"name": "finish"}}]})),
            delta(json!({"tool_calls": [{"function": {"arguments": {"summary": "ok"}}}]})),
            delta(
                json!({"tool_calls": [{"index": 5, "function": {"name": "grep", "arguments": "{}"}}]}),
            ),
        ]);
        let calls: Vec<(&str, &str, &str)> = r
            .message
            .tool_calls
            .iter()
            .map(|c| {
                (
                    c.id.as_str(),
                    c.function.name.as_str(),
                    c.function.arguments.as_str(),
                )
            })
            .collect();
        assert_eq!(
            calls,
            [
                ("x", "bash", "{}"),
                ("y", "finish", r#"{"summary":"ok"}"#),
                ("call_2", "grep", "{}")
            ]
        );
    }

    #[test]
    fn ids_and_names_repeated_in_every_chunk_are_not_doubled() {
        // llama.cpp repeats index, id, type and name in every delta.
        let piece = |args: &str| {
            delta(
                json!({"tool_calls": [{"index": 0, "id": "call_abc", "type": "function",
                "function": {"name": "read_file", "arguments": args}}]}),
            )
        };
        let r = feed(&[piece("{\"pa"), piece("th\":"), piece("\"a.rs\"}")]);
        assert_eq!(r.message.tool_calls.len(), 1);
        let call = &r.message.tool_calls[0];
        assert_eq!(call.id, "call_abc");
        assert_eq!(call.function.name, "read_file");
        assert_eq!(call.function.arguments, r#"{"path":"a.rs"}"#);
    }

    #[test]
    fn call_ids_are_made_unique_in_the_conversation() {
        let call = |id: &str| ToolCall {
            id: id.into(),
            kind: "function".into(),
            function: FunctionCall {
                name: "bash".into(),
                arguments: "{}".into(),
            },
        };
        let earlier = ChatMessage {
            role: MessageRole::Assistant,
            content: None,
            tool_calls: vec![call("call_0"), call("x")],
            tool_call_id: None,
        };
        let mut reply = ChatMessage {
            tool_calls: vec![call(""), call("x"), call("y"), call("y"), call(" ")],
            ..earlier.clone()
        };
        unique_call_ids(&mut reply, std::slice::from_ref(&earlier));
        let ids: Vec<&str> = reply.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_0_1", "x_1", "y", "y_1", "call_4"]);
    }

    /// The SSE decoder the client uses keeps a character split between two
    /// network reads whole (the integration test cannot force the split).
    #[test]
    fn sse_decoder_joins_characters_split_across_reads() {
        let event = format!("data: {}\n\n", delta(json!({"content": "日本"})));
        let bytes = event.as_bytes();
        let cut = bytes.windows(3).position(|w| w == "本".as_bytes()).unwrap() + 1;
        let mut decoder = crate::llm::sse::SseDecoder::new(1 << 16);
        let mut a = StreamAssembler::new();
        for read in [&bytes[..cut], &bytes[cut..]] {
            for data in decoder.feed(read).unwrap().events {
                a.push(&data).unwrap();
            }
        }
        assert_eq!(a.finish().message.content.as_deref(), Some("日本"));
    }

    #[test]
    fn replies_past_the_limit_are_refused() {
        let mut a = StreamAssembler::with_limit(10);
        assert!(
            a.push(&delta(json!({"content": "12345"})).to_string())
                .unwrap()
        );
        assert!(
            a.push(&delta(json!({"content": "67890"})).to_string())
                .unwrap()
        );
        let err = a
            .push(&delta(json!({"content": "x"})).to_string())
            .unwrap_err();
        let ChunkError::TooLarge(why) = err else {
            panic!("{err:?}")
        };
        assert!(
            why.contains("cap of 10 bytes") && why.contains("max_reply_bytes"),
            "{why}"
        );
        // Tool-call ids, names and arguments count as well.
        let mut a = StreamAssembler::with_limit(10);
        let call = json!({"tool_calls": [{"index": 0, "id": "abc", "function": {"name": "bash", "arguments": "{}"}}]});
        a.push(&delta(call).to_string()).unwrap();
        let more = json!({"tool_calls": [{"index": 0, "function": {"arguments": "xy"}}]});
        assert!(matches!(
            a.push(&delta(more).to_string()),
            Err(ChunkError::TooLarge(_))
        ));
        // So does the number of calls.
        let mut a = StreamAssembler::new();
        let calls: Vec<Value> = (0..=MAX_TOOL_CALLS)
            .map(|i| json!({"index": i, "function": {"name": "f"}}))
            .collect();
        assert!(matches!(
            a.push(&delta(json!({"tool_calls": calls})).to_string()),
            Err(ChunkError::TooLarge(_))
        ));
        let message = ChatMessage {
            role: MessageRole::Assistant,
            content: Some("héllo".into()),
            tool_calls: vec![ToolCall {
                id: "a".into(),
                kind: "function".into(),
                function: FunctionCall {
                    name: "bash".into(),
                    arguments: "{}".into(),
                },
            }],
            tool_call_id: None,
        };
        assert_eq!(reply_bytes(&message), 6 + 1 + 4 + 2);
    }

    #[test]
    fn errors_and_garbage_are_reported() {
        let mut a = StreamAssembler::new();
        assert!(matches!(a.push("{\"choi"), Err(ChunkError::Malformed(_))));
        assert!(matches!(a.push("[1]"), Err(ChunkError::Malformed(_))));
        assert!(matches!(
            a.push(r#"{"choices": 3}"#),
            Err(ChunkError::Malformed(_))
        ));
        assert_eq!(
            a.push(r#"{"error": {"message": "overloaded"}}"#),
            Err(ChunkError::Server(json!({"message": "overloaded"})))
        );
        // Null usage and null choices are fine (some servers send them on every chunk).
        assert_eq!(a.push(r#"{"choices": null, "usage": null}"#), Ok(false));
        assert_eq!(a.finish().usage, None);
    }
}
