//! Asking for approval: a `bash` command or MCP call that a role's `ask`
//! rule names runs only once someone allows it.
//!
//! Who can answer: with `--yes`, nobody is asked (allowed). Otherwise, when
//! the stage has an [`ControlChannel`] (a run with a record, on a terminal or
//! with `--ask-via control`), the call is written as a pending ask under
//! the run's `control/` directory ([`crate::runlog::control`]) and waits
//! for the first answer: the terminal's (`[y/N]` on `/dev/tty`, when one is
//! attached), an answer file (`orch answer`, `orch ui`), or the run's own
//! denial when `--ask-timeout` passes. Without a channel a terminal is
//! asked directly; without either the call is denied at once — so a run in
//! CI never hangs waiting.
//!
//! Invariants: the answer file is the one arbiter (its first writer wins,
//! the terminal included), so a call never runs on one answer while the
//! log records another. A wait dropped before its answer (the stage's time
//! budget ran out, the run was interrupted) settles the ask as denied on
//! its way out, so `orch answer` never answers a call nobody waits for.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::context::ToolContext;
use crate::runlog::control::{self, AskVia};
use crate::runlog::{ActionEvent, event};
use crate::text::cap_bytes;

/// How often a waiting call looks for its answer file.
pub(crate) const ANSWER_POLL: Duration = Duration::from_millis(100);

/// How often the terminal prompt checks whether the ask was answered
/// elsewhere (and stops reading).
const TTY_POLL: Duration = Duration::from_millis(200);

/// Cap on the command an `ask` event copies into the log.
const LOGGED_COMMAND_BYTES: usize = 1024;

/// One prompt at a time: concurrent stages must not interleave questions.
static PROMPT: Mutex<()> = Mutex::new(());

/// A stage's end of the run's control channel: where its asks are written
/// and its guidance read ([`crate::agent`]), and the events its asks leave
/// for the agent loop to log (the loop owns the action log; it drains
/// [`ControlChannel::take_events`] while a call waits).
#[derive(Debug)]
pub(crate) struct ControlChannel {
    /// The run's record directory (`.git/orch/runs/<run>`).
    run_dir: PathBuf,
    /// The stage whose calls ask.
    stage: String,
    /// Whether a non-interactive run waits for a control answer.
    via: AskVia,
    /// How long a call waits before it is denied; `None`: until the
    /// stage's time budget runs out (or forever without one).
    timeout: Option<Duration>,
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

    fn push(&self, event: ActionEvent) {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event);
        self.notify.notify_one();
    }
}

/// How an ask came out: `Ok(label)` (the call runs; the label is its
/// `policy` in the log) or `Err(reason)` (denied; the model is told).
pub(crate) type Approval = Result<String, String>;

/// Asks whether `tool` may run `command` (`why`: the rule that asks).
pub(crate) async fn ask(ctx: &ToolContext, tool: &str, command: &str, why: &str) -> Approval {
    if ctx.policy.assume_yes {
        return Ok(format!("allow (--yes): {why}"));
    }
    let tty = ctx.policy.interactive;
    match &ctx.control {
        Some(channel) if tty || channel.via == AskVia::Control => {
            through_control(channel, tty, tool, command, why).await
        }
        _ if tty => {
            if ask_terminal(command, None).await == Some(true) {
                Ok(format!("allow (approved by the user): {why}"))
            } else {
                Err(format!("{why}; the user declined"))
            }
        }
        _ => Err(format!(
            "{why}: needs approval and no terminal is attached; re-run with --yes to allow (or --ask-via control to answer with `orch answer`)"
        )),
    }
}

/// Writes the pending ask and waits for its first answer.
async fn through_control(
    channel: &Arc<ControlChannel>,
    tty: bool,
    tool: &str,
    command: &str,
    why: &str,
) -> Approval {
    let started = Instant::now();
    let expires = channel.timeout.map(|t| {
        let at = chrono::Utc::now() + chrono::Duration::from_std(t).unwrap_or_default();
        at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    });
    let run_dir = &channel.run_dir;
    let posted = control::post_ask(run_dir, &channel.stage, tool, command, why, expires.clone());
    let ask = match posted {
        Ok(ask) => ask,
        Err(e) => {
            // The question cannot be put: denied, never hung.
            return Err(format!(
                "{why}: needs approval and orch could not ask: failed to {e}"
            ));
        }
    };
    channel.push(ActionEvent::Ask(event::Ask {
        id: ask.id.clone(),
        tool: tool.to_owned(),
        command: cap_bytes(command, LOGGED_COMMAND_BYTES),
        why: why.to_owned(),
        via: if tty { "terminal+control" } else { "control" }.to_owned(),
        expires,
        ..Default::default()
    }));
    crate::ui::status_line(&format!(
        "orch: stage `{}` waits for approval of {tool} `{}` ({why}): `orch answer {} {} --allow` or `--deny`",
        channel.stage,
        crate::text::one_line(command, 60),
        run_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        ask.id
    ));
    let mut pending = Pending {
        channel: Arc::clone(channel),
        id: ask.id.clone(),
        started,
        settled: false,
    };
    let terminal = tty.then(|| {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(answer_from_terminal(
            Arc::clone(channel),
            ask.id.clone(),
            command.to_owned(),
            Arc::clone(&stop),
        ));
        StopOnDrop { stop, _task: task }
    });
    let answer = loop {
        if let Some(answer) = control::read_answer(run_dir, &ask.id) {
            break answer;
        }
        if let Some(t) = channel.timeout
            && started.elapsed() >= t
        {
            let reason = format!("no answer within {}s (--ask-timeout)", t.as_secs_f64());
            match control::settle_ask(run_dir, &ask.id, false, "orch", Some(reason.clone())) {
                Ok(answer) => break answer,
                Err(e) => break denied_by_orch(&ask.id, format!("{reason}; failed to {e}")),
            }
        }
        tokio::time::sleep(ANSWER_POLL).await;
    };
    drop(terminal);
    pending.settled = true;
    channel.push(answered(&answer, started));
    if answer.allow {
        Ok(format!("allow (approved by {}): {why}", answer.by))
    } else {
        let how = match &answer.reason {
            Some(r) => format!("denied by {}: {r}", answer.by),
            None => format!("denied by {}", answer.by),
        };
        Err(format!(
            "{why}; the user was asked (ask {}) and it was {how}",
            ask.id
        ))
    }
}

