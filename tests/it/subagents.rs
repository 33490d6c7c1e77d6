//! Subagents end to end: the real `orch` binary runs a stage whose model
//! calls `spawn_agent`; children are real `orch agent` processes talking to
//! the same fake model server, told apart by their `X-Orch-Agent` path.

use crate::support::{
    FAKE_API_KEY, FakeServer, OrchRun, Recorded, Reply, Script, TestRepo, offered_tools,
    orch_with_model, output_logged, read_jsonl, stdout_json, tool_results, write_issue,
    write_pipeline,
};
use orch::subagent::{AgentStatus, agent_tree};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

/// How long a barrier waits for its peers: generous for a loaded machine.
const BARRIER: Duration = Duration::from_secs(30);

fn repo() -> TestRepo {
    TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            ("README.md", "# calc\n"),
        ],
        "calc 0.1",
    )
}

/// A one-stage pipeline (`code`, role coder) and an issue, in a scratch dir.
fn pipeline(scratch: &Path) -> (PathBuf, PathBuf) {
    let p = write_pipeline(
        scratch,
        "solo",
        "stages:\n  code:\n    role: coder\n    task: \"{{ issue }}\"\n",
    );
    let issue = write_issue(scratch, "# Look around\n\nFind where add is defined.\n");
    (p, issue)
}

/// `orch run solo.yaml` on `repo` against `server`, with extra environment.
fn run_stage(repo: &TestRepo, server: &FakeServer, env: &[(&str, &str)]) -> (Output, Value) {
    let scratch = tempfile::tempdir().unwrap();
    let (p, issue) = pipeline(scratch.path());
    let mut run = OrchRun::with_model_env(&server.base_url, &p, repo)
        .issue(&issue)
        .json();
    for (k, v) in env {
        run = run.env(k, v);
    }
    let out = run.output();
    let json = stdout_json(&out);
    (out, json)
}

/// The run record directory named in `orch run --json` output.
fn record_of(json: &Value) -> PathBuf {
    PathBuf::from(json["record"].as_str().unwrap())
}

fn pid_of(req: &Recorded) -> i32 {
    req.header("x-orch-pid")
        .expect("orch sends its pid")
        .parse()
        .unwrap()
}

fn spawn(id: &str, role: &str, task: &str) -> (String, String, Value) {
    (
        id.to_owned(),
        "spawn_agent".to_owned(),
        json!({"role": role, "task": task}),
    )
}

fn calls(list: &[(String, String, Value)]) -> Reply {
    let refs: Vec<(&str, &str, Value)> = list
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.clone()))
        .collect();
    Reply::tool_calls(&refs)
}

