//! Constrained tool calls (issue 28, point 2), end to end through the real
//! binary against the scripted server in "small model" mode (no native
//! calls: every reply is text). A profile's `tool_calling = "constrained"`
//! sends each turn without `tools`, under a JSON schema admitting exactly
//! one offered call (one `oneOf` entry per tool, `finish` included, each
//! with its argument schema), and the reply's JSON runs as that call; under
//! the default (`auto`) a turn whose call came as text switches the stage's
//! following turns to constrained, logged once; `native` never switches and
//! its requests carry no schema; `text` sends neither tools nor schema.

use crate::support::{
    FakeServer, Recorded, Reply, Script, TestRepo, offered_tools, record_dir, stage_events,
    stage_record, state_json, tool_results, write_pipeline,
};
use serde_json::{Value, json};

const SOLVED: &str = "def median(xs):\n    s = sorted(xs)\n    n = len(s)\n    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\n";

/// A repository with `solution.py` and, when `profile` is given, a
/// `.orch/orch.toml` whose default profile has those keys.
fn repo(profile: Option<&str>) -> TestRepo {
    let stub = "def median(xs):\n    raise NotImplementedError\n";
    match profile {
        None => TestRepo::with_commit(&[("solution.py", stub)], "stub"),
        Some(keys) => {
            let toml = format!("default_profile = \"small\"\n\n[profiles.small]\n{keys}\n");
            TestRepo::with_commit(&[("solution.py", stub), (".orch/orch.toml", &toml)], "stub")
        }
    }
}

/// Runs a one-stage `code` pipeline (role `coder`); exit code and run id.
fn run(repo: &TestRepo, server: &FakeServer) -> (i32, String) {
    crate::support::run_median_stage(repo, server, "coder")
}

/// A call as a small model writes it under the schema: the JSON text alone.
fn json_call(name: &str, arguments: Value) -> Reply {
    Reply::text(&json!({"name": name, "arguments": arguments}).to_string())
}

fn write_solved() -> Reply {
    json_call(
        "write_file",
        json!({"path": "solution.py", "content": SOLVED}),
    )
}

fn finish() -> Reply {
    json_call("finish", json!({"summary": "Implemented median."}))
}

/// The schema a constrained request carries (`response_format`).
fn schema_of(req: &Recorded) -> &Value {
    let rf = &req.body["response_format"];
    assert_eq!(rf["type"], "json_schema", "{}", req.body);
    assert_eq!(rf["json_schema"]["name"], "tool_call");
    &rf["json_schema"]["schema"]
}

/// Whether a request carries any of the schema fields orch may send.
fn has_schema(req: &Recorded) -> bool {
    [
        "response_format",
        "json_schema",
        "structured_outputs",
        "guided_json",
    ]
    .iter()
    .any(|k| req.body.get(k).is_some())
}

#[test]
fn a_constrained_profile_sends_the_one_call_schema_and_its_json_reply_edits_the_lane() {
    let repo = repo(Some("tool_calling = \"constrained\""));
    let server = FakeServer::start(Script::new().agent("code", vec![write_solved(), finish()]));
    let (code, run_id) = run(&repo, &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 2);
    let record = record_dir(&repo, &run_id);
    let offered: Vec<String> = stage_events(&record, "code", "agent_start")[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect();
    assert!(offered.iter().any(|t| t == "finish"), "{offered:?}");
    for req in &reqs {
        // No `tools` array (nor `tool_choice`): the tools are in the prompt.
        assert!(req.body.get("tools").is_none(), "{}", req.body);
        assert!(req.body.get("tool_choice").is_none(), "{}", req.body);
        let system = req.messages()[0]["content"].as_str().unwrap();
        assert!(system.contains("## Calling tools"), "{system}");
        assert!(system.contains("- write_file: "), "{system}");
        // One entry per offered tool, each `{name: const, arguments: schema}`.
        let one_of = schema_of(req)["oneOf"].as_array().unwrap();
        let names: Vec<&str> = one_of
            .iter()
            .map(|e| e["properties"]["name"]["const"].as_str().unwrap())
            .collect();
        assert_eq!(names, offered, "one entry per offered tool, in order");
        for entry in one_of {
            assert_eq!(entry["required"], json!(["name", "arguments"]));
            assert_eq!(entry["additionalProperties"], false);
            assert_eq!(entry["properties"]["arguments"]["type"], "object");
        }
        let write = one_of
            .iter()
            .find(|e| e["properties"]["name"]["const"] == "write_file")
            .unwrap();
        let args = &write["properties"]["arguments"];
        assert!(args["properties"]["path"].is_object(), "{args}");
        assert!(args["properties"]["content"].is_object(), "{args}");
        let required = args["required"].as_array().unwrap();
        assert!(required.contains(&json!("path")) && required.contains(&json!("content")));
    }
    // The JSON reply ran as the call: the tool's result went back, the lane
    // changed, and the log has it as a call of the response, not recovered.
    let results = tool_results(&reqs[1]);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].contains("solution.py"), "{results:?}");
    let file = repo.git(&["show", &format!("orch/{run_id}/code:solution.py")]);
    assert_eq!(file, SOLVED);
    let state = state_json(&repo, &run_id);
    assert_eq!(
        stage_record(&state, "code")["summary"],
        "Implemented median."
    );
    let responses = stage_events(&record, "code", "response");
    assert_eq!(responses[0]["tool_calls"][0]["name"], "write_file");
    assert!(responses[0]["content"].is_null(), "{}", responses[0]);
    assert!(stage_events(&record, "code", "tool_calls_recovered").is_empty());
    let requests = stage_events(&record, "code", "request");
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r["tool_calls_constrained"] == true));
}

