//! The offline replay model: answers from a file of recorded assistant turns.
//!
//! It powers the demo and deterministic tests. No model is called, and it
//! always says so: [`ReplayModel::label`] reads "replay of … (recorded
//! responses; no model is called)" and [`ChatModel::is_replay`] is true.
//!
//! # File format (`orch-replay/1`)
//!
//! ```json
//! { "format": "orch-replay/1",
//!   "note": "free text",
//!   "agents": {
//!     "code": [
//!       { "content": "optional text",
//!         "tool_calls": [ { "id": "c1", "name": "read_file", "arguments": { "path": "x.py" } } ],
//!         "usage": { "prompt_tokens": 1, "completion_tokens": 2 } } ],
//!     "review": [ ] } }
//! ```
//!
//! - `agents` maps an agent path (exactly as in [`ChatRequest::agent_path`],
//!   e.g. `code` or `code/explore-1`) to its assistant turns, served in order,
//!   one per request. Each agent has its own cursor.
//! - A turn has optional `content`, optional `tool_calls` and optional `usage`.
//! - A tool call's `arguments` is either a JSON object (or any non-string JSON
//!   value), sent to the agent as its JSON text, or a string, sent verbatim, so
//!   malformed calls can be replayed. `id` is optional; a missing one becomes
//!   `call_<agent>_<turn>_<call>` (both numbers start at 1).
//! - `usage` is passed through when recorded. When absent it is an *estimate*:
//!   prompt tokens = bytes of the serialized request (messages and tools) / 4,
//!   completion tokens = bytes of the serialized reply message / 4.
//! - When an agent has no script, or its turns are used up, the request fails
//!   with [`LlmError::ReplayExhausted`].

use super::{
    BoxFuture, ChatMessage, ChatModel, ChatRequest, ChatResponse, FunctionCall, LlmError,
    MessageRole, ToolCall, Usage, estimate_usage,
};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Mutex;

/// The only `format` this version reads.
pub const REPLAY_FORMAT: &str = "orch-replay/1";

/// A [`ChatModel`] that replays recorded assistant turns per agent.
#[derive(Debug)]
pub struct ReplayModel {
    origin: String,
    /// The file, absolute, when loaded from one (a subagent reloads it).
    source: Option<std::path::PathBuf>,
    note: Option<String>,
    scripts: BTreeMap<String, Vec<TurnSpec>>,
    cursors: Mutex<HashMap<String, usize>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayFileSpec {
    format: String,
    #[serde(default)]
    note: Option<String>,
    #[serde(default)]
    agents: BTreeMap<String, Vec<TurnSpec>>,
    /// MCP tools and results of the recorded stages (read by the stage:
    /// `crate::mcp::replay`).
    #[serde(default)]
    #[allow(dead_code)]
    mcp: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnSpec {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<CallSpec>,
    #[serde(default)]
    usage: Option<UsageSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CallSpec {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default = "empty_object")]
    arguments: serde_json::Value,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageSpec {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    total_tokens: Option<u64>,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

impl ReplayModel {
    /// Loads a replay file; errors name the file and, for bad JSON, the line and column.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, LlmError> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| LlmError::ReplayFile {
            file: origin.clone(),
            reason: e.to_string(),
        })?;
        let mut model = Self::from_str(&text, &origin)?;
        model.source = std::path::absolute(path).ok();
        Ok(model)
    }

    /// Parses a replay from `text`; `origin` names it in labels and errors.
    pub fn from_str(text: &str, origin: &str) -> Result<Self, LlmError> {
        let file_error = |reason: String| LlmError::ReplayFile {
            file: origin.to_owned(),
            reason,
        };
        let spec: ReplayFileSpec = serde_json::from_str(text).map_err(|e| {
            file_error(format!(
                "line {}, column {}: {}",
                e.line(),
                e.column(),
                strip_position(&e.to_string())
            ))
        })?;
        if spec.format != REPLAY_FORMAT {
            return Err(file_error(format!(
                "`format` is `{}`; this orch reads `{REPLAY_FORMAT}`",
                spec.format
            )));
        }
        Ok(ReplayModel {
            origin: origin.to_owned(),
            source: None,
            note: spec.note,
            scripts: spec.agents,
            cursors: Mutex::new(HashMap::new()),
        })
    }

    /// The file's free-text `note`, if any.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// The agent paths that have a script.
    pub fn agents(&self) -> impl Iterator<Item = &str> {
        self.scripts.keys().map(String::as_str)
    }

    fn next_turn(&self, agent: &str) -> Result<(usize, TurnSpec), LlmError> {
        let script = self.scripts.get(agent).map(Vec::as_slice).unwrap_or(&[]);
        // A poisoned lock only means another request panicked mid-update of a
        // plain counter map, which is still consistent.
        let mut cursors = self.cursors.lock().unwrap_or_else(|e| e.into_inner());
        let cursor = cursors.entry(agent.to_owned()).or_insert(0);
        let turn = script
            .get(*cursor)
            .cloned()
            .ok_or_else(|| LlmError::ReplayExhausted {
                agent: agent.to_owned(),
                file: self.origin.clone(),
                available: script.len(),
            })?;
        *cursor += 1;
        Ok((*cursor, turn))
    }

