//! Recovering tool calls a model wrote as text instead of sending them as
//! native `tool_calls` (small local models do: Qwen2.5-Coder against
//! llama.cpp wrote 0 native calls in 17 turns).
//!
//! [`recover_tool_calls`] is pure. It accepts a reply only when the whole
//! message, modulo whitespace, is the call(s) in one of the known formats
//! ([`TextCallFormat`]):
//!
//! - `<tool_call>{…}</tool_call>` (Hermes, Qwen), possibly several;
//! - `<tools>…</tools>`;
//! - a fenced code block (```` ```json ````, or no language), possibly several;
//! - a bare JSON object, array, or several objects separated by whitespace.
//!
//! Inside, each call is an object `{"name"|"function": …, "arguments"|"parameters": …}`
//! (also OpenAI's own `{"function": {"name", "arguments"}}` shape), whose
//! arguments may be an object or a JSON string holding one, and which has no
//! other keys than `type` and `id`. A call of an offered tool must have
//! arguments that validate against that tool's schema (required properties
//! present, the types of the top-level properties right, no unknown property
//! when the schema forbids them); a call naming a tool that is not offered is
//! kept as written, so that it gets the tool error listing the offered tools
//! instead of a nudge. A lone object without a tool name is the call of the
//! one offered tool whose schema it fits exactly (`recovered_from:
//! schema_fit`). Anything else — prose around a JSON example, arguments that
//! do not fit, an object that fits zero or several tools — yields `None`,
//! and the reply stays a text answer. [`recover_into`] applies it to
//! a reply message in place.

use super::{ChatMessage, FunctionCall, ToolCall, ToolDef};
use serde_json::{Map, Value};

/// The text format tool calls were recovered from (logged as
/// `recovered_from: text` with this format).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextCallFormat {
    /// `<tool_call>{…}</tool_call>` blocks (Hermes, Qwen).
    ToolCallTags,
    /// A `<tools>…</tools>` block.
    ToolsTags,
    /// Fenced code blocks (```` ```json ````).
    FencedJson,
    /// Bare JSON: an object, an array, or objects separated by whitespace.
    BareJson,
}

impl TextCallFormat {
    /// A stable name for logs: `tool_call_tags`, `tools_tags`, `fenced_json`, `bare_json`.
    pub fn as_str(self) -> &'static str {
        match self {
            TextCallFormat::ToolCallTags => "tool_call_tags",
            TextCallFormat::ToolsTags => "tools_tags",
            TextCallFormat::FencedJson => "fenced_json",
            TextCallFormat::BareJson => "bare_json",
        }
    }
}

/// Tool calls recovered from a text reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovered {
    /// The calls, in the order written; ids are `{id_prefix}_{n}`, arguments
    /// a compact JSON object text.
    pub calls: Vec<ToolCall>,
    /// Where they were found.
    pub format: TextCallFormat,
    /// Whether the call was a bare arguments object without a tool name,
    /// taken as the one offered tool whose schema it fits exactly
    /// (`recovered_from: schema_fit`; see [`schema_fit`]).
    pub schema_fit: bool,
}

impl Recovered {
    /// What the calls were recovered from, for the log: `schema_fit` for a
    /// nameless arguments object, `text` otherwise.
    pub fn recovered_from(&self) -> &'static str {
        if self.schema_fit {
            "schema_fit"
        } else {
            "text"
        }
    }
}

