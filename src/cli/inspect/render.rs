//! The action-log renderer: one readable line per event.

use super::shared::short;
use crate::cli::output::usd;
use crate::runlog::event::{self, ActionEvent, LogLine, Logged};
use crate::text::plural;

/// Longest text field shown on a line.
const FIELD_CHARS: usize = 100;

/// A text field on one line, capped.
fn oneline(v: &serde_json::Value) -> String {
    let text = match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    };
    crate::text::cap_bytes(
        &text.split_whitespace().collect::<Vec<_>>().join(" "),
        FIELD_CHARS,
    )
    .to_string()
}

/// The names of a list of tool calls: `read_file, bash`.
fn call_names(calls: &[event::LoggedCall]) -> String {
    calls
        .iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A text field on one line, capped.
fn one(text: &str) -> String {
    oneline(&serde_json::Value::from(text))
}

/// A value as JSON (what the log holds for it).
fn json(v: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_default()
}

/// A list of words: `a, b, c`.
fn list(words: &[String]) -> String {
    words.join(", ")
}

/// Milliseconds as `1.23s`.
fn secs(ms: u64) -> String {
    format!("{:.2}s", ms as f64 / 1000.0)
}

/// `, key value` when the field is set (not null, not empty), else nothing.
fn opt_field(key: &str, value: &impl serde::Serialize) -> String {
    match json(value) {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) if s.is_empty() => String::new(),
        serde_json::Value::Array(a) if a.is_empty() => String::new(),
        v => format!(", {key} {}", oneline(&v)),
    }
}

/// One action-log line as a readable line: elapsed time, then what
/// happened. A line this orch does not know is shown as
/// `kind: {compact json}`.
pub(super) fn render_event(line: &LogLine) -> String {
    let body = match &line.event {
        Logged::Known(event) => describe(event),
        Logged::Unknown { name, line } => as_json(name, line),
    };
    format!("{:>7.2}s {body}", line.elapsed_ms as f64 / 1000.0)
}

