//! The safety boundary end to end: the real `orch` binary against the scripted
//! fake model server, on real git repositories. Each test asserts what the
//! model was sent back (the real tool output), the run record, the exit code,
//! and that the user's tree, index and HEAD are unchanged.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, orch, output_logged, record_dir, stage_events,
    state_json, stdout_json, tool_results, walk, write_issue, write_pipeline,
};
use serde_json::{Value, json};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

const ISSUE: &str = "# tidy up\n\nMake the code nicer.\n";

/// Secret values handed to `orch` through its environment; none of them may
/// reach a tool process, the run record, a commit message or the output.
const API_KEY: &str = "sk-orch-e2e-api-key-0123456789";
const OPENAI_KEY: &str = "sk-openai-e2e-fallback-key-42";
const GITHUB_TOKEN: &str = "ghp_e2eGithubTokenValue0123456789";
const SERVICE_SECRET: &str = "my-service-secret-value-777";
const SECRETS: [&str; 4] = [API_KEY, OPENAI_KEY, GITHUB_TOKEN, SERVICE_SECRET];

fn repo() -> TestRepo {
    TestRepo::with_commit(&[("app.py", "print('hi')\n")], "init")
}

/// A scratch dir with the issue and a one-stage pipeline running `role`.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new(role: &str, max_turns: u32) -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        write_issue(dir.path(), ISSUE);
        write_pipeline(
            dir.path(),
            "solo",
            &format!(
                "name: solo\ndescription: one stage\nstages:\n  work:\n    role: {role}\n    max_turns: {max_turns}\n"
            ),
        );
        Scratch { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// `orch run <pipeline> --repo … --issue … --json` against `base_url`.
fn run_cmd(
    repo: &TestRepo,
    scratch: &Scratch,
    pipeline: impl AsRef<OsStr>,
    base_url: &str,
) -> OrchRun {
    OrchRun::new(pipeline, repo)
        .issue(&scratch.path("ISSUE.md"))
        .model(base_url, "fake-model")
        .json()
}

/// [`run_cmd`] of the scratch dir's `solo.yaml` against `server`.
fn run_solo(repo: &TestRepo, scratch: &Scratch, server: &FakeServer) -> OrchRun {
    run_cmd(repo, scratch, scratch.path("solo.yaml"), &server.base_url)
}

/// The record directory of the run `j` (`orch run --json` output) describes.
fn record_of(repo: &TestRepo, j: &Value) -> PathBuf {
    record_dir(repo, j["run_id"].as_str().unwrap())
}

#[test]
fn a_symlink_planted_by_bash_does_not_leak_files_outside_the_worktree() {
    let repo = repo();
    let before = repo.snapshot();
    let scratch = Scratch::new("coder", 8);
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_call(
                "c1",
                "bash",
                json!({"command": "ln -s /etc leak && ls leak/passwd"}),
            ),
            Reply::tool_call("c2", "read_file", json!({"path": "leak/passwd"})),
            Reply::tool_call("c3", "read_file", json!({"path": "/etc/passwd"})),
            Reply::tool_call("c4", "read_file", json!({"path": "../../../../etc/passwd"})),
            Reply::tool_call(
                "c5",
                "write_file",
                json!({"path": "leak/orch-was-here", "content": "x"}),
            ),
            Reply::tool_call("c6", "grep", json!({"pattern": "root", "path": "leak"})),
            Reply::tool_call("c7", "list_files", json!({"path": "leak"})),
            Reply::finish("c8", "Tried to escape; could not.", None),
        ],
    ));
    let out = run_solo(&repo, &scratch, &server).output();
    assert_eq!(out.status.code(), Some(0));
    let reqs = server.requests_for("work");
    assert_eq!(reqs.len(), 8);
    let results = tool_results(&reqs[7]);
    assert_eq!(results.len(), 7);
    assert!(
        results[0].contains("leak/passwd") && results[0].contains("exit 0"),
        "the symlink was planted: {}",
        results[0]
    );
    for (i, r) in results.iter().enumerate().skip(1) {
        assert!(
            r.starts_with("error:"),
            "call {} was not refused: {r}",
            i + 1
        );
        assert!(
            !r.contains("root:x:") && !r.contains("/bin/"),
            "passwd content reached the model: {r}"
        );
    }
    assert!(
        results[1].contains("symlink"),
        "the error says why: {}",
        results[1]
    );
    assert!(results[2].contains("outside"), "{}", results[2]);
    assert!(results[3].contains("escapes"), "{}", results[3]);
    assert!(!Path::new("/etc/orch-was-here").exists());
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn keys_never_reach_tool_processes_the_record_or_the_output() {
    let repo = repo();
    let before = repo.snapshot();
    let scratch = Scratch::new("coder", 8);
    // Arguments whose 4096-byte log cap cuts through the token.
    let prefix = "{\"command\":\": ";
    let pad = "p".repeat(4096 - prefix.len() - GITHUB_TOKEN.len() / 2);
    let straddling = format!(": {pad}{GITHUB_TOKEN}");
    assert_eq!(
        json!({"command": straddling})
            .to_string()
            .find(GITHUB_TOKEN),
        Some(4096 - GITHUB_TOKEN.len() / 2)
    );
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_call("c1", "bash", json!({"command": "env"})),
            Reply::Message {
                message: json!({
                    "role": "assistant",
                    "content": format!("I will check the key {API_KEY} and the token {GITHUB_TOKEN}."),
                    "tool_calls": [{
                        "id": "c2", "type": "function",
                        "function": {
                            "name": "bash",
                            "arguments": json!({"command": format!("echo {SERVICE_SECRET} {OPENAI_KEY}")}).to_string(),
                        }
                    }],
                }),
                usage: None,
            },
            Reply::tool_call("c3", "bash", json!({"command": straddling})),
            Reply::finish("c4", &format!("Done; the secret is {SERVICE_SECRET}."), None),
        ],
    ));
    let out = run_solo(&repo, &scratch, &server)
        .env("ORCH_API_KEY", API_KEY)
        .env("OPENAI_API_KEY", OPENAI_KEY)
        .env("GITHUB_TOKEN", GITHUB_TOKEN)
        .env("MY_SERVICE_SECRET", SERVICE_SECRET)
        .output();
    assert_eq!(out.status.code(), Some(0));
    let j = stdout_json(&out);
    let reqs = server.requests_for("work");
    assert_eq!(reqs.len(), 4);

    // The key does go to the model server, in the header only.
    let auth = reqs[0]
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v.clone());
    assert_eq!(auth, Some(format!("Bearer {API_KEY}")));

    // `env` ran in the tool process and saw none of the keys or their names.
    let env_result = &tool_results(&reqs[1])[0];
    assert!(env_result.contains("PATH="), "env ran: {env_result}");
    for secret in SECRETS {
        assert!(!env_result.contains(secret), "{secret} reached bash");
    }
    for name in [
        "ORCH_API_KEY",
        "OPENAI_API_KEY",
        "GITHUB_TOKEN",
        "MY_SERVICE_SECRET",
    ] {
        assert!(!env_result.contains(name), "{name} reached bash");
    }

    // No file of the run record holds a key: not the action log (the model's
    // content, its arguments, the echoed output, a cut argument), not the
    // transcript, state, diff or PR text.
    let record = record_of(&repo, &j);
    let files = walk(&record);
    for name in ["actions.jsonl", "transcript.json", "state.json", "pr.md"] {
        assert!(
            files.iter().any(|f| f.file_name().unwrap() == name),
            "{name} was written: {files:?}"
        );
    }
    for file in &files {
        let text = String::from_utf8_lossy(&std::fs::read(file).unwrap()).into_owned();
        for secret in SECRETS {
            assert!(
                !text.contains(secret),
                "{secret} leaked into {}",
                file.display()
            );
        }
        // Not even the half of the token before the log cap.
        assert!(
            !text.contains(&GITHUB_TOKEN[..GITHUB_TOKEN.len() / 2]),
            "a cut token leaked into {}",
            file.display()
        );
    }
    let log = std::fs::read_to_string(record.join("stages/work/actions.jsonl")).unwrap();
    assert!(log.contains("[REDACTED]"), "the log shows where: {log}");
    let transcript = std::fs::read_to_string(record.join("stages/work/transcript.json")).unwrap();
    assert!(transcript.contains("I will check the key [REDACTED]"));

    // Nor the commit message, stdout or stderr.
    let msg = repo.git(&[
        "log",
        "-1",
        "--format=%B",
        "--end-of-options",
        j["stages"][0]["commit"].as_str().unwrap(),
    ]);
    for secret in SECRETS {
        assert!(
            !msg.contains(secret),
            "{secret} in the commit message: {msg}"
        );
        assert!(!String::from_utf8_lossy(&out.stdout).contains(secret));
        assert!(!String::from_utf8_lossy(&out.stderr).contains(secret));
    }
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn broken_spec_files_exit_2_and_name_the_file() {
    let repo = repo();
    let scratch = Scratch::new("coder", 4);
    let dead = "http://127.0.0.1:9/v1";

    let non_utf8 = scratch.path("latin1.yaml");
    let mut bytes = b"name: latin1\ndescription: caf".to_vec();
    bytes.extend_from_slice(&[0xE9, 0xFF, 0xFE]);
    bytes.extend_from_slice(b"\nstages:\n  work:\n    role: coder\n");
    std::fs::write(&non_utf8, bytes).unwrap();

    let huge = scratch.path("huge.yaml");
    let mut text = String::from("name: huge\ndescription: |\n");
    while text.len() < 2 << 20 {
        text.push_str("  padding padding padding padding padding padding padding\n");
    }
    text.push_str("stages:\n  work:\n    role: coder\n");
    std::fs::write(&huge, text).unwrap();

    let not_yaml = scratch.path("garbage.yaml");
    std::fs::write(&not_yaml, "stages: [unclosed\n\t- {{{\n").unwrap();

    let before = repo.snapshot();
    for (file, expected) in [
        (&non_utf8, "UTF-8"),
        (&huge, "too large"),
        (&not_yaml, "garbage.yaml:"),
    ] {
        let out = run_cmd(&repo, &scratch, file, dead).output();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", file.display());
        assert!(
            stderr.contains(file.file_name().unwrap().to_str().unwrap()),
            "names the file: {stderr}"
        );
        assert!(stderr.contains(expected), "says what is wrong: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(out.stdout.is_empty());
    }
    before.assert_unchanged(&repo.snapshot());

    // A role of the repo with a wrong type: every command that loads roles refuses.
    repo.write(
        ".orch/roles/coder.md",
        "---\nname: coder\ndescription: x\ntools: [bash, finish]\nmax_turns: lots\n---\nYou code.\n",
    );
    let before = repo.snapshot();
    let out = run_cmd(&repo, &scratch, "issue-to-pr", dead).output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("coder.md:5:"), "names file:line: {stderr}");
    assert!(stderr.contains("expected a whole number"), "{stderr}");
    let out = output_logged(orch().current_dir(&repo.path).arg("validate"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("coder.md:5:"));
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn enormous_arguments_are_a_tool_error_and_the_run_goes_on() {
    let repo = repo();
    let before = repo.snapshot();
    let scratch = Scratch::new("coder", 6);
    let big = "x".repeat((1 << 20) + 10);
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_call(
                "c1",
                "write_file",
                json!({"path": "big.txt", "content": big}),
            ),
            Reply::tool_call(
                "c2",
                "write_file",
                json!({"path": "small.txt", "content": "ok\n"}),
            ),
            Reply::finish("c3", "Wrote the small file instead.", None),
        ],
    ));
    let out = run_solo(&repo, &scratch, &server).output();
    assert_eq!(out.status.code(), Some(0));
    let reqs = server.requests_for("work");
    assert_eq!(reqs.len(), 3);
    let results = tool_results(&reqs[2]);
    assert!(
        results[0].starts_with("error: write_file: arguments are") && results[0].contains("limit"),
        "{}",
        results[0]
    );
    assert!(
        results[0].len() < 500,
        "the error does not echo the arguments"
    );
    assert!(!results[1].starts_with("error:"), "{}", results[1]);
    let j = stdout_json(&out);
    let commit = j["stages"][0]["commit"].as_str().unwrap();
    let files = repo.git(&["ls-tree", "--name-only", commit]);
    assert!(
        files.contains("small.txt") && !files.contains("big.txt"),
        "{files}"
    );
    // The action log caps what it copies.
    let record = record_of(&repo, &j);
    let log_len = std::fs::metadata(record.join("stages/work/actions.jsonl"))
        .unwrap()
        .len();
    assert!(log_len < 64 * 1024, "action log is {log_len} bytes");
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn a_model_repeating_a_failing_call_is_stopped() {
    let repo = repo();
    let before = repo.snapshot();
    let scratch = Scratch::new("coder", 10);
    let again = |id: &str| Reply::tool_call(id, "read_file", json!({"path": "nope.py"}));
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            again("c1"),
            again("c2"),
            again("c3"),
            again("c4"),
            again("c5"),
        ],
    ));
    let out = run_solo(&repo, &scratch, &server).output();
    assert_eq!(out.status.code(), Some(1));
    let j = stdout_json(&out);
    let reason = j["stages"][0]["reason"].as_str().unwrap().to_owned();
    assert!(
        reason.contains("same failing `read_file` call 3 times"),
        "{reason}"
    );
    assert_eq!(server.requests_for("work").len(), 3, "no fourth turn");
    let state = state_json(&repo, j["run_id"].as_str().unwrap());
    assert_eq!(state["status"], "failed");
    assert_eq!(state["stages"][0]["status"], "failed");
    assert_eq!(state["stages"][0]["reason"], reason.as_str());
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn a_broken_model_server_exits_3_with_a_clear_message() {
    let html =
        "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>";
    let cases: Vec<(&str, Vec<Reply>, &str)> = vec![
        (
            "html",
            vec![Reply::Raw(html.to_owned())],
            "understand the reply",
        ),
        (
            "empty",
            vec![Reply::Raw(String::new())],
            "understand the reply",
        ),
        (
            "invalid json",
            vec![Reply::Raw("{\"choices\": [".to_owned())],
            "understand the reply",
        ),
        (
            "closed",
            (0..5).map(|_| Reply::Close).collect(),
            "after 5 attempts",
        ),
    ];
    for (what, replies, expected) in cases {
        let repo = repo();
        let before = repo.snapshot();
        let scratch = Scratch::new("coder", 4);
        let server = FakeServer::start(Script::new().agent("work", replies));
        let out = run_solo(&repo, &scratch, &server)
            .env("ORCH_RETRY_BASE_MS", "1")
            .output();
        assert_eq!(out.status.code(), Some(3), "{what}");
        let j = stdout_json(&out);
        let reason = j["stages"][0]["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("model error: failed to"),
            "{what}: {reason}"
        );
        assert!(reason.contains(expected), "{what}: {reason}");
        assert!(
            reason.contains("/chat/completions"),
            "names the endpoint: {reason}"
        );
        assert!(
            reason.len() < 600,
            "{what}: a snippet, not the page: {reason}"
        );
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
        assert_eq!(
            server.remaining("work"),
            0,
            "{what}: every scripted reply used"
        );
        before.assert_unchanged(&repo.snapshot());
    }
}

