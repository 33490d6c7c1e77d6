//! The wire format: the request body as sent, the completion as servers
//! actually send it (lenient about nulls and omissions), and the snippets of
//! server bodies quoted in errors.

use super::classify::Attempt;
use super::client::OpenAiClient;
use super::snippet::{compact, snippet};
use crate::llm::constrained;
use crate::llm::retry::{context_window_in_message, is_context_length_message};
use crate::llm::settings::{CallMode, Sampling, ToolChoice};
use crate::llm::stream::{
    Assembled, MAX_TOOL_CALLS, oversize, reply_bytes, unique_call_ids, usage_of, with_timings,
};
use crate::llm::{
    ChatMessage, ChatRequest, ChatResponse, FunctionCall, LlmError, MessageRole, ToolCall, ToolDef,
    estimate_usage,
};
use reqwest::header::HeaderValue;
use serde::{Deserialize, Serialize};

impl OpenAiClient {
    /// The JSON body of a request for `req`, streamed or not.
    pub(super) fn request_body(
        &self,
        req: &ChatRequest,
        stream: bool,
    ) -> Result<Vec<u8>, LlmError> {
        let settings = &self.settings;
        let mode = constrained::effective_mode(req);
        // A constrained or text turn sends no `tools` (llama.cpp answers
        // `tools` with a JSON schema by its generic tool-call format, which
        // wraps the schema): the tools are described in the system prompt.
        let tools: &[ToolDef] = match mode {
            CallMode::Native => &req.tools,
            CallMode::Constrained | CallMode::Text => &[],
        };
        let system = (mode != CallMode::Native)
            .then(|| constrained::system_with_catalogue(&req.messages, &req.tools));
        let mut messages: Vec<WireOutMessage> = Vec::with_capacity(req.messages.len() + 1);
        let mut rest = req.messages.iter();
        if let Some(system) = &system {
            messages.push(WireOutMessage(system));
            if req.messages.first().map(|m| m.role) == Some(MessageRole::System) {
                rest.next();
            }
        }
        messages.extend(rest.map(WireOutMessage));
        let mut extra = serde_json::Map::new();
        if mode == CallMode::Constrained {
            let (field, value) = constrained::schema_field(
                settings.constrained_dialect,
                constrained::call_schema(&req.tools),
            );
            extra.insert(field.to_owned(), value);
        }
        if self.is_llama_cpp() {
            extra.insert("cache_prompt".to_owned(), serde_json::Value::Bool(true));
        }
        let offers_tools = !tools.is_empty();
        let wants_mct = self.wants_max_completion_tokens();
        let mut sampling = settings.sampling;
        if mode == CallMode::Constrained {
            sampling.max_tokens = settings.constrained_cap();
        }
        let wire = WireRequest {
            model: &settings.model,
            messages,
            tools,
            sampling: Sampling {
                tool_choice: offers_tools.then(|| sampling.tool_choice.unwrap_or(ToolChoice::Auto)),
                max_tokens: sampling.max_tokens.filter(|_| !wants_mct),
                ..sampling
            },
            max_completion_tokens: sampling.max_tokens.filter(|_| wants_mct),
            stream,
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
            constrained: extra,
        };
        serde_json::to_vec(&wire).map_err(|e| {
            LlmError::Config(format!(
                "the request to {} could not be encoded: {e}",
                self.endpoint
            ))
        })
    }

