//! Reference analysis: which tool results a later assistant message still
//! refers to (by call id, by path, or by a distinctive token), so compaction
//! keeps them whole.

use super::state::Compactor;
use crate::llm::{ChatMessage, MessageRole, ToolCall};
use std::collections::HashSet;

impl Compactor {
    /// Indices of the tool results a later assistant message refers to (see
    /// the module docs).
    pub(super) fn pinned(&mut self, msgs: &[ChatMessage]) -> HashSet<usize> {
        let mut later_distinct: HashSet<String> = HashSet::new();
        let mut later_all: HashSet<String> = HashSet::new();
        let mut later_calls: HashSet<(String, String)> = HashSet::new();
        let mut pinned = HashSet::new();
        for i in (msgs.len().min(2)..msgs.len()).rev() {
            let m = &msgs[i];
            match m.role {
                MessageRole::Assistant => {
                    let texts = m
                        .content
                        .iter()
                        .map(String::as_str)
                        .chain(m.tool_calls.iter().map(|c| c.function.arguments.as_str()));
                    for text in texts {
                        for t in tokens(text) {
                            if is_distinctive(t) {
                                later_distinct.insert(t.to_owned());
                            }
                            later_all.insert(normalize_path(t).to_owned());
                        }
                    }
                }
                MessageRole::Tool => {
                    let call = call_of(msgs, i);
                    let name = call.map_or("", |c| c.function.name.as_str());
                    let path = call.and_then(path_arg);
                    let key = path.as_ref().map(|p| (name.to_owned(), p.clone()));
                    if key.as_ref().is_some_and(|k| later_calls.contains(k)) {
                        // Superseded by a later call of the same tool on the same path.
                        continue;
                    }
                    let content = m.content.as_deref().unwrap_or("");
                    let own = self
                        .result_tokens
                        .entry(i)
                        .or_insert_with(|| distinctive_tokens(content));
                    let referenced = own.iter().any(|t| later_distinct.contains(t))
                        || m.tool_call_id
                            .as_ref()
                            .is_some_and(|id| later_all.contains(id.as_str()))
                        || path
                            .as_ref()
                            .is_some_and(|p| later_all.contains(p.as_str()));
                    if referenced {
                        pinned.insert(i);
                    }
                    if let Some(k) = key {
                        later_calls.insert(k);
                    }
                }
                _ => {}
            }
        }
        pinned
    }
}

/// The tool call that the tool result at `i` answers.
pub(super) fn call_of(msgs: &[ChatMessage], i: usize) -> Option<&ToolCall> {
    let id = msgs[i].tool_call_id.as_deref()?;
    msgs[..i]
        .iter()
        .rev()
        .find(|m| m.role == MessageRole::Assistant)?
        .tool_calls
        .iter()
        .find(|c| c.id == id)
}

/// The `path` argument of a call, normalised (`./a.py` → `a.py`).
pub(super) fn path_arg(call: &ToolCall) -> Option<String> {
    let args: serde_json::Value = serde_json::from_str(&call.function.arguments).ok()?;
    let p = args.get("path")?.as_str()?;
    let p = normalize_path(p);
    (!p.is_empty() && p != ".").then(|| p.to_owned())
}

pub(super) fn normalize_path(p: &str) -> &str {
    p.trim_start_matches("./")
}

/// Words for reference matching: runs of letters, digits and `_-./`.
pub(super) fn tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "_-./".contains(c)))
        .map(|t| t.trim_matches(|c: char| c == '.' || c == '-'))
        .filter(|t| !t.is_empty())
}

/// A word specific enough that mentioning it means referring to the result
/// holding it: 5+ characters with both letters and digits (ids, SHAs,
/// error codes, `FACT-7731`), but not plain words or numbers.
pub(super) fn is_distinctive(t: &str) -> bool {
    (5..=128).contains(&t.len())
        && t.bytes().any(|b| b.is_ascii_digit())
        && t.bytes().any(|b| b.is_ascii_alphabetic())
}

pub(super) fn distinctive_tokens(text: &str) -> Vec<String> {
    let set: HashSet<&str> = tokens(text).filter(|t| is_distinctive(t)).collect();
    set.into_iter().map(str::to_owned).collect()
}