/// What happened, in words. Every event has its own arm (no catch-all), so
/// a new event does not compile until it has a rendering; the few shown
/// as their JSON say so in theirs.
fn describe(event: &ActionEvent) -> String {
    let turn = |t: u32| format!("turn {t}: ");
    match event {
        ActionEvent::StageStart(e) => format!(
            "start {} ({}) from {}",
            one(&e.stage),
            one(&e.role),
            short(Some(&e.parent))
        ),
        ActionEvent::RoleNotes(e) => format!(
            "role {} from {}{}{}{}",
            one(&e.role),
            one(&e.origin),
            opt_field("warnings", &e.warnings),
            opt_field("model_note", &e.model_note),
            opt_field("sampling", &e.sampling)
        ),
        ActionEvent::Sandbox(e) => format!(
            "sandbox {} — {}",
            one(&e.profile),
            one(&e.kernel).trim_start_matches("sandbox: ")
        ),
        ActionEvent::Memory(e) => memory(e),
        ActionEvent::Distill(e) => distill(e),
        ActionEvent::ProjectInstructions(e) => project_instructions(e),
        ActionEvent::ContextFiles(e) => context_files(e),
        ActionEvent::Skills(e) => skills(e),
        ActionEvent::SkillLoad(e) => format!(
            "{}load_skill `{}`: {} (blob {}, {})",
            turn(e.turn),
            one(&e.name),
            one(&e.path),
            short(Some(&e.blob)),
            one(&e.source)
        ),
        ActionEvent::AgentStart(e) => agent_start(e),
        ActionEvent::ChildStart(e) => format!(
            "subagent {} ({}) starts: depth {}/{}, pid {}{}{}",
            one(&e.agent),
            one(&e.role),
            e.depth,
            e.max_depth,
            e.pid,
            opt_field("token_budget", &e.token_budget),
            opt_field("time_budget_secs", &e.time_budget_secs)
        ),
        ActionEvent::ContextWindow(e) => format!(
            "{}context window {} tokens from the {} (configured {}, using {})",
            turn(e.turn),
            e.tokens,
            one(&e.source),
            e.configured,
            e.used
        ),
        ActionEvent::Request(e) => format!(
            "→ model turn {} ({} messages, ~{} bytes{})",
            e.turn,
            e.messages,
            e.approx_bytes,
            if e.tool_calls_constrained {
                ", one call under a JSON schema"
            } else if e.tool_calls_as_text {
                ", calls as text"
            } else {
                ""
            }
        ),
        ActionEvent::ToolCallingSwitch(e) => format!(
            "{}tool calls: {} → {}: {}",
            turn(e.turn),
            one(&e.from),
            one(&e.to),
            one(&e.reason)
        ),
        ActionEvent::Retry(e) => format!(
            "{}retry{}: attempt {}/{} failed{} ({}); waiting {}",
            turn(e.turn),
            if e.request == "summary" {
                " of a compaction summary"
            } else {
                ""
            },
            e.attempt,
            e.of,
            e.status
                .map(|c| format!(" with HTTP {c}"))
                .unwrap_or_default(),
            one(&e.reason),
            secs(e.wait_ms)
        ),
        ActionEvent::StreamFallback(e) => {
            format!("{}streaming off: {}", turn(e.turn), one(&e.reason))
        }
        ActionEvent::Response(e) => response(e),
        ActionEvent::ToolCallsRecovered(e) => format!(
            "{}tool calls recovered from {} ({}): {}",
            turn(e.turn),
            one(&e.recovered_from),
            one(&e.format),
            call_names(&e.tool_calls)
        ),
        ActionEvent::Tool(e) => tool(e),
        ActionEvent::Compaction(e) => compaction(e),
        ActionEvent::ModelError(e) => format!(
            "{}model error: {}{}",
            turn(e.turn),
            one(&e.error),
            opt_field("retry", &e.retry)
        ),
        ActionEvent::BudgetExceeded(e) => format!(
            "{}budget exceeded: {}{}",
            turn(e.turn),
            one(&e.reason),
            opt_field("call_id", &e.call_id)
        ),
        ActionEvent::ToolFault(e) => format!(
            "{}tool fault in {}: {}",
            turn(e.turn),
            one(&e.name),
            one(&e.reason)
        ),
        ActionEvent::McpServers(e) => format!(
            "MCP servers: {} ({} tools, {} B of definitions){}",
            if e.servers.is_empty() {
                "none".to_owned()
            } else {
                e.servers.join(", ")
            },
            e.tools.len(),
            e.bytes,
            opt_field("replayed_from", &e.replayed_from)
        ),
        ActionEvent::McpCall(e) => format!(
            "{}mcp call {}/{}: {} B in {} ms{}",
            turn(e.turn),
            one(&e.server),
            one(&e.tool),
            e.bytes,
            e.duration_ms,
            if e.is_error { " (error)" } else { "" }
        ),
        ActionEvent::VerdictFromText(e) => format!(
            "{}verdict read from the text: {}",
            turn(e.turn),
            oneline(&json(&e.verdict))
        ),
        ActionEvent::FinishFromText(e) => format!(
            "{}prose taken as finish ({} changed paths; the verify gate judges it)",
            turn(e.turn),
            e.changed_paths
        ),
        ActionEvent::Nudge(e) => format!("{}nudge: {}", turn(e.turn), one(&e.message)),
        ActionEvent::HookRun(e) => format!(
            "{}hook {} `{}` → {}{}",
            e.turn.map(turn).unwrap_or_default(),
            e.hook_event,
            one(&e.command),
            e.decision,
            e.reason
                .as_deref()
                .map(|r| format!(": {}", one(r)))
                .unwrap_or_default()
        ),
        ActionEvent::Ask(e) => format!(
            "{}ask {}: {} `{}` waits for approval ({}; via {})",
            turn(e.turn),
            one(&e.id),
            one(&e.tool),
            one(&e.command),
            one(&e.why),
            one(&e.via)
        ),
        ActionEvent::AskAnswer(e) => format!(
            "{}ask {} {} by {} after {} ms{}",
            turn(e.turn),
            one(&e.id),
            if e.allow { "allowed" } else { "denied" },
            one(&e.by),
            e.waited_ms,
            e.reason
                .as_deref()
                .map(|r| format!(": {}", one(r)))
                .unwrap_or_default()
        ),
        ActionEvent::Guidance(e) => format!(
            "{}guidance {} from {}: {}",
            turn(e.turn),
            one(&e.id),
            one(&e.by),
            one(&e.text)
        ),
        ActionEvent::NoResult(e) => format!("{}no result: {}", turn(e.turn), one(&e.reason)),
        ActionEvent::Stuck(e) => format!("{}stuck: {}", turn(e.turn), one(&e.reason)),
        ActionEvent::Verify(e) => verify(e),
        ActionEvent::VerifyFailed(e) => format!(
            "verify failed after {}: {}",
            plural(u64::from(e.rounds), "round", "rounds"),
            one(&e.reason)
        ),
        ActionEvent::ReadOnlyViolation(e) => format!(
            "read-only violation: {} (discarded {})",
            one(&e.reason),
            list(&e.discarded)
        ),
        ActionEvent::Killed(e) => format!("killed by {}", one(&e.signal)),
        ActionEvent::AgentEnd(e) => agent_end(e),
        ActionEvent::StageEnd(e) => stage_end(e),
        ActionEvent::Escalated(e) => format!(
            "escalated: attempt {} with {} failed ({}: {}); attempt {} with profile {} ({}) restarts from {}",
            e.attempt,
            one(&e.from_model),
            one(&e.cause),
            one(&e.reason),
            e.attempt + 1,
            one(&e.to_profile),
            one(&e.to_model),
            short(Some(&e.restart_from))
        ),
        ActionEvent::Selected(e) => format!(
            "selected replica #{} of {} ({}{}): {}",
            e.chosen,
            e.of,
            one(&e.strategy),
            match e.passed {
                Some(true) => ", passed its checks",
                Some(false) => ", none passed: the best attempt",
                None => "",
            },
            one(&e.reason)
        ),
        // No readable line yet: shown as their JSON.
        ActionEvent::WorktreeInclude(_)
        | ActionEvent::LaneSetup(_)
        | ActionEvent::Baseline(_)
        | ActionEvent::MemoryUses(_)
        | ActionEvent::Staged(_) => {
            let line = json(event);
            let name = line["event"].as_str().unwrap_or("?").to_owned();
            as_json(&name, &line)
        }
    }
}

