//! `orch gc`: clears what runs leave in the repository. Always: the lanes
//! (linked worktrees and their branches) of every run that is not running,
//! the pool of warm lanes (every pooled lane no run holds, completely:
//! worktree, admin entry, lease) and the trash of lanes retired off the
//! exit path.
//! With `--older-than`: whole runs whose last update is older — the record
//! directory and the stage branches, the PR branch `orch/<run>/pr` only with
//! `--include-pr`. A run is running while a live process holds its run lock
//! (`runlog::run_is_live`, the test every command uses); such runs are left
//! alone and named, and gc holds the lock of a run while it clears it.
//!
//! The same lane clean-up runs at the end of a failed run, and after a
//! read-only `orch agent` question (see `summary.rs`).

use super::error::CliError;
use super::output::{Out, ignore_closed};
use crate::exit;
use crate::git::gc::Removed;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Arguments of `orch gc`.
#[derive(Debug, clap::Args)]
pub struct GcArgs {
    /// The repository to clean
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Also remove whole runs (record and stage branches) last updated longer ago than this: `7d`, `12h`, `30m`, `2w`
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub older_than: Option<Duration>,
    /// With --older-than: remove the runs' PR branches `orch/<run>/pr` too
    #[arg(long, requires = "older_than")]
    pub include_pr: bool,
    /// List what would be removed; remove nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
    /// Only delete the lanes a finished run moved into the trash, quietly (what a run starts in the background after its summary)
    #[arg(long, hide = true)]
    pub empty_trash: bool,
}

/// Deletes the trash of `repo` (lanes a finished run retired) in a
/// detached background `orch gc --empty-trash`, so the user has the prompt
/// back while a large checkout is deleted; if it cannot start, the next
/// `orch gc` deletes the trash. Call it after the run's output is written.
pub(super) fn empty_trash_in_background(repo: &Path) {
    use std::os::unix::process::CommandExt;
    let Ok(info) = crate::git::open_repo(repo) else {
        return;
    };
    if crate::git::Repo::at(&info.common_dir)
        .pool()
        .trash_is_empty()
    {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let spawned = std::process::Command::new(exe)
        .arg("gc")
        .arg("--repo")
        .arg(&info.workdir)
        .arg("--empty-trash")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        // Its own process group: a Ctrl-C at the prompt does not stop it.
        .process_group(0)
        .spawn();
    if let Err(e) = spawned {
        tracing::debug!("could not start the trash clean-up: {e} (`orch gc` does it)");
    }
}

/// `--older-than`: a whole number and a unit (`s`, `m`, `h`, `d`, `w`).
pub(super) fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("expected a number and a unit like `7d` or `12h`, got `{s}`"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => {
            return Err(format!(
                "expected a unit s, m, h, d or w after the number (`7d`, `12h`), got `{s}`"
            ));
        }
    };
    Ok(Duration::from_secs(n.saturating_mul(secs)))
}

/// What one `gc` removed (or would).
#[derive(Debug, Default)]
struct Report {
    worktrees: Vec<String>,
    branches: Vec<String>,
    records: Vec<String>,
    running: Vec<String>,
    /// Pooled lanes a running run holds (kept).
    pooled_in_use: Vec<String>,
    /// PR branches of removed runs, kept without `--include-pr`.
    kept_pr: Vec<String>,
    /// The command that removes them too.
    kept_pr_hint: String,
}

impl Report {
    fn add(&mut self, items: Vec<Removed>) {
        for item in items {
            match item {
                Removed::Worktree(p) => self.worktrees.push(p.display().to_string()),
                Removed::Branch(b) => self.branches.push(b),
            }
        }
    }
}

