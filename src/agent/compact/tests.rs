//! Tests of the compaction policy: stubs, references, summaries, estimates.

use super::state::SUMMARY_AGENT_SUFFIX;
use super::*;
use crate::llm::{BoxFuture, ChatResponse, FunctionCall, LlmError, Usage};
use serde_json::json;
use std::sync::Mutex;

fn call(id: &str, name: &str, args: serde_json::Value) -> ChatMessage {
    ChatMessage {
        role: MessageRole::Assistant,
        content: None,
        tool_calls: vec![ToolCall {
            id: id.into(),
            kind: "function".into(),
            function: FunctionCall {
                name: name.into(),
                arguments: args.to_string(),
            },
        }],
        tool_call_id: None,
    }
}

fn say(mut m: ChatMessage, text: &str) -> ChatMessage {
    m.content = Some(text.into());
    m
}

/// A conversation of `n` turns each reading a 6 KB file; turn 2's file
/// holds FACT-7731, which turn 3's assistant message mentions.
fn conversation(n: usize) -> ChatRequest {
    let mut messages = vec![ChatMessage::system("sys"), ChatMessage::user("task")];
    for t in 1..=n {
        let id = format!("c{t}");
        let path = format!("f{t}.txt");
        let mut m = call(&id, "read_file", json!({ "path": path }));
        if t == 3 {
            m = say(m, "Noted: the rotation period is FACT-7731.");
        }
        messages.push(m);
        let body = if t == 2 {
            "the rotation period is FACT-7731 days\n".to_owned()
        } else {
            format!("line of file {t}: some text here\n").repeat(180)
        };
        messages.push(ChatMessage::tool(id, body));
    }
    ChatRequest {
        messages,
        tools: Vec::new(),
        agent_path: "code".into(),
        call_mode: crate::llm::CallMode::Native,
    }
}

/// Answers every request with a fixed summary and records requests.
#[derive(Default)]
struct Summarizer {
    seen: Mutex<Vec<ChatRequest>>,
    fail: bool,
}

impl ChatModel for Summarizer {
    fn complete<'a>(
        &'a self,
        req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        self.seen.lock().unwrap().push(req.clone());
        let out = if self.fail {
            Err(LlmError::Config("down".into()))
        } else {
            Ok(ChatResponse {
                message: ChatMessage {
                    role: MessageRole::Assistant,
                    content: Some("Read f1..fN; nothing changed.".into()),
                    tool_calls: vec![],
                    tool_call_id: None,
                },
                usage: Usage {
                    prompt_tokens: 100,
                    completion_tokens: 10,
                    total_tokens: 110,
                    estimated: false,
                    cost_usd: None,
                    ..Default::default()
                },
                finish_reason: None,
            })
        };
        Box::pin(std::future::ready(out))
    }
    fn label(&self) -> String {
        "summarizer".into()
    }
    fn model_name(&self) -> String {
        "s".into()
    }
    fn is_replay(&self) -> bool {
        false
    }
}

fn log() -> (tempfile::TempDir, ActionLog) {
    let dir = tempfile::tempdir().unwrap();
    let log = ActionLog::open(&dir.path().join("a.jsonl"), vec![]).unwrap();
    (dir, log)
}

