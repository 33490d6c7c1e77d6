//! git is the oracle: for every repository case of docs/git-compatibility.md,
//! a stage commit made by the real binary (lane pool on, the default; the
//! kernel sandbox on, the default) must hold exactly the tree git makes of
//! the same command's result — `git worktree add --detach` of the same base,
//! the same command, `git add -A && git write-tree` — compared by tree id
//! (so modes, symlinks and gitlinks too). Then a second run takes the same
//! pooled lane back and must find exactly what `git worktree add --detach`
//! of the base checks out (files, modes, symlinks, contents, nothing left
//! over from the first run).
//!
//! Nothing here compares orch with libgit2 or with itself.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, assert_exit, output_logged, record_dir,
    stdout_json, tool_results, write_issue, write_pipeline,
};
use serde_json::json;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const ONE: &str = "name: p\nstages:\n  work:\n    role: coder\n";

/// Lists the working tree but `.git`: every entry with its type and mode,
/// symlinks with their target, files with their content's hash.
const LISTING: &str = r"find . -path ./.git -prune -o \( -type l -printf 'L %p -> %l\n' \) -o \( -type f -printf 'F %p %m\n' \) -o \( -type d -printf 'D %p/\n' \) | LC_ALL=C sort; find . -path ./.git -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha1sum; echo END-OF-LISTING";

/// Commits in a command are made with a fixed identity and date, so the
/// oracle's and orch's nested commits are the same objects.
const COMMIT: &str = "GIT_AUTHOR_DATE='1704067200 +0000' GIT_COMMITTER_DATE='1704067200 +0000' git -c user.name=agent -c user.email=agent@example.invalid -c commit.gpgsign=false commit -q";

/// The base every case starts from: text, an executable, a symlink, a
/// nested directory, an ignore file.
fn base_repo() -> TestRepo {
    let repo = TestRepo::with_commit(
        &[
            ("a.txt", "alpha\n"),
            ("b.txt", "beta\n"),
            ("run.sh", "#!/bin/sh\necho hi\n"),
            ("d/e.txt", "deep\n"),
            (".gitignore", "target/\n*.log\n"),
        ],
        "base",
    );
    std::fs::set_permissions(
        repo.path.join("run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::symlink("a.txt", repo.path.join("link")).unwrap();
    repo.commit_all("exec and link");
    repo
}

/// `sh -c script` in `dir` with the repository's hermetic environment.
fn sh(repo: &TestRepo, dir: &Path, script: &str) -> Output {
    let git = repo.git_command();
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script).current_dir(dir).env_clear();
    for (k, v) in git.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    cmd.stdin(Stdio::null()).output().unwrap()
}

fn git_in(repo: &TestRepo, dir: &Path, args: &[&str]) -> Output {
    repo.git_command()
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A fresh `git worktree add --detach` of `base` at `<tmp>/<name>`.
fn git_worktree(repo: &TestRepo, base: &str, name: &str) -> std::path::PathBuf {
    let dir = repo.dir.path().join(name);
    let add = git_in(
        repo,
        &repo.path,
        &[
            "worktree",
            "add",
            "-q",
            "--detach",
            dir.to_str().unwrap(),
            base,
        ],
    );
    assert!(add.status.success(), "{add:?}");
    dir
}

/// What git makes of `command` run on a fresh `git worktree add --detach`
/// of `base`: the tree of `git add -A && git write-tree` (or git's error).
fn oracle_tree(repo: &TestRepo, base: &str, command: &str, name: &str) -> Result<String, String> {
    let dir = git_worktree(repo, base, &format!("oracle-{name}"));
    sh(repo, &dir, command);
    let staged = git_in(repo, &dir, &["add", "-A"]);
    if !staged.status.success() {
        return Err(String::from_utf8_lossy(&staged.stderr).into_owned());
    }
    let tree = git_in(repo, &dir, &["write-tree"]);
    assert!(tree.status.success(), "{tree:?}");
    Ok(text(&tree))
}

/// The listing ([`LISTING`]) of a fresh `git worktree add --detach` of `base`.
fn oracle_listing(repo: &TestRepo, base: &str, name: &str) -> String {
    let dir = git_worktree(repo, base, &format!("fresh-{name}"));
    text(&sh(repo, &dir, LISTING))
}

/// One `orch run` of a one-stage pipeline whose agent runs `command` in a
/// `bash` call and finishes; the lane pool and the sandbox are left at
/// their defaults.
fn orch_run(repo: &TestRepo, command: &str) -> (Output, FakeServer) {
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_call("b", "bash", json!({"command": command})),
            Reply::finish("f", "done", None),
        ],
    ));
    let tmp = tempfile::tempdir().unwrap();
    let issue = write_issue(tmp.path(), "# do the thing\n");
    let p = write_pipeline(tmp.path(), "p", ONE);
    let mut cmd = OrchRun::new(&p, repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .command();
    let out = output_logged(cmd.env("ORCH_LOG", "orch=debug"));
    (out, server)
}

