//! Reading a run while it happens: its stages with status, turns, tokens,
//! cost and the call each running stage is in, from `state.json` and the
//! stages' `actions.jsonl`, for `orch log --follow`, `orch watch`, `orch
//! show` and `orch ui`. A plain synchronous API: callers poll.
//!
//! Invariants:
//! - Only reads. The run process does no extra work for a reader: it writes
//!   its record as it always does (the state at stage boundaries, one whole
//!   line per log append), and a reader takes what is on disk.
//! - Action logs are read incrementally ([`LineTail`]): each poll reads the
//!   bytes appended since the last one, and only complete lines (a line
//!   being written is kept until its `\n` arrives). A log that does not
//!   exist yet is simply empty; logs are never truncated (append-only), so
//!   a log found shorter than what was read is read on from its new end.
//! - `state.json` is re-read only when it was replaced (it is written by
//!   rename, so a reader never sees half of one).
//! - The state has a running stage's turns and tokens only when the stage
//!   ends; until then they come from its log (every `response` since its
//!   last `stage_start`), priced with the run's price table (a reported
//!   cost is taken as it is).
//!
//! Typical use:
//!
//! ```ignore
//! let mut watch = RunWatch::open(&root, live::prices_for(&state))?;
//! loop {
//!     for (stage, lines) in watch.poll()? { /* new lines */ }
//!     let view = watch.view();           // what to draw
//!     if watch.ended() { break watch.exit_code(); }
//!     std::thread::sleep(live::POLL_INTERVAL);
//! }
//! ```

use super::dir::RunDir;
use super::error::{RecordError, io_err};
use super::event::{self, ActionEvent, Logged};
use super::lock::run_is_live;
use super::state::{RunState, RunStatus, StageStatus, TokenCount};
use crate::llm::price::PriceTable;
use serde::Serialize;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// How long a follower waits between two polls of a live run: short enough
/// that a turn shows at once to a person, long enough that following costs
/// next to nothing (a poll of an idle run is a lock query and a few
/// `stat`s; see docs/performance.md, "Following a run").
pub(crate) const POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// Longest text of a call's arguments kept in [`Activity::Tool`].
const ARGS_CHARS: usize = 80;

/// The complete lines appended to one file since the last read.
#[derive(Debug)]
pub(crate) struct LineTail {
    path: PathBuf,
    /// Bytes consumed so far (complete lines and the partial tail).
    offset: u64,
    /// The start of a line whose `\n` has not been written yet.
    partial: Vec<u8>,
}

impl LineTail {
    /// A tail of `path` from its start (the file need not exist yet).
    pub(crate) fn new(path: PathBuf) -> LineTail {
        LineTail {
            path,
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// The complete lines appended since the last call, without their
    /// `\n` (empty lines skipped); none when the file does not exist yet.
    /// A last line without its `\n` is kept for the next call.
    pub(crate) fn read_new(&mut self) -> Result<Vec<String>, RecordError> {
        // A `stat` first: a log that did not grow (most of them, most of
        // the time) costs one system call, not an open, fstat and close.
        let len = match std::fs::metadata(&self.path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&self.path)(e)),
        };
        if len < self.offset {
            // Never happens to an append-only log; read on from its end
            // rather than show lines twice.
            tracing::debug!(path = %self.path.display(), "a followed log got shorter");
            self.offset = len;
            self.partial.clear();
            return Ok(Vec::new());
        }
        if len == self.offset {
            return Ok(Vec::new());
        }
        let mut file = std::fs::File::open(&self.path).map_err(io_err(&self.path))?;
        // Read up to the length seen: a line appended meanwhile waits for
        // the next call.
        file.seek(SeekFrom::Start(self.offset))
            .map_err(io_err(&self.path))?;
        let mut buf = std::mem::take(&mut self.partial);
        let start = buf.len();
        (&mut file)
            .take(len - self.offset)
            .read_to_end(&mut buf)
            .map_err(io_err(&self.path))?;
        self.offset += (buf.len() - start) as u64;
        let complete = match buf.iter().rposition(|&b| b == b'\n') {
            Some(i) => i + 1,
            None => {
                self.partial = buf;
                return Ok(Vec::new());
            }
        };
        self.partial = buf.split_off(complete);
        Ok(String::from_utf8_lossy(&buf)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect())
    }
}

/// What a running stage is doing now, as its log says.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Activity {
    /// The attempt started; no model request yet (lane, setup, prompts).
    Starting,
    /// A request of model turn `turn` is out; no answer yet.
    Model {
        /// The turn asked.
        turn: u32,
    },
    /// A tool call of turn `turn` whose result is not logged yet.
    Tool {
        /// The turn whose answer made the call.
        turn: u32,
        /// The tool (`bash`, `edit_file`, …).
        name: String,
        /// Its arguments on one line, capped.
        arguments: String,
    },
    /// Between a turn's results and the next request (or verify, commit).
    Working,
    /// The agent ended; the stage is being settled (verify, commit).
    Finishing,
}