/// `agent_start`: its limits, tools and prompt sizes.
fn agent_start(e: &event::AgentStart) -> String {
    format!(
        "agent {} starts: max {} turns, tools {}, compacts at {} tokens, system prompt {} bytes, task {} bytes{}{}{}",
        one(&e.agent),
        e.max_turns,
        list(&e.tools),
        e.compact_at_tokens,
        e.system_prompt_bytes,
        e.task_bytes,
        budget_text(", budget", &json(&e.budget)),
        if e.text_tool_calls {
            ", tool calls written as text accepted"
        } else {
            ""
        },
        opt_field("budget_notes", &e.budget_notes)
    )
}

/// `agent_end`: how it ended, and what it used.
fn agent_end(e: &event::AgentEnd) -> String {
    format!(
        "agent {} ends: {} after {}, {}+{} tokens{}{}{}",
        one(&e.agent),
        one(&e.end),
        plural(u64::from(e.turns), "turn", "turns"),
        e.prompt_tokens,
        e.completion_tokens,
        budget_text(", used", &json(&e.budget.used)),
        opt_field("verdict", &e.verdict),
        e.budget
            .exceeded
            .as_deref()
            .map(|x| format!(", exceeded {x}"))
            .unwrap_or_default()
    )
}

/// `stage_end`: its status, commit and change counts.
fn stage_end(e: &event::StageEnd) -> String {
    format!(
        "end: {} {} ({}, +{} -{}){}{}",
        one(&e.status),
        short(Some(&e.commit)),
        plural(e.files_changed as u64, "file", "files"),
        e.insertions,
        e.deletions,
        opt_field("reason", &e.reason),
        opt_field("verify", &e.verify)
    )
}

/// `memory`: the lessons used, or why none.
fn memory(e: &event::Memory) -> String {
    let lessons = e.lessons.unwrap_or(0) as u64;
    if !e.memory_used.is_empty() {
        format!(
            "memory: used {} (of {})",
            list(&e.memory_used),
            plural(lessons, "lesson", "lessons")
        )
    } else if let Some(error) = &e.error {
        format!("memory: not read: {}", one(error))
    } else {
        format!("memory: no lesson applies (of {lessons})")
    }
}

/// `distill`: skipped, failed, or the lessons proposed.
fn distill(e: &event::Distill) -> String {
    match e {
        event::Distill::Skipped { reason, .. } => format!("distill: skipped ({})", one(reason)),
        event::Distill::Failed { key_event, error } => {
            format!("distill on {}: failed: {error}", one(key_event))
        }
        event::Distill::Done {
            key_event,
            lessons,
            status,
            ..
        } => format!(
            "distill on {}: {} proposed as {}",
            one(key_event),
            list(lessons),
            one(status)
        ),
    }
}

