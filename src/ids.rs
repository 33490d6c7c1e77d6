//! Identifier newtypes shared across modules, and the reviewer verdict.
//!
//! Invariants: a `StageId` is a valid single git ref component made of
//! `[a-z0-9_-]` plus, for unrolled rework rounds only, a `.rN` suffix
//! (e.g. `code.r2`); user-written ids never contain a dot. A `RunId` is a
//! valid single git ref component and file name made of `[A-Za-z0-9_-]`.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The id of one run: its UTC creation time to the millisecond, then 64
/// random bits, e.g. `20261130-160512-042-9f3a6c1e0b7d2254`.
///
/// Ids sort like their creation times (fixed-width fields, most significant
/// first), and two ids made at the same moment differ but for a 2^-64
/// chance; the run directory is still made with `create_dir`, never reused
/// (see [`crate::runlog::RunDir::create_new`]). Older records hold shorter ids
/// (`20261130-160512-a3f9`); any ref-safe name parses.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(String);

/// A string that cannot be a run id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "use `{value}` as a run id: expected 1 to {RUN_ID_MAX_LEN} letters, digits, `-` or `_`, not starting with `-` (e.g. 20261130-160512-042-9f3a6c1e0b7d2254)"
)]
pub struct RunIdError {
    /// The string as given.
    pub value: String,
}

/// The longest run id accepted: room for the current form and then some,
/// short enough for a branch name `orch/<run>/<stage>.v2`.
pub const RUN_ID_MAX_LEN: usize = 64;

/// The id of one stage of a pipeline, e.g. `code`, `review`, `code.r2`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StageId(pub String);

impl fmt::Display for RunId {
    /// Honours width and alignment (`{:<36}`), as tables of runs use them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl fmt::Display for StageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StageId {
    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl RunId {
    /// A fresh id: the current time and 64 random bits.
    pub fn new() -> RunId {
        RunId::at(chrono::Utc::now(), random_u64())
    }

    /// The id made at `time` with `random` as its random part.
    pub fn at(time: chrono::DateTime<chrono::Utc>, random: u64) -> RunId {
        RunId(format!(
            "{}-{:016x}",
            time.format("%Y%m%d-%H%M%S-%3f"),
            random
        ))
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as an owned string.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl Default for RunId {
    fn default() -> Self {
        RunId::new()
    }
}

impl FromStr for RunId {
    type Err = RunIdError;

    fn from_str(s: &str) -> Result<RunId, RunIdError> {
        let ok = !s.is_empty()
            && s.len() <= RUN_ID_MAX_LEN
            && !s.starts_with('-')
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if ok {
            Ok(RunId(s.to_owned()))
        } else {
            Err(RunIdError {
                value: s.to_owned(),
            })
        }
    }
}

impl TryFrom<String> for RunId {
    type Error = RunIdError;

    fn try_from(s: String) -> Result<RunId, RunIdError> {
        s.parse()
    }
}

impl From<RunId> for String {
    fn from(id: RunId) -> String {
        id.0
    }
}

impl AsRef<str> for RunId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// 64 bits from the OS's random source. Should `/dev/urandom` be unreadable,
/// std's per-process random hash keys mixed with the time, the pid and a
/// counter still give distinct values within a process and unpredictable
/// ones across processes.
fn random_u64() -> u64 {
    use std::io::Read;
    let mut buf = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok()
    {
        return u64::from_le_bytes(buf);
    }
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = chrono::Utc::now();
    h.write_i64(now.timestamp());
    h.write_u32(now.timestamp_subsec_nanos());
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// A reviewer's verdict, given through the `finish` tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The change is good to go.
    Approve,
    /// The change needs another coder round; the summary carries the findings.
    RequestChanges,
}

impl Verdict {
    /// The wire name, as the model writes it (`approve`, `request_changes`).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Approve => "approve",
            Verdict::RequestChanges => "request_changes",
        }
    }

    /// Parses the wire name; `None` for anything else.
    pub fn parse(s: &str) -> Option<Verdict> {
        match s.trim() {
            "approve" => Some(Verdict::Approve),
            "request_changes" => Some(Verdict::RequestChanges),
            _ => None,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn run_ids_sort_by_time_and_are_ref_safe() {
        let a = RunId::new();
        assert_eq!(
            a.as_str().len(),
            "20260101-000000-000-0123456789abcdef".len()
        );
        assert!(
            a.as_str()
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        );
        let t = |s: &str| {
            chrono::DateTime::parse_from_rfc3339(s)
                .unwrap()
                .with_timezone(&chrono::Utc)
        };
        let early = RunId::at(t("2026-11-30T16:05:12.042Z"), u64::MAX);
        let later = RunId::at(t("2026-11-30T16:05:12.043Z"), 0);
        assert_eq!(early.as_str(), "20261130-160512-042-ffffffffffffffff");
        assert!(
            early < later,
            "the time decides the order, not the random part"
        );
        assert!(
            RunId::at(t("2026-11-30T16:05:59.999Z"), 0) < RunId::at(t("2026-11-30T16:06:00Z"), 0)
        );
    }

    #[test]
    fn run_ids_made_in_the_same_second_differ() {
        let t = chrono::DateTime::parse_from_rfc3339("2026-11-30T16:05:12Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        // Many ids made in the same second: no repeats.
        let same_second: Vec<RunId> = (0..20_000).map(|_| RunId::at(t, random_u64())).collect();
        let distinct: HashSet<&RunId> = same_second.iter().collect();
        assert_eq!(distinct.len(), same_second.len());
        assert!(
            same_second
                .iter()
                .all(|id| id.as_str().starts_with("20261130-160512-000-"))
        );
        // And fresh ones, one after another.
        let fresh: Vec<RunId> = (0..20_000).map(|_| RunId::new()).collect();
        let distinct: HashSet<&RunId> = fresh.iter().collect();
        assert_eq!(distinct.len(), fresh.len());
    }

    #[test]
    fn run_ids_parse_serialize_and_reject_what_is_not_ref_safe() {
        for ok in [
            "20261130-160512-a3f9",
            "20261130-160512-042-9f3a6c1e0b7d2254",
            "last",
        ] {
            let id: RunId = ok.parse().unwrap();
            assert_eq!(id.to_string(), ok);
            assert_eq!(String::from(id.clone()), ok);
            let json = serde_json::to_string(&id).unwrap();
            assert_eq!(json, format!("\"{ok}\""));
            assert_eq!(serde_json::from_str::<RunId>(&json).unwrap(), id);
        }
        let long = "a".repeat(RUN_ID_MAX_LEN + 1);
        for bad in ["", "../x", "a/b", "-x", "a b", "a.b", "a\\b", long.as_str()] {
            let err = bad.parse::<RunId>().unwrap_err();
            assert!(err.to_string().contains(&format!("`{bad}`")), "{err}");
            assert!(
                serde_json::from_str::<RunId>(&format!("{:?}", bad)).is_err(),
                "{bad}"
            );
        }
    }
}
