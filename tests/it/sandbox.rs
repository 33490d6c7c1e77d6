//! The kernel sandbox, tried for real: hostile commands run in `bash`
//! children spawned with the sandbox's `pre_exec` hook from this
//! (multi-threaded) test process, against canaries in temp dirs, a fake HOME
//! and a real linked worktree. Assertions are on the canaries, the user's
//! refs and the processes themselves, not only on exit codes.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use orch::sandbox::{self, Availability, Policy, RepoChange, RepoGuard, default_secret_paths};
use orch::sandbox_profile::Profile;

use crate::support::TestRepo;
use crate::support::repo::GIT_DATE;

const KEY_CANARY: &str = "-----BEGIN OPENSSH PRIVATE KEY----- canary-7c1d";
const BASHRC: &str = "# bashrc canary\n";
const OUTSIDE: &str = "outside canary\n";

/// A user repository with a linked-worktree lane on `orch-lanes/r/0`, a fake
/// HOME with secrets, a private temp dir and a canary outside everything.
struct Fixture {
    repo: TestRepo,
    lane: PathBuf,
    home: PathBuf,
    tmp: PathBuf,
    outside: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        assert!(
            sandbox::availability().abi().is_some(),
            "these tests need Landlock: {}",
            sandbox::availability()
        );
        let repo = TestRepo::with_commit(&[("README.md", "hello\n")], "init");
        let root = repo.path.parent().unwrap().to_path_buf();
        let lane = root.join("lane");
        repo.git(&[
            "worktree",
            "add",
            "-q",
            "-b",
            "orch-lanes/r/0",
            lane.to_str().unwrap(),
        ]);
        let home = root.join("fakehome");
        for (rel, text) in [
            (".ssh/id_rsa", KEY_CANARY),
            (".ssh/authorized_keys", "ssh-ed25519 AAAA user\n"),
            (".bashrc", BASHRC),
            (".config/orch/models.toml", "api_key = \"sk-canary\"\n"),
            (".aws/credentials", "aws_secret_access_key = canary\n"),
        ] {
            let p = home.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let tmp = root.join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let outside = root.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("canary.txt"), OUTSIDE).unwrap();
        Fixture {
            repo,
            lane,
            home,
            tmp,
            outside,
        }
    }

    fn policy(&self, profile: Profile) -> Policy {
        let mut p = Policy::new(profile, &self.lane, &self.tmp).unwrap();
        p.secret_paths =
            default_secret_paths(Some(&self.home), Some(&self.home.join(".config/orch")));
        p
    }

    fn run(&self, policy: &Policy, script: &str) -> Output {
        self.run_with(policy, sandbox::prepare(policy).unwrap(), script)
    }

    fn run_in(&self, policy: &Policy, cwd: &Path, script: &str) -> Output {
        self.spawn(policy, sandbox::prepare(policy).unwrap(), cwd, script)
    }

    fn run_with(&self, policy: &Policy, prepared: sandbox::Prepared, script: &str) -> Output {
        self.spawn(policy, prepared, &self.lane, script)
    }

    fn spawn(
        &self,
        policy: &Policy,
        prepared: sandbox::Prepared,
        cwd: &Path,
        script: &str,
    ) -> Output {
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(script)
            .current_dir(cwd)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("HOME", &self.home)
            .env("TMPDIR", &self.tmp)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_DATE", GIT_DATE)
            .env("GIT_COMMITTER_DATE", GIT_DATE)
            .env("LC_ALL", "C")
            .stdin(Stdio::null());
        if let Some(git) = &policy.git {
            cmd.envs(git.child_env());
        }
        // SAFETY: the hook only makes async-signal-safe system calls.
        unsafe { cmd.pre_exec(prepared.into_pre_exec()) };
        cmd.output().unwrap()
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Asserts the command failed and said `Permission denied` (EACCES, Landlock)
/// or `Read-only file system` (EROFS, the read-only mounts outside the
/// writable paths, checked before Landlock).
fn assert_denied(o: &Output, what: &str) {
    let t = text(o);
    assert!(!o.status.success(), "{what} succeeded: {t}");
    assert!(
        t.contains("Permission denied")
            || t.contains("Operation not permitted")
            || t.contains("Read-only file system"),
        "{what}: {t}"
    );
}

#[test]
fn workspace_write_allows_the_lane_and_tmpdir_and_nothing_else() {
    let f = Fixture::new();
    let p = f.policy(Profile::WorkspaceWrite);
    let ok = f.run(
        &p,
        "echo made > in-lane.txt && echo tmp > \"$TMPDIR/t\" && echo piped > /dev/stdout \
         && echo n > /dev/null && cat README.md",
    );
    assert!(ok.status.success(), "{}", text(&ok));
    assert_eq!(
        std::fs::read_to_string(f.lane.join("in-lane.txt")).unwrap(),
        "made\n"
    );
    assert_eq!(std::fs::read_to_string(f.tmp.join("t")).unwrap(), "tmp\n");
    assert!(text(&ok).contains("piped") && text(&ok).contains("hello"));

    let canary = f.outside.join("canary.txt");
    let o = f.run(&p, &format!("echo pwned > {}", canary.display()));
    assert_denied(&o, "write outside the lane");
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), OUTSIDE);
    let o = f.run(&p, &format!("rm -f {}", canary.display()));
    assert_denied(&o, "rm outside the lane");
    assert!(canary.exists());

    let far = format!("/orch-sandbox-canary-{}", std::process::id());
    let o = f.run(&p, &format!("mkdir -p {far}/outside"));
    assert_denied(&o, "mkdir -p outside");
    assert!(!Path::new(&far).exists(), "{far} was created");

    let etc = format!("/etc/orch-canary-{}", std::process::id());
    let o = f.run(&p, &format!("touch {etc}"));
    assert_denied(&o, "touch in /etc");
    assert!(!Path::new(&etc).exists());

    // A configured extra root (`sandbox.writable`, e.g. a package cache).
    let cache = f.home.join(".cache/pip");
    std::fs::create_dir_all(&cache).unwrap();
    let mut with_cache = p.clone();
    with_cache.writable.push(cache.clone());
    let o = f.run(
        &with_cache,
        "echo pkg > ~/.cache/pip/wheel && echo x > ~/.bashrc-new || echo home-denied",
    );
    assert!(text(&o).contains("home-denied"), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(cache.join("wheel")).unwrap(),
        "pkg\n"
    );
    assert_denied(
        &f.run(&p, "echo pkg > ~/.cache/pip/other"),
        "cache without the extra root",
    );

    // The user's main worktree is outside the lane too.
    let o = f.run(
        &p,
        &format!("echo x >> {}/README.md", f.repo.path.display()),
    );
    assert_denied(&o, "write the user's tree");
    assert_eq!(f.repo.read("README.md"), "hello\n");
}

