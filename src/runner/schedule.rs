//! The scheduler: stages whose dependencies are done run (up to
//! `max_parallel` at once), and the run state is written after every
//! transition.

use super::ctx::{RunCtx, StageDone};
use super::error::RunError;
use super::flow;
use super::flow::{finish_run, handoff, skip_reason, start_commit};
use super::lanes::Lanes;
use super::session::{RunSummary, now};
use crate::pipeline::OnFailure;
use crate::runlog::{
    RecordError, RunDir, RunState, RunStatus, StageRecord, StageStatus, StateWriter,
};
use crate::ui::Ui;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::task::JoinSet;

/// Stage records by id: the scheduler's O(1) way into the run state, whose
/// records are made from the frozen plan and never added or removed. It
/// remembers which records were handed out for change since the last state
/// write, so a write re-serialises only those (see [`StateWriter`]).
struct Index {
    by_id: HashMap<String, usize>,
    dirty: std::sync::Mutex<Vec<usize>>,
    writer: std::sync::Mutex<StateWriter>,
}

impl Index {
    fn of(state: &RunState) -> Index {
        Index {
            by_id: state
                .stages
                .iter()
                .enumerate()
                .map(|(i, r)| (r.id.clone(), i))
                .collect(),
            dirty: std::sync::Mutex::new(Vec::new()),
            writer: std::sync::Mutex::new(StateWriter::default()),
        }
    }

    fn status(&self, state: &RunState, id: &str) -> Option<StageStatus> {
        self.by_id.get(id).map(|&i| state.stages[i].status)
    }

    /// The record of a planned stage, marked as changed. Invariant: the run
    /// state's stage records are made from the frozen plan, so every stage
    /// id the scheduler holds has one.
    #[allow(clippy::expect_used)]
    fn rec<'a>(&self, state: &'a mut RunState, id: &str) -> &'a mut StageRecord {
        let i = *self.by_id.get(id).expect("stage records mirror the plan");
        self.dirty.lock().unwrap_or_else(|e| e.into_inner()).push(i);
        &mut state.stages[i]
    }

    /// Writes the state durably; only records handed out by [`Index::rec`]
    /// since the last write are serialised again.
    fn write(&self, run_dir: &RunDir, state: &mut RunState) -> Result<(), RecordError> {
        self.write_as(run_dir, state, true)
    }

    /// [`Index::write`] without an fsync, for a transition that records no
    /// work (a stage marked running: after a crash it restarts either way).
    fn write_unsynced(&self, run_dir: &RunDir, state: &mut RunState) -> Result<(), RecordError> {
        self.write_as(run_dir, state, false)
    }

    fn write_as(
        &self,
        run_dir: &RunDir,
        state: &mut RunState,
        sync: bool,
    ) -> Result<(), RecordError> {
        let dirty = std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|e| e.into_inner()));
        let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if sync {
            writer.write(run_dir, state, dirty)
        } else {
            writer.write_unsynced(run_dir, state, dirty)
        }
    }
}

/// What the scheduler learnt while it drove the stages.
#[derive(Default)]
struct Drove {
    stopping: bool,
    interrupted: bool,
    model_failed: bool,
    internal_failed: bool,
    last_summary: String,
}

