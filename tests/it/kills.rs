//! Kill-safety without luck: `orch` SIGKILLs itself at every named step of
//! the start-up and stage-commit paths (`ORCH_TEST_KILL_AT`, debug builds
//! only; see `orch::killpoint`), and `orch resume` must finish the run from
//! each one; then a bounded randomised test kills `orch run` and `orch
//! resume` at random moments of a fan-in pipeline with model latency.
//!
//! After every finished run: the tree of an uninterrupted run, no finished
//! stage re-run (request counts per agent), no `.lock` files, no
//! `.git/worktrees/orch-*`, no `orch-lanes/*` refs, `git fsck` clean.

use crate::faults::{
    assert_fsck_clean, killed, leftovers, orch_run, pipeline, pr_tree, reference_tree, write,
};
use crate::support::{
    FakeServer, Reply, Script, TestRepo, resume, resume_command, state_json, stdout_json,
};
use std::process::Stdio;
use std::time::{Duration, Instant};

const FAN: &str = "name: p\nstages:\n  a:\n    role: coder\n  b:\n    role: coder\n  join:\n    role: coder\n    needs: [a, b]\n";
const STAGES: [&str; 3] = ["a", "b", "join"];

/// One `write_file` and a `finish` per stage, each reply held `latency`.
fn script(latency: Duration) -> Script {
    STAGES.iter().fold(Script::new(), |s, x| {
        s.agent(
            x,
            vec![
                write("w", &format!("{x}.txt"), &format!("written by {x}\n")).after(latency),
                Reply::finish("f", &format!("{x} done"), None).after(latency),
            ],
        )
    })
}

