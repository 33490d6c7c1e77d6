//! Tests of the lane watcher against real repositories and real shell
//! processes: the tree committed from the watcher's marks must be exactly
//! the tree `git add -A` (`commit_all`) gives.

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
    base: String,
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
    let base = resolve_commit(&info.common_dir, "HEAD").expect("HEAD");
    let lane = info.common_dir.join("orch/worktrees/lane");
    create_worktree(&info.common_dir, "lane", &lane, "orch-lanes/t/1", &base).expect("lane");
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

/// Runs `ops` in the lane, then checks the marks against `commit_all`:
/// the tree from the marks, the changed paths, and (committing from the
/// marks) a clean status afterwards with the index `commit_all` would
/// leave. Returns the new commit.
fn round(fx: &Fixture, watch: &LaneWatch, parent: &str, ops: &[(u8, usize, usize)]) -> String {
    for &(op, p, q) in ops {
        let script = op_script(op, PATHS[p % PATHS.len()], PATHS[q % PATHS.len()]);
        sh(&fx.lane, &format!("{{ {script}; }} 2>/dev/null; true"));
    }
    let marks = watch.changes().expect("the record is complete");
    assert_eq!(marks.base, parent);
    let edits = resolve_marks(&fx.lane, &marks)
        .expect("resolve")
        .expect("the marks can be trusted");
    let walked = changed_paths(&fx.lane).expect("status");
    assert_eq!(edits.paths(), walked, "changed paths after {ops:?}");
    let commit = commit_edits(&fx.lane, "from marks", parent, &edits).expect("commit edits");
    // The lane is clean at the commit (files and index), and `git add -A`
    // of it adds nothing more.
    assert_eq!(
        changed_paths(&fx.lane).expect("status"),
        Vec::<String>::new(),
        "after {ops:?}"
    );
    let again = commit_all(&fx.lane, "walked", &commit).expect("commit all");
    let tree = |c: &str| fx.repo.rev(&format!("{c}^{{tree}}"));
    assert_eq!(tree(&again), tree(&commit), "trees after {ops:?}");
    assert!(watch.restart(&again), "restart");
    again
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
        let c1 = round(&fx, &watch, &fx.base, &first);
        round(&fx, &watch, &c1, &second);
    }
}

