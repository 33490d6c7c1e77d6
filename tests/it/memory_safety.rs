//! Memory against hostile input (issue 25 points 2, 3 and 4, issue 26
//! point 9): checked-in lessons are read from the run's base commit as
//! blobs (a committed symlink is skipped, never followed), redacted like
//! every other request part, and their errors quote no content; lesson
//! text reaches the terminal escaped; a stale `refs/orch/memory.lock` is
//! healed; a stage commit refused for a known secret leaves no object with
//! it in the user's store; a test file run as `python3 test_calc.py` is a
//! test command to the distiller.

use crate::support::{
    FAKE_API_KEY, FakeServer, OrchRun, Reply, Script, TestRepo, orch, record_dir, run_text,
    write_issue, write_pipeline,
};
use serde_json::json;
use std::path::Path;

const ISSUE: &str =
    "# add() subtracts\n\n`calc.add(2, 3)` returns -1 in calc.py; it should return 5.\n";
/// A fake private key: the canary a symlinked lesson points at.
const KEY_CANARY: &str = "CANARYb3BlbnNzaC1rZXktdjEAAAAABG5vbmU";
/// A lesson in HOME a symlinked lesson points at.
const HOME_LESSON: &str = "HOMELESSONCANARY calc add must be injected from HOME";
/// A value in a malformed checked-in lesson, which no error may quote.
const BAD_VALUE: &str = "QUOTEDCANARYVALUE42";

fn run_in(repo: &TestRepo, home: &Path, server: &FakeServer) -> (i32, String) {
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let pipeline = write_pipeline(scratch.path(), "mem", "stages:\n  code:\n    role: coder\n");
    let out = OrchRun::new(&pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .env("HOME", home)
        .env("ORCH_API_KEY", FAKE_API_KEY)
        .output();
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    (
        out.status.code().unwrap_or(-1),
        crate::support::only_run_id(&repo.path),
    )
}

fn all_request_bodies(server: &FakeServer) -> String {
    server
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

fn all_record_text(repo: &TestRepo, run_id: &str) -> String {
    let mut s = String::new();
    for f in crate::support::walk(&record_dir(repo, run_id)) {
        if let Ok(t) = std::fs::read_to_string(&f) {
            s.push_str(&t);
        }
    }
    s
}

#[test]
fn checked_in_lessons_are_redacted_read_as_blobs_and_never_follow_a_symlink() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path().canonicalize().unwrap();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    // Parses as front matter whose unknown key is the key: an error that
    // quotes content would show it.
    std::fs::write(
        home.join(".ssh/id_ed25519"),
        format!("---\n{KEY_CANARY}: x\n---\n"),
    )
    .unwrap();
    std::fs::write(
        home.join("lesson.md"),
        format!(
            "---\nid: \"home-lesson\"\ntitle: \"home\"\nkind: convention\nsummary: \"{HOME_LESSON}\"\n---\n"
        ),
    )
    .unwrap();
    let with_key = format!(
        "---\nid: \"staging-key\"\ntitle: \"staging key\"\nkind: environment\nsummary: \"calc add staging server takes the key {FAKE_API_KEY}\"\n---\n"
    );
    let bad = format!(
        "---\nid: \"bad-kind\"\ntitle: \"bad\"\nkind: {BAD_VALUE}\nsummary: \"calc\"\n---\n"
    );
    let repo = TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            (".orch/memory/staging-key.md", &with_key),
            (".orch/memory/bad-kind.md", &bad),
        ],
        "calc with lessons",
    );
    std::os::unix::fs::symlink(
        home.join(".ssh/id_ed25519"),
        repo.path.join(".orch/memory/key.md"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        home.join("lesson.md"),
        repo.path.join(".orch/memory/home.md"),
    )
    .unwrap();
    repo.commit_all("symlinked lessons");
    let ls = repo.git(&["ls-tree", "HEAD", ".orch/memory/"]);
    assert!(ls.contains("120000"), "{ls}");

    let server = FakeServer::start(
        Script::new().agent("code", vec![Reply::finish("q1", "Nothing to do.", None)]),
    );
    let (code, run_id) = run_in(&repo, &home, &server);
    assert_eq!(code, 0);
    let sent = all_request_bodies(&server);
    assert!(!sent.contains(FAKE_API_KEY), "the key reached the model");
    assert!(
        sent.contains("calc add staging server takes the key [REDACTED]"),
        "{sent}"
    );
    assert!(!sent.contains(KEY_CANARY), "{sent}");
    assert!(!sent.contains("HOMELESSONCANARY"), "{sent}");
    assert!(!sent.contains(BAD_VALUE), "{sent}");

    let record = all_record_text(&repo, &run_id);
    for canary in [KEY_CANARY, "HOMELESSONCANARY", BAD_VALUE, FAKE_API_KEY] {
        assert!(!record.contains(canary), "{canary} in the record");
    }
    // The skipped links and the bad file are named, with a line.
    let actions =
        std::fs::read_to_string(record_dir(&repo, &run_id).join("stages/code/actions.jsonl"))
            .unwrap();
    assert!(actions.contains(".orch/memory/key.md"), "{actions}");
    assert!(actions.contains("symlink"), "{actions}");
    assert!(actions.contains(".orch/memory/bad-kind.md:4"), "{actions}");

    for args in [
        vec!["list"],
        vec!["list", "--json"],
        vec!["list", "--status", "all"],
    ] {
        let (code, out, err) = run_text(
            orch()
                .env("HOME", &home)
                .env("ORCH_API_KEY", FAKE_API_KEY)
                .arg("memory")
                .args(&args)
                .arg("--repo")
                .arg(&repo.path),
        );
        assert_eq!(code, Some(0), "{err}");
        let both = format!("{out}{err}");
        for canary in [KEY_CANARY, "HOMELESSONCANARY", BAD_VALUE, FAKE_API_KEY] {
            assert!(
                !both.contains(canary),
                "{canary} in `memory {args:?}`: {both}"
            );
        }
        assert!(both.contains("staging-key"), "{both}");
        assert!(err.contains(".orch/memory/home.md"), "{err}");
    }
}

