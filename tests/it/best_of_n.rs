//! Best of N (issue 32): a stage with `replicas: 3` runs three lanes from
//! one start commit at once, each on `orch/<run>/code#k`, and a selection
//! (`tests`, `reviewer`) picks the one the next stage builds on. The
//! scripted model makes one right patch (`right`) and two wrong ones; the
//! check `grep -qx right answer.txt` tells them apart. The helpers marked
//! `pub(crate)` also script the best-of-N run of `orch ui`'s test
//! (tests/it/webui.rs).

use crate::faults::killed;
use crate::support::{
    AWAIT_LIMIT, FakeServer, OrchRun, Reply, Script, TestRepo, orch, record_dir, resume,
    state_json, stdout_json, tool_results, write_issue, write_pipeline,
};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;

/// What replica k (1-based) writes: the second is the right one.
pub(crate) const ANSWERS: [&str; 3] = ["wrong one", "right", "wrong two"];

/// Tokens each scripted reply reports (prompt, completion).
const USAGE: (u64, u64) = (100, 10);

pub(crate) fn pipeline(dir: &Path, select: &str) -> std::path::PathBuf {
    write_pipeline(
        dir,
        "p",
        &format!(
            "name: p\nstages:\n  code:\n    role: coder\n    task: Write the answer to answer.txt.\n    replicas: 3\n    select:\n{select}\n  after:\n    role: coder\n    needs: [code]\n"
        ),
    )
}

const TESTS: &str = "      strategy: tests\n      command: grep -qx right answer.txt";

/// Replica k's replies: write its answer (held until all three replicas
/// are in flight together when `peers`), then `finish`.
fn replica(k: usize, peers: bool) -> Vec<Reply> {
    writing(ANSWERS[k - 1], peers)
}

/// Write `answer` to answer.txt, then `finish`.
fn writing(answer: &str, peers: bool) -> Vec<Reply> {
    let write = Reply::tool_call(
        "w",
        "write_file",
        json!({"path": "answer.txt", "content": format!("{answer}\n")}),
    )
    .with_usage(USAGE.0, USAGE.1);
    vec![
        if peers {
            write.await_peers(3, AWAIT_LIMIT)
        } else {
            write
        },
        Reply::finish("f", &format!("wrote {answer}"), None).with_usage(USAGE.0, USAGE.1),
    ]
}

/// The downstream stage: reads the answer it was given, then finishes.
pub(crate) fn after() -> Vec<Reply> {
    vec![
        Reply::tool_call("c", "bash", json!({"command": "cat answer.txt"})),
        Reply::finish("f", "read it", None),
    ]
}

pub(crate) fn script(peers: bool) -> Script {
    (1..=3).fold(Script::new(), |s, k| {
        s.agent(&format!("code#{k}"), replica(k, peers))
    })
}

pub(crate) fn run(repo: &TestRepo, pipeline: &Path, server: &FakeServer) -> Output {
    let issue = write_issue(pipeline.parent().unwrap(), "# answer\n");
    OrchRun::new(pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .output()
}

fn stage<'a>(state: &'a Value, id: &str) -> &'a Value {
    state["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no stage {id} in {state}"))
}

fn tree(repo: &TestRepo, rev: &str) -> String {
    repo.git(&["rev-parse", &format!("{rev}^{{tree}}")])
        .trim()
        .to_owned()
}

pub(crate) fn run_id(out: &Output) -> String {
    stdout_json(out)["run_id"].as_str().unwrap().to_owned()
}