/// A repo override of the coder role whose bash policy asks before `make`.
fn repo_with_asking_coder() -> TestRepo {
    let repo = repo();
    repo.write(
        ".orch/roles/coder.md",
        "---\nname: coder\ndescription: Writes code; asks before make.\ntools: [bash, read_file, write_file, finish]\nbash: {ask: [\"make *\"]}\n---\nYou write code.\n",
    );
    repo.commit_all("asking coder");
    repo
}

#[test]
fn ask_rules_deny_without_a_terminal_and_allow_with_yes() {
    for yes in [false, true] {
        let repo = repo_with_asking_coder();
        let before = repo.snapshot();
        let scratch = Scratch::new("coder", 4);
        let server = FakeServer::start(Script::new().agent(
            "work",
            vec![
                Reply::tool_call("c1", "bash", json!({"command": "make x"})),
                Reply::finish("c2", "Tried make.", None),
            ],
        ));
        let mut cmd = run_solo(&repo, &scratch, &server);
        if yes {
            cmd = cmd.args(["--yes"]);
        }
        let out = cmd.output();
        assert_eq!(out.status.code(), Some(0));
        let result = &tool_results(&server.requests_for("work")[1])[0];
        let events = stage_events(&record_of(&repo, &stdout_json(&out)), "work", "tool");
        let policy = events[0]["policy"].as_str().unwrap();
        if yes {
            assert!(
                policy.starts_with("allow (--yes)") && policy.contains("make *"),
                "{policy}"
            );
            assert!(!result.contains("denied by policy"), "{result}");
            assert!(result.contains("[exit "), "make ran: {result}");
        } else {
            assert!(
                policy.starts_with("deny:") && policy.contains("make *"),
                "{policy}"
            );
            assert!(
                result.starts_with("error: bash: command not run: denied by policy")
                    && result.contains("--yes"),
                "{result}"
            );
            assert_eq!(events[0]["is_error"], true);
        }
        before.assert_unchanged(&repo.snapshot());
    }
}

