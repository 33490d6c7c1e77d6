//! Holes found from outside around the sandbox (issues 25.5, 25.7, 26.7),
//! each through the real `orch` binary with a scripted model whose `bash`
//! calls really run inside the sandbox: metadata changes outside the lane
//! (`chmod`, `chown`, `touch -d`) against canaries in the user's repository
//! and a canary HOME, the per-stage disk quota, and a short API key that must
//! not mangle orch's output.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, record_dir, state_json, stdout_json,
    tool_results, write_issue, write_pipeline,
};
use serde_json::json;
use std::path::Path;

/// A scratch dir with the issue and a one-stage pipeline `solo` (`coder`).
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_issue(dir.path(), "# text\n\nLook at the text.\n");
    write_pipeline(
        dir.path(),
        "solo",
        "name: solo\ndescription: one stage\nstages:\n  work:\n    role: coder\n    max_turns: 12\n",
    );
    dir
}

/// `orch run solo.yaml --json` against `server`.
fn run_solo(repo: &TestRepo, scratch: &Path, server: &FakeServer) -> OrchRun {
    OrchRun::new(scratch.join("solo.yaml"), repo)
        .issue(&scratch.join("ISSUE.md"))
        .model(&server.base_url, "fake-model")
        .json()
}

#[test]
fn an_api_key_shorter_than_8_characters_is_not_redacted_and_a_warning_names_the_variable() {
    let repo = TestRepo::with_commit(&[("notes.txt", "text\n")], "init");
    let scratch = scratch();
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_call("c1", "bash", json!({"command": "echo text-box-x"})),
            Reply::finish("c2", "the text is fixed", None),
        ],
    ));
    let out = run_solo(&repo, scratch.path(), &server)
        .env("ORCH_API_KEY", "x")
        .output();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("ORCH_API_KEY"))
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "one warning naming the variable: {stderr}"
    );
    assert!(
        warnings[0].contains("shorter than 8 characters") && warnings[0].contains("not redact"),
        "{}",
        warnings[0]
    );
    // The key itself still reaches the server, in the header.
    let reqs = server.requests_for("work");
    let auth = reqs[0]
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v.clone());
    assert_eq!(auth.as_deref(), Some("Bearer x"));
    assert!(tool_results(&reqs[1])[0].contains("text-box-x"));
    // Nothing orch wrote or printed is mangled.
    let j = stdout_json(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("REDACTED"), "{stdout}");
    assert_eq!(j["pr_title"], "text", "{stdout}");
    let record = record_dir(&repo, j["run_id"].as_str().unwrap());
    let log = std::fs::read_to_string(record.join("stages/work/actions.jsonl")).unwrap();
    assert!(!log.contains("REDACTED"), "{log}");
    assert!(log.contains("text-box-x"), "{log}");
    let pr = std::fs::read_to_string(record.join("pr.md")).unwrap();
    assert!(pr.contains("the text is fixed"), "{pr}");
}

/// Mode, owner and modification time of `path`.
fn meta_of(path: &Path) -> (u32, u32, u32, i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).unwrap();
    (m.mode(), m.uid(), m.gid(), m.mtime(), m.mtime_nsec())
}

