//! `OpenAiClient` against the scripted fake server: parsing, the request it
//! sends, retry and error classification, and the server's own pairing check.

use crate::support::{
    AWAIT_LIMIT, FakeServer, Reply, Script, assert_one_identical_retry, exhausted,
};
use orch::llm::openai::{ModelSettings, OpenAiClient};
use orch::llm::{
    ChatMessage, ChatModel, ChatRequest, ChatResponse, LlmError, MessageRole, ToolCall, ToolDef,
};
use serde_json::json;
use std::time::Duration;

const KEY: &str = "sk-llm-client-test-secret";

fn settings(server: &FakeServer) -> ModelSettings {
    let mut s = ModelSettings::new(server.base_url.clone(), "fake-model");
    s.api_key = Some(KEY.to_owned());
    s.request_timeout = Duration::from_secs(20);
    s.max_retries = 3;
    s.retry_base_delay = Duration::from_millis(10);
    s.retry_max_delay = Duration::from_secs(5);
    s
}

fn client(server: &FakeServer) -> OpenAiClient {
    OpenAiClient::new(settings(server)).expect("client")
}

fn request(agent: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![
            ChatMessage::system("You are terse."),
            ChatMessage::user("Say hi."),
        ],
        tools: Vec::new(),
        agent_path: agent.to_owned(),
        call_mode: orch::llm::CallMode::Native,
    }
}

fn read_file_tool() -> ToolDef {
    ToolDef {
        name: "read_file",
        description: "Read a file.",
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    }
}

async fn complete(model: &dyn ChatModel, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
    tokio::time::timeout(AWAIT_LIMIT, model.complete(req))
        .await
        .expect("completion timed out")
}

/// The error of a completion for `agent` with settings `s`, which must fail.
async fn fail_with(s: ModelSettings, agent: &str) -> LlmError {
    complete(&OpenAiClient::new(s).unwrap(), &request(agent))
        .await
        .unwrap_err()
}

#[tokio::test]
async fn llm_text_reply() {
    let server = FakeServer::start(
        Script::new().agent("code", vec![Reply::text("hi there").with_usage(12, 3)]),
    );
    let client = client(&server);
    let resp = complete(&client, &request("code")).await.unwrap();
    assert_eq!(resp.message.role, MessageRole::Assistant);
    assert_eq!(resp.message.content.as_deref(), Some("hi there"));
    assert!(resp.message.tool_calls.is_empty());
    assert_eq!(resp.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        (
            resp.usage.prompt_tokens,
            resp.usage.completion_tokens,
            resp.usage.total_tokens
        ),
        (12, 3, 15)
    );
    assert_eq!(client.label(), format!("fake-model at {}", server.base_url));
    assert_eq!(client.model_name(), "fake-model");
    assert!(!client.is_replay());
    assert!(server.violations().is_empty(), "{:?}", server.violations());
}

#[tokio::test]
async fn llm_tool_call_reply_is_parsed() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::tool_calls(&[
            ("c1", "read_file", json!({"path": "src/main.rs"})),
            ("c2", "bash", json!({"command": "ls -la"})),
        ])],
    ));
    let resp = complete(&client(&server), &request("code")).await.unwrap();
    assert_eq!(resp.message.content, None);
    assert_eq!(resp.finish_reason.as_deref(), Some("tool_calls"));
    let calls: Vec<(&str, &str)> = resp
        .message
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.function.name.as_str()))
        .collect();
    assert_eq!(calls, [("c1", "read_file"), ("c2", "bash")]);
    assert_eq!(resp.message.tool_calls[0].kind, "function");
    let args: serde_json::Value =
        serde_json::from_str(&resp.message.tool_calls[0].function.arguments).unwrap();
    assert_eq!(args, json!({"path": "src/main.rs"}));
    // Absent usage is estimated (bytes / 4) and says so.
    assert!(resp.usage.estimated);
    assert!(resp.usage.prompt_tokens > 0 && resp.usage.completion_tokens > 0);
    assert_eq!(
        resp.usage.total_tokens,
        resp.usage.prompt_tokens + resp.usage.completion_tokens
    );
}