    /// True when the server is known to be llama.cpp: the profile says so
    /// (`constrained_dialect = "llamacpp"`) or a reply carried its
    /// `timings`. Only then is `cache_prompt` sent, so requests to other
    /// servers stay as they were.
    fn is_llama_cpp(&self) -> bool {
        self.settings.constrained_dialect == crate::llm::settings::ConstrainedDialect::LlamaCpp
            || self.llama_cpp.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn bad(&self, reason: String) -> LlmError {
        LlmError::BadResponse {
            url: self.endpoint.clone(),
            reason,
        }
    }

    pub(super) fn parse_completion(&self, bytes: &[u8]) -> Result<Assembled, Attempt> {
        let bad = |what: &str| {
            Attempt::Fatal(self.bad(format!(
                "{what}; the body starts with: {}",
                self.redact(&snippet(bytes))
            )))
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(Attempt::Fatal(self.bad("the body is empty".to_owned())));
        }
        let wire: WireResponse = serde_json::from_slice(bytes)
            .map_err(|e| bad(&format!("not a chat completion ({e})")))?;
        if let Some(err) = wire.error {
            if is_context_length_message(&err.to_string()) {
                return Err(Attempt::Fatal(LlmError::ContextLength {
                    url: self.endpoint.clone(),
                    status: 200,
                    body: self.redact(&compact(&err)),
                    window: context_window_in_message(&err.to_string()),
                }));
            }
            return Err(bad(&format!(
                "the server reported an error: {}",
                self.redact(&compact(&err))
            )));
        }
        let choice = wire
            .choices
            .and_then(|c| c.into_iter().next())
            .ok_or_else(|| bad("it has no choices"))?;
        let message = choice
            .message
            .ok_or_else(|| bad("its first choice has no message"))?;
        let content = match message.content {
            serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(s),
            // Some servers send content parts; keep their text.
            serde_json::Value::Array(parts) => Some(
                parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(|t| t.as_str()))
                    .collect::<Vec<_>>()
                    .join(""),
            ),
            _ => return Err(bad("its message content is neither text nor null")),
        };
        let calls = message.tool_calls.unwrap_or_default();
        if calls.len() > MAX_TOOL_CALLS {
            return Err(Attempt::Fatal(self.bad(format!(
                "the reply holds {} tool calls, more than {MAX_TOOL_CALLS}",
                calls.len()
            ))));
        }
        let tool_calls = calls
            .into_iter()
            .enumerate()
            .map(|(i, call)| ToolCall {
                // A few local servers omit ids; the agent loop still needs one to answer.
                id: call
                    .id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| format!("call_{i}")),
                kind: "function".to_owned(),
                function: FunctionCall {
                    name: call.function.name,
                    arguments: match call.function.arguments {
                        serde_json::Value::String(s) => s,
                        serde_json::Value::Null => String::new(),
                        other => other.to_string(),
                    },
                },
            })
            .collect();
        let message = ChatMessage {
            role: MessageRole::Assistant,
            content,
            tool_calls,
            tool_call_id: None,
        };
        let limit = self.settings.max_reply_bytes;
        if let Some(why) = oversize(reply_bytes(&message), message.tool_calls.len(), limit) {
            return Err(Attempt::Fatal(self.bad(why)));
        }
        Ok(Assembled {
            message,
            finish_reason: choice.finish_reason,
            usage: wire
                .usage
                .filter(|u| u.is_object())
                .map(|u| with_timings(usage_of(&u), wire.timings.as_ref())),
            header_cost: None,
            llama_cpp: wire.timings.as_ref().is_some_and(|t| t.is_object()),
        })
    }

    /// A server body as errors quote it: a short one-line snippet, the key
    /// masked (for the other wire formats).
    pub(crate) fn quote(&self, bytes: &[u8]) -> String {
        self.redact(&snippet(bytes))
    }

    /// Masks any echo of the API key (some servers quote the key they rejected).
    pub(crate) fn redact(&self, text: &str) -> String {
        match &self.settings.api_key {
            Some(key)
                if key.len() >= crate::secrets::MIN_SECRET_LEN && text.contains(key.as_str()) =>
            {
                text.replace(key.as_str(), "<redacted>")
            }
            _ => text.to_owned(),
        }
    }
}