/// The scheduler: starts stages whose dependencies are done, up to
/// `max_parallel` at once, and applies their results as they arrive. Any
/// error after the run started marks the stages that were running `failed`
/// and the run `failed` before it is returned (if the state can still be
/// written; if not, the dead lock tells the next command).
pub(super) async fn drive(
    ctx: Arc<RunCtx>,
    mut state: RunState,
    lanes: Arc<Lanes>,
    ui: &Ui,
) -> Result<RunSummary, RunError> {
    let index = Index::of(&state);
    let mut drove = Drove::default();
    let mut pr = None;
    let result = async {
        drive_stages(&ctx, &mut state, &index, &lanes, ui, &mut drove).await?;
        // A failed replica is one attempt of its stage: the selection's
        // outcome is the stage's.
        let any_failed = state.stages.iter().any(|s| {
            matches!(s.status, StageStatus::Failed | StageStatus::Blocked)
                && ctx
                    .plan
                    .pipeline
                    .stage(&s.id)
                    .is_none_or(|p| p.replica.is_none())
        });
        state.status = if drove.interrupted {
            RunStatus::Interrupted
        } else if ctx.only.is_some() {
            // One stage of a distributed run: the run goes on elsewhere;
            // this worker's lanes go back to its pool.
            lanes.hand_back().await?;
            RunStatus::Running
        } else if any_failed || drove.stopping {
            // The stage branches keep the work; the lanes go back (O(1)).
            if let Err(e) = lanes.hand_back().await {
                ui.line(&format!(
                    "orch: warning: failed to hand back the lanes: {e}"
                ));
            }
            RunStatus::Failed
        } else {
            crate::killpoint::reached("run-finishing");
            match finish_run(&ctx, &mut state).await? {
                Ok(text) => {
                    pr = Some(text);
                    // The final branch and pr.md exist; the lanes go back to
                    // the pool or into the trash (renames, whatever the
                    // repository's size: nothing slow on the exit path).
                    lanes.hand_back().await?;
                    crate::killpoint::reached("lanes-removed");
                    RunStatus::Succeeded
                }
                Err(reason) => {
                    ui.line(&format!("orch: {reason}"));
                    RunStatus::Failed
                }
            }
        };
        state.updated = now();
        ctx.run_dir.write_state(&state)?;
        Ok::<(), RunError>(())
    }
    .await;
    if let Err(e) = result {
        fail_on_error(&ctx, &mut state, &e);
        return Err(e);
    }
    flow::release_space(&ctx.run_dir.root);
    ui.run_finished(&state);
    Ok(RunSummary {
        state,
        record_dir: ctx.run_dir.root.clone(),
        pr,
        model_failed: drove.model_failed,
        internal_failed: drove.internal_failed,
        last_summary: drove.last_summary,
    })
}

/// Marks the stages that were running `failed` (keeping the tokens their
/// action logs show) and the run `failed`, because of `e`; best effort: when
/// the state cannot be written, the dead run lock says the run is over.
fn fail_on_error(ctx: &RunCtx, state: &mut RunState, e: &RunError) {
    let why = format!("orch stopped on an error: failed to {e}");
    for rec in &mut state.stages {
        if rec.status == StageStatus::Running {
            rec.status = StageStatus::Failed;
            keep_logged_use(&ctx.run_dir, rec);
            rec.reason = Some(why.clone());
        }
    }
    state.status = RunStatus::Failed;
    state.updated = now();
    // A full disk: the space held since the start takes the state.
    if ctx.run_dir.write_state(state).is_err() && flow::release_space(&ctx.run_dir.root) {
        let _ = ctx.run_dir.write_state(state);
    }
    flow::release_space(&ctx.run_dir.root);
}

/// Fills a stage record that never got its outcome (interrupted, or ended
/// by an error) with the turns and tokens its last attempt logged.
fn keep_logged_use(run_dir: &RunDir, rec: &mut StageRecord) {
    let log = run_dir
        .root
        .join("stages")
        .join(&rec.id)
        .join("actions.jsonl");
    if let Some(last) = crate::runlog::attempts_from_log(&log).pop() {
        rec.turns = last.turns;
        rec.tokens = last.tokens;
    }
}

