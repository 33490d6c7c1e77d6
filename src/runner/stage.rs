//! Running one stage in its lane: the agent with its tools and budget, then
//! the stage commit on its own branch, its diff, transcript and digest.

use super::{RunCtx, RunError, StageOutcome, blocking, pr};
use crate::agent::{self, AgentConfig, AgentEnd, prompt};
use crate::git::{self, GitError};
use crate::llm::ChatModel;
use crate::pipeline::{Pipeline, Stage};
use crate::policy::BashPolicy;
use crate::role::Role;
use crate::runlog::{ActionLog, DIGEST_LINES, TokenCount};
use crate::tools::ToolContext;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::lanes::Lane;

/// Most of a stage summary or failure reason kept in `state.json`, `pr.md`
/// and the commit message; the transcript keeps the whole reply.
const MAX_SUMMARY_BYTES: usize = 16 * 1024;

/// Base ids of the stages whose verdict gates a rework round: those stages
/// (and their later rounds) must give a verdict.
fn requires_verdict(p: &Pipeline, stage: &Stage) -> bool {
    p.stages
        .iter()
        .filter_map(|s| s.run_if_changes_requested_by.as_ref())
        .filter_map(|r| p.stage(r.as_str()))
        .any(|s| s.base_id == stage.base_id)
}

