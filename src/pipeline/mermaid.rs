//! Rendering a planned pipeline as a Mermaid flowchart.
//!
//! Node ids are positional (`s0`, `s1`, …) because stage ids may hold `-` and
//! `.`, which Mermaid reads as edge syntax; the label carries the real id.

use super::types::Pipeline;
use std::fmt::Write;

/// `flowchart TD`, one node per stage labelled `id (role)` (a best-of-N
/// stage: `id (select 1 of N: strategy)`, fed by its replicas `id#k`); an edge into a
/// rework round from the review whose verdict triggers it is dotted and
/// labelled `request_changes`.
pub(super) fn render(pipeline: &Pipeline) -> String {
    let mut out = String::from("flowchart TD\n");
    for (i, stage) in pipeline.stages.iter().enumerate() {
        let label = match &stage.select {
            // A best-of-N stage: it picks one of its replicas.
            Some(sel) => format!(
                "{} (select 1 of {}: {})",
                stage.id,
                sel.replicas.len(),
                sel.strategy.as_str()
            ),
            None => format!("{} ({})", stage.id, stage.role),
        }
        .replace('"', "#quot;");
        // Writing to a String cannot fail.
        let _ = writeln!(out, "    s{i}[\"{label}\"]");
    }
    for (i, stage) in pipeline.stages.iter().enumerate() {
        for need in &stage.needs {
            let Some(from) = pipeline.stages.iter().position(|s| s.id == *need) else {
                continue;
            };
            if stage.run_if_changes_requested_by.as_ref() == Some(need) {
                let _ = writeln!(out, "    s{from} -. request_changes .-> s{i}");
            } else {
                let _ = writeln!(out, "    s{from} --> s{i}");
            }
        }
    }
    out
}

impl Pipeline {
    /// The plan as a Mermaid `flowchart TD`; conditional rework edges are dotted.
    pub fn to_mermaid(&self) -> String {
        render(self)
    }
}
