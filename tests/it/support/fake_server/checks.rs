//! The checks a real server makes on every request, applied by the fake
//! server before it answers (a breach is recorded and answered 400).

use serde_json::Value;
use std::collections::HashSet;

/// What a real server would reject about the tool-call pairing in `messages`:
/// a tool result must answer a call of the latest assistant message, and every
/// call must be answered before the next non-tool message (or the end).
pub fn tool_pairing_violations(messages: &Value) -> Vec<String> {
    let Some(messages) = messages.as_array() else {
        return vec!["the request has no `messages` array".to_owned()];
    };
    let mut problems = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut pending: Vec<String> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or("");
        if role == "tool" {
            let Some(id) = message["tool_call_id"].as_str() else {
                problems.push(format!(
                    "message {i} is a tool result without `tool_call_id`"
                ));
                continue;
            };
            if let Some(pos) = pending.iter().position(|p| p == id) {
                pending.remove(pos);
            } else if seen.contains(id) {
                problems.push(format!(
                    "message {i} answers tool call `{id}`, which was already answered or belongs to an older assistant message"
                ));
            } else {
                problems.push(format!(
                    "message {i} answers tool call `{id}`, which no earlier assistant message made"
                ));
            }
            continue;
        }
        if !pending.is_empty() {
            problems.push(format!(
                "message {i} ({role}) comes before tool call(s) {pending:?} were answered"
            ));
            pending.clear();
        }
        if role == "assistant" {
            for call in message["tool_calls"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
            {
                let id = call["id"].as_str().unwrap_or("").to_owned();
                if id.is_empty() || !seen.insert(id.clone()) {
                    problems.push(format!(
                        "message {i} has a tool call with a missing or repeated id {id:?}"
                    ));
                }
                pending.push(id);
            }
        }
    }
    if !pending.is_empty() {
        problems.push(format!(
            "the request ends before tool call(s) {pending:?} were answered"
        ));
    }
    problems
}