/// Runs one stage in its lane: the agent, then the commit on the stage's
/// branch, its diff and transcript. Runs as its own task; reports back.
pub(super) async fn run_stage(
    ctx: &RunCtx,
    stage: &Stage,
    role: &Role,
    lane: &Lane,
    start: &str,
    upstream: Vec<prompt::Upstream>,
    progress: &crate::ui::ProgressHandle,
) -> Result<StageOutcome, RunError> {
    let on_turn = |turn: u32, tokens: TokenCount| progress.turn(stage.id.as_str(), turn, tokens);
    let id = stage.id.to_string();
    let started = Instant::now();
    let stage_dir = ctx.run_dir.stage_dir(&id)?;
    let mut log = ActionLog::open(
        &stage_dir.join("actions.jsonl"),
        ctx.session.secrets.clone(),
    )?
    .with_events(progress.stage_events(&id));
    // The stage's, else its role's, else the run's model (`runner::models`).
    let chosen = super::models::model_for(&ctx.session, stage, role);
    let model = &chosen.model;
    // A role's sampling keys override the profile's for its stages.
    let sampled = (!role.sampling.is_empty())
        .then(|| model.with_sampling(&role.sampling))
        .flatten();
    let model = sampled.as_ref().unwrap_or(model);
    log.append(
        "stage_start",
        json!({"run": ctx.run_id, "stage": id, "role": role.name, "parent": start, "lane": lane.name, "lane_checkout": lane.checkout, "model": model.model_name(), "model_source": chosen.source, "base_url": chosen.base_url}),
    )?;
    if !role.warnings.is_empty() || role.model_note.is_some() || !role.sampling.is_empty() {
        log.append(
            "role_notes",
            json!({"role": role.name, "origin": role.origin, "warnings": role.warnings, "model_note": role.model_note, "sampling": role.sampling}),
        )?;
    }
    let instructions = project_instructions(ctx, stage, &mut log).await?;
    let policy = BashPolicy {
        allow: role.bash.allow.clone(),
        ask: role.bash.ask.clone(),
        deny: role.bash.deny.clone(),
        allowlist: ctx.allowlist.clone(),
        assume_yes: ctx.session.assume_yes,
        interactive: ctx.session.interactive,
    };
    let mut tool_ctx =
        ToolContext::new(&lane.path, &role.tools, role.read_only, policy).map_err(|source| {
            RunError::Tools {
                stage: id.clone(),
                path: lane.path.clone(),
                source,
            }
        })?;
    // Every tool process (and subagent) of the run carries its id, so a
    // later `resume` can find what a SIGKILLed orch left running.
    tool_ctx
        .env
        .push((crate::exec::RUN_MARKER.to_owned(), ctx.run_id.to_string()));
    let sandbox = crate::sandbox::ToolSandbox::for_role(&ctx.common, role).map_err(|source| {
        RunError::Tools {
            stage: id.clone(),
            path: lane.path.clone(),
            source,
        }
    })?;
    log.append(
        "sandbox",
        json!({"profile": sandbox.choice().label(), "kernel": crate::sandbox::availability().describe()}),
    )?;
    tool_ctx.sandbox = Some(Arc::new(sandbox));
    tool_ctx.ready = Some(lane.watch.barrier());
    let redact = |text: &str| crate::runlog::redact(text, &ctx.session.secrets);
    // The lane gets its included files and its setup, and the verify
    // commands run once on the start commit, before any model call.
    let boot = super::bootstrap::prepare_lane(ctx, &id, &tool_ctx, &lane.watch, &mut log).await?;
    let baseline = match boot.failure {
        None if stage.round == 1 && !stage.verify.is_empty() => Some(
            agent::verify::run_baseline(&stage.verify, &tool_ctx, start, &mut log, &redact).await?,
        ),
        _ => None,
    };
    let budget = ctx
        .ledger
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .stage_budget(
            &stage.budget,
            Arc::new(agent::budget::ModelPrice(Arc::clone(model))),
        );
    tool_ctx.spawn = crate::subagent::SpawnContext::for_stage(
        &ctx.common,
        &tool_ctx.root,
        &ctx.run_dir.root,
        &id,
        model.as_ref(),
        ctx.session.assume_yes,
        budget.clone(),
        ctx.session.limits.compaction,
    )
    .map(|s| s.with_sandbox(tool_ctx.sandbox.clone()))
    .map(|s| Arc::new(s) as Arc<dyn crate::tools::Spawner>);
    // Streamed progress shows on the stage's progress line.
    let with_progress: Arc<dyn ChatModel> = Arc::new(ProgressModel {
        inner: Arc::clone(model),
        progress: progress.clone(),
        stage: id.clone(),
    });
    let model = &with_progress;
    // Accepted lessons relevant to this stage, as the user's notes in its task.
    let task = prompt::task_message(&stage.task, &ctx.issue, &upstream);
    let memory = crate::memory::hook::inject(
        ctx.session.memory,
        &ctx.common,
        &lane.path,
        start,
        task.clone(),
        upstream
            .iter()
            .flat_map(|u| crate::memory::hook::diffstat_paths(&u.diffstat))
            .collect(),
        &ctx.session.secrets,
        &mut log,
    )
    .await?;
    let cfg = AgentConfig {
        budget,
        compaction: ctx.session.limits.compaction,
        agent_path: id.clone(),
        system_prompt: prompt::with_instructions(
            prompt::system_prompt(&role.prompt, &crate::tools::offered_names(&tool_ctx)),
            &instructions,
        ),
        task: format!(
            "{}{}",
            with_baseline(task.clone(), baseline.as_ref()),
            memory.text
        ),
        max_turns: stage.max_turns.unwrap_or(role.max_turns).max(1),
        require_verdict: requires_verdict(&ctx.plan.pipeline, stage),
        text_result: role.text_result || stage.text_result,
        text_tool_calls: stage.text_tool_calls,
    };
    // The agent, then its verify gate (which may send it back to work); a
    // lane that could not be prepared ends the stage before its first turn.
    let mut agent = agent::Agent::start(&tool_ctx, &cfg, &mut log)?;
    let verify = match &boot.failure {
        Some(why) => {
            agent.fail(AgentEnd::SetupFailed(why.clone()));
            None
        }
        None => {
            agent
                .run(model.as_ref(), &tool_ctx, &mut log, &on_turn)
                .await?;
            let gate = agent::verify::Gate {
                commands: &stage.verify,
                rounds: stage.verify_rounds,
            };
            agent::verify::run_gate(
                &gate,
                &mut agent,
                model.as_ref(),
                &tool_ctx,
                &mut log,
                &on_turn,
            )
            .await?
        }
    };
    let mut outcome = agent.finish(&mut log)?;
    ctx.ledger
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .charge(&outcome.budget.used);
    // The summary lands in state.json, pr.md, the commit message and on
    // stdout: a key the model echoed must not, nor a NUL or an escape
    // sequence, nor 100 MB of it (the transcript keeps the whole text).
    outcome.summary = redact(&crate::text::model_text(
        &outcome.summary,
        MAX_SUMMARY_BYTES,
    ));
    let transcript = serde_json::to_string_pretty(&outcome.transcript).unwrap_or_default();
    ctx.run_dir.write_file(
        &format!("stages/{id}/transcript.json"),
        redact(&transcript).as_bytes(),
    )?;
    // git stages the lane (only the paths its watcher marked, when it can
    // vouch for them); what changed is read from the tree git wrote.
    let staged = stage_lane(lane, &ctx.common, start).await?;
    let from_watch = staged.how == "paths";
    let mut tree = staged.tree;
    let mut changed = staged.changed;
    log.append(
        "staged",
        json!({"how": staged.how, "changed": changed.len()}),
    )?;
    if role.read_only && !changed.is_empty() {
        discard_changes_of_read_only_role(&lane.path, start, &changed, &mut log).await?;
        tree = staged.start_tree.clone();
        changed.clear();
    }
    // A known secret value in a changed file is never committed: the
    // stage fails, its changes are discarded.
    let leaked = crate::sandbox::refuse_secrets_in(
        &lane.path,
        start,
        &ctx.session.secrets,
        Some(changed.clone()),
    )
    .await
    .map_err(|source| RunError::Tools {
        stage: id.clone(),
        path: lane.path.clone(),
        source,
    })?;
    if leaked.is_some() {
        tree = staged.start_tree.clone();
    }
    // The staged objects reach the user's store only if the stage's tree
    // is committed: a refused or discarded one's never do.
    if let Some(held) = staged.held {
        let keep = tree != staged.start_tree;
        blocking(move || {
            if keep {
                held.keep()?;
            } else {
                held.discard();
            }
            Ok(())
        })
        .await?;
    }
    let failure = match (outcome.end.failure_reason(cfg.max_turns), leaked) {
        (Some(f), Some(l)) => Some(format!("{f}; {l}")),
        (f, l) => f.or(l),
    }
    .map(|f| redact(&crate::text::model_text(&f, MAX_SUMMARY_BYTES)));
    let duration_ms = started.elapsed().as_millis() as u64;
    let message = pr::commit_message(&pr::CommitInfo {
        run_id: ctx.run_id.as_str(),
        stage: &id,
        role: &role.name,
        model: &model.model_name(),
        summary: failure.as_deref().unwrap_or(&outcome.summary),
        verdict: outcome.verdict,
        turns: outcome.turns,
        tokens: outcome.tokens,
        cost_usd: outcome.budget.used.cost_usd,
        duration_ms,
        failed: failure.is_some(),
        verify: verify.as_ref().map(|v| v.passed),
        memory: &memory.ids,
    });
    let (wt, parent, watch) = (lane.path.clone(), start.to_owned(), lane.watch.get().await);
    let commit = blocking(move || {
        let commit = git::commit_tree(&wt, &message, &parent, &tree)?;
        // The record restarts from the commit (the next stage in this lane
        // starts there); one that cannot is replaced when the lane is next
        // acquired.
        if let Some(w) = watch {
            w.restart(&commit);
        }
        Ok(commit)
    })
    .await?;
    let branch = format!("orch/{}/{id}", ctx.run_id);
    let retried_after_failure = crate::memory::hook::prior_attempt_failed(&ctx.common, &branch);
    let (c, b, s) = (ctx.common.clone(), branch.clone(), commit.clone());
    blocking(move || {
        keep_old_branch(&c, &b)?;
        git::set_branch(&c, &b, &s)
    })
    .await?;
    let stat = super::flow::write_stage_patch(ctx, &id, start, &commit).await?;
    // Before `stage_end`, so the stage's log ends with its end. The
    // distiller's tokens count against the run's budget.
    let distill_tokens = crate::memory::hook::after_stage(
        crate::memory::hook::StageEnd {
            mode: ctx.session.memory,
            common: ctx.common.clone(),
            used: &memory.ids,
            evidence: crate::memory::Evidence {
                run: ctx.run_id.to_string(),
                stage: id.clone(),
                commit: commit.clone(),
                event: String::new(),
            },
            task: &task,
            transcript: &outcome.transcript,
            verify: verify.as_ref(),
            failed: failure.is_some(),
            retried_after_failure,
            // A later review round runs only after one requested changes.
            approved_after_changes: stage.id != stage.base_id
                && cfg.require_verdict
                && outcome.verdict == Some(crate::ids::Verdict::Approve),
            secrets: &ctx.session.secrets,
        },
        ctx.session.model.as_ref(),
        &mut log,
    )
    .await?;
    ctx.ledger
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .charge_tokens(distill_tokens);
    log.append(
        "stage_end",
        json!({
            "status": if failure.is_some() { "failed" } else { "succeeded" },
            "commit": commit, "branch": branch, "reason": failure,
            "files_changed": stat.files_changed,
            "insertions": stat.insertions, "deletions": stat.deletions,
            "duration_ms": duration_ms,
            "verify": verify.as_ref().map(|v| if v.passed { "pass" } else { "fail" }),
            "verdict_from_text": outcome.verdict_from_text,
            // Whether the lane's watcher said what changed (else: walked).
            "changes_from_watch": from_watch,
        }),
    )?;
    let skip = outcome.digest.len().saturating_sub(DIGEST_LINES);
    Ok(StageOutcome {
        budget: outcome.budget.clone(),
        commit,
        branch,
        model_failed: matches!(outcome.end, AgentEnd::ModelError(_)),
        internal_failed: matches!(outcome.end, AgentEnd::ToolFault(_)),
        failure,
        verdict: outcome.verdict,
        verdict_from_text: outcome.verdict_from_text,
        verify,
        setup: boot.setup,
        baseline,
        summary: outcome.summary,
        turns: outcome.turns,
        tokens: outcome.tokens,
        duration_ms,
        digest: outcome.digest[skip..].iter().map(|l| redact(l)).collect(),
    })
}

