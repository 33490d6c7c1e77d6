//! The files a task names are in its first message (issue 28, point 1),
//! through the real binary against the scripted server: numbered as
//! `read_file` shows them, capped with a marker, never a secret file or a
//! path outside the lane, off with `context_files: off`, and recorded in
//! the action log.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, record_dir, run_on_fake, stage_events, user_text,
    write_pipeline,
};

/// A HumanEval-like task: one `solution.py` with the signature, the
/// docstring and `raise NotImplementedError`.
const SOLUTION: &str = r#"def below_zero(operations):
    """You're given a list of deposit and withdrawal operations on a bank
    account that starts with zero balance. Your task is to detect if at any
    point the balance of account falls below zero, and at that point function
    should return True. Otherwise it should return False.
    >>> below_zero([1, 2, 3])
    False
    >>> below_zero([1, 2, -4, 5])
    True
    """
    raise NotImplementedError
"#;

const ENV_SECRET: &str = "CANARY_TOKEN=ctx-canary-7d1f0e";

fn repo() -> TestRepo {
    TestRepo::with_commit(
        &[
            ("solution.py", SOLUTION),
            (".env", &format!("{ENV_SECRET}\n")),
        ],
        "stub",
    )
}

fn pipeline(dir: &std::path::Path, extra: &str) -> std::path::PathBuf {
    write_pipeline(
        dir,
        "solo",
        &format!("stages:\n  code:\n    role: coder\n    task: Fix it.\n{extra}"),
    )
}

fn finish_server() -> FakeServer {
    FakeServer::start(Script::new().agent("code", vec![Reply::finish("f1", "Looked at it.", None)]))
}

#[test]
fn the_first_message_shows_the_named_file_numbered_and_no_secret_or_outside_file() {
    let repo = repo();
    // A file next to the repository, named by its absolute path: outside
    // every lane.
    let outside = repo.dir.path().join("outside.txt");
    std::fs::write(&outside, "OUTSIDE-CANARY\n").unwrap();
    let issue = format!(
        "# below_zero\n\nImplement `below_zero` in solution.py so it does what its docstring says. \
         The settings are in `.env`; compare with {}.\n",
        outside.display()
    );
    let server = finish_server();
    let dir = tempfile::tempdir().unwrap();
    let (code, run_id) = run_on_fake(&repo, pipeline(dir.path(), ""), &issue, &server);
    assert_eq!(code, 0);
    let first = &server.requests_for("code")[0];
    let user = user_text(first);
    assert!(
        user.contains("## solution.py (11 lines, "),
        "the file's heading: {user}"
    );
    assert!(
        user.contains("     1\tdef below_zero(operations):\n     2\t    \"\"\"You're given"),
        "numbered as read_file shows it: {user}"
    );
    assert!(
        user.contains("    11\t    raise NotImplementedError\n"),
        "{user}"
    );
    assert!(
        !user.contains("ctx-canary-7d1f0e"),
        "the .env secret: {user}"
    );
    assert!(!user.contains("OUTSIDE-CANARY"), "the outside file: {user}");
    assert!(
        !user.contains("[… cut here"),
        "a small file is whole: {user}"
    );

    let events = stage_events(&record_dir(&repo, &run_id), "code", "context_files");
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e["enabled"], true);
    assert_eq!(e["files"].as_array().unwrap().len(), 1, "{e}");
    assert_eq!(e["files"][0]["path"], "solution.py");
    assert_eq!(e["files"][0]["bytes"], SOLUTION.len());
    assert_eq!(e["files"][0]["truncated"], false);
    let skipped: Vec<&str> = e["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["path"].as_str().unwrap())
        .collect();
    assert!(skipped.contains(&".env"), "{e}");
    assert!(
        skipped.contains(&outside.to_str().unwrap()),
        "the outside path is recorded as refused: {e}"
    );
}

#[test]
fn context_files_off_on_the_stage_leaves_the_file_out() {
    let repo = repo();
    let server = finish_server();
    let dir = tempfile::tempdir().unwrap();
    let (code, run_id) = run_on_fake(
        &repo,
        pipeline(dir.path(), "    context_files: off\n"),
        "Implement `below_zero` in solution.py.\n",
        &server,
    );
    assert_eq!(code, 0);
    let user = user_text(&server.requests_for("code")[0]);
    assert!(!user.contains("def below_zero"), "{user}");
    assert!(!user.contains("# Files the task names"), "{user}");
    let events = stage_events(&record_dir(&repo, &run_id), "code", "context_files");
    assert_eq!(events[0]["enabled"], false, "{events:?}");
    assert_eq!(events[0]["files"].as_array().unwrap().len(), 0);
}

