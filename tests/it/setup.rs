//! `orch setup` end to end: the real binary, the scripted fake model, real
//! commands in temp dirs (a python venv and a local wheel, no network), the
//! setup record, kills and resumes.

use crate::support::{
    FakeServer, Reply, Script, assert_exit, offered_tools, orch_with_model, tool_results,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A scratch setup: the directory commands run in, the records root and a
/// config dir for house rules.
pub(crate) struct Scratch {
    tmp: tempfile::TempDir,
    pub(crate) work: PathBuf,
    pub(crate) records: PathBuf,
    config: PathBuf,
}

impl Scratch {
    pub(crate) fn new() -> Scratch {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        let records = tmp.path().join("records");
        let config = tmp.path().join("config");
        for d in [&work, &config] {
            std::fs::create_dir_all(d).unwrap();
        }
        Scratch {
            work,
            records,
            config,
            tmp,
        }
    }

    /// `orch setup <args>` in the work dir against `server`.
    fn setup(&self, server: &FakeServer, args: &[&str]) -> Command {
        let mut c = orch_with_model(&server.base_url);
        c.current_dir(&self.work)
            .env("ORCH_SETUP_DIR", &self.records)
            .env("ORCH_CONFIG_DIR", &self.config)
            .arg("setup")
            .args(args);
        c
    }

    /// Runs `orch setup <args>` to its end.
    pub(crate) fn run(&self, server: &FakeServer, args: &[&str]) -> Output {
        self.setup(server, args).output().unwrap()
    }

    /// The id of the only setup recorded.
    pub(crate) fn only_id(&self) -> String {
        let ids: Vec<String> = std::fs::read_dir(&self.records)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(ids.len(), 1, "{ids:?}");
        ids[0].clone()
    }

    pub(crate) fn record_json(&self, file: &str) -> Value {
        let p = self.records.join(self.only_id()).join(file);
        serde_json::from_str(
            &std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
        )
        .unwrap()
    }
}

pub(crate) fn step(command: &str, risk: &str, check: &str) -> Value {
    json!({"command": command, "why": format!("why: {command}"), "risk": risk, "check": check})
}

pub(crate) fn plan_call(id: &str, steps: Vec<Value>, next: &[&str]) -> Reply {
    Reply::tool_call(id, "plan", json!({"steps": steps, "next": next}))
}

pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wheel_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/setup")
}

/// `a` appears in `text` before `b` (both appear).
fn assert_before(text: &str, a: &str, b: &str) {
    let ia = text
        .find(a)
        .unwrap_or_else(|| panic!("`{a}` missing from:\n{text}"));
    let ib = text
        .find(b)
        .unwrap_or_else(|| panic!("`{b}` missing from:\n{text}"));
    assert!(ia < ib, "`{a}` must come before `{b}` in:\n{text}");
}

#[test]
fn plan_only_prints_and_saves_the_plan_and_refuses_writes() {
    let s = Scratch::new();
    std::fs::write(
        s.config.join("setup.md"),
        "Install Node through fnm, never globally.\n",
    )
    .unwrap();
    let steps = vec![
        step(
            "python3 -m venv venv",
            "install",
            "./venv/bin/python --version",
        ),
        step(
            "./venv/bin/pip install requests",
            "install",
            "./venv/bin/python -c 'import requests'",
        ),
    ];
    let server = FakeServer::start(Script::new().agent(
        "setup",
        vec![
            Reply::tool_call("c1", "detect_system", json!({})),
            Reply::tool_call("c2", "run_command", json!({"command": "touch canary"})),
            Reply::tool_call("c3", "run_command", json!({"command": "echo hi > canary2"})),
            Reply::tool_call("c4", "check_command", json!({"command": "python3"})),
            plan_call("c5", steps, &["source venv/bin/activate"]),
        ],
    ));
    let out = s.run(
        &server,
        &["a python virtualenv in ./venv with requests", "--plan-only"],
    );
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("Plan (2 steps):"), "{text}");
    assert!(
        text.contains("  1. [install] python3 -m venv venv"),
        "{text}"
    );
    assert!(
        text.contains("  2. [install] ./venv/bin/pip install requests"),
        "{text}"
    );
    assert!(text.contains("plan only: nothing was changed"), "{text}");
    // The canaries: nothing was written.
    for f in ["canary", "canary2", "venv"] {
        assert!(!s.work.join(f).exists(), "{f} was created");
    }
    let plan = s.record_json("plan.json");
    assert_eq!(plan["steps"][0]["command"], "python3 -m venv venv");
    assert_eq!(plan["steps"][1]["risk"], "install");
    assert_eq!(plan["next"][0], "source venv/bin/activate");
    assert_eq!(s.record_json("state.json")["status"], "planned");

    let reqs = server.requests();
    assert_eq!(reqs.len(), 5);
    assert_eq!(
        offered_tools(&reqs[0]),
        [
            "detect_system",
            "check_command",
            "run_command",
            "ask_user",
            "plan"
        ]
    );
    let system = reqs[0].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        system.contains("Install Node through fnm, never globally."),
        "{system}"
    );
    assert!(system.contains("Mode: plan only"), "{system}");
    let results = tool_results(&reqs[4]);
    assert!(
        results[1].contains("run_command refused `touch canary`: it is not read-only")
            && results[1].contains("--plan-only"),
        "{}",
        results[1]
    );
    assert!(results[2].contains("writes to `canary2`"), "{}", results[2]);
    assert!(results[3].contains("\"found\": true"), "{}", results[3]);
    assert!(server.violations().is_empty(), "{:?}", server.violations());
}

