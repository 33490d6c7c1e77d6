//! The snippets of server bodies quoted in errors: short, one line, safe
//! in a terminal, and showing the part that names the problem (a leaf of
//! `openai`: the wire format and the error classification both quote).

/// Longest snippet of a server body quoted in an error.
pub(super) const SNIPPET_CHARS: usize = 200;

/// A body as quoted in an error, whitespace collapsed and control
/// characters (NUL, ESC, …, and any byte that is not UTF-8) shown as `�`,
/// so the quote is safe in a terminal, a one-line reason and a commit
/// message: whole when it is
/// short; otherwise the part that names the problem — the JSON error's
/// `message` (or `detail`), and within a long text the stretch around the
/// first phrase that names what was rejected — else its first
/// [`SNIPPET_CHARS`] characters.
pub(super) fn snippet(bytes: &[u8]) -> String {
    // Only the head can be quoted, and a JSON error's message is only looked
    // for in a body small enough to parse cheaply.
    let bytes = &bytes[..bytes.len().min(SNIPPET_SCAN_BYTES)];
    let text = String::from_utf8_lossy(bytes);
    let collapsed = collapse(&text);
    if collapsed.is_empty() {
        return "(empty body)".to_owned();
    }
    if collapsed.chars().count() <= SNIPPET_CHARS {
        return collapsed;
    }
    // The server's own message, when the body is a JSON error.
    let message = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| error_message(&v))
        .map(|m| collapse(&m));
    let focus = message.as_deref().unwrap_or(&collapsed);
    focused(focus)
}

/// Most bytes of a body [`snippet`] looks at.
const SNIPPET_SCAN_BYTES: usize = 64 << 10;

/// Whitespace runs become one space; other control characters become `�`.
fn collapse(text: &str) -> String {
    text.split_whitespace()
        .map(|word| {
            word.chars()
                .map(|c| if c.is_control() { '\u{fffd}' } else { c })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `error.message`, `message`, `detail` or `error` (a string) of a JSON body.
fn error_message(v: &serde_json::Value) -> Option<String> {
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Null => None,
        other => Some(other.to_string()),
    };
    let err = v.get("error");
    err.and_then(|e| e.get("message"))
        .and_then(text)
        .or_else(|| v.get("message").and_then(text))
        .or_else(|| v.get("detail").and_then(text))
        .or_else(|| err.filter(|e| e.is_string()).and_then(text))
}

/// Phrases that name what a server rejected, most telling first in effect:
/// the earliest one found in a text anchors its quoted stretch.
const PROBLEM_MARKERS: &[&str] = &[
    "validation error",
    "input should be",
    "field required",
    "is not a valid",
    "invalid",
    "not allowed",
    "not permitted",
    "missing",
    "required",
    "unexpected",
    "must be",
    "error",
];

/// Characters quoted before the problem's phrase (its context, e.g. the
/// field name on the line above).
const FOCUS_BEFORE: usize = 80;
/// Longest stretch quoted around a problem's phrase.
const FOCUS_CHARS: usize = 2 * SNIPPET_CHARS;

/// `text` cut to the stretch around its first [`PROBLEM_MARKERS`] phrase
/// (or its head), marked with `…` where cut.
fn focused(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let lower = text.to_ascii_lowercase();
    let anchor = PROBLEM_MARKERS
        .iter()
        .filter_map(|m| lower.find(m))
        .min()
        // A byte offset of the lowercased text is one of `text` (ASCII case
        // mapping keeps lengths); count the characters before it.
        .map(|byte| text[..byte].chars().count());
    let (start, len) = match anchor {
        Some(at) if at + FOCUS_CHARS - FOCUS_BEFORE > SNIPPET_CHARS => {
            (at.saturating_sub(FOCUS_BEFORE), FOCUS_CHARS)
        }
        // The phrase is within the head anyway.
        Some(_) => (0, FOCUS_CHARS.min(chars.len())),
        None => (0, SNIPPET_CHARS),
    };
    if start == 0 && chars.len() <= len {
        return text.to_owned();
    }
    let end = (start + len).min(chars.len());
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.extend(&chars[start..end]);
    if end < chars.len() {
        out.push('…');
    }
    out
}

pub(super) fn compact(value: &serde_json::Value) -> String {
    let text = match value.get("message").and_then(|m| m.as_str()) {
        Some(message) => message.to_owned(),
        None => value.to_string(),
    };
    snippet(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippet_is_short_and_collapsed() {
        let long = "x".repeat(500);
        let s = snippet(long.as_bytes());
        assert_eq!(s.chars().count(), SNIPPET_CHARS + 1);
        assert_eq!(
            snippet(b"<html>\n  <body>oops</body>\n</html>"),
            "<html> <body>oops</body> </html>"
        );
        assert_eq!(snippet(b"  "), "(empty body)");
    }

    #[test]
    fn snippet_has_no_control_characters() {
        let s = snippet(b"\x00bad\x1b[31m body\n\twith\x07 \xff\xfe bytes\x7f");
        assert_eq!(
            s,
            "\u{fffd}bad\u{fffd}[31m body with\u{fffd} \u{fffd}\u{fffd} bytes\u{fffd}"
        );
        // A long body is looked at only in its head.
        let mut long = vec![b'a'; 200 << 10];
        long[0] = 0;
        let s = snippet(&long);
        assert!(s.starts_with('\u{fffd}') && s.chars().count() <= SNIPPET_CHARS + 1);
    }

    #[test]
    fn snippet_shows_the_part_that_names_the_problem() {
        // llama-cpp-python: a 500 whose message names the rejected field late.
        let message = format!(
            "{} 1 validation error for ChatCompletionRequestAssistantMessage content Input should be a valid string [type=string_type, input_value=None]",
            "Traceback (most recent call last): File \"server/app.py\", line 10, in handler "
                .repeat(4)
        );
        let body =
            serde_json::json!({"error": {"message": message, "type": "internal_server_error"}});
        let s = snippet(body.to_string().as_bytes());
        assert!(s.contains("content Input should be a valid string"), "{s}");
        assert!(s.starts_with('…'), "{s}");
        // A long text without a JSON wrapper is searched the same way.
        let text = format!("{} field required: messages.1.content", "x ".repeat(300));
        let s = snippet(text.as_bytes());
        assert!(s.contains("field required: messages.1.content"), "{s}");
        // A short body is quoted whole.
        assert_eq!(snippet(br#"{"error":"bad"}"#), r#"{"error":"bad"}"#);
    }
}