#[test]
fn tests_picks_the_replica_that_passes_and_the_next_stage_builds_on_it() {
    // $1000 per 1M tokens: a replica's 220 tokens cost $0.22.
    let repo = TestRepo::with_commit(
        &[
            ("README.md", "base\n"),
            (
                ".orch/orch.toml",
                "[prices.\"m\"]\nprompt = 1000\ncompletion = 1000\n",
            ),
        ],
        "base",
    );
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(tmp.path(), TESTS);
    let server = FakeServer::start(script(true).agent("after", after()));
    let out = run(&repo, &p, &server);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The three replicas were in flight together (a serial run would hold
    // the first one until AWAIT_LIMIT and fail here).
    assert!(server.peers_met(), "the replicas never ran concurrently");
    let id = run_id(&out);
    let state = state_json(&repo, &id);
    let code = stage(&state, "code");
    assert_eq!(code["status"], "succeeded");
    assert_eq!(code["selection"]["chosen"], 2, "{code}");
    assert_eq!(code["selection"]["of"], 3);
    assert_eq!(code["selection"]["passed"], true);
    // The selection's own time (it ran 3 checks as child processes), not 0.
    assert!(code["duration_ms"].as_u64().unwrap() > 0, "{code}");
    // Every replica started from the same commit, the selection too.
    let start = stage(&state, "code#1")["parent_commit"].clone();
    for k in 2..=3 {
        assert_eq!(stage(&state, &format!("code#{k}"))["parent_commit"], start);
    }
    assert_eq!(code["parent_commit"], start);
    // The stage's commit is the right replica's tree, on top of its commit.
    let branch = |s: &str| format!("orch/{id}/{s}");
    assert_eq!(tree(&repo, &branch("code")), tree(&repo, &branch("code#2")));
    assert_eq!(
        repo.git(&["rev-parse", &format!("{}^", branch("code"))])
            .trim(),
        stage(&state, "code#2")["commit"].as_str().unwrap()
    );
    let message = repo.git(&["log", "-1", "--format=%B", &branch("code")]);
    assert!(message.contains("Orch-Selected: 2 of 3"), "{message}");
    assert!(message.contains("Orch-Select-Strategy: tests"), "{message}");
    // The losers' branches stay.
    for k in [1, 3] {
        assert_eq!(
            tree(&repo, &branch(&format!("code#{k}"))),
            tree(
                &repo,
                stage(&state, &format!("code#{k}"))["commit"]
                    .as_str()
                    .unwrap()
            )
        );
    }
    // The next stage starts from the selection and sees the right answer.
    assert_eq!(stage(&state, "after")["parent_commit"], code["commit"]);
    let cat = &tool_results(&server.requests_for("after")[1])[0];
    assert!(cat.contains("right"), "{cat}");
    // Tokens sum over the replicas: 2 replies of 110 tokens each, 3 times.
    let per = 2 * (USAGE.0 + USAGE.1);
    for k in 1..=3 {
        let t = &stage(&state, &format!("code#{k}"))["tokens"];
        assert_eq!(
            t["prompt"].as_u64().unwrap() + t["completion"].as_u64().unwrap(),
            per
        );
    }
    let sum = &code["selection"]["tokens"];
    assert_eq!(
        sum["prompt"].as_u64().unwrap() + sum["completion"].as_u64().unwrap(),
        3 * per
    );
    let cost = code["selection"]["cost_usd"].as_f64().unwrap();
    assert!((cost - 0.66).abs() < 1e-9, "cost over the replicas: {cost}");
    // The action log, `orch show` and the PR body say so.
    let log =
        std::fs::read_to_string(record_dir(&repo, &id).join("stages/code/actions.jsonl")).unwrap();
    assert!(log.contains("\"event\":\"selected\""), "{log}");
    let show = orch()
        .args(["show", &id, "--repo", repo.path.to_str().unwrap()])
        .output()
        .unwrap();
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(
        show.contains("selected replica #2 of 3 (tests, passed its checks)")
            && show.contains(&format!(
                "best of 3: {} tokens over the replicas and the selection, cost $0.6600",
                3 * per
            )),
        "{show}"
    );
    let pr = std::fs::read_to_string(record_dir(&repo, &id).join("pr.md")).unwrap();
    assert!(pr.contains("| selected 2 of 3 |"), "{pr}");
    assert!(pr.contains("## Best of N"), "{pr}");
}

#[test]
fn reviewer_picks_by_its_choice_after_seeing_every_diff() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(tmp.path(), "      strategy: reviewer");
    let server = FakeServer::start(
        script(true)
            .agent(
                "code",
                vec![
                    // Without a choice, finish is refused once.
                    Reply::finish("f0", "all fine", None),
                    Reply::tool_call(
                        "f",
                        "finish",
                        json!({"summary": "three reads best", "choice": 3}),
                    ),
                ],
            )
            .agent("after", after()),
    );
    let out = run(&repo, &p, &server);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(server.peers_met(), "the replicas never ran concurrently");
    let id = run_id(&out);
    let state = state_json(&repo, &id);
    let code = stage(&state, "code");
    assert_eq!(code["selection"]["chosen"], 3, "{code}");
    assert_eq!(code["selection"]["strategy"], "reviewer");
    assert_eq!(code["selection"]["reason"], "three reads best");
    assert_eq!(code["role"], "reviewer");
    let branch = |s: &str| format!("orch/{id}/{s}");
    assert_eq!(tree(&repo, &branch("code")), tree(&repo, &branch("code#3")));
    // The reviewer saw all three diffs, and `finish` offered `choice`.
    let asked = server.requests_for("code");
    let first = asked[0].body.to_string();
    for answer in ANSWERS {
        assert!(first.contains(answer), "the reviewer saw {answer}: {first}");
    }
    let finish = asked[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "finish")
        .unwrap()
        .clone();
    assert_eq!(
        finish["function"]["parameters"]["required"],
        json!(["summary", "choice"]),
        "{finish}"
    );
    let refused = &tool_results(&asked[1])[0];
    assert!(refused.contains("`choice`"), "{refused}");
    let cat = &tool_results(&server.requests_for("after")[1])[0];
    assert!(cat.contains("wrong two"), "{cat}");
}