#[test]
fn a_file_replaced_by_a_directory_and_back_and_moves_between_rounds() {
    let fx = fixture();
    let watch = LaneWatch::start(&fx.lane, &fx.repo.git_dir(), &fx.base).expect("watch");
    let c1 = round(&fx, &watch, &fx.base, &[(8, 4, 0), (14, 11, 5), (3, 3, 11)]);
    // Round two changes files inside directories that were created or moved
    // in round one: they must have been given watches by the restart.
    let c2 = round(&fx, &watch, &c1, &[(1, 12, 0), (0, 4, 0), (1, 6, 0)]);
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
    sh(&fx.lane, "mkdir -p a/sub && git init -q a/sub");
    // `a/sub` is new: walked whole, where its `.git` is found.
    let marks = watch.changes().expect("complete");
    assert_eq!(resolve_marks(&fx.lane, &marks).expect("resolve"), None);
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

/// Commits the changes of `script` in the fixture's lane from its marks.
fn commit_from_marks(fx: &Fixture, parent: &str, script: &str) -> String {
    let watch = LaneWatch::start(&fx.lane, &fx.repo.git_dir(), parent).expect("watch");
    sh(&fx.lane, script);
    let marks = watch.changes().expect("the record is complete");
    let edits = resolve_marks(&fx.lane, &marks)
        .expect("resolve")
        .expect("the marks can be trusted");
    commit_edits(&fx.lane, "from marks", parent, &edits).expect("commit edits")
}

const CHANGES: &str = "echo new > new.txt && echo more >> a/f && rm a/b/g.txt && chmod -x exe.sh \
    && rm lnk && mkdir lnk && echo in > lnk/inner && echo again >> ign/tracked.log";

#[test]
fn a_commit_from_marks_leaves_a_pending_index_that_applying_brings_to_head() {
    let fx = fixture();
    let commit = commit_from_marks(&fx, &fx.base, CHANGES);
    assert_eq!(fx.repo.rev(&format!("{commit}^")), fx.base);
    assert!(has_pending_index(&fx.lane).expect("pending"));
    // Not written yet: the index still holds the base's entries.
    assert_ne!(git_in(&fx.lane, &["diff-index", "--cached", "HEAD"]), "");
    apply_pending_index(&fx.lane).expect("apply");
    assert!(!has_pending_index(&fx.lane).expect("pending"));
    assert_eq!(git_in(&fx.lane, &["diff-index", "--cached", "HEAD"]), "");
    assert_eq!(git_in(&fx.lane, &["status", "--porcelain"]), "");
    // Applying again (no record) changes nothing.
    apply_pending_index(&fx.lane).expect("apply again");
    assert_eq!(git_in(&fx.lane, &["diff-index", "--cached", "HEAD"]), "");
}

#[test]
fn a_lost_pending_record_leaves_a_stale_index_that_the_walk_repairs() {
    let fx = fixture();
    let commit = commit_from_marks(&fx, &fx.base, CHANGES);
    let record = super::ignored::lane_admin_dir(&fx.lane)
        .expect("admin dir")
        .join("orch-index-pending");
    std::fs::remove_file(&record).expect("lose the record");
    assert_ne!(git_in(&fx.lane, &["diff-index", "--cached", "HEAD"]), "");
    // What a pool's take without a stamp does: the walk finds the stale
    // paths and checks them out again, index entries included.
    assert!(matches!(
        move_worktree(&fx.lane, &commit).expect("move"),
        Moved::Done { .. }
    ));
    assert_eq!(git_in(&fx.lane, &["diff-index", "--cached", "HEAD"]), "");
    assert_eq!(
        git_in(
            &fx.lane,
            &["status", "--porcelain", "--untracked-files=all"]
        ),
        ""
    );
    assert_eq!(git_in(&fx.lane, &["diff", "HEAD", "--stat"]), "");
    assert_eq!(
        std::fs::read_to_string(fx.lane.join("a/f")).expect("a/f"),
        "a f\nmore\n"
    );
    // A hard reset rewrites the whole index: the record goes with it.
    commit_from_marks(&fx, &commit, "echo again > new2.txt");
    assert!(has_pending_index(&fx.lane).expect("pending"));
    reset_worktree(&fx.lane, &fx.base).expect("reset");
    assert!(!has_pending_index(&fx.lane).expect("pending"));
    assert_eq!(git_in(&fx.lane, &["diff-index", "--cached", "HEAD"]), "");
}

/// The hand-back's seal ([`seal::clean_marked`]) from a watcher's history
/// over two committed rounds, then `junk` left uncommitted but ignored:
/// afterwards the lane holds exactly its `HEAD` (nothing ignored or
/// untracked left, the index at `HEAD`), as a full status walk sees it.
fn seal_case(first: &[(u8, usize, usize)], second: &[(u8, usize, usize)], junk: &[usize]) {
    let fx = fixture();
    let common = fx.repo.git_dir();
    let watch = LaneWatch::start(&fx.lane, &common, &fx.base).expect("watch");
    watch.keep_history();
    let c1 = round(&fx, &watch, &fx.base, first);
    let c2 = round(&fx, &watch, &c1, second);
    for &p in junk {
        // Ignored by the fixture's `*.log` and `target/`, in old and new
        // directories alike.
        let p = PATHS[p % PATHS.len()];
        let script = op_script(13, p, p);
        sh(
            &fx.lane,
            &format!(
                "{{ {script}; mkdir -p target/{p} && printf o > target/{p}/o; }} 2>/dev/null; true"
            ),
        );
    }
    let marks = watch.since_start().expect("the history is complete");
    let removed = seal::clean_marked(&fx.lane, &c2, &marks)
        .expect("seal")
        .unwrap_or_else(|why| panic!("refused after {first:?} / {second:?} / {junk:?}: {why}"));
    // What the next taker's readying does with the record the seal left.
    apply_pending_index(&fx.lane).expect("apply");
    let status = git_in(
        &fx.lane,
        &[
            "status",
            "--porcelain",
            "--ignored",
            "--untracked-files=all",
        ],
    );
    assert_eq!(status, "", "after {first:?} / {second:?} / {junk:?}");
    assert_eq!(git_in(&fx.lane, &["diff-index", "--cached", "HEAD"]), "");
    if !junk.is_empty() {
        assert!(removed > 0, "the junk was removed");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_lane_sealed_from_its_watcher_history_holds_exactly_head(
        first in ops(),
        second in ops(),
        junk in prop::collection::vec(0..PATHS.len(), 0..4),
    ) {
        seal_case(&first, &second, &junk);
    }
}

#[test]
fn a_seal_removes_what_a_restart_folded_into_the_history() {
    // Ignored output of the first record only: the second record is empty,
    // so only the history knows of it.
    seal_case(&[(13, 0, 0), (0, 13, 0)], &[(1, 1, 0)], &[]);
    let fx = fixture();
    let watch = LaneWatch::start(&fx.lane, &fx.repo.git_dir(), &fx.base).expect("watch");
    watch.keep_history();
    sh(
        &fx.lane,
        "mkdir -p target/deep && echo o > target/deep/o && echo l > a/x.log",
    );
    assert!(watch.restart(&fx.base), "restart");
    let marks = watch.since_start().expect("complete");
    assert!(marks.whole.contains(b"target".as_slice()), "{marks:?}");
    assert!(marks.paths.contains(b"a/x.log".as_slice()), "{marks:?}");
    assert_eq!(
        seal::clean_marked(&fx.lane, &fx.base, &marks).expect("seal"),
        Ok(2)
    );
    assert!(!fx.lane.join("target").exists() && !fx.lane.join("a/x.log").exists());
}

#[test]
fn a_seal_refuses_a_tracked_change_a_moved_head_and_a_watcher_without_history() {
    let fx = fixture();
    let watch = LaneWatch::start(&fx.lane, &fx.repo.git_dir(), &fx.base).expect("watch");
    assert_eq!(watch.since_start(), None, "no history kept");
    watch.keep_history();
    sh(&fx.lane, "echo edited >> a/f && echo o > x.log");
    let marks = watch.since_start().expect("complete");
    let refused = seal::clean_marked(&fx.lane, &fx.base, &marks).expect("seal");
    assert!(
        refused.as_ref().is_err_and(|w| w.contains("a/f")),
        "{refused:?}"
    );
    assert_eq!(
        std::fs::read_to_string(fx.lane.join("a/f")).expect("a/f"),
        "a f\nedited\n",
        "a tracked file is never touched"
    );
    let other = fx.repo.rev("HEAD~1");
    let refused = seal::clean_marked(&fx.lane, &other, &marks).expect("seal");
    assert!(refused.is_err_and(|w| w.contains("HEAD")));
    watch.mark_incomplete("test");
    assert_eq!(watch.since_start(), None, "an incomplete record");
}