/// An answer orch gives itself when it cannot even write one.
fn denied_by_orch(id: &str, reason: String) -> control::AskAnswer {
    control::AskAnswer {
        id: id.to_owned(),
        allow: false,
        by: "orch".to_owned(),
        at: String::new(),
        reason: Some(reason),
    }
}

/// The `ask_answer` event of `answer`.
fn answered(answer: &control::AskAnswer, started: Instant) -> ActionEvent {
    ActionEvent::AskAnswer(event::AskAnswer {
        id: answer.id.clone(),
        allow: answer.allow,
        by: answer.by.clone(),
        reason: answer.reason.clone(),
        waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        ..Default::default()
    })
}

/// An ask being waited for: settled as denied if the wait is dropped first.
struct Pending {
    channel: Arc<ControlChannel>,
    id: String,
    started: Instant,
    settled: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let reason = "the stage stopped before an answer (its time budget ran out, or the run was interrupted)";
        let answer = control::settle_ask(
            &self.channel.run_dir,
            &self.id,
            false,
            "orch",
            Some(reason.to_owned()),
        )
        .unwrap_or_else(|e| denied_by_orch(&self.id, format!("{reason}; failed to {e}")));
        self.channel.push(answered(&answer, self.started));
    }
}

/// Stops the terminal prompt when the wait ends (answered elsewhere, or
/// dropped).
struct StopOnDrop {
    stop: Arc<AtomicBool>,
    _task: tokio::task::JoinHandle<()>,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Asks on the terminal and writes what the user typed as the ask's answer
/// (`by: terminal`); gives up when `stop` is set.
async fn answer_from_terminal(
    channel: Arc<ControlChannel>,
    id: String,
    command: String,
    stop: Arc<AtomicBool>,
) {
    let Some(allow) = ask_terminal(&command, Some(stop)).await else {
        return;
    };
    if let Err(e) = control::settle_ask(&channel.run_dir, &id, allow, "terminal", None) {
        tracing::warn!("could not record the terminal's answer to ask {id}: {e}");
    }
}

/// Asks on the terminal: prompt on stderr, answer from /dev/tty. `None`
/// when there is no terminal, or `stop` was set before the user answered.
async fn ask_terminal(command: &str, stop: Option<Arc<AtomicBool>>) -> Option<bool> {
    let command = command.to_owned();
    tokio::task::spawn_blocking(move || {
        let _turn = PROMPT.lock().unwrap_or_else(|e| e.into_inner());
        let stopped = || stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst));
        if stopped() {
            return None;
        }
        let tty = std::fs::File::open("/dev/tty").ok()?;
        let mut stderr = std::io::stderr().lock();
        write!(stderr, "orch: allow `{command}`? [y/N] ")
            .and_then(|_| stderr.flush())
            .ok()?;
        drop(stderr);
        // Wait for a line, looking up now and then whether the ask was
        // answered elsewhere.
        loop {
            if stopped() {
                crate::ui::status_line("(answered elsewhere)");
                return None;
            }
            let mut fds = [rustix::event::PollFd::new(
                &tty,
                rustix::event::PollFlags::IN,
            )];
            let timeout = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: i64::try_from(TTY_POLL.as_nanos()).unwrap_or(200_000_000),
            };
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(0) => continue,
                Ok(_) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return None,
            }
        }
        let mut answer = String::new();
        std::io::BufReader::new(tty).read_line(&mut answer).ok()?;
        Some(matches!(
            answer.trim().to_ascii_lowercase().as_str(),
            "y" | "yes"
        ))
    })
    .await
    .ok()
    .flatten()
}