fn run_id(out: &Output) -> String {
    stdout_json(out)["run_id"].as_str().unwrap().to_owned()
}

/// The case: `setup` shapes the repository (config, attributes, files) and
/// commits; `command` is the agent's. The stage commit's tree must be the
/// oracle's, and the pooled lane handed to the next run must be the base.
fn check(name: &str, setup: impl Fn(&TestRepo), command: &str) -> (TestRepo, String) {
    let repo = base_repo();
    setup(&repo);
    let base = repo.git(&["rev-parse", "HEAD"]).trim().to_owned();
    let want = oracle_tree(&repo, &base, command, name)
        .unwrap_or_else(|e| panic!("{name}: git itself fails the case: {e}"));
    let fresh = oracle_listing(&repo, &base, name);

    let (out, server) = orch_run(&repo, command);
    assert_exit(&out, 0);
    let id = run_id(&out);
    let got = repo
        .git(&["rev-parse", &format!("orch/{id}/work^{{tree}}")])
        .trim()
        .to_owned();
    if got != want {
        let diff = repo.git(&["diff-tree", "-r", "--raw", &want, &got]);
        let seen = tool_results(server.requests_for("work").last().unwrap()).join("\n");
        panic!(
            "{name}: orch's stage tree {got} is not git's {want}:\n{diff}\nthe command said:\n{seen}"
        );
    }
    assert_eq!(
        repo.git(&["rev-parse", &format!("orch/{id}/work~1")])
            .trim(),
        base,
        "{name}: the stage commit's parent is the base"
    );

    // The same pooled lane, taken back by the next run at the same base.
    let (out, server) = orch_run(&repo, LISTING);
    assert_exit(&out, 0);
    let start =
        crate::support::stage_events(&record_dir(&repo, &run_id(&out)), "work", "stage_start");
    assert_eq!(start[0]["lane_checkout"], "warm", "{name}: {start:?}");
    let seen = tool_results(server.requests_for("work").last().unwrap()).join("\n");
    assert!(
        seen.contains(&fresh),
        "{name}: the reused lane is not the base:\n--- lane ---\n{seen}\n--- git worktree add ---\n{fresh}"
    );
    (repo, id)
}

macro_rules! case {
    ($name:ident, $setup:expr, $command:expr) => {
        #[test]
        fn $name() {
            check(stringify!($name), $setup, $command);
        }
    };
}

fn nothing(_: &TestRepo) {}

fn config(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&TestRepo) {
    move |repo| {
        for (k, v) in pairs {
            repo.git(&["config", k, v]);
        }
    }
}

