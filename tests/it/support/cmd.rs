//! A builder for running the real `orch` binary with a cleared environment.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// An API key tests hand to `orch`; it must never show up in output, logs or
/// tool processes, so tests can grep for it.
pub const FAKE_API_KEY: &str = "sk-orch-test-key-must-not-leak";

/// `orch` with an empty environment except `PATH`, a fresh `HOME` and
/// `ORCH_CONFIG_DIR`, `CI=true`, `GIT_CONFIG_NOSYSTEM=1` and stdin closed.
/// Everything else is the product's default — the lane pool included: a
/// test that turns a default off says why.
///
/// The home directory lives under cargo's per-target temp dir and is kept after
/// the test, so a failing run can be inspected (`cargo clean` removes it).
pub fn orch() -> Command {
    let home = fresh_home();
    let config = home.join(".config").join("orch");
    std::fs::create_dir_all(&config).expect("create config dir");
    // `ORCH_TEST_BIN` runs the suite against another build of orch (an A/B
    // of a case, e.g. the git-compatibility matrix before and after a
    // change); unset, the binary this suite was built with.
    let bin =
        std::env::var_os("ORCH_TEST_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_orch").into());
    let mut cmd = Command::new(bin);
    cmd.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    cmd.env("HOME", &home)
        .env("ORCH_CONFIG_DIR", &config)
        .env("CI", "true")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("ORCH_LOG")
        .stdin(Stdio::null());
    cmd
}

/// [`orch`] pointed at a model server: `ORCH_BASE_URL`, `ORCH_MODEL=fake-model`
/// and `ORCH_API_KEY=`[`FAKE_API_KEY`].
pub fn orch_with_model(base_url: &str) -> Command {
    let mut cmd = orch();
    cmd.env("ORCH_BASE_URL", base_url)
        .env("ORCH_MODEL", "fake-model")
        .env("ORCH_API_KEY", FAKE_API_KEY);
    cmd
}

fn fresh_home() -> PathBuf {
    tempfile::Builder::new()
        .prefix("orch-home-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("create temp home")
        .keep()
}

/// A shell running a command line orch printed (`play it with: orch run
/// …`), with the environment [`orch`] gives the binary and the binary
/// first on `PATH`, in `cwd`.
pub fn orch_shell(line: &str, cwd: &std::path::Path) -> Command {
    let base = orch();
    let mut sh = Command::new("sh");
    sh.env_clear();
    for (k, v) in base.get_envs() {
        if let Some(v) = v {
            sh.env(k, v);
        }
    }
    let bin = std::path::Path::new(base.get_program())
        .parent()
        .expect("the binary's directory")
        .to_owned();
    let path = std::env::var("PATH").unwrap_or_default();
    sh.env("PATH", format!("{}:{path}", bin.display()))
        .current_dir(cwd)
        .args(["-c", line]);
    sh
}
