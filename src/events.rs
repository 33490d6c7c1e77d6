//! The headless event stream (`--events jsonl`): one JSON object per line on
//! stdout as a run goes, for CI jobs and other programs that follow a run
//! live. The format is a public contract: `docs/events.md` describes it and
//! `docs/events.schema.json` is its schema.
//!
//! Invariants:
//! - Every line is one whole object `{"v": 1, "type", "run_id", "ts", …}`,
//!   written with one `write_all` under the stdout lock and flushed at once,
//!   so concurrent stages never interleave and a consumer sees it live.
//! - Every line is redacted like the action log ([`crate::secrets::redact`]).
//! - Off, an [`Events`] is `None` inside: each hook is one branch, nothing
//!   is allocated.
//! - A closed or failing stdout stops the stream, never the run.
//! - Every `stage_started` is followed by exactly one `stage_finished` for
//!   that stage, and the last line is `run_finished`.

use crate::runlog::{ActionEvent, RunState, StageRecord};
use serde_json::{Map, Value, json};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The version every event carries in `"v"`; it changes only when a field
/// is removed or changes meaning (new fields and types keep it).
pub const EVENTS_VERSION: u32 = 1;

/// Most bytes of a tool result's beginning an event carries (`preview`); the
/// action log and the transcript keep more.
const PREVIEW_BYTES: usize = 240;

/// The formats `--events` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EventFormat {
    /// One JSON object per line.
    Jsonl,
}

/// The event stream of one command: cheap to clone, a no-op when off.
#[derive(Clone, Default)]
pub struct Events(Option<Arc<Inner>>);

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_on() {
            "Events(jsonl)"
        } else {
            "Events(off)"
        })
    }
}

struct Inner {
    /// Set when the run is created (or loaded, for `resume`).
    run_id: OnceLock<String>,
    /// The session's secrets (the model key, …), redacted from every line.
    secrets: OnceLock<Vec<String>>,
    /// Stages started and not yet finished, in start order.
    open: Mutex<Vec<String>>,
    /// The command's final result (`--json`'s object) and the run status.
    result: Mutex<Option<(String, Value)>>,
    /// Stdout failed (a reader that went away): write nothing more.
    closed: AtomicBool,
}

impl Events {
    /// A stream that writes nothing.
    pub fn off() -> Events {
        Events(None)
    }

    /// A stream in `format` on stdout, or none.
    pub fn new(format: Option<EventFormat>) -> Events {
        match format {
            None => Events::off(),
            Some(EventFormat::Jsonl) => Events(Some(Arc::new(Inner {
                run_id: OnceLock::new(),
                secrets: OnceLock::new(),
                open: Mutex::new(Vec::new()),
                result: Mutex::new(None),
                closed: AtomicBool::new(false),
            }))),
        }
    }

    /// Whether events are written (stdout then carries nothing else).
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Values redacted from every later line, besides the ones registered
    /// process-wide ([`crate::secrets::known_secrets`]).
    pub fn redacting(&self, secrets: &[String]) {
        if let Some(inner) = &self.0 {
            let _ = inner.secrets.set(secrets.to_vec());
        }
    }

    /// Keeps the command's result for the final `run_finished` event: the
    /// run's status and the object `--json` would have printed.
    pub fn set_result(&self, status: &str, summary: Value) {
        if let Some(inner) = &self.0
            && let Ok(mut r) = inner.result.lock()
        {
            *r = Some((status.to_owned(), summary));
        }
    }

    /// Writes one event of `kind` with `fields` (an object).
    fn emit(&self, kind: &str, fields: Value, extra_secrets: &[String]) {
        let Some(inner) = &self.0 else { return };
        if inner.closed.load(Ordering::Relaxed) {
            return;
        }
        // Under the lock: lines are whole, and their times never go back.
        let mut out = std::io::stdout().lock();
        let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let own = inner.secrets.get().map(Vec::as_slice).unwrap_or_default();
        let line = render(kind, inner.run_id.get(), &ts, fields, own, extra_secrets);
        if out
            .write_all(line.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            inner.closed.store(true, Ordering::Relaxed);
        }
    }

