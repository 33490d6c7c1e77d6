//! Running one stage in its lane: the agent with its tools and budget, then
//! the stage commit on its own branch, its diff, transcript and digest.
//!
//! [`run_stage`] runs named steps over one [`StageRun`]: `prepare` →
//! `run_agent` → `settle_changes` → `commit` → `record`; the features they
//! call (tools, instructions, verify, memory, read-only, secrets) are in the
//! files of `stage/`.

mod commit;
mod context;
mod instructions;
mod mcp;
mod memory;
mod progress;
mod read_only;
mod secrets;
mod settle;
pub(super) mod skills;
mod state;
mod tools;
mod verify;

use super::ctx::{RunCtx, StageOutcome};
use super::error::RunError;
use super::escalate::Escalated;
use super::lanes::Lane;
use crate::agent::{self, AgentConfig, AgentEnd, AgentOutcome, prompt};
use crate::llm::ChatModel;
use crate::pipeline::{Pipeline, Stage};
use crate::role::Role;
use crate::runlog::VerifyReport;
use crate::runlog::{ActionEvent, ActionLog, DIGEST_LINES, TokenCount, event};
pub(super) use commit::keep_old_branch;
use progress::ProgressModel;
use state::{Committed, MAX_SUMMARY_BYTES, StageRun};
use std::sync::Arc;
use std::time::Instant;

/// Base ids of the stages whose verdict gates a rework round: those stages
/// (and their later rounds) must give a verdict.
pub(super) fn requires_verdict(p: &Pipeline, stage: &Stage) -> bool {
    p.stages
        .iter()
        .filter_map(|s| s.run_if_changes_requested_by.as_ref())
        .filter_map(|r| p.stage(r.as_str()))
        .any(|s| s.base_id == stage.base_id)
}

/// Runs one attempt of a stage in its lane: the agent, then the commit on
/// the stage's branch, its diff and transcript; `escalated` when it is the
/// attempt with the stage's `escalate_to:` profile (`runner::escalate`).
#[allow(clippy::too_many_arguments)]
pub(super) async fn run_stage(
    ctx: &RunCtx,
    stage: &Stage,
    role: &Role,
    lane: &Lane,
    start: &crate::git::CommitId,
    upstream: Vec<prompt::Upstream>,
    progress: &crate::ui::ProgressHandle,
    escalated: Option<&Escalated<'_>>,
) -> Result<StageOutcome, RunError> {
    let mut run =
        StageRun::prepare(ctx, stage, role, lane, start, upstream, progress, escalated).await?;
    let (outcome, verify) = run.run_agent().await?;
    let settled = run.settle_changes().await?;
    let committed = run.commit(&outcome, verify.as_ref(), settled).await?;
    // Boxed: the stage's future is deep already (a review's verify gate
    // runs the agent again inside it); the checks add nothing to its size.
    let check = Box::pin(run.replica_check(&committed)).await?;
    let mut out = run.record(outcome, verify, committed).await?;
    out.check = check.map(Box::new);
    Ok(out)
}

