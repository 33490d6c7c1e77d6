//! The reconnaissance tools `detect_system` and `check_command`: what the
//! machine is and which commands it already has, as structured JSON.
//!
//! Everything is read by orch itself where it can be (`/etc/os-release`,
//! `uname(2)`, `statvfs(3)`, the `PATH` search, the environment), so a bare
//! machine answers too; only versions come from running `<cmd> --version`
//! (bounded in time and output, in parallel).

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::exec::{self, ExecLimits};

/// How long one `--version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(5);
/// Characters of `--version` output kept.
const VERSION_CHARS: usize = 2000;

/// Package managers looked for on `PATH`.
const PACKAGE_MANAGERS: &[&str] = &[
    "apt",
    "apt-get",
    "dnf",
    "yum",
    "zypper",
    "pacman",
    "apk",
    "emerge",
    "xbps-install",
    "brew",
    "port",
    "nix",
    "snap",
    "flatpak",
];

/// Language runtimes, build tools and version managers, with the arguments
/// that print their version.
const RUNTIMES: &[(&str, &str)] = &[
    ("python3", "--version"),
    ("python", "--version"),
    ("pip3", "--version"),
    ("node", "--version"),
    ("npm", "--version"),
    ("deno", "--version"),
    ("bun", "--version"),
    ("go", "version"),
    ("rustc", "--version"),
    ("cargo", "--version"),
    ("java", "--version"),
    ("ruby", "--version"),
    ("perl", "--version"),
    ("php", "--version"),
    ("gcc", "--version"),
    ("cc", "--version"),
    ("clang", "--version"),
    ("make", "--version"),
    ("cmake", "--version"),
    ("git", "--version"),
    ("docker", "--version"),
    ("curl", "--version"),
    ("wget", "--version"),
];

/// Version managers: found on `PATH`, or (shell functions) by their home dir.
const VERSION_MANAGERS: &[(&str, &str)] = &[
    ("uv", "--version"),
    ("pipx", "--version"),
    ("pyenv", "--version"),
    ("fnm", "--version"),
    ("volta", "--version"),
    ("asdf", "version"),
    ("mise", "--version"),
    ("rustup", "--version"),
    ("conda", "--version"),
];

/// Version managers that are shell functions, found by their directory.
const MANAGER_DIRS: &[(&str, &str)] = &[("nvm", ".nvm/nvm.sh"), ("sdkman", ".sdkman/bin")];

/// Proxy variables reported (values with credentials masked).
const PROXY_VARS: &[&str] = &[
    "http_proxy",
    "https_proxy",
    "ftp_proxy",
    "all_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "FTP_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
];

/// The `detect_system` result.
pub(crate) async fn detect_system(cwd: &Path) -> Value {
    let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let os = parse_os_release(&os_release);
    let uts = uname();
    let uid = rustix::process::getuid().as_raw();
    let home = crate::environment::current().home();
    let shell = std::env::var("SHELL").unwrap_or_default();

    let managers: Vec<Value> = PACKAGE_MANAGERS
        .iter()
        .filter_map(|m| {
            find_in_path(m).map(|p| json!({"name": m, "path": p.display().to_string()}))
        })
        .collect();
    let (runtimes, version_managers) = tokio::join!(
        versions_of(RUNTIMES, cwd),
        versions_of(VERSION_MANAGERS, cwd)
    );
    let mut version_managers = version_managers;
    if let Some(home) = &home {
        for (name, rel) in MANAGER_DIRS {
            if home.join(rel).exists() {
                version_managers
                    .push(json!({"name": name, "path": home.join(rel).display().to_string()}));
            }
        }
    }
    let proxies: serde_json::Map<String, Value> = PROXY_VARS
        .iter()
        .filter_map(|k| {
            std::env::var(k)
                .ok()
                .filter(|v| !v.is_empty())
                .map(|v| ((*k).to_owned(), Value::String(mask_credentials(&v))))
        })
        .collect();
    let mut disk = serde_json::Map::new();
    for (label, path) in [("cwd", Some(cwd.to_path_buf())), ("home", home.clone())] {
        if let Some(free) = path.as_deref().and_then(free_bytes) {
            disk.insert(
                label.to_owned(),
                json!({"path": path.as_deref().map(|p| p.display().to_string()), "free_bytes": free, "free": human_bytes(free)}),
            );
        }
    }
    json!({
        "os": std::env::consts::OS,
        "distro": os,
        "kernel": uts.release,
        "arch": uts.machine,
        "libc": libc_kind(cwd).await,
        "shell": shell,
        "user": std::env::var("USER").unwrap_or_default(),
        "uid": uid,
        "root": uid == 0,
        "home": home.as_deref().map(|h| h.display().to_string()),
        "cwd": cwd.display().to_string(),
        "package_managers": managers,
        "runtimes": runtimes,
        "version_managers": version_managers,
        "proxy": proxies,
        "disk_free": disk,
    })
}

