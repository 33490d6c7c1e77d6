//! Reading what a run left behind: the requests the model server recorded
//! and the run record under `.git/orch/runs/<id>`.

use super::fake_server::Recorded;
use super::repo::TestRepo;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The contents of the `role: tool` messages of a recorded request.
pub fn tool_results(req: &Recorded) -> Vec<String> {
    messages_of(req, "tool")
}

/// The names of the tools a recorded request offered (empty if none).
pub fn offered_tools(req: &Recorded) -> Vec<String> {
    req.body["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| {
                    t["function"]["name"]
                        .as_str()
                        .expect("tool name")
                        .to_owned()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The `role: user` messages of a recorded request, joined by newlines.
pub fn user_text(req: &Recorded) -> String {
    messages_of(req, "user").join("\n")
}

fn messages_of(req: &Recorded, role: &str) -> Vec<String> {
    req.body["messages"]
        .as_array()
        .expect("request has messages")
        .iter()
        .filter(|m| m["role"] == role)
        .map(|m| m["content"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// The record directory of run `run_id` in `repo`.
pub fn record_dir(repo: &TestRepo, run_id: &str) -> PathBuf {
    repo.path.join(".git/orch/runs").join(run_id)
}

/// The run's `state.json`.
pub fn state_json(repo: &TestRepo, run_id: &str) -> Value {
    let text = std::fs::read_to_string(record_dir(repo, run_id).join("state.json"))
        .expect("read state.json");
    serde_json::from_str(&text).expect("state.json is JSON")
}

/// The record of stage `id` in a parsed `state.json`.
pub fn stage_record<'a>(state: &'a Value, id: &str) -> &'a Value {
    state["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no stage {id} in {state}"))
}

/// Every line of a JSON-lines file, parsed.
pub fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The events of `record/stages/<stage>/actions.jsonl` whose `event` is `kind`.
pub fn stage_events(record: &Path, stage: &str, kind: &str) -> Vec<Value> {
    read_jsonl(&record.join("stages").join(stage).join("actions.jsonl"))
        .into_iter()
        .filter(|e| e["event"] == kind)
        .collect()
}

/// Every file under `dir`, recursively (nothing if `dir` is missing).
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