    fn respond(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let agent = req.agent_path.as_str();
        let (turn_no, turn) = self.next_turn(agent)?;
        let tool_calls: Vec<ToolCall> = turn
            .tool_calls
            .into_iter()
            .enumerate()
            .map(|(i, call)| ToolCall {
                id: call
                    .id
                    .unwrap_or_else(|| format!("call_{agent}_{turn_no}_{}", i + 1)),
                kind: "function".to_owned(),
                function: FunctionCall {
                    name: call.name,
                    arguments: match call.arguments {
                        serde_json::Value::String(raw) => raw,
                        other => other.to_string(),
                    },
                },
            })
            .collect();
        let finish_reason = if tool_calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        let message = ChatMessage {
            role: MessageRole::Assistant,
            content: turn.content,
            tool_calls,
            tool_call_id: None,
        };
        let usage = match turn.usage {
            Some(u) => Usage {
                prompt_tokens: u.prompt_tokens,
                completion_tokens: u.completion_tokens,
                total_tokens: u
                    .total_tokens
                    .unwrap_or(u.prompt_tokens + u.completion_tokens),
                estimated: false,
                cost_usd: None,
                ..Usage::default()
            },
            None => estimate_usage(req, &message),
        };
        Ok(ChatResponse {
            message,
            usage,
            finish_reason: Some(finish_reason.to_owned()),
        })
    }
}

impl ChatModel for ReplayModel {
    fn complete<'a>(
        &'a self,
        req: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        Box::pin(std::future::ready(self.respond(req)))
    }

    fn label(&self) -> String {
        format!(
            "replay of {} (recorded responses; no model is called)",
            self.origin
        )
    }

    fn model_name(&self) -> String {
        "replay".to_owned()
    }

    fn is_replay(&self) -> bool {
        true
    }

    fn spawn_settings(&self) -> Option<super::ModelSpawn> {
        self.source.clone().map(super::ModelSpawn::Replay)
    }
}

/// An `orch-replay/1` file answering each agent (path → its transcript) with
/// the assistant turns it recorded: call ids and arguments as written, so a
/// replay's tool results can be compared call by call with the original's.
/// Usage is not in a transcript, so a replay estimates it.
pub fn from_transcripts(
    note: &str,
    agents: &BTreeMap<String, Vec<ChatMessage>>,
) -> serde_json::Value {
    let agents: serde_json::Map<String, serde_json::Value> = agents
        .iter()
        .map(|(path, messages)| {
            let turns: Vec<serde_json::Value> = messages
                .iter()
                .filter(|m| m.role == MessageRole::Assistant)
                .map(|m| {
                    let mut turn = serde_json::Map::new();
                    if let Some(content) = m.content.as_deref().filter(|c| !c.is_empty()) {
                        turn.insert("content".into(), content.into());
                    }
                    if !m.tool_calls.is_empty() {
                        let calls: Vec<serde_json::Value> = m
                            .tool_calls
                            .iter()
                            .map(|c| {
                                // A JSON object as an object; anything else verbatim.
                                let arguments = serde_json::from_str::<serde_json::Value>(
                                    &c.function.arguments,
                                )
                                .ok()
                                .filter(|v| v.is_object())
                                .unwrap_or_else(|| c.function.arguments.clone().into());
                                serde_json::json!({"id": c.id, "name": c.function.name, "arguments": arguments})
                            })
                            .collect();
                        turn.insert("tool_calls".into(), calls.into());
                    }
                    serde_json::Value::Object(turn)
                })
                .collect();
            (path.clone(), turns.into())
        })
        .collect();
    serde_json::json!({"format": REPLAY_FORMAT, "note": note, "agents": agents})
}

