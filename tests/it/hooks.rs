//! Hooks in Claude Code's shape, end to end: a repository whose
//! `.claude/settings.json` has a PreToolUse hook that blocks `rm`, a
//! PostToolUse hook that formats what `Edit|Write` wrote, and a Stop hook
//! that demands the tests pass — each shown by what the scripted model is
//! sent next, the stage's commit and the `hook_run` events of the ledger;
//! a repository's hooks do not run untrusted and are named; a hook that
//! hangs is killed at its timeout; `--dry-run` lists a stage's hooks; and
//! the keys orch reads but does not honour are named once.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, fix_add, only_run_id, record_dir, stage_events,
    tool_results, user_text, write_pipeline,
};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;

const ISSUE: &str = "# add() subtracts\n\n`calc.add(2, 3)` returns -1; it should return 5.\n";

/// PreToolUse on Bash: refuses any command with `rm` (exit 2, reason on stderr).
const NO_RM: &str = r#"cmd=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["tool_input"]["command"])')
case " $cmd " in
  *" rm "*) echo "rm is not allowed in this repository: $cmd" >&2; exit 2 ;;
esac
exit 0
"#;

/// PostToolUse on Edit|Write: a tiny formatter that rewrites the file
/// Claude Code's `tool_input.file_path` names (trailing blanks off, one
/// space around `=`).
const FORMAT: &str = r#"import json, re, sys
path = json.load(sys.stdin)["tool_input"]["file_path"]
text = open(path).read()
lines = [re.sub(r"\s*=\s*", " = ", l.rstrip()) for l in text.splitlines()]
open(path, "w").write("\n".join(lines) + "\n")
"#;

/// Stop: the finish is accepted only when the tests pass.
const TESTS_PASS: &str = r#"export PYTHONDONTWRITEBYTECODE=1
python3 test_calc.py 2>&1 >/dev/null | tail -3 >&2
python3 test_calc.py >/dev/null 2>&1 || { echo "tests pass is required before finishing: python3 test_calc.py fails" >&2; exit 2; }
"#;

const TEST_CALC: &str =
    "from calc import add\nassert add(2, 3) == 5, f\"add(2, 3) == {add(2, 3)}\"\nprint('ok')\n";

fn settings() -> String {
    json!({
        "permissions": {"allow": ["Bash(npm test)"]},
        "env": {"FOO": "1"},
        "hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "command", "command": "sh \"$CLAUDE_PROJECT_DIR/.claude/hooks/no-rm.sh\""}
            ]}],
            "PostToolUse": [{"matcher": "Edit|Write", "hooks": [
                {"type": "command", "command": "python3 .claude/hooks/format.py", "timeout": 30}
            ]}],
            "Stop": [{"hooks": [
                {"type": "command", "command": "sh .claude/hooks/tests-pass.sh"}
            ]}]
        }
    })
    .to_string()
}

/// The repository of every test: a buggy `calc.py`, its test, a file the
/// model tries to delete, and the three hooks.
fn hooked_repo() -> TestRepo {
    TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            ("test_calc.py", TEST_CALC),
            ("keep.txt", "precious\n"),
            (".claude/settings.json", &settings()),
            (".claude/hooks/no-rm.sh", NO_RM),
            (".claude/hooks/format.py", FORMAT),
            (".claude/hooks/tests-pass.sh", TESTS_PASS),
        ],
        "calc with hooks",
    )
}

/// `orch run` of a one-stage `code` pipeline of the coder with `args`; its
/// output and run id.
fn run(repo: &TestRepo, server: &FakeServer, args: &[&str]) -> (Output, String) {
    let out = run_role(repo, server, "coder", &[], args);
    (out, only_run_id(&repo.path))
}

/// `orch run` of the pipeline `yaml` in `repo` against `server`, with
/// `env` and `args`.
fn run_yaml(
    repo: &TestRepo,
    server: &FakeServer,
    yaml: &str,
    env: &[(&str, &Path)],
    args: &[&str],
) -> Output {
    let scratch = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(scratch.path(), "p", yaml);
    let issue = scratch.path().join("issue.md");
    std::fs::write(&issue, ISSUE).unwrap();
    let mut run = OrchRun::new(&pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .args(args);
    for (k, v) in env {
        run = run.env(k, v);
    }
    let out = run.output();
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    out
}

/// A one-stage (`code`) run of role `role`; its output.
fn run_role(
    repo: &TestRepo,
    server: &FakeServer,
    role: &str,
    env: &[(&str, &Path)],
    args: &[&str],
) -> Output {
    let yaml = format!("stages:\n  code:\n    role: {role}\n");
    run_yaml(repo, server, &yaml, env, args)
}

/// A coder run with the user config dir `config`, ending with `code`.
fn run_as_user(
    repo: &TestRepo,
    server: &FakeServer,
    config: &tempfile::TempDir,
    code: Option<i32>,
) -> Output {
    let out = run_role(
        repo,
        server,
        "coder",
        &[("ORCH_CONFIG_DIR", config.path())],
        &[],
    );
    assert_eq!(out.status.code(), code, "{}", stderr(&out));
    out
}

/// A server whose `code` agent runs `command`, then finishes.
fn bash_then_finish(command: &str) -> FakeServer {
    FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call("c1", "bash", json!({ "command": command })),
            Reply::finish("c2", "Done.", None),
        ],
    ))
}