/// The stages `state.json` records as succeeded (empty before the state exists).
fn finished_stages(repo: &TestRepo) -> Vec<String> {
    let runs = repo.path.join(".git/orch/runs");
    let Ok(mut entries) = std::fs::read_dir(&runs) else {
        return Vec::new();
    };
    let Some(Ok(entry)) = entries.next() else {
        return Vec::new();
    };
    let id = entry.file_name().to_string_lossy().into_owned();
    if !entry.path().join("state.json").is_file() {
        return Vec::new();
    }
    let state = state_json(repo, &id);
    state["stages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "succeeded")
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

/// No stage that was finished before `server`'s process started asked it anything.
fn assert_no_rerun(before: &[String], server: &FakeServer, what: &str) {
    for stage in before {
        assert!(
            server.requests_for(stage).is_empty(),
            "{what}: finished stage `{stage}` ran again"
        );
    }
}

fn run_id_of(repo: &TestRepo) -> Option<String> {
    let runs = repo.path.join(".git/orch/runs");
    std::fs::read_dir(runs)
        .ok()?
        .flatten()
        .find(|e| e.path().join("state.json").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
}

#[test]
fn resume_finishes_from_a_kill_at_every_named_step() {
    let reference = reference_tree(FAN, &STAGES);
    let mut cases = Vec::new();
    for step in orch::killpoint::STEPS {
        // Without the lane pool (the tests' default) these are never reached:
        // `lane_pool::a_kill_at_every_named_step…` kills there.
        if orch::killpoint::POOL_ONLY.contains(step) {
            continue;
        }
        // The stage-commit steps happen once per stage: kill at the first
        // and at the last occurrence too.
        cases.push(format!("{step}:1"));
        if [
            "stage-committed",
            "stage-branch-set",
            "stage-recorded",
            "lane-branch-created",
            "worktree-added",
        ]
        .contains(step)
        {
            cases.push(format!("{step}:2"));
        }
        if ["stage-committed", "stage-recorded"].contains(step) {
            cases.push(format!("{step}:3"));
        }
    }
    for case in &cases {
        let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
        let before_user = repo.snapshot();
        let tmp = tempfile::tempdir().unwrap();
        let p = pipeline(tmp.path(), FAN);
        let server = FakeServer::start(script(Duration::ZERO));
        let out = orch_run(&repo, &p, &server)
            .env("ORCH_TEST_KILL_AT", case)
            .output();
        assert!(
            killed(&out),
            "{case}: orch was killed there: {:?}",
            out.status
        );
        let Some(run_id) = run_id_of(&repo) else {
            // Killed before the first state write: nothing to resume, nothing
            // left in git.
            assert_eq!(leftovers(&repo), Vec::<String>::new(), "{case}");
            continue;
        };
        let done = finished_stages(&repo);
        let server2 = FakeServer::start(script(Duration::ZERO));
        let out = resume(&repo, &run_id, &server2, &[]);
        assert_eq!(out.status.code(), Some(0), "{case}: resume finishes");
        assert_eq!(stdout_json(&out)["status"], "succeeded", "{case}");
        assert_no_rerun(&done, &server2, case);
        assert_eq!(pr_tree(&repo, &run_id), reference, "{case}");
        assert_eq!(leftovers(&repo), Vec::<String>::new(), "{case}");
        assert_fsck_clean(&repo);
        assert_eq!(repo.snapshot(), before_user, "{case}: the user's tree");
    }
}

/// A small deterministic xorshift generator: the test is random in where it
/// kills, reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Bounded: [`KILLS`] kills in all, at most [`KILLS_PER_RUN`] per run and
/// [`MAX_RUNS`] runs, with 100 ms per model reply; every run is then resumed
/// to its end.
const KILLS: usize = 30;
const KILLS_PER_RUN: usize = 6;
const MAX_RUNS: usize = 20;
const LATENCY: Duration = Duration::from_millis(100);

#[test]
fn randomised_kills_during_run_and_resume_always_resume_to_the_uninterrupted_tree() {
    let reference = reference_tree(FAN, &STAGES);
    let seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut rng = Rng(seed);
    let started = Instant::now();
    let (mut kills, mut resume_kills, mut resumed, mut processes, mut runs) = (0, 0, 0, 0, 0);
    while kills < KILLS && runs < MAX_RUNS {
        let run = runs;
        runs += 1;
        let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
        let before_user = repo.snapshot();
        let tmp = tempfile::tempdir().unwrap();
        let p = pipeline(tmp.path(), FAN);
        let mut kills_left = KILLS_PER_RUN.min(KILLS - kills);
        let mut run_id: Option<String> = None;
        loop {
            let done = finished_stages(&repo);
            let server = FakeServer::start(script(LATENCY));
            let mut cmd = match &run_id {
                None => orch_run(&repo, &p, &server).command(),
                Some(id) => {
                    resumed += 1;
                    resume_command(&repo, id, &server.base_url)
                }
            };
            let err_path = tmp.path().join(format!("stderr-{processes}.log"));
            let err_file = std::fs::File::create(&err_path).unwrap();
            let mut child = cmd
                .stdout(Stdio::null())
                .stderr(Stdio::from(err_file))
                .spawn()
                .unwrap();
            processes += 1;
            let status = if kills_left > 0 {
                // Somewhere in a run: it takes about 4 model replies end to end.
                let at = Duration::from_millis(rng.below(600));
                let deadline = Instant::now() + at;
                let mut exited = None;
                while Instant::now() < deadline {
                    if let Some(s) = child.try_wait().unwrap() {
                        exited = Some(s);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                match exited {
                    Some(s) => s,
                    None => {
                        child.kill().unwrap();
                        kills += 1;
                        kills_left -= 1;
                        resume_kills += usize::from(run_id.is_some());
                        child.wait().unwrap()
                    }
                }
            } else {
                child.wait().unwrap()
            };
            assert_no_rerun(&done, &server, &format!("run {run}, process {processes}"));
            if run_id.is_none() {
                run_id = run_id_of(&repo);
            }
            // Killed after its last state write: the run is finished.
            let finished = run_id
                .as_ref()
                .is_some_and(|id| state_json(&repo, id)["status"] == "succeeded");
            if status.code() == Some(0) || finished {
                break;
            }
            assert!(
                status.code().is_none(),
                "run {run}: only a kill stops a process here: {status:?}\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
            if run_id.is_none() {
                // Killed before its first state write: start again.
                continue;
            }
        }
        let id = run_id.unwrap();
        assert_eq!(state_json(&repo, &id)["status"], "succeeded", "run {run}");
        assert_eq!(pr_tree(&repo, &id), reference, "run {run}");
        if leftovers(&repo)
            .iter()
            .any(|l| l.contains("refs/orch/runs/"))
        {
            // Killed while recording its ref after its final state: such a
            // run is never resumed, and the next run heals the lock it left
            // (as `fifty_pooled_runs_killed_…` shows); run it here.
            let server = FakeServer::start(script(Duration::ZERO));
            let out = orch_run(&repo, &p, &server).output();
            assert_eq!(out.status.code(), Some(0), "run {run}: the run after");
        }
        assert_eq!(leftovers(&repo), Vec::<String>::new(), "run {run}");
        assert_fsck_clean(&repo);
        assert_eq!(repo.snapshot(), before_user, "run {run}: the user's tree");
    }
    assert_eq!(kills, KILLS, "the test killed as often as it means to");
    eprintln!(
        "randomised kills (seed {seed:#x}): {runs} runs, {kills} kills ({resume_kills} of them of `orch resume`), {resumed} resumes, {processes} orch processes, 0 leftovers, {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Pooled runs killed at random points, all in one repository so every run
/// after the first takes warm pooled lanes (the default): each is resumed
/// to the uninterrupted tree; afterwards no lock file anywhere in `.git`,
/// no broken lane, `git fsck` clean, the user's tree untouched.
const POOLED_RUNS: usize = 50;

#[test]
fn fifty_pooled_runs_killed_at_random_points_all_resume_clean() {
    let reference = reference_tree(FAN, &STAGES);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let repo = TestRepo::with_commit(&[("README.md", "base\n")], "base");
    let before_user = repo.snapshot();
    let tmp = tempfile::tempdir().unwrap();
    let p = pipeline(tmp.path(), FAN);
    let runs_dir = repo.path.join(".git/orch/runs");
    let ids = || -> std::collections::BTreeSet<String> {
        std::fs::read_dir(&runs_dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().join("state.json").is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    };
    let (mut killed_runs, mut resumes) = (0, 0);
    for run in 0..POOLED_RUNS {
        let known = ids();
        let server = FakeServer::start(script(Duration::from_millis(20)));
        let mut child = orch_run(&repo, &p, &server)
            .command()
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_millis(rng.below(400));
        let mut exited = None;
        while Instant::now() < deadline {
            if let Some(s) = child.try_wait().unwrap() {
                exited = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if exited.is_none() {
            child.kill().unwrap();
            killed_runs += 1;
        }
        child.wait().unwrap();
        let Some(id) = ids().difference(&known).next().cloned() else {
            // Killed before its first state write: nothing to resume.
            continue;
        };
        if state_json(&repo, &id)["status"] != "succeeded" {
            let server = FakeServer::start(script(Duration::ZERO));
            let out = resume(&repo, &id, &server, &[]);
            resumes += 1;
            assert_eq!(out.status.code(), Some(0), "run {run}: resume finishes");
        }
        assert_eq!(state_json(&repo, &id)["status"], "succeeded", "run {run}");
        assert_eq!(pr_tree(&repo, &id), reference, "run {run}");
        // A run killed while recording its ref after its final state is
        // never resumed: the next run heals the lock it left.
        let left: Vec<String> = leftovers(&repo)
            .into_iter()
            .filter(|l| !l.contains("refs/orch/runs/"))
            .collect();
        assert_eq!(left, Vec::<String>::new(), "run {run}");
    }
    // One more run, not killed: it heals what the last ones left.
    let server = FakeServer::start(script(Duration::ZERO));
    let out = orch_run(&repo, &p, &server).output();
    assert_eq!(out.status.code(), Some(0), "the run after");
    assert_eq!(
        leftovers(&repo),
        Vec::<String>::new(),
        "after the run after"
    );
    assert!(
        killed_runs >= POOLED_RUNS / 4,
        "{killed_runs} of {POOLED_RUNS} killed"
    );
    assert!(
        repo.git(&["worktree", "list"]).contains("orch/pool/lane-"),
        "the runs used the pool"
    );
    assert_fsck_clean(&repo);
    assert_eq!(repo.snapshot(), before_user, "the user's tree");
    eprintln!("{POOLED_RUNS} pooled runs, {killed_runs} killed, {resumes} resumed");
}