impl Activity {
    /// A short phrase for people: `model turn 2`, `bash {"command":…}`.
    pub(crate) fn label(&self) -> String {
        match self {
            Activity::Starting => "starting".to_owned(),
            Activity::Model { turn } => format!("model turn {turn}"),
            Activity::Tool {
                name, arguments, ..
            } => format!("{name} {arguments}"),
            Activity::Working => "working".to_owned(),
            Activity::Finishing => "finishing".to_owned(),
        }
    }
}

/// One stage as it stands.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct StageView {
    /// Stage id.
    pub id: String,
    /// Role name.
    pub role: String,
    /// Status (a running stage of a run no process drives: `pending`).
    pub status: StageStatus,
    /// Model turns of the current (or recorded) attempt.
    pub turns: u32,
    /// Its tokens.
    pub tokens: TokenCount,
    /// Its cost in USD; `None` when the model's price is unknown.
    pub cost_usd: Option<f64>,
    /// The model it asks, when known.
    pub model: Option<String>,
    /// What it is doing now (only while it runs).
    pub activity: Option<Activity>,
    /// How its agent's last loop ended (`Finished`, `ModelError`,
    /// `ToolFault`, …), when its log says.
    pub agent_end: Option<String>,
}

/// A run as it stands.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RunView {
    /// The run id.
    pub run_id: String,
    /// Pipeline name.
    pub pipeline: String,
    /// Status as shown: `running` only while a live process drives the run
    /// (else a run that claims to be running is `interrupted`).
    pub status: RunStatus,
    /// Whether a live process holds the run's lock.
    pub live: bool,
    /// Stages in plan order.
    pub stages: Vec<StageView>,
    /// Tokens of every stage (earlier attempts included).
    pub tokens: TokenCount,
    /// Cost of every stage (earlier attempts included); `None` when a
    /// price is unknown.
    pub cost_usd: Option<f64>,
}

impl RunView {
    /// One stage's view.
    // For the views (`orch ui`) and the tests; the CLI walks every stage.
    #[allow(dead_code)]
    pub(crate) fn stage(&self, id: &str) -> Option<&StageView> {
        self.stages.iter().find(|s| s.id == id)
    }
}

/// What one stage's log said so far about its current attempt.
#[derive(Debug, Clone, Default)]
struct Attempt {
    started: bool,
    turns: u32,
    tokens: TokenCount,
    /// `None` once a response could not be priced.
    cost_usd: Option<f64>,
    model: Option<String>,
    activity: Option<Activity>,
    /// Calls of the last response not answered by a `tool` event yet.
    pending: Vec<event::LoggedCall>,
    pending_turn: u32,
    agent_end: Option<String>,
}

impl Attempt {
    fn next_call(&mut self) {
        self.activity = Some(match self.pending.first() {
            Some(c) => Activity::Tool {
                turn: self.pending_turn,
                name: c.name.clone(),
                arguments: crate::text::cap_bytes(
                    &c.arguments.split_whitespace().collect::<Vec<_>>().join(" "),
                    ARGS_CHARS,
                ),
            },
            None => Activity::Working,
        });
    }

    /// Folds one event of the stage's log in.
    fn apply(&mut self, ev: &ActionEvent, fallback_model: &str, prices: &PriceTable) {
        match ev {
            ActionEvent::StageStart(s) => {
                *self = Attempt {
                    started: true,
                    cost_usd: Some(0.0),
                    model: Some(s.model.clone()).filter(|m| !m.is_empty()),
                    activity: Some(Activity::Starting),
                    ..Attempt::default()
                };
            }
            ActionEvent::Request(r) => self.activity = Some(Activity::Model { turn: r.turn }),
            ActionEvent::Response(r) => {
                let tokens = TokenCount {
                    prompt: r.prompt_tokens,
                    completion: r.completion_tokens,
                    cache_read: r.cache_read_tokens,
                    cache_write: r.cache_write_tokens,
                };
                self.turns += 1;
                self.tokens.add(tokens);
                let model = self.model.as_deref().unwrap_or(fallback_model);
                let cost = r.cost_usd.or_else(|| {
                    crate::llm::price::cost_usd(model, &crate::llm::Usage::of(tokens), prices)
                });
                self.cost_usd = match (self.cost_usd, cost) {
                    (Some(a), Some(b)) => Some(a + b),
                    _ => None,
                };
                self.pending = r.tool_calls.clone();
                self.pending_turn = r.turn;
                self.next_call();
            }
            ActionEvent::ToolCallsRecovered(r) => {
                self.pending = r.tool_calls.clone();
                self.pending_turn = r.turn;
                self.next_call();
            }
            ActionEvent::Tool(t) => {
                self.pending.retain(|c| c.id != t.call_id);
                self.next_call();
            }
            ActionEvent::AgentEnd(e) => {
                self.agent_end = Some(e.end.clone());
                self.pending.clear();
                self.activity = Some(Activity::Finishing);
            }
            ActionEvent::StageEnd(_) => {
                self.pending.clear();
                self.activity = None;
            }
            // The other events change no count and no activity.
            _ => {}
        }
    }
}

