//! The `provider` setting and the native Anthropic Messages adapter, through
//! the real binary: configuration and its errors, then requests and replies
//! against the fake server's Anthropic mode (`support/fake_server/anthropic.rs`).

use crate::support::{TestRepo, orch, run_text};
use serde_json::Value;

fn config_json(
    repo: &TestRepo,
    env: &[(&str, &str)],
    args: &[&str],
) -> (Option<i32>, String, String) {
    let mut cmd = orch();
    cmd.current_dir(&repo.path).arg("config").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_text(&mut cmd)
}

#[test]
fn provider_is_a_profile_key_and_a_flag_shown_by_orch_config() {
    let repo = TestRepo::new();
    repo.write(
        ".orch/orch.toml",
        "default_profile = \"claude\"\n\n[profiles.claude]\nprovider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\n",
    );
    repo.commit_all("init");

    // The profile's provider, Anthropic's default base URL and key variable.
    let (code, out, err) = config_json(
        &repo,
        &[("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")],
        &["--json"],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["provider"]["value"], "anthropic", "{v}");
    assert!(
        v["provider"]["source"]
            .as_str()
            .unwrap()
            .ends_with(".orch/orch.toml:4"),
        "{v}"
    );
    assert_eq!(v["base_url"]["value"], "https://api.anthropic.com", "{v}");
    assert_eq!(v["base_url"]["source"], "default", "{v}");
    assert_eq!(v["api_key"]["source"], "env ANTHROPIC_API_KEY", "{v}");

    // ANTHROPIC_BASE_URL is honoured; the flag wins over the profile.
    let (code, out, err) = config_json(
        &repo,
        &[("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")],
        &["--json", "--provider", "openai-chat"],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["provider"]["value"], "openai-chat", "{v}");
    assert_eq!(v["provider"]["source"], "flag --provider", "{v}");
    assert_eq!(
        v["base_url"],
        Value::Null,
        "no Anthropic default for openai-chat: {v}"
    );
    let (code, out, err) = config_json(&repo, &[("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("provider") && out.contains("anthropic"),
        "{out}"
    );
    assert!(
        out.contains("http://127.0.0.1:9") && out.contains("env ANTHROPIC_BASE_URL"),
        "{out}"
    );

    // An unknown value is invalid input: exit 2, naming the value and where.
    let (code, out, err) = config_json(&repo, &[], &["--provider", "claude"]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains("flag --provider") && err.contains("unknown provider `claude`"),
        "{err}"
    );
    assert!(
        err.contains("`anthropic`"),
        "the accepted values are listed: {err}"
    );
    repo.write(
        ".orch/orch.toml",
        "default_profile = \"claude\"\n\n[profiles.claude]\nprovider = \"antropic\"\nmodel = \"m\"\n",
    );
    let (code, out, err) = config_json(&repo, &[], &[]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains("orch.toml:4") && err.contains("unknown provider `antropic`"),
        "{err}"
    );
}

// ---- requests and replies against the fake server's Anthropic mode ----

use crate::support::{
    FAKE_API_KEY, FakeServer, OrchRun, Recorded, Reply, Script, fix_add, only_run_id,
    output_logged, record_dir, stage_events, stage_record, state_json, stdout_json, write_issue,
    write_pipeline,
};
use serde_json::json;

const ISSUE: &str = "# add() subtracts\n\n`calc.add(2, 3)` returns -1; it should return 5.\n";

fn calc_repo() -> TestRepo {
    TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            ("README.md", "# calc\n"),
        ],
        "calc 0.1",
    )
}

/// Runs a one-stage pipeline (`code`, of `role`) on `repo` against
/// `server` speaking Anthropic Messages; `extra` flags are appended. The
/// exit code and the run id.
fn run_solo(repo: &TestRepo, server: &FakeServer, role: &str, extra: &[&str]) -> (i32, String) {
    let scratch = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        scratch.path(),
        "solo",
        &format!("stages:\n  code:\n    role: {role}\n    task: Fix it.\n"),
    );
    let issue = write_issue(scratch.path(), ISSUE);
    let out = OrchRun::new(&pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "claude-sonnet-4-5")
        .args(["--provider", "anthropic"])
        .args(extra)
        .env("ORCH_API_KEY", FAKE_API_KEY)
        .env("ORCH_RETRY_BASE_MS", "1")
        .output();
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    (out.status.code().unwrap_or(-1), only_run_id(&repo.path))
}

