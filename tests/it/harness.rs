//! Checks of the test harness itself, so other tests can trust it.

use crate::support::{TestRepo, orch};

#[test]
fn harness_repo_commits_are_reproducible() {
    let a = TestRepo::new();
    let b = TestRepo::new();
    for repo in [&a, &b] {
        repo.write("src/lib.rs", "pub fn f() {}\n");
    }
    let sha_a = a.commit_all("init");
    assert_eq!(
        sha_a,
        b.commit_all("init"),
        "fixed dates and identity give fixed SHAs"
    );
    assert_eq!(
        a.git(&["log", "-1", "--format=%an <%ae> %at"]).trim(),
        "Orch Test <orch-test@example.invalid> 1704067200"
    );
    assert_eq!(a.git(&["symbolic-ref", "HEAD"]).trim(), "refs/heads/main");
}

#[test]
fn harness_snapshot_sees_every_kind_of_change() {
    let repo = TestRepo::new();
    repo.write("a.txt", "one\n");
    repo.write("dir/b.txt", "two\n");
    repo.commit_all("init");
    repo.write("a.txt", "dirty\n");
    repo.write("untracked.txt", "new\n");
    let before = repo.snapshot();
    assert_eq!(before, repo.snapshot(), "taking a snapshot changes nothing");
    assert_eq!(before.head_ref, "refs/heads/main");
    assert!(
        before.status.contains(" M a.txt") && before.status.contains("?? untracked.txt"),
        "{}",
        before.status
    );
    assert_eq!(before.files["dir/b.txt"], b"two\n");
    assert!(!before.files.keys().any(|p| p.starts_with(".git")));

    repo.git(&["add", "untracked.txt"]);
    let staged = repo.snapshot();
    assert!(
        staged
            .differences(&before)
            .iter()
            .any(|d| d.starts_with("index"))
    );

    repo.git(&["checkout", "-q", "-b", "other"]);
    let moved = repo.snapshot();
    assert!(
        staged
            .differences(&moved)
            .iter()
            .any(|d| d.starts_with("HEAD ref"))
    );

    repo.write("dir/b.txt", "changed\n");
    let changed = repo.snapshot();
    assert!(
        moved
            .differences(&changed)
            .contains(&"file changed: dir/b.txt".to_owned())
    );
    let result = std::panic::catch_unwind(|| moved.assert_unchanged(&changed));
    assert!(result.is_err(), "assert_unchanged must fail on a change");
}

#[test]
fn harness_orch_command_has_a_clean_environment() {
    let cmd = orch();
    let envs: Vec<(String, Option<String>)> = cmd
        .get_envs()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.map(|v| v.to_string_lossy().into_owned()),
            )
        })
        .collect();
    let get = |name: &str| {
        envs.iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.clone())
    };
    assert_eq!(get("CI").as_deref(), Some("true"));
    assert!(get("ORCH_LOG").is_none());
    let home = get("HOME").expect("HOME set");
    assert!(std::path::Path::new(&home).is_dir());
    assert_ne!(Some(home), std::env::var("HOME").ok());
    assert!(std::path::Path::new(&get("ORCH_CONFIG_DIR").expect("config dir set")).is_dir());
    let out = orch().output().expect("run orch");
    // The binary may be a placeholder; it must at least start and exit.
    assert!(out.status.code().is_some());
}