#[test]
fn metadata_outside_the_lane_cannot_change_from_inside_the_sandbox() {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "init");
    let home = repo.path.parent().unwrap().join("canary-home");
    std::fs::create_dir_all(&home).unwrap();
    let bashrc = home.join(".bashrc");
    std::fs::write(&bashrc, "# canary bashrc\n").unwrap();
    // A HOME file that is no startup file: the deny list's rc-file rule does
    // not cover it, so the kernel layer is what refuses its `touch -d`.
    let notes = home.join("notes.txt");
    std::fs::write(&notes, "canary notes\n").unwrap();
    let calc = repo.path.join("calc.py");
    for p in [&bashrc, &calc, &notes] {
        let st = std::process::Command::new("touch")
            .args(["-d", "2020-02-02 02:02:02"])
            .arg(p)
            .status()
            .unwrap();
        assert!(st.success());
    }
    let before = [
        meta_of(&bashrc),
        meta_of(&calc),
        meta_of(&home),
        meta_of(&notes),
    ];
    let (b, c, n) = (bashrc.display(), calc.display(), notes.display());
    // Out of the deny list's sight: a script the model wrote, run next.
    let script = format!(
        "chmod 777 {c}; echo \"chmod-repo $?\"\n\
         chmod 000 {b}; echo \"chmod-home $?\"\n\
         chown 4321:4321 {c} {b}; echo \"chown $?\"\n\
         touch -d '2001-01-01' {c} {b}; echo \"touch $?\"\n\
         chmod 700 {h}; echo \"chmod-homedir $?\"\n\
         chmod 600 lane.txt && stat -c 'lane-mode %a' lane.txt\n",
        h = home.display()
    );
    let scratch = scratch();
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_call("c1", "bash", json!({"command": format!("chmod 777 {c}")})),
            Reply::tool_call(
                "c2",
                "bash",
                json!({"command": format!("touch -d 2001-01-01 {n}")}),
            ),
            Reply::tool_call(
                "c3",
                "write_file",
                json!({"path": "meta.sh", "content": script}),
            ),
            Reply::tool_call(
                "c4",
                "bash",
                json!({"command": "echo lane > lane.txt && bash meta.sh; rm meta.sh lane.txt"}),
            ),
            Reply::finish("c5", "tried", None),
        ],
    ));
    // orch's own server cache (docs/model-client.md, `$XDG_CACHE_HOME`,
    // else `~/.cache`) is written by orch, not by the sandboxed agent: kept
    // out of the canary home, whose mtime the test watches.
    let out = run_solo(&repo, scratch.path(), &server)
        .env("HOME", &home)
        .env("XDG_CACHE_HOME", scratch.path().join("cache"))
        .output();
    assert_eq!(out.status.code(), Some(0));
    let reqs = server.requests_for("work");
    let refused = |r: &str| r.contains("Read-only file system") || r.contains("refused");
    let r1 = tool_results(&reqs[1]).pop().unwrap();
    let r2 = tool_results(&reqs[2]).pop().unwrap();
    assert!(refused(&r1), "chmod of the user's file: {r1}");
    assert!(refused(&r2), "touch -d of a HOME file: {r2}");
    let r4 = tool_results(&reqs[4]).pop().unwrap();
    for step in [
        "chmod-repo",
        "chmod-home",
        "chown",
        "touch",
        "chmod-homedir",
    ] {
        let line = r4
            .lines()
            .find(|l| l.starts_with(&format!("{step} ")))
            .unwrap_or_else(|| panic!("{step} ran: {r4}"));
        assert_ne!(line, format!("{step} 0"), "{step} succeeded: {r4}");
    }
    assert!(r4.contains("Read-only file system"), "{r4}");
    // Inside the lane, metadata is the agent's to change.
    assert!(r4.contains("lane-mode 600"), "{r4}");
    let after = [
        meta_of(&bashrc),
        meta_of(&calc),
        meta_of(&home),
        meta_of(&notes),
    ];
    assert_eq!(before, after, "modes, owners and mtimes of the canaries");
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
}

#[test]
fn a_stage_writing_past_its_disk_quota_fails_with_the_reason_and_the_run_is_failed() {
    let repo = TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            (".orch/orch.toml", "[sandbox]\ndisk_quota = \"1M\"\n"),
        ],
        "init",
    );
    let scratch = scratch();
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_call(
                "c1",
                "bash",
                json!({"command": "head -c 16M /dev/urandom > big && echo wrote"}),
            ),
            Reply::tool_call("c2", "bash", json!({"command": "echo still going"})),
            Reply::finish("c3", "filled", None),
        ],
    ));
    let out = run_solo(&repo, scratch.path(), &server).output();
    assert_ne!(out.status.code(), Some(0));
    let run_id = crate::support::only_run_id(&repo.path);
    let state = state_json(&repo, &run_id);
    assert_eq!(state["status"], "failed", "{state}");
    let stage = crate::support::stage_record(&state, "work");
    assert_eq!(stage["status"], "failed", "{stage}");
    let reason = stage["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("over its disk quota of 1.0 MiB") && reason.contains("disk_quota"),
        "{reason}"
    );
    // 16 MiB against 1 MiB: a file system that other processes shrink
    // meanwhile still shows the growth. Stopped after the call that wrote:
    // the model never saw a next turn.
    assert_eq!(server.requests_for("work").len(), 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("disk quota"), "{stderr}");
}

