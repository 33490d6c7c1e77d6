//! `orch stage <run> <stage> --remote URL`: one stage of a distributed run,
//! run by this machine as a worker (see `distributed::worker` and
//! `docs/distributed.md`).

use super::args::{LimitArgs, ModelArgs};
use super::error::CliError;
use super::output::{Out, ignore_closed};
use super::session::SessionBuilder;
use crate::distributed::worker::{self, Outcome, RoundTrips, StageJob};
use crate::exit;
use crate::ids::RunId;
use crate::runlog::StageStatus;
use crate::ui::Ui;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The default `--claim-timeout`, in seconds: longer than any stage should
/// take (the stage's own time limit is the better bound).
const DEFAULT_CLAIM_TIMEOUT_SECS: u64 = 3600;

/// Arguments of `orch stage`.
#[derive(Debug, clap::Args)]
pub struct StageArgs {
    /// The run id (`orch run … --remote URL --no-local` prints it)
    pub run: String,
    /// The stage id (as in the plan: `code`, `review`, `code.r2`, …)
    pub stage: String,
    /// The git remote the run lives on (any URL or path `git` can push to)
    #[arg(long, value_name = "URL")]
    pub remote: String,
    /// A clone to work in (its working tree, index and branch are never touched); default: the repository here, else --work-dir
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// Where to fetch into when there is no clone (created on first use; default: the user cache dir, one per remote)
    #[arg(long, value_name = "DIR", conflicts_with = "repo")]
    pub work_dir: Option<PathBuf>,
    /// This worker's identity in claims (default: host name and work dir, so re-running in the same clone takes over its own claim)
    #[arg(long, value_name = "ID")]
    pub worker: Option<String>,
    /// Take over another worker's claim once it is older than --claim-timeout (a worker that died mid-stage)
    #[arg(long)]
    pub reclaim: bool,
    /// How old a claim must be before --reclaim takes it over, in seconds
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_CLAIM_TIMEOUT_SECS)]
    pub claim_timeout: u64,
    /// Write the stage's verdict (or an empty line) to FILE, for engines that read outputs from files (Argo)
    #[arg(long, value_name = "FILE")]
    pub verdict_file: Option<PathBuf>,
    /// Model settings (default: those the run was planned with, through orch.toml; the key comes from the environment)
    #[command(flatten)]
    pub model: ModelArgs,
    /// Budget and compaction settings for this stage.
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Allow commands that a role's `ask` rules would ask about
    #[arg(long)]
    pub yes: bool,
    /// Print one JSON object on stdout instead of the human lines
    #[arg(long)]
    pub json: bool,
    /// The event stream on stdout.
    #[command(flatten)]
    pub events: super::args::EventArgs,
}

/// The work dir for `url` when no `--repo` or `--work-dir` is given.
fn default_work_dir(url: &str) -> Result<PathBuf, CliError> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .ok_or_else(|| {
            CliError::Invalid("failed to pick a work dir: set HOME or pass --work-dir".into())
        })?;
    let hash = git2::Oid::hash_object(git2::ObjectType::Blob, url.as_bytes())
        .map_err(|e| CliError::Internal(format!("failed to hash the remote URL: {e}")))?;
    let tail: String = url
        .rsplit(['/', ':'])
        .find(|s| !s.is_empty())
        .unwrap_or("remote")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    Ok(base
        .join("orch")
        .join("remotes")
        .join(format!("{tail}-{}", &hash.to_string()[..12])))
}

/// The default worker identity: `<host>:<work dir>`.
fn default_worker(dir: &Path) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    format!("{host}:{}", dir.display())
}

/// `orch stage`.
pub(super) async fn cmd_stage(args: StageArgs) -> Result<i32, CliError> {
    let events = args.events.open();
    super::summary::end_events(&events, stage(args, &events).await)
}

async fn stage(args: StageArgs, events: &crate::events::Events) -> Result<i32, CliError> {
    super::summary::check_events(events, args.json, false)?;
    let run_id: RunId = args
        .run
        .parse()
        .map_err(|e: crate::ids::RunIdError| CliError::Invalid(format!("failed to {e}")))?;
    let repo = match (&args.repo, &args.work_dir) {
        (Some(r), _) => r.clone(),
        (None, Some(w)) => w.clone(),
        // A clone here (as other commands' `--repo .`), else a work dir.
        (None, None) if crate::git::Repo::discover(Path::new(".")).is_ok() => PathBuf::from("."),
        (None, None) => default_work_dir(&args.remote)?,
    };
    let job = StageJob {
        worker: args.worker.clone().unwrap_or_else(|| default_worker(&repo)),
        repo: repo.clone(),
        url: args.remote.clone(),
        run_id,
        stage: args.stage.clone(),
        reclaim: args.reclaim,
        claim_timeout: Duration::from_secs(args.claim_timeout),
    };
    let fetched = worker::fetch(job.clone())?;
    let mut session = SessionBuilder::resumed(&fetched.state, &args.model, &repo)?
        .assume_yes(args.yes)
        .max_parallel(1)
        .build(&args.limits)?;
    super::session::route_stage_models(&mut session, &fetched.plan.pipeline, &args.model, &repo)?;
    super::escalation::route_escalations(
        &mut session,
        &fetched.plan.pipeline,
        &fetched.plan.roles,
        &args.model,
        &repo,
    )?;
    events.redacting(&session.secrets);
    let ui = Ui::new(false).with_events(events.clone());
    let (outcome, trips) = worker::claim_and_run(fetched, session, &ui).await?;
    let code = exit_code(&outcome);
    write_outputs(&args, &outcome)?;
    if events.is_on() {
        // In the stream's words (the stage's own status is in the summary).
        let status = match code {
            exit::OK => "succeeded",
            exit::INTERRUPTED => "interrupted",
            _ => "failed",
        };
        events.set_result(status, result_json(&job, &outcome, &trips));
        return Ok(code);
    }
    ignore_closed(print(&job, &outcome, &trips, args.json))?;
    Ok(code)
}