/// A Messages `error` body.
fn api_error(kind: &str, message: &str) -> String {
    json!({"type": "error", "error": {"type": kind, "message": message}}).to_string()
}

/// Asserts `r` went to the Messages endpoint with Anthropic's headers only.
fn assert_messages_request(r: &Recorded) {
    assert_eq!(r.path, "/v1/messages", "{}", r.path);
    assert_eq!(r.header("x-api-key"), Some(FAKE_API_KEY));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.header("authorization"), None, "no Bearer header");
}

#[test]
fn anthropic_tool_use_and_text_turns_streamed_and_not() {
    for stream in [true, false] {
        let repo = calc_repo();
        let server = FakeServer::start(Script::new().agent(
            "code",
            vec![
                Reply::Message {
                    message: json!({"role": "assistant", "content": "Reading it.", "tool_calls": [
                        {"id": "toolu_01", "type": "function",
                         "function": {"name": "read_file", "arguments": "{\"path\":\"calc.py\"}"}}]}),
                    usage: Some(json!({"input_tokens": 100, "cache_read_input_tokens": 1000,
                        "cache_creation_input_tokens": 400, "output_tokens": 20})),
                },
                Reply::text("add() in calc.py:2 subtracts b from a."),
            ],
        ));
        let extra: &[&str] = if stream { &[] } else { &["--no-stream"] };
        let (code, run_id) = run_solo(&repo, &server, "explore", extra);
        assert_eq!(code, 0, "stream {stream}");
        let reqs = server.requests_for("code");
        assert_eq!(reqs.len(), 2);
        for r in &reqs {
            assert_messages_request(r);
            assert_eq!(
                r.body["stream"].as_bool().unwrap_or(false),
                stream,
                "{}",
                r.body
            );
            assert_eq!(r.body["model"], "claude-sonnet-4-5");
            assert_eq!(r.body["max_tokens"], 4096);
            assert!(r.body["system"][0]["text"].as_str().unwrap().len() > 100);
            let tools = r.body["tools"].as_array().unwrap();
            assert!(
                tools.iter().all(|t| t["input_schema"]["type"] == "object"),
                "{tools:?}"
            );
            assert_eq!(r.body["tool_choice"], json!({"type": "auto"}));
        }
        // The answer to the call is a tool_result carrying the real file.
        let second = &reqs[1].body["messages"];
        assert_eq!(
            second[1]["content"],
            json!([{"type": "text", "text": "Reading it."},
                   {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {"path": "calc.py"}}])
        );
        let result = &second[2]["content"][0];
        assert_eq!(result["type"], "tool_result");
        assert_eq!(result["tool_use_id"], "toolu_01");
        assert!(
            result["content"].as_str().unwrap().contains("return a - b"),
            "{result}"
        );
        // Usage: Anthropic's input_tokens excludes the cached tokens.
        let record = record_dir(&repo, &run_id);
        let responses = stage_events(&record, "code", "response");
        assert_eq!(responses[0]["prompt_tokens"], 1500, "{:?}", responses[0]);
        assert_eq!(responses[0]["completion_tokens"], 20);
        assert_eq!(responses[0]["finish_reason"], "tool_calls");
        assert_eq!(responses[1]["finish_reason"], "stop");
        let state = state_json(&repo, &run_id);
        assert_eq!(stage_record(&state, "code")["status"], "succeeded");
    }
}

