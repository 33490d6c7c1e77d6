//! Tests of the git layer against real repositories in temp dirs.

use std::fs;
use std::path::{Path, PathBuf};

use super::testutil::{TestRepo, write_file};
use super::*;

/// A run's worktree, created at the user's HEAD as orch does it.
struct Run {
    name: String,
    path: PathBuf,
    base: CommitId,
}

fn start_run(repo: &TestRepo, run_id: &str) -> Run {
    let info = open_repo(&repo.path).expect("open repo");
    let base = Repo::at(&info.common_dir)
        .resolve_commit("HEAD")
        .expect("resolve HEAD");
    let path = info.common_dir.join("orch/worktrees").join(run_id);
    Repo::at(&info.common_dir)
        .create_worktree(run_id, &path, &base)
        .expect("create worktree");
    Run {
        name: run_id.to_string(),
        path,
        base,
    }
}

fn tree_files(repo: &TestRepo, rev: &str) -> Vec<String> {
    repo.git(&["ls-tree", "-r", "--name-only", rev])
        .lines()
        .map(str::to_string)
        .collect()
}

fn show(repo: &TestRepo, rev_path: &str) -> String {
    repo.git(&["show", rev_path])
}

fn assert_fsck_clean(repo: &TestRepo) {
    let out = repo
        .git_cmd(&repo.path, &["fsck", "--full", "--strict"])
        .output()
        .expect("run fsck");
    assert!(
        out.status.success(),
        "fsck: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("error"), "fsck: {stderr}");
}

// ---------------------------------------------------------------- open_repo

#[test]
fn open_repo_from_a_subdirectory_finds_the_top() {
    let repo = TestRepo::new();
    let info = open_repo(&repo.path.join("src")).expect("open");
    assert_eq!(info.workdir, repo.path);
    assert_eq!(info.common_dir, repo.git_dir());
}

#[test]
fn open_repo_in_a_linked_worktree_reports_the_main_common_dir() {
    let repo = TestRepo::new();
    let linked = repo.root().join("linked");
    let linked_str = linked.to_string_lossy().into_owned();
    repo.git(&["worktree", "add", "-q", "-b", "side", &linked_str]);
    let linked = fs::canonicalize(&linked).expect("canonical");
    let info = open_repo(&linked.join("src")).expect("open");
    assert_eq!(info.workdir, linked);
    assert_eq!(info.common_dir, repo.git_dir());
    // Given the linked worktree itself, HEAD is that worktree's HEAD.
    repo.git_in(
        &linked,
        &["commit", "-q", "--allow-empty", "-m", "side work"],
    );
    let side = Repo::at(&linked).resolve_commit("HEAD").expect("resolve");
    assert_eq!(side, repo.rev("side"));
    assert_eq!(
        Repo::at(&info.common_dir)
            .resolve_commit("HEAD")
            .expect("resolve"),
        repo.rev("main")
    );
}

#[test]
fn open_repo_outside_any_repository_says_how_to_fix_it() {
    let dir = tempfile::TempDir::new().expect("temp");
    let err = open_repo(dir.path()).expect_err("not a repo");
    assert!(matches!(err, GitError::NotARepo { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.starts_with("open a git repository at "), "{msg}");
    assert!(
        msg.ends_with(
            ": not a git repository (orch works on one: run it inside, or name it with --repo DIR)"
        ),
        "{msg}"
    );
}

#[test]
fn open_repo_refuses_a_repository_without_commits() {
    let repo = TestRepo::empty();
    let err = open_repo(&repo.path).expect_err("no commits");
    assert!(matches!(err, GitError::NoCommits { .. }), "{err:?}");
    assert!(
        err.to_string()
            .ends_with("has no commits yet; commit something first"),
        "{err}"
    );
}

#[test]
fn open_repo_refuses_a_bare_repository() {
    let repo = TestRepo::new();
    let bare = repo.root().join("bare.git");
    let bare_str = bare.to_string_lossy().into_owned();
    repo.git(&["clone", "-q", "--bare", ".", &bare_str]);
    let err = open_repo(&bare).expect_err("bare");
    assert!(matches!(err, GitError::BareRepo { .. }), "{err:?}");
}

// ----------------------------------------------------------- resolve_commit

#[test]
fn resolve_commit_understands_head_branches_tags_and_short_shas() {
    let repo = TestRepo::new();
    let first = repo.rev("HEAD");
    repo.git(&["tag", "-a", "v1", "-m", "release"]);
    repo.git(&["commit", "-q", "--allow-empty", "-m", "second"]);
    repo.git(&["branch", "feature", &first]);
    let second = repo.rev("HEAD");
    let dir = repo.git_dir();
    assert_eq!(Repo::at(&dir).resolve_commit("HEAD").expect("HEAD"), second);
    assert_eq!(Repo::at(&dir).resolve_commit("main").expect("main"), second);
    assert_eq!(
        Repo::at(&dir).resolve_commit("feature").expect("feature"),
        first
    );
    assert_eq!(
        Repo::at(&dir).resolve_commit("v1").expect("annotated tag"),
        first
    );
    assert_eq!(
        Repo::at(&dir)
            .resolve_commit(&first[..8])
            .expect("short sha"),
        first
    );
    assert_eq!(
        Repo::at(&dir).resolve_commit(&first).expect("full sha"),
        first
    );
    assert_eq!(
        Repo::at(&dir).resolve_commit("HEAD~1").expect("HEAD~1"),
        first
    );

    let err = Repo::at(&dir)
        .resolve_commit("no-such-branch")
        .expect_err("unknown");
    assert!(matches!(&err, GitError::Resolve { rev, .. } if rev == "no-such-branch"));
    assert!(err.to_string().contains("`no-such-branch`"), "{err}");
    let missing = "0123456789abcdef0123456789abcdef01234567";
    let err = Repo::at(&dir)
        .resolve_commit(missing)
        .expect_err("missing object");
    assert!(err.to_string().contains(missing), "{err}");
}

// ------------------------------------------------- the whole run, end to end

#[test]
fn a_run_commits_every_stage_and_never_touches_the_users_tree() {
    let repo = TestRepo::new();
    // The user is mid-work: a modified tracked file, a staged change, an
    // untracked file, an ignored file.
    repo.write("README.md", "# demo\nuser edit, not staged\n");
    repo.write("staged.txt", "staged by the user\n");
    repo.git(&["add", "staged.txt"]);
    repo.write("notes.txt", "untracked user notes\n");
    repo.write("debug.log", "ignored user log\n");
    let before = repo.snapshot();

    let run = start_run(&repo, "01RUN");
    let info = open_repo(&repo.path).expect("open");
    let common = &info.common_dir;
    // The worktree starts at the base commit, without the user's dirty state.
    assert!(!run.path.join("staged.txt").exists());
    assert!(!run.path.join("notes.txt").exists());
    assert_eq!(
        fs::read_to_string(run.path.join("README.md")).expect("read"),
        "# demo\n"
    );
    assert_eq!(repo.rev_in(&run.path, "HEAD"), run.base);

    // Stage "code": a new file, a modified file, a deleted file, a file made by
    // a shell command, and an ignored file.
    write_file(&run.path.join("src/new.rs"), "pub fn two() -> u32 { 2 }\n");
    write_file(
        &run.path.join("src/lib.rs"),
        "pub fn one() -> u32 {\n    1 + 0\n}\n",
    );
    fs::remove_file(run.path.join("src/old.rs")).expect("delete");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg("mkdir -p gen && echo generated > gen/out.txt && echo noise > build.log")
        .current_dir(&run.path)
        .status()
        .expect("sh");
    assert!(status.success());
    write_file(
        &run.path.join("target/debug/app"),
        "binary-ish build output\n",
    );

    let message = "code: resolve the issue\n\nOrch-Stage: code\nOrch-Role: coder\n";
    let code = commit_all(&run.path, message, &run.base).expect("commit code");
    assert_eq!(repo.rev(&format!("{code}^")), run.base);
    assert_eq!(
        tree_files(&repo, &code),
        [
            ".gitignore",
            "README.md",
            "gen/out.txt",
            "src/lib.rs",
            "src/new.rs"
        ]
    );
    assert_eq!(
        show(&repo, &format!("{code}:src/lib.rs")),
        "pub fn one() -> u32 {\n    1 + 0\n}\n"
    );
    assert_eq!(show(&repo, &format!("{code}:gen/out.txt")), "generated\n");
    Repo::at(common)
        .set_branch("orch/01RUN/code", &code)
        .expect("stage branch");

    // The worktree's HEAD is detached at the commit, and git sees it clean.
    assert_eq!(repo.rev_in(&run.path, "HEAD"), code);
    assert!(
        repo.git_cmd(&run.path, &["symbolic-ref", "-q", "HEAD"])
            .status()
            .unwrap()
            .code()
            == Some(1)
    );
    assert_eq!(repo.git_in(&run.path, &["status", "--porcelain"]), "");
    let author = repo.git(&["log", "-1", "--format=%an <%ae>|%cn <%ce>", &code]);
    assert_eq!(
        author.trim(),
        "Test User <test@example.com>|Test User <test@example.com>"
    );
    assert_eq!(
        Repo::at(common)
            .commit_message_trailers(&code)
            .expect("trailers"),
        [
            ("Orch-Stage".to_string(), "code".to_string()),
            ("Orch-Role".to_string(), "coder".to_string())
        ]
    );

    // Stage "review" changes nothing and still gets its own commit.
    let review = commit_all(&run.path, "review: approve", &code).expect("commit review");
    assert_ne!(review, code);
    assert_eq!(repo.rev(&format!("{review}^")), code);
    assert_eq!(
        repo.rev(&format!("{review}^{{tree}}")),
        repo.rev(&format!("{code}^{{tree}}"))
    );
    Repo::at(common)
        .set_branch("orch/01RUN/review", &review)
        .expect("stage branch");
    assert_eq!(repo.rev_in(&run.path, "HEAD"), review);

    assert_eq!(
        Repo::at(common).list_branches("orch/01RUN/").expect("list"),
        [
            ("orch/01RUN/code".to_string(), code.clone()),
            ("orch/01RUN/review".to_string(), review.clone()),
        ]
    );

    let d = Repo::at(common)
        .diff(&run.base, &review, 1 << 20)
        .expect("diff");
    assert!(!d.truncated);
    assert_eq!(d.stat.files_changed, 4);
    let numstat = repo.git(&["diff", "--numstat", &run.base, &review]);
    let (ins, del) = numstat.lines().fold((0, 0), |(i, d), line| {
        let mut parts = line.split_whitespace();
        let a: usize = parts.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        let b: usize = parts.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        (i + a, d + b)
    });
    assert_eq!((d.stat.insertions, d.stat.deletions), (ins, del));
    assert!(
        d.patch.contains("diff --git a/src/old.rs b/src/old.rs\n"),
        "{}",
        d.patch
    );
    assert!(d.patch.contains("+    1 + 0\n"));

    // git agrees the repository and the worktree are sound.
    assert_fsck_clean(&repo);
    let list = repo.git(&["worktree", "list", "--porcelain"]);
    let run_path = run.path.to_string_lossy();
    assert!(list.contains(&format!("worktree {run_path}\n")), "{list}");
    assert!(list.contains("detached\n"), "{list}");
    assert!(!list.contains("prunable"), "{list}");

    // The user's HEAD, index, files and status are exactly as they were.
    assert_eq!(repo.snapshot(), before);

    Repo::at(common)
        .remove_worktree(&run.name, &run.path)
        .expect("remove");
    assert!(!run.path.exists());
    assert!(!repo.git_dir().join("worktrees").join(&run.name).exists());
    let list = repo.git(&["worktree", "list", "--porcelain"]);
    assert!(!list.contains(&*run_path), "{list}");
    // Branches outlive the worktree.
    assert_eq!(
        Repo::at(common)
            .branch_sha("orch/01RUN/code")
            .expect("code"),
        Some(code)
    );
    assert_fsck_clean(&repo);
    assert_eq!(repo.snapshot(), before);
    // Removing it again is a no-op.
    Repo::at(common)
        .remove_worktree(&run.name, &run.path)
        .expect("remove twice");
}

#[test]
fn commit_all_falls_back_to_the_orch_identity() {
    let repo = TestRepo::new();
    repo.git(&["config", "--unset", "user.name"]);
    repo.git(&["config", "--unset", "user.email"]);
    let run = start_run(&repo, "nobody");
    let sha = commit_all(&run.path, "stage", &run.base).expect("commit");
    let who = repo.git(&["log", "-1", "--format=%an <%ae>|%cn <%ce>", &sha]);
    assert_eq!(who.trim(), "orch <orch@localhost>|orch <orch@localhost>");
}

#[test]
fn commit_all_takes_the_parent_it_is_given() {
    let repo = TestRepo::new();
    let run = start_run(&repo, "parents");
    write_file(&run.path.join("a.txt"), "a\n");
    let first = commit_all(&run.path, "first", &run.base).expect("first");
    // A rolled-back stage restarts from the base; the branch follows.
    write_file(&run.path.join("b.txt"), "b\n");
    let again = commit_all(&run.path, "again", &run.base).expect("again");
    assert_eq!(repo.rev(&format!("{again}^")), run.base);
    assert_eq!(repo.rev_in(&run.path, "HEAD"), again);
    assert_ne!(first, again);
    assert_eq!(
        tree_files(&repo, &again)
            .iter()
            .filter(|f| f.ends_with(".txt"))
            .count(),
        2
    );
}

#[test]
fn commit_all_stages_tracked_ignored_files_and_dotfiles() {
    let repo = TestRepo::new();
    repo.write("keep.log", "tracked although ignored\n");
    repo.git(&["add", "-f", "keep.log"]);
    repo.git(&["commit", "-q", "-m", "track a log"]);
    let run = start_run(&repo, "dots");
    write_file(&run.path.join("keep.log"), "changed\n");
    write_file(&run.path.join(".env.example"), "KEY=\n");
    write_file(&run.path.join("fresh.log"), "new and ignored\n");
    let sha = commit_all(&run.path, "stage", &run.base).expect("commit");
    let files = tree_files(&repo, &sha);
    assert!(files.contains(&".env.example".to_string()), "{files:?}");
    assert!(!files.contains(&"fresh.log".to_string()), "{files:?}");
    assert_eq!(show(&repo, &format!("{sha}:keep.log")), "changed\n");
}

#[test]
fn two_runs_commit_concurrently() {
    let repo = TestRepo::new();
    let runs = [start_run(&repo, "lane-a"), start_run(&repo, "lane-b")];
    let shas: Vec<CommitId> = std::thread::scope(|scope| {
        let handles: Vec<_> = runs
            .iter()
            .map(|run| {
                scope.spawn(move || {
                    let mut parent = run.base.clone();
                    for i in 0..5 {
                        write_file(&run.path.join(format!("f{i}.txt")), &run.name);
                        parent = commit_all(&run.path, "stage", &parent).expect("commit");
                    }
                    parent
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    for (run, sha) in runs.iter().zip(&shas) {
        assert_eq!(repo.rev_in(&run.path, "HEAD"), *sha);
        assert_eq!(show(&repo, &format!("{sha}:f4.txt")), run.name);
    }
    assert_fsck_clean(&repo);
}

// --------------------------------------------------------- safety refusals

#[test]
fn writers_refuse_the_users_own_working_tree() {
    let repo = TestRepo::new();
    repo.write("README.md", "dirty\n");
    let before = repo.snapshot();
    let head = repo.rev("HEAD");
    let err = commit_all(&repo.path, "nope", &head).expect_err("main tree");
    assert!(matches!(err, GitError::NotLinkedWorktree { .. }), "{err:?}");
    let err = reset_worktree(&repo.path, &head).expect_err("main tree");
    assert!(matches!(err, GitError::NotLinkedWorktree { .. }), "{err:?}");
    let err = Repo::at(repo.git_dir())
        .set_branch("main", &head)
        .expect_err("checked out");
    assert!(matches!(err, GitError::BranchCheckedOut { .. }), "{err:?}");
    // Nor a branch the user has checked out in a linked worktree of their own.
    let linked = repo.root().join("users-linked");
    let linked_str = linked.to_string_lossy().into_owned();
    repo.git(&["worktree", "add", "-q", "-b", "users-side", &linked_str]);
    let err = Repo::at(repo.git_dir())
        .set_branch("users-side", &head)
        .expect_err("checked out");
    assert!(matches!(err, GitError::BranchCheckedOut { .. }), "{err:?}");
    // orch's own branches move freely.
    Repo::at(repo.git_dir())
        .set_branch("orch/free/pr", &head)
        .expect("orch's branch");
    assert_eq!(repo.snapshot(), before);
}

// ------------------------------------------------------------ create errors

fn admin_left(repo: &TestRepo, name: &str) -> bool {
    repo.git_dir().join("worktrees").join(name).exists()
}

#[test]
fn create_worktree_on_an_existing_path_fails_cleanly() {
    let repo = TestRepo::new();
    let common = repo.git_dir();
    let base = repo.rev("HEAD");
    let taken = repo.root().join("taken");
    fs::create_dir_all(&taken).expect("mkdir");
    let err = Repo::at(&common)
        .create_worktree("r1", &taken, &base)
        .expect_err("exists");
    assert!(matches!(err, GitError::PathExists { .. }), "{err:?}");
    assert!(!admin_left(&repo, "r1"));

    let path = repo.root().join("nested/dirs/r1");
    Repo::at(&common)
        .create_worktree("r1", &path, &base)
        .expect("second try");
    assert_eq!(
        fs::read_to_string(path.join("README.md")).expect("read"),
        "# demo\n"
    );
    // git names the admin dir after orch, and sees a clean, detached lane.
    assert!(admin_left(&repo, "r1"));
    assert_eq!(repo.git_in(&path, &["status", "--porcelain"]), "");
    assert_eq!(repo.rev_in(&path, "HEAD"), base);
    let list = repo.git(&["worktree", "list", "--porcelain"]);
    assert!(!list.contains("prunable"), "{list}");
}

#[test]
fn create_worktree_failing_inside_git_leaves_nothing() {
    let repo = TestRepo::new();
    let common = repo.git_dir();
    let base = repo.rev("HEAD");
    // A file where git wants the admin directory's parent.
    fs::write(common.join("worktrees"), "in the way").expect("block");
    let path = repo.root().join("wt");
    let err = Repo::at(&common)
        .create_worktree("r2", &path, &base)
        .expect_err("blocked");
    assert!(matches!(err, GitError::Cli { .. }), "{err:?}");
    assert!(!path.exists());

    fs::remove_file(common.join("worktrees")).expect("unblock");
    Repo::at(&common)
        .create_worktree("r2", &path, &base)
        .expect("retry");
    assert!(admin_left(&repo, "r2"));
}

#[test]
fn create_worktree_refuses_a_taken_or_bad_name_and_a_bad_base() {
    let repo = TestRepo::new();
    let common = repo.git_dir();
    let base = repo.rev("HEAD");
    let path = repo.root().join("wt3");
    Repo::at(&common)
        .create_worktree("r3", &path, &base)
        .expect("first");
    let other = repo.root().join("wt3b");
    let err = Repo::at(&common)
        .create_worktree("r3", &other, &base)
        .expect_err("taken");
    assert!(matches!(err, GitError::WorktreeNameTaken { .. }), "{err:?}");
    assert!(!other.exists());
    let err = Repo::at(&common)
        .create_worktree("a/b", &other, &base)
        .expect_err("name");
    assert!(
        matches!(err, GitError::InvalidWorktreeName { .. }),
        "{err:?}"
    );
    let err = Repo::at(&common)
        .create_worktree("r4", &other, &CommitId::parse(&"1".repeat(40)).unwrap())
        .expect_err("base");
    assert!(matches!(err, GitError::Cli { .. }), "{err:?}");
    assert!(!other.exists());
    assert!(!admin_left(&repo, "r4"));
    assert!(!common.join("worktrees/wt3b").exists());
}

// -------------------------------------------------------------------- diff

#[test]
fn diff_shows_text_binary_renames_and_deletions_like_git() {
    let repo = TestRepo::new();
    let base = repo.rev("HEAD");
    repo.write(
        "src/lib.rs",
        "pub fn one() -> u32 {\n    11\n}\n\npub fn three() {}\n",
    );
    fs::write(repo.path.join("logo.png"), [0u8, 159, 146, 150, 0, 1, 2]).expect("binary");
    repo.git(&["rm", "-q", "src/old.rs"]);
    let long = (0..20).map(|i| format!("line {i}\n")).collect::<String>();
    repo.write("docs/guide.md", &long);
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-q", "-m", "change"]);
    let mid = repo.rev("HEAD");
    repo.git(&["mv", "docs/guide.md", "docs/manual.md"]);
    repo.git(&["commit", "-q", "-m", "rename"]);
    let head = repo.rev("HEAD");

    let d = Repo::at(repo.git_dir())
        .diff(&base, &mid, 1 << 20)
        .expect("diff");
    let paths: Vec<&str> = d.stat.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        ["docs/guide.md", "logo.png", "src/lib.rs", "src/old.rs"]
    );
    let lib = &d.stat.files[2];
    assert_eq!((lib.insertions, lib.deletions), (3, 1));
    assert_eq!((d.stat.insertions, d.stat.deletions), (23, 2));
    assert_eq!(
        d.stat.summary(),
        " 4 files changed, 23 insertions(+), 2 deletions(-)"
    );
    assert!(
        d.patch.contains("diff --git a/logo.png b/logo.png\n"),
        "{}",
        d.patch
    );
    assert!(d.patch.contains("Binary files"), "{}", d.patch);
    assert!(!d.patch.contains('\u{0}'));
    assert!(
        d.patch
            .contains("@@ -1,3 +1,5 @@\n pub fn one() -> u32 {\n-    1\n+    11\n"),
        "{}",
        d.patch
    );
    assert!(d.patch.contains("deleted file mode 100644\n"));
    assert_eq!(
        d.stat.render().lines().last(),
        Some(d.stat.summary().as_str())
    );

    let renamed = Repo::at(repo.git_dir())
        .diff(&mid, &head, 1 << 20)
        .expect("rename diff");
    assert_eq!(
        renamed.stat.files[0].path,
        "docs/guide.md => docs/manual.md"
    );
    assert!(
        renamed
            .patch
            .contains("rename from docs/guide.md\nrename to docs/manual.md\n")
    );

    let nothing = Repo::at(repo.git_dir())
        .diff(&head, &head, 100)
        .expect("empty diff");
    assert_eq!(nothing.patch, "");
    assert_eq!(nothing.stat.summary(), " 0 files changed");
}

#[test]
fn diff_over_budget_is_cut_at_a_file_boundary_with_a_marker() {
    let repo = TestRepo::new();
    let base = repo.rev("HEAD");
    let block = (0..200).map(|i| format!("text {i}\n")).collect::<String>();
    repo.write("a.txt", "small\n");
    repo.write("b.txt", &block);
    repo.write("c.txt", &block);
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-q", "-m", "big"]);
    let full = Repo::at(repo.git_dir())
        .diff(&base, &repo.rev("HEAD"), usize::MAX)
        .expect("full");
    let first_file_end = full.patch.find("diff --git a/b.txt").expect("b.txt");
    let max = first_file_end + 200;
    let cut = Repo::at(repo.git_dir())
        .diff(&base, &repo.rev("HEAD"), max)
        .expect("cut");
    assert!(cut.truncated);
    assert!(cut.patch.len() <= max);
    assert_eq!(cut.stat, full.stat);
    let omitted = full.patch.len() - first_file_end;
    assert_eq!(
        cut.patch,
        format!(
            "{}[… patch truncated: {omitted} more bytes in 2 files …]\n",
            &full.patch[..first_file_end]
        )
    );
}

#[test]
fn a_budgeted_diff_keeps_only_what_it_can_show_and_the_stat_needs_no_patch() {
    let repo = TestRepo::new();
    let base = repo.rev("HEAD");
    let block = (0..50).map(|i| format!("line {i}\n")).collect::<String>();
    for i in 0..30 {
        repo.write(&format!("f{i:02}.txt"), &block);
    }
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-q", "-m", "many"]);
    let full = Repo::at(repo.git_dir())
        .diff(&base, &repo.rev("HEAD"), usize::MAX)
        .expect("full");
    // Files 2.. are only measured, never kept: the marker still counts them.
    let second = full.patch.find("diff --git a/f01.txt").expect("f01");
    let cut = Repo::at(repo.git_dir())
        .diff(&base, &repo.rev("HEAD"), second + 200)
        .expect("cut");
    let omitted = full.patch.len() - second;
    assert_eq!(
        cut.patch,
        format!(
            "{}[… patch truncated: {omitted} more bytes in 29 files …]\n",
            &full.patch[..second]
        )
    );
    let stat = Repo::at(repo.git_dir())
        .diff_stat(&base, &repo.rev("HEAD"))
        .expect("stat");
    assert_eq!(stat, full.stat);
    assert_eq!(stat.files_changed, 30);
    assert_eq!(stat.insertions, 30 * 50);
}

// ---------------------------------------------------------- reset_worktree

#[test]
fn reset_worktree_restores_the_start_commit_and_cleans_untracked_files() {
    let repo = TestRepo::new();
    let run = start_run(&repo, "restart");
    write_file(&run.path.join("added.txt"), "from the stage\n");
    let stage = commit_all(&run.path, "stage", &run.base).expect("commit");
    // An interrupted next stage left all sorts of state behind.
    write_file(&run.path.join("README.md"), "half-edited\n");
    fs::remove_file(run.path.join("src/lib.rs")).expect("rm");
    write_file(&run.path.join("scratch/deep/tmp.txt"), "untracked\n");
    write_file(&run.path.join("stray.txt"), "untracked\n");
    write_file(&run.path.join("target/cache.bin"), "ignored\n");
    write_file(
        &run.path.join("scratch/run.log"),
        "ignored, in a dir with untracked\n",
    );
    repo.git_in(&run.path, &["add", "stray.txt"]);

    reset_worktree(&run.path, &run.base).expect("reset");
    assert_eq!(repo.rev_in(&run.path, "HEAD"), run.base);
    assert_eq!(
        fs::read_to_string(run.path.join("README.md")).expect("readme"),
        "# demo\n"
    );
    assert!(run.path.join("src/lib.rs").exists());
    assert!(
        !run.path.join("added.txt").exists(),
        "file of the undone stage"
    );
    assert!(!run.path.join("stray.txt").exists());
    assert!(!run.path.join("scratch/deep").exists());
    assert!(
        run.path.join("scratch/run.log").exists(),
        "ignored files stay"
    );
    assert!(
        run.path.join("target/cache.bin").exists(),
        "ignored files stay"
    );
    assert_eq!(repo.git_in(&run.path, &["status", "--porcelain"]), "");
    // And stages can be committed again from there.
    let again = commit_all(&run.path, "stage again", &run.base).expect("commit");
    assert_eq!(repo.rev(&format!("{again}^")), run.base);
    assert_ne!(again, stage);
    assert_fsck_clean(&repo);
}

// --------------------------------------------------------- remove_worktree

#[test]
fn remove_worktree_refuses_a_path_that_is_not_that_worktree() {
    let repo = TestRepo::new();
    let run = start_run(&repo, "keep");
    let other = repo.root().join("precious");
    write_file(&other.join("data.txt"), "keep me\n");
    let err = Repo::at(repo.git_dir())
        .remove_worktree("keep", &other)
        .expect_err("mismatch");
    assert!(matches!(err, GitError::WorktreeMismatch { .. }), "{err:?}");
    let err = Repo::at(repo.git_dir())
        .remove_worktree("unknown", &other)
        .expect_err("unknown");
    assert!(matches!(err, GitError::WorktreeMismatch { .. }), "{err:?}");
    assert!(other.join("data.txt").exists());
    assert!(run.path.join("README.md").exists());
}

// ------------------------------------------------------ branches, trailers

#[test]
fn branches_are_listed_by_prefix_and_moved_by_force() {
    let repo = TestRepo::new();
    let common = repo.git_dir();
    let first = repo.rev("HEAD");
    repo.git(&["commit", "-q", "--allow-empty", "-m", "two"]);
    let second = repo.rev("HEAD");
    assert_eq!(
        Repo::at(&common).branch_sha("orch/x/pr").expect("missing"),
        None
    );
    Repo::at(&common)
        .set_branch("orch/x/pr", &first)
        .expect("create");
    Repo::at(&common)
        .set_branch("orch/x/code", &second)
        .expect("create");
    Repo::at(&common)
        .set_branch("orch/xy/pr", &second)
        .expect("create");
    Repo::at(&common)
        .set_branch("orch/x/pr", &second)
        .expect("move");
    assert_eq!(
        Repo::at(&common).branch_sha("orch/x/pr").expect("moved"),
        Some(second.clone())
    );
    assert_eq!(
        Repo::at(&common).list_branches("orch/x/").expect("list"),
        [
            ("orch/x/code".to_string(), second.clone()),
            ("orch/x/pr".to_string(), second.clone())
        ]
    );
    assert_eq!(
        Repo::at(&common).list_branches("orch/").expect("all").len(),
        3
    );
    assert!(
        Repo::at(&common)
            .list_branches("nothing/")
            .expect("none")
            .is_empty()
    );
    let err = Repo::at(&common)
        .set_branch(
            "orch/x/pr",
            &CommitId::parse(&"1".repeat(40)).expect("well-formed"),
        )
        .expect_err("bad sha");
    assert!(matches!(err, GitError::Resolve { .. }), "{err:?}");
    // main never moved.
    assert_eq!(repo.rev("main"), second);
}

#[test]
fn trailers_come_back_in_order_and_a_message_without_them_has_none() {
    let repo = TestRepo::new();
    let common = repo.git_dir();
    let msg = "stage docs\n\nBody text: not a trailer, it has a blank line after.\n\n\
               Orch-Stage: docs\nOrch-Tokens: 1234\nOrch-Duration-Ms: 56\n";
    repo.git(&["commit", "-q", "--allow-empty", "-m", msg]);
    let sha = repo.rev("HEAD");
    assert_eq!(
        Repo::at(&common)
            .commit_message_trailers(&sha)
            .expect("trailers"),
        [
            ("Orch-Stage".to_string(), "docs".to_string()),
            ("Orch-Tokens".to_string(), "1234".to_string()),
            ("Orch-Duration-Ms".to_string(), "56".to_string()),
        ]
    );
    let first = repo.rev("HEAD~1");
    assert!(
        Repo::at(&common)
            .commit_message_trailers(&first)
            .expect("none")
            .is_empty()
    );
}

#[test]
fn errors_read_after_failed_to() {
    let err = GitError::PathExists {
        path: Path::new("/x/wt").to_path_buf(),
    };
    assert_eq!(
        format!("failed to {err}"),
        "failed to create a worktree at /x/wt: the path already exists"
    );
}

// ------------------------------------------------------------ crash debris

#[test]
fn a_lock_conflict_is_reported_whole_and_a_run_heals_its_own_ref_locks() {
    let repo = TestRepo::new();
    let common = repo.git_dir();
    let head = Repo::at(&common).resolve_commit("HEAD").unwrap();
    Repo::at(&common)
        .set_branch("orch-lanes/r1/1", &head)
        .unwrap();
    Repo::at(&common)
        .set_branch("orch-lanes/r2/1", &head)
        .unwrap();
    let ours = common.join("refs/heads/orch-lanes/r1/1.lock");
    let theirs = common.join("refs/heads/orch-lanes/r2/1.lock");
    fs::write(&ours, "").unwrap();
    fs::write(&theirs, "").unwrap();
    let err = Repo::at(&common)
        .delete_branch("orch-lanes/r1/1")
        .unwrap_err()
        .to_string();
    assert!(
        !err.trim_end().ends_with(':') && err.contains("the lock file exists"),
        "{err}"
    );
    let removed = Repo::at(&common)
        .remove_stale_ref_locks(&["orch/r1".into(), "orch-lanes/r1".into()])
        .unwrap();
    assert_eq!(removed, vec![ours.clone()]);
    assert!(theirs.is_file(), "another run's lock is not ours to remove");
    Repo::at(&common).delete_branch("orch-lanes/r1/1").unwrap();
}

#[test]
fn broken_lane_admin_dirs_of_the_run_are_pruned_and_no_others() {
    let repo = TestRepo::new();
    let common = repo.git_dir();
    let head = Repo::at(&common).resolve_commit("HEAD").unwrap();
    // A healthy lane of run r1, and a half-made one (no `gitdir`).
    let lane = common.join("orch/worktrees/r1/lane-1");
    Repo::at(&common)
        .create_worktree("orch-r1-1", &lane, &head)
        .unwrap();
    // A lane whose worktree directory is gone.
    let gone = common.join("orch/worktrees/r1/lane-2");
    Repo::at(&common)
        .create_worktree("orch-r1-2", &gone, &head)
        .unwrap();
    fs::remove_dir_all(&gone).unwrap();
    let half = common.join("worktrees/orch-r1-3");
    fs::create_dir_all(&half).unwrap();
    fs::write(half.join("HEAD"), "ref: refs/heads/orch-lanes/r1/3\n").unwrap();
    // Another run's and the user's broken admin dirs.
    for other in ["orch-r10-1", "orch-r1-x", "mine"] {
        let d = common.join("worktrees").join(other);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("HEAD"), "ref: refs/heads/x\n").unwrap();
    }

    let mut pruned = Repo::at(&common).prune_broken_lanes("r1").unwrap();
    pruned.sort();
    assert_eq!(pruned, vec!["orch-r1-2", "orch-r1-3"]);
    assert!(common.join("worktrees/orch-r1-1/gitdir").is_file());
    for other in ["orch-r10-1", "orch-r1-x", "mine"] {
        assert!(common.join("worktrees").join(other).is_dir(), "{other}");
    }
    // With the debris gone, branches can be deleted and worktrees added
    // again (once the others' debris is gone too: libgit2 sees any admin dir
    // without `gitdir` as having every branch checked out).
    for other in ["orch-r10-1", "orch-r1-x", "mine"] {
        fs::remove_dir_all(common.join("worktrees").join(other)).unwrap();
    }
    Repo::at(&common).delete_branch("orch-lanes/r1/2").unwrap();
    Repo::at(&common)
        .create_worktree("orch-r1-2", &gone, &head)
        .unwrap();
}