#[test]
fn secrets_are_unreadable_while_the_rest_of_home_reads_but_does_not_write() {
    let f = Fixture::new();
    let p = f.policy(Profile::WorkspaceWrite);
    let o = f.run(&p, "cat ~/.ssh/id_rsa");
    assert_denied(&o, "cat ~/.ssh/id_rsa");
    assert!(!text(&o).contains("canary-7c1d"));
    for secret in ["~/.config/orch/models.toml", "~/.aws/credentials"] {
        let o = f.run(&p, &format!("cat {secret}"));
        assert_denied(&o, secret);
        assert!(!text(&o).contains("canary"), "{secret}: {}", text(&o));
    }
    let o = f.run(&p, "cat ~/.bashrc");
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), BASHRC);
    // Names stay listable (documented): only contents are hidden.
    let o = f.run(&p, "ls ~/.ssh");
    assert!(text(&o).contains("id_rsa"), "{}", text(&o));

    for script in [
        "echo x >> ~/.bashrc",
        "echo x > ~/.ssh/authorized_keys",
        "echo x > ~/.profile",
    ] {
        assert_denied(&f.run(&p, script), script);
    }
    assert_eq!(
        std::fs::read_to_string(f.home.join(".bashrc")).unwrap(),
        BASHRC
    );
    assert_eq!(
        std::fs::read_to_string(f.home.join(".ssh/authorized_keys")).unwrap(),
        "ssh-ed25519 AAAA user\n"
    );
    assert!(!f.home.join(".profile").exists());
}

/// A process outside the sandbox, standing in for orch: `sleep` with a
/// secret in its environment.
struct Victim(std::process::Child);