case!(plain_edit, nothing, "echo more >> a.txt");
case!(delete, nothing, "rm b.txt d/e.txt");
case!(rename, nothing, "mv a.txt renamed.txt && mv d dir2");
case!(
    chmod_on_and_off,
    nothing,
    "chmod +x a.txt && chmod -x run.sh"
);
case!(
    symlink_add_and_retarget,
    nothing,
    "ln -s b.txt l2 && ln -sfn d/e.txt link"
);
case!(
    file_and_directory_swap,
    nothing,
    "rm b.txt && mkdir b.txt && echo in > b.txt/inner && rm -rf d && echo now-a-file > d"
);
case!(case_only_rename, nothing, "mv a.txt A.txt");
case!(
    binary_file,
    nothing,
    r"printf '\000\001\002\377\n' > bin.dat"
);
case!(
    five_megabyte_file,
    nothing,
    "yes 0123456789abcdef | head -c 5242880 > big.txt"
);
case!(empty_directory, nothing, "mkdir -p empty/deeper");
case!(
    ignored_build_output,
    nothing,
    "mkdir -p target/debug && echo o > target/debug/o && echo l > x.log && echo kept > kept.txt"
);
case!(
    gitignore_negation,
    nothing,
    "printf 'target/\\n*.log\\n!keep.log\\n' > .gitignore && echo k > keep.log && echo n > drop.log"
);
case!(
    gitattributes_text_auto_eol_crlf,
    |repo: &TestRepo| {
        repo.write(".gitattributes", "* text=auto eol=crlf\n*.bin -text\n");
        repo.commit_all("attributes");
    },
    r"printf 'one\r\ntwo\r\n' > crlf.txt && printf 'lf\n' > lf.txt && printf '\000x\r\n' > raw.bin"
);
case!(
    clean_and_smudge_filter,
    |repo: &TestRepo| {
        config(&[
            ("filter.up.clean", "tr a-z A-Z"),
            ("filter.up.smudge", "tr A-Z a-z"),
            ("filter.up.required", "true"),
        ])(repo);
        repo.write(".gitattributes", "*.up filter=up\n");
        repo.write("old.up", "ALREADY CLEAN\n");
        repo.commit_all("filter");
    },
    "echo hello > new.up && echo more >> old.up"
);
case!(
    working_tree_encoding,
    |repo: &TestRepo| {
        repo.write(
            ".gitattributes",
            "*.u16 text working-tree-encoding=UTF-16LE\n",
        );
        repo.commit_all("encoding");
    },
    r"printf 'h\000i\000\n\000' > new.u16"
);
case!(
    autocrlf_true,
    config(&[("core.autocrlf", "true")]),
    r"printf 'a\r\nb\r\n' > w.txt && echo more >> a.txt"
);
case!(
    autocrlf_input,
    config(&[("core.autocrlf", "input")]),
    r"printf 'a\r\nb\r\n' > w.txt"
);
case!(
    file_mode_false,
    config(&[("core.fileMode", "false")]),
    "chmod +x a.txt && chmod -x run.sh && echo m >> b.txt"
);
case!(
    symlinks_false,
    config(&[("core.symlinks", "false")]),
    "echo x > new.txt && echo retarget > link"
);
case!(
    split_index_with_the_agents_git_add,
    config(&[("core.splitIndex", "true")]),
    "echo s > s.txt && git add s.txt && echo more >> a.txt"
);
case!(
    many_files_index_v4_untracked_cache_skip_hash,
    config(&[("feature.manyFiles", "true")]),
    "echo m > m.txt && git add m.txt && rm b.txt"
);
case!(
    worktree_config_extension,
    |repo: &TestRepo| {
        repo.git(&["config", "extensions.worktreeConfig", "true"]);
        repo.git(&["config", "--worktree", "core.fileMode", "true"]);
    },
    "echo w > w.txt"
);
case!(
    sparse_checkout_cone,
    |repo: &TestRepo| {
        repo.write("in/i.txt", "in\n");
        repo.write("out/o.txt", "out\n");
        repo.commit_all("dirs");
        repo.git(&["sparse-checkout", "set", "--cone", "in"]);
    },
    "echo more >> in/i.txt && echo new > in/new.txt"
);

