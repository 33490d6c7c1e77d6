//! The buttons: each POST calls the code the CLI calls. Rollback is
//! `orch rollback`'s [`crate::runner::rollback_run`]; resume starts `orch
//! resume` as a child process in its own process group (the run outlives
//! the page); asks and guidance go through [`super::control`].

use super::data::RunView;
use super::server::Ui;
use super::{UiError, control};
use serde_json::{Value, json};

/// Who the control channel records as the answer's author.
const BY: &str = "ui";

/// Runs the action `action` (the path after `/run/<id>/`) on `view`'s run.
pub(super) async fn post(
    ui: &Ui,
    view: &RunView,
    action: &[&str],
    body: &Value,
) -> Result<Value, UiError> {
    let run_id = view.state.run_id.clone();
    match action {
        ["rollback"] => {
            let stage = string(body, "stage")?;
            view.stage(stage)?;
            refuse_if_live(view)?;
            let rolled = crate::runner::rollback_run(&ui.repo, &run_id, stage)
                .await
                .map_err(|e| UiError::Refused(format!("failed to {e}")))?;
            Ok(json!({"ok": true, "message": format!(
                "final branch orch/{run_id}/pr now at stage `{stage}`; rolled back: {}",
                if rolled.is_empty() { "nothing".to_owned() } else { rolled.join(", ") }
            )}))
        }
        ["resume"] => {
            refuse_if_live(view)?;
            let pid = spawn_resume(ui, run_id.as_str())?;
            Ok(
                json!({"ok": true, "message": format!("started `orch resume {run_id}` (pid {pid})")}),
            )
        }
        ["ask", id] => {
            let allow = body["allow"].as_bool().ok_or_else(|| {
                UiError::BadRequest("the body needs `allow`: true or false".into())
            })?;
            control::answer(&view.dir.root, id, allow, BY)?;
            Ok(json!({"ok": true, "message": format!(
                "ask {id}: {}", if allow { "allowed" } else { "denied" }
            )}))
        }
        ["stage", stage, "guide"] => {
            view.stage(stage)?;
            let text = string(body, "text")?;
            control::guide(&view.dir.root, stage, text, BY)?;
            Ok(json!({"ok": true, "message": format!("guidance sent to stage `{stage}`")}))
        }
        _ => Err(UiError::NotFound(format!(
            "no action `{}` on a run",
            action.join("/")
        ))),
    }
}

fn string<'a>(body: &'a Value, key: &str) -> Result<&'a str, UiError> {
    body[key]
        .as_str()
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| UiError::BadRequest(format!("the body needs `{key}`: a non-empty string")))
}

fn refuse_if_live(view: &RunView) -> Result<(), UiError> {
    crate::runlog::refuse_if_live(&view.dir.root, &view.state.run_id)
        .map_err(|e| UiError::Refused(format!("failed to {e}")))
}

/// Starts `orch resume <run> --repo <repo>` detached: its own process group
/// (Ctrl-C of the UI does not reach it), no stdin, output discarded (the
/// run record is what it leaves); a task reaps it when it ends.
fn spawn_resume(ui: &Ui, run_id: &str) -> Result<u32, UiError> {
    let exe = std::env::current_exe()
        .map_err(|e| UiError::Internal(format!("failed to find the orch binary: {e}")))?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("resume")
        .arg(run_id)
        .arg("--repo")
        .arg(&ui.repo)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(false);
    let mut child = cmd
        .spawn()
        .map_err(|e| UiError::Internal(format!("failed to start `orch resume {run_id}`: {e}")))?;
    let pid = child.id().unwrap_or(0);
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    Ok(pid)
}
