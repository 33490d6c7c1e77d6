//! Budgets and compaction end to end: the real `orch` binary against the
//! scripted fake model server, on real git repositories.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, record_dir, stage_events, state_json,
    stdout_json, write_issue, write_pipeline,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

const ISSUE: &str = "# Busy work\n\nKeep reading files.\n";

fn small_repo() -> TestRepo {
    TestRepo::with_commit(&[("README.md", "# app\n")], "init")
}

/// A scratch dir holding the issue and a one-stage pipeline `solo` whose
/// stage `work` runs the coder, with extra stage keys (indented by four
/// spaces) appended.
struct Solo {
    _scratch: tempfile::TempDir,
    issue: PathBuf,
    pipeline: PathBuf,
}

impl Solo {
    fn new(max_turns: u32, extra: &str) -> Solo {
        let scratch = tempfile::tempdir().unwrap();
        let issue = write_issue(scratch.path(), ISSUE);
        let pipeline = write_pipeline(
            scratch.path(),
            "solo",
            &format!(
                "name: solo\nstages:\n  work:\n    role: coder\n    task: \"{{{{ issue }}}}\"\n    max_turns: {max_turns}\n{extra}"
            ),
        );
        Solo {
            _scratch: scratch,
            issue,
            pipeline,
        }
    }

    /// `orch run solo.yaml --json <extra>` on `repo` against `server`.
    fn run(&self, repo: &TestRepo, server: &FakeServer, extra: &[&str]) -> Output {
        OrchRun::new(&self.pipeline, repo)
            .issue(&self.issue)
            .model(&server.base_url, "m")
            .json()
            .args(extra)
            .output()
    }
}

fn events(repo: &TestRepo, run_id: &str, stage: &str, kind: &str) -> Vec<Value> {
    stage_events(&record_dir(repo, run_id), stage, kind)
}

