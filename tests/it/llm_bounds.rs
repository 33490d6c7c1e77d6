//! The model client's bounds against the fake server (issue 12):
//! `request_deadline` over a whole completion, `max_reply_bytes` on replies
//! streamed and plain, a `Content-Length` past the cap refused unread, and
//! error quotes free of control characters. The hostile servers through the
//! real binary are in `hostile.rs`.

use crate::support::fake_server::noise;
use crate::support::{AWAIT_LIMIT, FakeServer, Reply, Script, exhausted};
use orch::llm::openai::{ModelSettings, OpenAiClient};
use orch::llm::{ChatMessage, ChatModel, ChatRequest, ChatResponse, LlmError};
use serde_json::json;
use std::time::Duration;

fn settings(server: &FakeServer) -> ModelSettings {
    let mut s = ModelSettings::new(server.base_url.clone(), "fake-model");
    s.request_timeout = Duration::from_secs(20);
    s.max_retries = 2;
    s.retry_base_delay = Duration::from_millis(10);
    s
}

async fn complete(s: ModelSettings) -> Result<ChatResponse, LlmError> {
    let client = OpenAiClient::new(s).expect("client");
    let req = ChatRequest {
        messages: vec![ChatMessage::system("sys"), ChatMessage::user("go")],
        tools: Vec::new(),
        agent_path: "code".into(),
        call_mode: orch::llm::CallMode::Native,
    };
    tokio::time::timeout(AWAIT_LIMIT, client.complete(&req))
        .await
        .expect("completion timed out")
}

fn bad_response(err: &LlmError) -> &str {
    match err {
        LlmError::BadResponse { reason, .. } => reason,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn bounds_request_deadline_ends_a_stream_that_only_keeps_alive() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::KeepAliveFlood, Reply::text("never asked for")],
    ));
    let mut s = settings(&server);
    // The idle timeout alone would wait 30 s; the deadline ends it at 1 s,
    // and nothing is retried past it.
    s.stream_idle_timeout = Duration::from_secs(30);
    s.request_deadline = Duration::from_secs(1);
    let err = complete(s).await.unwrap_err();
    let (attempts, last) = exhausted(&err);
    assert_eq!(attempts, 1, "{err}");
    assert!(
        last.contains("timed out after 1s reading the stream (request_deadline)"),
        "{last}"
    );
    assert!(err.to_string().contains("request_deadline"), "{err}");
    assert_eq!(server.requests().len(), 1);
    assert_eq!(server.remaining("code"), 1);
}

#[tokio::test]
async fn bounds_an_idle_stream_of_only_keep_alives_is_not_retried() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::KeepAliveFlood, Reply::text("never asked for")],
    ));
    let mut s = settings(&server);
    s.stream_idle_timeout = Duration::from_millis(400);
    // Before the first token the first-token wait applies: made as short.
    s.first_token_timeout = Duration::from_millis(400);
    s.prompt_eval_rate = 1e9;
    let err = complete(s).await.unwrap_err();
    let (attempts, last) = exhausted(&err);
    assert_eq!(attempts, 1, "{err}");
    assert!(last.contains("keep-alive comments do not count"), "{last}");
    assert!(
        err.to_string()
            .contains("sent only keep-alive comments, no data: not retried"),
        "{err}"
    );
    assert_eq!(server.remaining("code"), 1, "the server is busy: no retry");
}

#[tokio::test]
async fn bounds_a_stream_silent_from_its_first_byte_is_retried_once() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text("lost").stall_after(0),
            Reply::text("second try"),
        ],
    ));
    let mut s = settings(&server);
    s.stream_idle_timeout = Duration::from_millis(400);
    s.first_token_timeout = Duration::from_millis(400);
    s.prompt_eval_rate = 1e9;
    let resp = complete(s).await.expect("the retry answers");
    assert_eq!(resp.message.content.as_deref(), Some("second try"));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn bounds_no_retry_starts_past_the_request_deadline() {
    let overloaded = || Reply::Status(503, "overloaded".into());
    let server =
        FakeServer::start(Script::new().agent("code", (0..10).map(|_| overloaded()).collect()));
    let mut s = settings(&server);
    s.max_retries = 9;
    s.retry_base_delay = Duration::from_millis(400);
    s.request_deadline = Duration::from_secs(1);
    let err = complete(s).await.unwrap_err();
    let (attempts, _) = exhausted(&err);
    assert!(attempts < 10, "{err}");
    assert!(
        err.to_string()
            .contains("stopped retrying: the request_deadline of 1s"),
        "{err}"
    );
}

