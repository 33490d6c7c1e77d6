//! The pool of warm lanes across runs: a run's lanes are handed back to
//! the repository's pool (`.git/orch/pool/lane-N`, worktrees `orch-pool-N`)
//! and the next run takes one, moved to its base by the difference. The
//! moved lane must hold exactly the new base's tree (deletions, mode and
//! symlink changes, and nothing of the previous run: no ignored or
//! untracked files, no local edits); two runs at once never share a lane;
//! `orch gc` and `--no-lane-pool` / `[lanes] pool = 0` leave no pool.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, assert_exit, orch, output_logged, record_dir,
    stdout_json, tool_results, write_issue, write_pipeline,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

const ONE: &str = "name: p\nstages:\n  work:\n    role: coder\n";
const TWO: &str = "name: p\nstages:\n  a:\n    role: coder\n  b:\n    role: coder\n";

/// Lists every entry of the current directory but `.git`: directories with
/// a `/`, files with their mode, symlinks with their target; then the
/// content of every file.
const LISTING: &str = r"find . -path ./.git -prune -o \( -type l -printf 'L %p -> %l\n' \) -o \( -type f -printf 'F %p %m\n' \) -o \( -type d -printf 'D %p/\n' \) | LC_ALL=C sort; find . -path ./.git -prune -o -type f -print | LC_ALL=C sort | xargs cat; echo END-OF-LISTING";

fn bash(id: &str, command: &str) -> Reply {
    Reply::tool_call(id, "bash", json!({"command": command}))
}

/// A model that, as stage `work`, runs one `bash` command and finishes.
fn one_command(command: &str, summary: &str) -> FakeServer {
    FakeServer::start(Script::new().agent(
        "work",
        vec![bash("b", command), Reply::finish("f", summary, None)],
    ))
}

