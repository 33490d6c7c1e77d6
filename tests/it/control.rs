//! The run's control channel (issue 33, the actions behind the UI's
//! buttons): a live scripted run whose role asks before `touch` waits, with
//! `--ask-via control`, for `orch answer`; `--allow` lets the command run
//! (its file is in the stage's commit), `--deny` tells the model; an
//! unknown ask id and a second answer are refused. `orch guide` on the
//! live stage puts the note into the next model request as an appended
//! user message and the action log records it; a finished run refuses
//! guidance. Without `--ask-via control` nothing waits (safety.rs).

use crate::support::{
    AWAIT_LIMIT, FakeServer, OrchRun, Recorded, Reply, Script, TestRepo, orch, run_text,
    stage_events, tool_results, write_issue, write_pipeline,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A repository whose coder asks before `touch`.
fn repo() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("calc.py", "def add(a, b):\n    return a - b\n");
    repo.write(
        ".orch/roles/coder.md",
        "---\nname: coder\ndescription: Writes code; asks before touch.\ntools: [bash, read_file, edit_file, finish]\nbash: {ask: [\"touch *\"]}\n---\nYou write code.\n",
    );
    repo.commit_all("base");
    repo
}

/// The background `orch run`, killed if the test fails before it ends.
struct Background(Option<std::process::Child>);