/// The tool calls `text` consists of, when it is nothing but calls of the
/// offered `tools` in a known format (see the module docs); `None` for
/// anything else, and always when no tools were offered.
///
/// `id_prefix` makes the ids unique in the conversation (e.g. `text3` for
/// turn 3 gives `text3_0`, `text3_1`, …).
pub fn recover_tool_calls(text: &str, tools: &[ToolDef], id_prefix: &str) -> Option<Recovered> {
    let text = text.trim();
    if tools.is_empty() || text.is_empty() {
        return None;
    }
    let (values, format) = if let Some(v) = tagged(text, "<tool_call>", "</tool_call>") {
        (v, TextCallFormat::ToolCallTags)
    } else if let Some(v) = tagged(text, "<tools>", "</tools>") {
        (v, TextCallFormat::ToolsTags)
    } else if let Some(v) = fenced(text) {
        (v, TextCallFormat::FencedJson)
    } else if text.starts_with(['{', '[']) {
        (json_values(text)?, TextCallFormat::BareJson)
    } else {
        return None;
    };
    // A lone object without a tool name: the arguments of the one offered
    // tool whose schema it fits exactly, if there is exactly one.
    if let [Value::Object(obj)] = values.as_slice()
        && call_of(&values[0], tools).is_none()
        && let Some(call) = schema_fit(obj, tools)
    {
        return Some(Recovered {
            calls: vec![into_call(0, call, id_prefix)],
            format,
            schema_fit: true,
        });
    }
    let mut calls = Vec::new();
    for value in values {
        match value {
            Value::Array(items) => {
                for item in items {
                    calls.push(call_of(&item, tools)?);
                }
            }
            other => calls.push(call_of(&other, tools)?),
        }
    }
    if calls.is_empty() {
        return None;
    }
    let calls = calls
        .into_iter()
        .enumerate()
        .map(|(i, call)| into_call(i, call, id_prefix))
        .collect();
    Some(Recovered {
        calls,
        format,
        schema_fit: false,
    })
}

/// The `i`th recovered call as a [`ToolCall`] with id `{id_prefix}_{i}`.
fn into_call(
    i: usize,
    (name, arguments): (String, Map<String, Value>),
    id_prefix: &str,
) -> ToolCall {
    ToolCall {
        id: format!("{id_prefix}_{i}"),
        kind: "function".to_owned(),
        function: FunctionCall {
            name,
            arguments: Value::Object(arguments).to_string(),
        },
    }
}

/// The one offered tool whose schema `args` fits exactly — every required
/// property present, every key a declared property of the right type (and
/// one of its `enum` values, if it has them), no other key whatever the
/// schema's `additionalProperties` — with `args` as its arguments; `None`
/// for an empty object or when zero or several tools fit.
fn schema_fit(
    args: &Map<String, Value>,
    tools: &[ToolDef],
) -> Option<(String, Map<String, Value>)> {
    if args.is_empty() {
        return None;
    }
    let fits = |tool: &&ToolDef| {
        let Some(props) = tool.parameters.get("properties").and_then(Value::as_object) else {
            return false;
        };
        let known = args.iter().all(|(key, value)| {
            props.get(key).is_some_and(|prop| {
                has_type(value, prop.get("type"))
                    && prop
                        .get("enum")
                        .and_then(Value::as_array)
                        .is_none_or(|allowed| allowed.contains(value))
            })
        });
        known && validates(args, &tool.parameters)
    };
    let mut fitting = tools.iter().filter(fits);
    let tool = fitting.next()?;
    fitting
        .next()
        .is_none()
        .then(|| (tool.name.to_owned(), args.clone()))
}

/// Applies [`recover_tool_calls`] to a reply: when `message` has no native
/// tool calls and its text is nothing but calls of the offered `tools`, the
/// calls become its `tool_calls` and its text is dropped (the calls are the
/// message now; keeping both would show the model its call twice). Returns
/// the format recovered from and what from ([`Recovered::recovered_from`]),
/// for the `tool_calls_recovered` log entry.
pub fn recover_into(
    message: &mut ChatMessage,
    tools: &[ToolDef],
    id_prefix: &str,
) -> Option<(TextCallFormat, &'static str)> {
    if !message.tool_calls.is_empty() {
        return None;
    }
    let recovered = recover_tool_calls(message.content.as_deref()?, tools, id_prefix)?;
    let from = recovered.recovered_from();
    message.tool_calls = recovered.calls;
    message.content = None;
    Some((recovered.format, from))
}

/// The JSON values of `open`…`close` blocks that make up all of `text`. The
/// last block's closing tag may be missing (generation often stops on it).
fn tagged(text: &str, open: &str, close: &str) -> Option<Vec<Value>> {
    let mut rest = text;
    let mut values = Vec::new();
    while !rest.is_empty() {
        let inner = rest.strip_prefix(open)?;
        let (found, after) = match json_before(inner, close) {
            Some(hit) => hit,
            // An unclosed last tag: the rest is its body.
            None if !inner.contains(close) => (json_values(inner.trim())?, ""),
            None => return None,
        };
        values.extend(found);
        rest = after.trim_start();
    }
    (!values.is_empty()).then_some(values)
}