/// The stage's, else its role's, else the run's model (`runner::models`),
/// or the escalation profile's for an escalated attempt, with the role's
/// sampling keys; the stage's start (and the role's notes) logged.
#[allow(clippy::too_many_arguments)]
fn stage_model(
    ctx: &RunCtx,
    stage: &Stage,
    role: &Role,
    lane: &Lane,
    start: &crate::git::CommitId,
    id: &str,
    escalated: Option<&Escalated<'_>>,
    log: &mut ActionLog,
) -> Result<(Arc<dyn ChatModel>, String), RunError> {
    // The stage's, else its role's, else the run's model (`runner::models`).
    let chosen = match escalated {
        Some(e) => super::models::Chosen {
            model: Arc::clone(&e.to.model),
            base_url: e.to.base_url.clone(),
            source: format!(
                "escalate_to: profile `{}` ({}), after attempt 1 with `{}` failed: {}",
                e.to.profile,
                e.to.origin,
                e.from_model,
                super::pr::shorten(e.reason.lines().next().unwrap_or(""), 200)
            ),
        },
        None => super::models::model_for(&ctx.session, stage, role),
    };
    let model = &chosen.model;
    // A role's sampling keys override the profile's for its stages, and a
    // stage's own (a replica's seed and temperature) the role's.
    let sampling = stage.sampling.over(role.sampling);
    let sampled = (!sampling.is_empty())
        .then(|| model.with_sampling(&sampling))
        .flatten();
    let model = sampled.as_ref().unwrap_or(model);
    // A role's `tool_calling:` overrides the profile's.
    let calling = role.tool_calling.and_then(|t| model.with_tool_calling(t));
    let model = calling.as_ref().unwrap_or(model);
    // A role's `prompt_cache:` applies where the profile says `auto`.
    let cached = role.prompt_cache.and_then(|c| model.with_prompt_cache(c));
    let model = cached.as_ref().unwrap_or(model);
    log.append(&ActionEvent::StageStart(event::StageStart {
        run: ctx.run_id.to_string(),
        stage: id.to_owned(),
        role: role.name.clone(),
        parent: start.to_string(),
        lane: lane.name.clone(),
        lane_checkout: lane.checkout.to_owned(),
        model: model.model_name().to_owned(),
        model_source: chosen.source.clone(),
        base_url: chosen.base_url.clone(),
    }))?;
    if !role.warnings.is_empty() || role.model_note.is_some() || !role.sampling.is_empty() {
        log.append(&ActionEvent::RoleNotes(event::RoleNotes {
            role: role.name.clone(),
            origin: role.origin.clone(),
            warnings: role.warnings.clone(),
            model_note: role.model_note.clone(),
            sampling: role.sampling,
        }))?;
    }
    Ok((Arc::clone(model), chosen.source))
}

impl<'a> StageRun<'a> {
    /// Opens the stage's log, chooses its model, and readies its tools,
    /// lane (bootstrap, verify baseline), budget, task and lessons.
    #[allow(clippy::too_many_arguments)]
    async fn prepare(
        ctx: &'a RunCtx,
        stage: &'a Stage,
        role: &'a Role,
        lane: &'a Lane,
        start: &'a crate::git::CommitId,
        upstream: Vec<prompt::Upstream>,
        progress: &'a crate::ui::ProgressHandle,
        escalated: Option<&Escalated<'_>>,
    ) -> Result<Self, RunError> {
        let id = stage.id.to_string();
        let started = Instant::now();
        let stage_dir = ctx.run_dir.stage_dir(&id)?;
        let mut log = ActionLog::open(
            &stage_dir.join("actions.jsonl"),
            ctx.session.secrets.clone(),
        )?
        .with_events(progress.stage_events(&id));
        let (model, model_source) =
            stage_model(ctx, stage, role, lane, start, &id, escalated, &mut log)?;
        let model = &model;
        // The trailer and `orch show` say which model failed before this one.
        let escalated_from = escalated.map(|e| {
            format!(
                "{} (attempt 1 failed: {})",
                e.from_model,
                super::pr::shorten(e.reason.lines().next().unwrap_or(""), 120)
            )
        });
        let instructions = instructions::project_instructions(ctx, stage, &mut log).await?;
        let skills = skills::stage_skills(ctx, role, &mut log).await?;
        let mut tool_ctx = tools::tool_context(ctx, role, lane, &id, &mut log)?;
        tool_ctx.skills = skills.set.clone();
        // A best-of-N reviewer answers with `finish`'s `choice`.
        tool_ctx.choices = stage.select.as_ref().map(|s| s.replicas.len() as u32);
        let redact = |text: &str| crate::secrets::redact(text, &ctx.session.secrets);
        // The lane gets its included files and its setup, and the verify
        // commands run once on the start commit, before any model call.
        let boot =
            super::bootstrap::prepare_lane(ctx, &id, &tool_ctx, &lane.watch, &mut log).await?;
        let baseline = verify::baseline(stage, &boot, &tool_ctx, start, &mut log, &redact).await?;
        mcp::attach(ctx, role, &mut tool_ctx, &id, &mut log).await?;
        let budget = ctx
            .ledger
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stage_budget(
                &stage.budget,
                Arc::new(agent::budget::ModelPrice(Arc::clone(model))),
            );
        tool_ctx.spawn = tools::spawner(ctx, &tool_ctx, &id, model, budget.clone());
        // Streamed progress shows on the stage's progress line.
        let with_progress: Arc<dyn ChatModel> = Arc::new(ProgressModel {
            inner: Arc::clone(model),
            progress: progress.clone(),
            stage: id.clone(),
        });
        // Accepted lessons relevant to this stage, as the user's notes in its task.
        let task = prompt::task_message(&stage.task, &ctx.issue, &upstream);
        let memory = memory::inject(ctx, lane, start, &task, &upstream, &mut log).await?;
        // The files the task names, as read_file would show them, so a small
        // model sees what it is asked to change before it writes it.
        let (files, whole_files) =
            context::named_files(ctx, stage, role, &tool_ctx, &mut log).await?;
        // Subagents read the run's hooks from its record (src/hooks).
        if !ctx.session.hooks.is_empty() {
            let json = serde_json::to_vec(&*ctx.session.hooks).unwrap_or_default();
            ctx.run_dir
                .write_file(crate::hooks::config::RUN_FILE, &json)?;
        }
        let cfg = AgentConfig {
            budget,
            compaction: ctx.session.limits.compaction,
            agent_path: id.clone(),
            system_prompt: prompt::with_instructions(
                prompt::with_instructions(
                    prompt::system_prompt(&role.prompt, &crate::tools::offered_names(&tool_ctx)),
                    &instructions,
                ),
                &skills.section,
            ),
            task: format!(
                "{}{}",
                verify::with_baseline(format!("{task}{files}"), baseline.as_ref()),
                memory.text
            ),
            max_turns: stage.max_turns.unwrap_or(role.max_turns).max(1),
            require_verdict: requires_verdict(&ctx.plan.pipeline, stage),
            require_choice: stage.select.as_ref().map(|s| s.replicas.len() as u32),
            text_result: role.text_result || stage.text_result,
            text_tool_calls: stage.text_tool_calls,
            whole_files,
            brief: task.clone(),
            text_edits: crate::llm::textedits::text_edits_enabled(
                role.text_edits,
                model.tool_calling(),
            ),
            // A writing stage with a gate may end on prose; the gate judges it.
            hooks: Arc::new(crate::hooks::StageHooks::new(
                ctx.session.hooks.for_role(&role.name),
                format!("{}/{id}", ctx.run_id),
                stage_dir.join("actions.jsonl"),
                false,
            )),
            change_optional: !stage.required,
            decline_allowed: !stage.required || stage.round > 1,
            finish_from_text: !(stage.verify.is_empty()
                || role.read_only
                || role.text_result
                || stage.text_result
                || requires_verdict(&ctx.plan.pipeline, stage)),
        };
        Ok(Self {
            ctx,
            stage,
            role,
            lane,
            start,
            progress,
            id,
            started,
            log,
            tool_ctx,
            model: with_progress,
            boot,
            baseline,
            task,
            memory,
            cfg,
            model_source,
            escalated_from,
        })
    }