impl Victim {
    fn start() -> Victim {
        let child = Command::new("sleep")
            .arg("60")
            .env("VICTIM_API_KEY", "sk-victim-canary")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Victim(child)
    }
    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn processes_outside_the_sandbox_cannot_be_signalled_or_read_even_as_root() {
    let f = Fixture::new();
    let p = f.policy(Profile::WorkspaceWrite);
    let mut victim = Victim::start();
    let pid = victim.0.id();
    let o = f.run(&p, &format!("kill -9 {pid}"));
    assert_denied(&o, "kill -9 victim");
    assert!(victim.alive(), "the victim was killed");
    // The test process itself is this child's parent, like orch.
    let o = f.run(&p, "kill -9 $PPID");
    assert_denied(&o, "kill -9 $PPID");

    let o = f.run(&p, &format!("tr '\\0' '\\n' < /proc/{pid}/environ"));
    assert_denied(&o, "read /proc/<victim>/environ");
    assert!(!text(&o).contains("sk-victim-canary"), "{}", text(&o));
    let o = f.run(
        &p,
        "cat /proc/$PPID/environ | tr '\\0' '\\n' | grep -c PATH",
    );
    assert!(!text(&o).contains("PATH="), "{}", text(&o));
    let o = f.run(&p, &format!("head -c 16 /proc/{pid}/mem"));
    assert!(!o.status.success(), "{}", text(&o));
    // A process the sandboxed shell starts itself is in its domain.
    let o = f.run(&p, "sleep 30 & kill -9 $! && echo killed-own");
    assert!(text(&o).contains("killed-own"), "{}", text(&o));
}

/// Bits of a `CapXxx:` line of `/proc/self/status`.
fn cap_line(status: &str, key: &str) -> u64 {
    let line = status
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("{key} missing from {status}"));
    u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
}

#[test]
fn dangerous_capabilities_are_dropped_with_or_without_landlock() {
    let f = Fixture::new();
    let p = f.policy(Profile::WorkspaceWrite);
    let disabled = Availability::from_parts(Some("1"), Ok(7));
    for prepared in [
        sandbox::prepare(&p).unwrap(),
        sandbox::prepare_with(&p, &disabled).unwrap(),
    ] {
        let enforced = prepared.landlock_enforced();
        let o = f.run_with(&p, prepared, "cat /proc/self/status");
        let status = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{status}");
        assert_eq!(cap_line(&status, "NoNewPrivs:"), 1);
        for key in ["CapEff:", "CapPrm:", "CapBnd:", "CapInh:", "CapAmb:"] {
            let bits = cap_line(&status, key);
            for (cap, name) in [
                (21, "SYS_ADMIN"),
                (38, "PERFMON"),
                (19, "SYS_PTRACE"),
                (2, "DAC_READ_SEARCH"),
            ] {
                assert_eq!(
                    bits & (1 << cap),
                    0,
                    "{name} in {key} (landlock {enforced})"
                );
            }
        }
    }
    // Without Landlock the filesystem is not restricted (the documented fallback).
    let canary = f.outside.join("fallback.txt");
    let prepared = sandbox::prepare_with(&p, &disabled).unwrap();
    assert!(!prepared.landlock_enforced());
    let o = f.run_with(&p, prepared, &format!("echo x > {}", canary.display()));
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn the_users_git_dir_is_read_only_while_the_lane_commits_on_its_own_branch() {
    let f = Fixture::new();
    let p = f.policy(Profile::WorkspaceWrite);
    let main_before = f.repo.git(&["rev-parse", "refs/heads/main"]);
    let config_before = std::fs::read(f.repo.path.join(".git/config")).unwrap();
    let before = f.repo.snapshot();

    for script in [
        "git commit -q --allow-empty -m x && git update-ref refs/heads/main HEAD",
        "echo 'touch /tmp/pwned' > \"$(git rev-parse --git-common-dir)/hooks/post-commit\"",
        "git config core.hooksPath x",
        "git update-ref -d refs/heads/main",
        "rm -rf \"$(git rev-parse --git-common-dir)/objects\"",
    ] {
        assert_denied(&f.run(&p, script), script);
    }
    let o = f.run(
        &p,
        &format!("git -C {} reset -q --hard HEAD~0", f.repo.path.display()),
    );
    assert!(!o.status.success(), "{}", text(&o));

    let o = f.run(
        &p,
        "echo change > feature.txt && git add feature.txt && git commit -q -m 'lane commit' \
         && git rev-parse HEAD",
    );
    assert!(o.status.success(), "{}", text(&o));
    let lane_sha = String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .unwrap()
        .to_owned();
    let git = p.git.as_ref().unwrap();
    let moved = sandbox::migrate_objects(git).unwrap();
    assert!(moved >= 3, "commit, tree and blob: {moved}");
    assert_eq!(
        f.repo
            .git(&["rev-parse", "refs/heads/orch-lanes/r/0"])
            .trim(),
        lane_sha
    );
    f.repo.git(&["fsck", "--no-dangling"]);

    assert_eq!(f.repo.git(&["rev-parse", "refs/heads/main"]), main_before);
    assert_eq!(
        std::fs::read(f.repo.path.join(".git/config")).unwrap(),
        config_before
    );
    assert!(!f.repo.path.join(".git/hooks/post-commit").exists());
    before.assert_unchanged(&f.repo.snapshot());
}

#[test]
fn network_off_refuses_tcp_and_on_allows_it() {
    let f = Fixture::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let mut p = f.policy(Profile::WorkspaceWrite);
    let o = f.run(&p, &connect);
    assert!(text(&o).contains("connected"), "{}", text(&o));
    p.network = false;
    let o = f.run(&p, &connect);
    assert_denied(&o, "connect with network off");
    let o = f.run(&p, "python3 -c 'import socket; socket.socket().bind((\"127.0.0.1\", 0))' 2>&1 || echo bind-refused");
    if !text(&o).contains("No such file") {
        assert!(text(&o).contains("bind-refused"), "{}", text(&o));
    }
}

#[test]
fn read_only_profile_refuses_lane_writes_but_keeps_tmpdir() {
    let f = Fixture::new();
    let p = f.policy(Profile::ReadOnly);
    assert_denied(&f.run(&p, "echo x > new.txt"), "write in a read-only lane");
    assert_denied(&f.run(&p, "rm README.md"), "rm in a read-only lane");
    assert!(f.lane.join("README.md").exists() && !f.lane.join("new.txt").exists());
    let o = f.run(&p, "echo t > \"$TMPDIR/scratch\" && cat README.md");
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn off_profile_restricts_nothing() {
    let f = Fixture::new();
    let p = f.policy(Profile::Off);
    let prepared = sandbox::prepare(&p).unwrap();
    assert!(!prepared.landlock_enforced());
    let canary = f.outside.join("canary.txt");
    let o = f.run(
        &p,
        &format!("echo changed > {} && cat ~/.ssh/id_rsa", canary.display()),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("canary-7c1d"));
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "changed\n");
}

#[test]
fn the_hook_is_safe_while_other_threads_allocate() {
    let f = Fixture::new();
    let p = f.policy(Profile::WorkspaceWrite);
    let stop = Arc::new(AtomicBool::new(false));
    let churn: Vec<_> = (0..2)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let v: Vec<String> = (0..64).map(|i| i.to_string()).collect();
                    n = n.wrapping_add(v.len());
                }
                n
            })
        })
        .collect();
    for i in 0..20 {
        let o = f.run(&p, &format!("echo {i} > \"$TMPDIR/{i}\""));
        assert!(o.status.success(), "{i}: {}", text(&o));
    }
    stop.store(true, Ordering::Relaxed);
    for t in churn {
        t.join().unwrap();
    }
    assert_eq!(std::fs::read_dir(&f.tmp).unwrap().count(), 20);
}