#[tokio::test]
async fn llm_malformed_arguments_are_passed_through() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::raw_tool_call("c1", "bash", "{\"command\": \"ls")],
    ));
    let resp = complete(&client(&server), &request("code")).await.unwrap();
    assert_eq!(
        resp.message.tool_calls[0].function.arguments,
        "{\"command\": \"ls"
    );
}

#[tokio::test]
async fn llm_request_carries_model_messages_tools_and_headers() {
    let server = FakeServer::start(
        Script::new()
            .agent("code/explore-1", vec![Reply::text("ok")])
            .agent("review", vec![Reply::text("ok")]),
    );
    let assistant = ChatMessage {
        role: MessageRole::Assistant,
        content: None,
        tool_calls: vec![ToolCall {
            id: "call_1".into(),
            kind: "function".into(),
            function: orch::llm::FunctionCall {
                name: "read_file".into(),
                arguments: r#"{"path":"a.txt"}"#.into(),
            },
        }],
        tool_call_id: None,
    };
    let req = ChatRequest {
        messages: vec![
            ChatMessage::system("sys"),
            ChatMessage::user("task"),
            assistant,
            ChatMessage::tool("call_1", "1\thello"),
        ],
        tools: vec![read_file_tool()],
        agent_path: "code/explore-1".into(),
        call_mode: orch::llm::CallMode::Native,
    };
    // A trailing slash on the base URL is tolerated.
    let mut s = settings(&server);
    s.base_url.push('/');
    let with_key = OpenAiClient::new(s).unwrap();
    complete(&with_key, &req).await.unwrap();

    let mut s = settings(&server);
    s.api_key = None;
    complete(&OpenAiClient::new(s).unwrap(), &request("review"))
        .await
        .unwrap();

    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let sent = server.requests_for("code/explore-1");
    assert_eq!(sent.len(), 1);
    let r = &sent[0];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.header("X-Orch-Agent"), Some("code/explore-1"));
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(r.body["model"], "fake-model");
    assert_eq!(r.body["tool_choice"], "auto");
    assert_eq!(
        r.body["tools"],
        json!([{"type": "function", "function": {
            "name": "read_file", "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}])
    );
    let messages = r.messages();
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[0], json!({"role": "system", "content": "sys"}));
    assert_eq!(messages[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(messages[2]["tool_calls"][0]["type"], "function");
    assert_eq!(
        messages[2]["tool_calls"][0]["function"]["arguments"],
        r#"{"path":"a.txt"}"#
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "content": "1\thello", "tool_call_id": "call_1"})
    );

    let plain = &server.requests_for("review")[0];
    assert_eq!(plain.header("authorization"), None);
    let body = plain.body.as_object().unwrap();
    assert!(
        !body.contains_key("tools") && !body.contains_key("tool_choice"),
        "{body:?}"
    );
}

#[tokio::test]
async fn llm_server_error_is_retried_then_succeeds() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::Status(500, "upstream exploded".into()),
            Reply::text("recovered"),
        ],
    ));
    let resp = complete(&client(&server), &request("code")).await.unwrap();
    assert_eq!(resp.message.content.as_deref(), Some("recovered"));
    assert_one_identical_retry(&server);
}

#[tokio::test]
async fn llm_retry_after_is_honoured() {
    let server = FakeServer::start(
        Script::new().agent("code", vec![Reply::RetryAfter(429, 1), Reply::text("ok")]),
    );
    let resp = complete(&client(&server), &request("code")).await.unwrap();
    assert_eq!(resp.message.content.as_deref(), Some("ok"));
    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    let spacing = sent[1].at.duration_since(sent[0].at);
    // The backoff alone would be ~10 ms; only Retry-After explains a second.
    assert!(
        spacing >= Duration::from_millis(900),
        "retried after {spacing:?}"
    );
}