#[test]
fn anthropic_errors_are_classified_by_kind() {
    // Overloaded (529), then an answer: retried.
    let repo = calc_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::Status(529, api_error("overloaded_error", "Overloaded")),
            Reply::text("calc.py:2 subtracts."),
        ],
    ));
    let (code, _) = run_solo(&repo, &server, "explore", &["--no-stream"]);
    assert_eq!(code, 0);
    assert_eq!(server.requests_for("code").len(), 2, "retried once");

    // An overloaded_error inside a stream: retried.
    let repo = calc_repo();
    let start = json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant",
        "content": [], "usage": {"input_tokens": 5, "output_tokens": 1}}});
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::RawSse(vec![
                format!("event: message_start\ndata: {start}\n\n"),
                format!(
                    "event: error\ndata: {}\n\n",
                    api_error("overloaded_error", "Overloaded")
                ),
            ]),
            Reply::text("calc.py:2 subtracts."),
        ],
    ));
    let (code, _) = run_solo(&repo, &server, "explore", &[]);
    assert_eq!(code, 0);
    assert_eq!(server.requests_for("code").len(), 2);

    // A rate limit: retried after the server's retry-after.
    let repo = calc_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::RetryAfter(429, 1),
            Reply::text("calc.py:2 subtracts."),
        ],
    ));
    let (code, run_id) = run_solo(&repo, &server, "explore", &["--no-stream"]);
    assert_eq!(code, 0);
    let retries = stage_events(&record_dir(&repo, &run_id), "code", "retry");
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert_eq!(retries[0]["status"], 429);
    assert!(
        retries[0]["wait_ms"].as_u64().unwrap() >= 1000,
        "retry-after honoured: {retries:?}"
    );

    // A prompt too long: the context-length error, not retried by the
    // client, with the window Anthropic names.
    let repo = calc_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::Status(
            400,
            api_error(
                "invalid_request_error",
                "prompt is too long: 250123 tokens > 200000 maximum",
            ),
        )],
    ));
    let (code, run_id) = run_solo(&repo, &server, "explore", &["--no-stream"]);
    assert_ne!(code, 0);
    assert_eq!(server.requests_for("code").len(), 1);
    let state = state_json(&repo, &run_id);
    let reason = stage_record(&state, "code")["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        reason.contains("context window of 200000 tokens"),
        "{reason}"
    );

    // A bad key: no retry, and the message names Anthropic's variable.
    let repo = calc_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::Status(
            401,
            api_error("authentication_error", "invalid x-api-key"),
        )],
    ));
    let (code, run_id) = run_solo(&repo, &server, "explore", &["--no-stream"]);
    assert_ne!(code, 0);
    assert_eq!(server.requests_for("code").len(), 1);
    let state = state_json(&repo, &run_id);
    let reason = stage_record(&state, "code")["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        reason.contains("ANTHROPIC_API_KEY") && reason.contains("HTTP 401"),
        "{reason}"
    );
}

