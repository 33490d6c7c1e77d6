//! No wasted round trips before the first request (issue 29, point 4): the
//! real `orch` binary against the scripted fake server, which records every
//! request's path and how many answers it had written before each one came.
//! The server's kind is learned from the preflight's `GET /models`; only
//! that kind's context-window probe is sent (both in parallel when the kind
//! is unknown); the answer is cached per base URL and model in the user's
//! cache dir, so a second run within the expiry sends no probe.

use crate::support::{
    FAKE_API_KEY, FakeServer, OrchRun, Reply, Script, TestRepo, record_dir, stage_events,
    stdout_json, write_issue, write_pipeline,
};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;
use std::time::Duration;

/// `orch run` of a one-stage pipeline (stage `work`, the coder) with model
/// `m`, the key in `ORCH_API_KEY` and the user's cache dir at `cache`.
fn run_solo(repo: &TestRepo, server: &FakeServer, cache: &Path) -> Output {
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# Add a note\n\nWrite NOTE.md.\n");
    let pipeline = write_pipeline(
        scratch.path(),
        "solo",
        "name: solo\nstages:\n  work:\n    role: coder\n    task: \"{{ issue }}\"\n",
    );
    let out = OrchRun::new(&pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .env("ORCH_API_KEY", FAKE_API_KEY)
        .env("XDG_CACHE_HOME", cache)
        .json()
        .output();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The coder's two turns of one run: write NOTE.md, finish.
pub(crate) fn two_turns() -> Vec<Reply> {
    vec![
        Reply::tool_call(
            "w1",
            "write_file",
            json!({"path": "NOTE.md", "content": "a note\n"}),
        ),
        Reply::finish("f1", "Wrote NOTE.md.", None),
    ]
}

/// A fake server scripted for `runs` runs of [`run_solo`], with `routes`.
fn server(runs: usize, routes: Vec<(&str, Reply)>, latency: Duration) -> FakeServer {
    let mut script = Script::new().latency(latency);
    for _ in 0..runs {
        script = script.agent("work", two_turns());
    }
    for (suffix, reply) in routes {
        script = script.route(suffix, reply);
    }
    FakeServer::start(script)
}

fn models(entries: Value) -> Reply {
    Reply::Raw(json!({"object": "list", "data": entries}).to_string())
}

fn props(n_ctx: u64) -> Reply {
    Reply::Raw(
        json!({"default_generation_settings": {"n_ctx": n_ctx}, "total_slots": 1}).to_string(),
    )
}

/// A llama.cpp server (by its list's `owned_by`) with a 4096-token window,
/// scripted for `runs` runs.
fn llama_cpp(runs: usize) -> FakeServer {
    let list = models(json!([{"id": "q.gguf", "owned_by": "llamacpp"}]));
    let routes = vec![("/v1/models", list), ("/props", props(4096))];
    server(runs, routes, Duration::ZERO)
}

/// The `context_window` events of stage `work` of the run `out` reported.
fn learned_windows(repo: &TestRepo, out: &Output) -> Vec<Value> {
    let run_id = stdout_json(out)["run_id"].as_str().unwrap().to_owned();
    stage_events(&record_dir(repo, &run_id), "work", "context_window")
}

fn used(events: &[Value]) -> Vec<u64> {
    events.iter().filter_map(|e| e["used"].as_u64()).collect()
}

#[test]
fn preflight_an_openai_like_server_gets_its_models_request_and_no_probe() {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let cache = tempfile::tempdir().unwrap();
    let server = server(
        1,
        vec![(
            "/v1/models",
            models(json!([{"id": "m", "object": "model", "owned_by": "openai"}])),
        )],
        Duration::ZERO,
    );
    let out = run_solo(&repo, &server, cache.path());
    // Before: /props, /v1/models again and /api/show, one after another.
    assert_eq!(server.side_paths(), ["/v1/models"]);
    assert!(learned_windows(&repo, &out).is_empty());
}

#[test]
fn preflight_a_vllm_servers_window_comes_from_its_model_list() {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let cache = tempfile::tempdir().unwrap();
    let server = server(
        1,
        vec![(
            "/v1/models",
            models(json!([{"id": "m", "owned_by": "vllm", "max_model_len": 8192}])),
        )],
        Duration::ZERO,
    );
    let out = run_solo(&repo, &server, cache.path());
    assert_eq!(server.side_paths(), ["/v1/models"], "nothing asked twice");
    assert_eq!(used(&learned_windows(&repo, &out)), [8192]);
}

#[test]
fn preflight_a_llama_cpp_server_gets_props_and_no_api_show() {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let cache = tempfile::tempdir().unwrap();
    // The `Server` header alone tells llama.cpp.
    let list = models(json!([{"id": "qwen.gguf", "object": "model"}]));
    let server = server(
        1,
        vec![
            (
                "/v1/models",
                Reply::WithHeader("Server".into(), "llama.cpp".into(), Box::new(list)),
            ),
            ("/props", props(4096)),
        ],
        Duration::ZERO,
    );
    let out = run_solo(&repo, &server, cache.path());
    assert_eq!(server.side_paths(), ["/v1/models", "/props"]);
    assert_eq!(server.count_path("/api/show"), 0);
    assert_eq!(used(&learned_windows(&repo, &out)), [4096]);
}

#[test]
fn preflight_an_ollama_server_gets_api_show_and_no_props() {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let cache = tempfile::tempdir().unwrap();
    let server = server(
        1,
        vec![
            (
                "/v1/models",
                models(json!([{"id": "m:latest", "object": "model", "owned_by": "library"}])),
            ),
            (
                "/api/show",
                Reply::Raw(json!({"parameters": "num_ctx 8192"}).to_string()),
            ),
        ],
        Duration::ZERO,
    );
    let out = run_solo(&repo, &server, cache.path());
    // Before: /props (404) and /v1/models again came first.
    assert_eq!(server.side_paths(), ["/v1/models", "/api/show"]);
    let show = &server.side_requests()[1];
    assert_eq!(show.body, json!({"model": "m"}));
    assert_eq!(used(&learned_windows(&repo, &out)), [8192]);
}

#[test]
fn preflight_a_server_of_unknown_kind_gets_its_probes_in_parallel() {
    // No /models: the kind cannot be told, so both probes go, together.
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let cache = tempfile::tempdir().unwrap();
    let server = server(1, vec![("/props", props(8192))], Duration::from_millis(300));
    let out = run_solo(&repo, &server, cache.path());
    let side = server.side_requests();
    let paths: Vec<&str> = side.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths.len(), 3, "{paths:?}");
    assert_eq!(paths[0], "/v1/models", "{paths:?}");
    let mut probes: Vec<&str> = paths[1..].to_vec();
    probes.sort_unstable();
    assert_eq!(
        probes,
        ["/api/show", "/props"],
        "/v1/models is not asked twice"
    );
    // Both probes came after the preflight's answer and before either of
    // theirs: in parallel, one round trip (before: one after another).
    let before: Vec<usize> = side.iter().map(|r| r.answered_before).collect();
    assert_eq!(before, [0, 1, 1], "answers written before each request");
    // The first chat request waits for none of them (its order against
    // their answers is asserted, with a slower `/props`, by
    // `preflight_the_first_request_does_not_wait_for_the_window_probe`).
    let first = &server.requests()[0];
    assert!(first.answered_before >= 1, "after the preflight's answer");
    assert_eq!(used(&learned_windows(&repo, &out)), [8192]);
}

/// Sets every entry of the cache file at `path` as learned at the epoch.
fn age_cache(path: &Path) {
    let mut file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for entry in file["entries"].as_array_mut().unwrap() {
        entry["learned"] = json!(0);
    }
    std::fs::write(path, file.to_string()).unwrap();
}

#[test]
fn preflight_a_second_run_within_the_expiry_sends_no_probe() {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let cache = tempfile::tempdir().unwrap();
    let server = llama_cpp(3);
    let first = run_solo(&repo, &server, cache.path());
    assert_eq!(used(&learned_windows(&repo, &first)), [4096]);
    assert_eq!(server.side_paths(), ["/v1/models", "/props"]);

    let second = run_solo(&repo, &server, cache.path());
    // Only the preflight: the window came from the cache, and was used.
    assert_eq!(
        server.side_paths(),
        ["/v1/models", "/props", "/v1/models"],
        "no probe within the expiry"
    );
    assert_eq!(used(&learned_windows(&repo, &second)), [4096]);
    let file = cache.path().join("orch").join("servers.json");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        !text.contains(FAKE_API_KEY),
        "the cache holds no key: {text}"
    );
    let entries: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(entries["entries"][0]["kind"], "llama.cpp", "{text}");
    assert_eq!(entries["entries"][0]["window"], 4096, "{text}");

    // Past the expiry the server is asked again.
    age_cache(&file);
    let third = run_solo(&repo, &server, cache.path());
    assert_eq!(server.count_path("/props"), 2, "{:?}", server.side_paths());
    assert_eq!(used(&learned_windows(&repo, &third)), [4096]);
}