#[test]
fn auto_switches_to_constrained_after_a_turn_whose_call_came_as_text() {
    // No profile: the default, `auto`.
    let repo = repo(None);
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            // A bare JSON call as text: recovered, and the stage switches.
            write_solved(),
            finish(),
        ],
    ));
    let (code, run_id) = run(&repo, &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 2);
    assert!(!offered_tools(&reqs[0]).is_empty());
    assert!(!has_schema(&reqs[0]), "{}", reqs[0].body);
    assert!(reqs[1].body.get("tools").is_none(), "{}", reqs[1].body);
    assert_eq!(
        schema_of(&reqs[1])["oneOf"].as_array().unwrap().len(),
        offered_tools(&reqs[0]).len()
    );
    let record = record_dir(&repo, &run_id);
    let switches = stage_events(&record, "code", "tool_calling_switch");
    assert_eq!(switches.len(), 1, "{switches:?}");
    assert_eq!(switches[0]["turn"], 1);
    assert_eq!(switches[0]["from"], "native");
    assert_eq!(switches[0]["to"], "constrained");
    let requests = stage_events(&record, "code", "request");
    assert!(
        requests[0].get("tool_calls_constrained").is_none(),
        "{}",
        requests[0]
    );
    assert_eq!(requests[1]["tool_calls_constrained"], true);
    let file = repo.git(&["show", &format!("orch/{run_id}/code:solution.py")]);
    assert_eq!(file, SOLVED);
}

#[test]
fn a_native_profile_never_switches_and_sends_no_schema() {
    let repo = repo(Some("tool_calling = \"native\""));
    let server = FakeServer::start(Script::new().agent("code", vec![write_solved(), finish()]));
    let (code, run_id) = run(&repo, &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 2);
    for req in &reqs {
        assert!(!offered_tools(req).is_empty());
        assert!(!has_schema(req), "{}", req.body);
        let system = req.messages()[0]["content"].as_str().unwrap();
        assert!(!system.contains("## Calling tools"), "{system}");
    }
    let record = record_dir(&repo, &run_id);
    assert!(stage_events(&record, "code", "tool_calling_switch").is_empty());
    assert!(
        stage_events(&record, "code", "request")
            .iter()
            .all(|r| r.get("tool_calls_constrained").is_none())
    );
}

#[test]
fn a_constrained_reply_that_is_not_a_valid_call_is_answered_not_dropped() {
    let repo = repo(Some(
        "tool_calling = \"constrained\"\nconstrained_dialect = \"llamacpp\"",
    ));
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            // The right shape, arguments that do not fit: a tool error.
            json_call("write_file", json!({"path": "solution.py"})),
            // Not a call at all: the usual nudge.
            Reply::text("I will now write the file."),
            write_solved(),
            finish(),
        ],
    ));
    let (code, run_id) = run(&repo, &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 4);
    // llama.cpp's own field, at the top level.
    assert!(
        reqs[0].body["json_schema"]["oneOf"].is_array(),
        "{}",
        reqs[0].body
    );
    assert!(reqs[0].body.get("response_format").is_none());
    let results = tool_results(&reqs[1]);
    assert!(results[0].starts_with("error"), "{results:?}");
    assert!(results[0].contains("content"), "{results:?}");
    let record = record_dir(&repo, &run_id);
    assert_eq!(stage_events(&record, "code", "nudge").len(), 1);
    let last = reqs[2].messages().last().unwrap().clone();
    assert_eq!(last["role"], "user", "{last}");
}