/// A full disk, for real: `orch` runs in a mount namespace of its own
/// (`unshare -m`, root as here and on CI) where the repository lives on a
/// 2 MiB tmpfs, and the agent fills it. Whatever orch's next write is (the
/// action log, the stage's objects, its commit), the run must end `failed`
/// with the reason, never stay `running`.
#[test]
fn a_full_disk_ends_the_running_stage_failed_with_the_reason() {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "init");
    let scratch = scratch();
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_call(
                "c1",
                "bash",
                json!({"command": "head -c 8M /dev/urandom > big; echo \"rc=$?\""}),
            ),
            Reply::tool_call("c2", "bash", json!({"command": "echo again"})),
            Reply::finish("c3", "filled the disk", None),
        ],
    ));
    let mnt = scratch.path().join("small-disk");
    let out_dir = scratch.path().join("out");
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::create_dir_all(&out_dir).unwrap();
    let orch = crate::support::orch();
    let mut cmd = std::process::Command::new("unshare");
    cmd.env_clear();
    for (k, v) in orch.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    cmd.arg("-m")
        .arg("--propagation")
        .arg("private")
        .arg("sh")
        .arg("-c")
        .arg(
            r#"set -u
mount -t tmpfs -o size=2M tmpfs "$1" || exit 90
cp -a "$2" "$1/repo" || exit 91
"$3" run "$4" --repo "$1/repo" --issue "$5" --base-url "$6" --model fake-model --json
echo "orch-exit=$?"
cp "$1"/repo/.git/orch/runs/*/state.json "$7/state.json"
"#,
        )
        .arg("sh")
        .arg(&mnt)
        .arg(&repo.path)
        .arg(orch.get_program())
        .arg(scratch.path().join("solo.yaml"))
        .arg(scratch.path().join("ISSUE.md"))
        .arg(&server.base_url)
        .arg(&out_dir)
        .stdin(std::process::Stdio::null());
    let out = crate::support::output_logged(&mut cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the tiny tmpfs could not be set up (needs root): {stdout}"
    );
    assert!(!stdout.contains("orch-exit=0"), "{stdout}");
    // The agent really hit the full disk.
    let first = server.requests_for("work");
    if first.len() > 1 {
        let r = tool_results(&first[1]).pop().unwrap();
        assert!(r.contains("No space left on device"), "{r}");
    }
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("state.json")).unwrap()).unwrap();
    assert_eq!(state["status"], "failed", "{state}");
    let stage = crate::support::stage_record(&state, "work");
    assert_eq!(stage["status"], "failed", "{stage}");
    let reason = stage["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("No space left on device"), "{reason}");
}

/// Where the kernel cannot keep metadata read-only (here: Landlock turned
/// off, so no read-only mounts either), the deny list refuses `chmod`,
/// `chown` and `touch -d` of paths outside the lane with a message, and lets
/// the same commands on lane files through.
#[test]
fn without_the_kernel_layer_the_deny_list_refuses_metadata_changes_outside_the_lane() {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "init");
    let home = repo.path.parent().unwrap().join("canary-home");
    std::fs::create_dir_all(&home).unwrap();
    let bashrc = home.join(".bashrc");
    std::fs::write(&bashrc, "# canary bashrc\n").unwrap();
    let notes = home.join("notes.txt");
    std::fs::write(&notes, "canary notes\n").unwrap();
    let calc = repo.path.join("calc.py");
    let before = [meta_of(&bashrc), meta_of(&calc), meta_of(&notes)];
    let scratch = scratch();
    let server = FakeServer::start(Script::new().agent(
        "work",
        vec![
            Reply::tool_call("c1", "bash", json!({"command": "chmod 000 ~/.bashrc"})),
            Reply::tool_call(
                "c2",
                "bash",
                json!({"command": format!("chmod 777 {}", calc.display())}),
            ),
            Reply::tool_call(
                "c3",
                "bash",
                json!({"command": format!("touch -d 2001-01-01 {}", notes.display())}),
            ),
            Reply::tool_call(
                "c4",
                "bash",
                json!({"command": "chmod 600 calc.py && stat -c 'lane-mode %a' calc.py"}),
            ),
            Reply::finish("c5", "tried", None),
        ],
    ));
    let out = run_solo(&repo, scratch.path(), &server)
        .env("HOME", &home)
        .env("ORCH_SANDBOX_DISABLE", "1")
        .output();
    assert_eq!(out.status.code(), Some(0));
    let reqs = server.requests_for("work");
    // `chmod ~/.bashrc` was already refused as a startup-file write; the
    // absolute forms are what the metadata rule adds.
    for (i, what) in [(1, "chmod ~"), (2, "chmod repo"), (3, "touch -d home")] {
        let r = tool_results(&reqs[i]).pop().unwrap();
        assert!(r.contains("denied by policy"), "{what}: {r}");
        assert!(i == 1 || r.contains("outside the lane"), "{what}: {r}");
    }
    let r4 = tool_results(&reqs[4]).pop().unwrap();
    assert!(r4.contains("lane-mode 600"), "{r4}");
    assert_eq!([meta_of(&bashrc), meta_of(&calc), meta_of(&notes)], before);
}

/// Issue 25.7: the Landlock ruleset lists the directories on the path to
/// every secret path (all of a large HOME); it is built once per stage and
/// kept while none of them changes, not again for every tool call. The HOME
/// lives under `/var/tmp`, away from the churn of `/tmp` where parallel tests
/// make files (a change in a listed directory rightly rebuilds the ruleset).
#[test]
fn the_sandbox_ruleset_is_built_once_per_stage_with_a_large_home() {
    let base = tempfile::Builder::new()
        .prefix("orch-ruleset-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let home = base.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "fake key\n").unwrap();
    for i in 0..520 {
        std::fs::write(home.join(format!("entry-{i:03}")), "x\n").unwrap();
    }
    let repo = TestRepo::with_commit(&[("notes.txt", "text\n")], "init");
    let scratch = scratch();
    let calls = 5;
    let mut replies: Vec<Reply> = (0..calls)
        .map(|i| {
            Reply::tool_call(
                &format!("c{i}"),
                "bash",
                json!({"command": format!("echo call-{i}")}),
            )
        })
        .collect();
    replies.push(Reply::finish("cf", "ran the calls", None));
    let server = FakeServer::start(Script::new().agent("work", replies));
    let out = run_solo(&repo, scratch.path(), &server)
        .env("HOME", &home)
        .env("ORCH_LOG", "orch=debug")
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let builds: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("sandbox ruleset built"))
        .collect();
    // A rebuild is right only when a directory it listed changed (another
    // test making files beside it, say): each one must name that directory.
    let rebuilds: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("sandbox ruleset rebuilt: a directory it listed changed"))
        .collect();
    assert!(
        !builds.is_empty() && builds.len() == 1 + rebuilds.len(),
        "{calls} bash calls, the ruleset built {} times, {} of them for a changed directory:\n{}\n{}",
        builds.len(),
        rebuilds.len(),
        builds.join("\n"),
        rebuilds.join("\n")
    );
    // The one build listed the large HOME.
    let listed: usize = builds[0]
        .split("listed_dirs=")
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(listed >= 1, "{}", builds[0]);
}
