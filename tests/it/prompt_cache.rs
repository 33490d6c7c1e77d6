//! Prompt caching end to end (issue 29): cached prompt tokens a server
//! reports are kept per turn in the action log, priced at the cache rate by
//! the cost, `--max-cost` and the run's ledger, and shown as the cache hit
//! share per stage by `orch show` and the PR's provenance table. The
//! byte-prefix property of requests across turns is in
//! `prompt_cache_prefix.rs`.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, record_dir, stage_events, state_json,
    stdout_json, write_issue, write_pipeline,
};
use serde_json::json;

/// Per turn: prompt tokens, of them cached, completion tokens. A coder
/// stage on `gpt-4o-mini` (built-in price: $0.15 prompt, $0.075 cached
/// input, $0.60 completion per 1M tokens) whose prefix the server caches
/// from turn 2 on, as OpenAI does on Chat Completions.
const TURNS: [(u64, u64, u64); 4] = [
    (100_000, 0, 500),
    (110_000, 99_840, 400),
    (120_000, 109_824, 300),
    (130_000, 119_808, 100),
];

/// The cost of `turns` by hand at gpt-4o-mini's published rates.
fn by_hand(turns: &[(u64, u64, u64)]) -> f64 {
    turns
        .iter()
        .map(|&(prompt, cached, completion)| {
            ((prompt - cached) as f64 * 0.15 + cached as f64 * 0.075 + completion as f64 * 0.60)
                / 1e6
        })
        .sum()
}

/// A Chat Completions reply whose usage reports `cached` of its `prompt`
/// tokens read from the cache (`prompt_tokens_details.cached_tokens`).
fn cached_reply(reply: Reply, (prompt, cached, completion): (u64, u64, u64)) -> Reply {
    let Reply::Message { message, .. } = reply else {
        unreachable!("a message reply")
    };
    Reply::Message {
        message,
        usage: Some(json!({
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        })),
    }
}

fn script() -> Script {
    let write = |i: usize| {
        Reply::tool_call(
            &format!("c{i}"),
            "write_file",
            json!({"path": format!("f{i}.txt"), "content": "x\n"}),
        )
    };
    Script::new().agent(
        "work",
        vec![
            cached_reply(write(1), TURNS[0]),
            cached_reply(write(2), TURNS[1]),
            cached_reply(write(3), TURNS[2]),
            cached_reply(Reply::finish("c4", "wrote three files", None), TURNS[3]),
        ],
    )
}

#[test]
fn a_recorded_session_with_cache_reads_shows_its_hit_share_and_the_cost_by_hand() {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# Busy work\n\nWrite files.\n");
    let pipeline = write_pipeline(
        scratch.path(),
        "solo",
        "name: solo\nstages:\n  work:\n    role: coder\n    task: \"{{ issue }}\"\n",
    );
    let server = FakeServer::start(script());
    // Between the cost with the cache ($0.0451) and the cost of the same
    // tokens all billed at the full prompt rate ($0.0502 after turn 3): a
    // budget that ignored the cache would stop the stage after turn 3.
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "gpt-4o-mini")
        .json()
        .args(["--max-cost", "0.046"])
        .output();
    let j = stdout_json(&out);
    assert_eq!(out.status.code(), Some(0), "{j}");
    let run_id = j["run_id"].as_str().unwrap().to_owned();
    assert_eq!(server.requests_for("work").len(), 4);

    let want = by_hand(&TURNS);
    assert!((want - 0.0450696).abs() < 1e-12, "{want}");
    let full_rate = by_hand(&TURNS.map(|(p, _, c)| (p, 0, c))[..3]);
    assert!(
        full_rate > 0.046,
        "the budget would stop a cache-blind count"
    );

    // The record: the stage's tokens with the cache reads, its cost priced
    // at the cache rate.
    let st = state_json(&repo, &run_id);
    let stage = &st["stages"][0];
    assert_eq!(stage["tokens"]["prompt"], 460_000, "{stage}");
    assert_eq!(stage["tokens"]["cache_read"], 329_472, "{stage}");
    assert!(stage["tokens"].get("cache_write").is_none(), "{stage}");
    let cost = stage["budget"]["used"]["cost_usd"].as_f64().unwrap();
    assert!((cost - want).abs() < 1e-12, "{cost} vs {want}");

    // The action log: each turn's cache reads, absent when there were none.
    let responses = stage_events(&record_dir(&repo, &run_id), "work", "response");
    let cached: Vec<Option<u64>> = responses
        .iter()
        .map(|r| r.get("cache_read_tokens").map(|v| v.as_u64().unwrap()))
        .collect();
    assert_eq!(
        cached,
        vec![None, Some(99_840), Some(109_824), Some(119_808)]
    );
    assert!(
        responses
            .iter()
            .all(|r| r.get("cache_write_tokens").is_none())
    );

    // `orch show`: the hit share per stage and in the run's line, and the
    // cost by hand.
    let show = orch_show(&repo, &run_id);
    assert!(
        show.contains(
            "tokens 461300 (prompt 460000, completion 1300, cache read 329472 (71.6% of prompt)), cost $0.0451"
        ),
        "{show}"
    );
    let header = show.lines().find(|l| l.starts_with("stage ")).unwrap();
    let row = show.lines().find(|l| l.starts_with("work ")).unwrap();
    let col = header
        .split_whitespace()
        .position(|c| c == "cache")
        .unwrap();
    assert_eq!(row.split_whitespace().nth(col), Some("71.6%"), "{show}");

    // The PR's provenance table.
    let pr = std::fs::read_to_string(record_dir(&repo, &run_id).join("pr.md")).unwrap();
    assert!(
        pr.contains("| stage | role | model | verdict | verify | tokens | cache hit | cost |"),
        "{pr}"
    );
    assert!(pr.contains("| 461300 | 71.6% | $0.0451 |"), "{pr}");
}