/// serde_json appends " at line L column C"; the message already leads with it.
fn strip_position(message: &str) -> &str {
    match message.rfind(" at line ") {
        Some(i) => &message[..i],
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolDef;

    const FILE: &str = r#"{
      "format": "orch-replay/1",
      "note": "two agents",
      "agents": {
        "code": [
          { "tool_calls": [
              { "id": "c1", "name": "read_file", "arguments": { "path": "x.py" } },
              { "name": "bash", "arguments": "{\"command\": \"ls" } ],
            "usage": { "prompt_tokens": 10, "completion_tokens": 2 } },
          { "content": "done" }
        ],
        "review": [ { "content": "looks fine" } ]
      }
    }"#;

    fn req(agent: &str) -> ChatRequest {
        ChatRequest {
            messages: vec![ChatMessage::system("be brief"), ChatMessage::user("fix it")],
            tools: vec![ToolDef {
                name: "bash",
                description: "run a command",
                parameters: serde_json::json!({"type": "object"}),
            }],
            agent_path: agent.to_owned(),
            call_mode: crate::llm::CallMode::Native,
        }
    }

    fn complete(model: &ReplayModel, agent: &str) -> Result<ChatResponse, LlmError> {
        model.respond(&req(agent))
    }

    #[test]
    fn serves_each_agent_in_order_with_its_own_cursor() {
        let m = ReplayModel::from_str(FILE, "demo.json").unwrap();
        let first = complete(&m, "code").unwrap();
        assert_eq!(first.message.tool_calls.len(), 2);
        assert_eq!(first.finish_reason.as_deref(), Some("tool_calls"));
        // Another agent does not move the coder's cursor.
        let review = complete(&m, "review").unwrap();
        assert_eq!(review.message.content.as_deref(), Some("looks fine"));
        assert_eq!(review.finish_reason.as_deref(), Some("stop"));
        let second = complete(&m, "code").unwrap();
        assert_eq!(second.message.content.as_deref(), Some("done"));
        assert!(second.message.tool_calls.is_empty());
        assert_eq!(m.note(), Some("two agents"));
        assert_eq!(m.agents().collect::<Vec<_>>(), ["code", "review"]);
    }

    #[test]
    fn object_arguments_are_encoded_and_strings_kept_verbatim() {
        let m = ReplayModel::from_str(FILE, "demo.json").unwrap();
        let calls = complete(&m, "code").unwrap().message.tool_calls;
        assert_eq!(calls[0].id, "c1");
        assert_eq!(calls[0].kind, "function");
        assert_eq!(calls[0].function.name, "read_file");
        let args: serde_json::Value = serde_json::from_str(&calls[0].function.arguments).unwrap();
        assert_eq!(args, serde_json::json!({"path": "x.py"}));
        assert_eq!(calls[1].id, "call_code_1_2");
        assert_eq!(calls[1].function.arguments, r#"{"command": "ls"#);
    }

    #[test]
    fn usage_is_recorded_or_estimated() {
        let m = ReplayModel::from_str(FILE, "demo.json").unwrap();
        let recorded = complete(&m, "code").unwrap().usage;
        assert_eq!(
            recorded,
            Usage {
                prompt_tokens: 10,
                completion_tokens: 2,
                total_tokens: 12,
                estimated: false,
                cost_usd: None,
                ..Default::default()
            }
        );
        let estimated = complete(&m, "code").unwrap().usage;
        assert!(estimated.estimated);
        let r = req("code");
        let request_bytes = serde_json::to_vec(&r.messages).unwrap().len()
            + serde_json::to_vec(&r.tools).unwrap().len();
        assert_eq!(estimated.prompt_tokens, (request_bytes / 4) as u64);
        assert!(estimated.completion_tokens > 0);
        assert_eq!(
            estimated.total_tokens,
            estimated.prompt_tokens + estimated.completion_tokens
        );
    }

    #[test]
    fn exhausted_and_unknown_agents_fail_clearly() {
        let m = ReplayModel::from_str(FILE, "demo.json").unwrap();
        complete(&m, "review").unwrap();
        let err = complete(&m, "review").unwrap_err();
        assert!(
            matches!(&err, LlmError::ReplayExhausted { agent, available: 1, file } if agent == "review" && file == "demo.json"),
            "{err:?}"
        );
        // Failing does not advance: still exhausted, still 1 available.
        assert!(matches!(
            complete(&m, "review"),
            Err(LlmError::ReplayExhausted { available: 1, .. })
        ));
        let err = complete(&m, "code/explore-1").unwrap_err();
        assert!(
            matches!(err, LlmError::ReplayExhausted { available: 0, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn is_always_labelled_a_replay() {
        let m = ReplayModel::from_str(FILE, "fixtures/demo.json").unwrap();
        assert!(m.is_replay());
        assert_eq!(m.model_name(), "replay");
        assert_eq!(
            m.label(),
            "replay of fixtures/demo.json (recorded responses; no model is called)"
        );
    }

    #[test]
    fn bad_files_name_the_file_and_position() {
        let err = ReplayModel::from_str(
            "{\n  \"format\": \"orch-replay/1\",\n  \"agents\": [}",
            "r.json",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("r.json") && err.contains("line 3"), "{err}");
        let err = ReplayModel::from_str(r#"{"format":"orch-replay/2","agents":{}}"#, "r.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("orch-replay/1"), "{err}");
        let err = ReplayModel::from_str(
            r#"{"format":"orch-replay/1","agents":{"code":[{"contnt":"x"}]}}"#,
            "r.json",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("contnt"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.json");
        let err = ReplayModel::from_file(&missing).unwrap_err().to_string();
        assert!(err.contains("missing.json"), "{err}");
        let ok = dir.path().join("ok.json");
        std::fs::write(&ok, FILE).unwrap();
        let m = ReplayModel::from_file(&ok).unwrap();
        assert!(m.label().contains("ok.json"));
    }

    #[tokio::test]
    async fn works_through_the_trait_object() {
        let m: Box<dyn ChatModel> = Box::new(ReplayModel::from_str(FILE, "demo.json").unwrap());
        let r = req("review");
        let resp = tokio::time::timeout(std::time::Duration::from_secs(5), m.complete(&r))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(resp.message.role, MessageRole::Assistant);
    }
}