#[test]
fn yes_creates_a_venv_from_a_local_wheel_checks_each_step_and_reports_versions() {
    let s = Scratch::new();
    let pip = format!(
        "./venv/bin/pip install --no-cache-dir --no-index --find-links {} tinypkg",
        wheel_dir().display()
    );
    let steps = vec![
        step("python3 --version", "read", "python3 --version"),
        step(
            "python3 -m venv venv",
            "install",
            "./venv/bin/python --version",
        ),
        step(
            &pip,
            "install",
            "./venv/bin/python -c \"import tinypkg; print('tinypkg', tinypkg.__version__)\"",
        ),
    ];
    let server = FakeServer::start(Script::new().agent(
        "setup",
        vec![
            Reply::tool_call("q1", "ask_user", json!({"question": "Use ./venv?"})),
            plan_call("p1", steps, &["source venv/bin/activate"]),
        ],
    ));
    let out = s.run(
        &server,
        &["a python virtualenv in ./venv with tinypkg", "--yes"],
    );
    assert_exit(&out, 0);
    let text = stdout(&out);
    // Every command is printed before its output, and every check runs.
    assert_before(
        &text,
        "$ python3 -m venv venv",
        "check $ ./venv/bin/python --version",
    );
    assert_before(
        &text,
        &format!("$ {pip}"),
        "Successfully installed tinypkg-0.1.0",
    );
    assert_before(
        &text,
        "Successfully installed tinypkg-0.1.0",
        "check $ ./venv/bin/python -c",
    );
    assert_eq!(text.matches("check $ ").count(), 3, "{text}");
    assert_before(&text, "step 3 verified", "Report: setup");
    let report = &text[text.find("Report: setup").unwrap()..];
    assert!(
        report.contains("Changed:\n  2. python3 -m venv venv\n  3. ./venv/bin/pip install"),
        "{report}"
    );
    assert!(report.contains("Versions now:"), "{report}");
    assert!(report.contains("3. tinypkg 0.1.0"), "{report}");
    assert!(report.contains("2. Python 3."), "{report}");
    assert!(report.contains("  - source venv/bin/activate"), "{report}");
    assert!(s.work.join("venv/bin/python").exists());
    let state = s.record_json("state.json");
    assert_eq!(state["status"], "done");
    for st in state["steps"].as_array().unwrap() {
        assert_eq!(st["status"], "verified", "{state}");
    }
    // ask_user headless with --yes answers yes, and is logged.
    let reqs = server.requests();
    assert!(tool_results(&reqs[1])[0].contains("the user answered: yes (headless, --yes)"));
    let log = std::fs::read_to_string(s.records.join(s.only_id()).join("log.jsonl")).unwrap();
    assert!(log.contains("\"event\":\"ask_user\""), "{log}");
}

#[test]
fn headless_without_yes_runs_no_install_step_and_exits_9() {
    let s = Scratch::new();
    let steps = vec![
        step("uname -m", "read", "uname -m"),
        step("touch marker", "install", "test -f marker"),
    ];
    let server = FakeServer::start(Script::new().agent(
        "setup",
        vec![
            Reply::tool_call("q1", "ask_user", json!({"question": "Proceed?"})),
            plan_call("p1", steps, &[]),
        ],
    ));
    let out = s.run(&server, &["a marker file"]);
    assert_exit(&out, 9);
    let text = stdout(&out);
    assert!(
        text.contains("step(s) 2 change the system and need confirmation"),
        "{text}"
    );
    assert!(!text.contains("$ touch marker"), "{text}");
    assert!(!text.contains("$ uname -m"), "nothing runs at all: {text}");
    assert!(!s.work.join("marker").exists());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not confirmed"));
    assert_eq!(s.record_json("state.json")["status"], "not_confirmed");
    let reqs = server.requests();
    assert!(tool_results(&reqs[1])[0].contains("the user answered: no (headless, no --yes)"));
}