#[test]
fn preflight_a_probe_without_an_answer_is_not_remembered() {
    // /props fails (a 5xx): "no window" is not cached, the next run asks.
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let cache = tempfile::tempdir().unwrap();
    let failing = Reply::Status(500, "busy".into());
    let server = server(2, vec![("/props", failing)], Duration::ZERO);
    run_solo(&repo, &server, cache.path());
    run_solo(&repo, &server, cache.path());
    assert_eq!(server.count_path("/props"), 2, "{:?}", server.side_paths());
    assert_eq!(
        server.count_path("/api/show"),
        2,
        "{:?}",
        server.side_paths()
    );
}

#[test]
fn preflight_a_corrupt_cache_is_ignored_with_a_warning_and_rewritten() {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let cache = tempfile::tempdir().unwrap();
    let file = cache.path().join("orch").join("servers.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "{\"format\": 1, \"entries\": [tru").unwrap();
    let server = llama_cpp(1);
    let out = run_solo(&repo, &server, cache.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: ignoring the model server cache")
            && stderr.contains(&file.display().to_string()),
        "{stderr}"
    );
    assert_eq!(server.side_paths(), ["/v1/models", "/props"]);
    assert_eq!(used(&learned_windows(&repo, &out)), [4096]);
    let rewritten: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(rewritten["entries"][0]["window"], 4096, "{rewritten}");
}

#[test]
fn preflight_a_subagent_asks_no_probe_its_parent_asked() {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let cache = tempfile::tempdir().unwrap();
    let server = FakeServer::start(
        Script::new()
            .route(
                "/v1/models",
                models(json!([{"id": "q.gguf", "owned_by": "llamacpp"}])),
            )
            .route("/props", props(4096))
            .agent(
                "work",
                vec![
                    Reply::tool_call(
                        "s1",
                        "spawn_agent",
                        json!({"role": "explore", "task": "What does README.md say?"}),
                    ),
                    Reply::finish("f1", "The child reported.", None),
                ],
            )
            .agent(
                "work/explore-1",
                vec![Reply::finish("e1", "README.md says: # app.", None)],
            ),
    );
    let out = run_solo(&repo, &server, cache.path());
    assert_eq!(stdout_json(&out)["status"], "succeeded");
    assert_eq!(
        server.requests_for("work/explore-1").len(),
        1,
        "the child ran"
    );
    // The child (no preflight of its own) found the parent's answer in the
    // cache: one probe for the whole run.
    assert_eq!(
        server.side_paths(),
        ["/v1/models", "/props"],
        "one probe for the whole run"
    );
}

/// A llama.cpp server with latency whose `/props` (a `n_ctx` window)
/// answers `slow` later than the rest, scripted for one coder stage that
/// reads `files` one by one, writes NOTE.md and finishes.
fn slow_props_server(n_ctx: u64, slow: Duration, files: &[String]) -> FakeServer {
    let mut turns: Vec<Reply> = files
        .iter()
        .enumerate()
        .map(|(i, path)| Reply::tool_call(&format!("r{i}"), "read_file", json!({ "path": path })))
        .collect();
    turns.extend(two_turns());
    let list = models(json!([{"id": "q.gguf", "owned_by": "llamacpp"}]));
    FakeServer::start(
        Script::new()
            .latency(Duration::from_millis(100))
            .route("/v1/models", list)
            .route("/props", Reply::Delayed(slow, Box::new(props(n_ctx))))
            .agent("work", turns),
    )
}

/// A repository with `n` files of about 0.75 KB each (distinct lines).
fn repo_of_files(n: usize) -> (TestRepo, Vec<String>) {
    let names: Vec<String> = (0..n).map(|i| format!("notes/f{i:02}.txt")).collect();
    let bodies: Vec<String> = (0..n)
        .map(|i| {
            (0..15)
                .map(|l| format!("file {i} line {l}: some words here\n"))
                .collect()
        })
        .collect();
    let mut files: Vec<(&str, &str)> = vec![("README.md", "# app\n")];
    files.extend(
        names
            .iter()
            .map(String::as_str)
            .zip(bodies.iter().map(String::as_str)),
    );
    (TestRepo::with_commit(&files, "init"), names)
}

#[test]
fn preflight_the_first_request_does_not_wait_for_the_window_probe() {
    // A first run against llama.cpp (nothing cached): the first request is
    // small, so it goes without the server's window; the window arrives
    // during the stage and compaction uses it from the next turn on.
    let (repo, files) = repo_of_files(16);
    let cache = tempfile::tempdir().unwrap();
    let server = slow_props_server(4096, Duration::from_secs(1), &files);
    let out = run_solo(&repo, &server, cache.path());
    assert_eq!(server.side_paths(), ["/v1/models", "/props"]);
    // The first chat request came after the preflight's answer and before
    // the probe's was written (before: after both, two round trips).
    let first = &server.requests()[0];
    assert_eq!(first.answered_before, 1, "only the preflight answered");
    let props_at = server.side_requests()[1].at;
    assert!(props_at <= first.at, "the probe was sent first");

    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let dir = record_dir(&repo, &run_id);
    // agent_start logs the window known then: the configured default's.
    let start = &stage_events(&dir, "work", "agent_start")[0];
    assert_eq!(start["compact_at_tokens"], 89600, "{start}");
    // The server's window is logged by the turn that first uses it.
    let learned = stage_events(&dir, "work", "context_window");
    assert_eq!(used(&learned), [4096], "{learned:?}");
    let from = learned[0]["turn"].as_u64().unwrap();
    assert!(from > 1, "learned while turn 1 was out: {learned:?}");
    // Compaction: never before it, at the server's window after it.
    let compactions = stage_events(&dir, "work", "compaction");
    assert!(!compactions.is_empty(), "the reads pass 0.7 × 4096 tokens");
    for c in &compactions {
        assert!(c["turn"].as_u64().unwrap() >= from, "{c}");
        assert_eq!(c["context_window"], 4096, "{c}");
        assert_eq!(c["trigger_tokens"], 2867, "{c}");
    }
}
