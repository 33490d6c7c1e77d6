//! `orch replay <run>`: a recorded run as an offline regression test.
//!
//! The run's frozen plan (`plan.json`: pipeline and roles) runs again from
//! the same base commit, with every model turn answered from that run's
//! recorded transcripts (the replay model: no model is called, and the new
//! run is labelled a replay). Tools run for real, so the replay shows whether
//! the same turns still lead to the same results: it reports the first tool
//! result that differs from the recorded one, per stage, and whether the
//! final tree equals the original's. `--export FILE` writes the replay file
//! (`orch-replay/1`) instead, for `orch run … --replay FILE`.
//!
//! Exit codes: 0 when the replay reproduced the run (no divergence, equal
//! final tree), 1 when it did not, and the usual codes for errors.

use super::args::{LimitArgs, ModelArgs};
use super::error::CliError;
use super::output::{Out, ignore_closed};
use super::record::resolve_run_id;
use super::session::SessionBuilder;
use crate::exit;
use crate::llm::{ChatMessage, MessageRole};
use crate::runlog::{RunState, StageStatus};
use crate::runner::{self, RunOptions};
use crate::ui::Ui;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Arguments of `orch replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The run id to replay (`last` is the newest)
    pub run: String,
    /// The repository the run belongs to
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Write the run's replay file (orch-replay/1) to FILE and stop; `orch run … --replay FILE` plays it
    #[arg(long, value_name = "FILE")]
    pub export: Option<PathBuf>,
    /// Budget and compaction settings of the replay.
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Allow commands that a role's `ask` rules would ask about
    #[arg(long)]
    pub yes: bool,
    /// Print one JSON object on stdout instead of the human report
    #[arg(long)]
    pub json: bool,
}

/// The `orch run` line that plays an exported replay file: the run's
/// pipeline (by name when it was a built-in, else its file), its repository,
/// its issue (as the record holds it) and base, every path absolute and
/// quoted for a shell, so it runs from any directory.
fn play_command(state: &RunState, origin: &str, record: &Path, file: &Path) -> String {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let pipeline = match origin.strip_prefix("built-in ") {
        Some(_) => state.pipeline.clone(),
        None if Path::new(origin).is_file() => absolute(Path::new(origin)).display().to_string(),
        None => state.pipeline.clone(),
    };
    let words = [
        "orch".to_owned(),
        "run".to_owned(),
        pipeline,
        "--repo".to_owned(),
        state.repo.clone(),
        "--issue".to_owned(),
        absolute(&record.join("issue.md")).display().to_string(),
        "--replay".to_owned(),
        absolute(file).display().to_string(),
        "--base".to_owned(),
        state.base_commit.to_string(),
    ];
    words
        .iter()
        .map(|w| shell_word(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `w` as one shell word: as it is when it holds only characters no shell
/// treats specially, else single-quoted.
fn shell_word(w: &str) -> String {
    let plain = !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:@%+=,".contains(c));
    if plain {
        w.to_owned()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

/// The first tool result of a stage that differs from the recorded one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Divergence {
    /// The agent path (a stage id, or `stage/child` for a subagent).
    pub agent: String,
    /// The tool call's id (as recorded).
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// The first line that differs, as recorded (`None`: no such call was recorded).
    pub recorded: Option<String>,
    /// The same line in the replay (`None`: the replay made no such call).
    pub replayed: Option<String>,
}

/// `orch replay`.
pub(super) async fn cmd_replay(args: ReplayArgs) -> Result<i32, CliError> {
    let run_id = resolve_run_id(&args.repo, &args.run)?;
    let info = crate::git::open_repo(&args.repo)?;
    let (run_dir, state, plan) = runner::load_run(&info.common_dir, &run_id)?;
    let recorded = transcripts(&run_dir.root)?;
    if recorded.is_empty() {
        return Err(CliError::Invalid(format!(
            "failed to replay run `{run_id}`: it has no recorded transcripts (no stage ran)"
        )));
    }
    let note = format!(
        "Recorded turns of orch run `{run_id}` (pipeline `{}`, base {}); tools run for real.",
        state.pipeline, state.base_commit
    );
    let mut replay = crate::llm::replay::from_transcripts(&note, &recorded);
    let mcp = crate::mcp::replay::recorded(&run_dir.root, &recorded);
    if mcp.as_object().is_some_and(|m| !m.is_empty()) {
        replay["mcp"] = mcp;
    }
    let text = serde_json::to_string_pretty(&replay).unwrap_or_default() + "\n";
    if let Some(file) = &args.export {
        std::fs::write(file, &text)
            .map_err(|e| CliError::Invalid(format!("failed to write {}: {e}", file.display())))?;
        let mut out = Out::stdout();
        let result = writeln!(
            out,
            "wrote {} ({}); play it with: {}",
            file.display(),
            crate::text::plural(recorded.len() as u64, "agent", "agents"),
            play_command(&state, &plan.pipeline.origin, &run_dir.root, file)
        )
        .and_then(|()| out.finish());
        ignore_closed(result)?;
        return Ok(exit::OK);
    }

    // The replay file lives in the original run's record, next to what it replays.
    let file = run_dir.root.join("replay.json");
    std::fs::write(&file, &text)
        .map_err(|e| CliError::Invalid(format!("failed to write {}: {e}", file.display())))?;
    let model = ModelArgs {
        replay: Some(file.clone()),
        ..ModelArgs::default()
    };
    let session = SessionBuilder::new(&model, Some(&args.repo))?
        .recorded_limits(state.settings.as_ref())
        .assume_yes(args.yes)
        .max_parallel(1)
        .build(&args.limits)?;
    let issue = std::fs::read_to_string(run_dir.root.join("issue.md")).unwrap_or_default();
    let ui = Ui::new(args.json);
    let summary = runner::run_pipeline(
        RunOptions {
            repo: args.repo.clone(),
            pipeline: plan.pipeline,
            roles: plan.roles,
            issue,
            issue_json: None,
            base: state.base_commit.to_string(),
            session,
        },
        &ui,
    )
    .await?;
    let (new_dir, _, _) = runner::load_run(&info.common_dir, &summary.state.run_id)?;
    let replayed = transcripts(&new_dir.root)?;
    let divergences = diverged(&recorded, &replayed);
    let original_tree = final_tree(&info.common_dir, &state)?;
    let replay_tree = final_tree(&info.common_dir, &summary.state)?;
    let same_tree = original_tree.is_some() && original_tree == replay_tree;
    let reproduced = divergences.is_empty() && same_tree;

    let mut out = Out::stdout();
    let result = if args.json {
        let j = serde_json::json!({
            "replay_of": run_id.as_str(),
            "run_id": summary.state.run_id.as_str(),
            "status": summary.state.status.as_str(),
            "model": summary.state.model_label,
            "reproduced": reproduced,
            "divergences": divergences,
            "final_tree": {"original": original_tree, "replay": replay_tree, "equal": same_tree},
        });
        writeln!(out, "{j}")
    } else {
        report(
            &mut out,
            run_id.as_str(),
            &summary.state,
            &divergences,
            (&original_tree, &replay_tree),
        )
    };
    ignore_closed(result.and_then(|()| out.finish()))?;
    Ok(if reproduced {
        exit::OK
    } else {
        exit::STAGE_FAILED
    })
}

/// The human report.
fn report(
    out: &mut Out,
    original: &str,
    state: &RunState,
    divergences: &[Divergence],
    (original_tree, replay_tree): (&Option<String>, &Option<String>),
) -> Result<(), CliError> {
    writeln!(
        out,
        "replay of run {original} as run {} ({}): {}",
        state.run_id,
        state.model_label,
        state.status.as_str()
    )?;
    if divergences.is_empty() {
        writeln!(
            out,
            "diverged: no (every tool result equals the recorded one)"
        )?;
    }
    for d in divergences {
        writeln!(
            out,
            "diverged: agent `{}`, call {} ({}): recorded {} / replayed {}",
            d.agent,
            d.call_id,
            d.tool,
            d.recorded
                .as_deref()
                .map_or("(no such call)".to_owned(), |l| format!("{l:?}")),
            d.replayed
                .as_deref()
                .map_or("(no such call)".to_owned(), |l| format!("{l:?}")),
        )?;
    }
    match (original_tree, replay_tree) {
        (Some(a), Some(b)) if a == b => writeln!(out, "final tree: equal to the original's ({a})")?,
        (a, b) => writeln!(
            out,
            "final tree: differs (original {}, replay {})",
            a.as_deref().unwrap_or("none"),
            b.as_deref().unwrap_or("none")
        )?,
    }
    Ok(())
}

/// Every recorded transcript of a run: stages (`stages/<id>/transcript.json`)
/// and subagents (`agents/<path with / as __>/transcript.json`), by agent path.
fn transcripts(run_root: &Path) -> Result<BTreeMap<String, Vec<ChatMessage>>, CliError> {
    let mut out = BTreeMap::new();
    for (dir, slash) in [("stages", false), ("agents", true)] {
        let Ok(entries) = std::fs::read_dir(run_root.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path().join("transcript.json");
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let messages: Vec<ChatMessage> = serde_json::from_str(&text).map_err(|e| {
                CliError::Invalid(format!("failed to read {}: {e}", path.display()))
            })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let agent = if slash { name.replace("__", "/") } else { name };
            out.insert(agent, messages);
        }
    }
    Ok(out)
}

/// The (call id, tool name, result) of each tool message, in order.
fn tool_results(messages: &[ChatMessage]) -> Vec<(String, String, String)> {
    let names: BTreeMap<&str, &str> = messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .map(|c| (c.id.as_str(), c.function.name.as_str()))
        .collect();
    messages
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .map(|m| {
            let id = m.tool_call_id.clone().unwrap_or_default();
            let name = names.get(id.as_str()).copied().unwrap_or("?").to_owned();
            (id, name, m.content.clone().unwrap_or_default())
        })
        .collect()
}

/// Per agent, the first tool result that differs between the recorded and
/// the replayed transcripts (an agent missing from one side counts too).
pub(crate) fn diverged(
    recorded: &BTreeMap<String, Vec<ChatMessage>>,
    replayed: &BTreeMap<String, Vec<ChatMessage>>,
) -> Vec<Divergence> {
    let empty = Vec::new();
    let mut out = Vec::new();
    let agents: std::collections::BTreeSet<&String> =
        recorded.keys().chain(replayed.keys()).collect();
    for agent in agents {
        let was = tool_results(recorded.get(agent).unwrap_or(&empty));
        let now = tool_results(replayed.get(agent).unwrap_or(&empty));
        for i in 0..was.len().max(now.len()) {
            let (a, b) = (was.get(i), now.get(i));
            if a.map(|x| without_timing(&x.2)) == b.map(|x| without_timing(&x.2)) {
                continue;
            }
            let (call_id, tool) = a
                .or(b)
                .map(|x| (x.0.clone(), x.1.clone()))
                .unwrap_or_default();
            let (recorded, replayed) =
                first_difference(a.map(|x| x.2.as_str()), b.map(|x| x.2.as_str()));
            out.push(Divergence {
                agent: agent.clone(),
                call_id,
                tool,
                recorded,
                replayed,
            });
            break;
        }
    }
    out
}

/// A tool result without the wall-clock time bash appends to its status
/// line (`[exit 0, 0.1s]` → `[exit 0]`): how long a command took is not what
/// it did, and a loaded machine must not turn a faithful replay into a
/// divergence.
fn without_timing(result: &str) -> std::borrow::Cow<'_, str> {
    let Some(start) = result.rfind('[') else {
        return result.into();
    };
    let tail = &result[start..];
    let timed = tail
        .strip_suffix("s]")
        .and_then(|t| t.rsplit_once(", "))
        .filter(|(_, secs)| {
            !secs.is_empty() && secs.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        });
    match timed {
        Some((status, _)) => format!("{}{status}]", &result[..start]).into(),
        None => result.into(),
    }
}

/// The first line where `a` and `b` differ, from each (`None` for a side
/// that is missing).
fn first_difference(a: Option<&str>, b: Option<&str>) -> (Option<String>, Option<String>) {
    let (Some(a), Some(b)) = (a, b) else {
        let line = |s: Option<&str>| s.map(|s| s.lines().next().unwrap_or("").to_owned());
        return (line(a), line(b));
    };
    let (mut la, mut lb) = (a.lines(), b.lines());
    loop {
        match (la.next(), lb.next()) {
            (Some(x), Some(y)) if x == y => continue,
            (x, y) => {
                return (
                    Some(x.unwrap_or("(end)").to_owned()),
                    Some(y.unwrap_or("(end)").to_owned()),
                );
            }
        }
    }
}

/// The tree id of a run's final branch when it succeeded, else of its last
/// succeeded stage's commit (`None` when no stage succeeded).
fn final_tree(common: &Path, state: &RunState) -> Result<Option<String>, CliError> {
    let commit = match crate::git::Repo::at(common).branch_sha(&state.final_branch)? {
        Some(sha) => Some(sha),
        None => state
            .stages
            .iter()
            .rev()
            .find(|s| s.status == StageStatus::Succeeded)
            .and_then(|s| s.commit.clone()),
    };
    let Some(commit) = commit else {
        return Ok(None);
    };
    Ok(Some(crate::git::Repo::at(common).tree_of(&commit)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, name: &str) -> ChatMessage {
        ChatMessage {
            role: MessageRole::Assistant,
            content: None,
            tool_calls: vec![crate::llm::ToolCall {
                id: id.into(),
                kind: "function".into(),
                function: crate::llm::FunctionCall {
                    name: name.into(),
                    arguments: "{}".into(),
                },
            }],
            tool_call_id: None,
        }
    }

    #[test]
    fn the_first_differing_tool_result_is_reported_per_agent() {
        let run = |out: &str| {
            vec![
                ChatMessage::user("task"),
                call("c1", "read_file"),
                ChatMessage::tool("c1", "same"),
                call("c2", "bash"),
                ChatMessage::tool("c2", format!("line 1\n{out}\n")),
            ]
        };
        let a: BTreeMap<String, Vec<ChatMessage>> = [("code".to_owned(), run("old"))].into();
        let b: BTreeMap<String, Vec<ChatMessage>> = [("code".to_owned(), run("new"))].into();
        assert!(diverged(&a, &a).is_empty());
        assert_eq!(without_timing("out\n[exit 0, 12.3s]"), "out\n[exit 0]");
        assert_eq!(
            without_timing("[killed by signal 9, 0.0s]"),
            "[killed by signal 9]"
        );
        assert_eq!(without_timing("a [list, of] things"), "a [list, of] things");
        let slow: BTreeMap<String, Vec<ChatMessage>> = [(
            "code".to_owned(),
            vec![
                call("c1", "bash"),
                ChatMessage::tool("c1", "ok\n[exit 0, 0.1s]"),
            ],
        )]
        .into();
        let fast: BTreeMap<String, Vec<ChatMessage>> = [(
            "code".to_owned(),
            vec![
                call("c1", "bash"),
                ChatMessage::tool("c1", "ok\n[exit 0, 0.0s]"),
            ],
        )]
        .into();
        assert!(diverged(&slow, &fast).is_empty(), "only the time differs");
        let d = diverged(&a, &b);
        assert_eq!(
            d,
            [Divergence {
                agent: "code".into(),
                call_id: "c2".into(),
                tool: "bash".into(),
                recorded: Some("old".into()),
                replayed: Some("new".into()),
            }]
        );
    }
}