    /// The agent, then its verify gate (which may send it back to work); a
    /// lane that could not be prepared ends the stage before its first turn.
    /// The agent's summary is made safe to show and its transcript written.
    async fn run_agent(&mut self) -> Result<(AgentOutcome, Option<VerifyReport>), RunError> {
        let (ctx, stage, progress) = (self.ctx, self.stage, self.progress);
        let on_turn =
            |turn: u32, tokens: TokenCount| progress.turn(stage.id.as_str(), turn, tokens);
        let mut agent = agent::Agent::start(
            self.model.as_ref(),
            &self.tool_ctx,
            &self.cfg,
            &mut self.log,
        )
        .await?;
        let verify = match &self.boot.failure {
            Some(why) => {
                agent.fail(AgentEnd::SetupFailed(why.clone()));
                None
            }
            None => {
                agent
                    .run(self.model.as_ref(), &self.tool_ctx, &mut self.log, &on_turn)
                    .await?;
                verify::gate(
                    stage,
                    self.cfg.require_verdict || self.role.read_only,
                    &mut agent,
                    self.model.as_ref(),
                    &self.tool_ctx,
                    &mut self.log,
                    &on_turn,
                )
                .await?
            }
        };
        let mut outcome = agent.finish(&mut self.log)?;
        ctx.ledger
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .charge(&outcome.budget.used);
        // The summary lands in state.json, pr.md, the commit message and on
        // stdout: a key the model echoed must not, nor a NUL or an escape
        // sequence, nor 100 MB of it (the transcript keeps the whole text).
        outcome.summary = self.redact(&crate::text::model_text(
            &outcome.summary,
            MAX_SUMMARY_BYTES,
        ));
        let transcript = serde_json::to_string_pretty(&outcome.transcript).unwrap_or_default();
        ctx.run_dir.write_file(
            &format!("stages/{}/transcript.json", self.id),
            self.redact(&transcript).as_bytes(),
        )?;
        Ok((outcome, verify))
    }

