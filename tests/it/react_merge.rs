//! `orch react` with the merge round (issue 31, point 4) and
//! `--no-publish` (the Action's contract), through the real binary: the
//! pull request's base moved on the bare remote with a conflicting change,
//! the fake forge computes `mergeable` from that remote with git itself,
//! and react runs the scripted `merge` stage before the round — or says it
//! cannot merge and pushes nothing.

use crate::forge::{GH_TOKEN, Setup};
use crate::react::{edit, first_run_script, git_origin, published_run, react};
use crate::support::{FakeServer, Reply, Script, assert_exit, record_dir, stdout_json, user_text};
use serde_json::{Value, json};
use std::process::Command;

/// The base's change to the line the pull request fixed (`a - b` → `a + b`).
const CALC_TYPED: &str = "def add(a: int, b: int) -> int:\n    return a - b  # ints only\n";
/// Both changes.
const CALC_RESOLVED: &str = "def add(a: int, b: int) -> int:\n    return a + b  # ints only\n";
const MEMBER: &str = "MEMBER_FINDING: add() needs a docstring.";

/// Another contributor pushes `calc.py` = `text` to the remote's `main`.
fn move_base(s: &Setup, text: &str) -> String {
    let other = s.scratch.path().join("other");
    let git = |args: &[&str]| {
        let st = Command::new("git")
            .args([
                "-c",
                "user.name=Other",
                "-c",
                "user.email=o@example.invalid",
            ])
            .args(args)
            .status()
            .unwrap();
        assert!(st.success(), "git {args:?}");
    };
    git(&[
        "clone",
        "-q",
        s.origin.to_str().unwrap(),
        other.to_str().unwrap(),
    ]);
    std::fs::write(other.join("calc.py"), text).unwrap();
    let dir = other.to_str().unwrap();
    git(&["-C", dir, "commit", "-q", "-am", "base moves"]);
    git(&["-C", dir, "push", "-q", "origin", "main"]);
    git_origin(s, &["rev-parse", "refs/heads/main"])
}

/// Whether `a` and `b` merge cleanly on the remote.
fn merges_cleanly(s: &Setup, a: &str, b: &str) -> bool {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(&s.origin)
        .args(["merge-tree", "--write-tree", a, b])
        .output()
        .unwrap();
    match out.status.code() {
        Some(0) => true,
        Some(1) => false,
        other => panic!("git merge-tree: {other:?}"),
    }
}

fn is_ancestor(s: &Setup, a: &str, b: &str) -> bool {
    Command::new("git")
        .arg("--git-dir")
        .arg(&s.origin)
        .args(["merge-base", "--is-ancestor", a, b])
        .status()
        .unwrap()
        .success()
}

fn one_member_comment(s: &Setup) {
    s.forge.pr(|fx| {
        fx.permissions.insert("alice".into(), "write".into());
        fx.review_comments = vec![json!({"id": 21, "user": {"login": "alice"},
            "path": "calc.py", "line": 2, "body": MEMBER})];
    });
}

fn merge_writes(content: &str) -> Vec<Reply> {
    vec![
        Reply::tool_call(
            "m1",
            "write_file",
            json!({"path": "calc.py", "content": content}),
        ),
        Reply::finish("m2", "calc.py: the base's types with the PR's fix", None),
    ]
}