#[test]
fn memory_list_and_show_print_a_lessons_escape_sequences_visibly() {
    let lesson = "---\nid: \"calc-style\"\ntitle: \"calc \\e[2J\\e]0;title\\a style\"\nkind: convention\nsummary: \"calc \\e[2J\\e]0;pwned\\a keeps one-line bodies\"\n---\nBody \u{1b}[31mred\u{7}.\n";
    let repo = TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            (".orch/memory/calc-style.md", lesson),
        ],
        "calc with a lesson",
    );
    repo.write(
        ".orch/memory/draft.md",
        "---\nid: \"draft-lesson\"\ntitle: \"d\"\nkind: convention\nsummary: \"calc draft\"\n---\n",
    );
    for args in [
        vec!["list"],
        vec!["list", "--json"],
        vec!["show", "calc-style"],
    ] {
        let out = orch()
            .arg("memory")
            .args(&args)
            .arg("--repo")
            .arg(&repo.path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert!(
            !out.stdout
                .iter()
                .chain(&out.stderr)
                .any(|&b| b == 0x1b || b == 0x07),
            "raw control bytes from `memory {args:?}`: {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("calc-style"), "{text}");
        // A lesson file not committed yet is named, not read.
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(".orch/memory/draft.md is not in the commit at HEAD"),
            "{err}"
        );
        assert!(!text.contains("draft-lesson"), "{text}");
        if args.len() == 1 {
            assert!(text.contains("calc \\e[2J\\e]0;pwned\\x07 keeps"), "{text}");
        }
        if args[0] == "show" {
            assert!(text.contains("Body \\e[31mred\\x07."), "{text}");
        }
    }
}

#[test]
fn a_stale_memory_ref_lock_is_healed_by_the_next_write() {
    let repo = TestRepo::with_commit(&[("calc.py", "x = 1\n")], "calc");
    let (code, _, err) = run_text(
        orch()
            .args(["memory", "add", "calc first lesson", "--repo"])
            .arg(&repo.path),
    );
    assert_eq!(code, Some(0), "{err}");
    // What a kill -9 between libgit2's lock and its rename leaves.
    let lock = repo.path.join(".git/refs/orch/memory.lock");
    std::fs::write(&lock, "0000000000000000000000000000000000000000\n").unwrap();
    let (code, out, err) = run_text(
        orch()
            .args(["memory", "add", "calc second lesson", "--repo"])
            .arg(&repo.path),
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("added: "), "{out}");
    assert!(!lock.exists());
    let log = repo.git(&["log", "--format=%s", "refs/orch/memory"]);
    assert_eq!(log.lines().count(), 2, "{log}");
    let (code, _, err) = run_text(
        orch()
            .args(["memory", "forget", "calc-first-lesson", "--repo"])
            .arg(&repo.path),
    );
    assert_eq!(code, Some(0), "{err}");
}