#[test]
fn anthropic_reply_cut_at_the_output_limit_is_nudged_then_fails() {
    let plain = |text: &str| {
        Reply::Raw(
            json!({"id": "msg", "type": "message", "role": "assistant",
                "content": [{"type": "text", "text": text}], "stop_reason": "max_tokens",
                "usage": {"input_tokens": 50, "output_tokens": 4096}})
            .to_string(),
        )
    };
    let streamed = |text: &str| {
        let events = [
            json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant",
                "content": [], "usage": {"input_tokens": 50, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 4096}}),
            json!({"type": "message_stop"}),
        ];
        Reply::RawSse(events.iter().map(|e| format!("data: {e}\n\n")).collect())
    };
    for stream in [false, true] {
        let repo = calc_repo();
        let cut = if stream { streamed } else { plain };
        let server = FakeServer::start(Script::new().agent(
            "code",
            vec![cut("I will now explain at len"), cut("Again I expl")],
        ));
        let extra: &[&str] = if stream { &[] } else { &["--no-stream"] };
        let (code, run_id) = run_solo(&repo, &server, "explore", extra);
        assert_eq!(code, 1, "stream {stream}");
        let reqs = server.requests_for("code");
        assert_eq!(reqs.len(), 2);
        let nudge = reqs[1].body["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .to_string();
        assert!(
            nudge.contains("cut off at the output token limit"),
            "{nudge}"
        );
        let state = state_json(&repo, &run_id);
        let reason = stage_record(&state, "code")["reason"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(reason.contains("finish_reason: length"), "{reason}");
    }
}

fn write_call(id: &str, path: &str, content: &str) -> Reply {
    Reply::tool_call(id, "write_file", json!({"path": path, "content": content}))
}

/// The issue-to-pr script with a review round trip (request_changes, then
/// approve), as the Chat Completions tests script it.
fn issue_to_pr_script() -> Script {
    Script::new()
        .agent(
            "code",
            vec![fix_add("c1"), Reply::finish("c2", "add() now adds.", None)],
        )
        .agent(
            "review",
            vec![Reply::finish("r1", "Add a test.", Some("request_changes"))],
        )
        .agent(
            "code.r2",
            vec![
                write_call(
                    "c1",
                    "test_calc.py",
                    "from calc import add\nassert add(2, 3) == 5\n",
                ),
                Reply::finish("c2", "Added a test.", None),
            ],
        )
        .agent(
            "review.r2",
            vec![Reply::finish("r1", "Looks right.", Some("approve"))],
        )
        .agent(
            "docs",
            vec![
                write_call("d1", "CHANGELOG.md", "- Fixed add().\n"),
                Reply::finish("d2", "Wrote the changelog.", None),
            ],
        )
}

/// What a run did: each stage's id and status, the PR branch's tree and
/// its commit subjects (oldest first).
#[derive(Debug, PartialEq)]
struct Outcome {
    stages: Vec<(String, String)>,
    tree: String,
    subjects: Vec<String>,
}

fn outcome_of(repo: &TestRepo, run_id: &str) -> Outcome {
    let state = state_json(repo, run_id);
    let stages = state["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let pr = format!("orch/{run_id}/pr");
    let branches = repo.git(&[
        "for-each-ref",
        "--format=%(refname:short)",
        "refs/heads/orch/",
    ]);
    let pr = branches
        .lines()
        .find(|b| b.ends_with("/pr") && b.contains(run_id))
        .unwrap_or_else(|| panic!("no PR branch {pr} in {branches}"))
        .to_owned();
    let tree = repo
        .git(&["rev-parse", &format!("{pr}^{{tree}}")])
        .trim()
        .to_owned();
    let subjects = repo
        .git(&["log", "--reverse", "--format=%s", &format!("main..{pr}")])
        .lines()
        .map(str::to_owned)
        .collect();
    Outcome {
        stages,
        tree,
        subjects,
    }
}

/// `orch run issue-to-pr` against a fresh fake server; provider flags in `extra`.
fn issue_to_pr(extra: &[&str]) -> (TestRepo, FakeServer, String) {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "calc");
    let server = FakeServer::start(issue_to_pr_script());
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# add() subtracts\n\nFix it.\n");
    let out = OrchRun::new("issue-to-pr", &repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .env("ORCH_API_KEY", FAKE_API_KEY)
        .json()
        .args(extra)
        .output();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{extra:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    (repo, server, run_id)
}

/// `orch replay RUN --export` and the printed command run offline: the
/// same tree, and no request to the server.
fn replays_offline(repo: &TestRepo, server: &FakeServer, run_id: &str, tree: &str) {
    let requests = server.requests().len();
    let elsewhere = tempfile::tempdir().unwrap();
    let out = output_logged(
        orch()
            .current_dir(elsewhere.path())
            .args(["replay", run_id, "--export", "run.replay.json", "--repo"])
            .arg(&repo.path),
    );
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let hint = stdout
        .split_once("play it with: ")
        .map(|(_, h)| h.trim().to_owned())
        .unwrap_or_else(|| panic!("a command to play it: {stdout}"));
    let mut sh = crate::support::orch_shell(&hint, elsewhere.path());
    let out = output_logged(&mut sh);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the printed command runs: {hint}"
    );
    assert_eq!(
        server.requests().len(),
        requests,
        "the replay calls no model"
    );
    let trees: Vec<String> = repo
        .git(&[
            "for-each-ref",
            "--format=%(refname:short)",
            "refs/heads/orch/*/pr",
        ])
        .lines()
        .map(|b| {
            repo.git(&["rev-parse", &format!("{b}^{{tree}}")])
                .trim()
                .to_owned()
        })
        .collect();
    assert_eq!(trees.len(), 2, "{trees:?}");
    assert!(
        trees.iter().all(|t| t == tree),
        "the replay made the same tree: {trees:?}"
    );
}

#[test]
fn issue_to_pr_over_anthropic_matches_chat_completions_and_replays_offline() {
    let (repo, server, run_id) = issue_to_pr(&[]);
    let chat = outcome_of(&repo, &run_id);
    let agents = |s: &FakeServer| {
        s.requests()
            .iter()
            .map(|r| r.agent.clone())
            .collect::<Vec<_>>()
    };
    let chat_agents = agents(&server);
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.path == "/v1/chat/completions")
    );
    assert_eq!(chat.stages.len(), 7, "{chat:?}");
    for extra in [
        &["--provider", "anthropic"][..],
        &["--provider", "anthropic", "--no-stream"],
    ] {
        let (repo, server, run_id) = issue_to_pr(extra);
        let reqs = server.requests();
        assert_eq!(agents(&server), chat_agents, "{extra:?}");
        reqs.iter().for_each(assert_messages_request);
        let streamed = !extra.contains(&"--no-stream");
        let flags: Vec<(String, bool)> = reqs
            .iter()
            .map(|r| (r.agent.clone(), r.body["stream"].as_bool().unwrap_or(false)))
            .collect();
        // The memory distiller is not scripted: its 500s turn its
        // streaming off, as with Chat Completions.
        assert!(
            flags
                .iter()
                .filter(|(a, _)| !a.ends_with("/distill"))
                .all(|(_, s)| *s == streamed),
            "{flags:?}"
        );
        let outcome = outcome_of(&repo, &run_id);
        assert_eq!(outcome, chat, "{extra:?}");
        replays_offline(&repo, &server, &run_id, &outcome.tree);
        // The run recorded its provider, for `orch resume`.
        let state = state_json(&repo, &run_id);
        assert_eq!(
            state["settings"]["provider"], "anthropic",
            "{}",
            state["settings"]
        );
    }
}

