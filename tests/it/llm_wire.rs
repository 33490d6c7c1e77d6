//! What the client puts on the wire and how it reads servers' quirks (issue
//! 11): `content: ""` instead of `null`, the sampling and tool-choice
//! settings sent exactly when set, unique tool-call ids, error snippets that
//! show the problem, deterministic failures not retried again, auth errors
//! without a key, and the server's context window (`/props`, `/models`, the
//! number inside a context-length 400).

use crate::support::{AWAIT_LIMIT, FakeServer, Reply, Script};
use orch::llm::openai::{DEFAULT_MAX_TOKENS, ModelSettings, OpenAiClient, ToolChoice};
use orch::llm::{
    ChatMessage, ChatModel, ChatRequest, ChatResponse, FunctionCall, LlmError, MessageRole,
    ToolCall, ToolDef,
};
use serde_json::json;
use std::time::Duration;

fn settings(server: &FakeServer) -> ModelSettings {
    let mut s = ModelSettings::new(server.base_url.clone(), "fake-model");
    s.request_timeout = Duration::from_secs(20);
    s.max_retries = 3;
    s.retry_base_delay = Duration::from_millis(5);
    s.retry_max_delay = Duration::from_millis(50);
    s
}

fn read_file_tool() -> ToolDef {
    ToolDef {
        name: "read_file",
        description: "Read a file.",
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    }
}

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        kind: "function".into(),
        function: FunctionCall {
            name: "read_file".into(),
            arguments: r#"{"path":"a.txt"}"#.into(),
        },
    }
}

/// A conversation whose assistant turn only calls a tool (`content: None`).
fn tool_turn_request(agent: &str, tools: Vec<ToolDef>) -> ChatRequest {
    ChatRequest {
        messages: vec![
            ChatMessage::system("sys"),
            ChatMessage::user("task"),
            ChatMessage {
                role: MessageRole::Assistant,
                content: None,
                tool_calls: vec![call("call_1")],
                tool_call_id: None,
            },
            ChatMessage::tool("call_1", "1\thello"),
        ],
        tools,
        agent_path: agent.to_owned(),
        call_mode: orch::llm::CallMode::Native,
    }
}

async fn complete(model: &dyn ChatModel, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
    tokio::time::timeout(AWAIT_LIMIT, model.complete(req))
        .await
        .expect("completion timed out")
}

#[tokio::test]
async fn wire_no_request_carries_content_null() {
    let server = FakeServer::start(
        Script::new()
            .agent("code", vec![Reply::text("streamed")])
            .agent("plain", vec![Reply::text("not streamed")]),
    );
    let streaming = OpenAiClient::new(settings(&server)).unwrap();
    complete(
        &streaming,
        &tool_turn_request("code", vec![read_file_tool()]),
    )
    .await
    .unwrap();
    let mut s = settings(&server);
    s.stream = false;
    let plain = OpenAiClient::new(s).unwrap();
    complete(&plain, &tool_turn_request("plain", vec![read_file_tool()]))
        .await
        .unwrap();
    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    for r in &sent {
        for m in r.messages() {
            assert!(m["content"].is_string(), "{m}");
        }
        assert!(
            !r.body.to_string().contains(r#""content":null"#),
            "{}",
            r.body
        );
        assert_eq!(r.messages()[2]["content"], "");
        assert_eq!(r.messages()[2]["tool_calls"][0]["id"], "call_1");
    }
}

#[tokio::test]
async fn wire_sampling_and_tool_choice_appear_exactly_when_set() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        (0..4).map(|i| Reply::text(&format!("r{i}"))).collect(),
    ));
    let tools = vec![read_file_tool()];
    // Defaults: only the bounded max_tokens, and tool_choice auto with tools.
    let defaults = OpenAiClient::new(settings(&server)).unwrap();
    complete(&defaults, &tool_turn_request("code", tools.clone()))
        .await
        .unwrap();
    complete(&defaults, &tool_turn_request("code", Vec::new()))
        .await
        .unwrap();
    // Everything set.
    let mut s = settings(&server);
    s.sampling.temperature = Some(0.2);
    s.sampling.seed = Some(7);
    s.sampling.max_tokens = Some(512);
    s.sampling.tool_choice = Some(ToolChoice::Required);
    let set = OpenAiClient::new(s).unwrap();
    complete(&set, &tool_turn_request("code", tools.clone()))
        .await
        .unwrap();
    // No max_tokens at all, and `required` without tools sends no tool_choice.
    let mut s = settings(&server);
    s.sampling.max_tokens = None;
    s.sampling.tool_choice = Some(ToolChoice::Required);
    let unbounded = OpenAiClient::new(s).unwrap();
    complete(&unbounded, &tool_turn_request("code", Vec::new()))
        .await
        .unwrap();

    let bodies: Vec<serde_json::Value> = server.requests().into_iter().map(|r| r.body).collect();
    let keys = |b: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = b.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(bodies[0]["max_tokens"], DEFAULT_MAX_TOKENS);
    assert_eq!(bodies[0]["tool_choice"], "auto");
    assert!(
        ["temperature", "seed"]
            .iter()
            .all(|k| bodies[0].get(k).is_none()),
        "{:?}",
        keys(&bodies[0])
    );
    assert!(bodies[1].get("tool_choice").is_none());
    assert_eq!(bodies[2]["temperature"], 0.2);
    assert_eq!(bodies[2]["seed"], 7);
    assert_eq!(bodies[2]["max_tokens"], 512);
    assert_eq!(bodies[2]["tool_choice"], "required");
    assert_eq!(
        keys(&bodies[3]),
        ["messages", "model", "stream", "stream_options"]
    );
}

