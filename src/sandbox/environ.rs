//! Moving secret values out of orch's original environment block, so
//! `/proc/<orch pid>/environ` (which the kernel serves from that block, not
//! from libc's current `environ`) no longer holds them.
//!
//! The block is the strings area the kernel copied onto the initial stack at
//! `exec`; `/proc/<pid>/environ` reads `[env_start, env_end)` of it. Each
//! secret value is re-set with `setenv` (libc then allocates a fresh
//! `NAME=value` on the heap and points `environ` at it, so `std::env::var`
//! still returns it) and the original bytes are overwritten with NULs. The
//! name stays visible with an empty value. Measured in-place rewriting to be
//! reliable on Linux, so no re-exec with an inherited descriptor is needed.

use std::ffi::{CStr, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

unsafe extern "C" {
    static environ: *const *const libc::c_char;
}

/// The secret variables found in orch's environment when it started (names
/// per [`crate::exec::is_secret_name`]); their values are what tool output
/// and records must be redacted of.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SecretVars {
    vars: Vec<(String, OsString)>,
}

impl SecretVars {
    /// The names of the variables taken.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.vars.iter().map(|(k, _)| k.as_str())
    }

    /// The non-empty values (for redaction).
    pub fn values(&self) -> impl Iterator<Item = &OsStr> {
        self.vars
            .iter()
            .map(|(_, v)| v.as_os_str())
            .filter(|v| !v.is_empty())
    }

    /// The values long enough to redact ([`crate::secrets::redactable`]
    /// warns once about each shorter one).
    pub fn redactable_values(&self) -> impl Iterator<Item = &OsStr> {
        self.vars
            .iter()
            .filter(|(k, v)| crate::secrets::redactable(k, &v.to_string_lossy()))
            .map(|(_, v)| v.as_os_str())
    }

    /// Whether no secret variable was set.
    pub fn is_empty(&self) -> bool {
        self.vars.is_empty()
    }
}

/// Wipes the values of secret variables from the original environment block
/// and keeps them reachable through `std::env::var`; also sets
/// `PR_SET_DUMPABLE` to 0 so a non-root process of the same user (a tool
/// process) cannot open orch's `/proc/<pid>/environ` or `mem` at all.
///
/// # Safety
/// Call first thing in `main`, while the process is single-threaded: it
/// calls `setenv` and writes the environment block directly.
pub unsafe fn take_secrets_from_environ() -> SecretVars {
    // (name, value, where the value's bytes start, their length)
    let mut found: Vec<(String, OsString, *mut u8, usize)> = Vec::new();
    // SAFETY: environ is the NULL-terminated array libc maintains; nothing
    // else runs (the caller's contract), so it does not change under us.
    unsafe {
        let mut p = environ;
        while !p.is_null() && !(*p).is_null() {
            let entry = CStr::from_ptr(*p).to_bytes();
            if let Some(eq) = entry.iter().position(|&b| b == b'=')
                && let Ok(name) = std::str::from_utf8(&entry[..eq])
                && crate::exec::is_secret_name(name)
            {
                let value = OsStr::from_bytes(&entry[eq + 1..]).to_os_string();
                let start = (*p as *mut u8).add(eq + 1);
                found.push((name.to_owned(), value, start, entry.len() - eq - 1));
            }
            p = p.add(1);
        }
    }
    for (name, value, _, _) in &found {
        // SAFETY: single-threaded per the caller's contract. setenv copies
        // the value to a new heap string and repoints environ at it.
        unsafe { std::env::set_var(name, value) };
    }
    for &(_, _, start, len) in &found {
        // SAFETY: the bytes belong to the original block, which environ no
        // longer points into for these names (re-set above); the block is
        // writable stack memory of this process.
        unsafe { std::ptr::write_bytes(start, 0, len) };
    }
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    SecretVars {
        vars: found.into_iter().map(|(k, v, _, _)| (k, v)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    const PROBE: &str = "ORCH_ENVIRON_PROBE";
    const VALUE: &str = "sk-probe-6f1c2a9e7d";

    /// Child mode of the test below: takes the secrets, proves `env::var`
    /// still sees them, then waits on stdin while the parent reads
    /// `/proc/<pid>/environ`. A no-op in a normal test run.
    #[test]
    fn probe_child_mode() {
        if std::env::var(PROBE).as_deref() != Ok("1") {
            return;
        }
        // SAFETY: the test harness's other threads do not touch the
        // environment in this single-test child run.
        let taken = unsafe { take_secrets_from_environ() };
        let seen = std::env::var("PROBE_API_KEY").unwrap_or_default();
        let names: Vec<&str> = taken.names().collect();
        println!("PROBE-READY {seen} {}", names.join(","));
        std::io::stdout().flush().unwrap();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
    }

    #[test]
    fn proc_environ_loses_secret_values_while_env_var_keeps_them() {
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new(exe)
            .args([
                "sandbox::environ::tests::probe_child_mode",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(PROBE, "1")
            .env("PROBE_API_KEY", VALUE)
            .env("PROBE_PLAIN", "visible-value")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let ready = loop {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "child ended early");
            // libtest prints `test … ... ` on the same line first.
            if let Some(at) = line.find("PROBE-READY ") {
                break line[at + "PROBE-READY ".len()..].trim().to_owned();
            }
        };
        let block = std::fs::read(format!("/proc/{}/environ", child.id())).unwrap();
        drop(child.stdin.take());
        assert!(child.wait().unwrap().success());

        let text = String::from_utf8_lossy(&block);
        assert!(!text.contains(VALUE), "value still in the block: {text:?}");
        assert!(text.contains("PROBE_API_KEY="), "{text:?}");
        assert!(text.contains("PROBE_PLAIN=visible-value"), "{text:?}");
        assert!(ready.starts_with(VALUE), "env::var lost it: {ready}");
        assert!(ready.contains("PROBE_API_KEY"), "{ready}");
    }
}