/// Where a request's `cache_control` markers are: (last tool, system,
/// last message's last block), and how many there are in all.
fn breakpoints(r: &Recorded) -> ((bool, bool, bool), usize) {
    let b = &r.body;
    let marked = |v: &Value| v.get("cache_control") == Some(&json!({"type": "ephemeral"}));
    let tools = b["tools"]
        .as_array()
        .and_then(|t| t.last())
        .is_some_and(marked);
    let system = b["system"]
        .as_array()
        .and_then(|s| s.last())
        .is_some_and(marked);
    let last = b["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_array())
        .and_then(|c| c.last())
        .is_some_and(marked);
    (
        (tools, system, last),
        b.to_string().matches("cache_control").count(),
    )
}

/// Project instructions of about 4,000 bytes (~1,000 tokens), which every
/// stage's system prompt carries.
fn long_agents_md() -> String {
    (0..50)
        .map(|i| {
            format!("- Rule {i:02}: keep functions short, name things plainly, test each change.\n")
        })
        .collect()
}

#[test]
fn anthropic_cache_breakpoints_follow_the_rules_in_a_real_run() {
    let agents_md = long_agents_md();
    let repo = TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            ("AGENTS.md", agents_md.as_str()),
        ],
        "calc",
    );
    let server = FakeServer::start(issue_to_pr_script());
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# add() subtracts\n\nFix it.\n");
    let out = OrchRun::new("issue-to-pr", &repo)
        .issue(&issue)
        .model(&server.base_url, "claude-sonnet-4-5")
        .env("ORCH_API_KEY", FAKE_API_KEY)
        .args(["--provider", "anthropic"])
        .output();
    assert_eq!(out.status.code(), Some(0));
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let summary: Vec<(String, (bool, bool, bool), usize)> = server
        .requests()
        .iter()
        .map(|r| {
            let (at, n) = breakpoints(r);
            (r.agent.clone(), at, n)
        })
        .collect();
    let mut checked = 0;
    for (agent, at, n) in &summary {
        match agent.as_str() {
            // The reviewer's stages end within a turn or two: a cache
            // write would never be read back, so none is asked for.
            "review" | "review.r2" => assert_eq!(*n, 0, "{summary:?}"),
            // Past Sonnet's 1,024 tokens with the instructions: the system
            // prompt and the rolling last message are marked; the tools
            // alone (~400 tokens) are below the minimum.
            "code" | "code.r2" | "docs" => {
                assert_eq!(*at, (false, true, true), "{agent}: {summary:?}");
                assert_eq!(*n, 2, "{summary:?}");
            }
            _ => continue,
        }
        checked += 1;
    }
    assert_eq!(checked, 8, "{summary:?}");

    // The same prompt on a Haiku-class model is under its 2,048 tokens:
    // no breakpoint; on Sonnet it gets them.
    for (model, expect) in [("claude-haiku-4-5", 0), ("claude-sonnet-4-5", 2)] {
        let repo = TestRepo::with_commit(
            &[
                ("calc.py", "def add(a, b):\n    return a - b\n"),
                ("AGENTS.md", agents_md.as_str()),
            ],
            "calc",
        );
        let server = FakeServer::start(
            Script::new().agent("code", vec![Reply::text("calc.py:2 subtracts.")]),
        );
        let scratch = tempfile::tempdir().unwrap();
        let pipeline = write_pipeline(
            scratch.path(),
            "solo",
            "stages:\n  code:\n    role: explore\n    task: Fix it.\n",
        );
        let issue = write_issue(scratch.path(), ISSUE);
        let out = OrchRun::new(&pipeline, &repo)
            .issue(&issue)
            .model(&server.base_url, model)
            .args(["--provider", "anthropic", "--no-stream"])
            .env("ORCH_API_KEY", FAKE_API_KEY)
            .output();
        assert_eq!(out.status.code(), Some(0));
        let reqs = server.requests_for("code");
        let bytes = reqs[0].body.to_string().len();
        assert!((4 * 1024..4 * 2048).contains(&bytes), "{bytes}");
        assert_eq!(breakpoints(&reqs[0]).1, expect, "{model}: {}", reqs[0].body);
    }
}