#[tokio::test]
async fn wire_missing_and_repeated_call_ids_are_made_unique() {
    // A server that numbers ids from 0 every turn, or sends none.
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::Message {
            message: json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"b\"}"}},
                {"id": "", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"c\"}"}},
                {"type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"d\"}"}}]}),
            usage: None,
        }],
    ));
    let mut s = settings(&server);
    s.stream = false;
    let client = OpenAiClient::new(s).unwrap();
    let resp = complete(&client, &tool_turn_request("code", vec![read_file_tool()]))
        .await
        .unwrap();
    let ids: Vec<&str> = resp
        .message
        .tool_calls
        .iter()
        .map(|c| c.id.as_str())
        .collect();
    // `call_1` is taken by the earlier turn in the request.
    assert_eq!(ids, ["call_1_1", "call_1_2", "call_2"]);
}

#[tokio::test]
async fn wire_deterministic_server_error_is_retried_at_most_once() {
    // llama-cpp-python answers a schema violation with HTTP 500; its message
    // names the field after a long preamble.
    let message = format!(
        "{}1 validation error for ChatCompletionRequestAssistantMessage\ncontent\n  Input should be a valid string [type=string_type, input_value=None, input_type=NoneType]",
        "Exception in ASGI application. Traceback (most recent call last): ... ".repeat(5)
    );
    let body = json!({"error": {"message": message, "type": "internal_server_error"}}).to_string();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::Status(500, body.clone()),
            Reply::Status(500, body.clone()),
            Reply::Status(500, body),
        ],
    ));
    let client = OpenAiClient::new(settings(&server)).unwrap();
    let err = complete(&client, &tool_turn_request("code", vec![read_file_tool()]))
        .await
        .unwrap_err();
    let LlmError::Rejected { status, body, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*status, 500);
    assert!(
        body.contains("content Input should be a valid string"),
        "{body}"
    );
    assert_eq!(server.requests().len(), 2, "one retry, not five");
    // The retry went without streaming (it might have been the stream's fault).
    assert_eq!(server.requests()[1].body.get("stream"), None);
    assert_eq!(client.stream_fallback(), None, "the plain retry failed too");
}