/// The JSON values of the fenced code blocks that make up all of `text`
/// (language `json`, `tool_call`, or none).
fn fenced(text: &str) -> Option<Vec<Value>> {
    let mut rest = text;
    let mut values = Vec::new();
    while !rest.is_empty() {
        let inner = rest.strip_prefix("```")?;
        let (lang, body) = inner.split_once('\n')?;
        if !matches!(lang.trim(), "" | "json" | "JSON" | "tool_call") {
            return None;
        }
        let (found, after) = json_before(body, "```")?;
        values.extend(found);
        rest = after.trim_start();
    }
    (!values.is_empty()).then_some(values)
}

/// The JSON values of `body` up to the first `close` that ends them, and
/// what follows that `close`: a `close` inside a JSON string (a summary
/// that quotes a code fence) does not end the block.
fn json_before<'a>(body: &'a str, close: &str) -> Option<(Vec<Value>, &'a str)> {
    body.match_indices(close).find_map(|(end, _)| {
        json_values(body[..end].trim()).map(|v| (v, &body[end + close.len()..]))
    })
}

/// `text` as one or more JSON values separated by whitespace, all of it.
fn json_values(text: &str) -> Option<Vec<Value>> {
    if text.is_empty() {
        return None;
    }
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .collect::<Result<Vec<_>, _>>()
        .ok()
        .filter(|v| !v.is_empty())
}

/// The (name, arguments) of one written call, if it is a valid call of an
/// offered tool.
fn call_of(value: &Value, tools: &[ToolDef]) -> Option<(String, Map<String, Value>)> {
    let obj = value.as_object()?;
    if obj.keys().any(|k| {
        !matches!(
            k.as_str(),
            "name" | "function" | "arguments" | "parameters" | "type" | "id"
        )
    }) {
        return None;
    }
    let (name, args) = match (obj.get("name"), obj.get("function")) {
        (Some(Value::String(name)), None) => (name.as_str(), arguments_of(obj)?),
        (None, Some(Value::String(name))) => (name.as_str(), arguments_of(obj)?),
        // OpenAI's own shape: {"type": "function", "function": {"name", "arguments"}}.
        (None, Some(Value::Object(f))) if !obj.contains_key("arguments") => {
            (f.get("name")?.as_str()?, arguments_of(f)?)
        }
        _ => return None,
    };
    // A call of a tool that is not offered is still the model's call: it
    // runs into the tool error that lists the offered tools, rather than a
    // nudge about answering in text.
    let Some(tool) = tools.iter().find(|t| t.name == name) else {
        return (!name.trim().is_empty()).then(|| (name.to_owned(), args));
    };
    validates(&args, &tool.parameters).then(|| (name.to_owned(), args))
}

/// `arguments` or `parameters` (not both) as an object; a JSON string holding
/// an object counts; missing means `{}`.
fn arguments_of(obj: &Map<String, Value>) -> Option<Map<String, Value>> {
    let raw = match (obj.get("arguments"), obj.get("parameters")) {
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => return Some(Map::new()),
        (Some(_), Some(_)) => return None,
    };
    match raw {
        Value::Object(map) => Some(map.clone()),
        Value::String(s) => match serde_json::from_str::<Value>(s).ok()? {
            Value::Object(map) => Some(map),
            _ => None,
        },
        Value::Null => Some(Map::new()),
        _ => None,
    }
}

/// Whether `args` fits `schema` at the top level: required properties
/// present, known properties of the right type, no unknown ones when
/// `additionalProperties` is `false`.
fn validates(args: &Map<String, Value>, schema: &Value) -> bool {
    let props = schema.get("properties").and_then(Value::as_object);
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if required
        .iter()
        .filter_map(Value::as_str)
        .any(|r| !args.contains_key(r))
    {
        return false;
    }
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    args.iter()
        .all(|(key, value)| match props.and_then(|p| p.get(key)) {
            Some(prop) => has_type(value, prop.get("type")),
            None => !closed,
        })
}

