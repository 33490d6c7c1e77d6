//! Merge conflicts on a pull request (issue 31, point 4): the PR's base
//! moved on a bare remote, and `orch::forge::merge::rebase_round` brings the
//! new base into the run's final commit. git merges what it can (no model);
//! a conflict goes to a `merge` stage run by the coder role in a lane
//! (scripted here), its verify gate included; a stage that leaves the
//! conflict is an honest "cannot merge", with nothing moved or pushed.
//!
//! Called as a library (the call from `orch react` is the merger's), with
//! the run made by the real binary, real git repositories and the fake
//! model server.

use crate::support::{
    AWAIT_LIMIT, FakeServer, Reply, Script, TestRepo, fix_add, record_dir, run_on_fake, user_text,
    write_pipeline,
};
use orch::forge::merge::{MergeModel, RebaseOutcome, RebaseRequest, fetch_base, rebase_round};
use orch::llm::openai::{ModelSettings, OpenAiClient};
use std::path::PathBuf;
use std::sync::Arc;

const CALC: &str = "def add(a, b):\n    return a - b\n";
/// The base's change to the line the pull request fixes.
const CALC_TYPED: &str = "def add(a: int, b: int) -> int:\n    return a - b  # ints only\n";
/// Both changes.
const CALC_RESOLVED: &str = "def add(a: int, b: int) -> int:\n    return a + b  # ints only\n";
/// The remote branch the pull request lives on.
const PR_BRANCH: &str = "orch/7-add-adds";

/// A run whose final commit is published on a bare remote as [`PR_BRANCH`].
struct Published {
    repo: TestRepo,
    scratch: tempfile::TempDir,
    origin: PathBuf,
    run_id: String,
    /// The run's final commit, as pushed.
    tip: String,
}

impl Published {
    fn new() -> Published {
        let repo = TestRepo::with_commit(&[("calc.py", CALC), ("README.md", "calc\n")], "init");
        let scratch = tempfile::tempdir().unwrap();
        let origin = scratch.path().join("origin.git");
        repo.git(&["clone", "-q", "--bare", ".", origin.to_str().unwrap()]);
        repo.git(&["remote", "add", "origin", origin.to_str().unwrap()]);
        repo.git(&["fetch", "-q", "origin"]);
        let server = FakeServer::start(Script::new().agent(
            "code",
            vec![fix_add("c1"), Reply::finish("c2", "add adds", None)],
        ));
        let pipeline = write_pipeline(
            scratch.path(),
            "fix",
            "stages:\n  code:\n    role: coder\n    task: \"{{ issue }}\"\n",
        );
        let (code, run_id) = run_on_fake(&repo, &pipeline, "# add subtracts\n", &server);
        assert_eq!(code, 0);
        let tip = repo
            .git(&["rev-parse", &format!("orch/{run_id}/pr")])
            .trim()
            .to_owned();
        // What `orch publish` pushes (the forge's side is not the point here).
        repo.git(&[
            "push",
            "-q",
            "origin",
            &format!("{tip}:refs/heads/{PR_BRANCH}"),
        ]);
        Published {
            repo,
            scratch,
            origin,
            run_id,
            tip,
        }
    }

    /// Another contributor commits `files` on the remote's `main`; the
    /// user's repository fetches it. Returns the new base.
    fn move_base(&self, files: &[(&str, &str)]) -> String {
        let other = self.scratch.path().join("other");
        let other = other.to_str().unwrap();
        if !std::path::Path::new(other).exists() {
            self.repo
                .git(&["clone", "-q", self.origin.to_str().unwrap(), other]);
        }
        for (path, text) in files {
            std::fs::write(std::path::Path::new(other).join(path), text).unwrap();
        }
        let id = [
            "-c",
            "user.name=Other",
            "-c",
            "user.email=other@example.invalid",
        ];
        self.repo
            .git(&[&["-C", other][..], &id, &["add", "-A"]].concat());
        self.repo.git(
            &[
                &["-C", other][..],
                &id,
                &["commit", "-q", "-m", "base moves"],
            ]
            .concat(),
        );
        self.repo
            .git(&["-C", other, "push", "-q", "origin", "main"]);
        self.repo.git(&["fetch", "-q", "origin"]);
        self.repo
            .git(&["rev-parse", "origin/main"])
            .trim()
            .to_owned()
    }