/// The response for the agent loop: call ids unique in the conversation,
/// usage estimated when the server sent none.
pub(super) fn finalize(req: &ChatRequest, mut assembled: Assembled) -> ChatResponse {
    // A constrained turn's JSON reply is its call, taken like a native one.
    if constrained::effective_mode(req) == CallMode::Constrained {
        constrained::take_call(&mut assembled.message);
    }
    unique_call_ids(&mut assembled.message, &req.messages);
    let mut usage = match assembled.usage {
        Some(usage) => usage,
        None => estimate_usage(req, &assembled.message),
    };
    usage.cost_usd = usage.cost_usd.or(assembled.header_cost);
    ChatResponse {
        message: assembled.message,
        usage,
        finish_reason: assembled.finish_reason,
    }
}

#[derive(Serialize)]
pub(super) struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireOutMessage<'a>>,
    #[serde(skip_serializing_if = "<[ToolDef]>::is_empty")]
    tools: &'a [ToolDef],
    /// `temperature`, `seed`, `max_tokens`, `tool_choice`, each when set.
    #[serde(flatten)]
    sampling: Sampling,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    /// A constrained turn's schema field ([`constrained::schema_field`]);
    /// empty, and so absent, otherwise.
    #[serde(flatten)]
    constrained: serde_json::Map<String, serde_json::Value>,
}

/// A message as sent: like [`ChatMessage`]'s own form, except that a
/// missing `content` is sent as `""`, never `null` (llama-cpp-python answers
/// HTTP 500 to an assistant tool-call turn with `"content": null`; `""` is
/// accepted everywhere).
pub(super) struct WireOutMessage<'a>(&'a ChatMessage);

impl Serialize for WireOutMessage<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let m = self.0;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("role", &m.role)?;
        map.serialize_entry("content", m.content.as_deref().unwrap_or(""))?;
        if !m.tool_calls.is_empty() {
            map.serialize_entry("tool_calls", &m.tool_calls)?;
        }
        if let Some(id) = &m.tool_call_id {
            map.serialize_entry("tool_call_id", id)?;
        }
        map.end()
    }
}

#[derive(Serialize)]
pub(super) struct StreamOptions {
    include_usage: bool,
}