/// One line about a `detect_system` result, for the user.
pub(crate) fn summary(v: &Value) -> String {
    let names = |key: &str| {
        v[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|m| m["name"].as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    format!(
        "detect_system: {} {} ({}), package managers: {}; runtimes: {}",
        v["distro"]["pretty_name"]
            .as_str()
            .unwrap_or("unknown distro"),
        v["arch"].as_str().unwrap_or(""),
        if v["root"] == true {
            "root"
        } else {
            "not root"
        },
        names("package_managers"),
        names("runtimes"),
    )
}

/// The `check_command` result for `name` (a bare command name).
pub(crate) async fn check_command(name: &str, cwd: &Path) -> Result<Value, String> {
    if name.is_empty() || name.contains(|c: char| c.is_whitespace() || "'\"$`;|&<>()\\".contains(c))
    {
        return Err(format!(
            "`{name}` is not a command name: give one name such as `python3` (no arguments, no shell syntax)"
        ));
    }
    let Some(path) = find_in_path(name) else {
        return Ok(json!({"command": name, "found": false}));
    };
    let version_arg = RUNTIMES
        .iter()
        .chain(VERSION_MANAGERS)
        .find(|(n, _)| *n == name)
        .map_or("--version", |(_, a)| a);
    let (output, exit_code) = version_output(&path, version_arg, cwd).await;
    Ok(json!({
        "command": name,
        "found": true,
        "path": path.display().to_string(),
        "version_command": format!("{name} {version_arg}"),
        "version_output": output,
        "exit_code": exit_code,
    }))
}

async fn versions_of(table: &[(&str, &str)], cwd: &Path) -> Vec<Value> {
    let found: Vec<(&str, &str, PathBuf)> = table
        .iter()
        .filter_map(|(n, a)| find_in_path(n).map(|p| (*n, *a, p)))
        .collect();
    let futures = found.iter().map(|(name, arg, path)| async move {
        let (output, _) = version_output(path, arg, cwd).await;
        let first = output
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_owned();
        json!({"name": name, "path": path.display().to_string(), "version": first})
    });
    futures_util::future::join_all(futures).await
}

/// `<path> <arg>` with stdout and stderr together, capped; `(output, exit code)`.
async fn version_output(path: &Path, arg: &str, cwd: &Path) -> (String, Option<i32>) {
    let limits = ExecLimits {
        max_output_bytes: VERSION_CHARS,
        ..ExecLimits::default()
    };
    let command = format!(
        "{} {arg}",
        crate::text::shell_quote(&path.display().to_string())
    );
    match exec::run_shell(
        &command,
        cwd,
        &exec::scrubbed_env(),
        VERSION_TIMEOUT,
        &limits,
    )
    .await
    {
        Ok(r) => {
            let mut text = r.output;
            if r.timed_out {
                text.push_str("[timed out]");
            }
            (crate::text::cap_bytes(&text, VERSION_CHARS), r.exit_code)
        }
        Err(e) => (format!("could not run: {e}"), None),
    }
}

/// `glibc 2.36`, `musl`, or `unknown`, from `ldd --version` (musl's ldd
/// says so on stderr) or the musl loader's presence.
async fn libc_kind(cwd: &Path) -> Value {
    let musl_loader = std::fs::read_dir("/lib")
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("ld-musl-"))
        })
        .unwrap_or(false);
    if let Some(ldd) = find_in_path("ldd") {
        let (out, _) = version_output(&ldd, "--version", cwd).await;
        let first = out.lines().next().unwrap_or("").to_owned();
        let lower = out.to_ascii_lowercase();
        if lower.contains("musl") {
            return json!({"name": "musl", "detail": first});
        }
        if lower.contains("glibc") || lower.contains("gnu libc") || lower.contains("gnu c library")
        {
            let version = first.split_whitespace().last().unwrap_or("").to_owned();
            return json!({"name": "glibc", "version": version, "detail": first});
        }
    }
    if musl_loader {
        return json!({"name": "musl"});
    }
    json!({"name": "unknown"})
}

