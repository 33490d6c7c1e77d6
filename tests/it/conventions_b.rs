//! Meeting the user's project, through the real binary: `--dry-run` creates
//! nothing and calls no model, the preflight fails a wrong server at once and
//! leaves nothing behind, `--base worktree` takes the user's uncommitted
//! edits without touching their repo, `orch gc` clears what runs leave, and
//! the CLI conventions (`completions`, `--json`).

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, assert_exit, only_run_id, orch, output_logged,
    signal_reply, stdout_json, write_issue,
};
use serde_json::json;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

const SOLO: &str = "name: solo\nstages:\n  work:\n    role: coder\n";

/// What a run could leave in a repository: orch branches, worktrees, run records.
#[derive(Debug, PartialEq, Eq)]
struct Leftovers {
    refs: String,
    worktrees: String,
    runs: Vec<String>,
}

fn leftovers(repo: &TestRepo) -> Leftovers {
    let runs = std::fs::read_dir(repo.path.join(".git/orch/runs"))
        .map(|d| {
            let mut v: Vec<String> = d
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        })
        .unwrap_or_default();
    Leftovers {
        refs: repo.git(&["for-each-ref", "refs/heads/orch"]),
        worktrees: repo.worktrees_but_pool(),
        runs,
    }
}

fn pipeline(dir: &Path) -> std::path::PathBuf {
    crate::support::write_pipeline(dir, "solo", SOLO)
}

fn write(id: &str, path: &str, content: &str) -> Reply {
    Reply::tool_call(id, "write_file", json!({"path": path, "content": content}))
}

/// A port nothing listens on.
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/v1")
}

