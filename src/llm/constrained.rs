//! Constrained tool calls: a turn asked under a JSON schema that admits
//! exactly one of the offered tools with its argument schema, for models
//! that do not call tools natively (small local models write their calls
//! as text; the server's grammar makes that text a well-formed call).
//!
//! What this module gives the client and the agent loop:
//! - [`call_schema`]: `{"oneOf": [{"type": "object", "properties": {"name":
//!   {"const": <tool>}, "arguments": <its parameters>}, "required": ["name",
//!   "arguments"], "additionalProperties": false}, …]}`, one entry per
//!   offered tool (`finish` is one of them);
//! - [`schema_field`]: where that schema goes in the request body, by
//!   [`ConstrainedDialect`];
//! - [`catalogue`]: the tools described in the system prompt (a constrained
//!   or text turn sends no `tools` array, so the chat template does not
//!   describe them);
//! - [`take_call`]: the reply's JSON made the turn's tool call, so it is
//!   dispatched and logged like a native one;
//! - [`CallState`]: an agent's mode from turn to turn, switching from native
//!   to constrained once when `tool_calling = "auto"` and a turn's calls
//!   came as text, and back (for good) when the server refuses the schema.
//!
//! Invariants: a request whose mode is [`CallMode::Native`], or that offers
//! no tools, is built exactly as before this module existed (no field is
//! added, none removed). A constrained reply that is not a call stays the
//! reply's text: it is never dropped, and gets the loop's usual handling
//! (text recovery, then a nudge, then failure).

use super::settings::{CallMode, ConstrainedDialect, ToolCalling};
use super::{ChatMessage, ChatRequest, FunctionCall, ToolCall, ToolDef};
use serde_json::{Value, json};

/// The `name` of the schema in `response_format.json_schema`.
pub const SCHEMA_NAME: &str = "tool_call";

/// How `req` asks for calls: its mode, except that a request offering no
/// tools is always native.
pub fn effective_mode(req: &ChatRequest) -> CallMode {
    if req.tools.is_empty() {
        CallMode::Native
    } else {
        req.call_mode
    }
}

/// The JSON schema admitting exactly one call of one of `tools`.
pub fn call_schema(tools: &[ToolDef]) -> Value {
    let one_of: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({
                "type": "object",
                "properties": {
                    "name": {"const": t.name},
                    "arguments": t.parameters,
                },
                "required": ["name", "arguments"],
                "additionalProperties": false,
            })
        })
        .collect();
    json!({ "oneOf": one_of })
}

/// The request field (name and value) that carries `schema` for `dialect`.
pub fn schema_field(dialect: ConstrainedDialect, schema: Value) -> (&'static str, Value) {
    match dialect {
        ConstrainedDialect::OpenAi | ConstrainedDialect::Ollama => (
            "response_format",
            json!({
                "type": "json_schema",
                "json_schema": {"name": SCHEMA_NAME, "schema": schema},
            }),
        ),
        ConstrainedDialect::LlamaCpp => ("json_schema", schema),
        ConstrainedDialect::Vllm => ("structured_outputs", json!({ "json": schema })),
    }
}

/// The tools described for the system prompt of a constrained or text turn:
/// how to call, then one line per tool with its description and the JSON
/// schema of its arguments.
pub fn catalogue(tools: &[ToolDef]) -> String {
    let mut out = String::from(
        "\n\n## Calling tools\n\nAnswer every turn with exactly one tool call and nothing else: \
         one JSON object {\"name\": \"<tool>\", \"arguments\": {…}}. \
         Call `finish` when the task is done.\n\nTools:\n",
    );
    for t in tools {
        out.push_str(&format!(
            "- {}: {} Arguments: {}\n",
            t.name, t.description, t.parameters
        ));
    }
    out
}

/// The system message of a constrained or text turn: `messages`' first
/// message when it is the system prompt, with [`catalogue`] appended, else
/// a system message of the catalogue alone (sent before the others).
pub fn system_with_catalogue(messages: &[ChatMessage], tools: &[ToolDef]) -> ChatMessage {
    match messages.first() {
        Some(m) if m.role == super::MessageRole::System => ChatMessage::system(format!(
            "{}{}",
            m.content.as_deref().unwrap_or(""),
            catalogue(tools)
        )),
        _ => ChatMessage::system(catalogue(tools).trim_start().to_owned()),
    }
}