#[test]
fn a_text_profile_sends_neither_tools_nor_schema_and_recovers_the_call() {
    let repo = repo(Some("tool_calling = \"text\""));
    let server = FakeServer::start(Script::new().agent("code", vec![write_solved(), finish()]));
    let (code, run_id) = run(&repo, &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    for req in &reqs {
        assert!(req.body.get("tools").is_none(), "{}", req.body);
        assert!(!has_schema(req), "{}", req.body);
        let system = req.messages()[0]["content"].as_str().unwrap();
        assert!(system.contains("- finish: "), "{system}");
    }
    let record = record_dir(&repo, &run_id);
    assert_eq!(
        stage_events(&record, "code", "tool_calls_recovered").len(),
        2
    );
    assert!(stage_events(&record, "code", "tool_calling_switch").is_empty());
    assert_eq!(
        stage_events(&record, "code", "request")[0]["tool_calls_as_text"],
        true
    );
    let file = repo.git(&["show", &format!("orch/{run_id}/code:solution.py")]);
    assert_eq!(file, SOLVED);
}

#[test]
fn a_roles_tool_calling_overrides_the_profiles() {
    // The profile says native; the role's front matter says constrained.
    let repo = repo(Some("tool_calling = \"native\""));
    repo.write(
        ".orch/roles/small.md",
        "---\nname: small\ndescription: A coder on a small model.\ntools: [read_file, write_file, finish]\ntool_calling: constrained\n---\nYou fix code.\n",
    );
    repo.commit_all("a small-model role");
    let dir = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        dir.path(),
        "solo",
        "stages:\n  code:\n    role: small\n    task: Fix it.\n",
    );
    let server = FakeServer::start(Script::new().agent("code", vec![write_solved(), finish()]));
    let (code, run_id) =
        crate::support::run_on_fake(&repo, &pipeline, crate::support::MEDIAN_ISSUE, &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert!(reqs[0].body.get("tools").is_none(), "{}", reqs[0].body);
    let names: Vec<&str> = schema_of(&reqs[0])["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["properties"]["name"]["const"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["read_file", "write_file", "finish"]);
    let file = repo.git(&["show", &format!("orch/{run_id}/code:solution.py")]);
    assert_eq!(file, SOLVED);
}

#[test]
fn a_server_that_refuses_the_schema_gets_the_turn_again_natively_after_an_auto_switch() {
    let repo = repo(None);
    let refusal = r#"{"error":{"code":400,"message":"'response_format' of type 'json_schema' is not supported","type":"invalid_request_error"}}"#;
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            write_solved(),
            Reply::Status(400, refusal.to_owned()),
            Reply::finish("f1", "Implemented median.", None),
        ],
    ));
    let (code, run_id) = run(&repo, &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 3);
    assert!(has_schema(&reqs[1]) && reqs[1].body.get("tools").is_none());
    // The refused turn again, natively, with the same conversation.
    assert!(!has_schema(&reqs[2]), "{}", reqs[2].body);
    assert!(!offered_tools(&reqs[2]).is_empty());
    // The system prompt without the tool catalogue again; the rest as sent.
    assert_eq!(reqs[2].messages()[0], reqs[0].messages()[0]);
    assert_eq!(reqs[2].messages()[1..], reqs[1].messages()[1..]);
    let record = record_dir(&repo, &run_id);
    let switches = stage_events(&record, "code", "tool_calling_switch");
    assert_eq!(switches.len(), 2, "{switches:?}");
    assert_eq!(
        (&switches[1]["from"], &switches[1]["to"]),
        (&json!("constrained"), &json!("native"))
    );
    assert_eq!(switches[1]["turn"], 2);
    assert!(switches[1]["reason"].as_str().unwrap().contains("HTTP 400"));
    let state = state_json(&repo, &run_id);
    assert_eq!(stage_record(&state, "code")["status"], "succeeded");
}

#[test]
fn a_constrained_model_finishing_without_a_change_is_told_once() {
    // A model set to constrained calls is one that does not call tools
    // natively: its `finish` with nothing changed is refused once (as for a
    // model that wrote its calls as text), then accepted and recorded.
    let repo = repo(Some("tool_calling = \"constrained\""));
    let server = FakeServer::start(Script::new().agent("code", vec![finish(), finish()]));
    let (code, run_id) = run(&repo, &server);
    // The second `finish` without a change is no result: exit 1.
    assert_eq!(code, 1);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 2, "told once only");
    // Told by the refused `finish` (in the record) and by orch's ask for
    // the whole file (tests/it/whole_file_ask.rs), the turn the model sees.
    let tools = stage_events(&record_dir(&repo, &run_id), "code", "tool");
    assert!(
        tools[0]["result"]
            .as_str()
            .unwrap()
            .contains("the task asks for a change; nothing in the lane changed"),
        "{tools:?}"
    );
    let ask = reqs[1].messages().last().unwrap()["content"].clone();
    assert!(
        ask.as_str()
            .unwrap()
            .contains("Nothing in the lane changed"),
        "{ask}"
    );
    let ends = stage_events(&record_dir(&repo, &run_id), "code", "stage_end");
    assert_eq!(ends[0]["no_change"], json!(true), "{}", ends[0]);
    assert_eq!(ends[0]["status"], "failed", "{}", ends[0]);
}