#[tokio::test]
async fn llm_unauthorized_is_not_retried_and_hides_the_key() {
    // Some servers echo the key they rejected; the error must not repeat it.
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::Status(
            401,
            format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}"}}}}"#),
        )],
    ));
    let err = complete(&client(&server), &request("code"))
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Auth { status: 401, .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("ORCH_API_KEY"), "{text}");
    assert!(!text.contains(KEY), "{text}");
    assert!(!format!("{err:?}").contains(KEY));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn llm_not_found_and_rejected_are_not_retried() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::Status(
                404,
                r#"{"error":{"message":"model `fake-model` not found"}}"#.into(),
            ),
            Reply::Status(
                400,
                r#"{"error":{"message":"temperature must be at most 2"}}"#.into(),
            ),
        ],
    ));
    let client = client(&server);
    let err = complete(&client, &request("code")).await.unwrap_err();
    assert!(matches!(err, LlmError::NotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("--base-url"), "{err}");
    assert_eq!(server.requests().len(), 1);
    let err = complete(&client, &request("code")).await.unwrap_err();
    assert!(
        matches!(err, LlmError::Rejected { status: 400, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("temperature must be"), "{err}");
    assert!(!err.is_context_length());
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn llm_garbage_success_bodies_are_bad_responses() {
    let html = format!(
        "<!DOCTYPE html><html><body>{}</body></html>",
        "Gateway says no. ".repeat(40)
    );
    let bodies = [
        "this is not json".to_owned(),
        String::new(),
        html,
        r#"{"object":"chat.completion"}"#.to_owned(),
    ];
    let server = FakeServer::start(
        Script::new().agent("code", bodies.iter().cloned().map(Reply::Raw).collect()),
    );
    let client = client(&server);
    for body in &bodies {
        let err = complete(&client, &request("code")).await.unwrap_err();
        let LlmError::BadResponse { reason, .. } = &err else {
            panic!("{body:?} gave {err:?}")
        };
        // A short snippet, not the whole page.
        assert!(reason.chars().count() <= 300, "{reason}");
    }
    // None of them is retried: one request per body.
    assert_eq!(server.requests().len(), bodies.len());
}

#[tokio::test]
async fn llm_closed_connections_are_retried_until_exhausted() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::Close, Reply::Close, Reply::Close, Reply::Close],
    ));
    let err = complete(&client(&server), &request("code"))
        .await
        .unwrap_err();
    let LlmError::Exhausted { attempts, url, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*attempts, 4);
    assert!(url.ends_with("/v1/chat/completions"), "{url}");
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn llm_exhausted_script_reports_the_last_error() {
    let server = FakeServer::start(Script::new());
    let mut s = settings(&server);
    s.max_retries = 1;
    let err = fail_with(s, "nobody").await;
    let (attempts, last) = exhausted(&err);
    assert_eq!(attempts, 2, "{err:?}");
    assert!(
        last.contains("HTTP 500") && last.contains(r#"script exhausted for agent "nobody""#),
        "{last}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn llm_timeouts_are_retried_then_exhausted() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text("late").after(Duration::from_millis(1500)),
            Reply::text("late").after(Duration::from_millis(1500)),
        ],
    ));
    let mut s = settings(&server);
    s.request_timeout = Duration::from_millis(200);
    s.max_retries = 1;
    let err = fail_with(s, "code").await;
    let (attempts, last) = exhausted(&err);
    assert_eq!(attempts, 2, "{err:?}");
    assert!(last.contains("timed out"), "{last}");
}

#[tokio::test]
async fn llm_connection_refused_is_exhausted() {
    // A port that was free a moment ago: nothing listens there now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut s = ModelSettings::new(format!("http://127.0.0.1:{port}/v1"), "m");
    s.max_retries = 2;
    s.retry_base_delay = Duration::from_millis(5);
    let err = fail_with(s, "code").await;
    let (attempts, last) = exhausted(&err);
    assert_eq!(attempts, 3, "{err:?}");
    assert!(last.contains("could not connect"), "{last}");
}