/// `project_instructions`: off, none found, or the files (and the cut).
fn project_instructions(e: &event::ProjectInstructions) -> String {
    if !e.enabled {
        return "project instructions: off".to_owned();
    }
    let files: Vec<String> = e.files.iter().map(|f| json(f).to_string()).collect();
    format!(
        "project instructions: {}{}",
        if files.is_empty() {
            "none found".to_owned()
        } else {
            files.join(", ")
        },
        if e.cut == Some(true) {
            format!(" (cut at {} bytes)", e.limit_bytes.unwrap_or(0))
        } else {
            String::new()
        }
    )
}

/// `skills`: the skills offered (and cut), and the files skipped.
fn skills(e: &event::Skills) -> String {
    let names: Vec<&str> = e.offered.iter().map(|s| s.name.as_str()).collect();
    format!(
        "skills: {} ({} bytes in the system prompt{}){}{}",
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        },
        e.prompt_bytes,
        if e.cut.is_empty() {
            String::new()
        } else {
            format!(
                "; not described, over {} bytes: {}",
                e.limit_bytes,
                e.cut.join(", ")
            )
        },
        opt_field("selected", &e.selected),
        if e.skipped.is_empty() {
            String::new()
        } else {
            format!("; skipped: {}", one(&e.skipped.join("; ")))
        }
    )
}

/// `context_files`: off, none named, or the files shown (cut or whole) and
/// those left out with the reason.
fn context_files(e: &event::ContextFiles) -> String {
    if !e.enabled {
        return "context files: off".to_owned();
    }
    let mut parts: Vec<String> = e
        .files
        .iter()
        .map(|f| {
            let cut = if f.truncated { ", cut" } else { "" };
            format!("{} ({} B{cut})", one(&f.path), f.bytes)
        })
        .collect();
    parts.extend(
        e.skipped
            .iter()
            .map(|s| format!("{} not shown: {}", one(&s.path), one(&s.reason))),
    );
    if parts.is_empty() {
        return "context files: none named".to_owned();
    }
    format!("context files: {}", parts.join(", "))
}

/// `response`: the turn, its tokens, its text and the calls it made.
fn response(e: &event::Response) -> String {
    let calls = call_names(&e.tool_calls);
    let text = e
        .content
        .as_deref()
        .filter(|c| !c.trim().is_empty())
        .map(|c| format!(" \"{}\"", one(c)))
        .unwrap_or_default();
    format!(
        "← model turn {} in {}ms, {}+{} tokens{text}{}",
        e.turn,
        e.latency_ms,
        e.prompt_tokens,
        e.completion_tokens,
        if calls.is_empty() {
            String::new()
        } else {
            format!(" calls: {calls}")
        }
    )
}

/// `tool`: its summary (which names the tool) and what is news about it.
fn tool(e: &event::Tool) -> String {
    let summary = one(&e.summary);
    let mut o = format!(
        "  {}",
        if summary.is_empty() {
            one(&e.name)
        } else {
            summary
        }
    );
    if e.is_error {
        o.push_str(" [error]");
    }
    if let Some(c) = e.exit_code {
        o.push_str(&format!(" [exit {c}]"));
    }
    // `allow` is the usual case; only other decisions are news.
    if let Some(policy) = e.policy.as_deref().filter(|p| *p != "allow") {
        o.push_str(&format!(" [policy: {}]", one(policy)));
    }
    if let Some(sandbox) = &e.sandbox {
        o.push_str(&format!(" [sandbox: {}]", one(sandbox)));
    }
    if let Some(r) = &e.repeat {
        o.push_str(&format!(" [repeat: {r}]"));
    }
    o
}

/// `compaction`: how, and how much smaller.
fn compaction(e: &event::Compaction) -> String {
    let mut o = format!(
        "turn {}: compaction ({}, {}): {} → {} bytes",
        e.turn,
        one(&e.trigger),
        one(&e.method),
        e.bytes_before,
        e.bytes_after
    );
    if !e.stubbed.is_empty() {
        o.push_str(&format!(", {} tool results stubbed", e.stubbed.len()));
    }
    if let Some(s) = &e.summarized {
        o.push_str(&format!(
            ", {} messages summarized into {} bytes",
            s.messages, s.summary_bytes
        ));
    }
    o.push_str(&opt_field("kept_turns", &e.kept_turns));
    o.push_str(&opt_field("summary_error", &e.summary_error));
    o
}