/// The scheduling loop, up to the moment no stage runs and none can start.
async fn drive_stages(
    ctx: &Arc<RunCtx>,
    state: &mut RunState,
    index: &Index,
    lanes: &Arc<Lanes>,
    ui: &Ui,
    drove: &mut Drove,
) -> Result<(), RunError> {
    let mut running: JoinSet<StageDone> = JoinSet::new();
    let max_parallel = ctx.session.max_parallel.max(1);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    // SIGTERM (a supervisor, `timeout`, `kill`) interrupts like Ctrl-C.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let terminated = async move {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(terminated);

    loop {
        if !drove.stopping {
            let failed_now =
                schedule(ctx, state, index, lanes, &mut running, max_parallel, ui).await?;
            drove.stopping |= failed_now;
        }
        if running.is_empty() {
            return Ok(());
        }
        let signal = tokio::select! {
            joined = running.join_next() => {
                let Some(joined) = joined else { continue };
                let done = joined.map_err(|e| RunError::Join(e.to_string()))?;
                let out = done.result?;
                let rec = index.rec(state, &done.id);
                rec.status = match (&out.failure, out.no_change) {
                    (Some(_), true) => StageStatus::NoChange,
                    (Some(_), false) => StageStatus::Failed,
                    (None, _) => StageStatus::Succeeded,
                };
                rec.branch = Some(out.branch);
                rec.commit = Some(out.commit);
                rec.verdict = out.verdict;
                (rec.verdict_from_text, rec.verify) = (out.verdict_from_text, out.verify);
                rec.finish_from_text = out.finish_from_text;
                rec.approved_despite_failed_verify = out.approved_despite_failed_verify;
                (rec.setup, rec.baseline) = (out.setup, out.baseline);
                rec.summary = Some(out.summary.clone());
                rec.turns = out.turns;
                rec.tokens = out.tokens;
                rec.duration_ms = out.duration_ms;
                rec.reason = out.failure.clone();
                rec.digest = out.digest;
                rec.budget = Some(out.budget);
                // An escalated stage's first attempt (failed) is kept with
                // its model and reason; the record's own fields are the last.
                rec.attempts.extend(out.earlier);
                rec.model = Some(out.model);
                (rec.check, rec.selection) = (out.check.map(|c| *c), out.selection.map(|s| *s));
                ui.stage_finished(rec);
                drove.model_failed |= out.model_failed;
                drove.internal_failed |= out.internal_failed;
                drove.last_summary = out.summary;
                if out.failure.is_some() && !out.no_change {
                    let stage = ctx.plan.pipeline.stage(&done.id);
                    // A failed replica does not stop the run: its
                    // selection decides (docs/best-of-n.md).
                    if stage.is_none_or(|s| s.on_failure == OnFailure::Stop && s.replica.is_none()) {
                        drove.stopping = true;
                    }
                }
                state.updated = now();
                index.write(&ctx.run_dir, state)?;
                crate::killpoint::reached("stage-recorded");
                continue;
            }
            _ = &mut ctrl_c => "interrupted",
            _ = &mut terminated => "terminated (SIGTERM)",
        };
        drove.interrupted = true;
        ui.line(&format!(
            "orch: {signal}; stopping the running stages (resume with `orch resume`)"
        ));
        running.abort_all();
        while running.join_next().await.is_some() {}
        for rec in &mut state.stages {
            if rec.status == StageStatus::Running {
                rec.status = StageStatus::Pending;
                keep_logged_use(&ctx.run_dir, rec);
                rec.reason = Some(format!(
                    "{signal}; restarts from its start commit on resume"
                ));
            }
        }
        return Ok(());
    }
}