/// A repository with the buggy `calc.py` only.
fn calc_repo() -> TestRepo {
    TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "calc")
}

/// A user config dir whose `orch.toml` is `toml` (the user's own hooks).
fn user_config(toml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("orch.toml"), toml).unwrap();
    dir
}

fn hook_runs(repo: &TestRepo, run_id: &str) -> Vec<Value> {
    stage_events(&record_dir(repo, run_id), "code", "hook_run")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A file of the stage's commit.
fn committed(repo: &TestRepo, run_id: &str, path: &str) -> String {
    repo.git(&["show", &format!("orch/{run_id}/code:{path}")])
}

#[test]
fn a_pre_tool_use_hook_blocks_rm_and_the_model_is_told_why() {
    let repo = hooked_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call("c1", "bash", json!({"command": "rm keep.txt"})),
            fix_add("c2"),
            Reply::finish("c3", "add() adds; keep.txt stays.", None),
        ],
    ));
    let (out, run_id) = run(&repo, &server, &["--trust-hooks"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let reqs = server.requests_for("code");
    let refused = tool_results(&reqs[1]).join("\n");
    assert!(
        refused.contains("refused by a PreToolUse hook")
            && refused.contains("rm is not allowed in this repository: rm keep.txt"),
        "{refused}"
    );
    assert_eq!(committed(&repo, &run_id, "keep.txt"), "precious\n");

    let runs = hook_runs(&repo, &run_id);
    let pre: Vec<&Value> = runs
        .iter()
        .filter(|e| e["hook_event"] == "PreToolUse")
        .collect();
    assert_eq!(pre.len(), 1, "{runs:?}");
    assert_eq!(pre[0]["decision"], "block");
    assert_eq!(pre[0]["exit_code"], 2);
    assert_eq!(pre[0]["tool"], "bash");
    assert_eq!(pre[0]["matcher"], "Bash");
    assert_eq!(pre[0]["source"], ".claude/settings.json");
    // The tool event says the hook refused it.
    let tools = stage_events(&record_dir(&repo, &run_id), "code", "tool");
    assert!(
        tools[0]["policy"]
            .as_str()
            .is_some_and(|p| p.starts_with("deny: PreToolUse hook")),
        "{tools:?}"
    );
}

#[test]
fn a_post_tool_use_hook_formats_what_the_model_wrote() {
    let repo = hooked_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call(
                "c1",
                "write_file",
                json!({"path": "config.py", "content": "debug=True   \nlevel   =3\n"}),
            ),
            fix_add("c2"),
            Reply::finish("c3", "Done.", None),
        ],
    ));
    let (out, run_id) = run(&repo, &server, &["--trust-hooks"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        committed(&repo, &run_id, "config.py"),
        "debug = True\nlevel = 3\n"
    );
    let post: Vec<Value> = hook_runs(&repo, &run_id)
        .into_iter()
        .filter(|e| e["hook_event"] == "PostToolUse")
        .collect();
    // Both the write and the edit matched `Edit|Write`.
    let tools: Vec<&str> = post.iter().filter_map(|e| e["tool"].as_str()).collect();
    assert_eq!(tools, ["write_file", "edit_file"]);
    assert!(
        post.iter()
            .all(|e| e["exit_code"] == 0 && e["decision"] == "none")
    );
}

