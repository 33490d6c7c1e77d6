//! Running the real `orch` binary: a builder for `orch run`, the files it
//! reads, and what it prints.

use super::cmd::{orch, orch_with_model};
use super::fake_server::Reply;
use super::repo::TestRepo;
use serde_json::Value;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicU32;

/// Writes `yaml` to `dir/<stem>.yaml` (a pipeline's `name` must match its file stem).
pub fn write_pipeline(dir: &Path, stem: &str, yaml: &str) -> PathBuf {
    let p = dir.join(format!("{stem}.yaml"));
    std::fs::write(&p, yaml).expect("write pipeline");
    p
}

/// The issue of the small-model tests (issue 28): implement `median`.
pub const MEDIAN_ISSUE: &str = "# median\n\nImplement `median` in solution.py.\n";

/// A repository whose `solution.py` is `median`'s unimplemented stub.
pub fn median_stub_repo() -> TestRepo {
    TestRepo::with_commit(
        &[(
            "solution.py",
            "def median(xs):\n    raise NotImplementedError\n",
        )],
        "stub",
    )
}

/// Runs a one-stage pipeline (stage `code`, role `role`) on `repo` with
/// [`MEDIAN_ISSUE`] against `server`; the exit code and the run id.
pub fn run_median_stage(repo: &TestRepo, server: &super::FakeServer, role: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        dir.path(),
        "solo",
        &format!("stages:\n  code:\n    role: {role}\n    task: Fix it.\n"),
    );
    run_on_fake(repo, &pipeline, MEDIAN_ISSUE, server)
}

/// Writes `text` to `dir/ISSUE.md` and returns its path.
pub fn write_issue(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("ISSUE.md");
    std::fs::write(&p, text).expect("write issue");
    p
}

/// Runs `pipeline` on `repo` with an issue of text `issue` against
/// `server`'s fake model, and asserts the server saw no protocol violation;
/// the exit code and the run id.
pub fn run_on_fake(
    repo: &TestRepo,
    pipeline: impl AsRef<OsStr>,
    issue: &str,
    server: &super::fake_server::FakeServer,
) -> (i32, String) {
    let scratch = tempfile::tempdir().expect("scratch dir");
    let issue = write_issue(scratch.path(), issue);
    let out = OrchRun::new(pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "fake-model")
        .output();
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    (
        out.status.code().unwrap_or(-1),
        super::only_run_id(&repo.path),
    )
}

/// A builder for `orch run <pipeline> --repo <repo> [--issue …] [--base-url … --model …] [--json] [args…]`.
pub struct OrchRun {
    cmd: Command,
}

impl OrchRun {
    /// `orch run <pipeline> --repo <repo>` (pipeline: a file or a built-in name) with a clean environment.
    pub fn new(pipeline: impl AsRef<OsStr>, repo: &TestRepo) -> OrchRun {
        OrchRun::on(orch(), pipeline, repo)
    }

    /// [`OrchRun::new`] with the model given by environment ([`orch_with_model`]), not flags.
    pub fn with_model_env(base_url: &str, pipeline: impl AsRef<OsStr>, repo: &TestRepo) -> OrchRun {
        OrchRun::on(orch_with_model(base_url), pipeline, repo)
    }

    fn on(mut cmd: Command, pipeline: impl AsRef<OsStr>, repo: &TestRepo) -> OrchRun {
        cmd.arg("run").arg(pipeline).arg("--repo").arg(&repo.path);
        OrchRun { cmd }
    }

    /// `--issue <path>`.
    pub fn issue(mut self, path: &Path) -> OrchRun {
        self.cmd.arg("--issue").arg(path);
        self
    }

    /// `--base-url <base_url> --model <model>`.
    pub fn model(mut self, base_url: &str, model: &str) -> OrchRun {
        self.cmd.args(["--base-url", base_url, "--model", model]);
        self
    }

    /// `--json`.
    pub fn json(self) -> OrchRun {
        self.args(["--json"])
    }

    /// More arguments, appended in order.
    pub fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> OrchRun {
        self.cmd.args(args);
        self
    }

    /// Sets one environment variable of the `orch` process.
    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> OrchRun {
        self.cmd.env(key, value);
        self
    }

    /// The command as built, for callers that add more themselves.
    pub fn command(self) -> Command {
        self.cmd
    }

    /// Runs `orch` to the end; see [`output_logged`].
    pub fn output(mut self) -> Output {
        output_logged(&mut self.cmd)
    }

    /// Starts `orch` with stdout and stderr discarded.
    pub fn spawn_quiet(mut self) -> Child {
        self.cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn orch")
    }
}

/// Runs `cmd` to the end and echoes its exit code, stdout and stderr to the test's stderr.
pub fn output_logged(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("orch runs");
    eprintln!(
        "--- {:?} {:?}: exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        cmd.get_program(),
        cmd.get_args().collect::<Vec<_>>(),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `cmd` and returns its exit code, stdout and stderr as text.
pub fn run_text(cmd: &mut Command) -> (Option<i32>, String, String) {
    let out = cmd.output().expect("run command");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts `out` exited with `code`, showing its stderr if not.
pub fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The one JSON object `orch … --json` printed on stdout.
pub fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is one JSON object ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A [`Reply::Signal`] sending `signal` to the pid stored later in the returned slot.
pub fn signal_reply(signal: i32) -> (Arc<AtomicU32>, Reply) {
    let pid = Arc::new(AtomicU32::new(0));
    let reply = Reply::Signal {
        pid: Arc::clone(&pid),
        signal,
    };
    (pid, reply)
}

/// `orch resume <run> --repo … --base-url <server> --model m --json`, not yet run.
pub fn resume_command(repo: &TestRepo, run_id: &str, base_url: &str) -> Command {
    let mut cmd = orch();
    cmd.args(["resume", run_id, "--repo", repo.path.to_str().unwrap()])
        .args(["--base-url", base_url, "--model", "m", "--json"]);
    cmd
}

/// [`resume_command`] with `extra` arguments, run to the end ([`output_logged`]).
pub fn resume(repo: &TestRepo, run_id: &str, server: &super::FakeServer, extra: &[&str]) -> Output {
    output_logged(resume_command(repo, run_id, &server.base_url).args(extra))
}
