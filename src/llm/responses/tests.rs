use super::*;
use crate::llm::settings::DEFAULT_MAX_TOKENS;

fn bash_tool() -> ToolDef {
    ToolDef {
        name: "bash",
        description: "run",
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    }
}

fn conversation() -> ChatRequest {
    let mut assistant = ChatMessage {
        role: MessageRole::Assistant,
        content: None,
        tool_calls: vec![ToolCall {
            id: "c1".into(),
            kind: "function".into(),
            function: FunctionCall {
                name: "bash".into(),
                arguments: r#"{"command":"ls"}"#.into(),
            },
        }],
        tool_call_id: None,
    };
    let mut talk = assistant.clone();
    talk.content = Some("Looking.".into());
    talk.tool_calls[0].id = "c2".into();
    assistant.content = Some(String::new());
    ChatRequest {
        messages: vec![
            ChatMessage::system("sys"),
            ChatMessage::user("task"),
            assistant,
            ChatMessage::tool("c1", "a.txt\n"),
            talk,
            ChatMessage::tool("c2", "b.txt\n"),
        ],
        tools: vec![bash_tool()],
        agent_path: "code".into(),
        call_mode: CallMode::Native,
    }
}

fn body_of(model: &str, s: &Sampling, req: &ChatRequest, stream: bool) -> Value {
    serde_json::from_slice(&request_body(model, s, req, stream)).unwrap()
}

fn sampling() -> Sampling {
    Sampling {
        max_tokens: Some(DEFAULT_MAX_TOKENS),
        ..Sampling::default()
    }
}

#[test]
fn a_native_request_is_instructions_input_items_flat_tools_and_store_false() {
    let body = request_body("o4-mini", &sampling(), &conversation(), true);
    assert_eq!(
        String::from_utf8(body).unwrap(),
        concat!(
            r#"{"model":"o4-mini","instructions":"sys","input":["#,
            r#"{"content":"task","role":"user","type":"message"},"#,
            r#"{"arguments":"{\"command\":\"ls\"}","call_id":"c1","name":"bash","type":"function_call"},"#,
            r#"{"call_id":"c1","output":"a.txt\n","type":"function_call_output"},"#,
            r#"{"content":"Looking.","role":"assistant","type":"message"},"#,
            r#"{"arguments":"{\"command\":\"ls\"}","call_id":"c2","name":"bash","type":"function_call"},"#,
            r#"{"call_id":"c2","output":"b.txt\n","type":"function_call_output"}],"#,
            r#""tools":[{"description":"run","name":"bash","parameters":{"properties":{"command":{"type":"string"}},"type":"object"},"type":"function"}],"#,
            r#""tool_choice":"auto","max_output_tokens":4096,"store":false,"stream":true}"#
        )
    );
}

#[test]
fn the_body_is_byte_stable_and_each_turn_extends_the_last() {
    let req = conversation();
    let a = request_body("m", &sampling(), &req, false);
    let b = request_body("m", &sampling(), &req, false);
    assert_eq!(a, b);
    let mut shorter = req.clone();
    shorter.messages.truncate(4);
    let short = body_of("m", &sampling(), &shorter, false);
    let long = body_of("m", &sampling(), &req, false);
    // The input of turn k is a prefix of turn k+1's, item by item.
    let (s, l) = (
        short["input"].as_array().unwrap(),
        long["input"].as_array().unwrap(),
    );
    assert_eq!(&l[..s.len()], s.as_slice());
    assert_eq!(short["instructions"], long["instructions"]);
    assert_eq!(short["tools"], long["tools"]);
}

#[test]
fn sampling_maps_to_responses_fields_and_seed_is_not_sent() {
    let s = Sampling {
        temperature: Some(0.2),
        seed: Some(7),
        max_tokens: None,
        tool_choice: Some(ToolChoice::Required),
    };
    let body = body_of("m", &s, &conversation(), false);
    assert_eq!(body["tool_choice"], "required");
    assert_eq!(body["temperature"], 0.2);
    assert!(body.get("seed").is_none(), "{body}");
    assert!(body.get("max_output_tokens").is_none(), "{body}");
    assert!(body.get("max_tokens").is_none(), "{body}");
    assert!(body.get("stream").is_none(), "{body}");
    assert_eq!(body["store"], false);
    // Without tools there is no tool_choice.
    let mut req = conversation();
    req.tools.clear();
    let body = body_of("m", &s, &req, false);
    assert!(
        body.get("tools").is_none() && body.get("tool_choice").is_none(),
        "{body}"
    );
}