/// The task message, told (only when one failed) what the verify commands
/// did before the agent's change, so it does not chase a failure it did not
/// cause; a passing baseline adds nothing to the first request.
fn with_baseline(mut task: String, baseline: Option<&agent::verify::BaselineReport>) -> String {
    if let Some(b) = baseline.filter(|b| !b.passed()) {
        task.push_str("\n# Baseline\n\n");
        task.push_str(&b.handoff());
    }
    task
}

/// The repository's instruction files for this stage, read from the run's
/// base commit, logged as a `project_instructions` event (path and blob id
/// of each file); the prompt section, empty when off or none was found.
async fn project_instructions(
    ctx: &RunCtx,
    stage: &Stage,
    log: &mut ActionLog,
) -> Result<String, RunError> {
    if !ctx.plan.pipeline.project_instructions {
        log.append(
            "project_instructions",
            json!({"enabled": false, "files": []}),
        )?;
        return Ok(String::new());
    }
    let (common, base) = (ctx.common.clone(), ctx.base_commit.clone());
    let hints = [stage.task.clone(), ctx.issue.clone()];
    let found = blocking(move || {
        let hints: Vec<&str> = hints.iter().map(String::as_str).collect();
        agent::instructions::load(&common, &base, &hints)
    })
    .await?;
    log.append(
        "project_instructions",
        json!({"enabled": true, "commit": ctx.base_commit, "files": found.files, "cut": found.cut, "limit_bytes": agent::instructions::INSTRUCTIONS_BUDGET}),
    )?;
    Ok(found.text)
}

