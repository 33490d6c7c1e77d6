//! The fake server's OpenAI Responses mode: a request to `…/responses` is a
//! model request like one to `…/chat/completions`, served from the same
//! script, with each [`Reply::Message`] translated into a Responses reply —
//! a `response` object (plain) or its server-sent events (streamed:
//! `response.created`, then per output item `response.output_item.added`,
//! its `response.output_text.delta` or `response.function_call_arguments.delta`
//! pieces and `.done` events, `response.output_item.done`, and
//! `response.completed` with the usage). Every reply opens with a
//! `reasoning` item, as a reasoning model's does, so a client that took it
//! for text would show it. Other replies (statuses, raw bodies, stalls,
//! cuts, hostile answers) are the Chat Completions mode's.
//!
//! The tool-pairing check runs on the conversation the `input` items make
//! ([`chat_messages`]); [`chat_view`] gives a recorded Responses request in
//! the Chat Completions shape, so the inspection helpers read it as well.

use super::http::{Answer, SseEnd};
use super::script::{Reply, pieces, render as render_chat};
use super::server::{Recorded, Shared};
use serde_json::{Value, json};

/// Whether a request to `path` is a Responses request.
pub(super) fn is_responses(path: &str) -> bool {
    path.ends_with("/responses")
}

/// The Chat Completions messages a Responses body's `instructions` and
/// `input` items stand for: `function_call` items join the assistant
/// message before them, `function_call_output` items are tool messages.
pub fn chat_messages(body: &Value) -> Value {
    let mut out: Vec<Value> = Vec::new();
    if let Some(instructions) = body["instructions"].as_str() {
        out.push(json!({"role": "system", "content": instructions}));
    }
    let items = body["input"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    for item in items {
        match item["type"].as_str().unwrap_or("message") {
            "function_call" => {
                let call = json!({"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}});
                match out.last_mut() {
                    Some(last) if last["role"] == "assistant" => {
                        if !last["tool_calls"].is_array() {
                            last["tool_calls"] = json!([]);
                        }
                        if let Some(calls) = last["tool_calls"].as_array_mut() {
                            calls.push(call);
                        }
                    }
                    _ => out
                        .push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
                }
            }
            "function_call_output" => out.push(json!({
                "role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})),
            _ => out.push(json!({"role": item["role"], "content": item["content"]})),
        }
    }
    Value::Array(out)
}

/// A recorded Responses request in the Chat Completions shape (`messages`,
/// `tools` under `function`), for the inspection helpers; any other
/// request as it is.
pub fn chat_view(req: &Recorded) -> Recorded {
    if !is_responses(&req.path) {
        return req.clone();
    }
    let mut body = req.body.clone();
    body["messages"] = chat_messages(&req.body);
    if let Some(tools) = req.body["tools"].as_array() {
        body["tools"] = tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                "name": t["name"], "description": t["description"], "parameters": t["parameters"]}})
            })
            .collect();
    }
    Recorded {
        body,
        ..req.clone()
    }
}

/// A Responses reply cut by the output limit (`status: incomplete`,
/// `max_output_tokens`) holding `text`: a `response` object, or its events
/// when `stream`.
pub fn incomplete_reply(text: &str, stream: bool) -> Reply {
    let message = json!({"role": "assistant", "content": text});
    let usage = json!({"input_tokens": 10, "output_tokens": 16, "total_tokens": 26});
    let cut = Cut::MaxOutputTokens;
    if stream {
        Reply::RawSse(
            events(&message, Some(&usage), &json!("fake-model"), cut)
                .into_iter()
                .map(|e| String::from_utf8(e).unwrap_or_default())
                .collect(),
        )
    } else {
        Reply::Raw(response(&message, Some(&usage), &json!("fake-model"), cut).to_string())
    }
}

/// How a translated reply ends.
#[derive(Clone, Copy, PartialEq)]
enum Cut {
    Completed,
    MaxOutputTokens,
}

/// `reply` answered in the Responses format.
pub(super) fn render(reply: Reply, request: &Value, shared: &Shared) -> Answer {
    let model = request["model"].clone();
    match reply {
        Reply::Message { message, usage } if request["stream"] == json!(true) => Answer::Sse {
            chunks: events(
                &message,
                responses_usage(usage.as_ref()).as_ref(),
                &model,
                Cut::Completed,
            ),
            end: SseEnd::Finish,
        },
        Reply::Message { message, usage } => Answer::Send {
            status: 200,
            content_type: "application/json",
            extra: Vec::new(),
            body: response(
                &message,
                responses_usage(usage.as_ref()).as_ref(),
                &model,
                Cut::Completed,
            )
            .to_string(),
        },
        Reply::Delayed(delay, inner) => {
            std::thread::sleep(delay);
            render(*inner, request, shared)
        }
        Reply::WithHeader(name, value, inner) => match render(*inner, request, shared) {
            Answer::Send {
                status,
                content_type,
                mut extra,
                body,
            } => {
                extra.push((name, value));
                Answer::Send {
                    status,
                    content_type,
                    extra,
                    body,
                }
            }
            other => other,
        },
        Reply::StallAfter(n, inner) => streamed(*inner, request, SseEnd::Stall(n), shared),
        Reply::CutAfter(n, inner) => streamed(*inner, request, SseEnd::Cut(n), shared),
        Reply::FirstByteAfter(d, inner) => streamed(*inner, request, SseEnd::After(d), shared),
        other => render_chat(other, request, shared),
    }
}

fn streamed(inner: Reply, request: &Value, end: SseEnd, shared: &Shared) -> Answer {
    let mut streaming = request.clone();
    streaming["stream"] = json!(true);
    match render(inner, &streaming, shared) {
        Answer::Sse { chunks, .. } => Answer::Sse { chunks, end },
        other => other,
    }
}

/// A Chat Completions `usage` as the Responses API reports it.
fn responses_usage(usage: Option<&Value>) -> Option<Value> {
    let u = usage?;
    let input = u["prompt_tokens"].as_u64().unwrap_or(0);
    let output = u["completion_tokens"].as_u64().unwrap_or(0);
    let cached = u
        .pointer("/prompt_tokens_details/cached_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Some(json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u["total_tokens"].as_u64().unwrap_or(input + output),
    }))
}

