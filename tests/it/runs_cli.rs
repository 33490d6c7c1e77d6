//! What the run commands print and accept (issue 26.6, 26.7): every printed
//! command line runs; run ids by unique prefix; `orch runs` before the first
//! commit; the live numbers of a running stage; plurals; which pipeline files
//! a run takes from where.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, fix_add, orch, orch_shell, output_logged,
    run_text, stdout_json, write_issue,
};
use std::process::Command;

/// The built-in issue-to-pr, run on a scripted model: code (one file
/// changed), review (one turn, one token), docs; its output.
fn built_in_run_with(extra: &[&str]) -> (TestRepo, FakeServer, std::process::Output) {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "calc");
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![fix_add("c1"), Reply::finish("c2", "add() adds.", None)],
            )
            .agent(
                "review",
                vec![Reply::finish("r1", "Right.", Some("approve")).with_usage(0, 1)],
            )
            .agent("docs", vec![Reply::finish("d1", "No docs needed.", None)]),
    );
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# add() subtracts\n\nFix it.\n");
    let out = OrchRun::new("issue-to-pr", &repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .args(extra)
        .output();
    assert_eq!(out.status.code(), Some(0));
    (repo, server, out)
}

/// [`built_in_run_with`] `--json`; its run id.
fn built_in_run() -> (TestRepo, FakeServer, String) {
    let (repo, server, out) = built_in_run_with(&["--json"]);
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    (repo, server, run_id)
}

#[test]
fn the_command_replay_export_prints_runs_and_plays_the_run_again() {
    let (repo, server, run_id) = built_in_run();
    let requests = server.requests().len();
    // Elsewhere than the repository, as a user in another directory would.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = output_logged(
        orch()
            .current_dir(elsewhere.path())
            .args(["replay", &run_id, "--export", "run.replay.json", "--repo"])
            .arg(&repo.path),
    );
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let hint = stdout
        .split_once("play it with: ")
        .map(|(_, h)| h.trim().to_owned())
        .unwrap_or_else(|| panic!("a command to play it: {stdout}"));
    assert!(hint.starts_with("orch run "), "{hint}");
    let out = output_logged(&mut orch_shell(&hint, elsewhere.path()));
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
    let pr_trees: Vec<String> = repo
        .git(&[
            "for-each-ref",
            "--format=%(refname:short)",
            "refs/heads/orch/*/pr",
        ])
        .lines()
        .map(|b| repo.git(&["rev-parse", &format!("{b}^{{tree}}")]))
        .collect();
    assert_eq!(pr_trees.len(), 2, "{pr_trees:?}");
    assert_eq!(pr_trees[0], pr_trees[1], "the replay made the same tree");
}

#[test]
fn runs_and_gc_in_a_repository_without_commits_say_there_is_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let st = Command::new("git")
        .args(["init", "-q"])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success());
    let (code, out, err) = run_text(orch().current_dir(dir.path()).arg("runs"));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("no runs in "), "{out}");
    assert!(out.contains("no commits yet"), "{out}");
    let (code, out, err) = run_text(orch().current_dir(dir.path()).args(["runs", "--json"]));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "[]");
    let (code, out, err) = run_text(orch().current_dir(dir.path()).arg("gc"));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("removed: 0 worktrees, 0 branches, 0 run records"),
        "{out}"
    );
}

/// Counts of one written with a plural noun (`1 turns`, `1 files`, …).
fn bad_plurals(text: &str) -> Vec<String> {
    let re = regex::Regex::new(
        // `0+1 tokens` is a sum, not a count.
        r"(?m)(^|[ (])1 (turns|tokens|files|tasks|agents|lessons|rounds|worktrees|branches|run records)\b",
    )
    .unwrap();
    re.find_iter(text).map(|m| m.as_str().to_owned()).collect()
}

#[test]
fn a_count_of_one_is_singular_in_every_view_of_a_run() {
    // `review` takes one turn and one token; `code` changes one file.
    let (repo, _server, out) = built_in_run_with(&[]);
    let mut seen = vec![
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ];
    let summary = &seen[0];
    assert!(
        summary.lines().any(|l| l.trim_start().starts_with("review")
            && l.contains(" 1 turn ")
            && l.contains(" 1 token ")),
        "{summary}"
    );
    assert!(seen[1].contains("1 turn, 1 token"), "{}", seen[1]);
    for args in [
        vec!["show", "last"],
        vec!["review", "last"],
        vec!["log", "last"],
        vec!["runs"],
    ] {
        let (code, out, err) = run_text(orch().current_dir(&repo.path).args(&args));
        assert_eq!(code, Some(0), "{args:?}: {err}");
        seen.push(out);
    }
    assert!(seen[4].contains("(1 file, +1 -1)"), "{}", seen[4]);
    // One lane of the finished run is left for gc to clear (the pool's).
    let (_, gc, _) = run_text(orch().current_dir(&repo.path).args(["gc", "--dry-run"]));
    seen.push(gc);
    for text in &seen {
        assert_eq!(bad_plurals(text), Vec::<String>::new(), "{text}");
    }
}

/// A one-stage run on `repo` (the model edits calc.py and finishes); its id.
fn one_stage_run(repo: &TestRepo, tag: &str) -> String {
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![fix_add("c1"), Reply::finish("c2", "add() adds.", None)],
    ));
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), &format!("# {tag}\n"));
    let pipeline = crate::support::write_pipeline(
        scratch.path(),
        "one",
        "stages:\n  code:\n    role: coder\n",
    );
    let out = OrchRun::new(&pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .json()
        .output();
    assert_eq!(out.status.code(), Some(0));
    stdout_json(&out)["run_id"].as_str().unwrap().to_owned()
}

