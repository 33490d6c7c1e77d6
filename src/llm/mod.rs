//! Model clients: the OpenAI-compatible Chat Completions wire types, the
//! [`ChatModel`] trait every backend implements, the HTTP client
//! ([`openai`] with its [`settings`], streaming over SSE decoded by [`sse`]
//! and assembled by [`stream`], retries in [`retry`]), the offline replay model ([`replay`]), token
//! prices ([`price`]), the recovery of tool calls written as text
//! ([`textcalls`]) and constrained tool calls ([`constrained`]). Other wire
//! formats plug into the HTTP client: OpenAI Responses ([`responses`]).
//!
//! See `docs/model-client.md` for the user-facing behaviour (streaming,
//! retry schedule, error classes, configuration, prices).

pub mod anthropic;
pub mod constrained;
mod error;
pub mod openai;
pub mod price;
pub mod replay;
pub mod responses;
pub mod retry;
pub(crate) mod server_cache;
pub mod settings;
pub mod sse;
pub mod stream;
pub mod textcalls;
pub mod textedits;
mod usage;

pub use error::LlmError;
pub use price::{Price, PriceTable, cost_usd};
pub use settings::{
    CallMode, ConstrainedDialect, PromptCache, Provider, Sampling, ToolCalling, ToolChoice,
};
pub use usage::Usage;
pub(crate) use usage::reported_cost;

use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::Pin;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageRole {
    /// The system prompt.
    System,
    /// The user (task text, hand-off).
    User,
    /// The model.
    Assistant,
    /// A tool result, answering one tool call.
    Tool,
}

/// One message of a Chat Completions conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who wrote it.
    pub role: MessageRole,
    /// The text; `None` for an assistant message that only calls tools.
    #[serde(default)]
    pub content: Option<String>,
    /// Tool calls of an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A system message.
    pub fn system(text: impl Into<String>) -> Self {
        Self::text(MessageRole::System, text)
    }

    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::text(MessageRole::User, text)
    }

    /// A tool result answering the call `call_id`.
    pub fn tool(call_id: impl Into<String>, text: impl Into<String>) -> Self {
        ChatMessage {
            role: MessageRole::Tool,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
        }
    }

    fn text(role: MessageRole, text: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// One tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call id, echoed back in the tool result.
    pub id: String,
    /// Always `"function"` on the wire.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// The function and its JSON-encoded arguments.
    pub function: FunctionCall,
}

fn function_kind() -> String {
    "function".to_owned()
}

/// The function part of a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// Tool name.
    pub name: String,
    /// Arguments as the model wrote them: a JSON text, possibly malformed.
    #[serde(default)]
    pub arguments: String,
}

/// A tool offered to the model (`{"type":"function","function":{…}}` on the wire).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    /// Tool name, e.g. `read_file`.
    pub name: &'static str,
    /// One-line description.
    pub description: &'static str,
    /// JSON Schema of the arguments.
    pub parameters: serde_json::Value,
}

impl Serialize for ToolDef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde_json::json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            }
        })
        .serialize(s)
    }
}

/// Bytes per token assumed by [`estimate_usage`].
pub const BYTES_PER_TOKEN: usize = 4;

/// A rough usage for a completion the server reported none for: prompt tokens
/// = bytes of the serialized messages and tools / 4, completion tokens = bytes
/// of the serialized reply message / 4; marked `estimated`.
pub fn estimate_usage(req: &ChatRequest, reply: &ChatMessage) -> Usage {
    let request_bytes = serde_json::to_vec(&req.messages).map_or(0, |v| v.len())
        + serde_json::to_vec(&req.tools).map_or(0, |v| v.len());
    let reply_bytes = serde_json::to_vec(reply).map_or(0, |v| v.len());
    let prompt_tokens = (request_bytes / BYTES_PER_TOKEN) as u64;
    let completion_tokens = (reply_bytes / BYTES_PER_TOKEN) as u64;
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
        estimated: true,
        cost_usd: None,
        ..Usage::default()
    }
}

/// What the agent loop asks of a model.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// The tools offered (the role's allowlist).
    pub tools: Vec<ToolDef>,
    /// Where this agent sits in the run, e.g. `code` or `code/explore-1`; sent as
    /// the `X-Orch-Agent` header and used by the replay model to pick a script.
    pub agent_path: String,
    /// How this turn asks for tool calls ([`constrained`]); `Native` sends
    /// the `tools` array as always.
    pub call_mode: CallMode,
}

/// A model's answer.
#[derive(Debug, Clone)]
pub struct ChatResponse {
    /// The assistant message (text and/or tool calls).
    pub message: ChatMessage,
    /// Tokens used, as reported by the server (zero when it reports none).
    pub usage: Usage,
    /// `stop`, `tool_calls`, `length`, … when the server says.
    pub finish_reason: Option<String>,
}

