//! `provider = "openai-responses"` through the real binary, against the fake
//! server's Responses mode: what the requests carry (instructions, input
//! items, flat tools, `tool_choice`, `max_output_tokens`, `store: false`,
//! nothing that changes from run to run), a tool-call turn and a text turn
//! streamed and not, an error of each class, a reply cut at the output
//! limit, and `orch run issue-to-pr` end to end giving the Chat Completions
//! run's stages, trees and outcomes, replayed offline by `orch replay`.

use crate::support::fake_server::{chat_view, incomplete_reply};
use crate::support::{
    FakeServer, OrchRun, Recorded, Reply, Script, TestRepo, assert_exit, offered_tools, orch,
    output_logged, stage_events, state_json, stdout_json, tool_results, user_text, write_issue,
};
use serde_json::{Value, json};

const PROVIDER: [&str; 2] = ["--provider", "openai-responses"];

fn calc_repo() -> TestRepo {
    TestRepo::with_commit(
        &[("calc.py", "def add(a, b):\n    return a - b\n")],
        "calc 0.1",
    )
}

/// `orch agent --role explore` on `repo` against `server` in Responses mode.
fn explore(server: &FakeServer, repo: &TestRepo, stream: bool) -> std::process::Output {
    let mut cmd = orch();
    cmd.current_dir(&repo.path)
        .env("ORCH_API_KEY", "sk-responses-test")
        .args(["agent", "--json", "--role", "explore", "--task"])
        .arg("Where is add defined?")
        .args(["--base-url", &server.base_url, "--model", "o4-mini"])
        .args(PROVIDER);
    if !stream {
        cmd.arg("--no-stream");
    }
    output_logged(&mut cmd)
}