#[test]
fn a_stop_hook_sends_the_finish_back_until_the_tests_pass() {
    let repo = hooked_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::finish("c1", "Looked at it; all good.", None),
            fix_add("c2"),
            Reply::finish("c3", "add() now adds.", None),
        ],
    ));
    let (out, run_id) = run(&repo, &server, &["--trust-hooks"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 3);
    let told = tool_results(&reqs[1]).join("\n");
    assert!(
        told.contains("finish: not accepted yet: a Stop hook says")
            && told.contains("tests pass is required before finishing")
            && told.contains("add(2, 3) == -1"),
        "{told}"
    );
    let stops: Vec<Value> = hook_runs(&repo, &run_id)
        .into_iter()
        .filter(|e| e["hook_event"] == "Stop")
        .collect();
    let decisions: Vec<&str> = stops
        .iter()
        .filter_map(|e| e["decision"].as_str())
        .collect();
    assert_eq!(decisions, ["block", "none"]);
    let state = crate::support::state_json(&repo, &run_id);
    assert_eq!(state["stages"][0]["status"], "succeeded");
    assert_eq!(state["stages"][0]["summary"], "add() now adds.");
}

#[test]
fn untrusted_repository_hooks_do_not_run_and_are_named_with_other_unhonoured_keys() {
    let repo = hooked_repo();
    let server = bash_then_finish("rm keep.txt");
    let (out, run_id) = run(&repo, &server, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    let named = ".claude/settings.json: 3 hook(s) of the repository do not run; pass --trust-hooks";
    assert_eq!(err.matches(named).count(), 1, "{err}");
    // The other keys orch reads but does not honour, once each, with what
    // to do instead.
    assert_eq!(
        err.matches(".claude/settings.json: `permissions` is not used by orch: write the rules as a role's `bash:")
            .count(),
        1,
        "{err}"
    );
    assert_eq!(
        err.matches(".claude/settings.json: `env` is not used by orch")
            .count(),
        1,
        "{err}"
    );
    assert!(hook_runs(&repo, &run_id).is_empty());
    let files = repo.git(&["ls-tree", "--name-only", &format!("orch/{run_id}/code")]);
    assert!(!files.lines().any(|f| f == "keep.txt"), "{files}");
    // Nothing told the model about hooks.
    let reqs = server.requests_for("code");
    assert!(!user_text(&reqs[0]).contains("hook"));
}

#[test]
fn an_agent_files_unknown_key_and_unrun_hook_event_are_named_once_per_run() {
    let repo = TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            (
                ".claude/agents/fixer.md",
                "---\nname: fixer\ndescription: Fixes things.\nmemory: project\nhooks:\n  Notification:\n    - hooks:\n        - type: command\n          command: notify-send hi\n---\nYou fix bugs.\n",
            ),
        ],
        "calc with an agent file",
    );
    let server = FakeServer::start(
        Script::new()
            .agent("one", vec![Reply::finish("a1", "ok", None)])
            .agent("two", vec![Reply::finish("b1", "ok", None)]),
    );
    let yaml = "stages:\n  one:\n    role: fixer\n  two:\n    role: fixer\n    needs: [one]\n";
    let out = run_yaml(&repo, &server, yaml, &[], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    let memory = "role `fixer`: key `memory` is not used by orch";
    // (named before this change too; the hook event is new)
    assert_eq!(err.matches(memory).count(), 1, "{err}");
    let event = "hooks.Notification is not run by orch: orch sends no notifications";
    assert_eq!(err.matches(event).count(), 1, "{err}");
}

