//! The subagent part of a run record: per-agent `result.json` files, the
//! parent's append-only `agents.jsonl`, and [`agent_tree`] to read them back
//! as a tree (for `orch show` and friends).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::runlog::{RecordError, TokenCount, write_atomic};

/// Schema of `result.json`.
pub const RESULT_FORMAT: &str = "orch-agent-result/1";

/// Where a subagent is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    /// Still running (a partial result).
    Running,
    /// Finished on its own terms.
    Succeeded,
    /// Turn limit, stuck model, bad role.
    Failed,
    /// The model backend failed.
    ModelError,
    /// Its token budget ran out.
    BudgetExceeded,
    /// Its time ran out.
    TimedOut,
    /// Stopped by a signal it could handle (SIGTERM).
    Killed,
    /// Exited without a final result (crash, SIGKILL).
    Crashed,
}

impl AgentStatus {
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentStatus::Running => "running",
            AgentStatus::Succeeded => "succeeded",
            AgentStatus::Failed => "failed",
            AgentStatus::ModelError => "model_error",
            AgentStatus::BudgetExceeded => "budget_exceeded",
            AgentStatus::TimedOut => "timed_out",
            AgentStatus::Killed => "killed",
            AgentStatus::Crashed => "crashed",
        }
    }
}

/// A subagent's result, as written to `result.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentResult {
    /// Always [`RESULT_FORMAT`].
    pub format: String,
    /// `code/explore-1`, …
    pub agent_path: String,
    /// The role.
    pub role: String,
    /// The task it was given.
    pub task: String,
    /// Depth (a stage's children are 1).
    pub depth: u32,
    /// Where it is.
    pub status: AgentStatus,
    /// Its final report, or what it had so far.
    pub report: String,
    /// Model turns used.
    pub turns: u32,
    /// Tokens used, its own children's included.
    pub tokens: TokenCount,
    /// Paths of the children it spawned.
    #[serde(default)]
    pub children: Vec<String>,
    /// Why it did not succeed.
    #[serde(default)]
    pub reason: Option<String>,
    /// Its process id.
    #[serde(default)]
    pub pid: u32,
    /// Wall time so far.
    #[serde(default)]
    pub duration_ms: u64,
}

impl AgentResult {
    /// A fresh running result.
    pub fn running(agent_path: &str, role: &str, task: &str, depth: u32) -> Self {
        AgentResult {
            format: RESULT_FORMAT.to_owned(),
            agent_path: agent_path.to_owned(),
            role: role.to_owned(),
            task: task.to_owned(),
            depth,
            status: AgentStatus::Running,
            report: String::new(),
            turns: 0,
            tokens: TokenCount::default(),
            children: Vec::new(),
            reason: None,
            pid: std::process::id(),
            duration_ms: 0,
        }
    }
}

/// The record directory of one agent: `<record>/agents/<path with / → __>`.
pub fn agent_dir(record_dir: &Path, agent_path: &str) -> PathBuf {
    record_dir
        .join("agents")
        .join(agent_path.replace('/', "__"))
}

/// Writes `result.json` of an agent atomically.
pub fn write_result(record_dir: &Path, result: &AgentResult) -> Result<(), RecordError> {
    let dir = agent_dir(record_dir, &result.agent_path);
    std::fs::create_dir_all(&dir).map_err(|source| RecordError::Io {
        path: dir.clone(),
        source,
    })?;
    let mut bytes = serde_json::to_vec_pretty(result).unwrap_or_default();
    bytes.push(b'\n');
    write_atomic(&dir.join("result.json"), &bytes)
}