/// Makes a constrained reply's JSON text its tool call: a reply without
/// native calls whose content is one JSON object with a string `name`
/// becomes the call `{name, arguments}` (arguments: the object as JSON, a
/// string as written, `{}` when missing) with id `call_0`, and loses its
/// text. The name is not checked here: a tool that is not offered gets the
/// loop's tool error, arguments that do not fit the tool's. Anything else
/// is left as it is (and stays a text reply). True when a call was made.
pub fn take_call(msg: &mut ChatMessage) -> bool {
    if !msg.tool_calls.is_empty() {
        return false;
    }
    let Some(text) = msg.content.as_deref() else {
        return false;
    };
    let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(text.trim()) else {
        return false;
    };
    let Some(name) = obj.get("name").and_then(Value::as_str) else {
        return false;
    };
    let arguments = match obj.get("arguments") {
        None | Some(Value::Null) => "{}".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    msg.tool_calls.push(ToolCall {
        id: "call_0".to_owned(),
        kind: "function".to_owned(),
        function: FunctionCall {
            name: name.to_owned(),
            arguments,
        },
    });
    msg.content = None;
    true
}

/// The models (by [`super::ChatModel::label`]: model and server) an agent
/// of this process switched to constrained calls under `auto` because they
/// wrote their calls as text. The run's later agents with the same model
/// start constrained ([`CallState::learned`]) instead of spending their
/// first turn finding out again — a small model's unconstrained first turn
/// is also its longest (the 1.5B docs stage wrote up to `max_tokens` of
/// `<tools>` text there). A server that refuses the schema takes its model
/// off again. Only this process: a new run asks natively first.
static TEXT_CALLERS: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

fn text_callers() -> std::sync::MutexGuard<'static, std::collections::BTreeSet<String>> {
    TEXT_CALLERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Notes that `label`'s model writes its calls as text (see [`TEXT_CALLERS`]).
pub fn learn_calls_as_text(label: &str) {
    text_callers().insert(label.to_owned());
}

/// Takes `label`'s model off [`TEXT_CALLERS`] (its server refused the schema).
pub fn forget_calls_as_text(label: &str) {
    text_callers().remove(label);
}

/// Whether an earlier agent of this process found that `label`'s model
/// writes its calls as text.
pub fn calls_as_text_learned(label: &str) -> bool {
    text_callers().contains(label)
}

/// An agent's way of asking for calls, turn by turn.
#[derive(Debug, Clone, Copy)]
pub struct CallState {
    setting: ToolCalling,
    mode: CallMode,
    /// Switched to constrained by [`CallState::text_instead_of_call`].
    switched: bool,
    /// Switched back by [`CallState::schema_refused`]: no more switches.
    reverted: bool,
}

impl CallState {
    /// The state for an agent whose model is configured with `setting`.
    pub fn new(setting: ToolCalling) -> Self {
        CallState {
            setting,
            mode: setting.first_mode(),
            switched: false,
            reverted: false,
        }
    }

    /// The state of an agent whose model (`label`) an earlier agent of this
    /// process found to write its calls as text: under `auto`, constrained
    /// from the first turn, as if switched (a server that refuses the
    /// schema still sends it back to native). `None` when the setting is
    /// not `auto` or nothing was learned.
    pub fn learned(setting: ToolCalling, label: &str) -> Option<Self> {
        (setting == ToolCalling::Auto && calls_as_text_learned(label)).then_some(CallState {
            setting,
            mode: CallMode::Constrained,
            switched: true,
            reverted: false,
        })
    }

    /// How the next turn asks for calls.
    pub fn mode(&self) -> CallMode {
        self.mode
    }

    /// A turn's tool calls were written as text instead of sent natively.
    /// Under `auto`, while still native, the following turns are
    /// constrained: the new mode, once; `None` otherwise.
    pub fn text_instead_of_call(&mut self) -> Option<CallMode> {
        if self.setting == ToolCalling::Auto
            && self.mode == CallMode::Native
            && !self.switched
            && !self.reverted
        {
            self.switched = true;
            self.mode = CallMode::Constrained;
            return Some(self.mode);
        }
        None
    }

    /// The server refused a constrained request (HTTP 4xx). When the switch
    /// to constrained was automatic, the agent goes back to native calls for
    /// good: the new mode, once; `None` when the user asked for
    /// constrained calls (the error then ends the turn as any other).
    pub fn schema_refused(&mut self) -> Option<CallMode> {
        if self.switched && !self.reverted && self.mode == CallMode::Constrained {
            self.reverted = true;
            self.mode = CallMode::Native;
            return Some(self.mode);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &'static str) -> ToolDef {
        ToolDef {
            name,
            description: "does it.",
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        }
    }

    fn reply(text: &str) -> ChatMessage {
        ChatMessage {
            role: super::super::MessageRole::Assistant,
            content: Some(text.to_owned()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    #[test]
    fn schema_has_one_entry_per_tool_with_its_arguments() {
        let s = call_schema(&[tool("read_file"), tool("finish")]);
        let one_of = s["oneOf"].as_array().unwrap();
        assert_eq!(one_of.len(), 2);
        assert_eq!(one_of[1]["properties"]["name"]["const"], "finish");
        assert_eq!(
            one_of[0]["properties"]["arguments"]["required"],
            json!(["path"])
        );
        let (field, v) = schema_field(ConstrainedDialect::Vllm, s.clone());
        assert_eq!((field, &v["json"]), ("structured_outputs", &s));
    }

    #[test]
    fn a_json_reply_becomes_the_call_and_anything_else_stays_text() {
        let mut m = reply(" {\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n");
        assert!(take_call(&mut m));
        assert_eq!(m.content, None);
        assert_eq!(m.tool_calls[0].function.name, "read_file");
        assert_eq!(m.tool_calls[0].function.arguments, r#"{"path":"a"}"#);
        for text in ["done.", "{\"summary\": \"x\"}", "[1]", "{\"name\": 3}"] {
            let mut m = reply(text);
            assert!(!take_call(&mut m), "{text}");
            assert_eq!(m.content.as_deref(), Some(text));
        }
    }

    #[test]
    fn auto_switches_once_and_the_others_never() {
        let mut s = CallState::new(ToolCalling::Auto);
        assert_eq!(s.mode(), CallMode::Native);
        assert_eq!(s.text_instead_of_call(), Some(CallMode::Constrained));
        assert_eq!(s.text_instead_of_call(), None);
        assert_eq!(s.mode(), CallMode::Constrained);
        assert_eq!(s.schema_refused(), Some(CallMode::Native));
        assert_eq!(s.schema_refused(), None);
        assert_eq!(
            s.text_instead_of_call(),
            None,
            "never again after a refusal"
        );
        assert_eq!(s.mode(), CallMode::Native);
        for setting in [
            ToolCalling::Native,
            ToolCalling::Text,
            ToolCalling::Constrained,
        ] {
            let mut s = CallState::new(setting);
            assert_eq!(s.text_instead_of_call(), None);
            assert_eq!(s.schema_refused(), None);
            assert_eq!(s.mode(), setting.first_mode());
        }
    }
}