#[test]
fn a_price_override_with_cache_rates_prices_the_cached_tokens() {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    // The repository's orch.toml prices the model, cache read included.
    repo.write(
        ".orch/orch.toml",
        "[prices.\"my-model\"]\nprompt = 2\ncompletion = 4\ncache_read = 0.5\n",
    );
    repo.commit_all("price");
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# Busy work\n\nWrite files.\n");
    let pipeline = write_pipeline(
        scratch.path(),
        "solo",
        "name: solo\nstages:\n  work:\n    role: coder\n    task: \"{{ issue }}\"\n",
    );
    let server = FakeServer::start(script());
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "my-model")
        .json()
        .output();
    let j = stdout_json(&out);
    assert_eq!(out.status.code(), Some(0), "{j}");
    let st = state_json(&repo, j["run_id"].as_str().unwrap());
    let cost = st["stages"][0]["budget"]["used"]["cost_usd"]
        .as_f64()
        .unwrap();
    let want: f64 = TURNS
        .iter()
        .map(|&(p, c, o)| ((p - c) as f64 * 2.0 + c as f64 * 0.5 + o as f64 * 4.0) / 1e6)
        .sum();
    assert!((cost - want).abs() < 1e-12, "{cost} vs {want}");

    // A negative cache rate is a located error.
    repo.write(
        ".orch/orch.toml",
        "[prices.\"my-model\"]\nprompt = 2\ncompletion = 4\ncache_write = -1\n",
    );
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "my-model")
        .output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(".orch/orch.toml:") && err.contains("`cache_write` is -1"),
        "{err}"
    );
}

fn orch_show(repo: &TestRepo, run_id: &str) -> String {
    let out = crate::support::orch()
        .args(["show", run_id, "--repo"])
        .arg(&repo.path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    String::from_utf8(out.stdout).unwrap()
}

/// A plain completion as llama.cpp's server sends it: `usage` (an older
/// build: no `prompt_tokens_details`) and `timings`, where `cache_n` prompt
/// tokens were reused from the slot's cache and `prompt_n` evaluated.
fn llama_cpp_reply(call: (&str, &str, serde_json::Value), prompt: u64, cache_n: u64) -> Reply {
    let (id, name, args) = call;
    Reply::Raw(
        json!({
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [{"id": id, "type": "function",
                    "function": {"name": name, "arguments": args.to_string()}}]}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 10, "total_tokens": prompt + 10},
            "timings": {"cache_n": cache_n, "prompt_n": prompt - cache_n,
                "prompt_ms": 1000.0, "predicted_n": 10, "predicted_ms": 500.0},
        })
        .to_string(),
    )
}

fn llama_cpp_script() -> Script {
    Script::new().agent(
        "work",
        vec![
            llama_cpp_reply(
                (
                    "c1",
                    "write_file",
                    json!({"path": "f1.txt", "content": "x\n"}),
                ),
                500,
                0,
            ),
            llama_cpp_reply(("c2", "finish", json!({"summary": "wrote f1"})), 560, 540),
        ],
    )
}

fn solo(
    repo: &TestRepo,
    server: &FakeServer,
) -> (serde_json::Value, Vec<crate::support::Recorded>) {
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# Busy work\n\nWrite files.\n");
    let pipeline = write_pipeline(
        scratch.path(),
        "solo",
        "name: solo\nstages:\n  work:\n    role: coder\n    task: \"{{ issue }}\"\n",
    );
    let out = OrchRun::new(&pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "qwen")
        .json()
        .output();
    let j = stdout_json(&out);
    assert_eq!(out.status.code(), Some(0), "{j}");
    (j, server.requests_for("work"))
}

#[test]
fn a_llama_cpp_server_is_asked_to_keep_its_prompt_cache_and_its_reuse_is_counted() {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let server = FakeServer::start(llama_cpp_script());
    let (j, requests) = solo(&repo, &server);
    // Turn 1 knows nothing of the server; its reply's `timings` say
    // llama.cpp, so turn 2 asks it to keep the slot's cache.
    assert_eq!(requests[0].body.get("cache_prompt"), None);
    assert_eq!(requests[1].body["cache_prompt"], json!(true));
    // Its reuse is the turn's cache reads.
    let run_id = j["run_id"].as_str().unwrap();
    let responses = stage_events(&record_dir(&repo, run_id), "work", "response");
    assert_eq!(responses[0].get("cache_read_tokens"), None);
    assert_eq!(responses[1]["cache_read_tokens"], 540);
    let show = orch_show(&repo, run_id);
    assert!(show.contains("cache read 540 (50.9% of prompt)"), "{show}");

    // A profile that names llama.cpp's dialect asks from turn 1 on.
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let server = FakeServer::start(llama_cpp_script());
    repo.write(
        ".orch/orch.toml",
        "default_profile = \"local\"\n[profiles.local]\nconstrained_dialect = \"llamacpp\"\n",
    );
    repo.commit_all("profile");
    let (_, requests) = solo(&repo, &server);
    assert_eq!(requests[0].body["cache_prompt"], json!(true));
}

#[test]
fn other_servers_get_no_cache_prompt() {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let server = FakeServer::start(script());
    let (_, requests) = solo(&repo, &server);
    assert_eq!(requests.len(), 4);
    for r in &requests {
        assert!(
            !String::from_utf8_lossy(&r.raw).contains("cache_prompt"),
            "{:?}",
            r.body
        );
    }
}
