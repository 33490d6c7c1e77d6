//! The action-log renderer: one readable line per event.

use super::shared::short;
use crate::cli::output::usd;
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
fn call_names(v: &serde_json::Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|c| c["name"].as_str().unwrap_or("?"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// Milliseconds as `1.23s`.
fn secs(ms: u64) -> String {
    format!("{:.2}s", ms as f64 / 1000.0)
}

/// ` key value` for each field that is set (not null, not empty).
fn opt_fields(ev: &serde_json::Value, keys: &[&str]) -> String {
    let mut o = String::new();
    for k in keys {
        match &ev[*k] {
            serde_json::Value::Null => {}
            serde_json::Value::String(s) if s.is_empty() => {}
            serde_json::Value::Array(a) if a.is_empty() => {}
            v => o.push_str(&format!(", {k} {}", oneline(v))),
        }
    }
    o
}

/// One action-log event as a readable line: elapsed time, then what
/// happened. An unknown kind is shown as `kind: {compact json}`.
pub(super) fn render_event(ev: &serde_json::Value) -> String {
    let ms = ev["elapsed_ms"].as_u64().unwrap_or(0);
    let t = format!("{:>7.2}s", ms as f64 / 1000.0);
    let s = |k: &str| oneline(&ev[k]);
    let n = |k: &str| ev[k].as_u64().unwrap_or(0);
    let turn = ev["turn"]
        .as_u64()
        .map(|t| format!("turn {t}: "))
        .unwrap_or_default();
    let kind = ev["event"].as_str().unwrap_or("?");
    let body = match kind {
        "stage_start" => format!(
            "start {} ({}) from {}",
            s("stage"),
            s("role"),
            short(ev["parent"].as_str())
        ),
        "role_notes" => format!(
            "role {} from {}{}",
            s("role"),
            s("origin"),
            opt_fields(ev, &["warnings", "model_note", "sampling"])
        ),
        "sandbox" => format!(
            "sandbox {} — {}",
            s("profile"),
            s("kernel").trim_start_matches("sandbox: ")
        ),
        "memory" => match ev["memory_used"].as_array().filter(|a| !a.is_empty()) {
            Some(_) => format!(
                "memory: used {} (of {})",
                call_names_or_list(&ev["memory_used"]),
                plural(n("lessons"), "lesson", "lessons")
            ),
            None if ev["error"].is_string() => format!("memory: not read: {}", s("error")),
            None => format!("memory: no lesson applies (of {})", n("lessons")),
        },
        "distill" => match (ev["skipped"].as_bool(), ev["error"].as_str()) {
            (Some(true), _) => format!("distill: skipped ({})", s("reason")),
            (_, Some(e)) => format!("distill on {}: failed: {e}", s("key_event")),
            _ => format!(
                "distill on {}: {} proposed as {}",
                s("key_event"),
                call_names_or_list(&ev["lessons"]),
                s("status")
            ),
        },
        "project_instructions" => match ev["enabled"].as_bool() {
            Some(false) => "project instructions: off".to_owned(),
            _ => {
                let files = call_names_or_list(&ev["files"]);
                format!(
                    "project instructions: {}{}",
                    if files.is_empty() {
                        "none found".to_owned()
                    } else {
                        files
                    },
                    if ev["cut"].as_bool() == Some(true) {
                        format!(" (cut at {} bytes)", n("limit_bytes"))
                    } else {
                        String::new()
                    }
                )
            }
        },
        "agent_start" => format!(
            "agent {} starts: max {} turns, tools {}, compacts at {} tokens, system prompt {} bytes, task {} bytes{}{}{}",
            s("agent"),
            n("max_turns"),
            call_names_or_list(&ev["tools"]),
            n("compact_at_tokens"),
            n("system_prompt_bytes"),
            n("task_bytes"),
            budget_text(", budget", &ev["budget"]),
            if ev["text_tool_calls"].as_bool() == Some(true) {
                ", tool calls written as text accepted"
            } else {
                ""
            },
            opt_fields(ev, &["budget_notes"])
        ),
        "child_start" => format!(
            "subagent {} ({}) starts: depth {}/{}, pid {}{}",
            s("agent"),
            s("role"),
            n("depth"),
            n("max_depth"),
            n("pid"),
            opt_fields(ev, &["token_budget", "time_budget_secs"])
        ),
        "context_window" => format!(
            "{turn}context window {} tokens from the {} (configured {}, using {})",
            n("tokens"),
            s("source"),
            s("configured"),
            n("used")
        ),
        "request" => format!(
            "→ model turn {} ({} messages, ~{} bytes)",
            n("turn"),
            n("messages"),
            n("approx_bytes")
        ),
        "retry" => format!(
            "{turn}retry{}: attempt {}/{} failed{} ({}); waiting {}",
            if ev["request"] == "summary" {
                " of a compaction summary"
            } else {
                ""
            },
            n("attempt"),
            n("of"),
            ev["status"]
                .as_u64()
                .map(|c| format!(" with HTTP {c}"))
                .unwrap_or_default(),
            s("reason"),
            secs(n("wait_ms"))
        ),
        "stream_fallback" => format!("{turn}streaming off: {}", s("reason")),
        "response" => {
            let calls = call_names(&ev["tool_calls"]);
            let text = ev["content"]
                .as_str()
                .filter(|c| !c.trim().is_empty())
                .map(|_| format!(" \"{}\"", s("content")))
                .unwrap_or_default();
            format!(
                "← model turn {} in {}ms, {}+{} tokens{text}{}",
                n("turn"),
                n("latency_ms"),
                n("prompt_tokens"),
                n("completion_tokens"),
                if calls.is_empty() {
                    String::new()
                } else {
                    format!(" calls: {calls}")
                }
            )
        }
        "tool_calls_recovered" => format!(
            "{turn}tool calls recovered from {} ({}): {}",
            s("recovered_from"),
            s("format"),
            call_names(&ev["tool_calls"])
        ),
        "tool" => {
            // The summary names the tool (`bash `ls` → exit 0 (0.1s)`).
            let summary = s("summary");
            let mut o = format!(
                "  {}",
                if summary.is_empty() {
                    s("name")
                } else {
                    summary
                }
            );
            if ev["is_error"].as_bool() == Some(true) {
                o.push_str(" [error]");
            }
            if let Some(c) = ev["exit_code"].as_i64() {
                o.push_str(&format!(" [exit {c}]"));
            }
            // `allow` is the usual case; only other decisions are news.
            if ev["policy"].as_str().is_some_and(|p| p != "allow") {
                o.push_str(&format!(" [policy: {}]", s("policy")));
            }
            if ev["sandbox"].is_string() {
                o.push_str(&format!(" [sandbox: {}]", s("sandbox")));
            }
            if let Some(r) = ev["repeat"].as_str() {
                o.push_str(&format!(" [repeat: {r}]"));
            }
            o
        }
        "compaction" => {
            let mut o = format!(
                "{turn}compaction ({}, {}): {} → {} bytes",
                s("trigger"),
                s("method"),
                n("bytes_before"),
                n("bytes_after")
            );
            if let Some(a) = ev["stubbed"].as_array().filter(|a| !a.is_empty()) {
                o.push_str(&format!(", {} tool results stubbed", a.len()));
            }
            if ev["summarized"].is_object() {
                o.push_str(&format!(
                    ", {} messages summarized into {} bytes",
                    ev["summarized"]["messages"].as_u64().unwrap_or(0),
                    ev["summarized"]["summary_bytes"].as_u64().unwrap_or(0)
                ));
            }
            o.push_str(&opt_fields(ev, &["kept_turns", "summary_error"]));
            o
        }
        "model_error" => format!(
            "{turn}model error: {}{}",
            s("error"),
            opt_fields(ev, &["retry"])
        ),
        "budget_exceeded" => format!(
            "{turn}budget exceeded: {}{}",
            s("reason"),
            opt_fields(ev, &["call_id"])
        ),
        "tool_fault" => format!("{turn}tool fault in {}: {}", s("name"), s("reason")),
        "verdict_from_text" => format!("{turn}verdict read from the text: {}", s("verdict")),
        "nudge" => format!("{turn}nudge: {}", s("message")),
        "no_result" => format!("{turn}no result: {}", s("reason")),
        "stuck" => format!("{turn}stuck: {}", s("reason")),
        "verify" => format!(
            "verify round {}: `{}` {} in {}{}",
            n("round"),
            s("command"),
            match (ev["passed"].as_bool(), ev["timed_out"].as_bool()) {
                (_, Some(true)) => "timed out".to_owned(),
                (Some(true), _) => "passed".to_owned(),
                _ => ev["exit_code"]
                    .as_i64()
                    .map_or("failed".to_owned(), |c| format!("failed (exit {c})")),
            },
            secs(n("duration_ms")),
            ev["passed"]
                .as_bool()
                .filter(|p| !p)
                .map(|_| format!(": {}", s("output")))
                .unwrap_or_default()
        ),
        "verify_failed" => format!(
            "verify failed after {}: {}",
            plural(n("rounds"), "round", "rounds"),
            s("reason")
        ),
        "read_only_violation" => format!(
            "read-only violation: {} (discarded {})",
            s("reason"),
            call_names_or_list(&ev["discarded"])
        ),
        "killed" => format!("killed by {}", s("signal")),
        "agent_end" => format!(
            "agent {} ends: {} after {}, {}+{} tokens{}{}{}",
            s("agent"),
            s("end"),
            plural(n("turns"), "turn", "turns"),
            n("prompt_tokens"),
            n("completion_tokens"),
            budget_text(", used", &ev["budget"]["used"]),
            opt_fields(ev, &["verdict"]),
            ev["budget"]["exceeded"]
                .as_str()
                .map(|x| format!(", exceeded {x}"))
                .unwrap_or_default()
        ),
        "stage_end" => format!(
            "end: {} {} ({}, +{} -{}){}",
            s("status"),
            short(ev["commit"].as_str()),
            plural(n("files_changed"), "file", "files"),
            n("insertions"),
            n("deletions"),
            opt_fields(ev, &["reason", "verify"])
        ),
        other => {
            let mut rest = ev.clone();
            if let Some(o) = rest.as_object_mut() {
                for k in ["ts", "elapsed_ms", "event"] {
                    o.remove(k);
                }
            }
            format!(
                "{other}: {}",
                crate::text::cap_bytes(&rest.to_string(), 200)
            )
        }
    };
    format!("{t} {body}")
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

/// A JSON array of strings (or of anything) as `a, b, c`.
fn call_names_or_list(v: &serde_json::Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_event_is_one_readable_line_and_unknown_ones_compact_json() {
        let kinds = [
            "stage_start",
            "role_notes",
            "sandbox",
            "project_instructions",
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
                "output": {"nested": [1, 2]}, "passed": false, "exit_code": 1,
                "tool_calls": [{"name": "bash"}], "summarized": {"messages": 3, "summary_bytes": 9},
            });
            let line = render_event(&ev);
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
            render_event(&retry),
            "   0.00s turn 1: retry: attempt 1/5 failed with HTTP 429 (HTTP 429: slow down); waiting 0.25s"
        );
        let bash = serde_json::json!({"elapsed_ms": 0, "event": "tool", "name": "bash",
            "summary": "bash `rm -rf /` → denied", "is_error": true, "exit_code": null,
            "policy": "deny: recursive delete of /", "sandbox": "workspace-write, network off"});
        assert_eq!(
            render_event(&bash),
            "   0.00s   bash `rm -rf /` → denied [error] [policy: deny: recursive delete of /] [sandbox: workspace-write, network off]"
        );
        let odd = serde_json::json!({"elapsed_ms": 0, "ts": "x", "event": "novel", "a": {"b": 1}});
        assert_eq!(render_event(&odd), r#"   0.00s novel: {"a":{"b":1}}"#);
    }
}