#[test]
fn when_no_replica_passes_the_stage_fails_with_the_best_attempt_committed() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(
        tmp.path(),
        "      strategy: tests\n      command: grep -qx nothing answer.txt",
    );
    let server = FakeServer::start(script(false).agent("after", after()));
    let out = run(&repo, &p, &server);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = run_id(&out);
    let state = state_json(&repo, &id);
    let code = stage(&state, "code");
    assert_eq!(code["status"], "failed");
    let reason = code["reason"].as_str().unwrap();
    assert!(
        reason.contains("none of the 3 replicas passed its checks")
            && reason.contains("the best attempt, #1"),
        "{reason}"
    );
    // Equal failures and diff sizes: the lowest number is the best attempt.
    assert_eq!(code["selection"]["chosen"], 1);
    assert_eq!(code["selection"]["passed"], false);
    let branch = |s: &str| format!("orch/{id}/{s}");
    assert_eq!(tree(&repo, &branch("code")), tree(&repo, &branch("code#1")));
    let message = repo.git(&["log", "-1", "--format=%B", &branch("code")]);
    assert!(
        message.contains("[failed]") && message.contains("Orch-Selected: 1 of 3"),
        "{message}"
    );
    // The run stops (on_failure: stop): the next stage never starts.
    assert_eq!(stage(&state, "after")["status"], "pending");
    assert_eq!(state["status"], "failed");
    assert!(server.requests_for("after").is_empty());

    // `resume --retry` runs the replicas again, not only the selection.
    let second = FakeServer::start(
        Script::new()
            .agent("code#1", writing("still wrong", false))
            .agent("code#2", writing("nothing", false))
            .agent("code#3", writing("wrong again", false))
            .agent("after", after()),
    );
    let out = resume(&repo, &id, &second, &["--retry"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let state = state_json(&repo, &id);
    assert_eq!(stage(&state, "code")["selection"]["chosen"], 2);
    assert_eq!(tree(&repo, &branch("code")), tree(&repo, &branch("code#2")));
    // The failed attempts stay.
    for s in ["code", "code#1", "code#2", "code#3"] {
        repo.git(&["rev-parse", &format!("{}.v1", branch(s))]);
    }
}

#[test]
fn kill_during_the_replicas_then_resume_keeps_the_finished_ones() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(tmp.path(), TESTS);
    // Two at a time, so the third replica is still to run or running when
    // the second one is recorded.
    let first = FakeServer::start(script(false).agent("after", after()));
    let issue = write_issue(tmp.path(), "# answer\n");
    let out = OrchRun::new(&p, &repo)
        .issue(&issue)
        .model(&first.base_url, "m")
        .json()
        .args(["--max-parallel", "2"])
        .env("ORCH_TEST_KILL_AT", "stage-recorded:2")
        .output();
    assert!(killed(&out), "orch was killed: {:?}", out.status);
    let runs = repo.path.join(".git/orch/runs");
    let id = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .file_name()
        .to_string_lossy()
        .into_owned();
    let before = state_json(&repo, &id);
    let done: Vec<String> = (1..=3)
        .map(|k| format!("code#{k}"))
        .filter(|s| stage(&before, s)["status"] == "succeeded")
        .collect();
    assert_eq!(done.len(), 2, "two replicas were recorded: {before}");
    let second = FakeServer::start(script(false).agent("after", after()));
    let out = resume(&repo, &id, &second, &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for s in &done {
        assert!(
            second.requests_for(s).is_empty(),
            "finished replica {s} ran again"
        );
    }
    let rerun: Vec<String> = (1..=3)
        .map(|k| format!("code#{k}"))
        .filter(|s| !done.contains(s))
        .collect();
    assert!(
        !second.requests_for(&rerun[0]).is_empty(),
        "the killed replica {} ran again",
        rerun[0]
    );
    let state = state_json(&repo, &id);
    assert_eq!(stage(&state, "code")["selection"]["chosen"], 2);
    assert_eq!(stage(&state, "after")["status"], "succeeded");
}

#[test]
fn graph_and_dry_run_show_the_replicas_and_the_selection() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(tmp.path(), TESTS);
    let graph = orch()
        .args([
            "graph",
            p.to_str().unwrap(),
            "--repo",
            repo.path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&graph.stdout);
    for want in [
        "[\"code#1 (coder)\"]",
        "[\"code#3 (coder)\"]",
        "[\"code (select 1 of 3: tests)\"]",
    ] {
        assert!(text.contains(want), "{want} in {text}");
    }
    let issue = write_issue(tmp.path(), "# answer\n");
    let dry = OrchRun::new(&p, &repo)
        .issue(&issue)
        .model("http://127.0.0.1:9", "m")
        .args(["--dry-run"])
        .output();
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(
        text.contains("replica 2 of 3 of `code`")
            && text.contains(
                "selects one of: code#1, code#2, code#3 (strategy tests; checks: grep -qx right answer.txt; budget per_replica)"
            ),
        "{text}"
    );
}

#[test]
fn bad_replica_keys_name_the_file_and_the_key() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    for (yaml, want) in [
        ("    replicas: 9\n", "replicas must be between 2 and 8"),
        (
            "    replicas: 3\n    models: [a, b]\n    select: {command: 'true'}\n",
            "models must list 1 or 3 values",
        ),
        (
            "    replicas: 2\n",
            "needs a command to run on each replica",
        ),
        (
            "    seeds: [1, 2]\n",
            "seeds needs `replicas:` of 2 or more",
        ),
        (
            "    replicas: 2\n    select: {strategy: vote}\n",
            "select strategy must be tests, reviewer or tests+reviewer",
        ),
    ] {
        let p = write_pipeline(
            tmp.path(),
            "p",
            &format!("name: p\nstages:\n  code:\n    role: coder\n{yaml}"),
        );
        let out = orch()
            .args([
                "graph",
                p.to_str().unwrap(),
                "--repo",
                repo.path.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{yaml}: {err}");
        assert!(
            err.contains(&format!("{}:", p.display())) && err.contains(want),
            "{yaml}: {want} in {err}"
        );
    }
}

#[test]
fn rollback_before_the_stage_reruns_the_replicas_and_the_selection() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = write_pipeline(
        tmp.path(),
        "p",
        &format!(
            "name: p\nstages:\n  first:\n    role: coder\n  code:\n    role: coder\n    needs: [first]\n    replicas: 3\n    select:\n{TESTS}\n  after:\n    role: coder\n    needs: [code]\n"
        ),
    );
    let first = || {
        vec![
            Reply::tool_call(
                "w",
                "write_file",
                json!({"path": "first.txt", "content": "1\n"}),
            ),
            Reply::finish("f", "first", None),
        ]
    };
    let server = FakeServer::start(
        script(false)
            .agent("first", first())
            .agent("after", after()),
    );
    let out = run(&repo, &p, &server);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = run_id(&out);
    let old_code = stage(&state_json(&repo, &id), "code")["commit"].clone();
    let rollback = |to: &str| {
        orch()
            .args([
                "rollback",
                &id,
                "--to",
                to,
                "--repo",
                repo.path.to_str().unwrap(),
            ])
            .output()
            .unwrap()
    };
    // A replica is not a point to roll back to.
    let refused = rollback("code#2");
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("it is replica 2 of 3 of stage `code`"),
        "{refused:?}"
    );
    let out = rollback("first");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let state = state_json(&repo, &id);
    for s in ["code#1", "code#2", "code#3", "code", "after"] {
        assert_eq!(stage(&state, s)["status"], "rolled_back", "{s}");
    }
    let second = FakeServer::start(script(false).agent("after", after()));
    let out = resume(&repo, &id, &second, &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(second.requests_for("first").is_empty(), "first is kept");
    for k in 1..=3 {
        assert_eq!(
            second.requests_for(&format!("code#{k}")).len(),
            2,
            "replica {k} re-ran"
        );
    }
    let state = state_json(&repo, &id);
    let code = stage(&state, "code");
    // The selection ran again. Its commit may equal the old one: the same
    // tree, parent, message and second make the same commit id.
    let selected = crate::support::stage_events(&record_dir(&repo, &id), "code", "selected");
    assert_eq!(selected.len(), 2, "two selections: {selected:?}");
    assert_eq!(selected[1]["commit"], code["commit"], "{selected:?}");
    assert_eq!(code["selection"]["chosen"], 2);
    // The earlier selection stays on its own branch.
    assert_eq!(
        repo.git(&["rev-parse", &format!("orch/{id}/code.v1")])
            .trim(),
        old_code.as_str().unwrap()
    );
}

#[test]
fn tests_plus_reviewer_lets_the_reviewer_choose_among_those_that_pass() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(
        tmp.path(),
        "      strategy: tests+reviewer\n      command: grep -q right answer.txt",
    );
    let server = FakeServer::start(
        Script::new()
            .agent("code#1", writing("right, long way", false))
            .agent("code#2", writing("wrong", false))
            .agent("code#3", writing("right", false))
            .agent(
                "code",
                vec![Reply::tool_call(
                    "f",
                    "finish",
                    json!({"summary": "three is shorter", "choice": 3}),
                )],
            )
            .agent("after", after()),
    );
    let out = run(&repo, &p, &server);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = run_id(&out);
    let state = state_json(&repo, &id);
    let code = stage(&state, "code");
    assert_eq!(code["selection"]["chosen"], 3, "{code}");
    assert_eq!(code["selection"]["passed"], true);
    let task = server.requests_for("code")[0].body.to_string();
    assert!(task.contains("Choose among: #1, #3."), "{task}");
    assert!(
        task.contains("#2 (`code#2`, succeeded): checks failed: `grep -q right answer.txt` exit 1"),
        "{task}"
    );
    let branch = |s: &str| format!("orch/{id}/{s}");
    assert_eq!(tree(&repo, &branch("code")), tree(&repo, &branch("code#3")));
}
