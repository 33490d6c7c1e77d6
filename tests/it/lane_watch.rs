//! The lane watcher (`git::watch`): a stage end that commits from what the
//! kernel reported must commit exactly the tree the walk (`git add -A`)
//! commits, in pooled and unpooled lanes, across two stages in one lane
//! (the record restarts from the first stage's commit) and in a second run
//! on a warm pooled lane; `ORCH_LANE_WATCH=0` is the walk.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, output_logged, record_dir, stdout_json,
    write_issue, write_pipeline,
};
use serde_json::json;

const TWO: &str =
    "name: p\nstages:\n  a:\n    role: coder\n  b:\n    role: coder\n    needs: [a]\n";

/// Creates, renames, deletes, chmods, links, replaces a file by a
/// directory, writes ignored files and edits a tracked-but-ignored one.
const FIRST: &str = "mkdir -p new/deep && echo n > new/deep/f && mv lib moved && chmod +x run.sh \
    && ln -s README.md link && rm notes.txt && mkdir notes.txt && echo in > notes.txt/inner \
    && mkdir -p build/out && echo o > build/out/x && echo more >> keep.log && echo i > fresh.log \
    && touch README.md";
/// Changes inside what the first stage created or moved in (watched only
/// once the record restarted), retargets the link, un-ignores `*.log`.
const SECOND: &str = "echo again >> new/deep/f && echo m >> moved/a.txt && mkdir moved/sub \
    && echo s > moved/sub/s && ln -sfn run.sh link && rm -rf notes.txt && echo back > notes.txt \
    && printf 'build/\\n' > .gitignore && chmod -x run.sh";

fn repo() -> TestRepo {
    let repo = TestRepo::with_commit(
        &[
            ("README.md", "# demo\n"),
            ("run.sh", "echo hi\n"),
            ("notes.txt", "notes\n"),
            ("lib/a.txt", "a\n"),
            ("lib/b/c.txt", "c\n"),
            (".gitignore", "build/\n*.log\n"),
        ],
        "base",
    );
    repo.write("keep.log", "tracked though ignored\n");
    repo.git(&["add", "-f", "keep.log"]);
    repo.git(&["commit", "-q", "-m", "keep.log"]);
    repo
}

/// Runs the two stages; returns the trees of their commits.
fn trees(repo: &TestRepo, watch: &str, pool: Option<&str>) -> (String, String) {
    trees_with(repo, watch, pool, &[])
}

/// [`trees`] with more environment for `orch`.
fn trees_with(
    repo: &TestRepo,
    watch: &str,
    pool: Option<&str>,
    env: &[(&str, &str)],
) -> (String, String) {
    let server = FakeServer::start(
        Script::new()
            .agent(
                "a",
                vec![
                    Reply::tool_call("1", "bash", json!({"command": FIRST})),
                    Reply::finish("2", "first", None),
                ],
            )
            .agent(
                "b",
                vec![
                    Reply::tool_call("3", "bash", json!({"command": SECOND})),
                    Reply::finish("4", "second", None),
                ],
            ),
    );
    let tmp = tempfile::tempdir().unwrap();
    let issue = write_issue(tmp.path(), "# shuffle\n");
    let pipeline = write_pipeline(tmp.path(), "p", TWO);
    let mut cmd = OrchRun::new(&pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .env("ORCH_LANE_WATCH", watch)
        .env("ORCH_SANDBOX_DISABLE", "1")
        .command();
    if let Some(n) = pool {
        cmd.env("ORCH_LANE_POOL", n);
    }
    cmd.envs(env.iter().copied());
    let out = output_logged(&mut cmd);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    for stage in ["a", "b"] {
        let end = crate::support::stage_events(&record_dir(repo, &run_id), stage, "stage_end");
        // Stage b rewrites the top-level `.gitignore`: what is ignored
        // anywhere may have changed, so git stages the whole lane.
        assert_eq!(
            end[0]["changes_from_watch"],
            json!(watch != "0" && stage == "a"),
            "stage {stage} with ORCH_LANE_WATCH={watch}"
        );
    }
    let tree = |stage: &str| repo.git(&["rev-parse", &format!("orch/{run_id}/{stage}^{{tree}}")]);
    (tree("a"), tree("b"))
}

#[test]
fn commits_from_the_watcher_equal_the_walked_commits_pooled_or_not() {
    let walked = trees(&repo(), "0", None);
    assert_ne!(walked.0, walked.1);
    assert_eq!(trees(&repo(), "1", None), walked, "unpooled lanes");
    // Pooled: the first run's lane is created, the second run's is the
    // warm one handed back.
    let pooled = repo();
    assert_eq!(trees(&pooled, "1", Some("2")), walked, "pooled, first run");
    assert_eq!(trees(&pooled, "1", Some("2")), walked, "pooled, warm lane");
}

#[test]
fn a_watcher_that_starts_late_still_sees_every_change_of_the_first_tool_call() {
    // The watcher starts beside the first model request; the tools wait for
    // it. Slowed down here, the first `bash` call would otherwise run
    // before it watches and its changes would be missing from the commit.
    let walked = trees(&repo(), "0", None);
    let slow = [("ORCH_TEST_WATCH_DELAY_MS", "1500")];
    assert_eq!(trees_with(&repo(), "1", None, &slow), walked, "unpooled");
    let pooled = repo();
    assert_eq!(trees_with(&pooled, "1", Some("2"), &slow), walked, "pooled");
    assert_eq!(
        trees_with(&pooled, "1", Some("2"), &slow),
        walked,
        "warm lane"
    );
}
