//! Following a live run from another terminal: which run (`[run]` left
//! out: the newest live one, else the newest) and `orch
//! log --follow`. Everything is read from the run record
//! ([`crate::runlog::live`]); the run process does nothing for a follower.

use super::render::render_event;
use crate::cli::error::CliError;
use crate::cli::output::Out;
use crate::git;
use crate::runlog;
use crate::runlog::ActionEvent;
use crate::runlog::live::{LineTail, POLL_INTERVAL, RunWatch, prices_for};
use std::path::{Path, PathBuf};

/// The record directory of the run to follow: `run` as `orch show` reads
/// it (an id, a unique prefix, `last`), or when none is given the newest
/// run a live process drives, else the newest run.
pub(super) fn pick_run(repo: &Path, run: Option<&str>) -> Result<PathBuf, CliError> {
    if let Some(run) = run {
        let (_, root, _) = crate::cli::record::open(repo, run)?;
        return Ok(root);
    }
    let info = git::open_repo(repo)?;
    let ids = runlog::list_run_ids(&info.common_dir);
    let root_of = |id: &String| runlog::runs_dir(&info.common_dir).join(id);
    if let Some(live) = ids.iter().map(root_of).find(|r| runlog::run_is_live(r)) {
        return Ok(live);
    }
    let (_, root, _) = crate::cli::record::open(repo, "last")?;
    Ok(root)
}

/// Opens the run at `root` for following.
pub(super) fn open_watch(root: &Path) -> Result<RunWatch, CliError> {
    let state = runlog::RunDir::at(root.to_path_buf()).read_state()?;
    Ok(RunWatch::open(root, prices_for(&state))?)
}

/// `orch log --follow`: prints every stage's log so far (or `stage`'s),
/// and its subagents' (`agents/*/actions.jsonl`, each under its own header:
/// a subagent works while its parent's log waits on its `spawn_agent`
/// call), then each line as it is appended, until the run ends; returns the
/// run's exit code. `stage` may be a subagent's path (`code/explore-1`):
/// then only its log and its children's. `json`: the raw lines.
pub(super) fn follow_log(root: &Path, stage: Option<&str>, json: bool) -> Result<i32, CliError> {
    let mut watch = open_watch(root)?;
    let top = stage.map(|s| s.split('/').next().unwrap_or(s));
    if let Some(id) = top {
        super::shared::stage(watch.state(), id)?;
    }
    // A subagent's path: its stage's own lines are not shown.
    let only_agents = stage.is_some_and(|s| s.contains('/'));
    let mut agents = AgentLogs::default();
    let mut last_header: Option<String> = None;
    loop {
        let mut batch: Vec<(String, Vec<String>)> = watch
            .poll()?
            .into_iter()
            .filter(|(id, _)| !only_agents && top.is_none_or(|s| s == id))
            .collect();
        batch.extend(agents.poll(root, stage)?);
        let mut out = Out::stdout();
        for (id, lines) in batch {
            if json {
                for line in &lines {
                    out.text(line)?;
                    out.text("\n")?;
                }
                continue;
            }
            if last_header.as_deref() != Some(id.as_str()) {
                let role = match watch.state().stage(&id) {
                    Some(s) => s.role.clone(),
                    None => agents.role(&id),
                };
                out.untrusted(&format!("=== {id} ({role})\n"))?;
                last_header = Some(id.clone());
            }
            for line in &lines {
                match runlog::event::parse_line(line) {
                    Some(ev) => out.untrusted(&format!("{}\n", render_event(&ev)))?,
                    None => out.untrusted(&format!(
                        "  [unreadable line: {}]\n",
                        crate::text::cap_bytes(line, 80)
                    ))?,
                }
            }
        }
        out.finish()?;
        if let Some(code) = watch.exit_code() {
            let view = watch.view();
            crate::ui::status_line(&format!(
                "orch: run {} {} (exit {code})",
                view.run_id,
                view.status.as_str()
            ));
            return Ok(code);
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// The subagents' logs a follower tails, by agent path, as they appear.
#[derive(Default)]
struct AgentLogs {
    tails: std::collections::BTreeMap<String, (LineTail, Option<String>)>,
}

impl AgentLogs {
    /// The lines appended to each subagent log under `root/agents` since the
    /// last call (agents of `stage` and below, when given), in path order.
    fn poll(
        &mut self,
        root: &Path,
        stage: Option<&str>,
    ) -> Result<Vec<(String, Vec<String>)>, CliError> {
        let dir = root.join("agents");
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.file_name().to_string_lossy().replace("__", "/");
            let wanted = stage.is_none_or(|s| path == s || path.starts_with(&format!("{s}/")));
            if wanted && !self.tails.contains_key(&path) {
                let tail = LineTail::new(entry.path().join("actions.jsonl"));
                self.tails.insert(path, (tail, None));
            }
        }
        let mut out = Vec::new();
        for (path, (tail, role)) in &mut self.tails {
            let lines = tail.read_new()?;
            if lines.is_empty() {
                continue;
            }
            if role.is_none() {
                *role = lines
                    .iter()
                    .find_map(|l| match runlog::event::parse_line(l) {
                        Some(runlog::event::LogLine {
                            event: runlog::event::Logged::Known(ActionEvent::ChildStart(e)),
                            ..
                        }) => Some(e.role),
                        _ => None,
                    });
            }
            out.push((path.clone(), lines));
        }
        Ok(out)
    }

    /// The role of subagent `path`, as its log's start says (`?` before).
    fn role(&self, path: &str) -> String {
        self.tails
            .get(path)
            .and_then(|(_, r)| r.clone())
            .unwrap_or_else(|| "?".to_owned())
    }
}