#[test]
fn a_hook_that_hangs_is_killed_at_its_timeout_and_the_call_goes_on() {
    let repo = calc_repo();
    // The user's own hooks (orch.toml in the config dir) run untrusted.
    let config = user_config(
        "[[hooks.PreToolUse]]\nmatcher = \"Edit\"\nhooks = [{ type = \"command\", command = \"sleep 300\", timeout = 1 }]\n",
    );
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![fix_add("c1"), Reply::finish("c2", "add() adds.", None)],
    ));
    let out = run_as_user(&repo, &server, &config, Some(0));
    let run_id = only_run_id(&repo.path);
    let runs = hook_runs(&repo, &run_id);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["timed_out"], true);
    assert_eq!(runs[0]["decision"], "error");
    // A failed hook blocks nothing: the edit ran.
    assert!(committed(&repo, &run_id, "calc.py").contains("a + b"));
    assert!(
        stderr(&out).contains("PreToolUse hook `sleep 300`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn dry_run_lists_the_hooks_a_stage_would_get() {
    let repo = hooked_repo();
    let scratch = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(scratch.path(), "p", "stages:\n  code:\n    role: coder\n");
    let issue = scratch.path().join("issue.md");
    std::fs::write(&issue, ISSUE).unwrap();
    let dry = |args: &[&str]| {
        OrchRun::new(&pipeline, &repo)
            .issue(&issue)
            .model("http://127.0.0.1:9", "fake-model")
            .args(["--dry-run"])
            .args(args)
            .output()
    };
    let out = dry(&["--trust-hooks"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "hook: PreToolUse [Bash] `sh \"$CLAUDE_PROJECT_DIR/.claude/hooks/no-rm.sh\"` (timeout 60s, from .claude/settings.json)",
        "hook: PostToolUse [Edit|Write] `python3 .claude/hooks/format.py` (timeout 30s, from .claude/settings.json)",
        "hook: Stop `sh .claude/hooks/tests-pass.sh` (timeout 60s, from .claude/settings.json)",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    let untrusted = dry(&[]);
    assert!(!String::from_utf8_lossy(&untrusted.stdout).contains("hook:"));
    assert!(!Path::new(&repo.path.join(".git/orch/runs")).exists());
}

/// A user config whose SubagentStop hook blocks once with `message`.
fn subagent_stop_config(message: &str) -> tempfile::TempDir {
    user_config(&format!(
        r#"[[hooks.SubagentStop]]
hooks = [{{ type = "command", command = '''python3 -c 'import json, sys; d = json.load(sys.stdin); d["stop_hook_active"] or (print("{message}", file=sys.stderr), sys.exit(2))' ''' }}]
"#
    ))
}

/// A server whose `code` agent spawns one explore child (answering
/// `child`), then finishes.
fn spawn_once(child: Vec<Reply>) -> FakeServer {
    FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    Reply::tool_call(
                        "c1",
                        "spawn_agent",
                        json!({"role": "explore", "task": "Where is add defined?"}),
                    ),
                    Reply::finish("c2", "The child found it.", None),
                ],
            )
            .agent("code/explore-1", child),
    )
}

#[test]
fn a_subagent_stop_hook_sends_a_subagents_finish_back_once() {
    let repo = calc_repo();
    let config = subagent_stop_config("name the file that defines add");
    let server = spawn_once(vec![
        Reply::finish("e1", "Somewhere.", None),
        Reply::finish("e2", "add is defined in calc.py.", None),
    ]);
    run_as_user(&repo, &server, &config, Some(0));
    let child = server.requests_for("code/explore-1");
    assert_eq!(child.len(), 2);
    let told = tool_results(&child[1]).join("\n");
    assert!(
        told.contains("a SubagentStop hook says")
            && told.contains("name the file that defines add"),
        "{told}"
    );
    let parent = tool_results(&server.requests_for("code")[1]).join("\n");
    assert!(parent.contains("add is defined in calc.py."), "{parent}");
    // The stage's own finish runs Stop hooks, not SubagentStop ones.
    assert!(hook_runs(&repo, &only_run_id(&repo.path)).is_empty());
}

/// A repository with the agent file `agent` (role `fixer`), and a server
/// whose `code` agent finishes at once.
fn fixer_run(agent: &str) -> (TestRepo, FakeServer) {
    let repo = TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            (".claude/agents/fixer.md", agent),
        ],
        "calc with an agent file",
    );
    let server =
        FakeServer::start(Script::new().agent("code", vec![Reply::finish("c1", "ok", None)]));
    (repo, server)
}

