//! Starting a run: its plan and record, then its stages driven to the end.

use super::bootstrap::load_bootstrap;
use super::ctx::RunCtx;
use super::error::{RunError, blocking};
use super::flow;
use super::flow::finish_run;
use super::lanes;
use super::lanes::Lanes;
use super::resume::load_run;
use super::schedule::drive;
use super::session::{DEAD_START_AGE, Plan, RunOptions, RunSummary, Session, lane_pool_bound, now};
use crate::git;
use crate::ids::RunId;
use crate::policy::BashPolicy;
use crate::runlog::{RUN_FORMAT, RunDir, RunState, RunStatus, StageRecord, StageStatus};
use crate::ui::Ui;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Starts a new run of a pipeline and drives it to its end. Stage failures
/// are recorded in the returned state, not returned as errors.
pub(crate) async fn run_pipeline(opts: RunOptions, ui: &Ui) -> Result<RunSummary, RunError> {
    let Started {
        info,
        common,
        base_sha,
        boot,
        run_id,
        run_dir,
        lock,
        plan,
        mut state,
        session,
        issue,
        pool_bound,
    } = start_record(opts).await?;
    ui.run_started(&state);
    // What the kernel enforces for tool processes: said once per run.
    let sandbox_line = crate::sandbox::availability().describe();
    crate::ui::status_line(&format!("orch: {sandbox_line}"));
    run_dir.write_file_unsynced("sandbox.txt", format!("{sandbox_line}\n").as_bytes())?;
    // The first lane's checkout overlaps the rest of the start-up.
    let lanes = Arc::new(Lanes::new(&common, &run_id, pool_bound));
    lanes.prewarm(&base_sha).await;
    // So does asking the server for its context window (at most one round
    // trip; the first turn waits for it only when it could matter, see
    // `Agent::start`). `orch run` started it right after its preflight
    // already, which makes this a no-op there.
    let probe = Arc::clone(&session.model);
    tokio::spawn(async move {
        probe.probe_context_window().await;
    });
    state.status = RunStatus::Running;
    state.updated = now();
    // The one fsync before the first request.
    run_dir.write_state_alone(&state)?;
    crate::killpoint::reached("state-running");
    let ctx = Arc::new(RunCtx {
        run_id,
        allowlist: BashPolicy::load_allowlist(&info.workdir).unwrap_or_default(),
        common,
        run_dir,
        plan,
        issue,
        _lock: lock,
        ledger: std::sync::Mutex::new(crate::budget::RunLedger::new(session.limits.budget)),
        session,
        base_commit: base_sha,
        bootstrap: boot,
        only: None,
    });
    drive(ctx, state, lanes, ui).await
}

/// A run whose record was just made (state `starting`), before any lane.
struct Started {
    info: git::RepoInfo,
    common: PathBuf,
    base_sha: git::CommitId,
    boot: super::ctx::Bootstrap,
    run_id: RunId,
    run_dir: RunDir,
    lock: crate::runlog::RunLock,
    plan: Plan,
    state: RunState,
    session: Session,
    issue: String,
    /// How many lanes this run may hand back to the repository's pool.
    pool_bound: usize,
}

/// Plans a run without running any stage (`orch run --remote … --no-local`):
/// its record and run ref exist, every stage pending, status `running` (the
/// stages run elsewhere, by `orch stage`). Returns the state.
pub(crate) async fn plan_run(opts: RunOptions) -> Result<RunState, RunError> {
    let Started {
        run_dir, mut state, ..
    } = start_record(opts).await?;
    state.status = RunStatus::Running;
    state.updated = now();
    run_dir.write_state(&state)?;
    Ok(state)
}