#[test]
fn a_constrained_turn_sends_the_catalogue_and_the_schema_as_text_format() {
    let mut req = conversation();
    req.call_mode = CallMode::Constrained;
    let body = body_of("m", &sampling(), &req, false);
    assert!(body.get("tools").is_none(), "{body}");
    let instructions = body["instructions"].as_str().unwrap();
    assert!(
        instructions.starts_with("sys\n\n## Calling tools"),
        "{instructions}"
    );
    assert_eq!(body["text"]["format"]["type"], "json_schema");
    assert_eq!(
        body["text"]["format"]["schema"]["oneOf"][0]["properties"]["name"]["const"],
        "bash"
    );
    req.call_mode = CallMode::Text;
    let body = body_of("m", &sampling(), &req, false);
    assert!(body.get("text").is_none() && body.get("tools").is_none());
    assert!(
        body["instructions"]
            .as_str()
            .unwrap()
            .contains("## Calling tools")
    );
}

#[test]
fn a_later_system_message_stays_in_the_input() {
    let mut req = conversation();
    req.messages.push(ChatMessage::system("compacted"));
    let body = body_of("m", &sampling(), &req, false);
    assert_eq!(body["instructions"], "sys");
    let last = body["input"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        last,
        json!({"type": "message", "role": "system", "content": "compacted"})
    );
}

const LIMIT: usize = 1 << 20;

#[test]
fn a_plain_reply_keeps_text_and_calls_and_leaves_reasoning_out() {
    let body = json!({
        "id": "resp_1", "object": "response", "status": "completed",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thinking hard"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Reading it.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "read_file", "arguments": "{\"path\":\"a\"}"}
        ],
        "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 64},
                  "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 12}, "total_tokens": 120}
    });
    let a = parse_response(body.to_string().as_bytes(), LIMIT).unwrap();
    assert_eq!(a.message.content.as_deref(), Some("Reading it."));
    assert_eq!(a.message.tool_calls.len(), 1);
    let call = &a.message.tool_calls[0];
    assert_eq!(
        (
            call.id.as_str(),
            call.function.name.as_str(),
            call.function.arguments.as_str()
        ),
        ("call_a", "read_file", r#"{"path":"a"}"#)
    );
    assert_eq!(a.finish_reason.as_deref(), Some("tool_calls"));
    let u = a.usage.unwrap();
    assert_eq!(
        (
            u.prompt_tokens,
            u.completion_tokens,
            u.total_tokens,
            u.cache_read_tokens
        ),
        (100, 20, 120, 64)
    );
    assert!(!u.estimated);
}

#[test]
fn an_incomplete_reply_cut_by_the_cap_is_length() {
    let body = json!({
        "object": "response", "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "half an ans"}]}],
        "usage": {"input_tokens": 5, "output_tokens": 16}
    });
    let a = parse_response(body.to_string().as_bytes(), LIMIT).unwrap();
    assert_eq!(a.finish_reason.as_deref(), Some("length"));
    assert_eq!(a.message.content.as_deref(), Some("half an ans"));
    let body = json!({"status": "incomplete", "incomplete_details": {"reason": "content_filter"}, "output": []});
    let a = parse_response(body.to_string().as_bytes(), LIMIT).unwrap();
    assert_eq!(a.finish_reason.as_deref(), Some("content_filter"));
}