/// A model wrapper that reports streamed characters to the stage's progress
/// line; everything else is the inner model's.
struct ProgressModel {
    inner: Arc<dyn ChatModel>,
    progress: crate::ui::ProgressHandle,
    stage: String,
}

impl crate::llm::ModelWrapper for ProgressModel {
    fn inner(&self) -> &dyn ChatModel {
        self.inner.as_ref()
    }

    fn send<'a>(
        &'a self,
        req: &'a crate::llm::ChatRequest,
        _on_delta: Option<&'a crate::llm::DeltaFn<'a>>,
    ) -> crate::llm::BoxFuture<'a, Result<crate::llm::ChatResponse, crate::llm::LlmError>> {
        Box::pin(async move {
            let on_delta = |chars: usize| self.progress.streaming(&self.stage, chars);
            self.inner.complete_with_progress(req, &on_delta).await
        })
    }
}

/// Before a stage runs again (retry, rollback), its old branch is moved to
/// the first free `<branch>.vN`, so every attempt stays reviewable.
fn keep_old_branch(common: &Path, branch: &str) -> Result<(), GitError> {
    if git::branch_sha(common, branch)?.is_none() {
        return Ok(());
    }
    let mut n = 1;
    while git::branch_sha(common, &format!("{branch}.v{n}"))?.is_some() {
        n += 1;
    }
    git::rename_branch(common, branch, &format!("{branch}.v{n}"))
}

