//! The append-only JSONL action log of one stage.
//!
//! Every event is one line written with a single `write_all` on a file opened
//! for appending, so a crash leaves at most one torn final line and never
//! rewrites earlier ones. Known secrets are redacted before anything is
//! written.

use super::RecordError;
use serde_json::{Value, json};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// An open action log.
#[derive(Debug)]
pub struct ActionLog {
    file: File,
    path: PathBuf,
    started: Instant,
    secrets: Vec<String>,
}

impl ActionLog {
    /// Opens (creating or appending to) the log at `path`. Values in `secrets`
    /// are replaced by `[REDACTED]` in every event.
    pub fn open(path: &Path, secrets: Vec<String>) -> Result<ActionLog, RecordError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| RecordError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(ActionLog {
            file,
            path: path.to_path_buf(),
            started: Instant::now(),
            secrets: secrets.into_iter().filter(|s| s.len() >= 4).collect(),
        })
    }

    /// The log file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one event: `{"ts", "elapsed_ms", "event", …fields}`.
    pub fn append(&mut self, event: &str, fields: Value) -> Result<(), RecordError> {
        let mut obj = json!({
            "ts": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "elapsed_ms": self.started.elapsed().as_millis() as u64,
            "event": event,
        });
        if let (Some(o), Value::Object(extra)) = (obj.as_object_mut(), fields) {
            o.extend(extra);
        }
        let mut line = redact(&obj.to_string(), &self.secrets);
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .map_err(|source| RecordError::Io {
                path: self.path.clone(),
                source,
            })
    }
}

/// Replaces every occurrence of each secret in `text` with `[REDACTED]`.
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_owned();
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), "[REDACTED]");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_whole_lines_and_redacts() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a.jsonl");
        let mut log = ActionLog::open(&p, vec!["sk-secret-123".into()]).unwrap();
        log.append("request", json!({"n": 1})).unwrap();
        log.append("error", json!({"msg": "key sk-secret-123 rejected"}))
            .unwrap();
        drop(log);
        let mut log = ActionLog::open(&p, vec![]).unwrap();
        log.append("again", json!({})).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["event"], "request");
        assert_eq!(lines[0]["n"], 1);
        assert!(!text.contains("sk-secret-123"));
        assert!(text.contains("[REDACTED]"));
    }
}