#[test]
fn conv_dry_run_calls_no_model_and_creates_nothing() {
    let repo = TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            ("AGENTS.md", "MARKER-AGENTS-MD: run the tests with pytest\n"),
        ],
        "base",
    );
    let tmp = tempfile::tempdir().unwrap();
    let issue = write_issue(tmp.path(), "# add() subtracts\nMARKER-ISSUE-TEXT\n");
    let server = FakeServer::start(Script::new());
    let before = repo.snapshot();
    let left = leftovers(&repo);
    let out = OrchRun::new("issue-to-pr", &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .args(["--dry-run"])
        .output();
    assert_exit(&out, 0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("== stage code (role coder"), "{stdout}");
    assert!(stdout.contains("--- system prompt"), "{stdout}");
    assert!(
        stdout.contains("You are a careful software engineer"),
        "{stdout}"
    );
    assert!(
        stdout.contains("MARKER-ISSUE-TEXT"),
        "the first message: {stdout}"
    );
    assert!(
        stdout.contains("MARKER-AGENTS-MD"),
        "the project instructions, as the run would send them: {stdout}"
    );
    assert!(stdout.contains("receives from `code`"), "{stdout}");
    assert!(stdout.contains("flowchart TD"), "{stdout}");

    let out = OrchRun::new("issue-to-pr", &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .args(["--dry-run", "--json"])
        .output();
    assert_exit(&out, 0);
    let plan = stdout_json(&out);
    assert_eq!(plan["dry_run"], true);
    assert_eq!(plan["pipeline"]["name"], "issue-to-pr");
    let stages = plan["stages"].as_array().unwrap();
    assert_eq!(stages[0]["id"], "code");
    assert!(
        stages[0]["system_prompt"]
            .as_str()
            .unwrap()
            .contains("Tools: bash, read_file"),
        "{}",
        stages[0]
    );
    assert!(
        stages[0]["first_message"]
            .as_str()
            .unwrap()
            .contains("MARKER-ISSUE-TEXT")
    );
    assert!(
        stages[0]["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("edit_file"))
    );
    assert!(
        stages[1]["system_prompt"].is_null(),
        "later stages: what they receive"
    );
    assert!(plan["sandbox"].as_str().unwrap().starts_with("sandbox"));

    assert!(server.requests().is_empty(), "no model request");
    assert!(server.side_requests().is_empty(), "not even GET /models");
    assert_eq!(leftovers(&repo), left, "no ref, worktree or run record");
    assert!(!repo.path.join(".git/orch").exists());
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn conv_preflight_a_closed_port_exits_3_at_once_and_leaves_nothing() {
    let repo = TestRepo::with_commit(&[("a.txt", "a\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let issue = write_issue(tmp.path(), "# do it\n");
    let before = leftovers(&repo);
    let started = Instant::now();
    let out = OrchRun::new("issue-to-pr", &repo)
        .issue(&issue)
        .model(&closed_port_url(), "m")
        .output();
    let took = started.elapsed();
    println!("preflight against a closed port: exit after {took:?}");
    assert_exit(&out, 3);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("reach the model server"), "{stderr}");
    assert!(
        stderr.contains("--base-url"),
        "says what to check: {stderr}"
    );
    assert!(took.as_secs() < 10, "no retries: {took:?}");
    assert_eq!(leftovers(&repo), before);
    assert!(!repo.path.join(".git/orch/runs").exists());
}

#[test]
fn conv_preflight_a_refused_key_or_an_unlisted_model_fails_before_the_run() {
    let repo = TestRepo::with_commit(&[("a.txt", "a\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let issue = write_issue(tmp.path(), "# do it\n");
    let before = leftovers(&repo);

    let auth = FakeServer::start(Script::new().route(
        "/v1/models",
        Reply::Status(401, "{\"error\":\"bad key\"}".into()),
    ));
    let out = OrchRun::new(pipeline(tmp.path()), &repo)
        .issue(&issue)
        .model(&auth.base_url, "m")
        .output();
    assert_exit(&out, 3);
    assert!(String::from_utf8_lossy(&out.stderr).contains("HTTP 401"));
    assert!(auth.requests().is_empty());

    let list = json!({"object": "list", "data": [{"id": "qwen2.5-coder:latest"}, {"id": "other"}]});
    let listing =
        FakeServer::start(Script::new().route("/v1/models", Reply::Raw(list.to_string())));
    let out = OrchRun::new(pipeline(tmp.path()), &repo)
        .issue(&issue)
        .model(&listing.base_url, "gpt-typo")
        .output();
    assert_exit(&out, 3);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("does not serve it") && stderr.contains("qwen2.5-coder"),
        "{stderr}"
    );
    assert!(listing.requests().is_empty());
    assert_eq!(leftovers(&repo), before);
}

#[test]
fn conv_base_worktree_includes_uncommitted_edits_and_leaves_the_repo_alone() {
    let repo = TestRepo::with_commit(&[("a.txt", "committed\n")], "base");
    repo.write("a.txt", "edited, not committed\n");
    repo.write("new.txt", "untracked\n");
    let tmp = tempfile::tempdir().unwrap();
    let issue = write_issue(tmp.path(), "# do it\n");
    let head = repo.git(&["rev-parse", "HEAD"]);

    // Without --base worktree: from HEAD, and stderr says so.
    let server =
        FakeServer::start(Script::new().agent("work", vec![Reply::finish("f", "looked", None)]));
    let before = repo.snapshot();
    let out = OrchRun::new(pipeline(tmp.path()), &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .output();
    assert_exit(&out, 0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("starts from HEAD without them"), "{stderr}");
    assert!(stderr.contains("--base worktree"), "{stderr}");
    let j = stdout_json(&out);
    assert_eq!(j["base_commit"].as_str().unwrap(), head.trim());
    before.assert_unchanged(&repo.snapshot());

    // With it: the stage sees the edit and the untracked file.
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            write("w", "out.txt", "done\n"),
            Reply::finish("f", "done", None),
        ],
    ));
    let index_before = std::fs::read(repo.path.join(".git/index")).unwrap();
    let out = OrchRun::new(pipeline(tmp.path()), &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .args(["--base", "worktree"])
        .json()
        .output();
    assert_exit(&out, 0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("without them"), "{stderr}");
    let j = stdout_json(&out);
    let base = j["base_commit"].as_str().unwrap().to_owned();
    assert_ne!(base, head.trim());
    assert_eq!(repo.git(&["rev-parse", &format!("{base}^")]), head);
    let branch = j["stages"][0]["branch"].as_str().unwrap();
    assert_eq!(
        repo.git(&["show", &format!("{branch}:a.txt")]),
        "edited, not committed\n"
    );
    assert_eq!(
        repo.git(&["show", &format!("{branch}:new.txt")]),
        "untracked\n"
    );
    assert_eq!(repo.git(&["show", &format!("{branch}:out.txt")]), "done\n");
    // The user's index, HEAD, branch and files: byte for byte as before.
    assert_eq!(
        std::fs::read(repo.path.join(".git/index")).unwrap(),
        index_before
    );
    assert_eq!(repo.git(&["rev-parse", "HEAD"]), head);
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn conv_gc_clears_failed_and_killed_runs_and_dry_run_changes_nothing() {
    let repo = TestRepo::with_commit(&[("a.txt", "a\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let issue = write_issue(tmp.path(), "# do it\n");
    let main_only = repo.worktrees_but_pool();

    // A failed run clears its own lanes; its stage branch keeps the work.
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            write("w", "half.txt", "half\n"),
            Reply::Status(401, "bad key".into()),
        ],
    ));
    let out = OrchRun::new(pipeline(tmp.path()), &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .output();
    assert_exit(&out, 3);
    let failed = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    assert_eq!(repo.worktrees_but_pool(), main_only);
    assert_eq!(
        repo.git(&["show", &format!("orch/{failed}/work:half.txt")]),
        "half\n"
    );

    // A killed run leaves its lane; `gc --dry-run` lists it, `gc` removes it.
    let (pid, kill) = signal_reply(libc::SIGKILL);
    let server =
        FakeServer::start(Script::new().agent("work", vec![write("w", "k.txt", "k\n"), kill]));
    // Without the pool: the run's own lane is what a kill leaves for `gc`
    // (a pooled lane is the pool's; `lane_pool::gc_removes_the_pooled_lanes_completely`).
    let mut child = OrchRun::new(pipeline(tmp.path()), &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .args(["--no-lane-pool"])
        .spawn_quiet();
    pid.store(child.id(), Ordering::SeqCst);
    child.wait().unwrap();
    assert_ne!(repo.worktrees_but_pool(), main_only, "the lane is left");
    let before = leftovers(&repo);
    let gc = |args: &[&str]| {
        let mut cmd = orch();
        cmd.arg("gc").arg("--repo").arg(&repo.path).args(args);
        output_logged(&mut cmd)
    };
    let out = gc(&["--dry-run", "--json"]);
    assert_exit(&out, 0);
    let listed = stdout_json(&out);
    assert_eq!(listed["dry_run"], true);
    // The killed run's lane, and the pooled lane the failed run handed back.
    assert_eq!(listed["worktrees"].as_array().unwrap().len(), 2, "{listed}");
    assert_eq!(leftovers(&repo), before, "--dry-run changes nothing");
    let out = gc(&[]);
    assert_exit(&out, 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("removed worktree"));
    assert_eq!(repo.worktrees_but_pool(), main_only);
    assert!(repo.git(&["branch", "--list", "orch-lanes/*"]).is_empty());
    // Records and stage branches stay without --older-than.
    assert_eq!(leftovers(&repo).runs, before.runs);
    assert!(repo.git(&["branch", "--list", "orch/*"]).contains(&failed));
}

#[test]
fn conv_gc_older_than_removes_old_runs_and_keeps_pr_branches() {
    let repo = TestRepo::with_commit(&[("a.txt", "a\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let issue = write_issue(tmp.path(), "# do it\n");
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![write("w", "b.txt", "b\n"), Reply::finish("f", "done", None)],
    ));
    let out = OrchRun::new(pipeline(tmp.path()), &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .output();
    assert_exit(&out, 0);
    let run = only_run_id(&repo.path);
    let gc = |args: &[&str]| {
        let mut cmd = orch();
        cmd.arg("gc").arg("--repo").arg(&repo.path).args(args);
        output_logged(&mut cmd)
    };
    // A week: the run is younger, nothing goes.
    let before = leftovers(&repo);
    assert_exit(&gc(&["--older-than", "7d", "--json"]), 0);
    assert_eq!(leftovers(&repo), before);
    // Zero: older than that; a dry run lists, changes nothing.
    let out = gc(&["--older-than", "0s", "--dry-run", "--json"]);
    let listed = stdout_json(&out);
    assert_eq!(listed["records"].as_array().unwrap().len(), 1, "{listed}");
    assert!(
        listed["branches"]
            .as_array()
            .unwrap()
            .contains(&json!(format!("orch/{run}/work")))
    );
    assert_eq!(leftovers(&repo), before);
    let out = gc(&["--older-than", "0s", "--json"]);
    assert_exit(&out, 0);
    let branches = repo.git(&["branch", "--list", "orch/*"]);
    assert!(branches.contains(&format!("orch/{run}/pr")), "{branches}");
    assert!(
        !branches.contains(&format!("orch/{run}/work")),
        "{branches}"
    );
    assert!(!repo.path.join(".git/orch/runs").join(&run).exists());
    // A bad duration is a usage error.
    assert_exit(&gc(&["--older-than", "7"]), 2);
}

#[test]
fn conv_completions_and_json_of_validate_and_graph() {
    let mut cmd = orch();
    cmd.args(["completions", "bash"]);
    let out = output_logged(&mut cmd);
    assert_exit(&out, 0);
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(
        script.contains("_orch()") && script.contains("complete -F"),
        "{script}"
    );
    assert!(
        script.contains("--dry-run") && script.contains("gc"),
        "covers new flags"
    );
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let mut cmd = orch();
        cmd.args(["completions", shell]);
        let out = cmd.output().unwrap();
        assert_exit(&out, 0);
        assert!(!out.stdout.is_empty(), "{shell}");
    }

    let repo = TestRepo::with_commit(&[("a.txt", "a\n")], "base");
    let mut cmd = orch();
    cmd.current_dir(&repo.path).args(["validate", "--json"]);
    let out = output_logged(&mut cmd);
    assert_exit(&out, 0);
    let v = stdout_json(&out);
    assert_eq!(v["ok"], true);
    assert!(v["roles"].as_array().unwrap().contains(&json!("coder")));
    let mut cmd = orch();
    cmd.current_dir(&repo.path)
        .args(["graph", "issue-to-pr", "--json"]);
    let out = output_logged(&mut cmd);
    assert_exit(&out, 0);
    let g = stdout_json(&out);
    assert_eq!(g["stages"][1]["needs"], json!(["code"]));
    assert!(g["mermaid"].as_str().unwrap().starts_with("flowchart TD"));
    let mut cmd = orch();
    cmd.current_dir(&repo.path).args(["gc", "--json"]);
    let out = output_logged(&mut cmd);
    assert_exit(&out, 0);
    assert_eq!(stdout_json(&out)["worktrees"], json!([]));
}

#[test]
fn conv_an_agent_question_leaves_no_branches_unless_kept() {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a + b\n")], "base");
    let ask = |server: &FakeServer, extra: &[&str]| {
        let mut cmd = orch();
        cmd.current_dir(&repo.path)
            .args(["agent", "--role", "explore", "--task", "Where is add?"])
            .args(["--base-url", &server.base_url, "--model", "m"])
            .args(extra);
        output_logged(&mut cmd)
    };
    let server = FakeServer::start(
        Script::new().agent("explore", vec![Reply::finish("f", "calc.py", None)]),
    );
    assert_exit(&ask(&server, &[]), 0);
    assert!(repo.git(&["branch", "--list", "orch/*"]).is_empty());
    assert_eq!(repo.worktrees_but_pool().lines().count(), 1);
    let server = FakeServer::start(
        Script::new().agent("explore", vec![Reply::finish("f", "calc.py", None)]),
    );
    assert_exit(&ask(&server, &["--keep"]), 0);
    assert!(!repo.git(&["branch", "--list", "orch/*"]).is_empty());
    // --dry-run of an agent: the prompt, no request.
    let server = FakeServer::start(Script::new());
    let out = ask(&server, &["--dry-run", "--json"]);
    assert_exit(&out, 0);
    let plan = stdout_json(&out);
    assert!(
        plan["stages"][0]["first_message"]
            .as_str()
            .unwrap()
            .contains("Where is add?")
    );
    assert!(server.requests().is_empty() && server.side_requests().is_empty());
}

#[test]
fn conv_review_diff_and_rollback_print_json() {
    let repo = TestRepo::with_commit(&[("a.txt", "a\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let issue = write_issue(tmp.path(), "# do it\n");
    let two = crate::support::write_pipeline(
        tmp.path(),
        "two",
        "name: two\nstages:\n  one:\n    role: coder\n  two:\n    role: coder\n    needs: [one]\n",
    );
    let server = FakeServer::start(
        Script::new()
            .agent(
                "one",
                vec![
                    write("w", "one.txt", "1\n"),
                    Reply::finish("f", "one done", None),
                ],
            )
            .agent(
                "two",
                vec![
                    write("w", "two.txt", "2\n"),
                    Reply::finish("f", "two done", None),
                ],
            ),
    );
    let out = OrchRun::new(&two, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .output();
    assert_exit(&out, 0);
    let inspect = |args: &[&str]| {
        let mut cmd = orch();
        cmd.current_dir(&repo.path).args(args);
        let out = output_logged(&mut cmd);
        assert_exit(&out, 0);
        stdout_json(&out)
    };
    let review = inspect(&["review", "last", "--json"]);
    assert_eq!(review["stages"][0]["summary"], "one done");
    assert_eq!(
        review["stages"][1]["diffstat"]["files"][0]["path"],
        "two.txt"
    );
    let diff = inspect(&["diff", "last", "one", "--json"]);
    assert!(diff["patch"].as_str().unwrap().contains("+1"), "{diff}");
    let rolled = inspect(&["rollback", "last", "--to", "one", "--json"]);
    assert_eq!(rolled["rolled_back"], json!(["two"]));
    assert_eq!(rolled["to"], "one");
}