/// A boxed future, so [`ChatModel`] stays object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A progress callback for [`ChatModel::complete_with_progress`]: called with
/// the number of characters (content plus tool-call arguments) received so far
/// in the current attempt, once per streamed chunk that carried any. A retry
/// starts counting from zero again.
pub type DeltaFn<'a> = dyn Fn(usize) + Send + Sync + 'a;

/// One retry of a model request, as the client made it (no URL, no key).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RetryNote {
    /// The attempt that failed, 1-based.
    pub attempt: u32,
    /// The most attempts the retry policy allows.
    pub of: u32,
    /// The wait before the next attempt, in milliseconds.
    pub wait_ms: u64,
    /// The HTTP status of the failed attempt, when it had one.
    pub status: Option<u16>,
    /// Why the attempt failed (`HTTP 500: …`, `timed out (…)`).
    pub reason: String,
}

/// A chat model backend: the OpenAI-compatible HTTP client or the replay model.
pub trait ChatModel: Send + Sync {
    /// One completion for `req`.
    fn complete<'a>(
        &'a self,
        req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>>;

    /// A human label, e.g. `gpt-4o-mini at https://api.openai.com/v1` or
    /// `replay of fixtures/demo/replay.json (recorded responses, no model is called)`.
    fn label(&self) -> String;

    /// The model name recorded in commit trailers, e.g. `gpt-4o-mini` or `replay`.
    fn model_name(&self) -> String;

    /// True for the offline replay model.
    fn is_replay(&self) -> bool;

    /// Like [`ChatModel::complete`], reporting streamed progress to `on_delta`
    /// (see [`DeltaFn`]). Backends that do not stream never call it.
    fn complete_with_progress<'a>(
        &'a self,
        req: &'a ChatRequest,
        on_delta: &'a DeltaFn<'a>,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        let _ = on_delta;
        self.complete(req)
    }

    /// The model's context window in tokens, when configured (the HTTP client
    /// always has one: `context_window`, default 128000).
    fn context_window(&self) -> Option<u64> {
        None
    }

    /// The cost of `usage` in USD from this backend's price table, or `None`
    /// when the model's price is unknown (shown as "unknown").
    fn cost_usd(&self, usage: &Usage) -> Option<f64> {
        let _ = usage;
        None
    }

    /// The same backend asking for another model name (a role's `model:`),
    /// or `None` when the backend cannot switch (the replay model).
    fn with_model(&self, model: &str) -> Option<std::sync::Arc<dyn ChatModel>> {
        let _ = model;
        None
    }

    /// The same backend with `sampling`'s set fields overriding its own (a
    /// role's `temperature:`, …), or `None` when it has no such settings.
    fn with_sampling(&self, sampling: &Sampling) -> Option<std::sync::Arc<dyn ChatModel>> {
        let _ = sampling;
        None
    }

    /// Asks the server for its real context window in tokens (llama.cpp
    /// `GET /props`, vLLM `GET /v1/models`, Ollama `POST /api/show`);
    /// `None` when it does not say (or for backends without a server).
    /// Bounded by a short timeout; never fails.
    fn probe_context_window(&self) -> BoxFuture<'_, Option<u64>> {
        Box::pin(async { None })
    }

    /// Why this backend stopped streaming, once a stream-only failure (an
    /// empty stream, tool calls lost in a stream, repeated 5xx to streamed
    /// requests) was answered by a successful request without streaming;
    /// from then on it does not stream. `None` while it streams as configured.
    fn stream_fallback(&self) -> Option<String> {
        None
    }

    /// The retries this backend made for `agent_path`'s requests since the
    /// last call, oldest first, and forgets them: the agent loop logs each
    /// as a `retry` event after every request. Default: none.
    fn take_retries(&self, agent_path: &str) -> Vec<RetryNote> {
        let _ = agent_path;
        Vec::new()
    }

    /// How a child `orch agent` process reaches this same model (for
    /// `spawn_agent`); `None` when it cannot.
    fn spawn_settings(&self) -> Option<ModelSpawn> {
        None
    }

    /// How this backend's profile asks for tool calls (`tool_calling`);
    /// default `auto`.
    fn tool_calling(&self) -> ToolCalling {
        ToolCalling::Auto
    }

    /// The reply cap a constrained turn sends when it is below the cap of
    /// every turn (`constrained_max_tokens`); `None`: no cap of its own.
    fn constrained_max_tokens(&self) -> Option<u64> {
        None
    }

    /// The same backend with `tool_calling` set to `setting` (a role's
    /// `tool_calling:`), or `None` when it has no such setting.
    fn with_tool_calling(&self, setting: ToolCalling) -> Option<std::sync::Arc<dyn ChatModel>> {
        let _ = setting;
        None
    }

    /// The same backend with a role's `prompt_cache:` applied over its
    /// profile's ([`PromptCache::with_role`]), or `None` when nothing
    /// changes or it has no such setting.
    fn with_prompt_cache(&self, role: PromptCache) -> Option<std::sync::Arc<dyn ChatModel>> {
        let _ = role;
        None
    }
    // A method added here needs its forward in `impl<W: ModelWrapper>
    // ChatModel for W` below, or every wrapped model falls back to the default.
}

