//! `orch ui`: a local web page for the repository's runs (docs/ui.md).

use super::error::CliError;
use super::output::Out;
use crate::exit;
use crate::webui;
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `orch ui`.
#[derive(Debug, clap::Args)]
pub struct UiArgs {
    /// The repository whose runs to show
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// The port on 127.0.0.1 (0: any free port)
    #[arg(long, default_value_t = 0)]
    pub port: u16,
}

/// `orch ui`: prints the page's URL (with its token) on stdout, then
/// serves until Ctrl-C.
pub(super) async fn cmd_ui(args: UiArgs) -> Result<i32, CliError> {
    let info = crate::git::open_repo(&args.repo)?;
    let token = webui::new_token().map_err(|e| {
        CliError::Internal(format!("failed to read /dev/urandom for the token: {e}"))
    })?;
    let (listener, port) = webui::bind(args.port)
        .await
        .map_err(|e| CliError::Invalid(e.to_string()))?;
    let ui = Arc::new(webui::Ui {
        repo: info.workdir.clone(),
        common: info.common_dir.clone(),
        token,
        port,
    });
    let mut out = Out::stdout();
    writeln!(out, "http://127.0.0.1:{port}/?token={}", ui.token)?;
    out.finish()?;
    crate::ui::status_line(&format!(
        "orch ui: serving the runs of {} (Ctrl-C stops)",
        info.workdir.display()
    ));
    tokio::select! {
        () = webui::serve(listener, ui) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(exit::OK)
}