    /// Whether `git merge-tree` merges `a` and `b` without conflicts.
    fn merges_cleanly(&self, a: &str, b: &str) -> bool {
        let out = self
            .repo
            .git_command()
            .args(["merge-tree", "--write-tree", a, b])
            .output()
            .unwrap();
        match out.status.code() {
            Some(0) => true,
            Some(1) => false,
            other => panic!("git merge-tree: {other:?}"),
        }
    }

    fn is_ancestor(&self, a: &str, b: &str) -> bool {
        self.repo
            .git_command()
            .args(["merge-base", "--is-ancestor", a, b])
            .status()
            .unwrap()
            .success()
    }

    fn rev(&self, rev: &str) -> String {
        self.repo.git(&["rev-parse", rev]).trim().to_owned()
    }

    /// `rebase_round` onto the remote's `main` (fetched by `fetch_base`)
    /// with `server`'s model, bounded.
    fn rebase(&self, server: &FakeServer) -> RebaseOutcome {
        let mut settings = ModelSettings::new(server.base_url.clone(), "fake-model");
        settings.request_timeout = std::time::Duration::from_secs(20);
        let model = Arc::new(OpenAiClient::new(settings).unwrap());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        // A whole stage runs inside: twice the bound of one await.
        rt.block_on(async {
            tokio::time::timeout(AWAIT_LIMIT * 2, async {
                let base = fetch_base(&self.repo.path, "origin", "main", &self.run_id).await?;
                assert_eq!(base, format!("refs/orch/merge-base/{}", self.run_id));
                let req = RebaseRequest {
                    repo: self.repo.path.clone(),
                    run: self.run_id.clone(),
                    new_base: base,
                };
                rebase_round(&req, MergeModel::new(model)).await
            })
            .await
        })
        .expect("rebase_round timed out")
        .expect("rebase_round failed")
    }