/// A model that wraps another and changes only how a request is sent
/// (progress display, recording). Every [`ChatModel`] method comes from the
/// blanket impl below, which forwards all of them to [`ModelWrapper::inner`]:
/// a wrapper cannot drop one, and a new `ChatModel` method is forwarded in
/// one place.
pub trait ModelWrapper: Send + Sync {
    /// The wrapped model.
    fn inner(&self) -> &dyn ChatModel;

    /// Sends one request, with the caller's progress callback when it
    /// streams. Default: straight to the inner model.
    fn send<'a>(
        &'a self,
        req: &'a ChatRequest,
        on_delta: Option<&'a DeltaFn<'a>>,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        match on_delta {
            Some(f) => self.inner().complete_with_progress(req, f),
            None => self.inner().complete(req),
        }
    }
}

impl<W: ModelWrapper> ChatModel for W {
    fn complete<'a>(
        &'a self,
        req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        self.send(req, None)
    }

    fn label(&self) -> String {
        self.inner().label()
    }

    fn model_name(&self) -> String {
        self.inner().model_name()
    }

    fn is_replay(&self) -> bool {
        self.inner().is_replay()
    }

    fn complete_with_progress<'a>(
        &'a self,
        req: &'a ChatRequest,
        on_delta: &'a DeltaFn<'a>,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        self.send(req, Some(on_delta))
    }

    fn context_window(&self) -> Option<u64> {
        self.inner().context_window()
    }

    fn cost_usd(&self, usage: &Usage) -> Option<f64> {
        self.inner().cost_usd(usage)
    }

    /// The inner model asking for another model name, unwrapped: wrappers
    /// are added after the model is chosen.
    fn with_model(&self, model: &str) -> Option<std::sync::Arc<dyn ChatModel>> {
        self.inner().with_model(model)
    }

    fn with_sampling(&self, sampling: &Sampling) -> Option<std::sync::Arc<dyn ChatModel>> {
        self.inner().with_sampling(sampling)
    }

    fn probe_context_window(&self) -> BoxFuture<'_, Option<u64>> {
        self.inner().probe_context_window()
    }

    fn stream_fallback(&self) -> Option<String> {
        self.inner().stream_fallback()
    }

    fn take_retries(&self, agent_path: &str) -> Vec<RetryNote> {
        self.inner().take_retries(agent_path)
    }

    fn spawn_settings(&self) -> Option<ModelSpawn> {
        self.inner().spawn_settings()
    }

    fn tool_calling(&self) -> ToolCalling {
        self.inner().tool_calling()
    }

    fn constrained_max_tokens(&self) -> Option<u64> {
        self.inner().constrained_max_tokens()
    }

    fn with_tool_calling(&self, setting: ToolCalling) -> Option<std::sync::Arc<dyn ChatModel>> {
        self.inner().with_tool_calling(setting)
    }

    fn with_prompt_cache(&self, role: PromptCache) -> Option<std::sync::Arc<dyn ChatModel>> {
        self.inner().with_prompt_cache(role)
    }
}

/// The model settings a subagent process is started with.
#[derive(Clone, PartialEq, Eq)]
pub enum ModelSpawn {
    /// An OpenAI-compatible server; the key goes to the child as `ORCH_API_KEY`.
    Http {
        /// The wire format.
        provider: settings::Provider,
        /// API root.
        base_url: String,
        /// Model name.
        model: String,
        /// Bearer token, if any.
        api_key: Option<String>,
    },
    /// The replay model, from this (absolute) file.
    Replay(std::path::PathBuf),
}

impl std::fmt::Debug for ModelSpawn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelSpawn::Http {
                provider,
                base_url,
                model,
                api_key,
            } => f
                .debug_struct("Http")
                .field("provider", provider)
                .field("base_url", base_url)
                .field("model", model)
                .field("api_key", &api_key.as_ref().map(|_| "<redacted>"))
                .finish(),
            ModelSpawn::Replay(p) => f.debug_tuple("Replay").field(p).finish(),
        }
    }
}