fn events(dir: &tempfile::TempDir, kind: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.path().join("a.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["event"] == kind)
        .collect()
}

fn tracker() -> Tracker {
    Tracker::new(crate::budget::StageBudget::default(), 100)
}

#[tokio::test]
async fn small_conversations_are_sent_as_they_are() {
    let model = Summarizer::default();
    let (_d, mut log) = log();
    let mut c = Compactor::new(CompactConfig::default());
    let full = conversation(3);
    let (req, bytes) = c
        .prepare(
            &model,
            &full,
            1,
            Trigger::Threshold,
            &mut tracker(),
            &mut log,
        )
        .await
        .unwrap();
    assert!(matches!(req, Cow::Borrowed(_)));
    assert_eq!(bytes, json_len(&full.messages) + 2 + REQUEST_OVERHEAD_BYTES);
    assert!(model.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn old_results_become_stubs_and_referenced_and_recent_ones_stay() {
    let model = Summarizer::default();
    let (dir, mut log) = log();
    // 10 turns of ~6 KB ≈ 60 KB ≈ 15k tokens; trigger at 0.7 × 16000 = 11200.
    let mut c = Compactor::new(CompactConfig {
        context_window: 16_000,
        ..CompactConfig::default()
    });
    let full = conversation(10);
    let (req, bytes) = c
        .prepare(
            &model,
            &full,
            10,
            Trigger::Threshold,
            &mut tracker(),
            &mut log,
        )
        .await
        .unwrap();
    assert!(c.est(bytes) <= c.trigger_tokens(), "{bytes}");
    assert_eq!(bytes, json_len(&req.messages) + 2 + REQUEST_OVERHEAD_BYTES);
    let tool = |id: &str| {
        req.messages
            .iter()
            .find(|m| m.tool_call_id.as_deref() == Some(id))
            .and_then(|m| m.content.clone())
            .unwrap()
    };
    assert_eq!(
        tool("c1"),
        "[compacted: read_file f1.txt, 180 lines, 5.4 KB — re-run the tool if needed]"
    );
    assert!(tool("c2").contains("FACT-7731 days"), "referenced: kept");
    for id in ["c7", "c8", "c9", "c10"] {
        assert!(!tool(id).starts_with("[compacted"), "{id} is recent");
    }
    // Every call is still answered, in order.
    assert_eq!(req.messages.len(), full.messages.len());
    assert!(model.seen.lock().unwrap().is_empty(), "stubs were enough");
    let ev = &events(&dir, "compaction")[0];
    assert_eq!(ev["method"], "stub");
    assert_eq!(ev["trigger"], "threshold");
    let stubbed: Vec<&str> = ev["stubbed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        stubbed.contains(&"c1") && !stubbed.contains(&"c2"),
        "{stubbed:?}"
    );
    assert!(ev["kept"].as_array().unwrap().contains(&json!("c2")));
    assert!(ev["bytes_after"].as_u64() < ev["bytes_before"].as_u64());
    assert_eq!(ev["estimate"], "serialized request bytes / 4");
}

#[tokio::test]
async fn a_summary_replaces_the_older_part_when_stubs_are_not_enough() {
    let model = Summarizer::default();
    let (dir, mut log) = log();
    // 60 turns: even stubbed, the calls alone pass 0.7 × 6000 tokens.
    let mut c = Compactor::new(CompactConfig {
        context_window: 8_000,
        ..CompactConfig::default()
    });
    let full = conversation(60);
    let mut t = tracker();
    let (req, bytes) = c
        .prepare(&model, &full, 60, Trigger::Threshold, &mut t, &mut log)
        .await
        .unwrap();
    assert!(c.est(bytes) <= c.trigger_tokens(), "{bytes}");
    let seen = model.seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].agent_path, "code/compact");
    assert!(seen[0].tools.is_empty());
    // The summary message follows the task; the referenced fact is carried.
    let summary = req.messages[2].content.as_deref().unwrap();
    assert!(summary.contains("Read f1..fN"), "{summary}");
    assert!(summary.contains("the rotation period is FACT-7731 days"));
    assert_eq!(req.messages[3].role, MessageRole::Assistant);
    let pairing = serde_json::to_value(&req.messages).unwrap();
    assert!(pairing.as_array().unwrap().len() < full.messages.len());
    assert_eq!(c.summary_tokens().total(), 110);
    assert_eq!(
        t.used().tokens,
        110,
        "summary tokens count toward the budget"
    );
    let ev = &events(&dir, "compaction")[0];
    assert!(ev["method"].as_str().unwrap().contains("summary"));
    assert!(ev["summarized"]["messages"].as_u64().unwrap() > 10);
}

#[tokio::test]
async fn a_failed_summary_falls_back_to_stubs() {
    let model = Summarizer {
        fail: true,
        ..Summarizer::default()
    };
    let (dir, mut log) = log();
    let mut c = Compactor::new(CompactConfig {
        context_window: 8_000,
        ..CompactConfig::default()
    });
    let full = conversation(60);
    let (req, _) = c
        .prepare(
            &model,
            &full,
            60,
            Trigger::Threshold,
            &mut tracker(),
            &mut log,
        )
        .await
        .unwrap();
    assert_eq!(req.messages.len(), full.messages.len());
    let ev = &events(&dir, "compaction")[0];
    assert!(ev["summary_error"].as_str().unwrap().contains("down"));
}

#[tokio::test]
async fn a_stub_is_lifted_when_a_later_turn_refers_to_the_result() {
    let model = Summarizer::default();
    let (_d, mut log) = log();
    let mut c = Compactor::new(CompactConfig {
        context_window: 16_000,
        ..CompactConfig::default()
    });
    let mut full = conversation(10);
    c.prepare(
        &model,
        &full,
        10,
        Trigger::Threshold,
        &mut tracker(),
        &mut log,
    )
    .await
    .unwrap();
    assert!(c.stubbed.contains(&3), "c1's result (index 3) was stubbed");
    full.messages.push(say(
        call(
            "c11",
            "edit_file",
            json!({"path": "f1.txt", "old_string": "a", "new_string": "b"}),
        ),
        "",
    ));
    full.messages.push(ChatMessage::tool("c11", "ok"));
    let (req, _) = c
        .prepare(
            &model,
            &full,
            11,
            Trigger::Threshold,
            &mut tracker(),
            &mut log,
        )
        .await
        .unwrap();
    assert!(
        req.messages[3]
            .content
            .as_deref()
            .unwrap()
            .starts_with("line of file 1")
    );
}

#[test]
fn references_by_token_id_and_path_and_superseded_reads() {
    let mut c = Compactor::new(CompactConfig::default());
    let msgs = vec![
        ChatMessage::system("s"),
        ChatMessage::user("t"),
        call("a1", "read_file", json!({"path": "x.rs"})),
        ChatMessage::tool("a1", "fn main() { let sha = \"9f3ab21\"; }"),
        call("a2", "read_file", json!({"path": "./x.rs"})),
        ChatMessage::tool("a2", "fn main() {}"),
        call("a3", "bash", json!({"command": "ls"})),
        ChatMessage::tool("a3", "plain words only"),
        call("a4", "grep", json!({"pattern": "zzz"})),
        ChatMessage::tool("a4", "nothing"),
        say(
            call("a5", "bash", json!({"command": "git show 9f3ab21"})),
            "See a4.",
        ),
        ChatMessage::tool("a5", "done"),
    ];
    let p = c.pinned(&msgs);
    // a1 mentions 9f3ab21 (referenced later) but was superseded by a2's re-read.
    assert!(!p.contains(&3));
    assert!(!p.contains(&5), "x.rs is not mentioned after a2");
    assert!(!p.contains(&7));
    assert!(p.contains(&9), "a4 is named by a later message");
    assert!(!p.contains(&11));
    let mut msgs2 = msgs.clone();
    msgs2.push(call("a6", "edit_file", json!({"path": "x.rs"})));
    msgs2.push(ChatMessage::tool("a6", "ok"));
    let p = c.pinned(&msgs2);
    assert!(
        p.contains(&5),
        "the latest read of x.rs is referenced by the edit"
    );
}

#[test]
fn stubs_describe_the_call() {
    let m = call("b", "bash", json!({"command": "cargo test\n--all"}));
    let msgs = vec![m, ChatMessage::tool("b", "ok\nfine\n")];
    assert_eq!(
        stub_text(call_of(&msgs, 1), "ok\nfine\n"),
        "[compacted: bash `cargo test --all`, 2 lines, 8 B — re-run the tool if needed]"
    );
    let g = call("g", "grep", json!({"pattern": "fn main", "path": "src"}));
    assert_eq!(describe(g.tool_calls.first()), "grep `fn main` in src");
    assert_eq!(describe(None), "a tool call");
}

#[test]
fn context_length_errors_are_recognised_by_their_wording() {
    let e = LlmError::Rejected {
        url: "u".into(),
        status: 400,
        body: "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.".into(),
    };
    assert!(e.is_context_length());
    let e = LlmError::Rejected {
        url: "u".into(),
        status: 400,
        body: "the request exceeds the available context size".into(),
    };
    assert!(e.is_context_length());
    let e = LlmError::Rejected {
        url: "u".into(),
        status: 400,
        body: "invalid tool schema".into(),
    };
    assert!(!e.is_context_length());
}

#[test]
fn calibration_replaces_the_bytes_over_four_rule() {
    let mut c = Compactor::new(CompactConfig::default());
    assert_eq!(c.est(4000), 1000);
    c.calibrate(4000, 1200);
    assert_eq!(c.est(4000), 1200);
    assert!(c.method().contains("0.300"));
    c.calibrate(4000, 0);
    assert_eq!(
        c.est(4000),
        1200,
        "a response without usage keeps the calibration"
    );
}

/// A model for the turn sender: main requests get the scripted answers in
/// order, summary requests a fixed summary; it reports `window` when asked
/// and `fallback` as its stream fallback.
#[derive(Default)]
struct Scripted {
    main: Mutex<std::collections::VecDeque<Result<ChatResponse, LlmError>>>,
    seen: Mutex<Vec<ChatRequest>>,
    window: Option<u64>,
    probes: Mutex<u32>,
    fallback: Option<String>,
}

fn text_reply(text: &str) -> ChatResponse {
    ChatResponse {
        message: ChatMessage {
            role: MessageRole::Assistant,
            content: Some(text.into()),
            tool_calls: vec![],
            tool_call_id: None,
        },
        usage: Usage::default(),
        finish_reason: None,
    }
}

fn too_long(window: Option<u64>) -> LlmError {
    LlmError::ContextLength {
        url: "http://127.0.0.1:1/v1/chat/completions".into(),
        status: 400,
        body: "the request exceeds the available context size".into(),
        window,
    }
}

impl Scripted {
    fn new(main: Vec<Result<ChatResponse, LlmError>>) -> Self {
        Scripted {
            main: Mutex::new(main.into()),
            ..Scripted::default()
        }
    }

    fn main_requests(&self) -> Vec<ChatRequest> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|r| !r.agent_path.ends_with(SUMMARY_AGENT_SUFFIX))
            .cloned()
            .collect()
    }
}

