//! A stage's end of the run's control channel ([`ControlChannel`]): what
//! [`super::approval`] needs to ask through it, and the queue of events
//! its asks leave for the agent loop to log. A leaf of `tools` (the tool
//! context holds one).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use crate::runlog::ActionEvent;
use crate::runlog::control::AskVia;

/// A stage's end of the run's control channel: where its asks are written
/// and its guidance read ([`crate::agent`]), and the events its asks leave
/// for the agent loop to log (the loop owns the action log; it drains
/// [`ControlChannel::take_events`] while a call waits).
#[derive(Debug)]
pub(crate) struct ControlChannel {
    /// The run's record directory (`.git/orch/runs/<run>`).
    pub(super) run_dir: PathBuf,
    /// The stage whose calls ask.
    pub(super) stage: String,
    /// Whether a non-interactive run waits for a control answer.
    pub(super) via: AskVia,
    /// How long a call waits before it is denied; `None`: until the
    /// stage's time budget runs out (or forever without one).
    pub(super) timeout: Option<Duration>,
    events: Mutex<Vec<ActionEvent>>,
    notify: tokio::sync::Notify,
}

impl ControlChannel {
    /// The channel of `stage` in the run recorded at `run_dir`.
    pub(crate) fn new(
        run_dir: PathBuf,
        stage: &str,
        via: AskVia,
        timeout: Option<Duration>,
    ) -> ControlChannel {
        ControlChannel {
            run_dir,
            stage: stage.to_owned(),
            via,
            timeout,
            events: Mutex::new(Vec::new()),
            notify: tokio::sync::Notify::new(),
        }
    }

    /// The run's record directory.
    pub(crate) fn run_dir(&self) -> &std::path::Path {
        &self.run_dir
    }

    /// The stage this channel serves.
    pub(crate) fn stage(&self) -> &str {
        &self.stage
    }

    /// The events asks left since the last call, in order.
    pub(crate) fn take_events(&self) -> Vec<ActionEvent> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Ready when [`Self::take_events`] has something (a permit is kept
    /// when nobody waits, so no event is missed).
    pub(crate) async fn has_events(&self) {
        self.notify.notified().await;
    }

    pub(super) fn push(&self, event: ActionEvent) {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event);
        self.notify.notify_one();
    }
}