#[test]
fn auto_switches_to_constrained_after_prose_where_a_call_was_due() {
    // A call the model meant but wrote as invalid JSON (a raw `"""` inside a
    // string, as the 1.5B model does) is prose to orch: it is nudged, and
    // under `auto` the next turn asks under the schema, where the server
    // makes the JSON well-formed.
    let repo = repo(None);
    let broken = "```json\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"solution.py\", \"content\": \"def median(xs):\n    \"\"\" The median. \"\"\"\n\"}}\n```";
    let server = FakeServer::start(
        Script::new().agent("code", vec![Reply::text(broken), write_solved(), finish()]),
    );
    let (code, run_id) = run(&repo, &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert!(!has_schema(&reqs[0]), "{}", reqs[0].body);
    // Turn 2 answers orch's ask for solution.py's whole content (the task
    // names it; tests/it/whole_file_ask.rs): no tools in any form. The
    // model wrote its call again, as JSON, and it ran.
    assert!(!has_schema(&reqs[1]) && reqs[1].body.get("tools").is_none());
    schema_of(&reqs[2]);
    let record = record_dir(&repo, &run_id);
    assert_eq!(stage_events(&record, "code", "nudge").len(), 1);
    let switches = stage_events(&record, "code", "tool_calling_switch");
    assert_eq!(switches.len(), 1, "{switches:?}");
    assert_eq!(switches[0]["turn"], json!(1));
}

#[test]
fn a_model_switched_after_prose_that_finishes_without_a_change_is_told_once() {
    // Switched to constrained by a nudge (not by a recovered call), the
    // model is one that does not call tools natively: its `finish` with
    // nothing changed is refused once, as the 1.5B model's "Resolved the
    // issue" after it wrote nothing.
    let repo = repo(None);
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text("I will implement median now."),
            finish(),
            write_solved(),
            finish(),
        ],
    ));
    let (code, run_id) = run(&repo, &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 4);
    assert!(
        tool_results(&reqs[2])
            .iter()
            .any(|r| r.contains("nothing in the lane changed")),
        "{:?}",
        tool_results(&reqs[2])
    );
    let ends = stage_events(&record_dir(&repo, &run_id), "code", "stage_end");
    assert!(ends[0].get("no_change").is_none(), "{}", ends[0]);
    assert_eq!(ends[0]["files_changed"], json!(1), "{}", ends[0]);
}

#[test]
fn a_later_stage_of_the_run_starts_constrained_once_an_earlier_one_switched() {
    // The 1.5B model's reviewer and docs stages each spent their first
    // turn writing calls as text before switching (one docs turn ran to
    // max_tokens): the run remembers the model, and says so.
    let repo = repo(None);
    let server = FakeServer::start(
        Script::new()
            .agent("code", vec![write_solved(), finish()])
            .agent(
                "review",
                vec![json_call(
                    "finish",
                    json!({"summary": "It sorts first.", "verdict": "approve"}),
                )],
            ),
    );
    let dir = tempfile::tempdir().unwrap();
    let pipeline = crate::support::write_pipeline(
        dir.path(),
        "two",
        "stages:\n  code:\n    role: coder\n    task: Fix it.\n  review:\n    role: reviewer\n    needs: [code]\n",
    );
    let (code, run_id) =
        crate::support::run_on_fake(&repo, &pipeline, crate::support::MEDIAN_ISSUE, &server);
    assert_eq!(code, 0);
    let review = server.requests_for("review");
    assert_eq!(review.len(), 1);
    schema_of(&review[0]);
    let record = record_dir(&repo, &run_id);
    let switches = stage_events(&record, "review", "tool_calling_switch");
    assert_eq!(switches.len(), 1, "{switches:?}");
    assert_eq!(
        (&switches[0]["turn"], &switches[0]["to"]),
        (&json!(1), &json!("constrained"))
    );
    assert!(
        switches[0]["reason"]
            .as_str()
            .unwrap()
            .contains("an earlier agent of this run found that"),
        "{switches:?}"
    );
    let state = crate::support::state_json(&repo, &run_id);
    assert_eq!(
        crate::support::stage_record(&state, "review")["verdict"],
        "approve"
    );
}