/// A lane staged by git at a stage's end.
struct StagedLane {
    /// The tree git wrote for the lane.
    tree: String,
    /// The start commit's tree.
    start_tree: String,
    /// Paths whose entries differ between the two, sorted.
    changed: Vec<String>,
    /// How it was staged: `paths` (the watcher's marks) or `whole`.
    how: &'static str,
    /// The objects git wrote, held out of the user's store until the
    /// commit is decided.
    held: Option<git::Quarantine>,
}

/// Stages the lane with git ([`git::stage_tree`], given the watcher's
/// marks when it can vouch for them) and reads what changed since `start`.
async fn stage_lane(lane: &Lane, common: &Path, start: &str) -> Result<StagedLane, RunError> {
    // A pooled lane whose last user's files could not be removed holds more
    // than the stage did: nothing of it is committed.
    if let Some(why) = lane.watch.failure().await {
        return Err(RunError::Git(GitError::Cli {
            command: format!("ready the lane {}", lane.path.display()),
            detail: why,
        }));
    }
    let watch = lane.watch.get().await;
    let (path, common, start) = (lane.path.clone(), common.to_path_buf(), start.to_owned());
    blocking(move || {
        let marks = watch.and_then(|w| w.changes());
        let (tree, how, held) = git::stage_tree_held(&path, &start, marks.as_ref())?;
        let changed = git::changed_between(&common, &start, &tree, held.as_ref())?;
        let start_tree = git::tree_of(&common, &start)?;
        Ok(StagedLane {
            tree,
            start_tree,
            changed,
            held,
            how: match how {
                git::Staged::Paths(_) => "paths",
                git::Staged::Whole => "whole",
            },
        })
    })
    .await
}

/// A read-only role must not change the tree; if its shell commands did,
/// the changes (`changed`, non-empty) are discarded and the log says so.
async fn discard_changes_of_read_only_role(
    worktree: &Path,
    head: &str,
    changed: &[String],
    log: &mut ActionLog,
) -> Result<(), RunError> {
    let (wt, h) = (worktree.to_path_buf(), head.to_owned());
    blocking(move || git::reset_worktree(&wt, &h)).await?;
    log.append(
        "read_only_violation",
        json!({"discarded": changed, "reason": "a read-only role changed the worktree; its changes were discarded"}),
    )?;
    Ok(())
}
