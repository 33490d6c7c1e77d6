//! Tests of the lane watcher against real repositories and real shell
//! processes: the tree git stages from the watcher's marks
//! (`git add -A -- <marked paths>`) must be exactly the tree a full
//! `git add -A` of the same lane gives — git is the oracle.

use std::path::{Path, PathBuf};
use std::process::Command;

use proptest::prelude::*;

use super::testutil::TestRepo;
use super::watch::LaneWatch;
use super::*;

/// A repository with executables, a symlink, nested directories and a
/// tracked file that `.gitignore` ignores, and one lane at its `HEAD`.
struct Fixture {
    repo: TestRepo,
    lane: PathBuf,
    base: CommitId,
}

fn fixture() -> Fixture {
    let repo = TestRepo::new();
    repo.write("exe.sh", "#!/bin/sh\necho hi\n");
    repo.write("a/f", "a f\n");
    repo.write("a/b/g.txt", "g\n");
    repo.write("ign/tracked.log", "tracked but ignored\n");
    repo.write("ign/other", "other\n");
    std::os::unix::fs::symlink("README.md", repo.path.join("lnk")).expect("symlink");
    sh(&repo.path, "chmod +x exe.sh");
    repo.git(&["add", "-A"]);
    repo.git(&["add", "-f", "ign/tracked.log"]);
    repo.git(&["commit", "-q", "-m", "more"]);
    let info = open_repo(&repo.path).expect("open");
    let base = Repo::at(&info.common_dir)
        .resolve_commit("HEAD")
        .expect("HEAD");
    let lane = info.common_dir.join("orch/worktrees/lane");
    Repo::at(&info.common_dir)
        .create_worktree("lane", &lane, &base)
        .expect("lane");
    Fixture { repo, lane, base }
}

fn sh(dir: &Path, script: &str) {
    let status = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .status()
        .expect("run sh");
    assert!(status.success(), "sh -c {script:?} failed");
}

const PATHS: &[&str] = &[
    "f",
    "g.txt",
    "x.log",
    "a",
    "a/f",
    "a/b",
    "a/b/g.txt",
    "src",
    "src/lib.rs",
    "src/old.rs",
    "README.md",
    "n",
    "n/m/k",
    "target/o",
    "ign/tracked.log",
    "ign",
    "exe.sh",
    "lnk",
];

/// One shell operation on the lane; failures (a parent that is a file…)
/// are part of the game.
fn op_script(op: u8, p: &str, q: &str) -> String {
    let mk = |x: &str| format!("mkdir -p \"$(dirname {x})\" 2>/dev/null");
    match op {
        0 => format!("{}; printf 'new %s\\n' $$ > {p}", mk(p)),
        1 => format!("printf 'more\\n' >> {p}"),
        2 => format!("rm -rf {p}"),
        3 => format!("{}; mv {p} {q}", mk(q)),
        4 => format!("[ -f {p} ] && chmod +x {p}"),
        5 => format!("[ -f {p} ] && chmod -x {p}"),
        6 => format!("{}; ln -sfn {q} {p}", mk(p)),
        7 => format!("mkdir -p {p}"),
        8 => format!("rm -rf {p} && mkdir -p {p} && printf 'in\\n' > {p}/inner"),
        9 => format!("printf '{q}\\n' >> .gitignore"),
        10 => format!("touch {p}"),
        11 => format!("mkdir -p {p}/q/r && printf z > {p}/q/r/z && rm -rf {p}/q"),
        12 => "printf 'again\\n' >> ign/tracked.log".to_owned(),
        13 => format!("{}; printf 'ignored\\n' > {p}.log", mk(p)),
        14 => format!("mkdir -p {p}/deep/er && printf d > {p}/deep/er/file && mv {p}/deep {q}"),
        15 => format!(
            "printf '!{q}\\n' > {}/.gitignore",
            if p.contains('/') { "a" } else { "." }
        ),
        _ => format!(
            "rm -f {p} && mkdir -p {p}/x && printf y > {p}/x/y && rm -rf {p} && printf back > {p}"
        ),
    }
}

/// Runs `ops` in the lane, then stages it from the watcher's marks and
/// checks the tree against git's own full `git add -A && git write-tree`
/// of the same lane, commits it and checks the lane clean. Returns the new
/// commit and whether the marked paths were staged (not the whole lane).
fn round(
    fx: &Fixture,
    watch: &LaneWatch,
    parent: &CommitId,
    ops: &[(u8, usize, usize)],
) -> (CommitId, bool) {
    for &(op, p, q) in ops {
        let script = op_script(op, PATHS[p % PATHS.len()], PATHS[q % PATHS.len()]);
        sh(&fx.lane, &format!("{{ {script}; }} 2>/dev/null; true"));
    }
    let marks = watch.changes().expect("the record is complete");
    assert_eq!(marks.base, *parent);
    let (tree, how) = stage_tree(&fx.lane, parent, Some(&marks)).expect("stage");
    // The oracle: git itself, staging the whole lane.
    git_in(&fx.lane, &["add", "-A"]);
    let oracle = git_in(&fx.lane, &["write-tree"]).trim().to_owned();
    assert_eq!(tree, oracle, "trees after {ops:?} ({how:?})");
    let commit = Repo::of_lane(&fx.lane)
        .and_then(|repo| repo.commit_tree(&fx.lane, "from marks", parent, &tree))
        .expect("commit");
    assert_eq!(
        changed_paths(&fx.lane).expect("status"),
        Vec::<String>::new(),
        "after {ops:?}"
    );
    assert!(watch.restart(&commit), "restart");
    (commit, matches!(how, super::Staged::Paths(_)))
}