#[test]
fn the_repo_guard_names_what_moved_and_restores_it() {
    // Unsandboxed commands: the guard is the check that remains where
    // Landlock is unavailable or off.
    let f = Fixture::new();
    let common = f.repo.path.join(".git");
    let main = f.repo.git(&["rev-parse", "main"]).trim().to_owned();
    let config_before = std::fs::read(common.join("config")).unwrap();
    let mut guard = RepoGuard::new(&common).unwrap();
    guard.before_call().unwrap();
    assert_eq!(guard.after_call().unwrap(), []);

    // orch's own refs move freely.
    let lane_git = |args: &[&str]| {
        let out = f
            .repo
            .git_command()
            .current_dir(&f.lane)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    lane_git(&["commit", "-q", "--allow-empty", "-m", "lane"]);
    assert_eq!(guard.after_call().unwrap(), []);

    lane_git(&["update-ref", "refs/heads/main", "HEAD"]);
    std::fs::write(
        common.join("hooks/post-commit"),
        "#!/bin/sh\ntouch /tmp/x\n",
    )
    .unwrap();
    lane_git(&["config", "core.hooksPath", "x"]);
    lane_git(&["branch", "evil"]);
    let changes = guard.after_call().unwrap();
    let described: Vec<String> = changes.iter().map(ToString::to_string).collect();
    let lane_head = f
        .repo
        .git(&["rev-parse", "orch-lanes/r/0"])
        .trim()
        .to_owned();
    assert!(
        changes.contains(&RepoChange::Ref {
            name: "refs/heads/main".into(),
            from: Some(main.clone()),
            to: Some(lane_head.clone()),
        }),
        "{described:?}"
    );
    for want in [
        "hook post-commit appeared".to_owned(),
        "config changed: + hooksPath = x".to_owned(),
        format!("ref refs/heads/evil created at {}", &lane_head[..12]),
    ] {
        assert!(described.contains(&want), "{want} not in {described:?}");
    }

    // Nothing of the user's is ever put back: the changes are reported.
    guard.restore_lane_files().unwrap();
    assert_eq!(guard.after_call().unwrap(), changes);
    assert_eq!(f.repo.git(&["rev-parse", "main"]).trim(), lane_head);

    // The lane's HEAD is the agent's (its own `git commit`, `git
    // checkout`): not watched.
    guard.watch_lane(p_git(&f).as_ref().unwrap()).unwrap();
    let admin_head = p_git(&f).unwrap().admin_dir.join("HEAD");
    std::fs::write(&admin_head, format!("{main}\n")).unwrap();
    assert_eq!(guard.after_call().unwrap(), []);
    // The lane's own `.git` file is orch's: watched, and put back.
    let dot_git = f.lane.join(".git");
    let lane_link = std::fs::read_to_string(&dot_git).unwrap();
    std::fs::write(&dot_git, format!("gitdir: {}\n", common.display())).unwrap();
    let described: Vec<String> = guard
        .after_call()
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(described.len(), 1, "{described:?}");
    let want = format!("lane file {} changed", dot_git.display());
    assert!(described[0].starts_with(&want), "{described:?}");
    guard.restore_lane_files().unwrap();
    assert_eq!(std::fs::read_to_string(&dot_git).unwrap(), lane_link);
    assert_eq!(guard.after_call().unwrap(), []);
    // The user's changes stay: config, hook and branch as they made them.
    assert_ne!(std::fs::read(common.join("config")).unwrap(), config_before);
    assert!(common.join("hooks/post-commit").exists());
    assert_eq!(f.repo.git(&["rev-parse", "evil"]).trim(), lane_head);
}

fn p_git(f: &Fixture) -> Option<sandbox::LaneGit> {
    sandbox::LaneGit::discover(&f.lane).unwrap()
}

#[test]
fn the_repo_guard_sees_packed_ref_rewrites_and_head_moves() {
    let f = Fixture::new();
    let common = f.repo.path.join(".git");
    f.repo.git(&["tag", "v1"]);
    f.repo.git(&["pack-refs", "--all"]);
    let mut guard = RepoGuard::new(&common).unwrap();
    guard.before_call().unwrap();
    let first = f.repo.git(&["rev-parse", "main"]).trim().to_owned();
    f.repo
        .git(&["commit", "-q", "--allow-empty", "-m", "user moved on"]);
    f.repo.git(&["tag", "-d", "v1"]);
    f.repo.git(&["symbolic-ref", "HEAD", "refs/heads/other"]);
    let described: Vec<String> = guard
        .after_call()
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        described
            .iter()
            .any(|d| d.starts_with("ref refs/heads/main moved from")),
        "{described:?}"
    );
    assert!(
        described.contains(&format!("ref refs/tags/v1 deleted (was {})", &first[..12])),
        "{described:?}"
    );
    assert!(
        described.contains(
            &"HEAD changed from `ref: refs/heads/main` to `ref: refs/heads/other`".to_owned()
        ),
        "{described:?}"
    );
    // Reported, never undone.
    guard.restore_lane_files().unwrap();
    assert_eq!(guard.after_call().unwrap().len(), described.len());
    assert_ne!(f.repo.git(&["rev-parse", "main"]).trim(), first);
}

