//! `orch review` and `orch diff`: what a stage changed.

use super::shared::{memory_report, stage};
use crate::cli::error::CliError;
use crate::cli::output::Out;
use crate::cli::record::open;
use crate::exit;
use crate::git;
use crate::runlog::StageRecord;
use std::path::{Path, PathBuf};

/// Arguments of `orch review`.
#[derive(Debug, clap::Args)]
pub struct ReviewArgs {
    /// The run id (`last` is the newest)
    pub run: String,
    /// Only this stage
    pub stage: Option<String>,
    /// The repository
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `orch diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The run id (`last` is the newest)
    pub run: String,
    /// The stage
    pub stage: String,
    /// The repository
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

/// `orch review`.
pub(in crate::cli) fn cmd_review(args: ReviewArgs) -> Result<i32, CliError> {
    let (common, root, state) = open(&args.repo, &args.run)?;
    let stages: Vec<&StageRecord> = match &args.stage {
        Some(id) => vec![stage(&state, id)?],
        None => state.stages.iter().collect(),
    };
    if args.json {
        let rounds = crate::cli::react::rounds_json(&root);
        return crate::cli::stage_json::print_review(&common, &state, &stages, rounds);
    }
    let mut out = Out::stdout();
    for st in stages {
        out.untrusted(&render_review(&common, st)?)?;
    }
    if args.stage.is_none() {
        out.untrusted(&crate::cli::react::react_section(&root))?;
    }
    out.untrusted(&memory_report(&common, &state))?;
    out.finish()?;
    Ok(exit::OK)
}

/// The text of `orch review` for one stage.
pub(super) fn render_review(common: &Path, st: &StageRecord) -> Result<String, CliError> {
    let mut o = format!("=== stage {} ({}) — {}", st.id, st.role, st.status.as_str());
    if let Some(v) = st.verdict {
        o.push_str(&format!(", verdict {v}"));
    }
    o.push('\n');
    if let Some(r) = &st.reason {
        o.push_str(&format!("reason: {r}\n"));
    }
    let (Some(commit), Some(parent)) = (&st.commit, &st.parent_commit) else {
        o.push_str("(no commit)\n\n");
        return Ok(o);
    };
    o.push_str(&format!(
        "commit {commit} on {}\n",
        st.branch.as_deref().unwrap_or("-")
    ));
    o.push_str(&format!(
        "turns {}, tokens {}, {:.1}s\n",
        st.turns,
        st.tokens.total(),
        st.duration_ms as f64 / 1000.0
    ));
    if let Some(sum) = st.summary.as_deref().filter(|s| !s.trim().is_empty()) {
        o.push_str(&format!(
            "\nsummary:\n  {}\n",
            sum.trim().replace('\n', "\n  ")
        ));
    }
    if !st.digest.is_empty() {
        o.push_str("\nactions:\n");
        for line in &st.digest {
            o.push_str(&format!("  - {line}\n"));
        }
    }
    let d = git::Repo::at(common).diff(parent, commit, 256 * 1024)?;
    o.push_str(&format!("\n{}", d.stat.render()));
    if !d.patch.is_empty() {
        o.push('\n');
        o.push_str(&d.patch);
        if !d.patch.ends_with('\n') {
            o.push('\n');
        }
    }
    o.push('\n');
    Ok(o)
}

/// `orch diff`.
pub(in crate::cli) fn cmd_diff(args: DiffArgs) -> Result<i32, CliError> {
    let (common, _, state) = open(&args.repo, &args.run)?;
    let st = stage(&state, &args.stage)?;
    if args.json {
        return crate::cli::stage_json::print_diff(&common, &state, st);
    }
    let (Some(commit), Some(parent)) = (&st.commit, &st.parent_commit) else {
        return Err(CliError::Invalid(format!(
            "failed to show the diff of stage `{}`: it has no commit (it is {})",
            st.id,
            st.status.as_str()
        )));
    };
    let mut out = Out::stdout();
    out.text(
        &git::Repo::at(&common)
            .diff(parent, commit, usize::MAX)?
            .patch,
    )?;
    out.finish()?;
    Ok(exit::OK)
}