fn record(s: &Setup, run_id: &str, file: &str) -> Value {
    let text = std::fs::read_to_string(record_dir(&s.repo, run_id).join(file)).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_conflicting_base_is_merged_before_the_round_and_the_pr_merges_cleanly() {
    let mut s = Setup::new();
    let model = FakeServer::start(first_run_script());
    let (run_id, branch, head) = published_run(&mut s, "github:o/r#7", &model);
    one_member_comment(&s);
    let base = move_base(&s, CALC_TYPED);
    assert!(
        !merges_cleanly(&s, "refs/heads/main", &format!("refs/heads/{branch}")),
        "the PR conflicts with its new base"
    );
    assert_eq!(s.forge.get_json("/repos/o/r/pulls/1")["mergeable"], false);

    let round = FakeServer::start(
        Script::new()
            .agent("merge", merge_writes(CALC_RESOLVED))
            .agent(
                "code.r3",
                vec![
                    edit(
                        "k1",
                        "    return a + b  # ints only",
                        "    \"\"\"Adds.\"\"\"\n    return a + b  # ints only",
                    ),
                    Reply::finish("k2", "F1: fixed — docstring added", None),
                ],
            )
            .agent(
                "review.r3",
                vec![Reply::finish("q1", "Good.", Some("approve"))],
            )
            .agent(
                "review.r3/distill",
                vec![Reply::text("```json\n{\"lessons\": []}\n```")],
            ),
    );
    let out = react(&mut s, &run_id, &round, &["--json"]);
    assert_exit(&out, 0);
    let report = stdout_json(&out);
    assert_eq!(report["action"], "pushed", "{report}");
    assert!(round.violations().is_empty(), "{:?}", round.violations());

    // The merge stage ran first and saw the conflict; then the round, whose
    // coder started from the merge commit.
    let merge_task = user_text(&round.requests_for("merge")[0]);
    assert!(merge_task.contains("<<<<<<<"), "{merge_task}");
    assert!(!round.requests_for("code.r3").is_empty());
    let merge = record(&s, &run_id, "merge.json");
    assert_eq!(merge[0]["outcome"], "resolved", "{merge}");
    let merge_commit = merge[0]["commit"].as_str().unwrap().to_owned();
    assert_eq!(merge[0]["previous"], head.as_str());
    assert_eq!(merge[0]["base"], base.as_str());

    // The PR branch fast-forwarded: old head ← merge commit ← round commit.
    let new_head = git_origin(&s, &["rev-parse", &format!("refs/heads/{branch}")]);
    assert_eq!(
        git_origin(&s, &["rev-parse", &format!("{new_head}^")]),
        merge_commit
    );
    assert!(is_ancestor(&s, &head, &new_head) && is_ancestor(&s, &base, &new_head));
    let calc = git_origin(&s, &["show", &format!("{new_head}:calc.py")]);
    assert!(
        calc.contains("a: int") && calc.contains("a + b") && calc.contains("Adds."),
        "{calc}"
    );
    // The forge said it did not merge before; it merges cleanly now, in
    // git's view and in the fake forge's.
    assert!(merges_cleanly(&s, "refs/heads/main", &new_head));
    let pull = s.forge.get_json("/repos/o/r/pulls/1");
    assert_eq!(pull["head"]["sha"], new_head.as_str(), "{pull}");
    assert_eq!(pull["mergeable"], true, "{pull}");
    assert_eq!(pull["mergeable_state"], "clean", "{pull}");

    // One summary comment, naming the merge.
    let posted = s.forge.pr(|fx| fx.posted.clone());
    assert_eq!(posted.len(), 1, "{posted:?}");
    let body = posted[0]["body"].as_str().unwrap();
    assert!(body.contains("conflicts in calc.py resolved"), "{body}");

    // The react round records its merge; show/review list both; --json too.
    let react_rec = record(&s, &run_id, "react.json");
    assert_eq!(react_rec["rounds"][0]["merge_stage"], "merge.r3");
    assert_eq!(
        react_rec["rounds"][0]["merge_commit"],
        merge_commit.as_str()
    );
    let repo = s.repo.path.to_str().unwrap().to_owned();
    for cmd in ["show", "review"] {
        let out = s.orch(&[cmd, &run_id, "--repo", &repo]);
        assert_exit(&out, 0);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("merge round ("), "{cmd}: {text}");
        assert!(text.contains("resolved"), "{cmd}: {text}");
        assert!(
            text.contains("react round 3 (code.r3 → review.r3)"),
            "{cmd}: {text}"
        );
        let out = s.orch(&[cmd, &run_id, "--repo", &repo, "--json"]);
        assert_exit(&out, 0);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["merge"][0]["outcome"], "resolved", "{cmd}: {v}");
        assert_eq!(v["react"]["rounds"][0]["round"], 3, "{cmd}: {v}");
    }
    s.assert_no_leak(GH_TOKEN, &[&model, &round]);
}

