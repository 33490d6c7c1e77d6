//! Following a live run from another terminal: which run (`[run]` left
//! out: the newest live one, else the newest) and `orch
//! log --follow`. Everything is read from the run record
//! ([`crate::runlog::live`]); the run process does nothing for a follower.

use super::render::render_event;
use crate::cli::error::CliError;
use crate::cli::output::Out;
use crate::git;
use crate::runlog;
use crate::runlog::live::{POLL_INTERVAL, RunWatch, prices_for};
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
/// then each line as it is appended, until the run ends; returns the run's
/// exit code. `json`: the raw lines.
pub(super) fn follow_log(root: &Path, stage: Option<&str>, json: bool) -> Result<i32, CliError> {
    let mut watch = open_watch(root)?;
    if let Some(id) = stage {
        super::shared::stage(watch.state(), id)?;
    }
    let mut last_header: Option<String> = None;
    loop {
        let batch = watch.poll()?;
        let mut out = Out::stdout();
        for (id, lines) in batch {
            if stage.is_some_and(|s| s != id) {
                continue;
            }
            if json {
                for line in &lines {
                    out.text(line)?;
                    out.text("\n")?;
                }
                continue;
            }
            if last_header.as_deref() != Some(id.as_str()) {
                let role = watch.state().stage(&id).map_or("?", |s| s.role.as_str());
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