fn transcript(repo: &TestRepo, run_id: &str, stage: &str) -> Vec<Value> {
    let path = record_dir(repo, run_id).join(format!("stages/{stage}/transcript.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A model that never finishes: each turn writes one file and reports
/// 900 prompt + 100 completion tokens.
fn endless_writer(turns: usize) -> Vec<Reply> {
    (1..=turns)
        .map(|i| {
            Reply::tool_call(
                &format!("c{i}"),
                "write_file",
                json!({"path": format!("f{i}.txt"), "content": "x\n"}),
            )
            .with_usage(900, 100)
        })
        .collect()
}

#[test]
fn a_run_token_budget_stops_a_stage_that_never_finishes_and_leaves_it_resumable() {
    let repo = small_repo();
    let before = repo.snapshot();
    let base = repo.git(&["rev-parse", "HEAD"]).trim().to_owned();
    let solo = Solo::new(30, "");
    let server = FakeServer::start(Script::new().agent("work", endless_writer(10)));

    let out = solo.run(&repo, &server, &["--max-tokens", "3500"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a budget stop is a stage failure"
    );
    let j = stdout_json(&out);
    assert_eq!(j["status"], "failed");
    // The first stage: the run's budget, all of it, was its limit.
    let reason = "token budget exceeded: 4000 of the run's 3500 tokens";
    assert_eq!(j["stages"][0]["reason"], reason);
    assert_eq!(
        server.requests_for("work").len(),
        4,
        "stopped after the 4th turn"
    );
    assert_eq!(server.remaining("work"), 6);

    let run_id = j["run_id"].as_str().unwrap();
    let st = state_json(&repo, run_id);
    assert_eq!(st["status"], "failed");
    let stage = &st["stages"][0];
    assert_eq!(stage["status"], "failed");
    assert_eq!(stage["reason"], reason);
    // Resumable: the stage's start commit is recorded, its partial work is
    // committed on its branch; the failed run's worktree is cleared (issue
    // 13: a failed run leaves no clutter; `resume --retry` checks out anew).
    assert_eq!(stage["parent_commit"], base.as_str());
    assert!(stage["commit"].is_string());
    assert!(!Path::new(st["worktree"].as_str().unwrap()).exists());
    assert_eq!(repo.worktrees_but_pool().lines().count(), 1);
    let files = repo.git(&["ls-tree", "--name-only", &format!("orch/{run_id}/work")]);
    assert!(files.contains("f3.txt"), "turns 1-3 ran: {files}");
    assert!(
        !files.contains("f4.txt"),
        "turn 4's call was not run: {files}"
    );
    // The budget and its use, in the stage record and on `agent_end`.
    let budget = &stage["budget"];
    assert_eq!(budget["limits"]["tokens"], 3500);
    assert_eq!(budget["from_run"], json!(["tokens"]));
    assert_eq!(budget["used"]["tokens"], 4000);
    assert_eq!(budget["used"]["turns"], 4);
    assert_eq!(budget["exceeded"], "tokens");
    let end = &events(&repo, run_id, "work", "agent_end")[0];
    assert_eq!(end["budget"], *budget);
    assert_eq!(end["end"], "Budget");
    let stop = &events(&repo, run_id, "work", "budget_exceeded")[0];
    assert_eq!(stop["turn"], 4);
    assert_eq!(stop["reason"], reason);
    // Every call of the last turn is answered in the saved transcript.
    let t = transcript(&repo, run_id, "work");
    let last = t.last().unwrap();
    assert_eq!(last["tool_call_id"], "c4");
    assert!(last["content"].as_str().unwrap().contains("not run"));
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    // And it does resume: `--retry` with a larger budget finishes the stage;
    // the stopped attempt stays on `work.v1`.
    let server2 = FakeServer::start(
        Script::new().agent("work", vec![Reply::finish("f", "done after all", None)]),
    );
    let out = crate::support::orch()
        .args([
            "resume",
            run_id,
            "--retry",
            "--max-tokens",
            "100000",
            "--json",
        ])
        .args([
            "--repo",
            repo.path.to_str().unwrap(),
            "--base-url",
            &server2.base_url,
            "--model",
            "m",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout_json(&out)["status"], "succeeded");
    let old = repo.git(&["ls-tree", "--name-only", &format!("orch/{run_id}/work.v1")]);
    assert!(old.contains("f3.txt"), "{old}");
    assert_eq!(repo.snapshot(), before);
}

#[test]
fn a_stage_budget_from_the_pipeline_stops_its_stage() {
    let repo = small_repo();
    let before = repo.snapshot();
    let solo = Solo::new(30, "    budget: {tokens: 2500, time_secs: 600}\n");
    let server = FakeServer::start(Script::new().agent("work", endless_writer(10)));
    // A generous run budget: the stage's own is the tighter one.
    let out = solo.run(
        &repo,
        &server,
        &["--max-tokens", "100000", "--max-cost", "0.5"],
    );
    assert_eq!(out.status.code(), Some(1));
    let j = stdout_json(&out);
    assert_eq!(
        j["stages"][0]["reason"],
        "token budget exceeded: 3000 of the stage's 2500 tokens"
    );
    assert_eq!(server.requests_for("work").len(), 3);
    let st = state_json(&repo, j["run_id"].as_str().unwrap());
    let budget = &st["stages"][0]["budget"];
    assert_eq!(budget["limits"]["tokens"], 2500);
    assert_eq!(budget["limits"]["time_secs"], 600.0);
    // Only the cost limit comes from the run; it cannot be enforced without
    // a price, and the stage says so (once).
    assert_eq!(budget["from_run"], json!(["cost"]), "{budget}");
    let note = "cost budget of $0.5000 not enforced unless the server reports each call's cost: the model's price is unknown";
    assert_eq!(budget["notes"], json!([note]));
    assert_eq!(budget["used"]["cost_usd"], Value::Null);
    let start = &events(&repo, j["run_id"].as_str().unwrap(), "work", "agent_start")[0];
    assert_eq!(start["budget_notes"], json!([note]));
    assert_eq!(repo.snapshot(), before);
}

#[test]
fn a_run_budget_spent_by_an_earlier_stage_says_so_in_the_next_stage() {
    let repo = small_repo();
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let pipeline = write_pipeline(
        scratch.path(),
        "two",
        "name: two\nstages:\n  first:\n    role: coder\n    task: \"{{ issue }}\"\n  second:\n    role: coder\n    task: \"{{ issue }}\"\n    needs: [first]\n",
    );
    // Stage one uses the run's 2000 tokens exactly and finishes (the
    // finishing turn may reach the limit).
    let server = FakeServer::start(
        Script::new()
            .agent(
                "first",
                vec![
                    Reply::tool_call(
                        "c1",
                        "write_file",
                        json!({"path": "a.txt", "content": "a\n"}),
                    )
                    .with_usage(900, 100),
                    Reply::finish("c2", "wrote a.txt", None).with_usage(900, 100),
                ],
            )
            .agent("second", vec![Reply::finish("c3", "never asked", None)]),
    );
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .args(["--max-tokens", "2000"])
        .output();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let j = stdout_json(&out);
    assert_eq!(j["stages"][0]["status"], "succeeded", "{j}");
    let reason = j["stages"][1]["reason"].as_str().unwrap();
    eprintln!("second stage: {reason}");
    assert_eq!(
        reason,
        "the run's 2000-token budget was used up by earlier stages (2000 of 2000 tokens)"
    );
    assert!(!reason.contains("0 of 0"), "{reason}");
    assert!(
        server.requests_for("second").is_empty(),
        "no turn may start"
    );
    let st = state_json(&repo, j["run_id"].as_str().unwrap());
    let second = &st["stages"][1];
    assert_eq!(second["status"], "failed");
    assert_eq!(second["reason"], reason);
    assert_eq!(second["budget"]["from_run"], json!(["tokens"]));
    assert_eq!(second["budget"]["exceeded"], "tokens");
}

#[test]
fn a_bad_budget_in_the_pipeline_is_a_located_error() {
    let repo = small_repo();
    let solo = Solo::new(30, "    budget: {tokens: lots}\n");
    let server = FakeServer::start(Script::new());
    let out = solo.run(&repo, &server, &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let at = format!(
        "{}:7:22: invalid value: expected a whole number",
        solo.pipeline.display()
    );
    assert!(stderr.contains(&at), "{stderr}");
    assert!(server.requests().is_empty());
}

#[test]
fn bad_budget_flags_are_usage_errors() {
    let repo = small_repo();
    let solo = Solo::new(30, "");
    let server = FakeServer::start(Script::new());
    for flags in [
        ["--max-time", "0"],
        ["--max-cost", "nan"],
        ["--compact-at", "1.5"],
        ["--context-window", "10"],
        ["--max-tokens", "0"],
    ] {
        let out = solo.run(&repo, &server, &flags);
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(flags[0]), "{flags:?}: {stderr}");
    }
    assert!(server.requests().is_empty());
}

#[test]
fn a_time_budget_bounds_a_slow_model_reply() {
    let repo = small_repo();
    let before = repo.snapshot();
    let solo = Solo::new(30, "");
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_call(
                "c1",
                "write_file",
                json!({"path": "a.txt", "content": "a\n"}),
            ),
            Reply::finish("c2", "never seen", None).after(Duration::from_secs(6)),
        ],
    ));
    let out = solo.run(&repo, &server, &["--max-time", "1.5"]);
    assert_eq!(out.status.code(), Some(1));
    let j = stdout_json(&out);
    let reason = j["stages"][0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("time budget exceeded: ")
            && (reason.ends_with(" of the run's 1.5 s")
                || reason.ends_with(" left of the run's 1.5 s")),
        "{reason}"
    );
    let run_id = j["run_id"].as_str().unwrap();
    let files = repo.git(&["ls-tree", "--name-only", &format!("orch/{run_id}/work")]);
    assert!(
        files.contains("a.txt"),
        "the first turn's work is committed: {files}"
    );
    let st = state_json(&repo, run_id);
    assert_eq!(st["stages"][0]["budget"]["exceeded"], "time");
    assert_eq!(repo.snapshot(), before);
}

#[test]
fn a_time_budget_stops_a_long_command_and_answers_its_call() {
    let repo = small_repo();
    let before = repo.snapshot();
    let solo = Solo::new(30, "    budget: {time_secs: 1.5}\n");
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_call(
                "c1",
                "bash",
                json!({"command": "echo started > started.txt; sleep 60; echo late > late.txt", "timeout_secs": 120}),
            ),
            Reply::finish("c2", "never reached", None),
        ],
    ));
    let out = solo.run(&repo, &server, &[]);
    assert_eq!(out.status.code(), Some(1));
    let j = stdout_json(&out);
    let reason = j["stages"][0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("time budget exceeded: ") && reason.ends_with(" of the stage's 1.5 s"),
        "{reason}"
    );
    assert_eq!(server.requests_for("work").len(), 1);
    let run_id = j["run_id"].as_str().unwrap();
    let t = transcript(&repo, run_id, "work");
    let last = t.last().unwrap();
    assert_eq!(last["tool_call_id"], "c1");
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .starts_with("error: stopped: time budget exceeded"),
        "{last}"
    );
    let files = repo.git(&["ls-tree", "--name-only", &format!("orch/{run_id}/work")]);
    assert!(files.contains("started.txt"), "{files}");
    assert!(
        !files.contains("late.txt"),
        "the command was stopped: {files}"
    );
    assert_eq!(repo.snapshot(), before);
}

