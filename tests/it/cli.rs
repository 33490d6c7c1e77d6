//! The command line's contract: exit codes, errors that name the file and
//! position, `validate`, `graph`, `--help` and `--version`.

use crate::support::{TestRepo, orch, run_text};

fn run(args: &[&str], cwd: &std::path::Path) -> (Option<i32>, String, String) {
    run_text(orch().current_dir(cwd).args(args))
}

#[test]
fn validate_sees_the_built_ins_and_graph_prints_mermaid() {
    let repo = TestRepo::with_commit(&[("a.txt", "a\n")], "init");
    let before = repo.snapshot();
    let (code, out, err) = run(&["validate"], &repo.path);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("issue-to-pr"), "{out}");
    for role in ["coder", "reviewer", "docs", "explore"] {
        assert!(out.contains(role), "{out}");
    }
    let (code, out, _) = run(&["graph", "issue-to-pr"], &repo.path);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("flowchart"), "{out}");
    assert!(out.contains("code.r2") || out.contains("code_r2"), "{out}");
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn a_broken_repo_pipeline_is_reported_with_file_line_and_column() {
    let repo = TestRepo::new();
    repo.write(
        ".orch/pipelines/broken.yaml",
        "name: broken\ndescription: x\nstages:\n  code:\n    role: coder\n  review:\n    role: reviewer\n    needs: [cod]\n",
    );
    repo.commit_all("init");
    let before = repo.snapshot();
    let (code, out, err) = run(&["validate"], &repo.path);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains("broken.yaml:8:"), "{err}");
    assert!(err.contains("cod"), "{err}");
    let (code, _, err) = run(&["graph", "broken"], &repo.path);
    assert_eq!(code, Some(2));
    assert!(err.contains("broken.yaml:8:"), "{err}");
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn usage_errors_have_their_exit_codes() {
    let repo = TestRepo::with_commit(&[("a.txt", "a\n")], "init");
    let before = repo.snapshot();
    let (code, _, err) = run(
        &[
            "run",
            "no-such-pipeline",
            "--issue",
            "x.md",
            "--model",
            "replay:x",
        ],
        &repo.path,
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no-such-pipeline"), "{err}");
    let (code, _, err) = run(
        &[
            "run",
            "issue-to-pr",
            "--issue",
            "missing.md",
            "--model",
            "m",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
        &repo.path,
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("missing.md"), "{err}");
    before.assert_unchanged(&repo.snapshot());
    std::fs::write(repo.path.join("ISSUE.md"), "# x\n").unwrap();
    let before = repo.snapshot();
    let (code, _, err) = run(&["run", "issue-to-pr", "--issue", "ISSUE.md"], &repo.path);
    assert_eq!(code, Some(2), "no model configured: {err}");
    assert!(
        err.contains("ORCH_BASE_URL") || err.contains("--base-url"),
        "{err}"
    );
    let (code, _, _) = run(&["run"], &repo.path);
    assert_eq!(code, Some(2), "clap usage error");
    before.assert_unchanged(&repo.snapshot());

    let not_repo = tempfile::tempdir().unwrap();
    std::fs::write(not_repo.path().join("ISSUE.md"), "# x\n").unwrap();
    let (code, _, err) = run(
        &[
            "run",
            "issue-to-pr",
            "--issue",
            "ISSUE.md",
            "--model",
            "m",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
        not_repo.path(),
    );
    assert_eq!(code, Some(4), "not a git repository: {err}");
}

#[test]
fn last_in_a_repository_without_runs_names_the_repository_and_repo() {
    let repo = TestRepo::with_commit(&[("a.txt", "a\n")], "init");
    let elsewhere = tempfile::tempdir().unwrap();
    let (code, _, err) = run(&["show", "last"], &repo.path);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("has no runs") && err.contains("--repo DIR"),
        "{err}"
    );
    let top = repo.path.canonicalize().unwrap();
    assert!(err.contains(&top.display().to_string()), "{err}");
    // From outside any repository, `--repo` finds it and says the same.
    let shown = repo.path.display().to_string();
    let (code, _, err) = run(&["review", "last", "--repo", &shown], elsewhere.path());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("has no runs"), "{err}");
}

#[test]
fn help_has_examples_and_version_prints() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, _) = run(&["--help"], dir.path());
    assert_eq!(code, Some(0));
    assert!(
        out.contains("Examples:") && out.contains("orch demo"),
        "{out}"
    );
    let (code, out, _) = run(&["--version"], dir.path());
    assert_eq!(code, Some(0));
    assert!(out.starts_with("orch "), "{out}");
}