/// Whether `value` is of the JSON Schema `ty` (a name or a list of names;
/// no type means any).
fn has_type(value: &Value, ty: Option<&Value>) -> bool {
    let one = |t: &str| match t {
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => true,
    };
    match ty {
        None => true,
        Some(Value::String(t)) => one(t),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).any(one),
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn tools() -> Vec<ToolDef> {
        vec![
            ToolDef {
                name: "read_file",
                description: "Read a file.",
                parameters: json!({"type": "object", "properties": {
                    "path": {"type": "string"}, "offset": {"type": "integer"}},
                    "required": ["path"]}),
            },
            ToolDef {
                name: "finish",
                description: "Finish.",
                parameters: json!({"type": "object", "properties": {
                    "summary": {"type": "string"}}, "required": ["summary"],
                    "additionalProperties": false}),
            },
        ]
    }

    fn names(r: &Recovered) -> Vec<(&str, &str, &str)> {
        r.calls
            .iter()
            .map(|c| {
                (
                    c.id.as_str(),
                    c.function.name.as_str(),
                    c.function.arguments.as_str(),
                )
            })
            .collect()
    }

    fn recover(text: &str) -> Option<Recovered> {
        recover_tool_calls(text, &tools(), "t1")
    }

    #[test]
    fn hermes_tool_call_tags_several() {
        let r = recover(
            "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.py\"}}\n</tool_call>\n\
             <tool_call>{\"name\": \"finish\", \"arguments\": {\"summary\": \"done\"}}</tool_call>",
        )
        .unwrap();
        assert_eq!(r.format, TextCallFormat::ToolCallTags);
        assert_eq!(
            names(&r),
            [
                ("t1_0", "read_file", r#"{"path":"a.py"}"#),
                ("t1_1", "finish", r#"{"summary":"done"}"#)
            ]
        );
        // Generation stopped on the closing tag.
        let r = recover("<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"b\"}}")
            .unwrap();
        assert_eq!(names(&r), [("t1_0", "read_file", r#"{"path":"b"}"#)]);
    }

    #[test]
    fn tools_tags_with_an_array_and_string_arguments() {
        let r = recover(
            r#"<tools>[{"name": "read_file", "arguments": "{\"path\": \"x.rs\", \"offset\": 3}"}]</tools>"#,
        )
        .unwrap();
        assert_eq!(r.format, TextCallFormat::ToolsTags);
        assert_eq!(
            names(&r),
            [("t1_0", "read_file", r#"{"offset":3,"path":"x.rs"}"#)]
        );
    }

    #[test]
    fn a_fence_or_a_tag_inside_an_argument_does_not_end_the_block() {
        let r =
            recover("```json\n{\"name\": \"finish\", \"arguments\": {\"summary\": \"```\"}}\n```")
                .unwrap();
        assert_eq!(names(&r), [("t1_0", "finish", r#"{"summary":"```"}"#)]);
        let r = recover("<tool_call>{\"name\": \"finish\", \"arguments\": {\"summary\": \"a </tool_call> b\"}}</tool_call>")
            .unwrap();
        assert_eq!(
            names(&r),
            [("t1_0", "finish", r#"{"summary":"a </tool_call> b"}"#)]
        );
    }

    #[test]
    fn fenced_json_blocks() {
        let r = recover(
            "```json\n{\"function\": \"read_file\", \"parameters\": {\"path\": \"src/lib.rs\"}}\n```\n",
        )
        .unwrap();
        assert_eq!(r.format, TextCallFormat::FencedJson);
        assert_eq!(
            names(&r),
            [("t1_0", "read_file", r#"{"path":"src/lib.rs"}"#)]
        );
        let r = recover("```\n{\"name\": \"finish\", \"arguments\": {\"summary\": \"s\"}}\n```\n```json\n{\"name\": \"finish\", \"arguments\": {\"summary\": \"t\"}}\n```").unwrap();
        assert_eq!(r.calls.len(), 2);
        assert!(
            recover("```python\n{\"name\": \"finish\", \"arguments\": {\"summary\": \"s\"}}\n```")
                .is_none()
        );
    }

    #[test]
    fn bare_json_objects_arrays_and_openai_shape() {
        let r = recover(r#"  {"name": "finish", "arguments": {"summary": "ok"}}  "#).unwrap();
        assert_eq!(r.format, TextCallFormat::BareJson);
        assert_eq!(names(&r), [("t1_0", "finish", r#"{"summary":"ok"}"#)]);
        let r = recover(
            r#"[{"name": "read_file", "arguments": {"path": "a"}}, {"name": "read_file", "arguments": {"path": "b"}}]"#,
        )
        .unwrap();
        assert_eq!(r.calls.len(), 2);
        let r = recover(
            "{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"b\"}}",
        )
        .unwrap();
        assert_eq!(r.calls.len(), 2);
        let r = recover(
            r#"{"type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}}"#,
        )
        .unwrap();
        assert_eq!(names(&r), [("t1_0", "read_file", r#"{"path":"a"}"#)]);
    }

    #[test]
    fn prose_unknown_tools_and_bad_arguments_are_not_calls() {
        for text in [
            // Prose around a JSON example.
            "To read it I would call {\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}} next.",
            "Here is the call:\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```",
            "<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}</tool_call> and then I stop",
            // Required property missing; wrong type; unknown property of a closed schema.
            "{\"name\": \"read_file\", \"arguments\": {}}",
            "{\"name\": \"read_file\", \"arguments\": {\"path\": 7}}",
            "{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\", \"offset\": \"3\"}}",
            "{\"name\": \"finish\", \"arguments\": {\"summary\": \"s\", \"verdict\": \"x\"}}",
            // A JSON document that is not a call.
            "{\"name\": \"read_file\", \"age\": 3}",
            "{\"verdict\": \"approve\"}",
            "[1, 2, 3]",
            "[]",
            "",
            "   ",
            "<tool_call></tool_call>",
            // Arguments both ways, or not an object.
            "{\"name\": \"finish\", \"arguments\": {\"summary\": \"a\"}, \"parameters\": {\"summary\": \"b\"}}",
            "{\"name\": \"finish\", \"arguments\": \"not json\"}",
        ] {
            assert_eq!(recover(text), None, "{text:?}");
        }
        // A call of a tool that is not offered is kept, to get the tool error.
        let r = recover(r#"{"name": "digitSum", "arguments": {"solution.py": {"content": "x"}}}"#)
            .unwrap();
        assert_eq!(
            names(&r),
            [("t1_0", "digitSum", r#"{"solution.py":{"content":"x"}}"#)]
        );
        // And never without offered tools.
        assert_eq!(
            recover_tool_calls(
                "{\"name\": \"finish\", \"arguments\": {\"summary\": \"s\"}}",
                &[],
                "t"
            ),
            None
        );
    }

    #[test]
    fn a_nameless_object_is_the_call_of_the_one_tool_it_fits() {
        let mut tools = tools();
        tools.push(ToolDef {
            name: "list_files",
            description: "List.",
            parameters: json!({"type": "object", "properties": {
                "path": {"type": "string"}, "pattern": {"type": "string"}}}),
        });
        tools[1].parameters = json!({"type": "object", "properties": {
            "summary": {"type": "string"},
            "verdict": {"type": "string", "enum": ["approve", "request_changes"]}},
            "required": ["summary"]});
        let fit = |text: &str| recover_tool_calls(text, &tools, "t1");
        let r = fit(r#"{"summary": "Implemented median.", "verdict": "approve"}"#).unwrap();
        assert!(r.schema_fit);
        assert_eq!(r.recovered_from(), "schema_fit");
        assert_eq!(r.format, TextCallFormat::BareJson);
        assert_eq!(
            names(&r),
            [(
                "t1_0",
                "finish",
                r#"{"summary":"Implemented median.","verdict":"approve"}"#
            )]
        );
        let r = fit("```json\n{\"pattern\": \"*.py\"}\n```").unwrap();
        assert_eq!(r.format, TextCallFormat::FencedJson);
        assert_eq!(names(&r), [("t1_0", "list_files", r#"{"pattern":"*.py"}"#)]);
        // A named call is not a schema fit.
        let r = fit(r#"{"name": "finish", "arguments": {"summary": "s"}}"#).unwrap();
        assert_eq!(r.recovered_from(), "text");
        for text in [
            // Fits two tools (read_file and list_files).
            r#"{"path": "a.py"}"#,
            // A key no tool declares; a required key missing; a wrong type; not in the enum.
            r#"{"summary": "s", "verdict": "approve", "confidence": 1}"#,
            r#"{"verdict": "approve"}"#,
            r#"{"summary": 3}"#,
            r#"{"summary": "s", "verdict": "yes"}"#,
            // Empty, or several objects.
            "{}",
            "{\"summary\": \"a\"}\n{\"summary\": \"b\"}",
            // Prose around it.
            r#"Done: {"summary": "s"}"#,
        ] {
            assert_eq!(fit(text), None, "{text:?}");
        }
    }

    #[test]
    fn recover_into_replaces_the_text_only_when_there_are_no_native_calls() {
        let text =
            "<tool_call>{\"name\": \"finish\", \"arguments\": {\"summary\": \"s\"}}</tool_call>";
        let mut m = ChatMessage {
            role: super::super::MessageRole::Assistant,
            content: Some(text.into()),
            tool_calls: vec![],
            tool_call_id: None,
        };
        assert_eq!(
            recover_into(&mut m, &tools(), "text2"),
            Some((TextCallFormat::ToolCallTags, "text"))
        );
        assert_eq!(m.content, None);
        assert_eq!(m.tool_calls[0].id, "text2_0");
        assert_eq!(m.tool_calls[0].function.name, "finish");
        // Native calls win; a text answer stays one.
        let before = m.clone();
        assert_eq!(recover_into(&mut m, &tools(), "text3"), None);
        assert_eq!(m, before);
        let mut prose = ChatMessage {
            content: Some("All done.".into()),
            tool_calls: vec![],
            ..before
        };
        assert_eq!(recover_into(&mut prose, &tools(), "text4"), None);
        assert_eq!(prose.content.as_deref(), Some("All done."));
    }

    /// A call of `read_file` or `finish` with a generated argument.
    fn call_text() -> impl Strategy<Value = (String, Value)> {
        prop_oneof![
            "[a-z/._]{1,20}".prop_map(|p| ("read_file".to_owned(), json!({"path": p}))),
            ".{0,40}".prop_map(|s| ("finish".to_owned(), json!({"summary": s}))),
        ]
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_text(text in ".{0,200}") {
            let _ = recover(&text);
        }

        #[test]
        fn never_panics_on_near_misses(
            prefix in prop_oneof![Just(""), Just("<tool_call>"), Just("<tools>"), Just("```json\n"), Just("{"), Just("[")],
            body in "[{}\\[\\]\":,a-z0-9 \n`<>/]{0,80}",
        ) {
            let _ = recover(&format!("{prefix}{body}"));
        }

        #[test]
        fn written_calls_are_recovered_in_every_format(
            calls in prop::collection::vec(call_text(), 1..4),
            format in 0usize..4,
        ) {
            let objects: Vec<String> = calls
                .iter()
                .map(|(name, args)| json!({"name": name, "arguments": args}).to_string())
                .collect();
            let text = match format {
                0 => objects.iter().map(|o| format!("<tool_call>\n{o}\n</tool_call>")).collect::<Vec<_>>().join("\n"),
                1 => format!("<tools>[{}]</tools>", objects.join(",")),
                2 => objects.iter().map(|o| format!("```json\n{o}\n```")).collect::<Vec<_>>().join("\n\n"),
                _ => objects.join("\n"),
            };
            let r = recover(&text).expect("recovered");
            prop_assert_eq!(r.calls.len(), calls.len());
            for (got, (name, args)) in r.calls.iter().zip(&calls) {
                prop_assert_eq!(&got.function.name, name);
                let parsed: Value = serde_json::from_str(&got.function.arguments).unwrap();
                prop_assert_eq!(&parsed, args);
            }
        }

        #[test]
        fn prose_around_a_call_is_never_a_call(
            (name, args) in call_text(),
            before in "[A-Za-z][A-Za-z ,.]{0,30}",
        ) {
            let object = json!({"name": name, "arguments": args}).to_string();
            prop_assert_eq!(recover(&format!("{before} {object}")), None);
            prop_assert_eq!(recover(&format!("{object} {before}")), None);
        }
    }
}