/// Bytes of a request body as the server received it (serde_json writes
/// the same bytes back for the same value).
fn body_bytes(body: &Value) -> usize {
    serde_json::to_string(body).unwrap().len()
}

/// A fake file of about 6 KB whose lines do not mention its name.
fn filler(i: usize) -> String {
    format!("alpha beta gamma delta epsilon zeta eta theta iota kappa {i}\n").repeat(100)
}

const FACT_LINE: &str = "the deploy key rotates every FACT-7731 days";
const TURNS: usize = 50;

/// Runs 50 turns that each read a ~6 KB file (turn 2 reads the file holding
/// FACT-7731, turn 3 mentions it), then `finish`, with `--context-window
/// window`. Returns the repo, the run id and the server.
fn fifty_turns(window: &str) -> (TestRepo, String, FakeServer) {
    let repo = small_repo();
    for i in 1..=TURNS {
        if i == 2 {
            repo.write("notes.txt", format!("{FACT_LINE}\n{}", filler(2)));
        } else {
            repo.write(&format!("f{i}.txt"), filler(i));
        }
    }
    repo.commit_all("files");
    let before = repo.snapshot();
    let solo = Solo::new(60, "");
    let mut replies: Vec<Reply> = (1..=TURNS)
        .map(|i| {
            let path = if i == 2 {
                "notes.txt".to_owned()
            } else {
                format!("f{i}.txt")
            };
            let r = Reply::tool_call(&format!("c{i}"), "read_file", json!({ "path": path }));
            match (i, r) {
                (3, Reply::Message { mut message, usage }) => {
                    message["content"] =
                        json!("Noted from notes.txt: keys rotate every FACT-7731 days.");
                    Reply::Message { message, usage }
                }
                (_, r) => r,
            }
        })
        .collect();
    replies.push(Reply::finish(
        "done",
        "Read everything; keys rotate every FACT-7731 days.",
        None,
    ));
    let summaries = (0..TURNS)
        .map(|k| {
            Reply::text(&format!(
                "Summary {k}: the agent read files one by one; nothing was changed."
            ))
        })
        .collect();
    let server = FakeServer::start(
        Script::new()
            .agent("work", replies)
            .agent("work/compact", summaries),
    );
    let out = solo.run(&repo, &server, &["--context-window", window]);
    assert_eq!(out.status.code(), Some(0));
    let j = stdout_json(&out);
    assert_eq!(j["status"], "succeeded");
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    assert_eq!(repo.snapshot(), before);
    let run_id = j["run_id"].as_str().unwrap().to_owned();
    (repo, run_id, server)
}