impl ChatModel for Scripted {
    fn complete<'a>(
        &'a self,
        req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        self.seen.lock().unwrap().push(req.clone());
        let out = if req.agent_path.ends_with(SUMMARY_AGENT_SUFFIX) {
            Ok(text_reply("Read the files; nothing changed."))
        } else {
            self.main
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| Err(LlmError::Config("script exhausted".into())))
        };
        Box::pin(std::future::ready(out))
    }
    fn label(&self) -> String {
        "scripted".into()
    }
    fn model_name(&self) -> String {
        "scripted".into()
    }
    fn is_replay(&self) -> bool {
        false
    }
    fn probe_context_window(&self) -> BoxFuture<'_, Option<u64>> {
        *self.probes.lock().unwrap() += 1;
        Box::pin(std::future::ready(self.window))
    }
    fn stream_fallback(&self) -> Option<String> {
        self.fallback.clone()
    }
}

#[tokio::test]
async fn a_context_length_error_naming_4096_makes_compaction_target_4096() {
    let model = Scripted::new(vec![Err(too_long(Some(4096))), Ok(text_reply("done"))]);
    let (dir, mut log) = log();
    let mut c = Compactor::new(CompactConfig::default());
    // ~75 KB: far under 70 % of the default 128k window, far over 4096 tokens.
    let full = conversation(12);
    let sent = send_turn(&model, &full, 1, &mut c, &mut tracker(), &mut log)
        .await
        .unwrap();
    assert!(matches!(sent, Sent::Reply(_)), "{sent:?}");
    let compactions = events(&dir, "compaction");
    assert_eq!(compactions.len(), 1, "{compactions:?}");
    let e = &compactions[0];
    assert_eq!(e["trigger"], "context_length_error");
    assert_eq!(e["context_window"], 4096);
    assert_eq!(e["trigger_tokens"], (4096.0 * DEFAULT_COMPACT_AT) as u64);
    let main = model.main_requests();
    assert_eq!(main.len(), 2);
    assert!(json_len(&main[1].messages) < json_len(&main[0].messages));
}