/// Starts every stage that is ready, marks skipped and blocked ones.
/// Returns true when a stage failed before it could start (a fan-in
/// conflict) under the `stop` policy.
async fn schedule(
    ctx: &Arc<RunCtx>,
    state: &mut RunState,
    index: &Index,
    lanes: &Arc<Lanes>,
    running: &mut JoinSet<StageDone>,
    max_parallel: usize,
    ui: &Ui,
) -> Result<bool, RunError> {
    let mut stop = false;
    loop {
        let mut progressed = false;
        for stage in &ctx.plan.pipeline.stages {
            if running.len() >= max_parallel || stop {
                return Ok(stop);
            }
            let id = stage.id.as_str();
            if ctx.only.as_deref().is_some_and(|only| only != id) {
                continue;
            }
            if index.status(state, id) != Some(StageStatus::Pending) {
                continue;
            }
            let needs: Vec<StageStatus> = stage
                .needs
                .iter()
                .filter_map(|n| index.status(state, n.as_str()))
                .collect();
            if needs.iter().any(|s| {
                matches!(
                    s,
                    StageStatus::Pending | StageStatus::Running | StageStatus::RolledBack
                )
            }) {
                continue;
            }
            progressed = true;
            // A selection runs over failed replicas too (each has a commit).
            let selectable = stage
                .select
                .as_ref()
                .is_some_and(|s| super::select::replicas_done(s, state));
            if let Some(bad) = stage.needs.iter().filter(|_| !selectable).find(|n| {
                matches!(
                    index.status(state, n.as_str()),
                    Some(StageStatus::Failed | StageStatus::Blocked)
                )
            }) {
                set_not_run(
                    state,
                    index,
                    id,
                    StageStatus::Blocked,
                    format!("upstream stage `{bad}` did not succeed"),
                    ui,
                );
                continue;
            }
            if let Some(reason) = skip_reason(stage, state) {
                set_not_run(state, index, id, StageStatus::Skipped, reason, ui);
                continue;
            }
            let start = match stage.select.as_ref() {
                // A selection starts where its replicas did.
                Some(sel) => match super::select::start_of(sel, state) {
                    Some(sha) => Ok(sha),
                    None => Err(format!(
                        "its replicas have no start commit in the record ({})",
                        sel.replicas
                            .iter()
                            .map(|r| r.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                },
                None => start_commit(ctx, stage, state).await?,
            };
            let start = match start {
                Ok(sha) => sha,
                Err(conflict) => {
                    let rec = index.rec(state, id);
                    rec.status = StageStatus::Failed;
                    rec.reason = Some(conflict);
                    ui.stage_finished(rec);
                    if stage.on_failure == OnFailure::Stop {
                        stop = true;
                    }
                    continue;
                }
            };
            let role = ctx
                .plan
                .roles
                .get(&stage.role)
                .ok_or_else(|| RunError::MissingRole {
                    stage: id.to_owned(),
                    role: stage.role.clone(),
                })?
                .clone();
            let upstream = handoff(ctx, stage, state).await?;
            let rec = index.rec(state, id);
            rec.status = StageStatus::Running;
            rec.parent_commit = Some(start.clone());
            rec.reason = None;
            state.updated = now();
            index.write_unsynced(&ctx.run_dir, state)?;
            ui.stage_started(id, &role.name);
            let (ctx2, stage2, ui_id) = (Arc::clone(ctx), stage.clone(), id.to_owned());
            let (progress, lanes) = (ui.progress_handle(), Arc::clone(lanes));
            if let Some(sel) = stage.select.clone() {
                // The selection reads the replicas' records as they are now.
                let snapshot = state.clone();
                running.spawn(async move {
                    let task = super::select::SelectTask {
                        ctx: &ctx2,
                        stage: &stage2,
                        sel: &sel,
                        role: &role,
                        lanes: &lanes,
                        start: &start,
                        progress: &progress,
                    };
                    let result = task.run(upstream, &snapshot).await;
                    StageDone { id: ui_id, result }
                });
                continue;
            }
            running.spawn(async move {
                let _ = &ui_id;
                let task = super::escalate::StageTask {
                    ctx: &ctx2,
                    stage: &stage2,
                    role: &role,
                    lanes: &lanes,
                    start: &start,
                    progress: &progress,
                };
                let result = task.run(upstream).await;
                StageDone {
                    id: stage2.id.to_string(),
                    result,
                }
            });
        }
        if !progressed {
            return Ok(stop);
        }
    }
}

fn set_not_run(
    state: &mut RunState,
    index: &Index,
    id: &str,
    status: StageStatus,
    reason: String,
    ui: &Ui,
) {
    let rec = index.rec(state, id);
    rec.status = status;
    rec.reason = Some(reason);
    ui.stage_skipped(rec);
}