#[test]
fn compaction_keeps_every_request_under_the_window_share_and_keeps_referenced_facts() {
    let window = 8000usize;
    let limit = (0.7 * window as f64) as usize * 4;
    let (repo, run_id, server) = fifty_turns(&window.to_string());
    let reqs = server.requests_for("work");
    assert_eq!(reqs.len(), TURNS + 1);
    let sizes: Vec<usize> = reqs.iter().map(|r| body_bytes(&r.body)).collect();
    for (i, s) in sizes.iter().enumerate() {
        assert!(*s <= limit, "request {} is {s} bytes, over {limit}", i + 1);
    }
    // Summary requests fit too.
    let summaries = server.requests_for("work/compact");
    assert!(
        !summaries.is_empty(),
        "50 turns of 6 KB need summaries at 8k tokens"
    );
    for r in &summaries {
        assert!(body_bytes(&r.body) <= limit);
        assert!(
            r.body.get("tools").is_none(),
            "summary requests offer no tools"
        );
    }
    // The fact from turn 2, referenced by turn 3, is in every later request:
    // as its tool result or carried verbatim in the summary message.
    for (i, r) in reqs.iter().enumerate().skip(3) {
        let text = serde_json::to_string(&r.body["messages"]).unwrap();
        assert!(text.contains(FACT_LINE), "request {} lost the fact", i + 1);
    }
    // The action log names what was condensed.
    let compactions = events(&repo, &run_id, "work", "compaction");
    assert!(!compactions.is_empty());
    let stubbed: Vec<String> = compactions
        .iter()
        .flat_map(|e| e["stubbed"].as_array().cloned().unwrap_or_default())
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert!(stubbed.contains(&"c1".to_owned()), "{stubbed:?}");
    assert!(
        !stubbed.contains(&"c2".to_owned()),
        "the referenced result is never stubbed"
    );
    assert!(
        compactions
            .iter()
            .any(|e| e["kept"].as_array().unwrap().contains(&json!("c2")))
    );
    assert!(
        compactions
            .iter()
            .any(|e| e["method"].as_str().unwrap().contains("summary"))
    );
    for e in &compactions {
        assert!(
            e["bytes_after"].as_u64().unwrap() < e["bytes_before"].as_u64().unwrap(),
            "{e}"
        );
        assert_eq!(e["estimate"], "serialized request bytes / 4");
    }
    // The saved transcript is the whole, uncompacted conversation.
    let t = transcript(&repo, &run_id, "work");
    let results: Vec<&str> = t
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(results.len(), TURNS + 1);
    assert!(results.iter().all(|r| !r.starts_with("[compacted")));
    assert!(
        t.iter()
            .all(|m| !m["content"].as_str().unwrap_or("").contains("Summary 0:"))
    );

    // A roomier window compacts less often; and the same run without
    // compaction (a window it never reaches). The numbers are in
    // docs/budgets-and-compaction.md.
    let (repo3, run3, roomy) = fifty_turns("32000");
    let roomy_sizes: Vec<usize> = roomy
        .requests_for("work")
        .iter()
        .map(|r| body_bytes(&r.body))
        .collect();
    let roomy_limit = (0.7 * 32000.0) as usize * 4;
    assert!(roomy_sizes.iter().all(|s| *s <= roomy_limit));
    let roomy_events = events(&repo3, &run3, "work", "compaction");
    let turns_of = |evs: &[Value], what: &str| -> Vec<u64> {
        evs.iter()
            .filter(|e| e["method"].as_str().unwrap().contains(what))
            .map(|e| e["turn"].as_u64().unwrap())
            .collect()
    };
    eprintln!(
        "MEASURE compaction turns: window {window}: {:?}, summaries at {:?}; window 32000: {:?}",
        turns_of(&compactions, ""),
        turns_of(&compactions, "summary"),
        turns_of(&roomy_events, ""),
    );
    let roomy_compactions = roomy_events.len();
    let (_repo2, _run2, plain) = fifty_turns("100000000");
    let plain_sizes: Vec<usize> = plain
        .requests_for("work")
        .iter()
        .map(|r| body_bytes(&r.body))
        .collect();
    assert!(plain.requests_for("work/compact").is_empty());
    let max = |v: &[usize]| v.iter().copied().max().unwrap();
    eprintln!(
        "MEASURE {TURNS} turns x ~6 KB reads: --context-window {window}: last request {} B, max {} B, {} compactions, {} summary calls; --context-window 32000: last {} B, max {} B, {} compactions, {} summary calls; without compaction: last {} B, max {} B",
        sizes.last().unwrap(),
        max(&sizes),
        compactions.len(),
        summaries.len(),
        roomy_sizes.last().unwrap(),
        max(&roomy_sizes),
        roomy_compactions,
        roomy.requests_for("work/compact").len(),
        plain_sizes.last().unwrap(),
        max(&plain_sizes),
    );
    assert!(max(&plain_sizes) > 4 * max(&sizes));
}