impl Background {
    /// Waits for the run to end.
    fn finish(mut self) -> std::process::Output {
        let child = self.0.take().unwrap();
        let out = child.wait_with_output().unwrap();
        eprintln!(
            "--- orch run: exit {:?}\n{}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `orch run` of a one-stage (`code`) pipeline with `--ask-via
/// control` and `extra` flags (`--json` unless they ask for events),
/// against `server`.
fn start(repo: &TestRepo, tmp: &Path, server: &FakeServer, extra: &[&str]) -> Background {
    start_with(repo, tmp, server, extra, None)
}

/// [`start`] with the user config dir `config` (`ORCH_CONFIG_DIR`).
fn start_with(
    repo: &TestRepo,
    tmp: &Path,
    server: &FakeServer,
    extra: &[&str],
    config: Option<&Path>,
) -> Background {
    let pipeline = write_pipeline(tmp, "p", "name: p\nstages:\n  code:\n    role: coder\n");
    let issue = write_issue(tmp, "# make a file\n");
    let cmd = OrchRun::new(&pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .args(if extra.contains(&"--events") {
            &[][..]
        } else {
            &["--json"][..]
        })
        .args(["--ask-via", "control"])
        .args(extra);
    let mut cmd = match config {
        Some(dir) => cmd.env("ORCH_CONFIG_DIR", dir),
        None => cmd,
    }
    .command();
    Background(Some(
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    ))
}

/// Waits (bounded) for the run's ask `id` to be written; the run's record.
fn wait_for_ask(repo: &TestRepo, id: &str) -> PathBuf {
    let started = Instant::now();
    loop {
        let found = std::fs::read_dir(repo.path.join(".git/orch/runs"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.join(format!("control/asks/{id}.json")).is_file());
        if let Some(record) = found {
            return record;
        }
        assert!(
            started.elapsed() < AWAIT_LIMIT,
            "the run never asked (ask {id})"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn run_id(record: &Path) -> String {
    record.file_name().unwrap().to_string_lossy().into_owned()
}

fn orch_in(repo: &TestRepo, args: &[&str]) -> (Option<i32>, String, String) {
    run_text(orch().current_dir(&repo.path).args(args))
}

/// The messages of a recorded request.
fn messages(req: &Recorded) -> Vec<Value> {
    req.body["messages"].as_array().unwrap().clone()
}

/// The files of the stage's commit.
fn committed_files(repo: &TestRepo, run: &str) -> String {
    repo.git(&["ls-tree", "-r", "--name-only", &format!("orch/{run}/code")])
}

#[test]
fn an_ask_waits_for_orch_answer_and_guidance_reaches_the_next_request() {
    let repo = repo();
    let tmp = tempfile::tempdir().unwrap();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call("c1", "bash", json!({"command": "touch made"})),
            Reply::finish("c2", "Made the file.", None),
        ],
    ));
    let run = start(&repo, tmp.path(), &server, &["--events", "jsonl"]);
    let record = wait_for_ask(&repo, "1");
    let id = run_id(&record);

    // Listed while it waits; an id it never asked is refused.
    let (code, stdout, stderr) = orch_in(&repo, &["answer", &id]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.starts_with("1  code  bash  `touch made`  (role ask rule `touch *`"),
        "{stdout}"
    );
    let (code, _, stderr) = orch_in(&repo, &["answer", &id, "7", "--allow"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("answer ask `7`") && stderr.contains("no such ask (pending: 1)"),
        "{stderr}"
    );

    // Guidance for the live stage, sent while its call waits; a stage the
    // run does not have is refused.
    let (code, stdout, stderr) = orch_in(
        &repo,
        &[
            "guide",
            "last",
            "code",
            "Keep the change small.\nNo new files but this one.",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("guidance 1 for stage `code`"), "{stdout}");
    let (code, _, stderr) = orch_in(&repo, &["guide", &id, "docs", "x"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("no such stage (its stages: code)"),
        "{stderr}"
    );

    let (code, stdout, stderr) = orch_in(&repo, &["answer", &id, "1", "--allow", "--by", "alice"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        format!("ask 1 of run {id}: allowed (stage `code`: bash `touch made`)\n")
    );
    // The first answer is final.
    let (code, _, stderr) = orch_in(&repo, &["answer", &id, "1", "--deny"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("already answered (allowed) by alice"),
        "{stderr}"
    );

    let out = run.finish();
    assert_eq!(out.status.code(), Some(0));
    // The event stream (every line valid against the schema) shows the
    // ask, its answer and the note, in that order.
    let events = crate::events::events_of(&out);
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e["type"].as_str())
        .filter(|t| ["ask", "ask_answer", "guidance"].contains(t))
        .collect();
    assert_eq!(kinds, ["ask", "ask_answer", "guidance"]);
    let public = |t: &str| events.iter().find(|e| e["type"] == t).unwrap().clone();
    assert_eq!(
        (&public("ask")["stage"], &public("ask")["command"]),
        (&json!("code"), &json!("touch made"))
    );
    assert_eq!(
        (&public("ask_answer")["allow"], &public("ask_answer")["by"]),
        (&json!(true), &json!("alice"))
    );
    assert_eq!(
        public("guidance")["preview"],
        "Keep the change small.\nNo new files but this one."
    );

    // The command ran: its file is in the stage's commit, its result went
    // back to the model.
    assert!(
        committed_files(&repo, &id).lines().any(|l| l == "made"),
        "{}",
        committed_files(&repo, &id)
    );
    let requests = server.requests_for("code");
    assert_eq!(requests.len(), 2);
    let result = &tool_results(&requests[1])[0];
    assert!(
        result.starts_with("(no output)\n[exit 0"),
        "the command ran: {result}"
    );
    // The note is the last message of the next request, appended after
    // the tool result: the first request is a prefix of the second.
    let (first, second) = (messages(&requests[0]), messages(&requests[1]));
    assert_eq!(second[..first.len()], first[..]);
    let last = second.last().unwrap();
    assert_eq!(last["role"], "user");
    assert_eq!(
        last["content"],
        "Guidance from the user (sent while you work; take it into account from now on):\n> Keep the change small.\n> No new files but this one."
    );
    assert_eq!(second[second.len() - 2]["role"], "tool");

    // The action log has the ask, its answer and the guidance.
    let ask = stage_events(&record, "code", "ask");
    assert_eq!(ask.len(), 1, "{ask:?}");
    assert_eq!(
        (
            &ask[0]["id"],
            &ask[0]["tool"],
            &ask[0]["command"],
            &ask[0]["via"]
        ),
        (
            &json!("1"),
            &json!("bash"),
            &json!("touch made"),
            &json!("control")
        )
    );
    assert_eq!(
        (&ask[0]["turn"], &ask[0]["call_id"]),
        (&json!(1), &json!("c1"))
    );
    let answer = stage_events(&record, "code", "ask_answer");
    assert_eq!(answer.len(), 1, "{answer:?}");
    assert_eq!(
        (&answer[0]["allow"], &answer[0]["by"], &answer[0]["call_id"]),
        (&json!(true), &json!("alice"), &json!("c1"))
    );
    let tool = stage_events(&record, "code", "tool");
    assert_eq!(
        tool[0]["policy"],
        "allow (approved by alice): role ask rule `touch *`"
    );
    let guidance = stage_events(&record, "code", "guidance");
    assert_eq!(guidance.len(), 1, "{guidance:?}");
    assert_eq!(
        (&guidance[0]["turn"], &guidance[0]["by"], &guidance[0]["id"]),
        (&json!(2), &json!("the user"), &json!("1"))
    );

    // `orch log` reads them.
    let (code, log, stderr) = orch_in(&repo, &["log", &id, "code"]);
    assert_eq!(code, Some(0), "{stderr}");
    for line in [
        "ask 1: bash `touch made` waits for approval (role ask rule `touch *`; via control)",
        "ask 1 allowed by alice after ",
        "guidance 1 from the user: Keep the change small.",
    ] {
        assert!(log.contains(line), "{line} in\n{log}");
    }

    // A finished run takes no more guidance, and no more answers.
    let (code, _, stderr) = orch_in(&repo, &["guide", &id, "code", "too late"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("the stage is succeeded; guidance goes only to a running or pending stage"),
        "{stderr}"
    );
    let (code, stdout, _) = orch_in(&repo, &["answer", &id]);
    assert_eq!(
        (code, stdout.as_str()),
        (Some(0), format!("run {id} waits on no ask\n").as_str())
    );
}

#[test]
fn a_denied_ask_tells_the_model_and_the_command_does_not_run() {
    let repo = repo();
    let tmp = tempfile::tempdir().unwrap();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call("c1", "bash", json!({"command": "touch made"})),
            Reply::finish("c2", "Could not make the file.", None),
        ],
    ));
    let run = start(&repo, tmp.path(), &server, &[]);
    let record = wait_for_ask(&repo, "1");
    let id = run_id(&record);
    // The only pending ask needs no id.
    let (code, stdout, stderr) = orch_in(&repo, &["answer", "last", "--deny", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (
            &answer["id"],
            &answer["allow"],
            &answer["by"],
            &answer["stage"]
        ),
        (&json!("1"), &json!(false), &json!("cli"), &json!("code"))
    );
    assert_eq!(run.finish().status.code(), Some(0));

    let result = &tool_results(&server.requests_for("code")[1])[0];
    assert_eq!(
        result,
        "error: bash: command not run: denied by policy: role ask rule `touch *`; the user was asked (ask 1) and it was denied by cli"
    );
    assert!(!committed_files(&repo, &id).lines().any(|l| l == "made"));
    let answer = stage_events(&record, "code", "ask_answer");
    assert_eq!(
        (&answer[0]["allow"], &answer[0]["by"]),
        (&json!(false), &json!("cli"))
    );
}

#[test]
fn an_ask_nobody_answers_is_denied_after_the_ask_timeout() {
    let repo = repo();
    let tmp = tempfile::tempdir().unwrap();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call("c1", "bash", json!({"command": "touch made"})),
            Reply::finish("c2", "Nobody answered.", None),
        ],
    ));
    let out = start(&repo, tmp.path(), &server, &["--ask-timeout", "0.3"]).finish();
    assert_eq!(out.status.code(), Some(0));
    let result = &tool_results(&server.requests_for("code")[1])[0];
    assert!(
        result.ends_with("and it was denied by orch: no answer within 0.3s (--ask-timeout)"),
        "{result}"
    );
    // The answer the run gave itself stands: a late one is refused.
    let (code, _, stderr) = orch_in(&repo, &["answer", "last", "1", "--allow"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("already answered (denied) by orch"),
        "{stderr}"
    );
}

#[test]
fn a_stage_whose_time_budget_runs_out_while_it_waits_denies_its_ask_on_the_way_out() {
    let repo = repo();
    let tmp = tempfile::tempdir().unwrap();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::tool_call(
            "c1",
            "bash",
            json!({"command": "touch made"}),
        )],
    ));
    // No --ask-timeout: the wait lasts as long as the run's time budget
    // (long enough for a loaded machine to reach the call first).
    let out = start(&repo, tmp.path(), &server, &["--max-time", "5"]).finish();
    assert_eq!(out.status.code(), Some(1));
    let record = wait_for_ask(&repo, "1");
    let answer = stage_events(&record, "code", "ask_answer");
    assert_eq!(answer.len(), 1, "{answer:?}");
    assert_eq!(
        (&answer[0]["allow"], &answer[0]["by"]),
        (&json!(false), &json!("orch"))
    );
    assert!(
        answer[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("the stage stopped before an answer"),
        "{}",
        answer[0]
    );
    assert_eq!(stage_events(&record, "code", "budget_exceeded").len(), 1);
    // Nobody can answer it any more, and nothing is pending.
    let (code, _, stderr) = orch_in(&repo, &["answer", "last", "1", "--allow"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("already answered (denied) by orch"),
        "{stderr}"
    );
    assert!(
        !committed_files(&repo, &run_id(&record))
            .lines()
            .any(|l| l == "made")
    );
}

/// A user config whose PreToolUse hook asks before every `bash` call, as a
/// Claude Code hook does with `permissionDecision: "ask"`.
fn asking_hook_config() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let answer = json!({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "ask",
        "permissionDecisionReason": "commands need a look"
    }});
    std::fs::write(
        dir.path().join("orch.toml"),
        format!(
            "[[hooks.PreToolUse]]\nmatcher = \"Bash\"\nhooks = [{{ type = \"command\", command = \"\"\"printf '%s' '{}'\"\"\" }}]\n",
            answer.to_string().replace('\\', "\\\\").replace('"', "\\\"")
        ),
    )
    .unwrap();
    dir
}

/// A live run whose model calls `bash touch made` (then finishes with
/// `summary`), waiting on the user config's hook's ask.
struct HookAsked {
    repo: TestRepo,
    server: FakeServer,
    run: Option<Background>,
    record: PathBuf,
    id: String,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl HookAsked {
    fn start(summary: &str) -> HookAsked {
        let repo =
            TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "calc");
        let tmp = tempfile::tempdir().unwrap();
        let config = asking_hook_config();
        let server = FakeServer::start(Script::new().agent(
            "code",
            vec![
                Reply::tool_call("c1", "bash", json!({"command": "touch made"})),
                Reply::finish("c2", summary, None),
            ],
        ));
        let run = start_with(&repo, tmp.path(), &server, &[], Some(config.path()));
        let record = wait_for_ask(&repo, "1");
        let id = run_id(&record);
        HookAsked {
            repo,
            server,
            run: Some(run),
            record,
            id,
            _dirs: (tmp, config),
        }
    }

    /// Waits for the run to end.
    fn finish(&mut self) -> std::process::Output {
        self.run.take().unwrap().finish()
    }
}

#[test]
fn a_hooks_ask_waits_for_orch_answer_like_a_roles_ask_rule() {
    // Before, a PreToolUse hook's `ask` was refused unless --yes: a run
    // with a control channel (the UI, `orch answer`) now asks its user.
    let mut asked = HookAsked::start("Made the file.");
    let (repo, id) = (&asked.repo, asked.id.clone());
    let (code, stdout, stderr) = orch_in(repo, &["answer", &id]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.starts_with(
            "1  code  bash  `touch made`  (a PreToolUse hook asks: commands need a look"
        ),
        "{stdout}"
    );
    let (code, _, stderr) = orch_in(repo, &["answer", &id, "1", "--allow"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(asked.finish().status.code(), Some(0));
    let files = committed_files(&asked.repo, &id);
    assert!(files.lines().any(|l| l == "made"), "{files}");
    let ask = stage_events(&asked.record, "code", "ask");
    assert_eq!(ask.len(), 1, "{ask:?}");
    assert_eq!(
        (&ask[0]["command"], &ask[0]["call_id"]),
        (&json!("touch made"), &json!("c1"))
    );
    let hook = stage_events(&asked.record, "code", "hook_run");
    assert_eq!(hook[0]["decision"], "ask", "{hook:?}");
}

#[test]
fn a_hooks_ask_denied_is_the_models_refusal_and_nothing_runs() {
    let mut asked = HookAsked::start("Could not make the file.");
    let id = asked.id.clone();
    let (code, _, stderr) = orch_in(&asked.repo, &["answer", &id, "1", "--deny"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(asked.finish().status.code(), Some(0));
    let files = committed_files(&asked.repo, &id);
    assert!(!files.lines().any(|l| l == "made"), "{files}");
    let result = &tool_results(&asked.server.requests_for("code")[1])[0];
    assert!(
        result.contains("not run: a PreToolUse hook asks: commands need a look"),
        "{result}"
    );
    let answer = stage_events(&asked.record, "code", "ask_answer");
    assert_eq!(
        (&answer[0]["allow"], &answer[0]["call_id"]),
        (&json!(false), &json!("c1"))
    );
}