#[tokio::test]
async fn an_unshrinkable_request_is_not_resent_but_fails_with_the_numbers() {
    let model = Scripted::new(vec![Err(too_long(Some(4096))), Ok(text_reply("never"))]);
    let (dir, mut log) = log();
    let mut c = Compactor::new(CompactConfig::default());
    // Nothing to condense: the task itself is too long.
    let full = ChatRequest {
        messages: vec![
            ChatMessage::system("sys"),
            ChatMessage::user("spec line\n".repeat(4000)),
        ],
        tools: Vec::new(),
        agent_path: "code".into(),
        call_mode: crate::llm::CallMode::Native,
    };
    let sent = send_turn(&model, &full, 1, &mut c, &mut tracker(), &mut log)
        .await
        .unwrap();
    let Sent::Failed(err) = sent else {
        panic!("{sent:?}")
    };
    let text = err.to_string();
    assert!(err.is_context_length(), "{err:?}");
    assert!(
        text.contains("compaction could not shrink") && text.contains("4096 tokens"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{} bytes",
            json_len(&full.messages) + 2 + REQUEST_OVERHEAD_BYTES
        )),
        "{text}"
    );
    assert_eq!(
        model.main_requests().len(),
        1,
        "the same request is not sent again"
    );
    let errors = events(&dir, "model_error");
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[1]["retry"].as_str().unwrap().starts_with("none"));
}