    /// `run_started`: the run exists (new or resumed).
    pub(crate) fn run_started(&self, state: &RunState) {
        let Some(inner) = &self.0 else { return };
        let _ = inner.run_id.set(state.run_id.to_string());
        self.emit(
            "run_started",
            json!({
                "pipeline": state.pipeline,
                "model": state.model_label,
                "base_commit": state.base_commit,
                "stages": state.stages.iter().map(|s| json!({
                    "id": s.id, "role": s.role, "status": s.status.as_str(),
                })).collect::<Vec<_>>(),
            }),
            &[],
        );
    }

    /// `stage_started`: a stage's agent starts.
    pub(crate) fn stage_started(&self, id: &str, role: &str) {
        let Some(inner) = &self.0 else { return };
        if let Ok(mut open) = inner.open.lock() {
            open.push(id.to_owned());
        }
        self.emit("stage_started", json!({"stage": id, "role": role}), &[]);
    }

    /// `stage_finished`: a stage ended (also one that failed before its
    /// agent could start, e.g. on a merge conflict of its inputs).
    pub(crate) fn stage_finished(&self, rec: &StageRecord) {
        let Some(inner) = &self.0 else { return };
        if let Ok(mut open) = inner.open.lock() {
            open.retain(|s| *s != rec.id);
        }
        self.emit(
            "stage_finished",
            json!({
                "stage": rec.id,
                "role": rec.role,
                "status": rec.status.as_str(),
                "reason": rec.reason,
                "verdict": rec.verdict,
                "turns": rec.turns,
                "tokens": {"prompt": rec.tokens.prompt, "completion": rec.tokens.completion},
                "duration_ms": rec.duration_ms,
                "commit": rec.commit,
                "branch": rec.branch,
            }),
            &[],
        );
    }

    /// `stage_skipped`: a stage that will not run (`skipped` or `blocked`).
    pub(crate) fn stage_skipped(&self, rec: &StageRecord) {
        self.emit(
            "stage_skipped",
            json!({"stage": rec.id, "role": rec.role, "status": rec.status.as_str(), "reason": rec.reason}),
            &[],
        );
    }

    /// The scheduler is done: stages still open (interrupted ones, put back
    /// to `pending`) get their `stage_finished` with their record's status.
    pub(crate) fn run_ended(&self, state: &RunState) {
        for id in self.take_open() {
            if let Some(rec) = state.stage(&id) {
                self.stage_finished(rec);
            }
        }
    }

    fn take_open(&self) -> Vec<String> {
        self.0
            .as_ref()
            .and_then(|i| i.open.lock().ok().map(|mut o| std::mem::take(&mut *o)))
            .unwrap_or_default()
    }

    /// The last event, `run_finished`, with the process's exit code; `error`
    /// when the command failed (its message, as stderr shows it). Stages
    /// still open are finished first as `failed`.
    pub fn run_finished(&self, exit_code: i32, error: Option<&str>) {
        let Some(inner) = &self.0 else { return };
        for id in self.take_open() {
            self.emit(
                "stage_finished",
                json!({
                    "stage": id, "role": null, "status": "failed",
                    "reason": error.map(|e| format!("orch stopped on an error: {e}")),
                    "verdict": null, "turns": 0, "tokens": {"prompt": 0, "completion": 0},
                    "duration_ms": 0, "commit": null, "branch": null,
                }),
                &[],
            );
        }
        let result = inner.result.lock().ok().and_then(|mut r| r.take());
        let (status, summary) = match (result, error) {
            (Some((status, summary)), None) => (status, Some(summary)),
            (Some(_), Some(_)) | (None, _) if inner.run_id.get().is_some() => {
                ("failed".to_owned(), None)
            }
            _ => ("error".to_owned(), None),
        };
        self.emit(
            "run_finished",
            json!({"status": status, "exit_code": exit_code, "error": error, "summary": summary}),
            &[],
        );
    }