#[test]
fn a_failing_step_reaches_the_model_and_the_changed_plan_is_printed_and_run() {
    let s = Scratch::new();
    let v1 = vec![
        step("echo one >> one.txt", "install", "test -f one.txt"),
        step("echo boom-marker-42; exit 3", "install", "test -f boom.txt"),
    ];
    let v2 = vec![step("echo fixed > fixed.txt", "install", "cat fixed.txt")];
    let server = FakeServer::start(Script::new().agent(
        "setup",
        vec![plan_call("p1", v1, &[]), plan_call("p2", v2, &[])],
    ));
    let out = s.run(&server, &["two files", "--yes"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    let failure = reqs[1].messages().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        failure.contains("Step 2 failed: `echo boom-marker-42; exit 3` → exit 3"),
        "{failure}"
    );
    assert!(failure.contains("boom-marker-42\n"), "{failure}");
    assert_before(&text, "step 2 failed", "Changed plan (2 steps):");
    assert!(
        text.contains("  2. [install] echo fixed > fixed.txt"),
        "{text}"
    );
    assert_before(&text, "Changed plan (2 steps):", "$ echo fixed > fixed.txt");
    assert_eq!(
        std::fs::read_to_string(s.work.join("one.txt")).unwrap(),
        "one\n",
        "step 1 ran once"
    );
    assert_eq!(
        std::fs::read_to_string(s.work.join("fixed.txt")).unwrap(),
        "fixed\n"
    );
    assert!(s.records.join(s.only_id()).join("plan.v2.json").is_file());
    assert_eq!(
        s.record_json("plan.json")["steps"][1]["command"],
        "echo fixed > fixed.txt"
    );
}

#[test]
fn a_step_that_fails_again_after_its_retry_fails_the_setup() {
    let s = Scratch::new();
    let bad = || vec![step("exit 4", "install", "test -f never")];
    let server = FakeServer::start(Script::new().agent(
        "setup",
        vec![plan_call("p1", bad(), &[]), plan_call("p2", bad(), &[])],
    ));
    let out = s.run(&server, &["nothing good", "--yes"]);
    assert_exit(&out, 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("failed again after its one retry"));
    assert_eq!(server.requests().len(), 2, "one retry only");
    assert_eq!(s.record_json("state.json")["status"], "failed");
}

#[test]
fn resume_after_a_kill_continues_from_the_first_unverified_step() {
    let s = Scratch::new();
    let steps = ["a", "b", "c"]
        .iter()
        .map(|l| {
            step(
                &format!("echo {l} >> counter.txt"),
                "install",
                &format!("grep -q {l} counter.txt"),
            )
        })
        .collect();
    let server = FakeServer::start(Script::new().agent("setup", vec![plan_call("p1", steps, &[])]));
    let out = s
        .setup(&server, &["three lines", "--yes"])
        .env("ORCH_TEST_KILL_AT", "setup-step-verified:2")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), None, "killed: {}", stdout(&out));
    assert_eq!(
        std::fs::read_to_string(s.work.join("counter.txt")).unwrap(),
        "a\nb\n"
    );
    let id = s.only_id();
    let out = s.run(&server, &["--resume", &id, "--yes"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.contains(&format!("resuming setup {id}")), "{text}");
    assert!(text.contains("[3/3] install step"), "{text}");
    assert!(
        !text.contains("$ echo a >> counter.txt") && !text.contains("$ echo b >> counter.txt"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(s.work.join("counter.txt")).unwrap(),
        "a\nb\nc\n"
    );
    assert_eq!(
        server.requests().len(),
        1,
        "the resume needed no model round"
    );
    assert_eq!(s.record_json("state.json")["status"], "done");
}

#[test]
fn detect_system_matches_os_release_uname_and_command_v() {
    let s = Scratch::new();
    let server = FakeServer::start(Script::new().agent(
        "setup",
        vec![
            Reply::tool_call("d1", "detect_system", json!({})),
            plan_call("p1", vec![], &[]),
        ],
    ));
    let out = s.run(&server, &["nothing", "--plan-only"]);
    assert_exit(&out, 0);
    let result: Value = serde_json::from_str(&tool_results(&server.requests()[1])[0]).unwrap();

    let os_release = std::fs::read_to_string("/etc/os-release").unwrap();
    let field = |k: &str| {
        os_release
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(|v| v.trim_matches('"').to_owned())
    };
    assert_eq!(
        result["distro"]["id"].as_str(),
        field("ID").as_deref(),
        "{result}"
    );
    assert_eq!(
        result["distro"]["version"].as_str(),
        field("VERSION_ID").as_deref()
    );
    let sh = |c: &str| {
        let o = Command::new("bash").arg("-c").arg(c).output().unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        )
    };
    assert_eq!(result["arch"], sh("uname -m").1);
    assert_eq!(result["kernel"], sh("uname -r").1);
    assert_eq!(result["os"], "linux");
    let found: Vec<&str> = result["package_managers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    for pm in [
        "apt", "apt-get", "dnf", "yum", "pacman", "apk", "zypper", "brew",
    ] {
        let (present, _) = sh(&format!("command -v {pm}"));
        assert_eq!(found.contains(&pm), present, "{pm}: {found:?}");
    }
    let (has_python, path) = sh("command -v python3");
    if has_python {
        let py = result["runtimes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "python3")
            .unwrap_or_else(|| panic!("python3 missing: {result}"));
        assert_eq!(py["path"], path);
        assert_eq!(py["version"], sh("python3 --version 2>&1").1);
    }
    let root = sh("id -u").1 == "0";
    assert_eq!(result["root"], root);
}

/// Runs `orch setup <args>` on a pseudo-terminal (util-linux `script`),
/// typing `input`; `None` where `script` is missing.
fn on_terminal(
    s: &Scratch,
    server: &FakeServer,
    args: &str,
    input: &[u8],
) -> Option<(Option<i32>, String)> {
    use std::io::{Read, Write};
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` to make a pseudo-terminal");
        return None;
    }
    let inner = s.setup(server, &[]);
    let mut cmd = Command::new("script");
    cmd.args(["-qec"])
        .arg(format!(
            "{} setup {args}",
            inner.get_program().to_string_lossy()
        ))
        .arg("/dev/null")
        .current_dir(&s.work)
        .env_clear();
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    cmd.env("CI", "false")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let status = child.wait().unwrap();
    drop(stdin);
    Some((status.code(), out))
}

/// On a terminal (a pseudo-terminal from util-linux `script`): `ask_user`
/// gets the typed answer, install steps are confirmed one by one, `n`
/// skips a step (exit 9 at the end, the report says so).
#[test]
fn on_a_terminal_steps_are_confirmed_one_by_one() {
    let s = Scratch::new();
    let steps = ["a", "b", "c"]
        .iter()
        .map(|f| step(&format!("touch {f}"), "install", &format!("test -f {f}")))
        .collect();
    let server = FakeServer::start(Script::new().agent(
        "setup",
        vec![
            Reply::tool_call("q1", "ask_user", json!({"question": "Which files?"})),
            plan_call("p1", steps, &[]),
        ],
    ));
    let Some((code, out)) = on_terminal(&s, &server, "'three files'", b"some files\ny\nn\ny\n")
    else {
        return;
    };
    assert_eq!(code, Some(9), "{out}");
    assert!(out.contains("answer: some files (terminal)"), "{out}");
    assert!(out.contains("run step 1 `touch a`? [y/n/a(ll)/q]"), "{out}");
    assert!(out.contains("skipped step 2 (not confirmed)"), "{out}");
    assert!(out.contains("Skipped (not confirmed): step(s) 2"), "{out}");
    assert!(s.work.join("a").exists() && s.work.join("c").exists());
    assert!(!s.work.join("b").exists());
    let reqs = server.requests();
    assert!(tool_results(&reqs[1])[0].contains("the user answered: some files (terminal)"));
}

/// Issue 25.1: on a terminal a system step is asked for on its own, even
/// after `a` (all) at an install step and even with `--yes`.
#[test]
fn on_a_terminal_system_steps_are_confirmed_each_on_its_own() {
    for (args, input) in [
        ("'three files'", &b"a\ny\n"[..]),
        ("--yes 'three files'", &b"y\n"[..]),
    ] {
        let s = Scratch::new();
        let steps = vec![
            step("touch a", "install", "test -f a"),
            step("touch b", "system", "test -f b"),
            step("touch c", "install", "test -f c"),
        ];
        let server =
            FakeServer::start(Script::new().agent("setup", vec![plan_call("p1", steps, &[])]));
        let Some((code, out)) = on_terminal(&s, &server, args, input) else {
            return;
        };
        assert_eq!(code, Some(0), "{out}");
        assert!(
            out.contains(
                "run step 2 `touch b` (a system step: it may write /usr, /etc, /var, …)? [y/n/q]"
            ),
            "{out}"
        );
        assert!(!out.contains("run step 3"), "{out}");
        for f in ["a", "b", "c"] {
            assert!(s.work.join(f).exists(), "{f}: {out}");
        }
    }
}

#[test]
fn a_broken_model_server_exits_3_and_the_record_says_failed() {
    let s = Scratch::new();
    let server = FakeServer::start(Script::new());
    let out = s
        .setup(&server, &["anything", "--plan-only"])
        .env("ORCH_RETRY_BASE_MS", "1")
        .output()
        .unwrap();
    assert_exit(&out, 3);
    assert_eq!(s.record_json("state.json")["status"], "failed");
}

#[test]
fn resume_of_an_unknown_id_is_invalid_input() {
    let s = Scratch::new();
    let server = FakeServer::start(Script::new());
    let out = s.run(&server, &["--resume", "nope"]);
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no setup `nope`"));
    assert!(server.requests().is_empty());
}

fn home_of(cmd: &Command) -> PathBuf {
    cmd.get_envs()
        .find(|(k, _)| *k == "HOME")
        .and_then(|(_, v)| v)
        .map(PathBuf::from)
        .unwrap()
}

/// A step cannot read the secret paths, also when the setup runs in
/// `$HOME` itself (then `$HOME` stays read-only).
#[test]
fn a_step_cannot_read_the_secret_paths() {
    for in_home in [false, true] {
        let s = Scratch::new();
        // Spelled so that no check before the run sees a key path (the plan
        // check refuses `/.ssh/id_ed25519` in any spelling): the sandbox
        // is what stops it.
        let read_key = "python3 -c \"import os; print(open(os.path.join(os.environ['HOME'], '.s' + 'sh', 'id_ed' + '25519')).read())\"";
        let server = FakeServer::start(Script::new().agent(
            "setup",
            vec![
                plan_call(
                    "p1",
                    vec![step(read_key, "install", "test -f key-read")],
                    &[],
                ),
                plan_call(
                    "p2",
                    vec![step("touch made-here", "install", "test -f made-here")],
                    &[],
                ),
            ],
        ));
        let mut cmd = s.setup(&server, &["read a key", "--yes"]);
        let home = home_of(&cmd);
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::write(home.join(".ssh/id_ed25519"), "SECRET-KEY-CANARY-7781\n").unwrap();
        if in_home {
            cmd.current_dir(&home);
        }
        let out = cmd.output().unwrap();
        let log = std::fs::read_to_string(s.records.join(s.only_id()).join("log.jsonl")).unwrap();
        if !log.contains("\"sandbox\":\"landlock") {
            eprintln!("skipped: Landlock is not enforced here");
            return;
        }
        let text = stdout(&out);
        assert!(!text.contains("SECRET-KEY-CANARY-7781"), "{text}");
        assert!(text.contains("PermissionError"), "{text}");
        let failure = server.requests()[1].messages().last().unwrap()["content"].to_string();
        assert!(
            !failure.contains("SECRET-KEY-CANARY-7781") && failure.contains("Step 1 failed"),
            "{failure}"
        );
        if in_home {
            // The home itself is not writable either: the retry fails too.
            assert_exit(&out, 1);
            assert!(!home.join("made-here").exists());
        } else {
            assert_exit(&out, 0);
            assert!(s.work.join("made-here").exists());
        }
    }
}

#[test]
fn repo_house_rules_count_and_the_model_gets_at_most_20_rounds() {
    let s = Scratch::new();
    std::fs::create_dir_all(s.work.join(".git")).unwrap();
    std::fs::create_dir_all(s.work.join(".orch")).unwrap();
    std::fs::write(s.work.join(".orch/setup.md"), "Python projects use uv.\n").unwrap();
    let calls = (0..25)
        .map(|i| {
            Reply::tool_call(
                &format!("c{i}"),
                "check_command",
                json!({"command": format!("nope{i}")}),
            )
        })
        .collect();
    let server = FakeServer::start(Script::new().agent("setup", calls));
    let out = s.run(&server, &["loop", "--plan-only"]);
    assert_exit(&out, 1);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no plan within 20 model rounds"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 20);
    let system = reqs[0].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        system.contains("Python projects use uv.") && system.contains(".orch/setup.md"),
        "{system}"
    );
}

#[test]
fn resuming_a_plan_only_setup_runs_its_plan() {
    let s = Scratch::new();
    let server = FakeServer::start(Script::new().agent(
        "setup",
        vec![plan_call(
            "p1",
            vec![step("touch made", "install", "test -f made")],
            &[],
        )],
    ));
    let out = s.run(&server, &["a file", "--plan-only"]);
    assert_exit(&out, 0);
    assert!(!s.work.join("made").exists());
    let id = s.only_id();
    let out = s.run(&server, &["--resume", &id, "--yes"]);
    assert_exit(&out, 0);
    assert!(s.work.join("made").exists());
    assert_before(&stdout(&out), "Plan (1 step):", "$ touch made");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_dead_model_server_fails_the_setup_at_once_and_records_nothing() {
    let scratch = Scratch::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let out = orch_with_model(&dead)
        .current_dir(&scratch.work)
        .env("ORCH_SETUP_DIR", &scratch.records)
        .env("ORCH_CONFIG_DIR", &scratch.config)
        .args(["setup", "--yes", "install the deps"])
        .output()
        .unwrap();
    assert_exit(&out, 3);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("reach the model server"), "{stderr}");
    assert!(
        !scratch.records.exists()
            || std::fs::read_dir(&scratch.records)
                .unwrap()
                .next()
                .is_none(),
        "a setup record was made"
    );
}

/// The `request` events of the only setup's `log.jsonl`.
fn request_events(s: &Scratch) -> Vec<Value> {
    log_events(s, "request")
}

/// The events of the only setup's `log.jsonl` whose `event` is `kind`.
fn log_events(s: &Scratch, kind: &str) -> Vec<Value> {
    let log = std::fs::read_to_string(s.records.join(s.only_id()).join("log.jsonl")).unwrap();
    log.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == kind)
        .collect()
}

#[test]
fn a_prose_answer_is_re_asked_with_tool_choice_required_and_the_record_says_so() {
    // A profile set to native calls: the re-ask requires a call by
    // `tool_choice` (under the default `auto` it asks under a schema:
    // the next test).
    let s = Scratch::new();
    std::fs::write(
        s.config.join("orch.toml"),
        "default_profile = \"p\"\n\n[profiles.p]\ntool_calling = \"native\"\n",
    )
    .unwrap();
    let server = FakeServer::start(Script::new().agent(
        "setup",
        vec![
            Reply::text("To set up a venv, run python3 -m venv venv and then pip install."),
            Reply::tool_call("c1", "detect_system", json!({})),
            plan_call(
                "p1",
                vec![step(
                    "python3 -m venv venv",
                    "install",
                    "./venv/bin/python --version",
                )],
                &[],
            ),
        ],
    ));
    let out = s.run(&server, &["a venv", "--plan-only"]);
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("Plan (1 step):"), "{}", stdout(&out));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    // The first request leaves the choice to the model; the re-ask after the
    // prose answer, and every later request, requires a tool call.
    assert_eq!(reqs[0].body["tool_choice"], "auto", "{}", reqs[0].body);
    assert_eq!(reqs[1].body["tool_choice"], "required", "{}", reqs[1].body);
    assert_eq!(reqs[2].body["tool_choice"], "required", "{}", reqs[2].body);
    let nudge = reqs[1].messages().last().unwrap()["content"].to_string();
    assert!(nudge.contains("Call the `plan` tool"), "{nudge}");
    let events = request_events(&s);
    let choices: Vec<&str> = events
        .iter()
        .map(|e| e["tool_choice"].as_str().unwrap())
        .collect();
    assert_eq!(choices, ["auto", "required", "required"]);
    assert_eq!(events[1]["tool_choice_from"], "re-ask after a prose answer");
    assert!(
        events.iter().all(|e| e["tool_calls"] == "native"),
        "{events:?}"
    );
}

#[test]
fn under_auto_a_prose_answer_switches_setup_to_one_call_under_a_schema() {
    // The 1.5B model's setup (docs/setup.md): a plan in a fenced block
    // with prose around it (not a call), then, re-asked with
    // `tool_choice: "required"`, 3,742 tokens until the deadline. Under
    // the default `tool_calling = "auto"` the re-ask is one call under a
    // JSON schema instead, as an agent's turn is; the model's JSON text
    // is that call.
    let s = Scratch::new();
    let plan = json!({"name": "plan", "arguments": {"steps": [step("python3 -m venv venv", "install", "./venv/bin/python --version")], "next": []}});
    let server = FakeServer::start(Script::new().agent(
        "setup",
        vec![
            Reply::text("You need a venv:\n```sh\npython3 -m venv venv\n```\nThen install."),
            Reply::text(&plan.to_string()),
        ],
    ));
    let out = s.run(&server, &["a venv", "--plan-only"]);
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("Plan (1 step):"), "{}", stdout(&out));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs[0].body.get("tools").is_some(), "{}", reqs[0].body);
    // The re-ask: no `tools`, no `tool_choice`; the tools in the system
    // prompt and a schema admitting one call of them.
    let re = &reqs[1].body;
    assert!(
        re.get("tools").is_none() && re.get("tool_choice").is_none(),
        "{re}"
    );
    let names: Vec<&str> = re["response_format"]["json_schema"]["schema"]["oneOf"]
        .as_array()
        .unwrap_or_else(|| panic!("{re}"))
        .iter()
        .map(|e| e["properties"]["name"]["const"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"plan") && names.contains(&"detect_system"),
        "{names:?}"
    );
    let system = reqs[1].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(system.contains("- plan: "), "{system}");
    let events = request_events(&s);
    let modes: Vec<&str> = events
        .iter()
        .map(|e| e["tool_calls"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["native", "constrained"]);
    let switch = log_events(&s, "tool_calling_switch");
    assert_eq!(switch.len(), 1, "{switch:?}");
    assert_eq!(switch[0]["to"], "constrained");
    assert!(
        switch[0]["reason"]
            .as_str()
            .unwrap()
            .contains("the model answered in text"),
        "{switch:?}"
    );
}

#[test]
fn the_setup_role_files_sampling_keys_reach_every_setup_request() {
    let s = Scratch::new();
    // Native calls: the re-ask after prose sends `tools` and the role's
    // `tool_choice` again (under `auto` it would ask under a schema, which
    // sends no `tool_choice`).
    std::fs::write(
        s.config.join("orch.toml"),
        "default_profile = \"p\"\n\n[profiles.p]\ntool_calling = \"native\"\n",
    )
    .unwrap();
    std::fs::create_dir_all(s.work.join(".git")).unwrap();
    std::fs::create_dir_all(s.work.join(".orch/roles")).unwrap();
    let builtin = include_str!("../../roles/setup.md");
    let role = builtin.replacen(
        "max_turns: 20\n",
        "max_turns: 20\ntemperature: 0.25\nseed: 11\nmax_tokens: 700\ntool_choice: auto\n",
        1,
    );
    assert_ne!(role, builtin, "the role's front matter changed");
    std::fs::write(s.work.join(".orch/roles/setup.md"), role).unwrap();
    let server = FakeServer::start(Script::new().agent(
        "setup",
        vec![
            Reply::text("I would make a venv."),
            plan_call("p1", vec![step("true", "read", "true")], &[]),
        ],
    ));
    let out = s.run(&server, &["a venv", "--plan-only"]);
    assert_exit(&out, 0);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        assert_eq!(r.body["temperature"], 0.25, "{}", r.body);
        assert_eq!(r.body["seed"], 11, "{}", r.body);
        assert_eq!(r.body["max_tokens"], 700, "{}", r.body);
        // The role set its own tool_choice: the re-ask keeps it.
        assert_eq!(r.body["tool_choice"], "auto", "{}", r.body);
    }
    let events = request_events(&s);
    assert_eq!(events.len(), 2);
    for e in &events {
        assert_eq!(e["tool_choice"], "auto");
        assert_eq!(e["tool_choice_from"], "role");
        assert_eq!(e["sampling"]["temperature"], 0.25);
    }
}

/// The replay of a real run (`examples/llamacpp/setup_plan_only.sh`,
/// Gemma 3 270M through llama.cpp): the model's two prose answers, replayed
/// through the real binary, end the setup as the run did — a nudge and a
/// re-ask, then exit 1 with no plan, nothing changed.
#[test]
fn the_replay_of_the_real_gemma_run_ends_as_the_run_did() {
    let s = Scratch::new();
    let replay = wheel_dir().join("gemma3-270m-plan-only.json");
    let out = crate::support::orch()
        .current_dir(&s.work)
        .env("ORCH_SETUP_DIR", &s.records)
        .env("ORCH_CONFIG_DIR", &s.config)
        .arg("setup")
        .arg("--replay")
        .arg(&replay)
        .args(["--plan-only", "a python virtualenv in ./venv with requests"])
        .output()
        .unwrap();
    assert_exit(&out, 1);
    let text = stdout(&out);
    assert!(text.contains("replay of"), "{text}");
    assert_eq!(
        text.matches("model: You are provided with a python virtualenv")
            .count(),
        1,
        "{text}"
    );
    assert!(text.contains("model: Call the `plan` tool"), "{text}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the model answered without calling `plan`"),
        "{stderr}"
    );
    assert_eq!(s.record_json("state.json")["status"], "failed");
    assert_eq!(s.record_json("state.json")["rounds"], 2);
    assert!(
        std::fs::read_dir(&s.work).unwrap().next().is_none(),
        "nothing was changed"
    );
}

/// A fake passwordless `sudo` (it runs its arguments) in a dir to put first
/// on `PATH`, as in a root container or on CI.
fn fake_sudo_path(s: &Scratch) -> std::ffi::OsString {
    let bin = s.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let sudo = bin.join("sudo");
    std::fs::write(&sudo, "#!/bin/sh\nexec \"$@\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&sudo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut path = std::ffi::OsString::from(&bin);
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    path
}

const CANARY_KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\nCANARY-KEY-b3BlbnNzaC1rZXktdjEAAAA\n-----END OPENSSH PRIVATE KEY-----\n";

/// A canary HOME: a fake key, a `.bashrc`, `authorized_keys`. Returns the
/// files and their contents, to compare after the run.
fn canary_home(home: &Path) -> Vec<(PathBuf, String)> {
    let files = [
        (".ssh/id_ed25519", CANARY_KEY),
        (
            ".ssh/authorized_keys",
            "ssh-ed25519 AAAA-canary user@host\n",
        ),
        (".bashrc", "# canary bashrc\n"),
        (
            ".netrc",
            "machine example.com login u password canary-netrc-pw-123\n",
        ),
    ];
    files
        .iter()
        .map(|(rel, text)| {
            let p = home.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, text).unwrap();
            (p, (*text).to_owned())
        })
        .collect()
}

fn all_requests_text(server: &FakeServer) -> String {
    server
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Issue 25.1: `orch setup --yes` with a passwordless `sudo` and a plan that
/// names the absolute home (as `detect_system` hands it to the model):
/// every step touching a key, `.bashrc` or `authorized_keys` is refused in
/// any spelling, a system step does not run under `--yes` (it needs
/// `--yes-system`), the run names the refused steps and why, nothing in
/// HOME changes and no key reaches the model.
#[test]
fn yes_refuses_system_steps_and_steps_naming_the_absolute_home() {
    let s = Scratch::new();
    let path = fake_sudo_path(&s);
    let home = s.tmp.path().join("home");
    let canaries = canary_home(&home);
    let setup = |server: &FakeServer, args: &[&str]| {
        let mut c = s.setup(server, args);
        c.env("PATH", &path).env("HOME", &home);
        c
    };
    let h = home.display().to_string();
    let attacks = [
        format!("sudo rm -rf {h}"),
        format!("sudo sh -c 'cat {h}/.ssh/id_ed25519; exit 1'"),
        format!("sudo sh -c 'echo X >> {h}/.bashrc'"),
        format!("sudo sh -c 'echo X >> {h}/.ssh/authorized_keys'"),
        format!("cat {h}/x/../.ssh/id_ed25519"),
        "sudo sh -c 'cat \"$HOME\"/.ssh/id_ed25519'".to_owned(),
        "python3 -c \"import os; print(open(os.environ['HOME'] + '/.ssh/id_ed25519').read())\""
            .to_owned(),
    ];
    let mut replies: Vec<Reply> = attacks
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let risk = if a.starts_with("sudo") {
                "system"
            } else {
                "install"
            };
            plan_call(&format!("p{i}"), vec![step(a, risk, "true")], &[])
        })
        .collect();
    replies.push(plan_call(
        "ok",
        vec![
            step("touch made-local", "install", "test -f made-local"),
            step("sudo touch made-by-sudo", "system", "test -f made-by-sudo"),
        ],
        &[],
    ));
    let server = FakeServer::start(Script::new().agent("setup", replies));
    let out = setup(&server, &["a machine", "--yes"]).output().unwrap();
    let text = stdout(&out);
    assert_exit(&out, 9);
    for (p, want) in &canaries {
        assert_eq!(
            &std::fs::read_to_string(p).unwrap(),
            want,
            "{}",
            p.display()
        );
    }
    let sent = all_requests_text(&server);
    assert!(!sent.contains("CANARY-KEY"), "a key reached the model");
    assert!(!text.contains("CANARY-KEY"), "{text}");
    // Every attack was refused as a plan, with the reason, to the model and
    // on the output.
    let reqs = server.requests();
    assert_eq!(reqs.len(), attacks.len() + 1);
    for (i, a) in attacks.iter().enumerate() {
        let result = &tool_results(&reqs[i + 1])[0];
        assert!(
            result.contains("the plan is refused") && result.contains("step 1"),
            "{a}: {result}"
        );
        assert!(
            text.contains(&format!("plan refused: step 1 `{a}`")),
            "{a}\n{text}"
        );
    }
    // The valid plan: its system step needs --yes-system, so nothing ran.
    assert!(
        text.contains("step(s) 2 are system steps")
            && text.contains("--yes approves project-local steps only")
            && text.contains("--yes-system"),
        "{text}"
    );
    assert!(!s.work.join("made-local").exists() && !s.work.join("made-by-sudo").exists());
    assert!(!text.contains("$ sudo touch made-by-sudo"), "{text}");

    // With --yes-system the system step runs (through the fake sudo).
    let id = s.only_id();
    let out = setup(&server, &["--resume", &id, "--yes-system"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert!(s.work.join("made-local").exists() && s.work.join("made-by-sudo").exists());
    for (p, want) in &canaries {
        assert_eq!(
            &std::fs::read_to_string(p).unwrap(),
            want,
            "{}",
            p.display()
        );
    }
}

/// Issue 25.1: the output of a failed step reaches the model redacted (the
/// secrets registry: the API key, `~/.netrc` passwords; private key blocks)
/// and capped.
#[test]
fn a_failed_steps_output_is_redacted_and_capped_before_the_model_sees_it() {
    let s = Scratch::new();
    let home = s.tmp.path().join("home");
    canary_home(&home);
    std::fs::write(
        s.work.join("leak.txt"),
        format!(
            "key={}\nnetrc=canary-netrc-pw-123\n{CANARY_KEY}",
            crate::support::FAKE_API_KEY
        ),
    )
    .unwrap();
    let server = FakeServer::start(Script::new().agent(
        "setup",
        vec![
            plan_call(
                "p1",
                vec![step(
                    "cat leak.txt; seq 1 40000; exit 1",
                    "install",
                    "test -f leak-done",
                )],
                &[],
            ),
            plan_call("p2", vec![step("touch ok", "install", "test -f ok")], &[]),
        ],
    ));
    let out = s
        .setup(&server, &["leak", "--yes"])
        .env("HOME", &home)
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let failure = server.requests()[1].messages().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(failure.contains("Step 1 failed"), "{failure}");
    for leak in [
        crate::support::FAKE_API_KEY,
        "canary-netrc-pw-123",
        "CANARY-KEY",
    ] {
        assert!(
            !failure.contains(leak),
            "{leak} reached the model: {failure}"
        );
        assert!(!stdout(&out).contains(leak), "{leak} printed");
    }
    assert!(failure.contains("[REDACTED]"), "{failure}");
    assert!(failure.len() < 10_000, "{} bytes", failure.len());
}

/// The command line in the first `` `orch setup …` `` of `text`, split
/// into words as a shell would (single quotes only: what orch prints).
fn printed_command(text: &str) -> Vec<String> {
    let start = text
        .find("`orch setup ")
        .unwrap_or_else(|| panic!("no `orch setup …` hint in:\n{text}"));
    let rest = &text[start + 1..];
    let line = &rest[..rest.find('`').unwrap()];
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                word.get_or_insert_with(String::new);
            }
            ' ' if !quoted => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// `orch setup` in the work dir with no model in the environment.
fn bare(s: &Scratch, args: &[String]) -> Command {
    let mut c = crate::support::orch();
    c.current_dir(&s.work)
        .env("ORCH_SETUP_DIR", &s.records)
        .env("ORCH_CONFIG_DIR", &s.config)
        .args(args);
    c
}

fn words(ws: &[&str]) -> Vec<String> {
    ws.iter().map(|w| w.to_string()).collect()
}

/// Issue 26.6: every command line `orch setup` prints runs — the
/// not-confirmed hint of a setup whose model came from flags
/// (`--base-url`/`--model`, `--replay`) and none from the environment, the
/// system-step hint, and the failed hint.
#[test]
fn every_hint_setup_prints_runs_when_the_model_came_from_flags() {
    // 1. `--base-url`/`--model` flags, headless, no --yes.
    let s = Scratch::new();
    let server = FakeServer::start(Script::new().agent(
        "setup",
        vec![plan_call(
            "p1",
            vec![step("touch made", "install", "test -f made")],
            &[],
        )],
    ));
    let first = words(&[
        "setup",
        "--base-url",
        &server.base_url,
        "--model",
        "fake-model",
        "a file",
    ]);
    let out = bare(&s, &first).output().unwrap();
    assert_exit(&out, 9);
    let hint = printed_command(&stdout(&out));
    assert_eq!(hint[..3], ["orch", "setup", "--resume"], "{hint:?}");
    let out = bare(&s, &hint[1..]).output().unwrap();
    assert_exit(&out, 0);
    assert!(s.work.join("made").exists());
    assert_eq!(
        server.requests().len(),
        1,
        "the resume needed no model round"
    );

    // 2. `--replay FILE`, `--yes`, a system step: the hint names --yes-system.
    let s = Scratch::new();
    let replay = s.tmp.path().join("replay.json");
    std::fs::write(
        &replay,
        json!({"format": "orch-replay/1", "agents": {"setup": [
            {"tool_calls": [{"id": "p", "name": "plan", "arguments": {"steps": [
                {"command": "touch local", "why": "w", "risk": "install", "check": "test -f local"},
                {"command": "touch system-wide", "why": "w", "risk": "system", "check": "test -f system-wide"}
            ]}}]}
        ]}})
        .to_string(),
    )
    .unwrap();
    let first = words(&["setup", "--replay", "../replay.json", "--yes", "two files"]);
    let out = bare(&s, &first).output().unwrap();
    assert_exit(&out, 9);
    let hint = printed_command(&stdout(&out));
    assert!(hint.contains(&"--yes-system".to_owned()), "{hint:?}");
    let out = bare(&s, &hint[1..]).output().unwrap();
    assert_exit(&out, 0);
    assert!(s.work.join("local").exists() && s.work.join("system-wide").exists());

    // 3. A failed setup's hint (stderr) runs too: the model came from flags.
    let s = Scratch::new();
    let server = FakeServer::start(Script::new().agent(
        "setup",
        vec![
            plan_call("p1", vec![step("test -f go", "install", "test -f go")], &[]),
            plan_call("p2", vec![step("test -f go", "install", "test -f go")], &[]),
        ],
    ));
    let first = words(&[
        "setup",
        "--base-url",
        &server.base_url,
        "--model",
        "fake-model",
        "--yes",
        "a go file",
    ]);
    let out = bare(&s, &first).output().unwrap();
    assert_exit(&out, 1);
    let hint = printed_command(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(hint[..3], ["orch", "setup", "--resume"], "{hint:?}");
    std::fs::write(s.work.join("go"), "").unwrap();
    let out = bare(&s, &hint[1..]).output().unwrap();
    assert_exit(&out, 0);
}

#[test]
fn the_projects_dependency_manifests_are_in_the_first_message() {
    // The 1.5B model never read `requirements.txt` and planned `pip`
    // upgrades; a person setting a project up reads its manifest first.
    let s = Scratch::new();
    std::fs::write(s.work.join("requirements.txt"), "requests>=2\npytest>=7\n").unwrap();
    std::fs::write(
        s.work.join("package.json"),
        format!("{{\"x\": \"{}\"}}\n", "y".repeat(5000)),
    )
    .unwrap();
    std::fs::create_dir(s.work.join("go.mod")).unwrap();
    // A symlink (it could point at a key) and a file that is not UTF-8:
    // not read, but named.
    let secret = s.work.join("not-a-manifest");
    std::fs::write(&secret, "sk-canary-0001\n").unwrap();
    std::os::unix::fs::symlink(&secret, s.work.join("Pipfile")).unwrap();
    std::fs::write(s.work.join("Gemfile"), b"gem '\xff\xfe'\n").unwrap();
    let server = FakeServer::start(Script::new().agent(
        "setup",
        vec![plan_call("p1", vec![step("true", "read", "true")], &[])],
    ));
    let out = s.run(&server, &["install the test dependencies", "--plan-only"]);
    assert_exit(&out, 0);
    let reqs = server.requests();
    let first = reqs[0].messages()[1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        first.contains(
            "`requirements.txt` (in the working directory):\n```\nrequests>=2\npytest>=7\n```"
        ),
        "{first}"
    );
    // Capped at 4 KB with a marker; a directory named like one is not read.
    assert!(
        first.contains("[… cut by orch: 4096 of 5010 bytes shown]"),
        "{first}"
    );
    assert!(!first.contains("sk-canary-0001"), "{first}");
    for line in [
        "`Pipfile` is in the working directory but not shown here (a symlink, not followed).",
        "`go.mod` is in the working directory but not shown here (not a regular file).",
        "`Gemfile` is in the working directory but not shown here (not UTF-8 text).",
    ] {
        assert!(first.contains(line), "{line}\n{first}");
    }
    let start = log_events(&s, "start").remove(0);
    assert_eq!(
        start["manifests"],
        json!(["requirements.txt", "package.json"]),
        "{start}"
    );
    assert_eq!(
        start["manifests_not_shown"],
        json!([
            "Pipfile: a symlink, not followed",
            "go.mod: not a regular file",
            "Gemfile: not UTF-8 text"
        ]),
        "{start}"
    );
}