const REASONING: &str = "(fake reasoning: not part of the answer)";

/// The output items of `message`: a reasoning item, the text as a
/// `message` item (when there is text), each call as a `function_call`.
fn output_items(message: &Value) -> Vec<Value> {
    let mut items = vec![json!({"type": "reasoning", "id": "rs_fake",
        "summary": [{"type": "summary_text", "text": REASONING}]})];
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        items.push(
            json!({"type": "message", "id": "msg_fake", "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}),
        );
    }
    for (i, call) in message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        items.push(
            json!({"type": "function_call", "id": format!("fc_fake_{i}"),
            "status": "completed", "call_id": call["id"], "name": call["function"]["name"],
            "arguments": call["function"]["arguments"]}),
        );
    }
    items
}

fn response_object(items: Vec<Value>, usage: Option<&Value>, model: &Value, cut: Cut) -> Value {
    let mut r = json!({"id": "resp_fake", "object": "response", "created_at": 0,
        "model": model, "status": "completed", "output": items, "store": false,
        "error": null, "incomplete_details": null});
    if cut == Cut::MaxOutputTokens {
        r["status"] = json!("incomplete");
        r["incomplete_details"] = json!({"reason": "max_output_tokens"});
    }
    if let Some(usage) = usage {
        r["usage"] = usage.clone();
    }
    r
}

fn response(message: &Value, usage: Option<&Value>, model: &Value, cut: Cut) -> Value {
    response_object(output_items(message), usage, model, cut)
}

/// `message` as the events of a streamed response (see the module docs).
fn events(message: &Value, usage: Option<&Value>, model: &Value, cut: Cut) -> Vec<Vec<u8>> {
    let items = output_items(message);
    let mut out: Vec<Value> = vec![json!({"type": "response.created",
        "response": response_object(Vec::new(), None, model, Cut::Completed)})];
    for (index, item) in items.iter().enumerate() {
        let mut opened = item.clone();
        match item["type"].as_str() {
            Some("message") => opened["content"] = json!([]),
            Some("function_call") => opened["arguments"] = json!(""),
            _ => opened["summary"] = json!([]),
        }
        out.push(
            json!({"type": "response.output_item.added", "output_index": index, "item": opened}),
        );
        match item["type"].as_str() {
            Some("message") => {
                let text = item["content"][0]["text"].as_str().unwrap_or("");
                out.push(json!({"type": "response.content_part.added", "output_index": index,
                    "content_index": 0, "part": {"type": "output_text", "text": ""}}));
                for piece in pieces(text, 3) {
                    out.push(json!({"type": "response.output_text.delta", "item_id": item["id"],
                        "output_index": index, "content_index": 0, "delta": piece}));
                }
                out.push(json!({"type": "response.output_text.done", "output_index": index,
                    "content_index": 0, "text": text}));
                out.push(json!({"type": "response.content_part.done", "output_index": index,
                    "content_index": 0, "part": item["content"][0]}));
            }
            Some("function_call") => {
                let arguments = item["arguments"].as_str().unwrap_or("");
                let size = arguments.chars().count().div_ceil(3).max(1);
                for piece in pieces(arguments, size) {
                    out.push(json!({"type": "response.function_call_arguments.delta",
                        "item_id": item["id"], "output_index": index, "delta": piece}));
                }
                out.push(json!({"type": "response.function_call_arguments.done",
                    "item_id": item["id"], "output_index": index, "arguments": arguments}));
            }
            _ => out.push(json!({"type": "response.reasoning_summary_text.delta",
                "item_id": item["id"], "output_index": index, "summary_index": 0, "delta": REASONING})),
        }
        out.push(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
    }
    let last = response_object(items, usage, model, cut);
    let kind = match cut {
        Cut::Completed => "response.completed",
        Cut::MaxOutputTokens => "response.incomplete",
    };
    out.push(json!({"type": kind, "response": last}));
    out.iter()
        .enumerate()
        .map(|(n, e)| {
            let mut e = e.clone();
            e["sequence_number"] = json!(n);
            format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")).into_bytes()
        })
        .collect()
}