/// `ID`, `NAME`, `VERSION_ID`, `PRETTY_NAME`, `VERSION_CODENAME`, `ID_LIKE`.
pub(crate) fn parse_os_release(text: &str) -> Value {
    let mut map = serde_json::Map::new();
    for line in text.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let key = match k.trim() {
            "ID" => "id",
            "NAME" => "name",
            "VERSION_ID" => "version",
            "PRETTY_NAME" => "pretty_name",
            "VERSION_CODENAME" => "codename",
            "ID_LIKE" => "id_like",
            _ => continue,
        };
        let v = v.trim().trim_matches('"').trim_matches('\'');
        map.insert(key.to_owned(), Value::String(v.to_owned()));
    }
    Value::Object(map)
}

struct Uts {
    release: String,
    machine: String,
}

fn uname() -> Uts {
    let u = rustix::system::uname();
    Uts {
        release: u.release().to_string_lossy().into_owned(),
        machine: u.machine().to_string_lossy().into_owned(),
    }
}

fn free_bytes(path: &Path) -> Option<u64> {
    let s = rustix::fs::statvfs(path).ok()?;
    Some(s.f_bavail * s.f_frsize)
}

fn human_bytes(b: u64) -> String {
    const UNITS: &[&str] = &["B", "KB", "MB", "GB", "TB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// The first executable `name` on `PATH`.
pub(crate) fn find_in_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// `user:password@` in a proxy URL becomes `***@`.
fn mask_credentials(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_release_fields() {
        let v = parse_os_release(
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nID=debian\n# c\n",
        );
        assert_eq!(v["id"], "debian");
        assert_eq!(v["version"], "12");
        assert_eq!(v["pretty_name"], "Debian GNU/Linux 12 (bookworm)");
    }

    #[test]
    fn proxy_credentials_are_masked() {
        assert_eq!(
            mask_credentials("http://bob:hunter2@proxy:3128"),
            "http://***@proxy:3128"
        );
        assert_eq!(mask_credentials("http://proxy:3128"), "http://proxy:3128");
    }

    #[tokio::test]
    async fn check_command_refuses_shell_syntax() {
        let d = tempfile::tempdir().unwrap();
        let e = check_command("python3; rm -rf x", d.path())
            .await
            .unwrap_err();
        assert!(e.contains("not a command name"), "{e}");
        let v = check_command("bash", d.path()).await.unwrap();
        assert_eq!(v["found"], true);
        assert!(
            v["version_output"].as_str().unwrap().contains("bash"),
            "{v}"
        );
        let v = check_command("no-such-cmd-xyz", d.path()).await.unwrap();
        assert_eq!(v["found"], false);
    }
}