#[test]
fn anthropic_dry_run_calls_no_model_and_names_the_provider() {
    let repo = calc_repo();
    let server = FakeServer::start(Script::new());
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let out = OrchRun::new("issue-to-pr", &repo)
        .issue(&issue)
        .model(&server.base_url, "claude-sonnet-4-5")
        .args(["--provider", "anthropic", "--dry-run", "--json"])
        .output();
    assert_eq!(out.status.code(), Some(0));
    let plan = stdout_json(&out);
    let label = plan["model"]["label"].as_str().unwrap();
    assert!(label.ends_with("(anthropic)"), "{label}");
    assert!(server.requests().is_empty() && server.side_requests().is_empty());
}

/// Per turn of a recorded Anthropic session: uncached input, cache reads,
/// cache writes, output tokens (Anthropic's own usage fields).
const CACHED_TURNS: [(u64, u64, u64, u64); 3] = [
    (200, 0, 5_000, 300),
    (150, 5_000, 400, 200),
    (100, 5_400, 300, 100),
];

#[test]
fn a_recorded_anthropic_session_with_cache_reads_costs_what_the_hand_count_says() {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let usage = |(input, read, write, output): (u64, u64, u64, u64)| {
        Some(
            json!({"input_tokens": input, "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write, "output_tokens": output}),
        )
    };
    let turn = |reply: Reply, t| match reply {
        Reply::Message { message, .. } => Reply::Message {
            message,
            usage: usage(t),
        },
        other => other,
    };
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            turn(write_call("c1", "a.txt", "a\n"), CACHED_TURNS[0]),
            turn(write_call("c2", "b.txt", "b\n"), CACHED_TURNS[1]),
            turn(Reply::finish("c3", "Wrote a and b.", None), CACHED_TURNS[2]),
        ],
    ));
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# Busy work\n\nWrite files.\n");
    let pipeline = write_pipeline(
        scratch.path(),
        "solo",
        "name: solo\nstages:\n  work:\n    role: coder\n    task: \"{{ issue }}\"\n",
    );
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "claude-sonnet-4-5")
        .env("ORCH_API_KEY", FAKE_API_KEY)
        .args(["--provider", "anthropic"])
        .json()
        .output();
    let j = stdout_json(&out);
    assert_eq!(out.status.code(), Some(0), "{j}");
    let run_id = j["run_id"].as_str().unwrap().to_owned();
    // By hand at claude-sonnet-4-5's prices per 1M tokens: $3 input,
    // $0.30 cache read, $3.75 cache write, $15 output.
    let want: f64 = CACHED_TURNS
        .iter()
        .map(|&(i, r, w, o)| {
            (i as f64 * 3.0 + r as f64 * 0.3 + w as f64 * 3.75 + o as f64 * 15.0) / 1e6
        })
        .sum();
    assert!((want - 0.034845).abs() < 1e-12, "{want}");
    let st = state_json(&repo, &run_id);
    let stage = &st["stages"][0];
    // Prompt tokens = input + cache reads + cache writes, per turn.
    assert_eq!(stage["tokens"]["prompt"], 16_550, "{stage}");
    assert_eq!(stage["tokens"]["cache_read"], 10_400, "{stage}");
    assert_eq!(stage["tokens"]["cache_write"], 5_700, "{stage}");
    let cost = stage["budget"]["used"]["cost_usd"].as_f64().unwrap();
    assert!((cost - want).abs() < 1e-12, "{cost} vs {want}");
    let out = orch()
        .args(["show", &run_id, "--repo"])
        .arg(&repo.path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let show = String::from_utf8(out.stdout).unwrap();
    // 10,400 of 16,550 prompt tokens read from the cache: 62.8%.
    assert!(
        show.contains("cache read 10400 (62.8% of prompt)"),
        "{show}"
    );
    assert!(show.contains("cost $0.0348"), "{show}");
}