/// One stage's log being followed.
#[derive(Debug)]
struct StageTail {
    id: String,
    tail: LineTail,
    attempt: Attempt,
}

/// A run being followed: its state and every stage's log, read
/// incrementally by [`RunWatch::poll`].
#[derive(Debug)]
pub(crate) struct RunWatch {
    root: PathBuf,
    prices: PriceTable,
    state: RunState,
    /// What identifies the `state.json` read last (it is replaced by rename).
    state_stamp: Option<(u64, std::time::SystemTime, u64)>,
    stages: Vec<StageTail>,
    live: bool,
}

/// The inode, mtime and length of a file, to notice it was replaced.
fn stamp(path: &Path) -> Option<(u64, std::time::SystemTime, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.modified().ok()?, m.len()))
}

impl RunWatch {
    /// Opens the run whose record is at `root` (`<common>/orch/runs/<id>`);
    /// `prices` prices a running stage's turns (the run's price table:
    /// built-in plus `orch.toml`). No log is read yet: the first
    /// [`RunWatch::poll`] returns every line logged so far.
    pub(crate) fn open(root: &Path, prices: PriceTable) -> Result<RunWatch, RecordError> {
        let live = run_is_live(root);
        let dir = RunDir::at(root.to_path_buf());
        let state_stamp = stamp(&dir.state_path());
        let state = dir.read_state()?;
        let mut watch = RunWatch {
            root: root.to_path_buf(),
            prices,
            state,
            state_stamp,
            stages: Vec::new(),
            live,
        };
        watch.add_stages();
        Ok(watch)
    }

    /// A tail for every stage of the state that has none yet.
    fn add_stages(&mut self) {
        for rec in &self.state.stages {
            if self.stages.iter().all(|s| s.id != rec.id) {
                let path = self.root.join("stages").join(&rec.id).join("actions.jsonl");
                self.stages.push(StageTail {
                    id: rec.id.clone(),
                    tail: LineTail::new(path),
                    attempt: Attempt::default(),
                });
            }
        }
    }

    /// Reads what changed since the last poll: whether a live process
    /// still drives the run, a replaced `state.json`, and the lines
    /// appended to each stage's log. Returns the new lines per stage, in
    /// plan order (a stage with none is left out). Liveness is asked first,
    /// so once [`RunWatch::ended`] is true the lines returned are the last.
    pub(crate) fn poll(&mut self) -> Result<Vec<(String, Vec<String>)>, RecordError> {
        self.live = run_is_live(&self.root);
        let path = self.root.join("state.json");
        let now = stamp(&path);
        if now != self.state_stamp {
            self.state = RunDir::at(self.root.clone()).read_state()?;
            self.state_stamp = now;
            self.add_stages();
        }
        let fallback = self.state.model.clone();
        let mut out = Vec::new();
        for st in &mut self.stages {
            let lines = st.tail.read_new()?;
            if lines.is_empty() {
                continue;
            }
            for line in &lines {
                if let Some(event::LogLine {
                    event: Logged::Known(ev),
                    ..
                }) = event::parse_line(line)
                {
                    st.attempt.apply(&ev, &fallback, &self.prices);
                }
            }
            out.push((st.id.clone(), lines));
        }
        Ok(out)
    }

    /// The state as last read (raw: `running` even when no process drives
    /// the run any more; [`RunWatch::view`] says how it stands).
    pub(crate) fn state(&self) -> &RunState {
        &self.state
    }

    /// Whether the run is over: its state says it ended, or no live process
    /// drives it any more (killed: it is interrupted).
    pub(crate) fn ended(&self) -> bool {
        !self.live || !matches!(self.state.status, RunStatus::Starting | RunStatus::Running)
    }

