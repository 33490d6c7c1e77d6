//! `orch validate` and `orch graph`.

use super::error::CliError;
use super::output::{Out, ignore_closed};
use crate::catalog::Catalog;
use crate::exit;
use std::path::PathBuf;

/// Arguments of `orch validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// The repository whose `.orch/` to include
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Print one JSON object on stdout (pipelines, roles, errors)
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `orch graph`.
#[derive(Debug, clap::Args)]
pub struct GraphArgs {
    /// Pipeline name or path to a .yaml file
    pub pipeline: String,
    /// The repository whose `.orch/` to include
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Print one JSON object on stdout (the stages and the Mermaid text)
    #[arg(long)]
    pub json: bool,
}

/// `orch validate`: every error on stderr, a summary on stdout.
pub(super) fn cmd_validate(args: ValidateArgs) -> Result<i32, CliError> {
    let catalog = Catalog::load(Some(&args.repo))?;
    let errors = catalog.validate_all();
    for e in &errors {
        crate::ui::status_line(&format!("error: {e}"));
    }
    for (name, origin, warning) in catalog.role_warnings() {
        crate::ui::status_line(&format!("warning: {origin}: role `{name}`: {warning}"));
    }
    // The exit code is the verdict on the files, whoever reads the list.
    if args.json {
        let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
        ignore_closed(print_catalog_json(&catalog, &messages))?;
    } else {
        ignore_closed(print_catalog(&catalog, errors.len()))?;
    }
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
            crate::text::plural(errors as u64, "error", "errors")
        )?;
    }
    out.finish()
}

/// The catalog and its errors as one JSON object.
fn print_catalog_json(catalog: &Catalog, errors: &[String]) -> Result<(), CliError> {
    let mut out = Out::stdout();
    let pipelines: Vec<serde_json::Value> = catalog
        .pipeline_names()
        .into_iter()
        .map(|(name, origin)| serde_json::json!({"name": name, "origin": origin}))
        .collect();
    writeln!(
        out,
        "{}",
        serde_json::json!({
            "ok": errors.is_empty(),
            "pipelines": pipelines,
            "roles": catalog.role_names(),
            "errors": errors,
        })
    )?;
    out.finish()
}

/// `orch graph`: the unrolled DAG as Mermaid.
pub(super) fn cmd_graph(args: GraphArgs) -> Result<i32, CliError> {
    let catalog = Catalog::load(Some(&args.repo))?;
    let pipeline = catalog.pipeline(&args.pipeline)?;
    let mut out = Out::stdout();
    if args.json {
        let stages: Vec<serde_json::Value> = pipeline
            .stages
            .iter()
            .map(|s| {
                serde_json::json!({
                    "id": s.id,
                    "role": s.role,
                    "needs": s.needs,
                    "round": s.round,
                    "runs_if_changes_requested_by": s.run_if_changes_requested_by,
                    "replica": s.replica,
                    "select": s.select,
                })
            })
            .collect();
        writeln!(
            out,
            "{}",
            serde_json::json!({
                "pipeline": pipeline.name,
                "origin": pipeline.origin,
                "stages": stages,
                "mermaid": pipeline.to_mermaid(),
            })
        )?;
    } else {
        out.text(&pipeline.to_mermaid())?;
    }
    ignore_closed(out.finish())?;
    Ok(exit::OK)
}