#[test]
fn anthropic_reaches_subagents_and_the_models_api_window() {
    let repo = calc_repo();
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
            )
            .route(
                "/v1/models/claude-sonnet-4-5",
                Reply::Raw(
                    json!({"id": "claude-sonnet-4-5", "max_input_tokens": 150_000}).to_string(),
                ),
            ),
    );
    let (code, run_id) = run_solo(&repo, &server, "coder", &[]);
    assert_eq!(code, 0);
    // The child process spoke Messages too, with the key in x-api-key.
    let child = server.requests_for("code/explore-1");
    assert_eq!(child.len(), 1);
    assert_messages_request(&child[0]);
    let parent = server.requests_for("code");
    let result = parent[1].body["messages"][2]["content"][0].to_string();
    assert!(result.contains("calc.py:1"), "{result}");
    // The window the Models API gave, asked with Anthropic's headers.
    let probes: Vec<Recorded> = server
        .side_requests()
        .into_iter()
        .filter(|r| r.path == "/v1/models/claude-sonnet-4-5")
        .collect();
    assert!(!probes.is_empty());
    assert_eq!(probes[0].header("x-api-key"), Some(FAKE_API_KEY));
    assert_eq!(probes[0].header("anthropic-version"), Some("2023-06-01"));
    let windows = stage_events(&record_dir(&repo, &run_id), "code", "context_window");
    assert_eq!(windows[0]["tokens"], 150_000, "{windows:?}");
    assert_eq!(
        windows[0]["configured"], 200_000,
        "Claude's table window: {windows:?}"
    );
}