fn exit_code(outcome: &Outcome) -> i32 {
    match outcome {
        Outcome::Ran {
            interrupted: true, ..
        } => exit::INTERRUPTED,
        Outcome::Ran { record, .. } if record.status == StageStatus::Succeeded => exit::OK,
        Outcome::Ran { record, .. } if record.status == StageStatus::NoChange => {
            exit::OPTIONAL_NOT_DONE
        }
        Outcome::Ran {
            internal_failed: true,
            ..
        } => exit::INTERNAL,
        Outcome::Ran {
            model_failed: true, ..
        } => exit::MODEL,
        Outcome::Ran { .. } | Outcome::NotRunnable(..) => exit::STAGE_FAILED,
        Outcome::Done(_) => exit::OK,
        Outcome::NotReady(_) => exit::NOT_READY,
        Outcome::Claimed(_) => exit::CLAIMED,
    }
}

/// The stage's status and verdict.
fn status_and_verdict(outcome: &Outcome) -> (&'static str, &'static str) {
    match outcome {
        Outcome::Ran { record, .. } => (
            record.status.as_str(),
            record.verdict.map_or("", |v| v.as_str()),
        ),
        Outcome::Done(s) | Outcome::NotRunnable(s, _) => (s.as_str(), ""),
        Outcome::NotReady(_) => ("pending", ""),
        Outcome::Claimed(_) => ("running", ""),
    }
}

/// `$GITHUB_OUTPUT` (`status=…`, `verdict=…`) when set, and `--verdict-file`.
fn write_outputs(args: &StageArgs, outcome: &Outcome) -> Result<(), CliError> {
    use std::io::Write;
    let (status, verdict) = status_and_verdict(outcome);
    let fail = |p: &Path, e: std::io::Error| {
        CliError::Internal(format!(
            "failed to write the outputs to {}: {e}",
            p.display()
        ))
    };
    if let Some(path) = std::env::var_os("GITHUB_OUTPUT").map(PathBuf::from) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| fail(&path, e))?;
        writeln!(f, "status={status}\nverdict={verdict}").map_err(|e| fail(&path, e))?;
    }
    if let Some(path) = &args.verdict_file {
        std::fs::write(path, format!("{verdict}\n")).map_err(|e| fail(path, e))?;
    }
    Ok(())
}

/// The `--json` object of `orch stage` (and its final event's summary).
fn result_json(job: &StageJob, outcome: &Outcome, trips: &RoundTrips) -> serde_json::Value {
    let (status, verdict) = status_and_verdict(outcome);
    let (kind, detail) = match outcome {
        Outcome::Ran {
            record,
            run_status,
            interrupted,
            ..
        } => (
            "ran",
            json!({"commit": record.commit, "branch": record.branch, "reason": record.reason,
                   "run_status": run_status.as_str(), "published": !interrupted}),
        ),
        Outcome::Done(_) => ("done", json!({})),
        Outcome::NotRunnable(_, reason) => ("not_runnable", json!({"reason": reason})),
        Outcome::NotReady(waiting) => ("not_ready", json!({"waiting_for": waiting})),
        Outcome::Claimed(c) => (
            "claimed",
            json!({"claimed_by": c.worker, "claimed_at": c.claimed_at}),
        ),
    };
    let mut value = json!({
        "run_id": job.run_id, "stage": job.stage, "worker": job.worker,
        "outcome": kind, "status": status, "verdict": (!verdict.is_empty()).then_some(verdict),
        "round_trips": trips,
    });
    if let (Some(v), Some(d)) = (value.as_object_mut(), detail.as_object()) {
        v.extend(d.clone());
    }
    value
}

fn print(
    job: &StageJob,
    outcome: &Outcome,
    trips: &RoundTrips,
    json: bool,
) -> Result<(), CliError> {
    let (status, verdict) = status_and_verdict(outcome);
    let mut out = Out::stdout();
    if json {
        writeln!(out, "{}", result_json(job, outcome, trips))?;
        return out.finish();
    }
    let line = match outcome {
        Outcome::Ran {
            run_status,
            interrupted: false,
            ..
        } => format!(
            "stage {} of run {}: {status}{}; run {}",
            job.stage,
            job.run_id,
            if verdict.is_empty() {
                String::new()
            } else {
                format!(" ({verdict})")
            },
            run_status.as_str()
        ),
        Outcome::Ran { .. } => format!(
            "stage {} of run {}: interrupted; the claim stays (run the same command again)",
            job.stage, job.run_id
        ),
        Outcome::Done(s) => format!(
            "stage {} of run {}: already {}; nothing to do",
            job.stage,
            job.run_id,
            s.as_str()
        ),
        Outcome::NotRunnable(s, reason) => format!(
            "stage {} of run {}: {} ({})",
            job.stage,
            job.run_id,
            s.as_str(),
            reason.as_deref().unwrap_or("no reason recorded")
        ),
        Outcome::NotReady(waiting) => format!(
            "stage {} of run {}: not ready; waiting for {}",
            job.stage,
            job.run_id,
            waiting.join(", ")
        ),
        Outcome::Claimed(c) => format!(
            "stage {} of run {}: claimed by {} at {}; nothing changed (--reclaim takes over a claim older than --claim-timeout)",
            job.stage, job.run_id, c.worker, c.claimed_at
        ),
    };
    writeln!(out, "{line}")?;
    out.finish()
}