#[test]
fn a_context_length_error_compacts_and_retries_once() {
    let repo = small_repo();
    for i in 1..=6 {
        repo.write(&format!("f{i}.txt"), filler(i));
    }
    repo.commit_all("files");
    let before = repo.snapshot();
    let solo = Solo::new(20, "");
    let mut replies: Vec<Reply> = (1..=6)
        .map(|i| {
            Reply::tool_call(
                &format!("c{i}"),
                "read_file",
                json!({"path": format!("f{i}.txt")}),
            )
        })
        .collect();
    replies.push(Reply::Status(
        400,
        json!({"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}}).to_string(),
    ));
    replies.push(Reply::finish("done", "ok", None));
    let server = FakeServer::start(Script::new().agent("work", replies));
    let out = solo.run(&repo, &server, &[]);
    assert_eq!(out.status.code(), Some(0));
    let reqs = server.requests_for("work");
    assert_eq!(reqs.len(), 8);
    let (refused, retried) = (body_bytes(&reqs[6].body), body_bytes(&reqs[7].body));
    assert!(retried < refused, "{retried} < {refused}");
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let c = &events(&repo, &run_id, "work", "compaction")[0];
    assert_eq!(c["trigger"], "context_length_error");
    assert_eq!(c["turn"], 7);
    let errors = events(&repo, &run_id, "work", "model_error");
    assert_eq!(errors.len(), 1);
    assert!(errors[0]["retry"].is_string());
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    assert_eq!(repo.snapshot(), before);
}