#[tokio::test]
async fn bounds_a_plain_reply_past_max_reply_bytes_is_refused() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::text(&"x".repeat(1500)), Reply::text("ok")],
    ));
    let mut s = settings(&server);
    s.stream = false;
    s.max_reply_bytes = 1000;
    let err = complete(s.clone()).await.unwrap_err();
    let reason = bad_response(&err);
    assert!(
        reason.contains("cap of 1000 bytes (max_reply_bytes)") && reason.contains("1500 bytes"),
        "{reason}"
    );
    assert_eq!(server.requests().len(), 1, "not retried");
    // At the cap exactly is fine.
    s.max_reply_bytes = 2;
    assert_eq!(
        complete(s).await.unwrap().message.content.as_deref(),
        Some("ok")
    );
}

#[tokio::test]
async fn bounds_streamed_tool_arguments_past_max_reply_bytes_are_refused() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::tool_call(
            "c1",
            "write_file",
            json!({"path": "a.txt", "content": "y".repeat(5000)}),
        )],
    ));
    let mut s = settings(&server);
    s.max_reply_bytes = 4096;
    let err = complete(s).await.unwrap_err();
    assert!(
        bad_response(&err).contains("cap of 4096 bytes (max_reply_bytes)"),
        "{err}"
    );
    assert_eq!(server.requests().len(), 1, "not retried");
}

#[tokio::test]
async fn bounds_a_declared_length_past_the_cap_is_refused_unread() {
    // Content-Length 200 KB against a body cap of 2 × 1000 + 64 KiB.
    let body = format!(
        "{{\"choices\":[{{\"message\":{{\"content\":\"{}\"}}}}]}}",
        "z".repeat(200_000)
    );
    let server = FakeServer::start(Script::new().agent("code", vec![Reply::Raw(body)]));
    let mut s = settings(&server);
    s.max_reply_bytes = 1000;
    let err = complete(s).await.unwrap_err();
    let reason = bad_response(&err);
    assert!(
        reason.contains("more than the cap of 67536") && reason.contains("not read"),
        "{reason}"
    );
}

#[tokio::test]
async fn bounds_a_huge_chunked_body_is_refused_after_the_cap() {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::Huge {
            bytes: 50 << 20,
            sse: false,
        }],
    ));
    let mut s = settings(&server);
    s.stream = false;
    let err = complete(s).await.unwrap_err();
    let reason = bad_response(&err);
    assert!(
        reason.contains("larger than the cap of 4259840 bytes")
            && reason.contains("refused after reading"),
        "{reason}"
    );
}

#[tokio::test]
async fn bounds_error_quotes_carry_no_control_characters() {
    let mut garbage = b"\x00\x1b[31mred\x07 and \x7f".to_vec();
    garbage.extend(noise(600, 7));
    let status_body = String::from_utf8_lossy(&garbage).into_owned();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::RawBytes(garbage.clone()),
            Reply::Status(400, status_body),
            Reply::RawSse(vec![format!(
                "data: {{\"choices\": [\u{0}\u{1b}{}\n\n",
                "q".repeat(10)
            )]),
        ],
    ));
    let s = settings(&server);
    for _ in 0..3 {
        let err = complete(s.clone()).await.unwrap_err();
        let text = err.to_string();
        assert!(
            !text.chars().any(char::is_control),
            "a control character in: {text:?}"
        );
    }
    assert_eq!(server.requests().len(), 3);
}