    fn merge_record(&self) -> serde_json::Value {
        let path = record_dir(&self.repo, &self.run_id).join("merge.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }
}

#[test]
fn a_conflicting_base_is_merged_by_the_merge_stage_and_the_pr_branch_fast_forwards() {
    let pr = Published::new();
    let base = pr.move_base(&[("calc.py", CALC_TYPED), ("NOTES.md", "ints only\n")]);
    let pr_ref = format!("origin/{PR_BRANCH}");
    assert!(
        !pr.merges_cleanly("origin/main", &pr_ref),
        "the PR conflicts"
    );
    let user = pr.repo.snapshot();

    let server = FakeServer::start(Script::new().agent(
        "merge",
        vec![
            Reply::tool_call(
                "m1",
                "write_file",
                serde_json::json!({"path": "calc.py", "content": CALC_RESOLVED}),
            ),
            Reply::finish("m2", "calc.py: the base's types with the PR's fix", None),
        ],
    ));
    let outcome = pr.rebase(&server);
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let RebaseOutcome::Resolved {
        commit,
        previous,
        base: merged_base,
        files,
        merge_run,
    } = &outcome
    else {
        panic!("not resolved: {outcome}");
    };
    assert_eq!((previous, merged_base), (&pr.tip, &base));
    assert_eq!(files, &["calc.py"]);

    // The stage saw the conflict, markers and all, as quoted data.
    let requests = server.requests_for("merge");
    let task = user_text(&requests[0]);
    assert!(task.contains("## calc.py (1 conflict)"), "{task}");
    assert!(task.contains(&format!("<<<<<<< {}", pr.tip)), "{task}");
    assert!(task.contains(&format!(">>>>>>> {base}")), "{task}");
    assert!(task.contains("return a + b") && task.contains("# ints only"));
    // Its verify gate ran (the marker check) and passed.
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(record_dir(&pr.repo, merge_run).join("state.json")).unwrap(),
    )
    .unwrap();
    let verify = &state["stages"][0]["verify"];
    assert_eq!(verify["passed"], true, "{verify}");
    assert!(
        verify["commands"].to_string().contains("<<<<<<<"),
        "{verify}"
    );

    // A merge commit of the old tip and the new base, with the resolution
    // and the base's other change.
    let parents = pr.repo.git(&["rev-list", "--parents", "-n", "1", commit]);
    assert_eq!(parents.trim(), format!("{commit} {} {base}", pr.tip));
    assert_eq!(
        pr.repo.git(&["show", &format!("{commit}:calc.py")]),
        CALC_RESOLVED
    );
    assert_eq!(
        pr.repo.git(&["show", &format!("{commit}:NOTES.md")]),
        "ints only\n"
    );
    assert!(pr.is_ancestor(&base, commit) && pr.is_ancestor(&pr.tip, commit));
    assert_eq!(pr.rev(&format!("orch/{}/pr", pr.run_id)), *commit);
    assert_eq!(pr.merge_record()[0]["outcome"], "resolved");
    // The user's tree, index and HEAD did not move.
    user.assert_unchanged(&pr.repo.snapshot());

    // Pushed without force, the PR branch fast-forwards and then merges
    // cleanly (it contains the base: a fast-forward for the base too).
    pr.repo.git(&[
        "push",
        "-q",
        "origin",
        &format!("{commit}:refs/heads/{PR_BRANCH}"),
    ]);
    pr.repo.git(&["fetch", "-q", "origin"]);
    assert_eq!(pr.rev(&pr_ref), *commit);
    assert!(pr.merges_cleanly("origin/main", &pr_ref));
    assert!(pr.is_ancestor("origin/main", &pr_ref));

    // Asked again: the base is in, nothing to do, no model asked.
    let idle = FakeServer::start(Script::new());
    assert_eq!(
        pr.rebase(&idle),
        RebaseOutcome::UpToDate {
            commit: commit.clone()
        }
    );
    assert!(idle.requests().is_empty());
}

#[test]
fn a_merge_stage_that_leaves_the_conflict_says_it_cannot_and_nothing_moves() {
    let pr = Published::new();
    let base = pr.move_base(&[("calc.py", CALC_TYPED)]);
    // The model claims it is done three times (the first try and both
    // verify rounds) and never edits: the marker check keeps failing.
    let server = FakeServer::start(
        Script::new().agent(
            "merge",
            (1..=3)
                .map(|i| Reply::finish(&format!("m{i}"), "resolved", None))
                .collect(),
        ),
    );
    let outcome = pr.rebase(&server);
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let RebaseOutcome::Cannot {
        reason,
        files,
        merge_run,
        base: b,
    } = &outcome
    else {
        panic!("not refused: {outcome}");
    };
    assert_eq!((files.as_slice(), b), (&["calc.py".to_owned()][..], &base));
    assert!(merge_run.is_some());
    assert!(
        outcome
            .to_string()
            .starts_with("cannot merge: the merge stage failed"),
        "{outcome}"
    );
    assert!(reason.contains("verify"), "{reason}");
    // The verify output went back to the model between its tries.
    let requests = server.requests_for("merge");
    assert_eq!(requests.len(), 3);
    assert!(
        user_text(&requests[1]).contains("calc.py:"),
        "{}",
        user_text(&requests[1])
    );
    // Nothing moved, nothing pushed.
    assert_eq!(pr.rev(&format!("orch/{}/pr", pr.run_id)), pr.tip);
    assert_eq!(pr.rev(&format!("origin/{PR_BRANCH}")), pr.tip);
    let origin_pr = std::process::Command::new("git")
        .arg("-C")
        .arg(&pr.origin)
        .args(["rev-parse", &format!("refs/heads/{PR_BRANCH}")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&origin_pr.stdout).trim(), pr.tip);
    assert_eq!(pr.merge_record()[0]["outcome"], "cannot");
    assert!(outcome.commit().is_none());
}

#[test]
fn a_base_that_merges_cleanly_is_merged_by_git_alone() {
    let pr = Published::new();
    let base = pr.move_base(&[("NOTES.md", "unrelated\n")]);
    let server = FakeServer::start(Script::new());
    let outcome = pr.rebase(&server);
    let RebaseOutcome::Merged {
        commit, previous, ..
    } = &outcome
    else {
        panic!("not merged by git: {outcome}");
    };
    assert_eq!(previous, &pr.tip);
    assert!(server.requests().is_empty(), "no model is asked");
    assert!(pr.is_ancestor(&base, commit) && pr.is_ancestor(&pr.tip, commit));
    assert_eq!(pr.rev(&format!("orch/{}/pr", pr.run_id)), *commit);
    assert_eq!(
        pr.repo.git(&["show", &format!("{commit}:calc.py")]),
        CALC.replace("a - b", "a + b")
    );
}