#[test]
fn a_conflict_the_merge_stage_cannot_resolve_is_reported_and_nothing_moves() {
    let mut s = Setup::new();
    let model = FakeServer::start(first_run_script());
    let (run_id, branch, head) = published_run(&mut s, "github:o/r#7", &model);
    one_member_comment(&s);
    move_base(&s, CALC_TYPED);
    let pr_before = s.repo.git(&["rev-parse", &format!("orch/{run_id}/pr")]);

    // Three claimed finishes without an edit: the marker gate fails.
    let finish = |id: &str| Reply::finish(id, "done", None);
    let round = FakeServer::start(
        Script::new().agent("merge", vec![finish("m1"), finish("m2"), finish("m3")]),
    );
    let out = react(&mut s, &run_id, &round, &["--json"]);
    assert_exit(&out, 1);
    let report = stdout_json(&out);
    assert_eq!(report["action"], "cannot_merge", "{report}");
    assert!(round.requests_for("code.r3").is_empty());
    assert_eq!(
        git_origin(&s, &["rev-parse", &format!("refs/heads/{branch}")]),
        head,
        "nothing pushed"
    );
    assert_eq!(
        s.repo.git(&["rev-parse", &format!("orch/{run_id}/pr")]),
        pr_before
    );
    let posted = s.forge.pr(|fx| fx.posted.clone());
    assert_eq!(posted.len(), 1, "{posted:?}");
    let body = posted[0]["body"].as_str().unwrap();
    assert!(body.contains("cannot merge"), "{body}");
    assert_eq!(record(&s, &run_id, "merge.json")[0]["outcome"], "cannot");
    assert_eq!(
        record(&s, &run_id, "react.json")["handled"],
        json!([]),
        "the findings come back next round"
    );
    let repo = s.repo.path.to_str().unwrap().to_owned();
    let out = s.orch(&["show", &run_id, "--repo", &repo]);
    assert_exit(&out, 0);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("merge round ("), "{text}");
    assert!(
        text.contains("react round (no stages) on github:o/r#1: cannot merge"),
        "{text}"
    );
}

#[test]
fn no_publish_leaves_the_round_on_the_final_branch_and_the_comment_in_the_record() {
    let mut s = Setup::new();
    let model = FakeServer::start(first_run_script());
    let (run_id, branch, head) = published_run(&mut s, "github:o/r#7", &model);
    one_member_comment(&s);
    let round = FakeServer::start(
        Script::new()
            .agent(
                "code.r3",
                vec![
                    edit(
                        "k1",
                        "def add(a, b):",
                        "def add(a, b):\n    \"\"\"Adds.\"\"\"",
                    ),
                    Reply::finish("k2", "F1: fixed — docstring added", None),
                ],
            )
            .agent(
                "review.r3",
                vec![Reply::finish("q1", "Good.", Some("approve"))],
            )
            .agent(
                "review.r3/distill",
                vec![Reply::text("```json\n{\"lessons\": []}\n```")],
            ),
    );
    let out = react(&mut s, &run_id, &round, &["--no-publish", "--json"]);
    assert_exit(&out, 0);
    assert_eq!(stdout_json(&out)["action"], "ready");
    // Nothing pushed, nothing posted.
    assert_eq!(
        git_origin(&s, &["rev-parse", &format!("refs/heads/{branch}")]),
        head
    );
    assert!(s.forge.pr(|fx| fx.posted.is_empty()));
    // The round's commit is on orch/<run>/pr, one commit on top of the head.
    let tip = s
        .repo
        .git(&["rev-parse", &format!("orch/{run_id}/pr")])
        .trim()
        .to_owned();
    assert_ne!(tip, head);
    assert_eq!(s.repo.git(&["rev-parse", &format!("{tip}^")]).trim(), head);
    // The summary the publish job posts.
    let comment =
        std::fs::read_to_string(record_dir(&s.repo, &run_id).join("react-comment.md")).unwrap();
    assert!(comment.starts_with("<!-- orch:react -->"), "{comment}");
    assert!(comment.contains("fixed — docstring added"), "{comment}");
    assert!(comment.contains(&tip), "{comment}");
    s.assert_no_leak(GH_TOKEN, &[&model, &round]);
}