/// A repository that is a submodule's source, and `sub` added from it.
fn with_submodule(repo: &TestRepo) {
    let src = repo.dir.path().join("subsrc");
    std::fs::create_dir_all(&src).unwrap();
    let sub = |args: &[&str]| {
        let out = repo
            .git_command()
            .current_dir(&src)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    sub(&["init", "-q", "-b", "main"]);
    std::fs::write(src.join("s.txt"), "sub\n").unwrap();
    sub(&["add", "s.txt"]);
    sub(&[
        "-c",
        "user.name=s",
        "-c",
        "user.email=s@example.invalid",
        "commit",
        "-q",
        "-m",
        "sub",
    ]);
    repo.git(&[
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "add",
        "-q",
        src.to_str().unwrap(),
        "sub",
    ]);
    repo.commit_all("submodule");
}

case!(
    untouched_uninitialised_submodule,
    with_submodule,
    "echo more >> a.txt"
);
case!(
    touched_uninitialised_submodule,
    with_submodule,
    "echo x > sub/written.txt && echo more >> a.txt"
);

case!(
    initialised_submodule,
    with_submodule,
    "git -c protocol.file.allow=always submodule -q update --init && echo more >> a.txt && cat sub/s.txt"
);
case!(
    initialised_submodule_moved_to_a_new_commit,
    with_submodule,
    &format!(
        "git -c protocol.file.allow=always submodule -q update --init && echo two > sub/t.txt \
         && git -C sub add t.txt && (cd sub && {COMMIT} -m two)"
    )
);

#[test]
fn nested_repository_with_a_commit_becomes_a_gitlink() {
    let command = format!(
        "git init -q inner && echo i > inner/f && git -C inner add f && (cd inner && {COMMIT} -m inner)"
    );
    let (repo, id) = check("nested_repository", nothing, &command);
    let entry = repo.git(&["ls-tree", &format!("orch/{id}/work"), "inner"]);
    assert!(entry.starts_with("160000 commit "), "a gitlink: {entry}");
}

#[test]
fn the_agents_own_commit_in_its_lane_is_in_the_stage_commit() {
    let command =
        format!("echo c > c.txt && git add c.txt && {COMMIT} -m mine && echo after >> a.txt");
    let (repo, id) = check("agent_commit", nothing, &command);
    let files = repo.git(&["ls-tree", "-r", "--name-only", &format!("orch/{id}/work")]);
    assert!(files.lines().any(|l| l == "c.txt"), "{files}");
}

/// A repository the agent makes in its lane (a test fixture, `git init`)
/// is plain git: its objects are its own, `git fsck` is clean, and none of
/// them reaches the user's object store.
#[test]
fn a_repository_the_agent_makes_keeps_its_own_objects() {
    let repo = base_repo();
    let command = format!(
        "git init -q fixture && echo made-by-the-agent > fixture/f && git -C fixture add f \
         && (cd fixture && {COMMIT} -m f) && git -C fixture count-objects -v \
         && echo LOOSE=$(find fixture/.git/objects -path '*/objects/??/*' -type f | wc -l) \
         && git -C fixture fsck --no-progress && echo FSCK-OK && echo HEAD=$(git -C fixture rev-parse HEAD) \
         && echo BLOB=$(git -C fixture rev-parse HEAD:f) && rm -rf fixture"
    );
    let (out, server) = orch_run(&repo, &command);
    assert_exit(&out, 0);
    let seen = tool_results(server.requests_for("work").last().unwrap()).join("\n");
    assert!(seen.contains("count: 3\n"), "blob, tree, commit: {seen}");
    // In the fixture's own `.git/objects`, whatever the environment says.
    assert!(
        seen.contains("LOOSE=3\n"),
        "its own store holds them: {seen}"
    );
    assert!(seen.contains("FSCK-OK"), "{seen}");
    for key in ["HEAD=", "BLOB="] {
        let sha = seen
            .split(key)
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or_else(|| panic!("no {key} in {seen}"));
        let there = repo
            .git_command()
            .args(["cat-file", "-e", sha])
            .output()
            .unwrap();
        assert!(
            !there.status.success(),
            "{key}{sha} reached the user's object store"
        );
    }
}

/// The user keeps working: a commit on `main` in their own checkout while
/// the agent's command runs stays on `main` (the kernel sandbox kept the
/// command out of the common git dir, so the change is the user's: noted,
/// never undone) and the run succeeds; the stage commit is the agent's.
#[test]
fn a_user_commit_on_main_during_a_tool_call_stays_and_the_run_succeeds() {
    let repo = base_repo();
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_call(
                "b",
                "bash",
                json!({"command": "touch started && sleep 3 && rm started && echo agent >> a.txt"}),
            ),
            Reply::finish("f", "done", None),
        ],
    ));
    let tmp = tempfile::tempdir().unwrap();
    let issue = write_issue(tmp.path(), "# do the thing\n");
    let p = write_pipeline(tmp.path(), "p", ONE);
    let mut cmd = OrchRun::new(&p, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .command();
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded: the agent's command marks its start in its (pooled) lane.
    let marker = repo.path.join(".git/orch/pool/lane-1/started");
    let mut waited = 0;
    while !marker.exists() {
        assert!(waited < 3000, "the agent's command never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
        waited += 1;
    }
    repo.write("user.txt", "the user's own work\n");
    let user_commit = repo.commit_all("the user's commit");
    let out = child.wait_with_output().unwrap();
    assert_exit(&out, 0);
    assert_eq!(
        repo.git(&["rev-parse", "main"]).trim(),
        user_commit,
        "main stays"
    );
    assert_eq!(
        repo.git(&["reflog", "-1", "--format=%H", "main"]).trim(),
        user_commit,
        "the reflog and the ref agree"
    );
    assert_eq!(
        repo.git(&["status", "--porcelain"]),
        "",
        "nothing reappears staged"
    );
    let id = run_id(&out);
    let files = repo.git(&["ls-tree", "-r", "--name-only", &format!("orch/{id}/work")]);
    assert!(
        !files.contains("user.txt"),
        "the stage is the agent's: {files}"
    );
    assert_eq!(
        repo.git(&["show", &format!("orch/{id}/work:a.txt")]),
        "alpha\nagent\n"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("this is the user's own work: orch leaves it as it is"),
        "noted: {stderr}"
    );
}

/// `--base worktree`: the snapshot of the user's uncommitted work is what
/// git stages of it (a file of mode 0654 is `100644`, a filter applies, an
/// untracked file comes, an ignored one does not), and the user's index is
/// untouched.
#[test]
fn a_worktree_snapshot_is_what_git_stages_of_the_users_tree() {
    let repo = base_repo();
    config(&[
        ("filter.up.clean", "tr a-z A-Z"),
        ("filter.up.smudge", "cat"),
    ])(&repo);
    repo.write(".gitattributes", "*.up filter=up\n");
    repo.commit_all("filter");
    repo.write("odd.txt", "group-executable only\n");
    std::fs::set_permissions(
        repo.path.join("odd.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o654),
    )
    .unwrap();
    repo.write("new.up", "lower case\n");
    repo.write("a.txt", "edited, not staged\n");
    repo.write("x.log", "ignored\n");
    repo.git(&["add", "a.txt"]);
    repo.write("a.txt", "edited again after staging\n");
    let index_before = std::fs::read(repo.path.join(".git/index")).unwrap();
    // The oracle: git stages the tree into a scratch copy of the index.
    let scratch = repo.dir.path().join("scratch-index");
    std::fs::copy(repo.path.join(".git/index"), &scratch).unwrap();
    let oracle = |args: &[&str]| {
        let out = repo
            .git_command()
            .env("GIT_INDEX_FILE", &scratch)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        text(&out)
    };
    oracle(&["add", "-A"]);
    let want = oracle(&["write-tree"]);
    let server =
        FakeServer::start(Script::new().agent("work", vec![Reply::finish("f", "looked", None)]));
    let tmp = tempfile::tempdir().unwrap();
    let issue = write_issue(tmp.path(), "# do the thing\n");
    let p = write_pipeline(tmp.path(), "p", ONE);
    let out = output_logged(
        &mut OrchRun::new(&p, &repo)
            .issue(&issue)
            .model(&server.base_url, "m")
            .json()
            .args(["--base", "worktree"])
            .command(),
    );
    assert_exit(&out, 0);
    let id = run_id(&out);
    let got = text(&git_in(
        &repo,
        &repo.path,
        &["rev-parse", &format!("orch/{id}/work~1^{{tree}}")],
    ));
    assert_eq!(got, want, "the snapshot's tree is git's");
    let mode = repo.git(&["ls-tree", &got, "odd.txt"]);
    assert!(mode.starts_with("100644 "), "{mode}");
    assert_eq!(
        std::fs::read(repo.path.join(".git/index")).unwrap(),
        index_before,
        "the user's index is untouched"
    );
}