#[test]
fn an_agent_files_session_start_and_prompt_hooks_add_context_only_when_trusted() {
    let agent = "---\nname: fixer\ndescription: Fixes bugs.\nhooks:\n  SessionStart:\n    - hooks:\n        - type: command\n          command: echo 'The build command is make check.'\n  UserPromptSubmit:\n    - hooks:\n        - type: command\n          command: \"python3 -c 'import json, sys; print(\\\"task bytes:\\\", len(json.load(sys.stdin)[\\\"prompt\\\"]))'\"\n---\nYou fix bugs.\n";
    let (repo, server) = fixer_run(agent);
    let out = run_role(&repo, &server, "fixer", &[], &["--trust-hooks"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let task = user_text(&server.requests_for("code")[0]);
    assert!(task.contains("# Context from hooks"), "{task}");
    assert!(task.contains("The build command is make check."), "{task}");
    assert!(task.contains("task bytes: "), "{task}");
    let run_id = only_run_id(&repo.path);
    let events: Vec<String> = hook_runs(&repo, &run_id)
        .iter()
        .map(|e| {
            format!(
                "{}:{}",
                e["hook_event"].as_str().unwrap(),
                e["decision"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(events, ["SessionStart:context", "UserPromptSubmit:context"]);

    // Untrusted: the agent file's hooks are named once and do not run.
    let (repo2, server) = fixer_run(agent);
    let out = run_role(&repo2, &server, "fixer", &[], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.matches("role `fixer` (").count(), 1, "{err}");
    assert!(
        err.contains("its 2 hook(s) are the repository's and do not run; pass --trust-hooks"),
        "{err}"
    );
    assert!(!user_text(&server.requests_for("code")[0]).contains("Context from hooks"));
}

#[test]
fn a_user_prompt_submit_hook_that_refuses_the_task_ends_the_stage_before_any_request() {
    let repo = calc_repo();
    let config = user_config(
        "[[hooks.UserPromptSubmit]]\nhooks = [{ type = \"command\", command = \"echo 'tasks touching calc need a ticket' >&2; exit 2\" }]\n",
    );
    let server =
        FakeServer::start(Script::new().agent("code", vec![Reply::finish("c1", "never", None)]));
    run_as_user(&repo, &server, &config, Some(1));
    assert!(server.requests_for("code").is_empty());
    let run_id = only_run_id(&repo.path);
    let state = crate::support::state_json(&repo, &run_id);
    let reason = state["stages"][0]["failure"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
        + state["stages"][0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(
            "a UserPromptSubmit hook refused the task: tasks touching calc need a ticket"
        ),
        "{state}"
    );
}

#[test]
fn an_untracked_settings_local_json_is_the_users_and_runs_untrusted() {
    let local = json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "echo 'no shell in this repo today' >&2; exit 2"}
    ]}]}})
    .to_string();
    let repo = calc_repo();
    // Untracked: the user's own file (Claude Code's local settings).
    repo.write(".claude/settings.local.json", &local);
    let server = bash_then_finish("ls");
    let (out, run_id) = run(&repo, &server, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let told = tool_results(&server.requests_for("code")[1]).join("\n");
    assert!(told.contains("no shell in this repo today"), "{told}");
    assert_eq!(
        hook_runs(&repo, &run_id)[0]["source"],
        ".claude/settings.local.json"
    );

    // The same file committed is the repository's: named, not run.
    let repo = calc_repo();
    repo.write(".claude/settings.local.json", &local);
    repo.commit_all("ship local settings");
    let server = bash_then_finish("ls");
    let (out, run_id) = run(&repo, &server, &[]);
    assert!(
        stderr(&out)
            .contains(".claude/settings.local.json: 1 hook(s) of the repository do not run"),
        "{}",
        stderr(&out)
    );
    assert!(hook_runs(&repo, &run_id).is_empty());
}

#[test]
fn a_subagent_stop_hook_judges_a_text_answer_too() {
    let repo = calc_repo();
    let config = subagent_stop_config("cite the line");
    let server = spawn_once(vec![Reply::text("In calc.py."), Reply::text("calc.py:1.")]);
    run_as_user(&repo, &server, &config, Some(0));
    let child = server.requests_for("code/explore-1");
    assert_eq!(child.len(), 2);
    let told = user_text(&child[1]);
    assert!(
        told.contains("Your answer is not accepted yet: a SubagentStop hook says")
            && told.contains("cite the line"),
        "{told}"
    );
    let parent = tool_results(&server.requests_for("code")[1]).join("\n");
    assert!(parent.contains("calc.py:1."), "{parent}");
}

#[test]
fn hook_output_keys_orch_does_not_apply_are_named_once() {
    // Claude Code's `updatedInput` (rewrite the call) and `suppressOutput`:
    // read, not applied, and said so once — never dropped silently.
    let repo = calc_repo();
    let config = user_config(
        "[[hooks.PreToolUse]]\nmatcher = \"Bash\"\nhooks = [{ type = \"command\", command = \"echo '{\\\"suppressOutput\\\": true, \\\"hookSpecificOutput\\\": {\\\"hookEventName\\\": \\\"PreToolUse\\\", \\\"updatedInput\\\": {\\\"command\\\": \\\"echo rewritten\\\"}}}'\" }]\n",
    );
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call("b1", "bash", json!({"command": "echo as-written"})),
            Reply::tool_call("b2", "bash", json!({"command": "echo again"})),
            fix_add("c2"),
            Reply::finish("c3", "add() adds.", None),
        ],
    ));
    let out = run_as_user(&repo, &server, &config, Some(0));
    let err = stderr(&out);
    assert_eq!(
        err.matches("output has `updatedInput`, which orch does not apply")
            .count(),
        1,
        "{err}"
    );
    assert_eq!(
        err.matches("output has `suppressOutput`, which orch does not apply")
            .count(),
        1,
        "{err}"
    );
    // The call ran as the model wrote it.
    let reqs = server.requests_for("code");
    assert!(tool_results(&reqs[1]).join("\n").contains("as-written"));
}
