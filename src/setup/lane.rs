//! `orch setup --lane`: the setup agent prepares a scratch lane of the
//! repository (a warm-pool worktree at `HEAD`), and the verified plan's
//! `install` steps become the repository's saved lane setup,
//! `<repo>/.orch/setup.sh`, which the lane bootstrap runs (cached like any
//! setup command) when neither the pipeline's `setup:` nor `[setup]` in
//! `.orch/orch.toml` names one. See `docs/setup.md` and
//! `docs/lane-bootstrap.md`.

use super::plan::{Plan, Risk};
use crate::git::{self, pool};
use crate::pipeline::LaneSetup;
use std::path::{Path, PathBuf};

/// The saved lane setup, under `<repo>/.orch/`.
pub(crate) const SAVED_SETUP_FILE: &str = "setup.sh";

/// The saved lane setup of the repository at `workdir` (the whole file is
/// the command, run with `bash -c`) and where it is; `Ok(None)` when there
/// is no file or it holds only comments and blank lines.
pub(crate) fn saved_lane_setup(workdir: &Path) -> Result<Option<(LaneSetup, String)>, String> {
    let path = workdir.join(".orch").join(SAVED_SETUP_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("read {}: {e}", path.display())),
    };
    let has_command = text
        .lines()
        .map(str::trim)
        .any(|l| !l.is_empty() && !l.starts_with('#'));
    if !has_command {
        return Ok(None);
    }
    let setup = LaneSetup {
        command: text.trim().to_owned(),
        lockfiles: None,
        timeout_secs: None,
    };
    Ok(Some((
        setup,
        format!("{} (saved by `orch setup --lane`)", path.display()),
    )))
}

/// What [`save_lane_setup`] did.
#[derive(Debug)]
pub(crate) struct Saved {
    /// The file written (`None`: the plan had no `install` step).
    pub(crate) path: Option<PathBuf>,
    /// The command saved (the `install` steps joined with ` && `).
    pub(crate) command: String,
    /// Steps not saved, with why (`system` steps change the machine once).
    pub(crate) left_out: Vec<String>,
}

/// Writes the `install` steps of `plan` (all verified) as the saved lane
/// setup of the repository at `workdir`, atomically.
pub(crate) fn save_lane_setup(workdir: &Path, id: &str, plan: &Plan) -> Result<Saved, String> {
    let mut commands = Vec::new();
    let mut left_out = Vec::new();
    for (i, step) in plan.steps.iter().enumerate() {
        match step.risk {
            Risk::Install if !step.sudo => commands.push(step.command.trim().to_owned()),
            Risk::Read => {}
            _ => left_out.push(format!(
                "step {} `{}` ({}: it changes the machine, not the lane)",
                i + 1,
                step.command,
                step.risk.as_str()
            )),
        }
    }
    let command = commands.join(" && ");
    if command.is_empty() {
        return Ok(Saved {
            path: None,
            command,
            left_out,
        });
    }
    let dir = workdir.join(".orch");
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let path = dir.join(SAVED_SETUP_FILE);
    let text = format!(
        "# Saved by `orch setup --lane` (setup {id}). Every new lane of this repository\n\
         # runs it once per lockfile state, unless the pipeline's `setup:` or `[setup]`\n\
         # in .orch/orch.toml names a command. Edit or delete freely.\n{command}\n"
    );
    let tmp = dir.join(format!(".{SAVED_SETUP_FILE}.orch-tmp"));
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| format!("write {}: {e}", path.display()))?;
    Ok(Saved {
        path: Some(path),
        command,
        left_out,
    })
}

/// A lane of the repository's warm pool at `HEAD`, for the setup to work in.
pub(crate) struct ScratchLane {
    common_dir: PathBuf,
    /// The user's working tree.
    pub(crate) workdir: PathBuf,
    lease: pool::Lease,
}

impl ScratchLane {
    /// Takes a pool lane of the repository at or above `repo`, at its `HEAD`.
    pub(crate) fn take(repo: &Path) -> Result<ScratchLane, String> {
        let (info, sha) = git::open_repo_at(repo, "HEAD").map_err(|e| e.to_string())?;
        let (lease, readied, _) = git::Repo::at(&info.common_dir)
            .pool()
            .take(&sha)
            .map_err(|e| e.to_string())?;
        if readied == pool::Readied::Warm {
            git::clean_moved(&lease.path).map_err(|e| e.to_string())?;
        }
        Ok(ScratchLane {
            common_dir: info.common_dir,
            workdir: info.workdir,
            lease,
        })
    }

    /// The lane's directory.
    pub(crate) fn path(&self) -> &Path {
        &self.lease.path
    }

    /// Takes the lane out of the pool (what it installed goes with it).
    pub(crate) fn retire(self) -> Result<(), String> {
        let repo = git::Repo::at(&self.common_dir);
        repo.pool().retire(self.lease).map_err(|e| e.to_string())?;
        // Best effort: `orch gc` or a later run empties what is left.
        let _ = repo.pool().empty_trash();
        Ok(())
    }
}
