//! Streaming (SSE) through a real HTTP server on 127.0.0.1: chunk assembly,
//! raw chunk edge cases written one flush at a time, stalls and cut streams.

use crate::support::{
    AWAIT_LIMIT, FakeServer, Reply, Script, assert_one_identical_retry, exhausted,
};
use orch::llm::openai::{ModelSettings, OpenAiClient};
use orch::llm::{ChatMessage, ChatModel, ChatRequest, ChatResponse, LlmError};
use serde_json::json;
use std::sync::Mutex;
use std::time::Duration;

fn settings(server: &FakeServer) -> ModelSettings {
    let mut s = ModelSettings::new(server.base_url.clone(), "fake-model");
    s.request_timeout = Duration::from_secs(20);
    s.max_retries = 2;
    s.retry_base_delay = Duration::from_millis(10);
    s.retry_max_delay = Duration::from_secs(1);
    s
}

fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::system("sys"), ChatMessage::user("go")],
        tools: Vec::new(),
        agent_path: "code".into(),
        call_mode: orch::llm::CallMode::Native,
    }
}

async fn complete(s: ModelSettings) -> Result<ChatResponse, LlmError> {
    let client = OpenAiClient::new(s).expect("client");
    tokio::time::timeout(AWAIT_LIMIT, client.complete(&request()))
        .await
        .expect("completion timed out")
}

fn data(v: serde_json::Value) -> String {
    format!("data: {v}\n\n")
}

fn delta(d: serde_json::Value) -> serde_json::Value {
    json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": null}]})
}

/// The (id, name, arguments) of each tool call in `resp`.
fn calls_of(resp: &ChatResponse) -> Vec<(&str, &str, &str)> {
    resp.message
        .tool_calls
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

#[tokio::test]
async fn sse_streamed_tool_calls_usage_and_progress() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_calls(&[
                ("c1", "read_file", json!({"path": "src/main.rs"})),
                ("c2", "bash", json!({"command": "cargo test --all"})),
            ])
            .with_usage(40, 12),
        ],
    ));
    let client = OpenAiClient::new(settings(&server)).unwrap();
    let seen: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    let on_delta = |n: usize| seen.lock().unwrap().push(n);
    let resp = tokio::time::timeout(
        AWAIT_LIMIT,
        client.complete_with_progress(&request(), &on_delta),
    )
    .await
    .unwrap()
    .unwrap();

    let calls = calls_of(&resp);
    assert_eq!(
        calls,
        [
            ("c1", "read_file", r#"{"path":"src/main.rs"}"#),
            ("c2", "bash", r#"{"command":"cargo test --all"}"#),
        ]
    );
    assert_eq!(resp.message.content, None);
    assert_eq!(resp.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        (
            resp.usage.prompt_tokens,
            resp.usage.completion_tokens,
            resp.usage.estimated
        ),
        (40, 12, false)
    );

    // The request asked for a stream with usage.
    let sent = server.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body["stream"], true);
    assert_eq!(sent[0].body["stream_options"]["include_usage"], true);

    // Progress: one report per argument piece, growing, ending at the total.
    let seen = seen.into_inner().unwrap();
    let total = r#"{"path":"src/main.rs"}"#.len() + r#"{"command":"cargo test --all"}"#.len();
    assert!(seen.len() >= 4, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert_eq!(seen.last(), Some(&total));
    assert!(server.violations().is_empty(), "{:?}", server.violations());
}

#[tokio::test]
async fn sse_text_streamed_without_usage_is_estimated() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::text("Hello, streaming world — ünïcode")],
    ));
    let resp = complete(settings(&server)).await.unwrap();
    assert_eq!(
        resp.message.content.as_deref(),
        Some("Hello, streaming world — ünïcode")
    );
    assert_eq!(resp.finish_reason.as_deref(), Some("stop"));
    assert!(resp.usage.estimated);
    assert!(resp.usage.prompt_tokens > 0 && resp.usage.completion_tokens > 0);
}