#[tokio::test]
async fn llm_fake_server_flags_unpaired_tool_messages() {
    let server = FakeServer::start(Script::new().agent("code", vec![Reply::text("never served")]));
    let mut req = request("code");
    req.messages
        .push(ChatMessage::tool("call_missing", "result for nobody"));
    let err = complete(&client(&server), &req).await.unwrap_err();
    assert!(
        matches!(err, LlmError::Rejected { status: 400, .. }),
        "{err:?}"
    );
    let violations = server.violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(
        violations[0].contains("call_missing") && violations[0].contains("\"code\""),
        "{violations:?}"
    );
    // The rejected request did not use up the scripted reply.
    assert_eq!(server.remaining("code"), 1);
}

#[test]
fn llm_pairing_checker_cases() {
    use crate::support::tool_pairing_violations as check;
    let call = |ids: &[&str]| {
        json!({"role": "assistant", "content": null, "tool_calls":
            ids.iter().map(|id| json!({"id": id, "type": "function", "function": {"name": "bash", "arguments": "{}"}})).collect::<Vec<_>>()})
    };
    let tool = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "x"});
    let user = json!({"role": "user", "content": "hi"});

    assert!(
        check(&json!([
            user,
            call(&["a", "b"]),
            tool("b"),
            tool("a"),
            call(&["c"]),
            tool("c")
        ]))
        .is_empty()
    );
    // Answered twice, or answering an older assistant message.
    assert_eq!(
        check(&json!([
            user,
            call(&["a"]),
            tool("a"),
            call(&["b"]),
            tool("b"),
            tool("a")
        ]))
        .len(),
        1
    );
    // A user message while a call is still open, and a call never answered.
    let problems = check(&json!([
        user,
        call(&["a", "b"]),
        tool("a"),
        user,
        call(&["c"])
    ]));
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].contains("\"b\"") && problems[1].contains("\"c\""),
        "{problems:?}"
    );
    assert_eq!(check(&json!({"messages": "nope"})).len(), 1);
}

#[tokio::test]
async fn llm_context_length_errors_are_classified_and_not_retried() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::Status(
                400,
                r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#.into(),
            ),
            Reply::Status(413, "Request has too many tokens for this model".into()),
        ],
    ));
    let client = client(&server);
    for expected_status in [400, 413] {
        let err = complete(&client, &request("code")).await.unwrap_err();
        assert!(err.is_context_length(), "{err:?}");
        let LlmError::ContextLength { status, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(*status, expected_status);
        assert!(err.to_string().contains("context window"), "{err}");
    }
    assert_eq!(server.requests().len(), 2, "one request each: no retries");
}

#[tokio::test]
async fn llm_retry_after_past_the_total_time_bound_gives_up() {
    // Retry-After 2 s, but retries must start within 1 s of the first attempt.
    let server = FakeServer::start(
        Script::new().agent("code", vec![Reply::RetryAfter(429, 2), Reply::text("ok")]),
    );
    let mut s = settings(&server);
    s.retry_max_total = Duration::from_secs(1);
    let err = fail_with(s, "code").await;
    let (attempts, last) = exhausted(&err);
    assert_eq!(attempts, 1, "{err:?}");
    assert!(last.contains("HTTP 429"), "{last}");
    let text = err.to_string();
    assert!(
        text.contains("rate-limiting") && text.contains("retry_max_total"),
        "{text}"
    );
    assert_eq!(server.requests().len(), 1);
    assert_eq!(server.remaining("code"), 1);
}

#[tokio::test]
async fn llm_rate_limits_then_server_errors_are_spaced_by_backoff() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::Status(429, r#"{"error":{"message":"slow down"}}"#.into()),
            Reply::Status(503, "unavailable".into()),
            Reply::text("ok"),
        ],
    ));
    let mut s = settings(&server);
    s.retry_base_delay = Duration::from_millis(200);
    let resp = complete(&OpenAiClient::new(s).unwrap(), &request("code"))
        .await
        .unwrap();
    assert_eq!(resp.message.content.as_deref(), Some("ok"));
    let sent = server.requests();
    assert_eq!(sent.len(), 3);
    // Equal jitter: retry n waits at least half of base * 2^n.
    assert!(sent[1].at.duration_since(sent[0].at) >= Duration::from_millis(100));
    assert!(sent[2].at.duration_since(sent[1].at) >= Duration::from_millis(200));
}
