//! The per-stage disk quota (issue 25.5): how much a stage's tool processes
//! may write into its lane and private temp dir, checked after every
//! sandboxed command (`bash`, verify, setup), so `head -c 30G /dev/zero >
//! big` stops the stage with a clear reason instead of filling the disk.
//!
//! Cost: one `statvfs` per call per file system. The file systems' used
//! space is compared with what it was at the last measurement; only when it
//! grew by more than what is left of the quota is the stage's own growth
//! measured exactly — a walk of the lane and the temp dir adding up the
//! allocated blocks of every file whose status changed since the stage
//! began (`ctime`; hard links counted once). So a normal call costs
//! microseconds whatever the repository's size, and the walk runs when the
//! disk really grew by the quota (another process's writes can trigger it
//! too; each walk raises the bar by what it found free).
//!
//! Limits: growth is what the stage's files occupy, not a hard limit — a
//! single command can write far past the quota before it ends (the disk may
//! fill first: then orch fails the stage on `ENOSPC`, see
//! `src/runner.rs` `fail_on_error`); a write outside the lane and temp dir is
//! refused by the sandbox anyway. Files changed in the stage count whole.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The default quota: 4 GiB per stage.
pub const DEFAULT_DISK_QUOTA: u64 = 4 << 30;

/// One stage's quota (see the module docs).
#[derive(Debug)]
pub(crate) struct DiskQuota {
    cap: u64,
    state: Mutex<Option<Measured>>,
}

#[derive(Debug)]
struct Measured {
    roots: Vec<PathBuf>,
    /// When the stage began (seconds, nanoseconds), for `ctime`.
    start: (i64, i64),
    /// Used bytes of the roots' file systems at the last measurement.
    used: u64,
    /// What the quota had left then.
    slack: u64,
}

impl DiskQuota {
    /// A quota of `cap` bytes, counted from now.
    pub(crate) fn new(cap: u64) -> DiskQuota {
        DiskQuota {
            cap,
            state: Mutex::new(None),
        }
    }

    /// Starts counting for `roots` (the lane and the temp dir) on the first
    /// call; later calls do nothing.
    pub(crate) fn watch(&self, roots: &[&Path]) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.is_some() {
            return;
        }
        let roots: Vec<PathBuf> = roots.iter().map(|r| r.to_path_buf()).collect();
        *state = Some(Measured {
            used: used_bytes(&roots),
            start: coarse_now(),
            roots,
            slack: self.cap,
        });
    }

    /// After a call: `Err` with the reason when the stage's files grew past
    /// the quota.
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(m) = state.as_mut() else {
            return Ok(());
        };
        let used = used_bytes(&m.roots);
        if used.saturating_sub(m.used) <= m.slack {
            return Ok(());
        }
        let grown = grown_bytes(&m.roots, m.start);
        if grown > self.cap {
            return Err(format!(
                "the stage's files grew by {} ({} bytes) in its lane and temp dir, over its disk quota of {} (`[sandbox] disk_quota` in orch.toml); the stage stops",
                human(grown),
                grown,
                human(self.cap)
            ));
        }
        m.used = used;
        m.slack = self.cap - grown;
        Ok(())
    }
}

/// The kernel's coarse wall clock, the one file times come from: a file
/// changed after this moment has a `ctime` at or after it (the fine clock
/// can be ahead of the file times by a tick).
fn coarse_now() -> (i64, i64) {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    (ts.tv_sec, ts.tv_nsec)
}

/// Used bytes summed over the distinct file systems of `roots`.
fn used_bytes(roots: &[PathBuf]) -> u64 {
    let mut seen = HashSet::new();
    let mut total = 0u64;
    for r in roots {
        let Some((fsid, used)) = statvfs_used(r) else {
            continue;
        };
        if seen.insert(fsid) {
            total = total.saturating_add(used);
        }
    }
    total
}

/// The file system id and used bytes of the file system holding `path`.
fn statvfs_used(path: &Path) -> Option<(u64, u64)> {
    let s = rustix::fs::statvfs(path).ok()?;
    let used = s.f_blocks.saturating_sub(s.f_bfree);
    Some((s.f_fsid, used.saturating_mul(s.f_frsize)))
}

/// Allocated bytes of the files under `roots` whose status changed at or
/// after `start`.
fn grown_bytes(roots: &[PathBuf], start: (i64, i64)) -> u64 {
    let mut seen = HashSet::new();
    let mut total = 0u64;
    let mut stack: Vec<PathBuf> = roots.to_vec();
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(m) = entry.metadata() else {
                continue;
            };
            if m.is_dir() {
                stack.push(entry.path());
                continue;
            }
            if (m.ctime(), m.ctime_nsec()) < start {
                continue;
            }
            if m.nlink() > 1 && !seen.insert((m.dev(), m.ino())) {
                continue;
            }
            total = total.saturating_add(m.blocks().saturating_mul(512));
        }
    }
    total
}

/// `5.0 MiB`.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// Parses a quota: a number of bytes, or a number with `K`, `M`, `G` or `T`
/// (powers of 1024, optionally followed by `B`/`iB`), or `"off"` (`None`).
pub(crate) fn parse_size(raw: &str) -> Result<Option<u64>, String> {
    let s = raw.trim();
    if s.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{raw:?} is not a size (e.g. \"4G\", \"500M\", \"off\")"))?;
    let shift = match unit.trim().trim_end_matches("iB").trim_end_matches('B') {
        "" => 0,
        "K" | "k" => 10,
        "M" | "m" => 20,
        "G" | "g" => 30,
        "T" | "t" => 40,
        _ => {
            return Err(format!(
                "{raw:?} is not a size (e.g. \"4G\", \"500M\", \"off\")"
            ));
        }
    };
    Ok(Some((n * (1u64 << shift) as f64) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units_and_off() {
        assert_eq!(parse_size("1048576"), Ok(Some(1 << 20)));
        assert_eq!(parse_size("1M"), Ok(Some(1 << 20)));
        assert_eq!(parse_size("1MB"), Ok(Some(1 << 20)));
        assert_eq!(parse_size("4GiB"), Ok(Some(4 << 30)));
        assert_eq!(parse_size("1.5K"), Ok(Some(1536)));
        assert_eq!(parse_size("off"), Ok(None));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5X").is_err());
    }

    #[test]
    fn only_files_changed_since_the_start_count() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("old"), vec![1u8; 64 << 10]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let q = DiskQuota::new(100 << 10);
        q.watch(&[t.path()]);
        assert_eq!(q.check(), Ok(()));
        std::fs::create_dir(t.path().join("sub")).unwrap();
        std::fs::write(t.path().join("sub/new"), vec![1u8; 256 << 10]).unwrap();
        let start = q.state.lock().unwrap().as_ref().unwrap().start;
        let grown = grown_bytes(&[t.path().to_path_buf()], start);
        assert!((256 << 10..300 << 10).contains(&grown), "{grown}");
    }
}