#[tokio::test]
async fn sse_raw_chunks_split_mid_json_several_calls_no_done() {
    // One event split across three writes in the middle of its JSON, two
    // interleaved tool calls, a keep-alive comment, no usage and no [DONE]:
    // the end of the body ends the stream.
    let first = data(delta(json!({"tool_calls": [
        {"index": 0, "id": "a", "type": "function", "function": {"name": "read_file", "arguments": ""}},
        {"index": 1, "id": "b", "type": "function", "function": {"name": "grep", "arguments": "{\"pat"}}
    ]})));
    let (head, rest) = first.split_at(25);
    let (middle, tail) = rest.split_at(40);
    let chunks = vec![
        data(delta(json!({"role": "assistant"}))),
        head.to_owned(),
        middle.to_owned(),
        tail.to_owned(),
        ": keep-alive\n\n".to_owned(),
        data(delta(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\":\"a.txt\"}"}}]}),
        )),
        data(delta(
            json!({"tool_calls": [{"index": 1, "function": {"arguments": "tern\":\"fn main\"}"}}]}),
        )),
        data(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
    ];
    let server = FakeServer::start(Script::new().agent("code", vec![Reply::RawSse(chunks)]));
    let resp = complete(settings(&server)).await.unwrap();
    let calls = calls_of(&resp);
    assert_eq!(
        calls,
        [
            ("a", "read_file", r#"{"path":"a.txt"}"#),
            ("b", "grep", r#"{"pattern":"fn main"}"#),
        ]
    );
    assert!(resp.usage.estimated, "no usage chunk: estimated");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn sse_multibyte_characters_split_across_writes() {
    let event = data(delta(json!({"content": "日本語 ok é"})));
    let bytes = event.into_bytes();
    // Split inside 本 (3 bytes) and inside é (2 bytes).
    let nihon = bytes.windows(3).position(|w| w == "本".as_bytes()).unwrap();
    let e_acute = bytes.windows(2).position(|w| w == "é".as_bytes()).unwrap();
    let chunks = vec![
        bytes[..nihon + 1].to_vec(),
        bytes[nihon + 1..e_acute + 1].to_vec(),
        bytes[e_acute + 1..].to_vec(),
        b"data: [DONE]\n\n".to_vec(),
    ];
    assert!(std::str::from_utf8(&chunks[0]).is_err());
    let server = FakeServer::start(Script::new().agent("code", vec![Reply::RawSseBytes(chunks)]));
    let resp = complete(settings(&server)).await.unwrap();
    assert_eq!(resp.message.content.as_deref(), Some("日本語 ok é"));
}

#[tokio::test]
async fn sse_plain_json_answer_to_a_stream_request_is_understood() {
    let body = json!({"choices": [{"message": {"role": "assistant", "content": "plain"}, "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 5, "completion_tokens": 1}});
    let server = FakeServer::start(Script::new().agent("code", vec![Reply::Raw(body.to_string())]));
    let resp = complete(settings(&server)).await.unwrap();
    assert_eq!(resp.message.content.as_deref(), Some("plain"));
    assert_eq!(resp.usage.total_tokens, 6);
}

#[tokio::test]
async fn sse_no_stream_setting_sends_a_plain_request() {
    let server = FakeServer::start(
        Script::new().agent("code", vec![Reply::text("not streamed").with_usage(3, 2)]),
    );
    let mut s = settings(&server);
    s.stream = false;
    let resp = complete(s).await.unwrap();
    assert_eq!(resp.message.content.as_deref(), Some("not streamed"));
    assert_eq!(resp.usage.total_tokens, 5);
    let body = server.requests()[0].body.clone();
    let body = body.as_object().unwrap();
    assert!(
        !body.contains_key("stream") && !body.contains_key("stream_options"),
        "{body:?}"
    );
}

#[tokio::test]
async fn sse_stalled_stream_is_retried() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text("this answer never finishes").stall_after(3),
            Reply::text("recovered"),
        ],
    ));
    let mut s = settings(&server);
    s.stream_idle_timeout = Duration::from_millis(300);
    let resp = complete(s).await.unwrap();
    assert_eq!(resp.message.content.as_deref(), Some("recovered"));
    assert_one_identical_retry(&server);
}

#[tokio::test]
async fn sse_stall_every_time_is_exhausted_with_advice() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text("stuck").stall_after(1),
            Reply::text("stuck").stall_after(2),
        ],
    ));
    let mut s = settings(&server);
    s.stream_idle_timeout = Duration::from_millis(200);
    s.max_retries = 1;
    let err = complete(s).await.unwrap_err();
    let (attempts, last) = exhausted(&err);
    assert_eq!(attempts, 2, "{err:?}");
    assert!(last.contains("stalled"), "{last}");
    assert!(err.to_string().contains("stream_idle_timeout"), "{err}");
}

#[tokio::test]
async fn sse_connection_cut_mid_stream_is_retried() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text("half an answer that is cut").cut_after(3),
            Reply::text("whole"),
        ],
    ));
    let resp = complete(settings(&server)).await.unwrap();
    assert_eq!(resp.message.content.as_deref(), Some("whole"));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn sse_error_chunks_are_classified() {
    let context = data(
        json!({"error": {"code": "context_length_exceeded", "message": "This model's maximum context length is 8192 tokens"}}),
    );
    let overloaded = data(json!({"error": {"type": "server_error", "message": "overloaded"}}));
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::RawSse(vec![data(delta(json!({"content": "hm"}))), context]),
            Reply::RawSse(vec![overloaded]),
            Reply::text("after the overload"),
        ],
    ));
    let err = complete(settings(&server)).await.unwrap_err();
    assert!(err.is_context_length(), "{err:?}");
    assert_eq!(server.requests().len(), 1, "context length is not retried");
    let resp = complete(settings(&server)).await.unwrap();
    assert_eq!(resp.message.content.as_deref(), Some("after the overload"));
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn sse_garbage_streams_are_bad_responses() {
    // (An empty stream used to be a bad response too; since issue 11 it is a
    // stream-only failure, retried once without streaming: see
    // `sse_empty_stream_is_retried_once_without_streaming`.)
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::RawSse(vec!["data: {not json at all\n\n".to_owned()])],
    ));
    let err = complete(settings(&server)).await.unwrap_err();
    assert!(matches!(err, LlmError::BadResponse { .. }), "{err:?}");
    assert_eq!(server.requests().len(), 1, "bad responses are not retried");
}

