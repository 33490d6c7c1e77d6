//! The append-only JSONL action log of one stage.
//!
//! Every event is one line written with a single `write_all` on a file opened
//! for appending, so a crash leaves at most one torn final line and never
//! rewrites earlier ones. Known secrets are redacted before anything is
//! written.

use super::error::RecordError;
use super::event::ActionEvent;
use crate::secrets::redact;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// An open action log.
#[derive(Debug)]
pub(crate) struct ActionLog {
    file: File,
    path: PathBuf,
    started: Instant,
    secrets: Vec<String>,
    /// The event stream's view of this log (`--events`); `None` when off.
    events: Option<Box<dyn ActionObserver>>,
}

/// Told every event an [`ActionLog`] appends, before it is written (the
/// public event stream derives its events from them). Defined here and
/// implemented by `events::StageEvents`, so the run record does not import
/// the event stream.
pub(crate) trait ActionObserver: std::fmt::Debug + Send + Sync {
    /// One appended event and the log's own secrets (the event is not
    /// redacted yet).
    fn action(&self, event: &ActionEvent, secrets: &[String]);
}

impl ActionLog {
    /// Opens (creating or appending to) the log at `path`. Values in `secrets`
    /// are replaced by `[REDACTED]` in every event.
    pub(crate) fn open(path: &Path, secrets: Vec<String>) -> Result<ActionLog, RecordError> {
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
            secrets: secrets
                .into_iter()
                .filter(|s| s.len() >= crate::secrets::MIN_SECRET_LEN)
                .collect(),
            events: None,
        })
    }

    /// Also tells `events` (the `--events` stream) what this log records.
    pub(crate) fn with_events(
        mut self,
        events: Option<impl ActionObserver + 'static>,
    ) -> ActionLog {
        self.events = events.map(|e| Box::new(e) as Box<dyn ActionObserver>);
        self
    }

    /// Appends one event: its fields with `event` (its name), `ts` and
    /// `elapsed_ms`, as one line ([`ActionEvent::to_line`]).
    pub(crate) fn append(&mut self, event: &ActionEvent) -> Result<(), RecordError> {
        let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let elapsed_ms = self.started.elapsed().as_millis() as u64;
        let obj = event
            .to_line(&ts, elapsed_ms)
            .map_err(|e| RecordError::Io {
                path: self.path.clone(),
                source: e.into(),
            })?;
        if let Some(events) = &self.events {
            events.action(event, &self.secrets);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runlog::event;
    use serde_json::{Value, json};

    #[test]
    fn appends_whole_lines_and_redacts() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a.jsonl");
        let mut log = ActionLog::open(&p, vec!["sk-secret-123".into()]).unwrap();
        let request = ActionEvent::Request(event::Request {
            turn: 1,
            messages: 2,
            approx_bytes: 3,
            ..Default::default()
        });
        log.append(&request).unwrap();
        log.append(&ActionEvent::MemoryUses(event::MemoryUses {
            error: "key sk-secret-123 rejected".into(),
        }))
        .unwrap();
        drop(log);
        let mut log = ActionLog::open(&p, vec![]).unwrap();
        log.append(&request).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["event"], "request");
        assert_eq!(lines[0]["messages"], 2);
        assert!(!text.contains("sk-secret-123"));
        assert!(text.contains("[REDACTED]"));
    }

    #[test]
    fn redacts_escaped_and_cut_secrets() {
        let secrets = vec!["pa\"ss\\word-1".to_owned(), "sk-abcdefgh".to_owned()];
        let json = serde_json::to_string(&json!({"x": "pa\"ss\\word-1"})).unwrap();
        assert!(
            !json.contains(secrets[0].as_str()),
            "escaped in JSON: {json}"
        );
        let red = redact(&json, &secrets);
        assert_eq!(red, r#"{"x":"[REDACTED]"}"#);

        let capped = crate::text::cap_bytes(&format!("{}sk-abcdefgh", "x".repeat(10)), 16);
        assert!(capped.contains("sk-abc[… "), "{capped}");
        let red = redact(&capped, &secrets);
        assert!(!red.contains("sk-abc"), "{red}");
        assert!(red.contains("[REDACTED][… "), "{red}");
        // A short stub is left alone, and so is text without a marker.
        assert_eq!(
            redact("sk-[… 3 more bytes …]", &secrets),
            "sk-[… 3 more bytes …]"
        );
        assert_eq!(redact("sk-abcdefg", &secrets), "sk-abcdefg");
    }
}