fn ops() -> impl Strategy<Value = Vec<(u8, usize, usize)>> {
    prop::collection::vec((0u8..17, 0..PATHS.len(), 0..PATHS.len()), 1..20)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn commit_from_marks_equals_add_all(first in ops(), second in ops()) {
        let fx = fixture();
        let common = fx.repo.git_dir();
        let watch = LaneWatch::start(&fx.lane, &common, &fx.base).expect("watch");
        let (c1, _) = round(&fx, &watch, &fx.base, &first);
        round(&fx, &watch, &c1, &second);
    }
}

#[test]
fn a_file_replaced_by_a_directory_and_back_and_moves_between_rounds() {
    let fx = fixture();
    let watch = LaneWatch::start(&fx.lane, &fx.repo.git_dir(), &fx.base).expect("watch");
    let (c1, narrow) = round(&fx, &watch, &fx.base, &[(8, 4, 0), (14, 11, 5), (3, 3, 11)]);
    assert!(narrow, "the marked paths were staged, not the whole lane");
    // Round two changes files inside directories that were created or moved
    // in round one: they must have been given watches by the restart.
    let (c2, narrow) = round(&fx, &watch, &c1, &[(1, 12, 0), (0, 4, 0), (1, 6, 0)]);
    assert!(narrow, "the marked paths were staged, not the whole lane");
    let files = fx.repo.git(&["ls-tree", "-r", "--name-only", &c2]);
    assert!(
        files.contains("n/a/inner") || files.contains("n/"),
        "{files}"
    );
}

#[test]
fn watchers_dropped_together_are_all_stopped_when_it_returns() {
    let fx = fixture();
    let watches: Vec<std::sync::Arc<LaneWatch>> = (0..3)
        .map(|_| {
            let w = LaneWatch::start(&fx.lane, &fx.repo.git_dir(), &fx.base).expect("watch");
            std::sync::Arc::new(w)
        })
        .collect();
    let weak: Vec<_> = watches.iter().map(std::sync::Arc::downgrade).collect();
    super::watch::drop_together(watches);
    assert!(weak.iter().all(|w| w.upgrade().is_none()));
}

#[test]
fn an_incomplete_record_gives_no_changes_and_does_not_restart() {
    let fx = fixture();
    let watch = LaneWatch::start(&fx.lane, &fx.repo.git_dir(), &fx.base).expect("watch");
    sh(&fx.lane, "echo x > new.txt");
    assert!(watch.changes().is_some());
    watch.mark_incomplete("test hook");
    assert_eq!(watch.changes(), None);
    assert!(!watch.restart(&fx.base));
}

#[test]
fn a_nested_repository_or_attributes_make_the_record_incomplete() {
    let fx = fixture();
    let watch = LaneWatch::start(&fx.lane, &fx.repo.git_dir(), &fx.base).expect("watch");
    sh(
        &fx.lane,
        "mkdir -p a/sub && git init -q a/sub && echo x > a/sub/x && git -C a/sub add x \
         && git -C a/sub -c user.name=u -c user.email=u@e commit -qm one",
    );
    // `a/sub` is new: marked whole, and git stages it as a gitlink.
    let marks = watch.changes().expect("complete");
    let (tree, _) = stage_tree(&fx.lane, &fx.base, Some(&marks)).expect("stage");
    git_in(&fx.lane, &["add", "-A"]);
    assert_eq!(tree, git_in(&fx.lane, &["write-tree"]).trim());
    let listed = git_in(&fx.lane, &["ls-files", "-s", "a/sub"]);
    assert!(listed.starts_with("160000 "), "a gitlink: {listed}");
    reset_worktree(&fx.lane, &fx.base).expect("reset");
    let watch = LaneWatch::start(&fx.lane, &fx.repo.git_dir(), &fx.base).expect("watch");
    sh(&fx.lane, "git init -q a/b");
    assert_eq!(watch.changes(), None);
    sh(&fx.lane, "rm -rf a/b/.git a/sub");
    let watch = LaneWatch::start(&fx.lane, &fx.repo.git_dir(), &fx.base).expect("watch");
    sh(&fx.lane, "echo '* text=auto' > .gitattributes");
    assert_eq!(watch.changes(), None);
    sh(&fx.lane, "rm .gitattributes");
    let watch = LaneWatch::start(&fx.lane, &fx.repo.git_dir(), &fx.base).expect("watch");
    sh(&fx.lane, "ln a/f a/b/linked");
    assert_eq!(watch.changes(), None);
}

/// `git -C lane args…` output; panics on failure.
fn git_in(lane: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(lane)
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