/// Runs the one-stage pipeline, whose agent writes `creds.py` with the
/// key: the stage is refused for it, and no object of the user's store
/// (`git cat-file --batch-all-objects --batch`) holds the key.
fn assert_refused_and_no_object_holds_the_key(repo: &TestRepo, home: &Path, server: &FakeServer) {
    let (code, run_id) = run_in(repo, home, server);
    assert_eq!(code, 1);
    let state = crate::support::state_json(repo, &run_id);
    let reason = crate::support::stage_record(&state, "code")["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains("refused to commit: creds.py"), "{reason}");
    let all = repo
        .git_command()
        .args(["cat-file", "--batch-all-objects", "--batch"])
        .output()
        .unwrap();
    assert!(all.status.success());
    assert!(
        !String::from_utf8_lossy(&all.stdout).contains(FAKE_API_KEY),
        "an object in the user's store holds the key"
    );
}

#[test]
fn a_stage_commit_refused_for_a_secret_leaves_no_object_holding_it() {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "calc");
    let snapshot = repo.snapshot();
    let objects_before = repo.git(&["cat-file", "--batch-all-objects", "--batch-check"]);
    let home = tempfile::tempdir().unwrap();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call(
                "w1",
                "write_file",
                json!({"path": "creds.py", "content": format!("TOKEN = \"{FAKE_API_KEY}\"\n")}),
            ),
            Reply::finish("f1", "Wrote the token.", None),
        ],
    ));
    assert_refused_and_no_object_holds_the_key(&repo, home.path(), &server);
    // The staged objects were dropped, not parked: no quarantine is left.
    let parked: Vec<_> = std::fs::read_dir(repo.path.join(".git/orch/quarantine"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(parked.is_empty(), "{parked:?}");
    // No blob of the stage's files was added: every new blob is one of
    // orch's records (none holds the file's name as content).
    let objects_after = repo.git(&["cat-file", "--batch-all-objects", "--batch-check"]);
    assert!(objects_after.lines().count() >= objects_before.lines().count());
    snapshot.assert_unchanged(&repo.snapshot());
}

/// Runs a coder whose one `bash` call writes `creds.py` with the key and
/// `git add`s it (`touch` runs between the two), then asserts the stage is
/// refused, no object of the user's store holds the key, the agent's
/// `git add` did run, and the user's repository is unchanged.
fn agent_git_adds_the_key(touch: &str) {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "calc");
    let snapshot = repo.snapshot();
    let home = tempfile::tempdir().unwrap();
    let bash = |id: &str, c: &str| Reply::tool_call(id, "bash", json!({ "command": c }));
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            bash(
                "b1",
                &format!("printf 'TOKEN = \"%s\"\\n' {FAKE_API_KEY} > creds.py && {touch}git add creds.py && git status --short"),
            ),
            Reply::finish("f1", "Staged the token.", None),
        ],
    ));
    assert_refused_and_no_object_holds_the_key(&repo, home.path(), &server);
    // The agent's `git add` did run and write its blob.
    let results = crate::support::tool_results(&server.requests_for("code")[1]);
    assert!(
        results.iter().any(|r| r.contains("A  creds.py")),
        "{results:?}"
    );
    snapshot.assert_unchanged(&repo.snapshot());
}

#[test]
fn a_secret_the_agents_own_git_stages_never_reaches_the_users_store() {
    agent_git_adds_the_key("");
}

/// The same, with the file older than the index the agent's `git add`
/// wrote: git then trusts the index entry and never hashes the file again,
/// so staging must still find the blob the lane's store kept back (it once
/// failed the stage with `git write-tree`'s "invalid object", exit 4,
/// whenever the agent's command crossed a second boundary).
#[test]
fn a_secret_staged_by_the_agent_before_the_index_was_written_is_refused_not_an_error() {
    agent_git_adds_the_key("touch -d '2020-01-01 00:00:00' creds.py && ");
}

#[test]
fn a_python_test_file_failing_twice_then_passing_distills_a_lesson() {
    let repo = TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            (
                "test_calc.py",
                "import calc\nassert calc.add(2, 3) == 5, 'add(2, 3) != 5'\nprint('ok')\n",
            ),
        ],
        "calc with a test",
    );
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no python3");
        return;
    }
    let bash = |id: &str, c: &str| Reply::tool_call(id, "bash", json!({ "command": c }));
    let lesson = json!({"lessons": [{
        "title": "run test_calc.py after editing calc",
        "kind": "fix-pattern",
        "summary": "add() in calc.py is checked by python3 test_calc.py",
        "paths": ["calc.py"], "tags": []
    }]});
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    bash("t1", "python3 test_calc.py"),
                    bash("t2", "python3 test_calc.py"),
                    // A size-changing edit: Python's bytecode cache keys on
                    // size and mtime (a same-size edit in the same second
                    // would run the stale `a - b`, issue 26 point 10).
                    Reply::tool_call(
                        "e1",
                        "edit_file",
                        json!({"path": "calc.py", "old_string": "a - b", "new_string": "(a + b)"}),
                    ),
                    bash("t3", "python3 test_calc.py"),
                    Reply::finish("f1", "add() adds.", None),
                ],
            )
            .agent("code/distill", vec![Reply::text(&lesson.to_string())]),
    );
    let home = tempfile::tempdir().unwrap();
    let (code, run_id) = run_in(&repo, home.path(), &server);
    assert_eq!(code, 0);
    assert_eq!(server.requests_for("code/distill").len(), 1);
    let events = crate::support::stage_events(&record_dir(&repo, &run_id), "code", "distill");
    assert_eq!(events[0]["key_event"], "tests_fixed", "{events:?}");
    assert_eq!(
        events[0]["what"],
        "the test command `python3 test_calc.py` failed 2 times, then `python3 test_calc.py` passed"
    );
    let shown = repo.git(&["log", "--format=%s", "refs/orch/memory"]);
    assert!(
        shown.contains("memory: propose run-test-calc-py-after-editing-calc"),
        "{shown}"
    );
}