/// Reads `result.json` of an agent, if it exists and parses.
pub fn read_result(record_dir: &Path, agent_path: &str) -> Option<AgentResult> {
    let text =
        std::fs::read_to_string(agent_dir(record_dir, agent_path).join("result.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// One line of `agents.jsonl`: a finished child as its parent saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentEvent {
    /// The child.
    pub agent_path: String,
    /// Who spawned it.
    pub parent: String,
    pub role: String,
    pub task: String,
    /// Final status.
    pub status: AgentStatus,
    /// Which limit the parent enforced: `time` or `tokens`.
    #[serde(default)]
    pub limit: Option<String>,
    /// Why it did not succeed.
    #[serde(default)]
    pub reason: Option<String>,
    pub turns: u32,
    /// Tokens, its own children's included.
    pub tokens: TokenCount,
    /// Wall time as the parent measured it.
    pub duration_ms: u64,
    /// Its process id (= process group id).
    pub pid: u32,
    /// When the parent started it, µs since the Unix epoch.
    pub spawned_at_us: u64,
}

/// One agent in the tree of a run (see [`agent_tree`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentNode {
    /// `code/explore-1`.
    pub agent_path: String,
    /// The spawning agent's path (a stage id for the top level).
    pub parent: String,
    pub role: String,
    pub task: String,
    /// Status (from the parent's record when it has one, else the result file).
    pub status: AgentStatus,
    /// The limit the parent enforced, if any.
    pub limit: Option<String>,
    /// Why it did not succeed.
    pub reason: Option<String>,
    /// Its report (or partial report).
    pub report: String,
    pub turns: u32,
    /// Tokens, its children's included.
    pub tokens: TokenCount,
    /// Wall time (0 while unknown).
    pub duration_ms: u64,
    /// Its children, in spawn order.
    pub children: Vec<AgentNode>,
}

/// The tree of subagents of a run, from its record directory: one root per
/// child of a stage (in spawn order), each with its own children. Agents
/// that are still running, or whose parent died before recording them,
/// appear with their `result.json` status.
pub fn agent_tree(record_dir: &Path) -> Vec<AgentNode> {
    let events: HashMap<String, AgentEvent> =
        std::fs::read_to_string(record_dir.join("agents.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<AgentEvent>(l).ok())
            .map(|e| (e.agent_path.clone(), e))
            .collect();
    let mut nodes: Vec<(u64, AgentNode)> = Vec::new();
    for entry in std::fs::read_dir(record_dir.join("agents"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(text) = std::fs::read_to_string(entry.path().join("result.json")) else {
            continue;
        };
        let Ok(r) = serde_json::from_str::<AgentResult>(&text) else {
            continue;
        };
        let ev = events.get(&r.agent_path);
        let parent = parent_path(&r.agent_path).to_owned();
        nodes.push((
            ev.map_or(u64::MAX, |e| e.spawned_at_us),
            AgentNode {
                parent,
                role: r.role,
                task: r.task,
                status: ev.map_or(r.status, |e| e.status),
                limit: ev.and_then(|e| e.limit.clone()),
                reason: ev.and_then(|e| e.reason.clone()).or(r.reason),
                report: r.report,
                turns: ev.map_or(r.turns, |e| e.turns.max(r.turns)),
                tokens: ev.map_or(r.tokens, |e| e.tokens),
                duration_ms: ev.map_or(r.duration_ms, |e| e.duration_ms),
                agent_path: r.agent_path,
                children: Vec::new(),
            },
        ));
    }
    nodes.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| natural_key(&a.1.agent_path).cmp(&natural_key(&b.1.agent_path)))
    });
    let known: std::collections::HashSet<String> =
        nodes.iter().map(|(_, n)| n.agent_path.clone()).collect();
    let mut by_parent: HashMap<String, Vec<AgentNode>> = HashMap::new();
    let mut roots = Vec::new();
    for (_, n) in nodes {
        if known.contains(&n.parent) {
            by_parent.entry(n.parent.clone()).or_default().push(n);
        } else {
            roots.push(n);
        }
    }
    fn attach(n: &mut AgentNode, by_parent: &mut HashMap<String, Vec<AgentNode>>) {
        n.children = by_parent.remove(&n.agent_path).unwrap_or_default();
        for c in &mut n.children {
            attach(c, by_parent);
        }
    }
    for r in &mut roots {
        attach(r, &mut by_parent);
    }
    roots
}

/// The parent part of an agent path (`code/explore-1` → `code`).
pub fn parent_path(agent_path: &str) -> &str {
    agent_path.rsplit_once('/').map_or("", |(p, _)| p)
}

/// Sort key that orders `explore-2` before `explore-10`.
fn natural_key(path: &str) -> Vec<(String, u64)> {
    path.split('/')
        .map(|seg| match seg.rsplit_once('-') {
            Some((name, n)) if n.parse::<u64>().is_ok() => {
                (name.to_owned(), n.parse().unwrap_or(0))
            }
            _ => (seg.to_owned(), 0),
        })
        .collect()
}

pub(super) fn append_event(record_dir: &Path, event: &AgentEvent) {
    let path = record_dir.join("agents.jsonl");
    let mut line = serde_json::to_string(event).unwrap_or_default();
    line.push('\n');
    // One write per line on an O_APPEND file: concurrent writers (siblings,
    // nested agents in other processes) never interleave within a line.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        tracing::warn!("failed to append to {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_segments() {
        assert_eq!(parent_path("code/explore-1/coder-2"), "code/explore-1");
        assert_eq!(parent_path("code"), "");
        let d = agent_dir(Path::new("/r"), "code/explore-1");
        assert_eq!(d, Path::new("/r/agents/code__explore-1"));
        assert!(natural_key("code/explore-2") < natural_key("code/explore-10"));
    }

    #[test]
    fn tree_nests_children_under_their_parents() {
        let tmp = tempfile::tempdir().unwrap();
        let rec = tmp.path();
        for (path, status) in [
            ("code/coder-1", AgentStatus::Succeeded),
            ("code/coder-1/explore-1", AgentStatus::Succeeded),
            ("code/explore-10", AgentStatus::Running),
            ("code/explore-2", AgentStatus::Failed),
        ] {
            let mut r = AgentResult::running(path, "r", "t", 1);
            r.status = status;
            r.tokens.prompt = 5;
            write_result(rec, &r).unwrap();
        }
        let ev = AgentEvent {
            agent_path: "code/explore-2".into(),
            parent: "code".into(),
            role: "explore".into(),
            task: "t".into(),
            status: AgentStatus::TimedOut,
            limit: Some("time".into()),
            reason: Some("killed".into()),
            turns: 1,
            tokens: TokenCount {
                prompt: 9,
                completion: 1,
                ..TokenCount::default()
            },
            duration_ms: 5,
            pid: 1,
            spawned_at_us: 1,
        };
        append_event(rec, &ev);
        let tree = agent_tree(rec);
        let paths: Vec<&str> = tree.iter().map(|n| n.agent_path.as_str()).collect();
        // Recorded spawns first (by time), then the rest in natural order.
        assert_eq!(paths, ["code/explore-2", "code/coder-1", "code/explore-10"]);
        assert_eq!(tree[0].status, AgentStatus::TimedOut);
        assert_eq!(tree[0].limit.as_deref(), Some("time"));
        assert_eq!(tree[0].tokens.total(), 10);
        assert_eq!(tree[1].children.len(), 1);
        assert_eq!(tree[1].children[0].agent_path, "code/coder-1/explore-1");
        assert_eq!(tree[1].children[0].parent, "code/coder-1");
        assert_eq!(tree[2].status, AgentStatus::Running);
        assert!(agent_tree(&rec.join("nope")).is_empty());
    }
}