#[tokio::test]
async fn the_servers_window_is_asked_once_and_used_from_the_first_turn() {
    let mut model = Scripted::new(vec![Ok(text_reply("one")), Ok(text_reply("two"))]);
    model.window = Some(4096);
    let (dir, mut log) = log();
    let mut c = Compactor::new(CompactConfig::default());
    let full = conversation(12);
    let mut t = tracker();
    for turn in 1..=2 {
        let sent = send_turn(&model, &full, turn, &mut c, &mut t, &mut log)
            .await
            .unwrap();
        assert!(matches!(sent, Sent::Reply(_)), "{sent:?}");
    }
    assert_eq!(*model.probes.lock().unwrap(), 1);
    let learned = events(&dir, "context_window");
    assert_eq!(learned.len(), 1);
    assert_eq!(learned[0]["tokens"], 4096);
    assert_eq!(learned[0]["used"], 4096);
    let compactions = events(&dir, "compaction");
    assert!(!compactions.is_empty());
    assert_eq!(compactions[0]["trigger"], "threshold");
    assert_eq!(compactions[0]["context_window"], 4096);
}

#[tokio::test]
async fn a_stream_fallback_is_logged_once() {
    let mut model = Scripted::new(vec![Ok(text_reply("one")), Ok(text_reply("two"))]);
    model.fallback = Some("the stream ended before any chunk".into());
    let (dir, mut log) = log();
    let mut c = Compactor::new(CompactConfig::default());
    let full = conversation(2);
    let mut t = tracker();
    for turn in 1..=2 {
        send_turn(&model, &full, turn, &mut c, &mut t, &mut log)
            .await
            .unwrap();
    }
    let fallbacks = events(&dir, "stream_fallback");
    assert_eq!(fallbacks.len(), 1, "{fallbacks:?}");
    assert_eq!(fallbacks[0]["reason"], "the stream ended before any chunk");
    assert_eq!(fallbacks[0]["turn"], 1);
}