#[test]
fn a_unique_prefix_names_a_run_and_an_ambiguous_one_lists_the_candidates() {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "calc");
    let first = one_stage_run(&repo, "first");
    let second = one_stage_run(&repo, "second");
    let orch_in = |args: &[&str]| run_text(orch().current_dir(&repo.path).args(args));
    // A unique prefix (the id without its last characters) is that run.
    let prefix = &first[..first.len() - 4];
    assert!(!second.starts_with(prefix));
    let (code, out, err) = orch_in(&["show", prefix]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with(&format!("run {first} ")), "{out}");
    let (code, out, err) = orch_in(&["show", prefix, "--json"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("\"run_id\": \"{first}\"")), "{out}");
    let (code, _, err) = orch_in(&["rollback", prefix, "--to", "code"]);
    assert_eq!(code, Some(0), "{err}");
    // The full id still works; a prefix of both is refused with both named.
    let (code, _, err) = orch_in(&["review", &second]);
    assert_eq!(code, Some(0), "{err}");
    let common: String = first
        .chars()
        .zip(second.chars())
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a)
        .collect();
    assert!(!common.is_empty());
    for cmd in ["show", "log", "review", "resume", "replay", "publish"] {
        let (code, _, err) = orch_in(&[cmd, &common]);
        assert_eq!(code, Some(2), "{cmd}: {err}");
        assert!(
            err.contains(&format!("`{common}`")) && err.contains(&first) && err.contains(&second),
            "{cmd}: {err}"
        );
    }
    let (code, _, err) = orch_in(&["show", "zz-no-such-run"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("known runs") && err.contains(&first), "{err}");
}

#[test]
fn agent_json_of_a_question_names_no_deleted_branch_and_a_kept_one_that_exists() {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a + b\n")], "base");
    let ask = |extra: &[&str]| {
        let server = FakeServer::start(
            Script::new().agent("explore", vec![Reply::finish("f", "calc.py", None)]),
        );
        let out = output_logged(
            orch()
                .current_dir(&repo.path)
                .args([
                    "agent",
                    "--role",
                    "explore",
                    "--task",
                    "Where is add?",
                    "--json",
                ])
                .args(["--base-url", &server.base_url, "--model", "m"])
                .args(extra),
        );
        assert_eq!(out.status.code(), Some(0));
        stdout_json(&out)
    };
    let question = ask(&[]);
    assert_eq!(question["branch"], serde_json::Value::Null, "{question}");
    assert!(repo.git(&["branch", "--list", "orch/*"]).is_empty());
    let kept = ask(&["--keep"]);
    let branch = kept["branch"].as_str().unwrap_or_else(|| panic!("{kept}"));
    assert_eq!(
        repo.git(&["rev-parse", branch]).trim(),
        kept["commit"].as_str().unwrap(),
        "the branch named is there and holds the commit named"
    );
}

#[test]
fn a_pr_branch_gc_kept_without_its_record_is_found_and_removed_by_a_later_gc() {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "calc");
    let run = one_stage_run(&repo, "old");
    let gc = |args: &[&str]| {
        let (code, out, err) = run_text(orch().current_dir(&repo.path).arg("gc").args(args));
        assert_eq!(code, Some(0), "{args:?}: {err}");
        out
    };
    let pr = format!("orch/{run}/pr");
    let out = gc(&["--older-than", "0s"]);
    assert!(!repo.path.join(".git/orch/runs").join(&run).exists());
    assert!(out.contains(&format!("kept branch {pr}")), "{out}");
    assert_eq!(repo.git(&["branch", "--list", "orch/*"]).trim(), pr);
    // The record is gone; a later gc still finds the run by its branch.
    let listed: serde_json::Value = serde_json::from_str(&gc(&[
        "--older-than",
        "0s",
        "--include-pr",
        "--dry-run",
        "--json",
    ]))
    .unwrap();
    assert_eq!(listed["branches"], serde_json::json!([pr]), "{listed}");
    // Younger than a week: kept.
    let listed: serde_json::Value =
        serde_json::from_str(&gc(&["--older-than", "7d", "--include-pr", "--json"])).unwrap();
    assert_eq!(listed["branches"], serde_json::json!([]), "{listed}");
    // The command it printed removes it.
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("kept branch {pr}")))
        .unwrap();
    let hint = line.split('`').nth(1).unwrap_or_else(|| panic!("{line}"));
    let elsewhere = tempfile::tempdir().unwrap();
    let out = output_logged(&mut orch_shell(hint, elsewhere.path()));
    assert_eq!(out.status.code(), Some(0), "{hint}");
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.contains(&format!("removed branch {pr}")), "{out}");
    assert_eq!(repo.git(&["branch", "--list", "orch/*"]).trim(), "");
}

#[test]
fn uncommitted_pipeline_files_are_said_to_be_read_from_the_working_tree() {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "calc");
    // Not committed: a pipeline the run uses by name, and a code change it
    // does not get.
    repo.write(
        ".orch/pipelines/p.yaml",
        "stages:\n  code:\n    role: coder\n",
    );
    repo.write("notes.txt", "draft\n");
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![fix_add("c1"), Reply::finish("c2", "add() adds.", None)],
    ));
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# add() subtracts\n");
    let out = OrchRun::new("p", &repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .json()
        .output();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout_json(&out)["pipeline"], "p");
    let err = String::from_utf8_lossy(&out.stderr);
    let settings = err
        .lines()
        .find(|l| l.contains("reads its settings from the working tree"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(settings.contains(".orch/pipelines/p.yaml"), "{settings}");
    let left_out = err
        .lines()
        .find(|l| l.contains("starts from HEAD without them"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        left_out.contains("1 uncommitted change(s) (e.g. notes.txt)"),
        "{left_out}"
    );
}
