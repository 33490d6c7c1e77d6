//! No process outlives its tool call, end to end. A `bash` call that leaves
//! a `setsid` process behind (out of its process group, which is all a
//! group kill reaches) must not let it write into the lane after the call:
//! not into its own stage's commit, and not into the next run's, which takes
//! the same lane from the lane pool. Before the per-call reaper such a
//! survivor's file landed in the next run's commit 2 times in 5.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, assert_exit, output_logged, record_dir,
    stage_events, stdout_json, write_issue, write_pipeline,
};
use serde_json::json;
use std::path::Path;

const ONE: &str = "name: p\nstages:\n  work:\n    role: coder\n";
/// What the model of the first run of each pair leaves behind: a process in
/// a session of its own that writes `late.txt` into the lane a second later.
/// `setsid` is spelled so the deny list cannot read it (it refuses `setsid`
/// as typed): what is tested is the reaper, behind the approval layer.
const LATE: &str = "$(printf set)sid sh -c 'sleep 1; echo late > late.txt' >/dev/null 2>&1 &";
/// Pairs of runs (the issue's bar: no survivor in 20). A pair costs about
/// 1.8 s here, most of it the second run's 1.5 s stage.
const PAIRS: usize = 20;

/// Runs pipeline `p` on `repo` with a model that, as stage `work`, runs
/// `command` in `bash` and finishes, with Landlock on (where the kernel has
/// it) or off; returns the run id and the lane the stage ran in.
fn run(repo: &TestRepo, p: &Path, issue: &Path, command: &str, landlock: bool) -> (String, String) {
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_call("b", "bash", json!({"command": command})),
            Reply::finish("f", "done", None),
        ],
    ));
    let mut cmd = OrchRun::new(p, repo)
        .issue(issue)
        .model(&server.base_url, "m")
        .json()
        .command();
    // The lane pool is what hands a run's lane to the next run, where a
    // survivor would write into the next stage; the test harness turns it
    // off for every other test (`support::cmd`).
    cmd.env("ORCH_LANE_POOL", "2");
    if !landlock {
        cmd.env("ORCH_SANDBOX_DISABLE", "1");
    }
    let out = output_logged(&mut cmd);
    assert_exit(&out, 0);
    let sandbox = if landlock && orch::sandbox::availability().abi().is_some() {
        "orch: sandbox: Landlock ABI"
    } else {
        "orch: sandbox: Landlock unavailable"
    };
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(sandbox),
        "expected {sandbox:?}"
    );
    assert_eq!(server.violations(), Vec::<String>::new());
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let start = stage_events(&record_dir(repo, &run_id), "work", "stage_start")
        .pop()
        .expect("a stage_start of work");
    let lane = start["lane"].as_str().unwrap().to_owned();
    (run_id, lane)
}

/// Live processes carrying the run marker of `run_id` in their environment
/// (every tool process of a run does).
fn processes_of(run_id: &str) -> Vec<String> {
    let needle = format!("ORCH_RUN_ID={run_id}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.starts_with(" Z"))
        })
        .collect()
}

/// The files of stage `work`'s commit in run `run_id`.
fn committed(repo: &TestRepo, run_id: &str) -> Vec<String> {
    repo.git(&[
        "ls-tree",
        "-r",
        "--name-only",
        &format!("orch/{run_id}/work"),
    ])
    .lines()
    .map(str::to_owned)
    .collect()
}

#[test]
fn a_setsid_process_is_gone_with_its_call_and_writes_into_no_later_commit() {
    let repo = TestRepo::with_commit(&[("README.md", "# r\n")], "init");
    let scratch = tempfile::tempdir().unwrap();
    let p = write_pipeline(scratch.path(), "p", ONE);
    let issue = write_issue(scratch.path(), "# do the thing\n");
    for pair in 0..PAIRS {
        // The reaper forks before the sandbox is entered: with Landlock the
        // command cannot even signal it. Half the pairs run without.
        let landlock = pair % 2 == 0;
        let (first, lane) = run(&repo, &p, &issue, LATE, landlock);
        // Gone when the run is: the reaper killed it at the end of the call.
        assert_eq!(
            processes_of(&first),
            Vec::<String>::new(),
            "pair {pair}: a process of run {first} outlived it"
        );
        // The next run takes the same lane and works in it past the moment
        // the survivor would have written.
        let (second, next_lane) = run(&repo, &p, &issue, "sleep 1.5", landlock);
        assert_eq!(next_lane, lane, "pair {pair}: the pooled lane went on");
        for run_id in [&first, &second] {
            let files = committed(&repo, run_id);
            assert_eq!(files, ["README.md"], "pair {pair}: run {run_id}'s commit");
        }
    }
}