#[tokio::test]
async fn sse_empty_stream_is_retried_once_without_streaming() {
    // llama-cpp-python answers tools + stream with HTTP 200 and an empty body.
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::RawSse(Vec::new()),
            Reply::text("answered without streaming"),
            Reply::text("still not streamed"),
        ],
    ));
    let client = OpenAiClient::new(settings(&server)).expect("client");
    assert!(client.streaming());
    let ask = || async {
        tokio::time::timeout(AWAIT_LIMIT, client.complete(&request()))
            .await
            .expect("completion timed out")
    };
    let resp = ask().await.unwrap();
    assert_eq!(
        resp.message.content.as_deref(),
        Some("answered without streaming")
    );
    let why = client.stream_fallback().expect("streaming is off");
    assert!(why.contains("before any chunk"), "{why}");
    assert_eq!(ChatModel::stream_fallback(&client), Some(why));
    assert!(!client.streaming());
    // The client stays non-streaming for the rest of its life.
    let resp = ask().await.unwrap();
    assert_eq!(resp.message.content.as_deref(), Some("still not streamed"));
    let sent = server.requests();
    let streamed: Vec<bool> = sent.iter().map(|r| r.body["stream"] == true).collect();
    assert_eq!(streamed, [true, false, false]);
    assert!(sent[1].body.get("stream_options").is_none());
}

#[tokio::test]
async fn sse_tool_calls_lost_in_the_stream_are_fetched_without_streaming() {
    // LiteLLM's streaming path: finish_reason `tool_calls`, but no call came.
    let lost = vec![
        data(delta(json!({"role": "assistant", "content": ""}))),
        data(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
        "data: [DONE]\n\n".to_owned(),
    ];
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::RawSse(lost),
            Reply::tool_call("call_7", "read_file", json!({"path": "a.rs"})),
        ],
    ));
    let client = OpenAiClient::new(settings(&server)).expect("client");
    let resp = tokio::time::timeout(AWAIT_LIMIT, client.complete(&request()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        calls_of(&resp),
        [("call_7", "read_file", r#"{"path":"a.rs"}"#)]
    );
    assert!(client.stream_fallback().unwrap().contains("tool_calls"));
    assert_eq!(server.requests().len(), 2);
    assert_eq!(server.requests()[1].body.get("stream"), None);
}

#[tokio::test]
async fn sse_repeated_server_errors_to_streams_are_retried_without_streaming() {
    // LiteLLM answers 500 only when streaming: the second 5xx in a row is
    // retried without streaming, which then works and sticks.
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::Status(500, "stream broke upstream".into()),
            Reply::Status(502, "stream broke upstream".into()),
            Reply::text("plain works"),
        ],
    ));
    let client = OpenAiClient::new(settings(&server)).expect("client");
    let resp = tokio::time::timeout(AWAIT_LIMIT, client.complete(&request()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.message.content.as_deref(), Some("plain works"));
    let streamed: Vec<bool> = server
        .requests()
        .iter()
        .map(|r| r.body["stream"] == true)
        .collect();
    assert_eq!(streamed, [true, true, false]);
    assert!(client.stream_fallback().unwrap().contains("HTTP 502"));
}

#[tokio::test]
async fn sse_ids_and_names_repeated_in_every_chunk_make_one_call() {
    // llama.cpp sends index, id, type and the name again with every piece;
    // its finish_reason may say `stop` although a call came (advisory).
    let piece = |args: &str| {
        data(delta(
            json!({"tool_calls": [{"index": 0, "id": "call_x", "type": "function",
            "function": {"name": "grep", "arguments": args}}]}),
        ))
    };
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::RawSse(vec![
            piece("{\"pat"),
            piece("tern\":"),
            piece("\"fn main\"}"),
            data(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
            "data: [DONE]\n\n".to_owned(),
        ])],
    ));
    let resp = complete(settings(&server)).await.unwrap();
    assert_eq!(
        calls_of(&resp),
        [("call_x", "grep", r#"{"pattern":"fn main"}"#)]
    );
    assert_eq!(resp.finish_reason.as_deref(), Some("stop"));
    assert_eq!(server.requests().len(), 1);
}