#[test]
fn the_repo_allowlist_exempts_a_command_from_the_built_in_deny_list() {
    let repo = repo();
    repo.write(
        ".orch/allowlist",
        "# force-pushing the scratch branch is fine here\ngit push --force origin scratch\n",
    );
    repo.commit_all("allowlist");
    let before = repo.snapshot();
    let scratch = Scratch::new("coder", 4);
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_calls(&[
                (
                    "c1",
                    "bash",
                    json!({"command": "git push --force origin scratch"}),
                ),
                (
                    "c2",
                    "bash",
                    json!({"command": "git push --force origin main"}),
                ),
            ]),
            Reply::finish("c3", "Pushed (or tried to).", None),
        ],
    ));
    let out = run_solo(&repo, &scratch, &server).output();
    assert_eq!(out.status.code(), Some(0));
    let events = stage_events(&record_of(&repo, &stdout_json(&out)), "work", "tool");
    assert_eq!(
        events[0]["policy"],
        "allow (repo allowlist: `git push --force origin scratch` lifts: force push (`git push --force`))",
        "{}",
        events[0]
    );
    // It ran (and failed: there is no remote), which is the command's own business.
    assert_ne!(events[0]["exit_code"], 0);
    assert!(events[0]["exit_code"].is_i64(), "{}", events[0]);
    let denied = events[1]["policy"].as_str().unwrap();
    assert!(
        denied.starts_with("deny:") && denied.contains("built-in deny list"),
        "{denied}"
    );
    let results = tool_results(&server.requests_for("work")[1]);
    assert!(!results[0].contains("denied by policy"), "{}", results[0]);
    assert!(results[1].contains("denied by policy"), "{}", results[1]);
    before.assert_unchanged(&repo.snapshot());
}