    /// The run as it stands now (see [`RunView`]).
    pub(crate) fn view(&self) -> RunView {
        let status = match self.state.status {
            RunStatus::Starting | RunStatus::Running if !self.live => RunStatus::Interrupted,
            s => s,
        };
        let mut tokens = TokenCount::default();
        let mut cost = Some(0.0);
        let mut stages = Vec::with_capacity(self.state.stages.len());
        for rec in &self.state.stages {
            let log = self.stages.iter().find(|s| s.id == rec.id);
            let attempt = log.map(|s| &s.attempt).filter(|a| a.started);
            let mut view = StageView {
                id: rec.id.clone(),
                role: rec.role.clone(),
                status: rec.status,
                turns: rec.turns,
                tokens: rec.tokens,
                cost_usd: if rec.turns == 0 {
                    Some(0.0)
                } else {
                    rec.budget.as_ref().and_then(|b| b.used.cost_usd)
                },
                model: rec.model.clone(),
                activity: None,
                agent_end: attempt.and_then(|a| a.agent_end.clone()),
            };
            if rec.status == StageStatus::Running
                && let Some(a) = attempt
            {
                view.turns = a.turns;
                view.tokens = a.tokens;
                view.cost_usd = a.cost_usd;
                view.model = a.model.clone().or(view.model);
                if status == RunStatus::Running {
                    view.activity = a.activity.clone();
                } else {
                    view.status = StageStatus::Pending;
                }
            }
            tokens.add(view.tokens);
            cost = add_cost(cost, view.cost_usd, view.turns);
            for earlier in &rec.attempts {
                tokens.add(earlier.tokens);
                cost = add_cost(cost, earlier.cost_usd, earlier.turns);
            }
            stages.push(view);
        }
        RunView {
            run_id: self.state.run_id.to_string(),
            pipeline: self.state.pipeline.clone(),
            status,
            live: self.live,
            stages,
            tokens,
            cost_usd: cost.map(|c| c + 0.0),
        }
    }

    /// The exit code `orch run` gave (or will give) this run, once it
    /// ended ([`exit_code`]); `None` while it runs.
    pub(crate) fn exit_code(&self) -> Option<i32> {
        self.ended().then(|| exit_code(&self.view()))
    }
}

/// A sum of costs that stays `None` once one that counts is unknown (an
/// attempt without turns costs nothing, priced or not).
fn add_cost(sum: Option<f64>, cost: Option<f64>, turns: u32) -> Option<f64> {
    if turns == 0 {
        return sum;
    }
    Some(sum? + cost?)
}

/// The exit code of an ended run, as `orch run` maps its outcome
/// (src/cli/summary.rs, README "Exit codes"): 0 succeeded, 10 succeeded
/// with an optional stage not done, 130 interrupted (also a run no live
/// process drives any more), and for a failed run 5 when a stage's agent
/// ended on orch's own fault, 3 when on the model's, else 1. A running run
/// is not ended: it maps to 1 only if asked.
pub(crate) fn exit_code(view: &RunView) -> i32 {
    let ended = |end: &str| {
        view.stages
            .iter()
            .filter(|s| s.status == StageStatus::Failed)
            .any(|s| s.agent_end.as_deref() == Some(end))
    };
    match view.status {
        RunStatus::Succeeded
            if view
                .stages
                .iter()
                .any(|s| s.status == StageStatus::NoChange) =>
        {
            crate::exit::OPTIONAL_NOT_DONE
        }
        RunStatus::Succeeded | RunStatus::RolledBack => crate::exit::OK,
        RunStatus::Interrupted => crate::exit::INTERRUPTED,
        _ if ended("ToolFault") => crate::exit::INTERNAL,
        _ if ended("ModelError") => crate::exit::MODEL,
        _ => crate::exit::STAGE_FAILED,
    }
}

/// The prices a run's costs are counted with: the built-in table and the
/// `[prices]` of `orch.toml` (the run's repository's and the user's, and
/// its profile's), as the run itself priced its turns. A configuration
/// that does not load leaves the built-in table: a reader does not fail
/// on it.
pub(crate) fn prices_for(state: &RunState) -> PriceTable {
    let overrides = crate::config::Overrides {
        profile: state.settings.as_ref().and_then(|s| s.profile.clone()),
        ..Default::default()
    };
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let user_dir = crate::dirs::user_config_dir();
    match crate::config::resolve(
        &overrides,
        Some(Path::new(&state.repo)),
        user_dir.as_deref(),
        &env,
    ) {
        Ok(resolved) => resolved.prices,
        Err(e) => {
            tracing::debug!("prices from the built-in table only: {e}");
            PriceTable::builtin()
        }
    }
}

/// The run at `root` as it stands, read once (every log from its start).
pub(crate) fn read_run(root: &Path, prices: PriceTable) -> Result<RunView, RecordError> {
    let mut watch = RunWatch::open(root, prices)?;
    watch.poll()?;
    Ok(watch.view())
}

#[cfg(test)]
mod tests;