/// Makes a new run's record: its directory and lock, the issue, the frozen
/// plan and the first state (`starting`), before any lane, ref or worktree.
async fn start_record(opts: RunOptions) -> Result<Started, RunError> {
    let (repo_path, base) = (opts.repo.clone(), opts.base.clone());
    let (info, base_sha) = blocking(move || git::open_repo_at(&repo_path, &base)).await?;
    let common = info.common_dir.clone();
    let boot = load_bootstrap(&info.workdir, &opts.pipeline).await?;
    // A role naming a skill that is not there fails here, creating nothing.
    super::stage::skills::check_roles(&common, &base_sha, opts.roles.values()).await?;

    let pool_bound = lane_pool_bound(&info.workdir, &opts.session)?;
    let (run_id, run_dir) = RunDir::create_new(&common)?;
    let lock = crate::runlog::lock_run(&run_dir.root, run_id.as_str())?;
    crate::killpoint::reached("run-dir-created");
    // Runs killed before their first state write left only a directory.
    crate::runlog::sweep_dead_starts(&common, DEAD_START_AGE);
    // Runs killed while recording their ref after their final state (never
    // resumed) left its lock.
    crate::runlog::heal_dead_run_ref_locks(&common);
    let secrets = &opts.session.secrets;
    // Until the `running` state below, nothing is fsynced: a run that dies
    // before its first stage ends has nothing worth resuming, and the next
    // `write_state` (a stage's result) makes these files durable first.
    run_dir.write_file_unsynced(
        "issue.md",
        crate::secrets::redact(&opts.issue, secrets).as_bytes(),
    )?;
    if let Some(json) = &opts.issue_json {
        run_dir.write_file(
            "issue.json",
            crate::secrets::redact(json, secrets).as_bytes(),
        )?;
    }
    let plan = Plan {
        pipeline: opts.pipeline,
        roles: opts.roles,
    };
    let plan_json = serde_json::to_vec_pretty(&plan).unwrap_or_default();
    run_dir.write_file_unsynced("plan.json", &plan_json)?;

    let session = opts.session;
    let state = RunState {
        format: RUN_FORMAT.to_owned(),
        run_id: run_id.clone(),
        pipeline: plan.pipeline.name.clone(),
        pipeline_origin: plan.pipeline.origin.clone(),
        status: RunStatus::Starting,
        created: now(),
        updated: now(),
        repo: info.workdir.display().to_string(),
        base_commit: base_sha.clone(),
        worktree: lanes::lanes_dir(&common, &run_id).display().to_string(),
        final_branch: format!("orch/{run_id}/pr"),
        model: session.model.model_name(),
        model_label: session.model.label(),
        base_url: session.base_url.clone(),
        replay_file: session.replay_file.clone(),
        sampling: session.sampling,
        settings: Some(session.settings.clone()),
        pr_title: None,
        pr_url: None,
        stages: plan
            .pipeline
            .stages
            .iter()
            .map(|s| StageRecord::pending(s.id.as_str(), &s.role))
            .collect(),
    };
    // The state exists before any lane, ref or worktree: a run killed from
    // here on is listed, and `resume` finishes (or cleans) it.
    run_dir.write_state_unsynced(&state)?;
    flow::reserve_space(&run_dir.root);
    crate::killpoint::reached("state-starting");
    Ok(Started {
        info,
        common,
        base_sha,
        boot,
        run_id,
        run_dir,
        lock,
        plan,
        state,
        session,
        issue: opts.issue,
        pool_bound,
    })
}

/// Finishes a distributed run whose every stage is done (the record in this
/// repository holds the merged state, and the sinks' branches are here): the
/// final commit and branch, `pr.md`, and the final status, as a local run
/// ends. Returns the final state.
pub(crate) async fn finish_distributed(
    repo: &Path,
    run_id: &RunId,
    session: Session,
) -> Result<RunState, RunError> {
    let repo_path = repo.to_path_buf();
    let info = blocking(move || git::open_repo(&repo_path)).await?;
    let common = info.common_dir.clone();
    let id = run_id.as_str();
    let lock = crate::runlog::lock_run(&RunDir::open(&common, id)?.root, id)?;
    let (run_dir, mut state, plan) = load_run(&common, run_id)?;
    let boot = load_bootstrap(&info.workdir, &plan.pipeline).await?;
    let issue = std::fs::read_to_string(run_dir.root.join("issue.md")).unwrap_or_default();
    let any_failed = state
        .stages
        .iter()
        .any(|s| matches!(s.status, StageStatus::Failed | StageStatus::Blocked));
    let ctx = RunCtx {
        run_id: run_id.clone(),
        allowlist: Vec::new(),
        common,
        base_commit: state.base_commit.clone(),
        run_dir,
        plan,
        issue,
        _lock: lock,
        ledger: std::sync::Mutex::new(crate::budget::RunLedger::new(session.limits.budget)),
        session,
        bootstrap: boot,
        only: None,
    };
    state.status = if any_failed {
        RunStatus::Failed
    } else {
        match finish_run(&ctx, &mut state).await? {
            Ok(_) => RunStatus::Succeeded,
            Err(reason) => {
                crate::ui::status_line(&format!("orch: {reason}"));
                RunStatus::Failed
            }
        }
    };
    state.updated = now();
    ctx.run_dir.write_state(&state)?;
    Ok(state)
}