/// Issues 25.1 and 25.6: the absolute spellings of the home and the new
/// deny-list families, sent by the model as `bash` calls, are refused with
/// a reason the model can act on; the canary HOME, the key and the user's
/// repository are unchanged and no key reaches the model.
#[test]
fn absolute_home_paths_and_the_new_deny_list_families_are_refused_with_clear_reasons() {
    let repo = repo();
    let before = repo.snapshot();
    let scratch = Scratch::new("coder", 12);
    let home = scratch.path("home");
    let key =
        "-----BEGIN OPENSSH PRIVATE KEY-----\nCANARY-KEY-25-6\n-----END OPENSSH PRIVATE KEY-----\n";
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), key).unwrap();
    std::fs::write(home.join(".bashrc"), "# canary\n").unwrap();
    let h = home.display();
    let app = repo.path.join("app.py");
    let calls: Vec<(String, &str)> = vec![
        (format!("cat {h}/.ssh/id_ed25519"), "holds the user's keys"),
        (format!("echo x >> {h}/.bashrc"), "startup configuration"),
        (
            format!("rm -rf {h}"),
            "recursive delete of the home directory",
        ),
        (
            format!("python3 -c \"import os; os.remove('{}')\"", app.display()),
            "outside the worktree",
        ),
        (
            "perl -e 'unlink \"/srv/orch-canary\"'".to_owned(),
            "removes `/srv/orch-canary`, outside the worktree",
        ),
        (
            "git -c core.hooksPath=/tmp/x commit --allow-empty -m y".to_owned(),
            "`core.hooksPath` outside this worktree",
        ),
        (
            format!("ln -s {h}/.ssh/id_ed25519 k && cat k"),
            "keys or credentials",
        ),
        // 1 EiB: refused by the policy; were it not, the file system
        // refuses it at once instead of filling the disk.
        (
            "fallocate -l 1E big".to_owned(),
            "allocates 1073741824.0 GiB",
        ),
        ("nohup sh -c 'sleep 300' &".to_owned(), "`nohup … &`"),
        ("setsid sleep 300".to_owned(), "`setsid`"),
    ];
    let mut replies: Vec<Reply> = calls
        .iter()
        .enumerate()
        .map(|(i, (c, _))| Reply::tool_call(&format!("c{i}"), "bash", json!({"command": c})))
        .collect();
    replies.push(Reply::finish("done", "Tried; all refused.", None));
    let server = FakeServer::start(Script::new().agent("work", replies));
    let out = run_solo(&repo, &scratch, &server)
        .env("HOME", &home)
        .output();
    assert_eq!(out.status.code(), Some(0));
    let reqs = server.requests_for("work");
    assert_eq!(reqs.len(), calls.len() + 1);
    for (i, (cmd, want)) in calls.iter().enumerate() {
        let results = tool_results(&reqs[i + 1]);
        let result = results.last().unwrap();
        assert!(
            result.contains("denied by policy") && result.contains(want),
            "{cmd}: {result}"
        );
    }
    let sent: String = reqs.iter().map(|r| r.body.to_string()).collect();
    assert!(
        !sent.contains("CANARY-KEY-25-6"),
        "the key reached the model"
    );
    assert_eq!(
        std::fs::read_to_string(home.join(".ssh/id_ed25519")).unwrap(),
        key
    );
    assert_eq!(
        std::fs::read_to_string(home.join(".bashrc")).unwrap(),
        "# canary\n"
    );
    before.assert_unchanged(&repo.snapshot());
}
