//! `orch validate` and `orch graph`.

use super::output::{Out, ignore_closed};
use super::{CliError, exit};
use crate::catalog::Catalog;
use std::path::PathBuf;

/// Arguments of `orch validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// The repository whose `.orch/` to include
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
}

/// Arguments of `orch graph`.
#[derive(Debug, clap::Args)]
pub struct GraphArgs {
    /// Pipeline name or path to a .yaml file
    pub pipeline: String,
    /// The repository whose `.orch/` to include
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
}

/// `orch validate`: every error on stderr, a summary on stdout.
pub(super) fn cmd_validate(args: ValidateArgs) -> Result<i32, CliError> {
    let catalog = Catalog::load(Some(&args.repo))?;
    let errors = catalog.validate_all();
    for e in &errors {
        crate::ui::status_line(&format!("error: {e}"));
    }
    // The exit code is the verdict on the files, whoever reads the list.
    ignore_closed(print_catalog(&catalog, errors.len()))?;
    Ok(if errors.is_empty() {
        exit::OK
    } else {
        exit::INVALID
    })
}

/// The pipelines, the roles and the count of errors, on stdout.
fn print_catalog(catalog: &Catalog, errors: usize) -> Result<(), CliError> {
    let pipelines = catalog.pipeline_names();
    let roles = catalog.role_names();
    let mut out = Out::stdout();
    for (name, origin) in &pipelines {
        writeln!(out, "pipeline {name:<16} {origin}")?;
    }
    writeln!(out, "roles: {}", roles.join(", "))?;
    if errors == 0 {
        writeln!(
            out,
            "ok: {} pipelines, {} roles",
            pipelines.len(),
            roles.len()
        )?;
    } else {
        writeln!(
            out,
            "{}",
            super::inspect::plural(errors as u64, "error", "errors")
        )?;
    }
    out.finish()
}

/// `orch graph`: the unrolled DAG as Mermaid.
pub(super) fn cmd_graph(args: GraphArgs) -> Result<i32, CliError> {
    let catalog = Catalog::load(Some(&args.repo))?;
    let pipeline = catalog.pipeline(&args.pipeline)?;
    let mut out = Out::stdout();
    out.text(&pipeline.to_mermaid())?;
    out.finish()?;
    Ok(exit::OK)
}
