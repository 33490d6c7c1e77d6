//! A tool call's arguments: a JSON object with typed accessors whose errors
//! tell the model what was expected, and I/O errors worded for the model.

use serde_json::{Map, Value};

use super::outcome::MAX_ARGUMENT_BYTES;
use crate::text::one_line;

/// A call's arguments: a JSON object, with typed accessors whose errors tell
/// the model what was expected.
#[derive(Debug, Clone)]
pub(crate) struct Args(Map<String, Value>);

impl Args {
    pub(super) fn parse(tool: &str, text: &str) -> Result<Args, String> {
        if text.len() > MAX_ARGUMENT_BYTES {
            return Err(format!(
                "arguments are {} bytes, more than the {MAX_ARGUMENT_BYTES}-byte limit; split the work into smaller calls",
                text.len()
            ));
        }
        let text = if text.trim().is_empty() { "{}" } else { text };
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => Ok(Args(map)),
            Ok(other) => Err(format!(
                "arguments must be a JSON object like {{\"…\": …}}, got {}",
                kind(&other)
            )),
            Err(e) => Err(format!(
                "arguments are not valid JSON ({e}); send a JSON object with the {tool} arguments"
            )),
        }
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    /// A required string.
    pub(crate) fn string(&self, key: &str, expected: &str) -> Result<String, String> {
        match self.get(key) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(format!(
                "argument `{key}` must be a string ({expected}), got {}",
                kind(other)
            )),
            None => Err(format!("argument `{key}` is required: {expected}")),
        }
    }

    /// An optional string.
    pub(crate) fn opt_string(&self, key: &str, expected: &str) -> Result<Option<String>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(format!(
                "argument `{key}` must be a string ({expected}), got {}",
                kind(other)
            )),
        }
    }

    /// An optional non-negative integer (a numeric string is accepted too).
    pub(crate) fn opt_u64(&self, key: &str) -> Result<Option<u64>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
            Some(Value::String(s)) if s.trim().parse::<u64>().is_ok() => Ok(s.trim().parse().ok()),
            Some(other) => Err(format!(
                "argument `{key}` must be a non-negative integer, got {}",
                kind(other)
            )),
        }
    }

    /// An optional boolean (`"true"`/`"false"` accepted too).
    pub(crate) fn opt_bool(&self, key: &str) -> Result<Option<bool>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s == "true" || s == "false" => Ok(Some(s == "true")),
            Some(other) => Err(format!(
                "argument `{key}` must be true or false, got {}",
                kind(other)
            )),
        }
    }
}

/// A short description of a JSON value for error messages.
fn kind(v: &Value) -> String {
    let text = v.to_string();
    let shown = one_line(&text, 40);
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(_) => format!("the boolean {shown}"),
        Value::Number(_) => format!("the number {shown}"),
        Value::String(_) => format!("the string {shown}"),
        Value::Array(_) => format!("an array {shown}"),
        Value::Object(_) => format!("an object {shown}"),
    }
}

/// An I/O error on `path` as a message for the model.
pub(crate) fn io_message(path: &str, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => format!("{path}: no such file or directory"),
        std::io::ErrorKind::PermissionDenied => format!("{path}: permission denied"),
        _ => format!("{path}: {e}"),
    }
}