#[test]
fn a_main_worktree_as_lane_keeps_its_git_dir_read_only() {
    let f = Fixture::new();
    let p = Policy::new(Profile::WorkspaceWrite, &f.repo.path, &f.tmp).unwrap();
    assert_eq!(p.git, None);
    let o = f.run_in(
        &p,
        &f.repo.path,
        "echo more >> README.md && git status --short",
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(f.repo.read("README.md"), "hello\nmore\n");
    for script in [
        "git config core.hooksPath x",
        "echo x > .git/hooks/pre-commit",
    ] {
        assert_denied(&f.run_in(&p, &f.repo.path, script), script);
    }
    assert!(!f.repo.path.join(".git/hooks/pre-commit").exists());
}

const NESTED: &str = "ORCH_SANDBOX_NESTED_PROBE";

/// Child mode of the test below, run inside a subagent sandbox: prepares a
/// tool sandbox itself (as a sandboxed `orch agent` would) and runs two
/// writes under it. A no-op in a normal test run.
#[test]
fn nested_child_mode() {
    if std::env::var(NESTED).as_deref() != Ok("1") {
        return;
    }
    let var = |k: &str| PathBuf::from(std::env::var_os(k).unwrap());
    let (lane, tmp, home, agents) = (
        var("NESTED_LANE"),
        var("NESTED_TMP"),
        var("NESTED_HOME"),
        var("NESTED_AGENTS"),
    );
    let mut p = Policy::new(Profile::WorkspaceWrite, &lane, &tmp).unwrap();
    p.secret_paths = default_secret_paths(Some(&home), Some(&home.join(".config/orch")));
    let prepared = sandbox::prepare(&p).unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(format!(
            "echo tool > nested.txt && echo lane-ok; echo x > {}/tool.txt || echo agents-denied; \
             cat ~/.config/orch/models.toml || echo config-denied",
            agents.display()
        ))
        .current_dir(&lane)
        .stdin(Stdio::null());
    // SAFETY: the hook only makes async-signal-safe system calls.
    unsafe { cmd.pre_exec(prepared.into_pre_exec()) };
    let o = cmd.output().unwrap();
    println!("NESTED-RESULT {}", text(&o).replace('\n', " | "));
    // The subagent itself may write its record and read the config.
    std::fs::write(agents.join("child.json"), "{}").unwrap();
    let cfg = std::fs::read_to_string(home.join(".config/orch/models.toml")).unwrap();
    println!("NESTED-SELF config={}", cfg.contains("sk-canary"));
}

#[test]
fn a_sandboxed_subagent_can_sandbox_its_own_tools_more_tightly() {
    let f = Fixture::new();
    let agents = f.repo.path.join(".git/orch/runs/r/agents");
    std::fs::create_dir_all(&agents).unwrap();
    let p = f
        .policy(Profile::WorkspaceWrite)
        .for_subagent(&agents, Some(&f.home.join(".config/orch")));
    let prepared = sandbox::prepare(&p).unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["sandbox::nested_child_mode", "--exact", "--nocapture"])
        .current_dir(&f.lane)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("HOME", &f.home)
        .env("TMPDIR", &f.tmp)
        .env(NESTED, "1")
        .env("NESTED_LANE", &f.lane)
        .env("NESTED_TMP", &f.tmp)
        .env("NESTED_HOME", &f.home)
        .env("NESTED_AGENTS", &agents)
        .stdin(Stdio::null());
    // SAFETY: the hook only makes async-signal-safe system calls.
    unsafe { cmd.pre_exec(prepared.into_pre_exec()) };
    let o = cmd.output().unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let result = out
        .lines()
        .find_map(|l| l.split_once("NESTED-RESULT ").map(|(_, r)| r.to_owned()))
        .unwrap_or_else(|| panic!("no result: {out}"));
    assert!(result.contains("lane-ok"), "{result}");
    assert!(result.contains("agents-denied"), "{result}");
    assert!(
        result.contains("config-denied") && !result.contains("sk-canary"),
        "{result}"
    );
    assert!(out.contains("NESTED-SELF config=true"), "{out}");
    assert!(agents.join("child.json").exists() && !agents.join("tool.txt").exists());
    assert_eq!(
        std::fs::read_to_string(f.lane.join("nested.txt")).unwrap(),
        "tool\n"
    );
}

#[test]
fn the_repo_guard_reports_a_changed_symlinked_hook_and_leaves_it() {
    let f = Fixture::new();
    let common = f.repo.path.join(".git");
    std::os::unix::fs::symlink("../../scripts/pre-commit", common.join("hooks/pre-commit"))
        .unwrap();
    let mut guard = RepoGuard::new(&common).unwrap();
    guard.before_call().unwrap();
    std::fs::remove_file(common.join("hooks/pre-commit")).unwrap();
    std::fs::write(common.join("hooks/pre-commit"), "#!/bin/sh\nevil\n").unwrap();
    let described: Vec<String> = guard
        .after_call()
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(described, ["hook pre-commit changed"]);
    guard.restore_lane_files().unwrap();
    assert_eq!(
        std::fs::read_to_string(common.join("hooks/pre-commit")).unwrap(),
        "#!/bin/sh\nevil\n"
    );
}