/// `orch gc`.
pub(super) fn cmd_gc(args: GcArgs) -> Result<i32, CliError> {
    let info = match crate::git::open_repo(&args.repo) {
        // No commit, so no run and no lane: nothing to clear.
        Err(crate::git::GitError::NoCommits { .. }) => {
            ignore_closed(print_report(&Report::default(), args.dry_run, args.json))?;
            return Ok(exit::OK);
        }
        other => other?,
    };
    let common = info.common_dir;
    if args.empty_trash {
        // Off everyone's critical path: a run started meanwhile comes first.
        super::session::lower_priority();
        if let Err(e) = crate::git::Repo::at(&common).pool().empty_trash() {
            tracing::debug!("emptying the trash failed: {e}");
        }
        return Ok(exit::OK);
    }
    let mut report = Report::default();
    let repo = crate::git::Repo::at(&common);
    let (pooled, in_use) = repo.pool().remove_all(args.dry_run)?;
    report.add(pooled.into_iter().map(Removed::Worktree).collect());
    report.pooled_in_use = in_use.iter().map(|p| p.display().to_string()).collect();
    let mut ids = crate::runlog::list_run_ids(&common);
    // Runs with lanes, and runs whose record an earlier `--older-than`
    // removed while it kept their PR branch: a later gc still finds them.
    for id in repo
        .runs_with_lanes()
        .into_iter()
        .chain(runs_with_branches(&repo)?)
    {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids.sort();
    let now = std::time::SystemTime::now();
    for id in ids {
        let root = crate::runlog::runs_dir(&common).join(&id);
        // A live run is left alone; a run gc clears is locked meanwhile, so
        // no `resume` starts on it halfway (a dry run only asks).
        let held = if args.dry_run || !root.join("lock").is_file() {
            None
        } else {
            crate::runlog::lock_run(&root, &id).ok()
        };
        if held.is_none() && crate::runlog::run_is_live(&root) {
            report.running.push(id);
            continue;
        }
        report.add(repo.remove_lanes(&id, args.dry_run)?);
        let Some(limit) = args.older_than else {
            continue;
        };
        let updated = last_update(&root).or_else(|| newest_branch_commit(&repo, &id));
        let old = updated.is_some_and(|t| now.duration_since(t).is_ok_and(|age| age > limit));
        if !old {
            continue;
        }
        report.add(repo.remove_run_branches(&id, args.include_pr, args.dry_run)?);
        let pr = format!("orch/{id}/pr");
        if !args.include_pr && repo.branch_sha(&pr)?.is_some() {
            report.kept_pr.push(pr);
            report.kept_pr_hint = format!(
                "orch gc --repo '{}' --older-than {}s --include-pr",
                info.workdir.display().to_string().replace('\'', "'\\''"),
                limit.as_secs()
            );
        }
        if root.is_dir() {
            if !args.dry_run {
                crate::distributed::runref::delete_run_refs(&common, &id)?;
                std::fs::remove_dir_all(&root).map_err(|e| {
                    CliError::Internal(format!(
                        "failed to remove the run record {}: {e}",
                        root.display()
                    ))
                })?;
            }
            report.records.push(root.display().to_string());
        }
    }
    ignore_closed(print_report(&report, args.dry_run, args.json))?;
    Ok(exit::OK)
}

fn print_report(r: &Report, dry_run: bool, json: bool) -> Result<(), CliError> {
    let mut out = Out::stdout();
    if json {
        writeln!(
            out,
            "{}",
            serde_json::json!({
                "dry_run": dry_run,
                "worktrees": r.worktrees,
                "branches": r.branches,
                "records": r.records,
                "running": r.running,
                "pooled_in_use": r.pooled_in_use,
                "kept_pr_branches": r.kept_pr,
            })
        )?;
        return out.finish();
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for w in &r.worktrees {
        writeln!(out, "{verb} worktree {w}")?;
    }
    for b in &r.branches {
        writeln!(out, "{verb} branch {b}")?;
    }
    for d in &r.records {
        writeln!(out, "{verb} run record {d}")?;
    }
    for id in &r.running {
        writeln!(out, "kept run {id}: it is running")?;
    }
    for b in &r.kept_pr {
        writeln!(
            out,
            "kept branch {b}: a PR branch (`{}` removes it)",
            r.kept_pr_hint
        )?;
    }
    for p in &r.pooled_in_use {
        writeln!(out, "kept pooled lane {p}: a run is using it")?;
    }
    let n = |v: &Vec<String>| v.len() as u64;
    writeln!(
        out,
        "{verb}: {}, {}, {}",
        crate::text::plural(n(&r.worktrees), "worktree", "worktrees"),
        crate::text::plural(n(&r.branches), "branch", "branches"),
        crate::text::plural(n(&r.records), "run record", "run records"),
    )?;
    out.finish()
}

/// Run ids that have branches `orch/<run>/…`.
fn runs_with_branches(repo: &crate::git::Repo) -> Result<Vec<String>, CliError> {
    let mut ids: Vec<String> = repo
        .list_branches("orch/")?
        .into_iter()
        .filter_map(|(b, _)| Some(b.strip_prefix("orch/")?.split_once('/')?.0.to_owned()))
        .collect();
    ids.dedup();
    Ok(ids)
}

/// When the newest commit on a run's branches was made: the age of a run
/// whose record is gone.
fn newest_branch_commit(handle: &crate::git::Repo, id: &str) -> Option<std::time::SystemTime> {
    let repo = handle.git2().ok()?;
    handle
        .list_branches(&format!("orch/{id}/"))
        .ok()?
        .iter()
        .filter_map(|(_, sha)| {
            let oid = git2::Oid::from_str(sha).ok()?;
            let secs = repo.find_commit(oid).ok()?.time().seconds();
            let secs = u64::try_from(secs).ok()?;
            Some(std::time::UNIX_EPOCH + Duration::from_secs(secs))
        })
        .max()
}

/// When the run at `root` was last updated: `state.json`'s `updated`, else
/// the record's modification time.
fn last_update(root: &Path) -> Option<std::time::SystemTime> {
    let state = std::fs::read_to_string(root.join("state.json")).ok();
    let updated = state
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["updated"].as_str().map(str::to_owned))
        .and_then(|u| chrono::DateTime::parse_from_rfc3339(&u).ok());
    match updated {
        Some(t) => Some(t.with_timezone(&chrono::Utc).into()),
        None => std::fs::metadata(root).and_then(|m| m.modified()).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_number_and_a_unit() {
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert!(parse_duration("7").unwrap_err().contains("unit"));
        assert!(parse_duration("d").unwrap_err().contains("`d`"));
        assert!(parse_duration("3y").is_err());
    }
}