#[test]
fn a_gitlab_merge_request_with_conflicts_gets_its_merge_round_too() {
    let mut s = Setup::new();
    let model = FakeServer::start(first_run_script());
    let issue = s.scratch.path().join("ISSUE.md");
    std::fs::write(&issue, "# add() subtracts\n\nIt should add.\n").unwrap();
    let pipeline = crate::support::write_pipeline(
        s.scratch.path(),
        "fix",
        "react_rounds: 1\nstages:\n  code:\n    role: coder\n  review:\n    role: reviewer\n    needs: [code]\n    rework: { stage: code, max_rounds: 1 }\n",
    );
    let repo = s.repo.path.to_str().unwrap().to_owned();
    let out = s.orch(&[
        "run",
        pipeline.to_str().unwrap(),
        "--repo",
        &repo,
        "--issue",
        issue.to_str().unwrap(),
        "--base-url",
        &model.base_url,
        "--model",
        "fake-model",
        "--json",
    ]);
    assert_exit(&out, 0);
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let out = s.publish(&run_id, &["--forge", "gitlab:grp/sub/proj", "--json"]);
    assert_exit(&out, 0);
    let branch = stdout_json(&out)["branch"].as_str().unwrap().to_owned();
    let head = git_origin(&s, &["rev-parse", &format!("refs/heads/{branch}")]);
    let origin = s.origin.clone();
    s.forge.pr(|fx| {
        fx.origin = Some(origin);
        fx.me = "orch-bot".into();
        fx.members.insert(5, 30);
        fx.discussions = vec![json!({"id": "d1", "notes": [{"id": 51, "body": MEMBER,
            "system": false, "resolvable": true, "resolved": false,
            "author": {"id": 5, "username": "dev"},
            "position": {"new_path": "calc.py", "new_line": 2}}]})];
    });
    let base = move_base(&s, CALC_TYPED);
    let mr = s
        .forge
        .get_json("/api/v4/projects/grp%2Fsub%2Fproj/merge_requests/1");
    assert_eq!(mr["has_conflicts"], true, "{mr}");

    let round = FakeServer::start(
        Script::new()
            .agent("merge", merge_writes(CALC_RESOLVED))
            .agent(
                "code.r3",
                vec![
                    edit(
                        "k1",
                        "    return a + b  # ints only",
                        "    \"\"\"Adds.\"\"\"\n    return a + b  # ints only",
                    ),
                    Reply::finish("k2", "F1: fixed — docstring added", None),
                ],
            )
            .agent(
                "review.r3",
                vec![Reply::finish("q1", "Good.", Some("approve"))],
            )
            .agent(
                "review.r3/distill",
                vec![Reply::text("```json\n{\"lessons\": []}\n```")],
            ),
    );
    let out = react(&mut s, &run_id, &round, &[]);
    assert_exit(&out, 0);
    let new_head = git_origin(&s, &["rev-parse", &format!("refs/heads/{branch}")]);
    assert!(is_ancestor(&s, &head, &new_head) && is_ancestor(&s, &base, &new_head));
    assert!(merges_cleanly(&s, "refs/heads/main", &new_head));
    let mr = s
        .forge
        .get_json("/api/v4/projects/grp%2Fsub%2Fproj/merge_requests/1");
    assert_eq!(mr["has_conflicts"], false, "{mr}");
    assert_eq!(mr["merge_status"], "can_be_merged", "{mr}");
    assert_eq!(s.forge.pr(|fx| fx.posted.len()), 1);
    assert_eq!(record(&s, &run_id, "merge.json")[0]["outcome"], "resolved");
}
