//! `orch validate` and `orch graph`.

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
pub fn cmd_validate(args: ValidateArgs) -> Result<i32, CliError> {
    let catalog = Catalog::load(Some(&args.repo))?;
    let errors = catalog.validate_all();
    for e in &errors {
        eprintln!("error: {e}");
    }
    let pipelines = catalog.pipeline_names();
    let roles = catalog.role_names();
    for (name, origin) in &pipelines {
        println!("pipeline {name:<16} {origin}");
    }
    println!("roles: {}", roles.join(", "));
    if errors.is_empty() {
        println!("ok: {} pipelines, {} roles", pipelines.len(), roles.len());
        Ok(exit::OK)
    } else {
        println!("{} errors", errors.len());
        Ok(exit::INVALID)
    }
}

/// `orch graph`: the unrolled DAG as Mermaid.
pub fn cmd_graph(args: GraphArgs) -> Result<i32, CliError> {
    let catalog = Catalog::load(Some(&args.repo))?;
    let pipeline = catalog.pipeline(&args.pipeline)?;
    print!("{}", pipeline.to_mermaid());
    Ok(exit::OK)
}