#[test]
fn failed_and_malformed_replies_are_errors() {
    let failed = json!({"status": "failed", "output": [],
        "error": {"code": "context_length_exceeded", "message": "Your input exceeds the context window of this model."}});
    match parse_response(failed.to_string().as_bytes(), LIMIT) {
        Err(ChunkError::Server(e)) => assert_eq!(e["code"], "context_length_exceeded"),
        other => panic!("{other:?}"),
    }
    for bad in [&b""[..], b"[1]", b"{}", b"<html>"] {
        assert!(
            matches!(parse_response(bad, LIMIT), Err(ChunkError::Malformed(_))),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn a_reply_past_the_cap_is_refused() {
    let body = json!({"status": "completed", "output": [
        {"type": "message", "content": [{"type": "output_text", "text": "x".repeat(100)}]}]});
    assert!(matches!(
        parse_response(body.to_string().as_bytes(), 50),
        Err(ChunkError::TooLarge(_))
    ));
}

fn feed(events: &[Value]) -> (Assembled, usize, bool) {
    let mut a = ResponsesAssembler::with_limit(LIMIT);
    for e in events {
        a.push(&e.to_string()).unwrap();
    }
    let (chars, done) = (a.chars(), a.done());
    (a.finish(), chars, done)
}

#[test]
fn a_streamed_tool_call_is_assembled_from_its_events() {
    let (a, chars, done) = feed(&[
        json!({"type": "response.created", "response": {"status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs"}}),
        json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": "hmm"}),
        json!({"type": "response.output_item.added", "output_index": 1,
               "item": {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "bash", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{\"command\""}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": ":\"ls\"}"}),
        json!({"type": "response.function_call_arguments.done", "output_index": 1, "arguments": "{\"command\":\"ls\"}"}),
        json!({"type": "response.output_item.done", "output_index": 1,
               "item": {"type": "function_call", "call_id": "call_a", "name": "bash", "arguments": "{\"command\":\"ls\"}"}}),
        json!({"type": "response.completed", "response": {"status": "completed",
               "usage": {"input_tokens": 9, "output_tokens": 3, "input_tokens_details": {"cached_tokens": 8}}}}),
    ]);
    assert!(done);
    assert_eq!(a.message.content, None, "reasoning is not text");
    assert_eq!(a.message.tool_calls.len(), 1);
    assert_eq!(a.message.tool_calls[0].id, "call_a");
    assert_eq!(a.message.tool_calls[0].function.name, "bash");
    assert_eq!(
        a.message.tool_calls[0].function.arguments,
        r#"{"command":"ls"}"#
    );
    assert_eq!(chars, 16);
    assert_eq!(a.finish_reason.as_deref(), Some("tool_calls"));
    let u = a.usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.total_tokens, u.cache_read_tokens),
        (9, 12, 8)
    );
}

#[test]
fn streamed_text_is_joined_and_progress_reported() {
    let mut a = ResponsesAssembler::with_limit(LIMIT);
    let ev = |d: &str| {
        json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": d}).to_string()
    };
    assert!(!a.push(&json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "content": []}}).to_string()).unwrap());
    assert!(a.push(&ev("Hé")).unwrap());
    assert!(a.push(&ev("llo")).unwrap());
    assert!(!a.done());
    a.push(
        &json!({"type": "response.output_item.done", "output_index": 0,
        "item": {"type": "message", "content": [{"type": "output_text", "text": "Héllo"}]}})
        .to_string(),
    )
    .unwrap();
    a.push(&json!({"type": "response.completed", "response": {"status": "completed"}}).to_string())
        .unwrap();
    assert!(a.done());
    assert_eq!(a.chars(), 5);
    let r = a.finish();
    assert_eq!(r.message.content.as_deref(), Some("Héllo"));
    assert_eq!(r.finish_reason.as_deref(), Some("stop"));
    assert_eq!(r.usage, None);
}

#[test]
fn items_only_in_the_final_response_are_taken() {
    let (a, _, _) = feed(&[
        json!({"type": "response.completed", "response": {"status": "completed",
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "ok"}]}]}}),
    ]);
    assert_eq!(a.message.content.as_deref(), Some("ok"));
}

#[test]
fn a_streamed_reply_cut_by_the_cap_is_length() {
    let (a, _, done) = feed(&[
        json!({"type": "response.output_text.delta", "output_index": 0, "delta": "half"}),
        json!({"type": "response.incomplete", "response": {"status": "incomplete",
               "incomplete_details": {"reason": "max_output_tokens"}, "usage": {"input_tokens": 3, "output_tokens": 16}}}),
    ]);
    assert!(done);
    assert_eq!(a.finish_reason.as_deref(), Some("length"));
    assert_eq!(a.message.content.as_deref(), Some("half"));
}

#[test]
fn stream_errors_carry_the_error_object() {
    let mut a = ResponsesAssembler::with_limit(LIMIT);
    let failed = json!({"type": "response.failed", "response": {"status": "failed",
        "error": {"code": "server_error", "message": "boom"}}});
    assert_eq!(
        a.push(&failed.to_string()),
        Err(ChunkError::Server(
            json!({"code": "server_error", "message": "boom"})
        ))
    );
    let error = json!({"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": null});
    assert_eq!(a.push(&error.to_string()), Err(ChunkError::Server(error)));
    assert!(matches!(a.push("not json"), Err(ChunkError::Malformed(_))));
    assert!(matches!(a.push("{\"x\":1}"), Err(ChunkError::Malformed(_))));
}

#[test]
fn a_stream_past_the_cap_is_refused() {
    let mut a = ResponsesAssembler::with_limit(10);
    let ev =
        json!({"type": "response.output_text.delta", "output_index": 0, "delta": "x".repeat(11)});
    assert!(matches!(
        a.push(&ev.to_string()),
        Err(ChunkError::TooLarge(_))
    ));
}