    /// The events of one stage's action log ([`crate::runlog::ActionLog`]);
    /// `None` when the stream is off.
    pub(crate) fn for_stage(&self, stage: &str) -> Option<StageEvents> {
        self.is_on().then(|| StageEvents {
            events: self.clone(),
            stage: stage.to_owned(),
        })
    }
}

/// One event line (with its newline): the common fields first, in a fixed
/// order, then the type's own `fields`; redacted.
fn render(
    kind: &str,
    run_id: Option<&String>,
    ts: &str,
    fields: Value,
    secrets: &[String],
    more_secrets: &[String],
) -> String {
    let mut line = format!(
        "{{\"v\":{EVENTS_VERSION},\"type\":{},\"run_id\":{},\"ts\":{}",
        json!(kind),
        json!(run_id),
        json!(ts)
    );
    if let Value::Object(map) = fields {
        for (k, v) in map {
            line.push_str(&format!(",{}:{v}", json!(k)));
        }
    }
    line.push('}');
    let all: Vec<String> = secrets.iter().chain(more_secrets).cloned().collect();
    let mut line = crate::secrets::redact(&line, &all);
    line.push('\n');
    line
}

/// The event stream seen from one stage's action log: turns, tool calls,
/// verify, budget and policy events are derived from the log's own events.
#[derive(Clone, Debug)]
pub(crate) struct StageEvents {
    events: Events,
    stage: String,
}

impl crate::runlog::ActionObserver for StageEvents {
    fn action(&self, event: &ActionEvent, secrets: &[String]) {
        StageEvents::action(self, event, secrets);
    }
}

impl StageEvents {
    /// Derives the stream's events from one action-log event; most log
    /// events have none. `secrets` are the log's.
    pub(crate) fn action(&self, event: &ActionEvent, secrets: &[String]) {
        for (kind, fields) in derive(event) {
            let mut map = Map::new();
            map.insert("stage".to_owned(), json!(self.stage));
            if let Value::Object(f) = fields {
                map.extend(f);
            }
            self.events.emit(kind, Value::Object(map), secrets);
        }
    }
}

