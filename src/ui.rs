//! Everything orch shows a person on stderr: progress bars on a terminal,
//! plain status lines otherwise; and, with `--events`, the same moments as
//! machine events on stdout ([`crate::events`]). Library code never prints elsewhere; stdout
//! is reserved for results and is written only by the CLI layer.
//!
//! Invariants: styled output (ANSI colour, in the `tracing` logs) is used only
//! when the stream is a terminal and `NO_COLOR` is unset ([`color_allowed`]);
//! a closed or failing stderr never ends the program ([`status_line`]).

// Stderr is written through `status_line`, which cannot panic.
#![deny(clippy::print_stdout, clippy::print_stderr)]

use crate::events::{Events, StageEvents};
use crate::runlog::{RunState, StageRecord, TokenCount};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The progress reporter of one command.
pub struct Ui {
    bars: Option<MultiProgress>,
    running: Arc<Mutex<HashMap<String, ProgressBar>>>,
    quiet: bool,
    events: Events,
}

impl Ui {
    /// Bars when stderr is a terminal, plain lines otherwise; nothing when `quiet`.
    pub fn new(quiet: bool) -> Ui {
        let bars = (!quiet && std::io::stderr().is_terminal()).then(MultiProgress::new);
        Ui {
            bars,
            running: Arc::new(Mutex::new(HashMap::new())),
            quiet,
            events: Events::off(),
        }
    }

    /// Also reports run and stage starts and ends (and, through the
    /// progress handles, each stage's action log) to `events`.
    pub fn with_events(mut self, events: Events) -> Ui {
        self.events = events;
        self
    }

    /// A status line (above the bars on a terminal).
    pub fn line(&self, msg: &str) {
        if self.quiet {
            return;
        }
        match &self.bars {
            Some(b) => {
                let _ = b.println(crate::text::untrusted(msg));
            }
            None => status_line(msg),
        }
    }

    /// A printer of status lines for other threads: above the bars on a
    /// terminal (so a line printed mid-run does not garble them), plain
    /// lines otherwise.
    pub fn printer(&self) -> LinePrinter {
        LinePrinter {
            bars: self.bars.clone(),
        }
    }

    /// A run has been created.
    pub fn run_started(&self, state: &RunState) {
        self.events.run_started(state);
        self.line(&format!(
            "orch: run {} ({}) — model: {}",
            state.run_id, state.pipeline, state.model_label
        ));
    }

    /// A stage's agent starts.
    pub fn stage_started(&self, id: &str, role: &str) {
        self.events.stage_started(id, role);
        match &self.bars {
            Some(b) if !self.quiet => {
                let bar = b.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("{spinner} {prefix:12} {msg} {elapsed}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.set_prefix(id.to_owned());
                bar.set_message(format!("{role}: starting"));
                bar.enable_steady_tick(Duration::from_millis(120));
                if let Ok(mut r) = self.running.lock() {
                    r.insert(id.to_owned(), bar);
                }
            }
            _ => self.line(&format!("orch: stage {id} ({role}) started")),
        }
    }

    /// A handle stage tasks use to report their turns.
    pub fn progress_handle(&self) -> ProgressHandle {
        ProgressHandle {
            running: Arc::clone(&self.running),
            events: self.events.clone(),
        }
    }

    /// A stage ended (succeeded or failed).
    pub fn stage_finished(&self, rec: &StageRecord) {
        self.events.stage_finished(rec);
        if let Ok(mut r) = self.running.lock()
            && let Some(bar) = r.remove(&rec.id)
        {
            bar.finish_and_clear();
        }
        let verdict = rec
            .verdict
            .map(|v| format!(", verdict {v}"))
            .unwrap_or_default();
        let reason = rec
            .reason
            .as_deref()
            .map(|r| format!(" — {r}"))
            .unwrap_or_default();
        self.line(&format!(
            "orch: stage {} ({}) {} in {:.1}s, {}, {}{verdict}{reason}",
            rec.id,
            rec.role,
            rec.status.as_str(),
            rec.duration_ms as f64 / 1000.0,
            crate::text::plural(u64::from(rec.turns), "turn", "turns"),
            crate::text::plural(rec.tokens.total(), "token", "tokens"),
        ));
    }

    /// A stage was skipped.
    pub fn stage_skipped(&self, rec: &StageRecord) {
        self.events.stage_skipped(rec);
        self.line(&format!(
            "orch: stage {} skipped — {}",
            rec.id,
            rec.reason.as_deref().unwrap_or("")
        ));
    }

    /// The run ended.
    pub fn run_finished(&self, state: &RunState) {
        self.events.run_ended(state);
        self.line(&format!(
            "orch: run {} {}",
            state.run_id,
            state.status.as_str()
        ));
    }
}

/// Prints status lines from any thread the way [`Ui::line`] does (cheap to
/// clone; made by [`Ui::printer`]).
#[derive(Clone)]
pub struct LinePrinter {
    bars: Option<MultiProgress>,
}

impl LinePrinter {
    /// One status line, above the bars when there are bars.
    pub fn line(&self, msg: &str) {
        match &self.bars {
            Some(b) => {
                let _ = b.println(crate::text::untrusted(msg));
            }
            None => status_line(msg),
        }
    }
}

/// Whether styled output may go to a stream: only to a terminal, and never
/// when `NO_COLOR` is set to a non-empty value (<https://no-color.org>).
pub fn color_allowed(is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    is_terminal && no_color.is_none_or(OsStr::is_empty)
}

/// [`color_allowed`] for this process's stderr and environment.
pub fn stderr_color() -> bool {
    color_allowed(
        std::io::stderr().is_terminal(),
        crate::environment::current().var_os(crate::environment::NO_COLOR),
    )
}

/// Writes one line to stderr. A failed write is dropped: a status line is
/// never worth a panic (`eprintln!` panics when stderr is a closed pipe).
/// Status lines quote text from models, forges and files (reasons, titles),
/// so control characters are shown as escapes ([`crate::text::untrusted`]).
pub fn status_line(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{}", crate::text::untrusted(msg));
}

/// Reports a running stage's turns to its progress line (cheap to clone,
/// usable from stage tasks).
#[derive(Clone)]
pub struct ProgressHandle {
    running: Arc<Mutex<HashMap<String, ProgressBar>>>,
    events: Events,
}

impl ProgressHandle {
    /// The event stream of stage `id`'s action log; `None` when off.
    pub(crate) fn stage_events(&self, id: &str) -> Option<StageEvents> {
        self.events.for_stage(id)
    }

    /// Characters of the model's reply streamed so far in the current turn.
    pub fn streaming(&self, id: &str, chars: usize) {
        if let Ok(r) = self.running.lock()
            && let Some(bar) = r.get(id)
        {
            bar.set_message(format!("streaming… {chars} chars"));
        }
    }

    /// A model turn of a stage completed.
    pub fn turn(&self, id: &str, turn: u32, tokens: TokenCount) {
        if let Ok(r) = self.running.lock()
            && let Some(bar) = r.get(id)
        {
            bar.set_message(format!("turn {turn}, {} tokens", tokens.total()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(color_allowed(true, None));
        assert!(
            color_allowed(true, Some(OsStr::new(""))),
            "empty NO_COLOR is unset"
        );
        assert!(!color_allowed(true, Some(OsStr::new("1"))));
        assert!(!color_allowed(false, None));
        assert!(!color_allowed(false, Some(OsStr::new("1"))));
    }
}