#[tokio::test]
async fn wire_auth_error_says_when_no_key_was_sent() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::Status(
                401,
                r#"{"error":{"message":"missing bearer token"}}"#.into(),
            ),
            Reply::Status(401, r#"{"error":{"message":"bad token"}}"#.into()),
        ],
    ));
    let no_key = OpenAiClient::new(settings(&server)).unwrap();
    let err = complete(&no_key, &tool_turn_request("code", Vec::new()))
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Auth { .. }), "{err:?}");
    assert!(err.to_string().contains("no API key was sent"), "{err}");
    let mut s = settings(&server);
    s.api_key = Some("sk-wire-test".into());
    let with_key = OpenAiClient::new(s).unwrap();
    let err = complete(&with_key, &tool_turn_request("code", Vec::new()))
        .await
        .unwrap_err();
    assert!(!err.to_string().contains("no API key was sent"), "{err}");
}

#[tokio::test]
async fn wire_context_length_400_carries_the_servers_window() {
    let llama = json!({"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 5120, "n_ctx": 4096}});
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::Status(400, llama.to_string()),
            Reply::Status(
                400,
                r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, you requested 9000 tokens.","code":"context_length_exceeded"}}"#.into(),
            ),
        ],
    ));
    let client = OpenAiClient::new(settings(&server)).unwrap();
    for expected in [4096, 8192] {
        let err = complete(&client, &tool_turn_request("code", Vec::new()))
            .await
            .unwrap_err();
        let LlmError::ContextLength { window, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(*window, Some(expected), "{err}");
    }
    assert_eq!(server.requests().len(), 2, "not retried");
}

#[tokio::test]
async fn wire_props_and_models_give_the_servers_window() {
    // llama.cpp: /props at the root (not under /v1).
    let llama = FakeServer::start(Script::new().route(
        "/props",
        Reply::Raw(
            json!({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1}).to_string(),
        ),
    ));
    let client = OpenAiClient::new(settings(&llama)).unwrap();
    assert_eq!(client.probe_context_window().await, Some(4096));
    // Asked once per client.
    assert_eq!(client.probe_context_window().await, Some(4096));
    // No preflight ran: the client asked /models for the kind; none listed,
    // so both probes, in parallel (issue 29).
    let mut paths: Vec<String> = llama.side_requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths.remove(0), "/v1/models");
    paths.sort();
    assert_eq!(paths, ["/api/show", "/props"]);

    // vLLM: /v1/models with max_model_len, and nothing else asked.
    let vllm = FakeServer::start(
        Script::new().route(
            "/v1/models",
            Reply::Raw(
                json!({"object": "list", "data": [{"id": "fake-model", "max_model_len": 16384}]})
                    .to_string(),
            ),
        ),
    );
    let client = OpenAiClient::new(settings(&vllm)).unwrap();
    assert_eq!(client.probe_context_window().await, Some(16384));
    let paths: Vec<String> = vllm.side_requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/v1/models"]);

    // A server with none of them: no window, no chat request, no failure.
    let plain = FakeServer::start(Script::new());
    let client = OpenAiClient::new(settings(&plain)).unwrap();
    assert_eq!(client.probe_context_window().await, None);
    assert!(plain.requests().is_empty());
    assert_eq!(
        plain.side_requests().len(),
        3,
        "/v1/models, then /props and /api/show"
    );
}

#[tokio::test]
async fn wire_max_tokens_refused_for_max_completion_tokens_is_resent_once() {
    // OpenAI's reasoning models refuse `max_tokens`.
    let refusal = r#"{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.","type":"invalid_request_error","param":"max_tokens","code":"unsupported_parameter"}}"#;
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::Status(400, refusal.into()),
            Reply::text("ok"),
            Reply::text("again"),
        ],
    ));
    let client = OpenAiClient::new(settings(&server)).unwrap();
    let req = tool_turn_request("code", Vec::new());
    assert_eq!(
        complete(&client, &req)
            .await
            .unwrap()
            .message
            .content
            .as_deref(),
        Some("ok")
    );
    complete(&client, &req).await.unwrap();
    let bodies: Vec<serde_json::Value> = server.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies[0]["max_tokens"], DEFAULT_MAX_TOKENS);
    for b in &bodies[1..] {
        assert!(b.get("max_tokens").is_none(), "{b}");
        assert_eq!(b["max_completion_tokens"], DEFAULT_MAX_TOKENS);
    }
}