/// The stream's events (type and fields, without `stage`) for one
/// action-log event; none for most. Every variant has its own decision
/// here (no catch-all arm), so a new event does not compile until it has
/// one.
fn derive(event: &ActionEvent) -> Vec<(&'static str, Value)> {
    match event {
        ActionEvent::Response(r) => {
            let mut turn = json!({
                "turn": r.turn,
                "prompt_tokens": r.prompt_tokens,
                "completion_tokens": r.completion_tokens,
                "latency_ms": r.latency_ms,
                "finish_reason": r.finish_reason,
                "tool_calls": r.tool_calls.iter().map(|c| json!({"id": c.id, "name": c.name})).collect::<Vec<_>>(),
            });
            // The prompt cache, only when the server reported one.
            for (key, n) in [
                ("cache_read_tokens", r.cache_read_tokens),
                ("cache_write_tokens", r.cache_write_tokens),
            ] {
                if n > 0 {
                    turn[key] = json!(n);
                }
            }
            vec![("turn", turn)]
        }
        ActionEvent::Tool(t) => {
            let mut out = vec![(
                "tool_call",
                json!({
                    "turn": t.turn,
                    "call_id": t.call_id,
                    "name": t.name,
                    "is_error": t.is_error,
                    "exit_code": t.exit_code,
                    "duration_ms": t.duration_ms,
                    "summary": t.summary,
                    "result_bytes": t.result_bytes,
                    "preview": crate::text::cap_bytes(&t.result, PREVIEW_BYTES),
                }),
            )];
            // A decision worth telling: a denial, or an allow by an
            // exception (`--yes`, the user, the repo allowlist).
            if let Some(policy) = t.policy.as_deref()
                && policy != "allow"
            {
                let (decision, rule) = policy
                    .split_once([':', ' '])
                    .map_or((policy, ""), |(d, r)| (d, r.trim()));
                out.push((
                    "policy",
                    json!({
                        "turn": t.turn, "call_id": t.call_id, "tool": t.name,
                        "decision": if decision == "deny" { "deny" } else { "allow" },
                        "reason": if rule.is_empty() { policy } else { rule },
                    }),
                ));
            }
            out
        }
        ActionEvent::ReadOnlyViolation(v) => vec![(
            "policy",
            json!({
                "turn": null, "call_id": null, "tool": null, "decision": "discard",
                "reason": v.reason, "paths": v.discarded,
            }),
        )],
        ActionEvent::Sandbox(s) => {
            vec![("sandbox", json!({"profile": s.profile, "kernel": s.kernel}))]
        }
        ActionEvent::Verify(v) => vec![(
            "verify",
            json!({
                "round": v.round, "command": v.run.command,
                "exit_code": v.run.exit_code, "timed_out": v.run.timed_out,
                "duration_ms": v.run.duration_ms, "passed": v.run.passed,
            }),
        )],
        ActionEvent::VerifyFailed(v) => vec![(
            "verify_gate",
            json!({"passed": false, "rounds": v.rounds, "reason": v.reason}),
        )],
        ActionEvent::StageEnd(e) => match e.verify.as_deref() {
            Some("pass") => vec![(
                "verify_gate",
                json!({"passed": true, "rounds": null, "reason": null}),
            )],
            _ => Vec::new(),
        },
        ActionEvent::Escalated(e) => vec![(
            "escalated",
            json!({
                "attempt": e.attempt, "from_model": e.from_model, "to_profile": e.to_profile,
                "to_model": e.to_model, "cause": e.cause, "reason": e.reason,
            }),
        )],
        ActionEvent::BudgetExceeded(b) => vec![(
            "budget",
            json!({"kind": "exceeded", "turn": b.turn, "reason": b.reason, "budget": null}),
        )],
        ActionEvent::AgentEnd(e) => vec![(
            "budget",
            json!({"kind": "report", "turn": e.turns, "reason": null, "budget": e.budget}),
        )],
        // The control channel: a call waiting for a user, its answer, a
        // user's note (what `orch ui` shows live).
        ActionEvent::Ask(a) => vec![(
            "ask",
            json!({
                "turn": a.turn, "call_id": a.call_id, "id": a.id, "tool": a.tool,
                "command": crate::text::cap_bytes(&a.command, PREVIEW_BYTES),
                "why": a.why, "expires": a.expires,
            }),
        )],
        ActionEvent::AskAnswer(a) => vec![(
            "ask_answer",
            json!({
                "turn": a.turn, "call_id": a.call_id, "id": a.id, "allow": a.allow,
                "by": a.by, "reason": a.reason, "waited_ms": a.waited_ms,
            }),
        )],
        ActionEvent::Guidance(g) => vec![(
            "guidance",
            json!({
                "turn": g.turn, "id": g.id, "by": g.by, "bytes": g.bytes,
                "preview": crate::text::cap_bytes(&g.text, PREVIEW_BYTES),
            }),
        )],
        // Not public: the action log and `orch log` show these.
        ActionEvent::StageStart(_)
        | ActionEvent::Selected(_)
        | ActionEvent::RoleNotes(_)
        | ActionEvent::ProjectInstructions(_)
        | ActionEvent::ContextFiles(_)
        | ActionEvent::Skills(_)
        | ActionEvent::SkillLoad(_)
        | ActionEvent::Memory(_)
        | ActionEvent::MemoryUses(_)
        | ActionEvent::Distill(_)
        | ActionEvent::WorktreeInclude(_)
        | ActionEvent::LaneSetup(_)
        | ActionEvent::AgentStart(_)
        | ActionEvent::ChildStart(_)
        | ActionEvent::ContextWindow(_)
        | ActionEvent::Request(_)
        | ActionEvent::Retry(_)
        | ActionEvent::StreamFallback(_)
        | ActionEvent::ToolCallsRecovered(_)
        | ActionEvent::ToolCallingSwitch(_)
        | ActionEvent::Compaction(_)
        | ActionEvent::ModelError(_)
        | ActionEvent::ToolFault(_)
        | ActionEvent::McpServers(_)
        | ActionEvent::McpCall(_)
        | ActionEvent::VerdictFromText(_)
        | ActionEvent::FinishFromText(_)
        | ActionEvent::Nudge(_)
        | ActionEvent::HookRun(_)
        | ActionEvent::NoResult(_)
        | ActionEvent::Stuck(_)
        | ActionEvent::Baseline(_)
        | ActionEvent::Staged(_)
        | ActionEvent::Killed(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runlog::event;

    #[test]
    fn off_is_a_no_op_and_on_derives_events_from_the_log() {
        let off = Events::off();
        assert!(!off.is_on());
        assert!(off.for_stage("code").is_none());
        let on = Events::new(Some(EventFormat::Jsonl));
        assert!(on.for_stage("code").is_some());
    }

    #[test]
    fn policy_decisions_other_than_a_plain_allow_are_events() {
        let call = |policy: &str, result: String| {
            ActionEvent::Tool(event::Tool {
                turn: 1,
                call_id: "c".into(),
                name: "bash".into(),
                policy: Some(policy.into()),
                result,
                ..event::Tool::default()
            })
        };
        let tool = |policy: &str| derive(&call(policy, "x".into()));
        assert_eq!(
            tool("allow").len(),
            1,
            "a plain allow is only the tool call"
        );
        let yes = tool("allow (--yes): `git push` needs approval");
        assert_eq!(yes[1].0, "policy");
        assert_eq!(yes[1].1["decision"], "allow");
        assert_eq!(yes[1].1["reason"], "(--yes): `git push` needs approval");
        let deny = tool("deny: fork bomb");
        assert_eq!(deny[1].1["decision"], "deny");
        assert_eq!(deny[1].1["reason"], "fork bomb");
        let long = derive(&call("allow", "y".repeat(10_000)));
        assert!(
            long[0].1["preview"].as_str().unwrap().len() < 400,
            "bounded"
        );
        assert!(derive(&ActionEvent::Request(event::Request::default())).is_empty());
        let end = |verify: &str| {
            derive(&ActionEvent::StageEnd(event::StageEnd {
                verify: Some(verify.into()),
                ..event::StageEnd::default()
            }))
        };
        let gate = end("pass");
        assert_eq!(gate[0].1["passed"], true);
        assert!(end("fail").is_empty());
    }

    #[test]
    fn a_line_is_one_redacted_object_with_the_common_fields_first() {
        let id = "r1".to_owned();
        let line = render(
            "tool_call",
            Some(&id),
            "2026-01-01T00:00:00.000Z",
            json!({"stage": "code", "summary": "echo sk-secret-1 and tok-2222"}),
            &["sk-secret-1".to_owned()],
            &["tok-2222".to_owned()],
        );
        assert!(line.ends_with("}\n") && !line[..line.len() - 1].contains('\n'));
        assert!(
            line.starts_with(
                r#"{"v":1,"type":"tool_call","run_id":"r1","ts":"2026-01-01T00:00:00.000Z","#
            ),
            "{line}"
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["summary"], "echo [REDACTED] and [REDACTED]");
        assert_eq!(v["stage"], "code");
        let none = render("run_finished", None, "t", json!({}), &[], &[]);
        assert_eq!(
            none,
            "{\"v\":1,\"type\":\"run_finished\",\"run_id\":null,\"ts\":\"t\"}\n"
        );
    }
}