/// Waits (bounded) until no live process is left in group `pgid`; zombies
/// waiting for init count as gone.
fn group_gone(pgid: i32) -> bool {
    for _ in 0..250 {
        // SAFETY: signal 0 only checks for existence.
        let rc = unsafe { libc::killpg(pgid, 0) };
        if rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            return true;
        }
        let live = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|stat| {
                let Some((_, rest)) = stat.rsplit_once(')') else {
                    return false;
                };
                let f: Vec<&str> = rest.split_whitespace().collect();
                f.first() != Some(&"Z") && f.get(2) == Some(&pgid.to_string().as_str())
            })
            .count();
        if live == 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn two_explore_children_run_concurrently_and_both_reports_reach_the_parent() {
    let repo = repo();
    let before = repo.snapshot();
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    calls(&[
                        spawn("s1", "explore", "Where is add defined?"),
                        spawn("s2", "explore", "What does README.md say?"),
                    ])
                    .with_usage(10, 1),
                    Reply::finish("c2", "Both children reported.", None).with_usage(10, 1),
                ],
            )
            .agent(
                "code/explore-1",
                vec![
                    Reply::finish("e1", "add is defined in calc.py:1.", None)
                        .with_usage(100, 10)
                        .await_peers(2, BARRIER),
                ],
            )
            .agent(
                "code/explore-2",
                vec![
                    Reply::finish(
                        "e2",
                        &format!("README.md says: # calc. The key is {FAKE_API_KEY}."),
                        None,
                    )
                    .with_usage(100, 10)
                    .await_peers(2, BARRIER),
                ],
            ),
    );
    let (out, json) = run_stage(&repo, &server, &[]);
    assert!(
        server.peers_met(),
        "the two children were never in flight together"
    );
    assert_eq!(server.violations(), Vec::<String>::new());
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json["status"], "succeeded");

    // The parent was offered spawn_agent and got both reports, in call order.
    let parent = server.requests_for("code");
    assert_eq!(parent.len(), 2);
    assert!(offered_tools(&parent[0]).contains(&"spawn_agent".to_owned()));
    let results = tool_results(&parent[1]);
    assert_eq!(results.len(), 2);
    assert!(
        results[0].contains("add is defined in calc.py:1."),
        "{}",
        results[0]
    );
    assert!(
        results[0].contains("code/explore-1 (explore) succeeded"),
        "{}",
        results[0]
    );
    assert!(
        results[1].contains("README.md says: # calc. The key is [REDACTED]."),
        "a key the child's model echoed is redacted: {}",
        results[1]
    );
    assert!(!results[1].contains(FAKE_API_KEY));

    // Each child starts from its system prompt and its task only, in a
    // process of its own, with the tools of its role only.
    let mut pids = Vec::new();
    for (path, task) in [
        ("code/explore-1", "Where is add defined?"),
        ("code/explore-2", "What does README.md say?"),
    ] {
        let reqs = server.requests_for(path);
        assert_eq!(reqs.len(), 1, "{path}");
        let m = reqs[0].messages();
        assert_eq!(m.len(), 2, "{path}: {m:?}");
        assert_eq!(m[0]["role"], "system");
        assert_eq!(m[1]["role"], "user");
        assert!(m[1]["content"].as_str().unwrap().contains(task));
        assert!(
            !m[1]["content"].as_str().unwrap().contains("Look around"),
            "no parent history"
        );
        let tools = offered_tools(&reqs[0]);
        for t in ["write_file", "edit_file", "spawn_agent"] {
            assert!(
                !tools.contains(&t.to_owned()),
                "{path} offered {t}: {tools:?}"
            );
        }
        assert!(
            reqs[0]
                .header("authorization")
                .is_some_and(|a| a.ends_with(FAKE_API_KEY))
        );
        pids.push(pid_of(&reqs[0]));
    }
    assert_ne!(pids[0], pids[1]);
    assert_ne!(pids[0], pid_of(&parent[0]));

    // Tokens roll up: the stage counts its own and its children's.
    assert_eq!(json["stages"][0]["tokens"], 11 + 11 + 110 + 110);

    // The record shows the tree.
    let record = record_of(&json);
    let tree = agent_tree(&record);
    let paths: Vec<&str> = tree.iter().map(|n| n.agent_path.as_str()).collect();
    assert_eq!(paths, ["code/explore-1", "code/explore-2"]);
    for n in &tree {
        assert_eq!(n.parent, "code");
        assert_eq!(n.role, "explore");
        assert_eq!(n.status, AgentStatus::Succeeded);
        assert_eq!(n.tokens.total(), 110);
        assert!(n.children.is_empty());
    }
    assert_eq!(tree[0].report, "add is defined in calc.py:1.");
    let lines = std::fs::read_to_string(record.join("agents.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 2);
    let result: Value = serde_json::from_str(
        &std::fs::read_to_string(record.join("agents/code__explore-1/result.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(result["format"], "orch-agent-result/1");
    assert_eq!(result["status"], "succeeded");
    for f in ["actions.jsonl", "transcript.json", "result.json"] {
        let text = std::fs::read_to_string(record.join("agents/code__explore-2").join(f)).unwrap();
        assert!(!text.contains(FAKE_API_KEY), "{f} leaks the key");
    }
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn depth_is_bounded_and_the_deepest_agent_is_not_offered_spawn_agent() {
    let repo = repo();
    let before = repo.snapshot();
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    calls(&[spawn("s1", "coder", "Go one level deeper.")]),
                    Reply::finish("c2", "done", None),
                ],
            )
            .agent(
                "code/coder-1",
                vec![
                    calls(&[spawn("m1", "coder", "Go to the bottom.")]).with_usage(5, 5),
                    Reply::finish("m2", "middle done", None).with_usage(5, 5),
                ],
            )
            .agent(
                "code/coder-1/coder-1",
                vec![
                    // Asking anyway is refused: the parent enforces the limit too.
                    calls(&[spawn("l1", "explore", "Deeper still.")]).with_usage(7, 3),
                    Reply::finish("l2", "leaf done", None).with_usage(7, 3),
                ],
            ),
    );
    let (out, json) = run_stage(&repo, &server, &[]);
    assert_eq!(server.violations(), Vec::<String>::new());
    assert_eq!(out.status.code(), Some(0));

    let middle = server.requests_for("code/coder-1");
    assert!(
        offered_tools(&middle[0]).contains(&"spawn_agent".to_owned()),
        "depth 1 of 2 may spawn"
    );
    let leaf = server.requests_for("code/coder-1/coder-1");
    assert_eq!(leaf.len(), 2);
    let tools = offered_tools(&leaf[0]);
    assert!(
        !tools.contains(&"spawn_agent".to_owned()),
        "depth 2 of 2: {tools:?}"
    );
    assert!(
        tools.contains(&"write_file".to_owned()),
        "a coder keeps its other tools"
    );
    let refused = &tool_results(&leaf[1])[0];
    assert!(
        refused.starts_with("error: spawn_agent: depth limit reached"),
        "{refused}"
    );
    assert!(
        server
            .requests_for("code/coder-1/coder-1/explore-1")
            .is_empty()
    );
    assert!(tool_results(&middle[1])[0].contains("leaf done"));

    let tree = agent_tree(&record_of(&json));
    assert_eq!(tree.len(), 1);
    assert_eq!(tree[0].agent_path, "code/coder-1");
    assert_eq!(tree[0].children.len(), 1);
    assert_eq!(tree[0].children[0].agent_path, "code/coder-1/coder-1");
    assert_eq!(tree[0].children[0].tokens.total(), 20);
    // The middle agent's tokens include the leaf's.
    assert_eq!(tree[0].tokens.total(), 20 + 20);
    // `orch show` draws the same tree, indented by depth.
    let show = crate::support::orch()
        .args([
            "show",
            json["run_id"].as_str().unwrap(),
            "--repo",
            repo.path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(show.contains("subagents (who spawned whom):"), "{show}");
    assert!(
        show.contains("\n  code/coder-1 (coder) succeeded — "),
        "{show}"
    );
    assert!(
        show.contains("\n    code/coder-1/coder-1 (coder) succeeded — "),
        "{show}"
    );
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn extra_children_wait_for_a_slot() {
    let repo = repo();
    let before = repo.snapshot();
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    calls(&[
                        spawn("s1", "explore", "First."),
                        spawn("s2", "explore", "Second."),
                    ]),
                    Reply::finish("c2", "done", None),
                ],
            )
            // Slow enough that, without the limit, the second would start first.
            .agent(
                "code/explore-1",
                vec![Reply::finish("e1", "one", None).after(Duration::from_millis(300))],
            )
            .agent("code/explore-2", vec![Reply::finish("e2", "two", None)]),
    );
    let (out, json) = run_stage(&repo, &server, &[("ORCH_SUBAGENT_MAX_CHILDREN", "1")]);
    assert_eq!(out.status.code(), Some(0));
    let results = tool_results(&server.requests_for("code")[1]);
    assert!(
        results[0].contains("one") && results[1].contains("two"),
        "{results:?}"
    );
    let record = record_of(&json);
    let events = read_jsonl(&record.join("agents.jsonl"));
    let ev = |p: &str| {
        events
            .iter()
            .find(|e| e["agent_path"] == p)
            .unwrap()
            .clone()
    };
    let (first, second) = (ev("code/explore-1"), ev("code/explore-2"));
    let first_end =
        first["spawned_at_us"].as_u64().unwrap() + first["duration_ms"].as_u64().unwrap() * 1000;
    assert!(
        second["spawned_at_us"].as_u64().unwrap() >= first_end,
        "the second child started before the first ended: {first} {second}"
    );
    before.assert_unchanged(&repo.snapshot());
}

/// A child that sleeps in `bash` forever, writing its shell's pid first.
/// An orch config dir under `scratch` whose `orch.toml` makes `scratch`
/// writable for tool processes (the sandbox keeps everything else outside
/// the lane read-only, and a read-only child's lane too).
fn sandbox_writable_config(scratch: &Path) -> PathBuf {
    let config = scratch.join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("orch.toml"),
        format!(
            "[sandbox]\nwritable = [{:?}]\n",
            scratch.display().to_string()
        ),
    )
    .unwrap();
    config
}

fn sleeping_child(pidfile: &Path, prompt_tokens: u64) -> Vec<Reply> {
    vec![
        Reply::tool_call(
            "z1",
            "bash",
            json!({"command": format!("echo $$ > {}; sleep 60", pidfile.display()), "timeout_secs": 120}),
        )
        .with_usage(prompt_tokens, 10),
    ]
}

fn parent_spawning_one(role: &str) -> Vec<Reply> {
    vec![
        calls(&[spawn("s1", role, "Never finishes.")]),
        Reply::finish("c2", "carried on", None),
    ]
}

/// Runs a stage whose parent spawns one explore [`sleeping_child`] reporting
/// `prompt_tokens`, under `env`; the child's shell writes its pid to the
/// returned file in `scratch`.
fn run_sleeping_child(
    repo: &TestRepo,
    scratch: &Path,
    prompt_tokens: u64,
    env: &[(&str, &str)],
) -> (FakeServer, Output, Value, PathBuf) {
    let pidfile = scratch.join("bash.pid");
    let server = FakeServer::start(
        Script::new()
            .agent("code", parent_spawning_one("explore"))
            .agent("code/explore-1", sleeping_child(&pidfile, prompt_tokens)),
    );
    let config = sandbox_writable_config(scratch);
    let mut env = env.to_vec();
    env.push(("ORCH_CONFIG_DIR", config.to_str().unwrap()));
    let (out, json) = run_stage(repo, &server, &env);
    (server, out, json, pidfile)
}

#[test]
fn a_child_past_its_time_limit_is_killed_with_its_tool_processes() {
    let repo = repo();
    let before = repo.snapshot();
    let scratch = tempfile::tempdir().unwrap();
    let (server, out, json, pidfile) = run_sleeping_child(
        &repo,
        scratch.path(),
        10,
        &[("ORCH_SUBAGENT_TIME_SECS", "4")],
    );
    assert_eq!(server.violations(), Vec::<String>::new());
    assert_eq!(out.status.code(), Some(0), "the parent carries on");
    let err = &tool_results(&server.requests_for("code")[1])[0];
    assert!(
        err.starts_with("error: spawn_agent: agent code/explore-1 (explore) timed_out"),
        "{err}"
    );
    assert!(
        err.contains("time limit hit; killed at its time limit of 4s"),
        "{err}"
    );
    assert!(
        err.contains("partial report: (no report yet) tool calls so far: bash"),
        "{err}"
    );

    let child = pid_of(&server.requests_for("code/explore-1")[0]);
    assert!(group_gone(child), "the child's group {child} is alive");
    let bash: i32 = std::fs::read_to_string(&pidfile)
        .expect("the child's bash ran")
        .trim()
        .parse()
        .unwrap();
    assert!(group_gone(bash), "the child's bash group {bash} is alive");

    let tree = agent_tree(&record_of(&json));
    assert_eq!(tree[0].status, AgentStatus::TimedOut);
    assert_eq!(tree[0].limit.as_deref(), Some("time"));
    assert_eq!(
        tree[0].tokens.total(),
        20,
        "the partial result counted its turn"
    );
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn a_child_past_its_token_budget_is_killed() {
    let repo = repo();
    let before = repo.snapshot();
    let scratch = tempfile::tempdir().unwrap();
    let (server, out, json, pidfile) = run_sleeping_child(
        &repo,
        scratch.path(),
        5000,
        &[("ORCH_SUBAGENT_TOKENS", "1000")],
    );
    assert_eq!(server.violations(), Vec::<String>::new());
    assert_eq!(out.status.code(), Some(0));
    let err = &tool_results(&server.requests_for("code")[1])[0];
    assert!(err.contains("budget_exceeded"), "{err}");
    assert!(
        err.contains("token limit hit; killed at its token budget: 5010 tokens used of 1000"),
        "{err}"
    );
    let child = pid_of(&server.requests_for("code/explore-1")[0]);
    assert!(group_gone(child), "the child's group {child} is alive");
    // The kill may come before the command started (or between the shell
    // creating the pid file and writing it); when it ran, it is gone too.
    if let Some(bash) = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|pid| pid.trim().parse::<i32>().ok())
    {
        assert!(group_gone(bash), "the child's bash group {bash} is alive");
    }
    // The child's tokens still count for the stage.
    assert!(json["stages"][0]["tokens"].as_u64().unwrap() >= 5010);
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn a_child_killed_by_sigkill_is_a_tool_error_and_the_run_completes() {
    let repo = repo();
    let before = repo.snapshot();
    let server = FakeServer::start(
        Script::new()
            .agent("code", parent_spawning_one("explore"))
            .agent("code/explore-1", vec![Reply::KillSender]),
    );
    let (out, json) = run_stage(&repo, &server, &[]);
    assert_eq!(server.violations(), Vec::<String>::new());
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json["status"], "succeeded");
    let err = &tool_results(&server.requests_for("code")[1])[0];
    assert!(
        err.starts_with("error: spawn_agent: agent code/explore-1 (explore) crashed"),
        "{err}"
    );
    assert!(
        err.contains("exited without a result (killed by SIGKILL)"),
        "{err}"
    );
    assert!(err.contains("partial report: (none)"), "{err}");
    let tree = agent_tree(&record_of(&json));
    assert_eq!(tree[0].status, AgentStatus::Crashed);
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn a_child_killed_by_sigkill_takes_its_running_bash_command_with_it() {
    // A SIGKILLed child cleans up nothing itself; its running `bash`
    // command goes anyway: with the child's end the reaper the parent
    // started it under kills the child's whole tree (and the command's own
    // reaper sees the child's control pipe close).
    let repo = repo();
    let scratch = tempfile::tempdir().unwrap();
    let pidfile = scratch.path().join("bash.pid");
    let server = FakeServer::start(
        Script::new()
            .agent("code", parent_spawning_one("explore"))
            .agent("code/explore-1", sleeping_child(&pidfile, 10)),
    );
    let (p, issue) = pipeline(scratch.path());
    let running = OrchRun::with_model_env(&server.base_url, &p, &repo)
        .issue(&issue)
        .json()
        .env("ORCH_CONFIG_DIR", sandbox_writable_config(scratch.path()))
        .command()
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let bash: i32 = (0..3000)
        .find_map(|_| {
            let pid = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|t| t.trim().parse().ok());
            if pid.is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            pid
        })
        .expect("the child's bash ran");
    let child = pid_of(&server.requests_for("code/explore-1")[0]);
    // SAFETY: plain syscall on the child orch's pid, which it sent.
    assert_eq!(unsafe { libc::kill(child, libc::SIGKILL) }, 0);
    let out = running.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(server.violations(), Vec::<String>::new());
    let err = &tool_results(&server.requests_for("code")[1])[0];
    assert!(
        err.contains("exited without a result (killed by SIGKILL)"),
        "{err}"
    );
    assert!(
        !Path::new(&format!("/proc/{bash}")).exists(),
        "the child's bash {bash} outlived the child"
    );
}

#[test]
fn an_explore_child_cannot_change_the_worktree_through_bash() {
    let repo = repo();
    let before = repo.snapshot();
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    Reply::tool_call(
                        "c1",
                        "write_file",
                        json!({"path": "notes.txt", "content": "the parent's work\n"}),
                    ),
                    calls(&[spawn("s1", "explore", "Look, but touch nothing.")]),
                    Reply::finish("c3", "done", None),
                ],
            )
            .agent(
                "code/explore-1",
                vec![
                    Reply::tool_call(
                        "e1",
                        "bash",
                        json!({"command": "echo broken > calc.py; echo mine > child.txt; rm notes.txt"}),
                    ),
                    Reply::finish("e2", "looked", None),
                ],
            ),
    );
    let (out, json) = run_stage(&repo, &server, &[]);
    assert_eq!(server.violations(), Vec::<String>::new());
    assert_eq!(out.status.code(), Some(0));
    let said = &tool_results(&server.requests_for("code/explore-1")[1])[0];
    // Where Landlock is available the kernel's read-only profile refuses
    // the writes themselves; elsewhere the snapshot guard undoes them.
    let kernel = said.contains("calc.py: Permission denied")
        && said.contains("child.txt: Permission denied")
        && said.contains("cannot remove 'notes.txt': Permission denied");
    let guard = said.starts_with("error: bash: this role is read-only: the command changed calc.py, child.txt, notes.txt; those changes were discarded");
    assert!(kernel || guard, "{said}");
    // The stage commit has the parent's file and nothing of the child's.
    let commit = json["stages"][0]["commit"].as_str().unwrap();
    let files = repo.git(&["show", "--name-only", "--format=", commit]);
    assert_eq!(files.trim(), "notes.txt");
    let record = record_of(&json);
    let log = std::fs::read_to_string(record.join("agents/code__explore-1/actions.jsonl")).unwrap();
    if kernel {
        assert!(
            log.contains(r#""sandbox":"read-only, network off: landlock"#),
            "{log}"
        );
    } else {
        assert!(log.contains("read-only: this role is read-only"), "{log}");
    }
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn orch_agent_json_has_report_status_turns_tokens_and_transcript() {
    let repo = repo();
    let before = repo.snapshot();
    let server = FakeServer::start(Script::new().agent(
        "explore",
        vec![Reply::finish("e1", "calc.py has add.", None).with_usage(20, 2)],
    ));
    let mut cmd = orch_with_model(&server.base_url);
    cmd.current_dir(&repo.path).args([
        "agent",
        "--role",
        "explore",
        "--task",
        "Where is add?",
        "--json",
    ]);
    let out = output_logged(&mut cmd);
    assert_eq!(out.status.code(), Some(0));
    let json = stdout_json(&out);
    assert_eq!(json["report"], "calc.py has add.");
    assert_eq!(json["status"], "succeeded");
    assert_eq!(json["turns"], 1);
    assert_eq!(json["tokens"], json!({"prompt": 20, "completion": 2}));
    let transcript = std::fs::read_to_string(json["transcript"].as_str().unwrap()).unwrap();
    assert!(transcript.contains("Where is add?"));
    before.assert_unchanged(&repo.snapshot());
}

/// Spawn latency: from the parent's spawn (recorded in `agents.jsonl`) to the
/// fake server receiving the child's first request, over 20 sequential
/// spawns. Run with `cargo test --test it -- --ignored --nocapture
/// spawn_latency` (add `--release` for a release build).
#[test]
#[ignore]
fn spawn_latency() {
    const N: usize = 20;
    let repo = repo();
    let mut parent: Vec<Reply> = (0..N)
        .map(|i| calls(&[spawn(&format!("s{i}"), "explore", "Answer at once.")]))
        .collect();
    parent.push(Reply::finish("end", "done", None));
    let mut script = Script::new().agent("code", parent);
    for i in 1..=N {
        script = script.agent(
            &format!("code/explore-{i}"),
            vec![Reply::finish("e", "ok", None)],
        );
    }
    let server = FakeServer::start(script);
    let (out, json) = run_stage(&repo, &server, &[]);
    assert_eq!(out.status.code(), Some(0));
    let record = record_of(&json);
    let events = read_jsonl(&record.join("agents.jsonl"));
    assert_eq!(events.len(), N);
    let mut ms: Vec<f64> = events
        .iter()
        .map(|e| {
            let path = e["agent_path"].as_str().unwrap();
            let first = &server.requests_for(path)[0];
            let received = first
                .received
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_micros() as f64;
            (received - e["spawned_at_us"].as_u64().unwrap() as f64) / 1000.0
        })
        .collect();
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let p = |q: f64| ms[((ms.len() as f64 * q).ceil() as usize).clamp(1, ms.len()) - 1];
    println!(
        "spawn latency over {N} spawns: median {:.1} ms, p90 {:.1} ms, min {:.1} ms, max {:.1} ms",
        p(0.5),
        p(0.9),
        ms[0],
        ms[N - 1]
    );
}

#[test]
fn a_child_is_killed_at_what_its_stage_has_left() {
    // The stage may use 1000 tokens; its own first turn uses 900 of them and
    // spawns a child. The child gets the remaining 100 (not the stage's
    // whole budget) and is killed once it passes them.
    let repo = repo();
    let before = repo.snapshot();
    let scratch = tempfile::tempdir().unwrap();
    let pidfile = scratch.path().join("bash.pid");
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    calls(&[spawn("s1", "explore", "Never finishes.")]).with_usage(850, 50),
                    Reply::finish("c2", "carried on", None),
                ],
            )
            .agent("code/explore-1", sleeping_child(&pidfile, 150)),
    );
    let p = write_pipeline(
        scratch.path(),
        "solo",
        "stages:\n  code:\n    role: coder\n    task: \"{{ issue }}\"\n    budget: {tokens: 1000}\n",
    );
    let issue = write_issue(
        scratch.path(),
        "# Look around\n\nFind where add is defined.\n",
    );
    let out = OrchRun::with_model_env(&server.base_url, &p, &repo)
        .issue(&issue)
        .json()
        // Before children were carved out of what was left, this child got
        // all 1000 tokens and ran into its time limit instead.
        .env("ORCH_SUBAGENT_TIME_SECS", "20")
        .env("ORCH_CONFIG_DIR", sandbox_writable_config(scratch.path()))
        .output();
    let json = stdout_json(&out);
    assert_eq!(server.violations(), Vec::<String>::new());
    let tree = agent_tree(&record_of(&json));
    assert_eq!(tree.len(), 1, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(tree[0].status, AgentStatus::BudgetExceeded);
    assert_eq!(tree[0].limit.as_deref(), Some("tokens"));
    assert_eq!(
        tree[0].reason.as_deref(),
        Some("killed at its token budget: 160 tokens used of 100")
    );
    let child = pid_of(&server.requests_for("code/explore-1")[0]);
    assert!(group_gone(child), "the child's group {child} is alive");
    // The stage is charged the child's tokens: 900 + 160 of 1000 leaves no
    // turn, so the stage stops at its budget.
    assert_eq!(json["stages"][0]["tokens"], 900 + 160);
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn a_child_compacts_at_the_profiles_context_window() {
    // The repo's profile says the model has a 4000-token window. The child
    // reads five ~6 KB files: at that window it must compact (at 0.7 × 4000
    // tokens), where the default 128k window never would.
    let repo = repo();
    let filler =
        |i: usize| format!("alpha beta gamma delta epsilon zeta eta theta {i}\n").repeat(120);
    for i in 1..=5 {
        repo.write(&format!("f{i}.txt"), filler(i));
    }
    let mut child: Vec<Reply> = (1..=5)
        .map(|i| {
            Reply::tool_call(
                &format!("r{i}"),
                "read_file",
                json!({"path": format!("f{i}.txt")}),
            )
        })
        .collect();
    child.push(Reply::text("Read all five files."));
    let summaries = (0..10)
        .map(|k| Reply::text(&format!("Summary {k}: the agent read files one by one.")))
        .collect();
    let server = FakeServer::start(
        Script::new()
            .agent("code", parent_spawning_one("explore"))
            .agent("code/explore-1", child)
            .agent("code/explore-1/compact", summaries),
    );
    repo.write(
        ".orch/orch.toml",
        format!(
            "default_profile = \"small\"\n\n[profiles.small]\nbase_url = \"{}\"\nmodel = \"m\"\ncontext_window = 4000\n",
            server.base_url
        ),
    );
    repo.commit_all("files and a profile");
    let before = repo.snapshot();
    let scratch = tempfile::tempdir().unwrap();
    let (p, issue) = pipeline(scratch.path());
    let out = OrchRun::new(&p, &repo).issue(&issue).json().output();
    let json = stdout_json(&out);
    assert_eq!(server.violations(), Vec::<String>::new());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = read_jsonl(&record_of(&json).join("agents/code__explore-1/actions.jsonl"));
    let start = log.iter().find(|e| e["event"] == "agent_start").unwrap();
    assert_eq!(start["compact_at_tokens"], 2800, "0.7 × the profile's 4000");
    assert!(
        log.iter().any(|e| e["event"] == "compaction"),
        "the child never compacted"
    );
    let tree = agent_tree(&record_of(&json));
    assert_eq!(tree[0].status, AgentStatus::Succeeded);
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn a_child_gets_the_model_key_through_its_secret_pipe_not_its_environment() {
    let repo = repo();
    let server = FakeServer::start(
        Script::new()
            .agent("code", parent_spawning_one("explore"))
            .agent(
                "code/explore-1",
                vec![Reply::finish("e1", "done", None).after(Duration::from_secs(2))],
            ),
    );
    let scratch = tempfile::tempdir().unwrap();
    let (p, issue) = pipeline(scratch.path());
    let mut cmd = OrchRun::with_model_env(&server.base_url, &p, &repo)
        .issue(&issue)
        .json()
        .command();
    let mut orch = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The child's request is held for 2 s: read its environment block then.
    let mut child_pid = None;
    for _ in 0..400 {
        if let Some(r) = server.requests_for("code/explore-1").first() {
            child_pid = Some(pid_of(r));
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let child_pid = child_pid.expect("the child asked the model");
    let environ = std::fs::read(format!("/proc/{child_pid}/environ"));
    assert!(orch.wait().unwrap().success());
    // The child authenticated with the key it read from the pipe.
    let auth = server.requests_for("code/explore-1")[0]
        .header("authorization")
        .map(str::to_owned);
    assert_eq!(auth, Some(format!("Bearer {FAKE_API_KEY}")));
    match environ {
        Ok(block) => {
            let text = String::from_utf8_lossy(&block);
            assert!(
                !text.contains(FAKE_API_KEY),
                "key in the child's environ: {text}"
            );
            assert!(!text.contains("ORCH_API_KEY"), "{text}");
        }
        // Not root: the child's block is closed to us (PR_SET_DUMPABLE 0).
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}"),
    }
}