    /// The lessons distilled, the `stage_end` event, and what the stage
    /// reports back to the run.
    async fn record(
        mut self,
        outcome: AgentOutcome,
        verify: Option<VerifyReport>,
        c: Committed,
    ) -> Result<StageOutcome, RunError> {
        self.distill(&outcome, verify.as_ref(), &c).await?;
        let Committed {
            failure,
            no_change,
            duration_ms,
            commit,
            branch,
            stat,
            from_watch,
            ..
        } = c;
        self.log.append(&ActionEvent::StageEnd(event::StageEnd {
            status: match (&failure, no_change) {
                (Some(_), true) => "no_change",
                (Some(_), false) => "failed",
                (None, _) => "succeeded",
            }
            .to_owned(),
            commit: commit.to_string(),
            branch: branch.clone(),
            reason: failure.clone(),
            files_changed: stat.files_changed,
            insertions: stat.insertions,
            deletions: stat.deletions,
            duration_ms,
            verify: verify
                .as_ref()
                .map(|v| if v.passed { "pass" } else { "fail" }.to_owned()),
            verdict_from_text: outcome.verdict_from_text,
            finish_from_text: outcome.finish_from_text,
            approved_despite_failed_verify: outcome.approved_despite_failed_verify,
            // Whether the lane's watcher said what changed (else: walked).
            changes_from_watch: from_watch,
            no_change: outcome.no_change,
            syntax_errors: outcome.syntax_errors.clone(),
        }))?;
        let skip = outcome.digest.len().saturating_sub(DIGEST_LINES);
        let digest = outcome.digest[skip..]
            .iter()
            .map(|l| self.redact(l))
            .collect();
        Ok(StageOutcome {
            cause: super::escalate::cause(&outcome.end, &outcome.budget)
                .filter(|_| failure.is_some()),
            model: self.model.model_name(),
            model_source: self.model_source.clone(),
            earlier: Vec::new(),
            check: None,
            selection: None,
            choice: outcome.choice,
            budget: outcome.budget.clone(),
            commit,
            branch,
            model_failed: matches!(outcome.end, AgentEnd::ModelError(_)),
            internal_failed: matches!(outcome.end, AgentEnd::ToolFault(_)),
            failure,
            verdict: outcome.verdict,
            verdict_from_text: outcome.verdict_from_text,
            finish_from_text: outcome.finish_from_text,
            approved_despite_failed_verify: outcome.approved_despite_failed_verify,
            no_change,
            verify: verify.map(|mut v| {
                v.output_tail = self.redact(&v.output_tail);
                v
            }),
            setup: self.boot.setup,
            baseline: self.baseline,
            summary: outcome.summary,
            turns: outcome.turns,
            tokens: outcome.tokens,
            duration_ms,
            digest,
        })
    }

    /// A replica's selection check: the `tests` strategy's commands run
    /// once each in its lane, on its committed result (logged as
    /// `baseline` events on that commit); `None` for other stages, and when
    /// the lane could not be prepared.
    async fn replica_check(
        &mut self,
        c: &Committed,
    ) -> Result<Option<crate::runlog::BaselineReport>, RunError> {
        let Some(replica) = self.stage.replica.as_ref().filter(|r| !r.check.is_empty()) else {
            return Ok(None);
        };
        if self.boot.failure.is_some() {
            return Ok(None);
        }
        let secrets = self.ctx.session.secrets.clone();
        let redact = move |text: &str| crate::secrets::redact(text, &secrets);
        let report = agent::verify::run_baseline(
            &replica.check,
            &self.tool_ctx,
            &c.commit,
            &mut self.log,
            &redact,
        )
        .await?;
        Ok(Some(report))
    }

    /// A text with the run's known secret values masked.
    fn redact(&self, text: &str) -> String {
        crate::secrets::redact(text, &self.ctx.session.secrets)
    }
}