fn run(repo: &TestRepo, pipeline: &Path, server: &FakeServer, extra: &[&str]) -> Output {
    let tmp = tempfile::tempdir().unwrap();
    let issue = write_issue(tmp.path(), "# do the thing\n");
    let mut cmd = OrchRun::new(pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .args(extra)
        .command();
    output_logged(
        cmd.env_remove("ORCH_LANE_POOL")
            .env("ORCH_LOG", "orch=debug"),
    )
}

fn stage_start(repo: &TestRepo, out: &Output, stage: &str) -> Value {
    let run_id = stdout_json(out)["run_id"].as_str().unwrap().to_owned();
    let record = record_dir(repo, &run_id);
    crate::support::stage_events(&record, stage, "stage_start")
        .pop()
        .unwrap_or_else(|| panic!("no stage_start of {stage}"))
}

/// Pooled lane directories (`.git/orch/pool/lane-N`).
fn pooled(repo: &TestRepo) -> Vec<PathBuf> {
    let mut lanes: Vec<PathBuf> = std::fs::read_dir(repo.path.join(".git/orch/pool"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    lanes.sort();
    lanes
}

/// `git worktree list` has only the main worktree, `.git/worktrees` no
/// orch entry, no `orch-lanes/*` ref exists.
fn assert_no_lanes(repo: &TestRepo, what: &str) {
    let list = repo.git(&["worktree", "list", "--porcelain"]);
    assert_eq!(list.matches("worktree ").count(), 1, "{what}: {list}");
    let admin: Vec<String> = std::fs::read_dir(repo.path.join(".git/worktrees"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(admin.is_empty(), "{what}: admin dirs {admin:?}");
    assert_eq!(
        repo.git(&["for-each-ref", "refs/heads/orch-lanes/"]),
        "",
        "{what}"
    );
    assert!(pooled(repo).is_empty(), "{what}: {:?}", pooled(repo));
}

#[test]
fn a_pooled_lane_reused_by_the_next_run_holds_exactly_the_new_base() {
    reuse_case();
}

/// Whatever a crashed user could leave in a lane: ignored build output, an
/// untracked file, an ignored one in a new directory, edits of tracked
/// files.
fn plant_leftovers(lane: &Path) {
    std::fs::create_dir_all(lane.join("target/deep")).unwrap();
    std::fs::write(lane.join("target/deep/out.o"), "obj\n").unwrap();
    std::fs::write(lane.join("debug.log"), "log\n").unwrap();
    std::fs::write(lane.join("a.txt"), "run1\n").unwrap();
    std::fs::write(lane.join("stray.txt"), "untracked\n").unwrap();
    std::fs::create_dir_all(lane.join("cache/x")).unwrap();
    std::fs::write(lane.join("cache/x/y.log"), "ignored\n").unwrap();
    std::fs::write(lane.join("keep/b.txt"), "edited in the lane\n").unwrap();
}

/// Run 1 leaves ignored output in its pooled lane; then whatever a crashed
/// user or a hand in the lane could leave (stray files, in-place edits of
/// tracked files the new base does not change); run 2 on a new base must
/// see exactly what `git worktree add --detach` of the new base holds.
fn reuse_case() {
    let repo = TestRepo::with_commit(
        &[
            (".gitignore", "target/\n*.log\n"),
            ("a.txt", "one\n"),
            ("run.sh", "#!/bin/sh\necho hi\n"),
            ("gone.txt", "deleted by the new base\n"),
            ("deep/er/x.txt", "its directories go too\n"),
            ("keep/b.txt", "b\n"),
        ],
        "base one",
    );
    std::os::unix::fs::symlink("a.txt", repo.path.join("link")).unwrap();
    repo.commit_all("a symlink");
    let tmp = tempfile::tempdir().unwrap();
    let p = write_pipeline(tmp.path(), "p", ONE);

    // Run 1 leaves ignored build output in its lane (its other changes are
    // committed on its stage branch).
    let server = one_command(
        "mkdir -p target/deep && echo obj > target/deep/out.o && echo log > debug.log && echo run1 > a.txt",
        "built",
    );
    let out = run(&repo, &p, &server, &[]);
    assert_exit(&out, 0);
    let lanes = pooled(&repo);
    assert_eq!(lanes.len(), 1, "run 1's lane went to the pool: {lanes:?}");
    let lane = &lanes[0];
    assert!(
        repo.git(&["worktree", "list"]).contains("orch/pool/lane-1"),
        "git lists the pooled lane"
    );
    plant_leftovers(lane);
    // An in-place edit of a tracked file the new base leaves as it is.
    std::fs::write(lane.join("keep/b.txt"), "b X\n").unwrap();

    // The new base: deletions, a mode change, a symlink retargeted, edits,
    // a file where a directory was.
    repo.git(&["rm", "-q", "gone.txt", "deep/er/x.txt"]);
    repo.write("a.txt", "two\n");
    repo.write("new/c.txt", "c\n");
    repo.git(&["update-index", "--chmod=+x", "run.sh"]);
    std::fs::set_permissions(
        repo.path.join("run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::remove_file(repo.path.join("link")).unwrap();
    std::os::unix::fs::symlink("keep/b.txt", repo.path.join("link")).unwrap();
    repo.write("deep", "now a file\n");
    let new_base = repo.commit_all("base two");

    // What `git worktree add` of the new base holds, by the same listing.
    let by_git = tmp.path().join("by-git");
    repo.git(&[
        "worktree",
        "add",
        "-q",
        "--detach",
        by_git.to_str().unwrap(),
        &new_base,
    ]);
    let expected = std::process::Command::new("sh")
        .args(["-c", LISTING])
        .current_dir(&by_git)
        .output()
        .unwrap();
    let expected = String::from_utf8(expected.stdout).unwrap();
    repo.git(&["worktree", "remove", "--force", by_git.to_str().unwrap()]);
    assert!(expected.contains("F ./run.sh 755"), "{expected}");
    assert!(expected.contains("L ./link -> keep/b.txt"), "{expected}");

    // The model's own git sees the lane's index at the new base.
    const STATUS: &str = "s=$(git status --porcelain --untracked-files=all --ignored) && test -z \"$s\" && echo INDEX-AT-BASE || echo \"status: $s\"";
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            bash("l", LISTING),
            bash("s", STATUS),
            Reply::finish("f", "looked", None),
        ],
    ));
    let out = run(&repo, &p, &server, &[]);
    assert_exit(&out, 0);
    let start = stage_start(&repo, &out, "work");
    assert_eq!(start["lane"], "orch-pool-1", "{start}");
    assert_eq!(start["lane_checkout"], "warm", "the pooled lane was reused");
    let seen = tool_results(server.requests_for("work").last().unwrap()).join("\n");
    assert!(
        seen.contains(&expected),
        "the lane holds exactly the new base:\n--- lane ---\n{seen}\n--- git worktree add ---\n{expected}"
    );
    assert!(seen.contains("INDEX-AT-BASE"), "{seen}");
    for leak in [
        "out.o",
        "debug.log",
        "stray.txt",
        "y.log",
        "edited in the lane",
        "run1",
        "b X",
    ] {
        assert!(!seen.contains(leak), "{leak} leaked into run 2:\n{seen}");
    }
    // The lane is back in the pool, detached and clean.
    let status = repo.git(&["-C", lane.to_str().unwrap(), "status", "--porcelain"]);
    assert_eq!(status, "");
    let head = repo
        .git_command()
        .args(["-C", lane.to_str().unwrap(), "symbolic-ref", "-q", "HEAD"])
        .output()
        .unwrap();
    assert_eq!(head.status.code(), Some(1), "detached: {head:?}");
    assert_eq!(repo.git(&["for-each-ref", "refs/heads/orch-lanes/"]), "");
}

#[test]
fn two_parallel_runs_on_one_repo_never_take_the_same_pooled_lane() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = write_pipeline(tmp.path(), "p", TWO);
    // A first run fills the pool with two lanes.
    let first = |x: &str| {
        vec![
            bash("w", &format!("echo {x} > {x}.txt")),
            Reply::finish("f", "done", None),
        ]
    };
    let server = FakeServer::start(Script::new().agent("a", first("a")).agent("b", first("b")));
    assert_exit(&run(&repo, &p, &server, &[]), 0);
    assert_eq!(pooled(&repo).len(), 2);

    // Two runs, two stages each: all four stages hold their lanes at once
    // (each first reply waits until four requests are in flight).
    // The two runs' requests for one stage id share its queue: both first
    // requests get a held `bash`, both second ones a `finish`.
    let held = |x: &str| {
        let bash =
            || bash("w", &format!("echo {x} > {x}.txt")).await_peers(4, Duration::from_secs(60));
        vec![
            bash(),
            bash(),
            Reply::finish("f", "done", None),
            Reply::finish("f", "done", None),
        ]
    };
    let server = FakeServer::start(Script::new().agent("a", held("a")).agent("b", held("b")));
    let outs = std::thread::scope(|s| {
        let runs: Vec<_> = (0..2)
            .map(|_| s.spawn(|| run(&repo, &p, &server, &[])))
            .collect();
        runs.into_iter()
            .map(|r| r.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert!(server.peers_met(), "the four stages overlapped");
    let mut lanes = Vec::new();
    for out in &outs {
        assert_exit(out, 0);
        for stage in ["a", "b"] {
            lanes.push(
                stage_start(&repo, out, stage)["lane"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
    }
    let mut distinct = lanes.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "every stage had its own lane: {lanes:?}");
    assert!(
        lanes.iter().all(|l| l.starts_with("orch-pool-")),
        "{lanes:?}"
    );
    // The pool's bound (max-parallel 4) keeps all four.
    assert_eq!(pooled(&repo).len(), 4);
}

#[test]
fn gc_removes_the_pooled_lanes_completely() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = write_pipeline(tmp.path(), "p", ONE);
    let server = one_command("echo x > x.txt && echo log > x.log", "done");
    assert_exit(&run(&repo, &p, &server, &[]), 0);
    assert_eq!(pooled(&repo).len(), 1);
    let gc = |args: &[&str]| {
        let mut cmd = orch();
        cmd.arg("gc").arg("--repo").arg(&repo.path).args(args);
        output_logged(&mut cmd)
    };
    let out = gc(&["--dry-run", "--json"]);
    assert_exit(&out, 0);
    let listed = stdout_json(&out)["worktrees"].clone();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert!(listed[0].as_str().unwrap().ends_with("orch/pool/lane-1"));
    assert_eq!(pooled(&repo).len(), 1, "--dry-run removes nothing");
    let out = gc(&["--json"]);
    assert_exit(&out, 0);
    assert_no_lanes(&repo, "after gc");
    assert!(!repo.path.join(".git/orch/pool").exists());
    repo.git(&["worktree", "prune", "--dry-run"]);
    assert_eq!(repo.git(&["worktree", "prune", "--dry-run", "-v"]), "");
}

#[test]
fn no_lane_pool_and_pool_zero_leave_no_pool() {
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = write_pipeline(tmp.path(), "p", ONE);
    let script = || {
        Script::new().agent(
            "work",
            vec![
                bash("w", "echo x >> x.txt"),
                Reply::finish("f", "done", None),
            ],
        )
    };
    // A pooled run first, then one with --no-lane-pool: its own lane and
    // the pooled one are gone.
    assert_exit(&run(&repo, &p, &FakeServer::start(script()), &[]), 0);
    assert_eq!(pooled(&repo).len(), 1);
    let out = run(&repo, &p, &FakeServer::start(script()), &["--no-lane-pool"]);
    assert_exit(&out, 0);
    assert_ne!(stage_start(&repo, &out, "work")["lane"], "orch-pool-1");
    assert_no_lanes(&repo, "after --no-lane-pool");

    // `[lanes] pool = 0` in the repository's orch.toml does the same.
    std::fs::create_dir_all(repo.path.join(".orch")).unwrap();
    std::fs::write(repo.path.join(".orch/orch.toml"), "[lanes]\npool = 0\n").unwrap();
    assert_exit(&run(&repo, &p, &FakeServer::start(script()), &[]), 0);
    assert_no_lanes(&repo, "after pool = 0");

    // A bad value names the file and line, before anything is created.
    std::fs::write(repo.path.join(".orch/orch.toml"), "[lanes]\npool = 999\n").unwrap();
    let out = run(&repo, &p, &FakeServer::start(script()), &[]);
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("orch.toml:2") && err.contains("999"), "{err}");
}

/// What a healthy pool looks like: every orch admin entry is a whole pooled
/// lane (no run's own lanes, nothing `git worktree prune` would drop), no
/// `orch-lanes/*` ref, no `.lock` file in `.git`, `git fsck` clean.
fn assert_pool_healthy(repo: &TestRepo, what: &str) {
    for entry in std::fs::read_dir(repo.path.join(".git/worktrees"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(name.starts_with("orch-pool-"), "{what}: admin dir {name}");
    }
    assert_eq!(
        repo.git(&["worktree", "prune", "--dry-run", "-v"]),
        "",
        "{what}"
    );
    assert_eq!(
        repo.git(&["for-each-ref", "refs/heads/orch-lanes/"]),
        "",
        "{what}"
    );
    let locks: Vec<_> = crate::support::walk(&repo.path.join(".git"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "lock"))
        .collect();
    assert!(locks.is_empty(), "{what}: {locks:?}");
    crate::faults::assert_fsck_clean(repo);
}

#[test]
fn a_kill_at_every_named_step_leaves_a_pool_the_resume_and_the_next_run_use() {
    const FAN: &str = "name: p\nstages:\n  a:\n    role: coder\n  b:\n    role: coder\n  join:\n    role: coder\n    needs: [a, b]\n";
    let script = || {
        ["a", "b", "join"].iter().fold(Script::new(), |s, x| {
            s.agent(
                x,
                vec![
                    bash("w", &format!("echo {x} > {x}.txt && echo o > {x}.log")),
                    Reply::finish("f", "done", None),
                ],
            )
        })
    };
    for step in orch::killpoint::STEPS {
        let case = format!("{step}:1");
        let repo = TestRepo::with_commit(
            &[("README.md", "base\n"), (".gitignore", "*.log\n")],
            "base",
        );
        let tmp = tempfile::tempdir().unwrap();
        let p = write_pipeline(tmp.path(), "p", FAN);
        let mut warmed = None;
        if orch::killpoint::POOL_ONLY.contains(step) {
            // A warm pool first: the step is in the move of a pooled lane.
            let out = run(&repo, &p, &FakeServer::start(script()), &[]);
            assert_exit(&out, 0);
            warmed = stdout_json(&out)["run_id"].as_str().map(str::to_owned);
        }
        let server = FakeServer::start(script());
        let issue = write_issue(tmp.path(), "# do the thing\n");
        let mut cmd = OrchRun::new(&p, &repo)
            .issue(&issue)
            .model(&server.base_url, "m")
            .json()
            .env("ORCH_TEST_KILL_AT", &case)
            .command();
        let out = output_logged(cmd.env_remove("ORCH_LANE_POOL"));
        assert!(crate::faults::killed(&out), "{case}: {:?}", out.status);
        let run_id = std::fs::read_dir(repo.path.join(".git/orch/runs"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|id| {
                Some(id) != warmed.as_ref()
                    && repo
                        .path
                        .join(".git/orch/runs")
                        .join(id)
                        .join("state.json")
                        .is_file()
            });
        if let Some(run_id) = run_id {
            let server = FakeServer::start(script());
            let mut cmd = crate::support::resume_command(&repo, &run_id, &server.base_url);
            let out = output_logged(cmd.env_remove("ORCH_LANE_POOL"));
            assert_exit(&out, 0);
            assert_eq!(stdout_json(&out)["status"], "succeeded", "{case}");
        }
        assert_pool_healthy(&repo, &case);
        // The next run takes the pool's lanes warm and succeeds.
        let warm = !pooled(&repo).is_empty();
        let out = run(&repo, &p, &FakeServer::start(script()), &[]);
        assert_exit(&out, 0);
        if warm {
            let lanes = ["a", "b"].map(|s| stage_start(&repo, &out, s)["lane_checkout"].clone());
            assert!(lanes.contains(&json!("warm")), "{case}: {lanes:?}");
        }
        assert_pool_healthy(&repo, &format!("{case}, next run"));
    }
}

#[test]
fn a_pooled_lane_with_attributes_is_moved_by_git_with_filters() {
    // git moves the pooled lane: the attributes apply as in any checkout.
    let repo = TestRepo::with_commit(
        &[
            (".gitattributes", "*.txt text eol=crlf\n"),
            ("a.txt", "one\ntwo\n"),
        ],
        "base",
    );
    let tmp = tempfile::tempdir().unwrap();
    let p = write_pipeline(tmp.path(), "p", ONE);
    let script = || {
        Script::new().agent(
            "work",
            vec![bash("c", "od -c a.txt"), Reply::finish("f", "done", None)],
        )
    };
    assert_exit(&run(&repo, &p, &FakeServer::start(script()), &[]), 0);
    repo.write("b.txt", "three\n");
    repo.commit_all("more");
    let server = FakeServer::start(script());
    let out = run(&repo, &p, &server, &[]);
    assert_exit(&out, 0);
    let start = stage_start(&repo, &out, "work");
    assert_eq!(start["lane"], "orch-pool-1", "{start}");
    // git moves the pooled lane, filters on, as it checks anything out.
    assert_eq!(start["lane_checkout"], "warm", "{start}");
    let seen = tool_results(server.requests_for("work").last().unwrap()).join("\n");
    assert!(seen.contains(r"\r  \n"), "eol=crlf applied: {seen}");
}

const CHAIN: &str =
    "name: p\nstages:\n  a:\n    role: coder\n  b:\n    role: coder\n    needs: [a]\n";

/// `git -C dir args…` stdout, without taking optional locks (a plain
/// `git status` would refresh the index itself).
fn git_at(repo: &TestRepo, dir: &Path, args: &[&str]) -> String {
    let out = repo
        .git_command()
        .env("GIT_OPTIONAL_LOCKS", "0")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A stage staged by git from its watcher's marks leaves the lane's index
/// at its commit: the next stage in the lane sees a clean `git status` and
/// the first stage's change against `HEAD~1`, pooled or not, sandboxed or
/// not; the pooled lane is handed back detached at the last commit with its
/// index there.
#[test]
fn the_next_stage_sees_an_index_at_head_after_a_commit_from_marks() {
    // The kernel sandbox on and off: the model's `git` works in a detached
    // pooled lane either way (its object quarantine exists).
    for (pooled_run, sandbox) in [(false, false), (true, false), (true, true)] {
        let repo = TestRepo::with_commit(&[("a.txt", "one\n"), ("gone.txt", "bye\n")], "base");
        let tmp = tempfile::tempdir().unwrap();
        let p = write_pipeline(tmp.path(), "p", CHAIN);
        let server = FakeServer::start(
            Script::new()
                .agent(
                    "a",
                    vec![
                        bash(
                            "1",
                            "echo two >> a.txt && echo new > new.txt && rm gone.txt && chmod +x a.txt",
                        ),
                        Reply::finish("2", "first", None),
                    ],
                )
                .agent(
                    "b",
                    vec![
                        bash(
                            "3",
                            "echo BEGIN; git status --porcelain; echo END; git diff HEAD~1 --stat; echo b > b.txt",
                        ),
                        Reply::finish("4", "second", None),
                    ],
                ),
        );
        let extra: &[&str] = if pooled_run { &[] } else { &["--no-lane-pool"] };
        let issue = write_issue(tmp.path(), "# do the thing\n");
        let mut run = OrchRun::new(&p, &repo)
            .issue(&issue)
            .model(&server.base_url, "m")
            .json()
            .args(extra);
        if !sandbox {
            run = run.env("ORCH_SANDBOX_DISABLE", "1");
        }
        let mut cmd = run.command();
        let out = output_logged(cmd.env_remove("ORCH_LANE_POOL"));
        assert_exit(&out, 0);
        let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
        let end = crate::support::stage_events(&record_dir(&repo, &run_id), "a", "stage_end");
        assert_eq!(end[0]["changes_from_watch"], json!(true), "{end:?}");
        let seen = tool_results(&server.requests_for("b")[1]).join("\n");
        let status = seen
            .split("BEGIN\n")
            .nth(1)
            .and_then(|s| s.split("END").next())
            .unwrap_or_else(|| panic!("no status in {seen}"));
        assert_eq!(status.trim(), "", "pooled {pooled_run}: {seen}");
        for f in ["a.txt", "new.txt", "gone.txt"] {
            assert!(seen.contains(f), "pooled {pooled_run}: {f} in {seen}");
        }
        if !pooled_run {
            continue;
        }
        let lanes = pooled(&repo);
        assert_eq!(lanes.len(), 1, "{lanes:?}");
        assert_eq!(
            git_at(
                &repo,
                &lanes[0],
                &["diff-index", "--cached", "--name-only", "HEAD"]
            ),
            "",
            "the index is at HEAD"
        );
        assert_eq!(
            git_at(&repo, &lanes[0], &["rev-parse", "HEAD"]),
            repo.git(&["rev-parse", &format!("orch/{run_id}/b")])
        );
    }
}

/// A lane whose index the model wrote (its own `git rm --cached`, which
/// the watcher cannot see: the index lives in the lane's admin directory)
/// is staged whole, as git stages it; the next run's `git status` in the
/// same pooled lane sees an index at its base, not run 1's.
#[test]
fn a_lane_whose_index_the_model_wrote_is_staged_whole_and_the_next_run_sees_its_base() {
    let repo = TestRepo::with_commit(&[(".gitignore", "*.log\n"), ("a.txt", "one\n")], "base");
    let tmp = tempfile::tempdir().unwrap();
    let p = write_pipeline(tmp.path(), "p", ONE);
    let server = one_command(
        "git rm -q --cached a.txt && echo o > out.log && echo two > b.txt",
        "untracked a.txt",
    );
    let out = run(&repo, &p, &server, &[]);
    assert_exit(&out, 0);
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let end = crate::support::stage_events(&record_dir(&repo, &run_id), "work", "stage_end");
    assert_eq!(end[0]["changes_from_watch"], json!(false), "{end:?}");
    // `git add -A` puts a.txt back (it exists and is not ignored).
    let files = repo.git(&[
        "ls-tree",
        "-r",
        "--name-only",
        &format!("orch/{run_id}/work"),
    ]);
    assert_eq!(files, ".gitignore\na.txt\nb.txt\n");
    const STATUS: &str = "s=$(git status --porcelain --untracked-files=all --ignored) && test -z \"$s\" && echo INDEX-AT-BASE || echo \"status: $s\"";
    let server = one_command(STATUS, "looked");
    let out = run(&repo, &p, &server, &[]);
    assert_exit(&out, 0);
    let seen = tool_results(server.requests_for("work").last().unwrap()).join("\n");
    assert!(seen.contains("INDEX-AT-BASE"), "{seen}");
}