/// A completion as servers actually send it: lenient about nulls and omissions.
#[derive(Deserialize)]
pub(super) struct WireResponse {
    #[serde(default)]
    choices: Option<Vec<WireChoice>>,
    #[serde(default)]
    usage: Option<serde_json::Value>,
    /// llama.cpp's prompt and generation timings (`cache_n`, `prompt_n`).
    #[serde(default)]
    timings: Option<serde_json::Value>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
pub(super) struct WireChoice {
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct WireMessage {
    #[serde(default)]
    content: serde_json::Value,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
pub(super) struct WireToolCall {
    #[serde(default)]
    id: Option<String>,
    function: WireFunction,
}

#[derive(Deserialize)]
pub(super) struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: serde_json::Value,
}

/// The agent path as a header value; characters a header cannot carry become `_`.
pub(super) fn agent_header_value(agent_path: &str) -> HeaderValue {
    let clean: String = agent_path
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    HeaderValue::from_str(&clean).unwrap_or_else(|_| HeaderValue::from_static("_"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Usage;
    use crate::llm::settings::ModelSettings;

    #[test]
    fn agent_header_survives_odd_paths() {
        assert_eq!(agent_header_value("code/explore-1"), "code/explore-1");
        assert_eq!(agent_header_value("cödé\n"), "c_d__");
    }

    fn client() -> OpenAiClient {
        let mut s = ModelSettings::new("http://127.0.0.1:9/v1", "m");
        s.api_key = Some("sk-secret".into());
        OpenAiClient::new(s).unwrap()
    }

    fn parse(c: &OpenAiClient, bytes: &[u8]) -> Result<Assembled, LlmError> {
        match c.parse_completion(bytes) {
            Ok(a) => Ok(a),
            Err(Attempt::Fatal(e)) => Err(e),
            Err(Attempt::Transient(t)) => panic!("transient: {}", t.reason),
            Err(Attempt::StreamOnly(why)) => panic!("stream only: {why}"),
            Err(Attempt::WantsMaxCompletionTokens(e)) => Err(e),
        }
    }

    fn tool_request(mode: crate::llm::CallMode) -> ChatRequest {
        ChatRequest {
            messages: vec![ChatMessage::system("sys"), ChatMessage::user("task")],
            tools: vec![ToolDef {
                name: "bash",
                description: "run",
                parameters: serde_json::json!({"type": "object"}),
            }],
            agent_path: "code".into(),
            call_mode: mode,
        }
    }

    #[test]
    fn a_native_request_body_is_byte_for_byte_what_it_was() {
        let c = client();
        let body = c
            .request_body(&tool_request(crate::llm::CallMode::Native), true)
            .unwrap();
        assert_eq!(
            String::from_utf8(body).unwrap(),
            NATIVE_BODY,
            "a native request must stay byte-stable (prompt caching)"
        );
    }

    /// The body main sent before constrained calls existed.
    const NATIVE_BODY: &str = r#"{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":"task"}],"tools":[{"function":{"description":"run","name":"bash","parameters":{"type":"object"}},"type":"function"}],"max_tokens":4096,"tool_choice":"auto","stream":true,"stream_options":{"include_usage":true}}"#;

    #[test]
    fn a_constrained_request_has_no_tools_a_catalogue_and_the_schema() {
        let c = client();
        let body = c
            .request_body(&tool_request(crate::llm::CallMode::Constrained), false)
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(
            v.get("tools").is_none() && v.get("tool_choice").is_none(),
            "{v}"
        );
        assert_eq!(v["messages"].as_array().unwrap().len(), 2);
        let system = v["messages"][0]["content"].as_str().unwrap();
        assert!(system.starts_with("sys\n\n## Calling tools"), "{system}");
        assert!(
            system.contains("- bash: run Arguments: {\"type\":\"object\"}"),
            "{system}"
        );
        let entry = &v["response_format"]["json_schema"]["schema"]["oneOf"][0];
        assert_eq!(entry["properties"]["name"]["const"], "bash");
    }

    #[test]
    fn parses_lenient_completions() {
        let c = client();
        let r = parse(
            &c,
            br#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
                {"id":"a","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}},
                {"function":{"name":"finish","arguments":{"summary":"ok"}}}]},"finish_reason":"tool_calls"}],
                "usage":{"prompt_tokens":3,"completion_tokens":4}}"#,
            )
            .unwrap();
        assert_eq!(r.message.content, None);
        assert_eq!(r.message.tool_calls.len(), 2);
        assert_eq!(
            r.message.tool_calls[0].function.arguments,
            r#"{"command":"ls"}"#
        );
        assert_eq!(r.message.tool_calls[1].id, "call_1");
        assert_eq!(
            r.message.tool_calls[1].function.arguments,
            r#"{"summary":"ok"}"#
        );
        assert_eq!(
            r.usage,
            Some(Usage {
                prompt_tokens: 3,
                completion_tokens: 4,
                total_tokens: 7,
                estimated: false,
                cost_usd: None,
                ..Default::default()
            })
        );
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));

        let r = parse(
            &c,
            br#"{"choices":[{"message":{"content":"hi","tool_calls":null}}]}"#,
        )
        .unwrap();
        assert_eq!(r.message.content.as_deref(), Some("hi"));
        assert_eq!(r.usage, None);
    }

    #[test]
    fn bad_completions_are_bad_responses_without_the_key() {
        let c = client();
        for body in [
            &b""[..],
            b"<html><body>502 Bad Gateway</body></html>",
            b"{}",
            b"{\"choices\":[]}",
            b"[1,2]",
            b"{\"error\":{\"message\":\"bad key sk-secret\"}}",
        ] {
            let err = parse(&c, body).unwrap_err();
            assert!(matches!(err, LlmError::BadResponse { .. }), "{err}");
            assert!(!err.to_string().contains("sk-secret"), "{err}");
        }
    }
}