/// `verify`: the command, how it ended, and the output of a failure.
fn verify(e: &event::Verify) -> String {
    let run = &e.run;
    let how = match (run.passed, run.timed_out) {
        (_, true) => "timed out".to_owned(),
        (true, _) => "passed".to_owned(),
        _ => run
            .exit_code
            .map_or("failed".to_owned(), |c| format!("failed (exit {c})")),
    };
    format!(
        "verify round {}: `{}` {how} in {}{}",
        e.round,
        one(&run.command),
        secs(run.duration_ms),
        if run.passed {
            String::new()
        } else {
            format!(": {}", one(&run.output))
        }
    )
}

/// A line shown as `name: {its fields as compact json}` (without `ts`,
/// `elapsed_ms` and `event`).
fn as_json(name: &str, line: &serde_json::Value) -> String {
    let mut rest = line.clone();
    if let Some(o) = rest.as_object_mut() {
        for k in ["ts", "elapsed_ms", "event"] {
            o.remove(k);
        }
    }
    format!("{name}: {}", crate::text::cap_bytes(&rest.to_string(), 200))
}

/// The set fields of a budget object (`{"turns": 40, "tokens": null, …}`)
/// after `label`: `, budget turns 40, time 60s`; empty when none is set.
fn budget_text(label: &str, v: &serde_json::Value) -> String {
    let parts: Vec<String> = [
        ("turns", ""),
        ("tokens", ""),
        ("time_secs", "s"),
        ("cost_usd", ""),
    ]
    .iter()
    .filter_map(|(k, unit)| {
        let x = &v[*k];
        let shown = match *k {
            "cost_usd" => usd(x.as_f64()?),
            "time_secs" => format!("{:.1}", x.as_f64()?),
            _ => x.as_u64()?.to_string(),
        };
        Some(format!(
            "{} {shown}{unit}",
            k.trim_end_matches("_secs").trim_end_matches("_usd")
        ))
    })
    .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("{label} {}", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ev` as the log reader reads its line.
    fn read(ev: &serde_json::Value) -> LogLine {
        crate::runlog::event::parse_line(&ev.to_string()).unwrap()
    }

    #[test]
    fn every_known_event_is_one_readable_line_and_unknown_ones_compact_json() {
        let kinds = [
            "stage_start",
            "role_notes",
            "sandbox",
            "project_instructions",
            "skills",
            "skill_load",
            "agent_start",
            "child_start",
            "context_window",
            "request",
            "retry",
            "stream_fallback",
            "response",
            "tool_calls_recovered",
            "tool",
            "compaction",
            "model_error",
            "budget_exceeded",
            "tool_fault",
            "verdict_from_text",
            "finish_from_text",
            "nudge",
            "no_result",
            "stuck",
            "verify",
            "verify_failed",
            "read_only_violation",
            "killed",
            "agent_end",
            "stage_end",
        ];
        for kind in kinds {
            let ev = serde_json::json!({
                "elapsed_ms": 1500, "event": kind, "turn": 2, "reason": "why\nnot",
                "output": "some\noutput", "passed": false, "exit_code": 1,
                "tool_calls": [{"name": "bash"}], "summarized": {"messages": 3, "summary_bytes": 9},
            });
            let line = render_event(&read(&ev));
            assert!(line.starts_with("   1.50s "), "{kind}: {line}");
            assert!(!line.contains('\n'), "{kind}: {line}");
            assert!(
                !line.contains(&format!("{kind}: {{")),
                "{kind} fell back to JSON: {line}"
            );
        }
        let retry = serde_json::json!({"elapsed_ms": 0, "event": "retry", "turn": 1,
            "attempt": 1, "of": 5, "wait_ms": 250, "status": 429, "reason": "HTTP 429: slow down"});
        assert_eq!(
            render_event(&read(&retry)),
            "   0.00s turn 1: retry: attempt 1/5 failed with HTTP 429 (HTTP 429: slow down); waiting 0.25s"
        );
        let bash = serde_json::json!({"elapsed_ms": 0, "event": "tool", "name": "bash",
            "summary": "bash `rm -rf /` → denied", "is_error": true, "exit_code": null,
            "policy": "deny: recursive delete of /", "sandbox": "workspace-write, network off"});
        assert_eq!(
            render_event(&read(&bash)),
            "   0.00s   bash `rm -rf /` → denied [error] [policy: deny: recursive delete of /] [sandbox: workspace-write, network off]"
        );
        let odd = serde_json::json!({"elapsed_ms": 0, "ts": "x", "event": "novel", "a": {"b": 1}});
        assert_eq!(
            render_event(&read(&odd)),
            r#"   0.00s novel: {"a":{"b":1}}"#
        );
    }
}