fn result_of(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn tool_then_text() -> Vec<Reply> {
    vec![
        Reply::tool_call("e1", "grep", json!({"pattern": "def add"})).with_usage(120, 15),
        Reply::text("add() is defined in calc.py, line 1.").with_usage(180, 12),
    ]
}

#[test]
fn responses_a_tool_call_turn_and_a_text_turn_streamed_and_not() {
    let repo = calc_repo();
    let mut bodies: Vec<Vec<Value>> = Vec::new();
    for stream in [true, false] {
        let server = FakeServer::start(Script::new().agent("explore", tool_then_text()));
        let out = explore(&server, &repo, stream);
        assert_exit(&out, 0);
        let result = result_of(&out);
        // The reasoning item is not the answer.
        assert_eq!(
            result["report"], "add() is defined in calc.py, line 1.",
            "{result}"
        );
        // Usage read from `input_tokens` / `output_tokens`.
        assert_eq!(result["tokens"], json!({"prompt": 300, "completion": 27}));
        assert!(
            !out.stdout.is_empty()
                && !String::from_utf8_lossy(&out.stdout).contains("fake reasoning")
        );
        let reqs = server.requests_for("explore");
        assert_eq!(reqs.len(), 2);
        for r in &reqs {
            assert_eq!(r.path, "/v1/responses");
            assert_eq!(r.header("authorization"), Some("Bearer sk-responses-test"));
            assert_eq!(r.body["model"], "o4-mini");
            assert_eq!(r.body["store"], false);
            assert_eq!(r.body["max_output_tokens"], 4096);
            assert_eq!(r.body["tool_choice"], "auto");
            assert_eq!(r.body.get("stream").is_some(), stream, "{}", r.body);
            for gone in [
                "messages",
                "max_tokens",
                "stream_options",
                "previous_response_id",
                "seed",
            ] {
                assert!(r.body.get(gone).is_none(), "{gone} in {}", r.body);
            }
            assert!(
                r.body["instructions"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "the system prompt is the instructions"
            );
            // Tools are flat: {type, name, description, parameters}.
            for tool in r.body["tools"].as_array().unwrap() {
                assert_eq!(tool["type"], "function");
                assert!(tool.get("function").is_none(), "{tool}");
                assert!(
                    tool["name"].is_string() && tool["parameters"].is_object(),
                    "{tool}"
                );
            }
        }
        let input = reqs[1].body["input"].as_array().unwrap();
        assert_eq!(input[0]["type"], "message");
        assert_eq!(input[0]["role"], "user");
        assert!(
            input[0]["content"]
                .as_str()
                .unwrap()
                .contains("Where is add defined?")
        );
        assert_eq!(
            input[1],
            json!({"type": "function_call", "call_id": "e1", "name": "grep",
                   "arguments": "{\"pattern\":\"def add\"}"})
        );
        assert_eq!(input[2]["type"], "function_call_output");
        assert_eq!(input[2]["call_id"], "e1");
        assert!(
            input[2]["output"].as_str().unwrap().contains("def add"),
            "{}",
            input[2]
        );
        // The inspection helpers read a Responses request too.
        let view = chat_view(&reqs[1]);
        assert!(tool_results(&view)[0].contains("calc.py"));
        assert!(offered_tools(&view).iter().any(|t| t == "grep"));
        bodies.push(
            reqs.iter()
                .map(|r| {
                    let mut b = r.body.clone();
                    b.as_object_mut().unwrap().remove("stream");
                    b
                })
                .collect(),
        );
    }
    // Streamed or not, one run or the next: the same bytes (no timestamp,
    // no random id) but for `stream`.
    assert_eq!(bodies[0], bodies[1]);
}

#[test]
fn responses_tool_choice_required_is_sent_as_required() {
    let repo = calc_repo();
    let server = FakeServer::start(Script::new().agent(
        "explore",
        vec![Reply::finish("f1", "add() is in calc.py.", None)],
    ));
    let mut cmd = orch();
    cmd.current_dir(&repo.path)
        .args([
            "agent",
            "--json",
            "--role",
            "explore",
            "--task",
            "Where is add?",
        ])
        .args(["--base-url", &server.base_url, "--model", "m"])
        .args(PROVIDER)
        .args([
            "--tool-choice",
            "required",
            "--temperature",
            "0.3",
            "--seed",
            "7",
        ]);
    let out = output_logged(&mut cmd);
    assert_exit(&out, 0);
    let body = &server.requests_for("explore")[0].body;
    assert_eq!(body["tool_choice"], "required");
    assert_eq!(body["temperature"], 0.3);
    assert!(
        body.get("seed").is_none(),
        "the Responses API has no seed: {body}"
    );
}

#[test]
fn responses_a_profile_with_provider_openai_responses_speaks_it() {
    let server = FakeServer::start(Script::new().agent(
        "explore",
        vec![Reply::finish("f1", "add() is in calc.py.", None)],
    ));
    let repo = calc_repo();
    repo.write(
        ".orch/orch.toml",
        format!(
            "default_profile = \"o4\"\n\n[profiles.o4]\nprovider = \"openai-responses\"\nbase_url = \"{}\"\nmodel = \"o4-mini\"\ntool_choice = \"required\"\nmax_tokens = 0\n",
            server.base_url
        ),
    );
    repo.commit_all("profile");
    let mut cmd = orch();
    cmd.current_dir(&repo.path).args([
        "agent",
        "--json",
        "--role",
        "explore",
        "--task",
        "Where is add?",
    ]);
    let out = output_logged(&mut cmd);
    assert_exit(&out, 0);
    let reqs = server.requests_for("explore");
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, "/v1/responses");
    assert_eq!(reqs[0].body["model"], "o4-mini");
    assert_eq!(reqs[0].body["tool_choice"], "required");
    assert!(
        reqs[0].body.get("max_output_tokens").is_none(),
        "max_tokens = 0 sends no cap: {}",
        reqs[0].body
    );
}

#[test]
fn responses_a_429_with_retry_after_and_a_500_are_retried() {
    let repo = calc_repo();
    for stream in [true, false] {
        let server = FakeServer::start(Script::new().agent(
            "explore",
            vec![
                Reply::RetryAfter(429, 0),
                Reply::Status(
                    500,
                    json!({"error": {"message": "The server had an error", "type": "server_error"}})
                        .to_string(),
                ),
                Reply::text("add() is in calc.py."),
            ],
        ));
        let out = explore(&server, &repo, stream);
        assert_exit(&out, 0);
        assert_eq!(server.requests_for("explore").len(), 3);
        let reqs = server.requests_for("explore");
        assert_eq!(
            reqs[0].body["input"], reqs[2].body["input"],
            "the same turn re-sent"
        );
    }
}

/// `first` then a text answer, to `orch agent --role explore`: the exit
/// code, the requests made and the reason of a failure are checked.
fn after(repo: &TestRepo, first: Reply, stream: bool, exit: i32, requests: usize) -> String {
    let server = FakeServer::start(
        Script::new().agent("explore", vec![first, Reply::text("add() is in calc.py.")]),
    );
    let out = explore(&server, repo, stream);
    assert_exit(&out, exit);
    assert_eq!(server.requests_for("explore").len(), requests);
    result_of(&out)["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// One SSE event whose `event:` line is its type.
fn sse_event(e: Value) -> String {
    format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())
}

#[test]
fn responses_failed_and_error_events_in_a_stream_are_classified() {
    let repo = calc_repo();
    let failed = Reply::RawSse(vec![
        sse_event(
            json!({"type": "response.created", "response": {"status": "in_progress", "output": []}}),
        ),
        sse_event(
            json!({"type": "response.failed", "response": {"status": "failed",
            "error": {"code": "server_error", "message": "The model failed to generate a response."}}}),
        ),
    ]);
    let error = |code: &str, message: &str| {
        Reply::RawSse(vec![sse_event(
            json!({"type": "error", "code": code, "message": message, "param": null}),
        )])
    };
    // (reply, exit code, requests, what the failure says)
    let cases = [
        (failed, 0, 2, ""),
        (
            error("rate_limit_exceeded", "Rate limit reached for o4-mini"),
            0,
            2,
            "",
        ),
        (
            error(
                "context_length_exceeded",
                "Your input exceeds the context window of this model. Please adjust your input and try again.",
            ),
            3,
            1,
            "context",
        ),
        (
            error("invalid_prompt", "Invalid prompt: your prompt was flagged."),
            3,
            1,
            "Invalid prompt",
        ),
    ];
    for (reply, exit, requests, says) in cases {
        let reason = after(&repo, reply, true, exit, requests);
        assert!(reason.contains(says), "{says:?} in {reason}");
    }
}

#[test]
fn responses_a_subagent_speaks_responses_too() {
    let repo = calc_repo();
    let scratch = tempfile::tempdir().unwrap();
    let pipeline = crate::support::write_pipeline(
        scratch.path(),
        "solo",
        "stages:\n  code:\n    role: coder\n    task: \"{{ issue }}\"\n",
    );
    let issue = write_issue(
        scratch.path(),
        "# Look around\n\nFind where add is defined.\n",
    );
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    Reply::tool_call(
                        "s1",
                        "spawn_agent",
                        json!({"role": "explore", "task": "Where is add defined?"}),
                    ),
                    Reply::finish("c2", "The child reported.", None),
                ],
            )
            .agent(
                "code/explore-1",
                vec![Reply::finish("e1", "add is defined in calc.py:1.", None)],
            ),
    );
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "o4-mini")
        .json()
        .args(PROVIDER)
        .output();
    assert_exit(&out, 0);
    let child = server.requests_for("code/explore-1");
    assert_eq!(child.len(), 1);
    assert_eq!(
        child[0].path, "/v1/responses",
        "the child process speaks Responses"
    );
    assert_eq!(child[0].body["store"], false);
    let results = tool_results(&chat_view(&server.requests_for("code")[1]));
    assert!(
        results[0].contains("add is defined in calc.py:1."),
        "{results:?}"
    );
}