#[test]
fn context_files_off_on_the_role_leaves_the_file_out() {
    let repo = repo();
    repo.write(
        ".orch/roles/lean.md",
        "---\nname: lean\ndescription: A coder without named files.\ncontext_files: off\n---\nYou fix code.\n",
    );
    repo.commit_all("role");
    let server = finish_server();
    let dir = tempfile::tempdir().unwrap();
    let p = write_pipeline(
        dir.path(),
        "solo",
        "stages:\n  code:\n    role: lean\n    task: Fix it.\n",
    );
    let (code, _) = run_on_fake(
        &repo,
        p,
        "Implement `below_zero` in solution.py.\n",
        &server,
    );
    assert_eq!(code, 0);
    let user = user_text(&server.requests_for("code")[0]);
    assert!(!user.contains("def below_zero"), "{user}");
}

#[test]
fn an_unknown_context_files_value_is_an_error_naming_the_file_and_value() {
    let repo = repo();
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(dir.path(), "    context_files: maybe\n");
    let issue = crate::support::write_issue(dir.path(), "Fix solution.py.\n");
    let out = OrchRun::new(&p, &repo)
        .issue(&issue)
        .model("http://127.0.0.1:9/v1", "m")
        .output();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("solo.yaml:5:"), "{err}");
    assert!(err.contains("\"maybe\""), "{err}");
    assert!(err.contains("on or off"), "{err}");
}

#[test]
fn a_big_named_file_is_cut_with_a_marker_and_the_request_stays_bounded() {
    let big: String = (1..=3000)
        .map(|i| format!("def f{i}(x):\n    return x + {i}\n"))
        .collect();
    let repo = TestRepo::with_commit(&[("lib/big.py", &big)], "big");
    let server = finish_server();
    let dir = tempfile::tempdir().unwrap();
    let (code, run_id) = run_on_fake(
        &repo,
        pipeline(dir.path(), ""),
        "Speed up `lib/big.py`.\n",
        &server,
    );
    assert_eq!(code, 0);
    let first = &server.requests_for("code")[0];
    let user = user_text(first);
    assert!(user.contains("     1\tdef f1(x):\n"), "{}", &user[..300]);
    let marker = user
        .find("[… cut here: ")
        .map(|at| &user[at..])
        .unwrap_or_else(|| panic!("no cut marker: {user}"));
    assert!(
        marker.contains("more lines (")
            && marker.contains("call read_file with path `lib/big.py` and offset="),
        "{marker}"
    );
    // 8 KB of the file, not 100 KB.
    assert!(user.len() < 8 * 1024 + 2048, "{} bytes", user.len());
    let e = &stage_events(&record_dir(&repo, &run_id), "code", "context_files")[0];
    assert_eq!(e["files"][0]["truncated"], true, "{e}");
    assert!(
        e["files"][0]["included"].as_u64().unwrap() <= 8 * 1024,
        "{e}"
    );
}

/// The first request's bytes with and without the named file, for the
/// figures in docs/llamacpp.md (printed; the bound is the caps').
#[test]
fn the_first_request_grows_by_the_named_file_and_no_more() {
    let issue = "# below_zero\n\nImplement `below_zero` in solution.py so it does what its docstring says.\n";
    let mut sizes = Vec::new();
    for extra in ["", "    context_files: off\n"] {
        let repo = TestRepo::with_commit(&[("solution.py", SOLUTION)], "stub");
        let server = finish_server();
        let dir = tempfile::tempdir().unwrap();
        let (code, _) = run_on_fake(&repo, pipeline(dir.path(), extra), issue, &server);
        assert_eq!(code, 0);
        sizes.push(server.requests_for("code")[0].body.to_string().len());
    }
    let (on, off) = (sizes[0], sizes[1]);
    println!(
        "first request with the named file: {on} B; with context_files: off: {off} B; solution.py {} B",
        SOLUTION.len()
    );
    assert!(on > off + SOLUTION.len(), "{on} vs {off}");
    assert!(on < off + SOLUTION.len() + 1024, "{on} vs {off}");
}

#[test]
fn dry_run_shows_the_named_file_in_the_first_message_and_not_when_off() {
    for (extra, shown) in [("", true), ("    context_files: off\n", false)] {
        let repo = repo();
        let server = finish_server();
        let dir = tempfile::tempdir().unwrap();
        let issue = crate::support::write_issue(
            dir.path(),
            "Implement `below_zero` in solution.py; see .env.\n",
        );
        let out = OrchRun::new(pipeline(dir.path(), extra), &repo)
            .issue(&issue)
            .model(&server.base_url, "m")
            .args(["--dry-run", "--json"])
            .output();
        assert_eq!(out.status.code(), Some(0));
        let plan = crate::support::stdout_json(&out);
        let first = plan["stages"][0]["first_message"].as_str().unwrap();
        assert_eq!(
            first.contains("     1\tdef below_zero(operations):\n"),
            shown,
            "{first}"
        );
        assert!(!first.contains("ctx-canary-7d1f0e"), "{first}");
    }
}