#[test]
fn responses_context_length_400_is_not_retried() {
    let repo = calc_repo();
    let body = json!({"error": {"message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
        "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}});
    for stream in [true, false] {
        let reason = after(&repo, Reply::Status(400, body.to_string()), stream, 3, 1);
        assert!(reason.contains("context window"), "{reason}");
    }
}

#[test]
fn responses_a_reply_cut_at_the_output_limit_is_length_and_nudged() {
    let repo = calc_repo();
    for stream in [true, false] {
        let server = FakeServer::start(Script::new().agent(
            "explore",
            vec![
                incomplete_reply("add() is defined in calc.py, li", stream),
                Reply::text("add() is defined in calc.py."),
            ],
        ));
        let out = explore(&server, &repo, stream);
        assert_exit(&out, 0);
        let reqs = server.requests_for("explore");
        assert_eq!(reqs.len(), 2);
        let nudge = user_text(&chat_view(&reqs[1]));
        assert!(
            nudge.contains("cut off at the output token limit"),
            "{nudge}"
        );
    }
}

// --- The acceptance: issue-to-pr end to end --------------------------------

const ISSUE: &str = "# add() subtracts\n\n`calc.add(2, 3)` returns -1; it should return 5.\n";

/// `reply` with usage whose prompt came `cache_read` tokens from the
/// server's prompt cache (`prompt_tokens_details.cached_tokens`; the
/// Responses mode says `input_tokens_details.cached_tokens`).
fn cached(reply: Reply, prompt: u64, completion: u64, cache_read: u64) -> Reply {
    match reply.with_usage(prompt, completion) {
        Reply::Message {
            message,
            usage: Some(mut usage),
        } => {
            usage["prompt_tokens_details"] = json!({"cached_tokens": cache_read});
            Reply::Message {
                message,
                usage: Some(usage),
            }
        }
        other => other,
    }
}

fn issue_to_pr_script() -> Script {
    Script::new()
        .agent(
            "code",
            vec![
                Reply::tool_call("c1", "read_file", json!({"path": "calc.py"})).with_usage(900, 40),
                cached(crate::support::fix_add("c2"), 1000, 30, 896),
                cached(
                    Reply::tool_call("c3", "bash", json!({"command": "cat calc.py"})),
                    1100,
                    20,
                    1000,
                ),
                cached(Reply::finish("c4", "add() now adds.", None), 1200, 10, 1024),
            ],
        )
        .agent(
            "review",
            vec![Reply::finish(
                "r1",
                "Please add a regression test for add(2, 3).",
                Some("request_changes"),
            )],
        )
        .agent(
            "code.r2",
            vec![
                Reply::tool_call(
                    "c1",
                    "write_file",
                    json!({"path": "tests/test_calc.py", "content": "from calc import add\nassert add(2, 3) == 5\n"}),
                ),
                Reply::finish("c2", "Added tests/test_calc.py.", None),
            ],
        )
        .agent(
            "review.r2",
            vec![Reply::finish("r1", "Fix and test look right.", Some("approve"))],
        )
        .agent(
            "docs",
            vec![
                Reply::tool_call(
                    "d1",
                    "write_file",
                    json!({"path": "CHANGELOG.md", "content": "- Fixed add().\n"}),
                ),
                Reply::finish("d2", "Wrote CHANGELOG.md.", None),
            ],
        )
}

/// What a run of issue-to-pr came to, without what differs by run id.
#[derive(Debug, PartialEq)]
struct Outcome {
    status: String,
    /// (stage, status, verdict, tree of its commit)
    stages: Vec<(String, String, Value, String)>,
    pr_tree: String,
    /// Tool results the coder's last request carried.
    code_results: Vec<String>,
    /// prompt, completion and cache-read tokens the coder's responses logged.
    code_tokens: Vec<(u64, u64, u64)>,
    /// Which agent sent each model request, in order.
    agents: Vec<String>,
}

fn run_issue_to_pr(extra: &[&str]) -> (TestRepo, FakeServer, String, Outcome) {
    let repo = TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            ("README.md", "# calc\n"),
        ],
        "calc 0.1",
    );
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let server = FakeServer::start(issue_to_pr_script());
    let out = OrchRun::new("issue-to-pr", &repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .json()
        .args(extra)
        .output();
    assert_exit(&out, 0);
    let j = stdout_json(&out);
    let run_id = j["run_id"].as_str().unwrap().to_owned();
    let tree = |rev: &str| {
        repo.git(&["rev-parse", &format!("{rev}^{{tree}}")])
            .trim()
            .to_owned()
    };
    let stages = j["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let id = s["id"].as_str().unwrap().to_owned();
            let commit = s["commit"].as_str().map(tree).unwrap_or_default();
            (
                id,
                s["status"].as_str().unwrap().to_owned(),
                s["verdict"].clone(),
                commit,
            )
        })
        .collect();
    let record = crate::support::record_dir(&repo, &run_id);
    let code_tokens = stage_events(&record, "code", "response")
        .iter()
        .map(|e| {
            (
                e["prompt_tokens"].as_u64().unwrap(),
                e["completion_tokens"].as_u64().unwrap(),
                e["cache_read_tokens"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let code = server.requests_for("code");
    let last: Recorded = chat_view(code.last().unwrap());
    let outcome = Outcome {
        status: j["status"].as_str().unwrap().to_owned(),
        stages,
        pr_tree: tree(&format!("orch/{run_id}/pr")),
        // Without the wall-clock time a bash result reports.
        code_results: tool_results(&last)
            .iter()
            .map(|r| {
                regex::Regex::new(r"\[exit (\d+), [0-9.]+s\]")
                    .unwrap()
                    .replace_all(r, "[exit $1]")
                    .into_owned()
            })
            .collect(),
        code_tokens,
        agents: server.requests().iter().map(|r| r.agent.clone()).collect(),
    };
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    (repo, server, run_id, outcome)
}

#[test]
fn responses_issue_to_pr_matches_the_chat_completions_run_and_replays_offline() {
    let (_chat_repo, chat_server, _, chat) = run_issue_to_pr(&[]);
    assert!(
        chat_server
            .requests()
            .iter()
            .all(|r| r.path == "/v1/chat/completions")
    );
    assert_eq!(chat.status, "succeeded");
    assert_eq!(
        chat.code_tokens,
        [
            (900, 40, 0),
            (1000, 30, 896),
            (1100, 20, 1000),
            (1200, 10, 1024)
        ]
    );
    for stream in [true, false] {
        let mut args = PROVIDER.to_vec();
        if !stream {
            args.push("--no-stream");
        }
        let (repo, server, run_id, outcome) = run_issue_to_pr(&args);
        let chat_streamed: Vec<bool> = chat_server
            .requests()
            .iter()
            .map(|r| r.body["stream"] == true)
            .collect();
        let requests = server.requests();
        assert_eq!(requests.len(), chat_streamed.len());
        for (r, chat_stream) in requests.iter().zip(chat_streamed) {
            // Streamed as the Chat Completions run streamed (the memory
            // distiller's request never is), or not at all with --no-stream.
            assert_eq!(
                (
                    r.path.as_str(),
                    &r.body["store"],
                    r.body.get("stream").is_some()
                ),
                ("/v1/responses", &json!(false), stream && chat_stream),
                "every model request went to /responses, stateless ({}): {}",
                r.agent,
                r.body
            );
        }
        assert_eq!(outcome, chat, "stream: {stream}");
        // The run record says which wire format the run spoke.
        let state = state_json(&repo, &run_id);
        assert!(
            state.to_string().contains("openai-responses"),
            "the run record names the provider"
        );

        // `orch replay` plays the recorded run again without a model.
        let requests = server.requests().len();
        let out = output_logged(
            orch()
                .args(["replay", &run_id, "--json", "--repo"])
                .arg(&repo.path),
        );
        assert_exit(&out, 0);
        let replayed = stdout_json(&out);
        assert_eq!(replayed["status"], "succeeded", "{replayed}");
        let replayed_id = replayed["run_id"].as_str().unwrap();
        assert_eq!(
            server.requests().len(),
            requests,
            "the replay calls no model"
        );
        let tree = |rev: String| {
            repo.git(&["rev-parse", &format!("{rev}^{{tree}}")])
                .trim()
                .to_owned()
        };
        assert_eq!(
            tree(format!("orch/{replayed_id}/pr")),
            outcome.pr_tree,
            "the replay reproduces the final tree"
        );
    }
}

#[test]
fn responses_a_dry_run_plans_without_a_request() {
    let repo = calc_repo();
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let server = FakeServer::start(issue_to_pr_script());
    let out = OrchRun::new("issue-to-pr", &repo)
        .issue(&issue)
        .model(&server.base_url, "o4-mini")
        .args(PROVIDER)
        .args(["--dry-run", "--json"])
        .output();
    assert_exit(&out, 0);
    let plan = stdout_json(&out);
    assert_eq!(plan["stages"][0]["id"], "code", "{plan}");
    assert!(
        server.requests().is_empty(),
        "a dry run sends no model request"
    );
}
