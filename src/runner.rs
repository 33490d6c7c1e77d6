//! The runner: owns a run's state from start to end. It creates the run's
//! worktree, runs each stage's agent in plan order, commits every stage on
//! its own branch, hands summaries/diffs/digests downstream, and writes the
//! run record and the PR text.
//!
//! Invariants: the user's working tree, index and branch are never touched
//! (all work happens in the run's linked worktree); `state.json` is rewritten
//! after every stage transition; a stage's partial work is committed on its
//! branch even when the stage fails, so nothing is lost.

use crate::agent::{self, AgentConfig, AgentEnd, prompt};
use crate::git::{self, GitError};
use crate::ids::Verdict;
use crate::llm::ChatModel;
use crate::pipeline::{Pipeline, Stage};
use crate::policy::BashPolicy;
use crate::role::Role;
use crate::runlog::{
    ActionLog, RUN_FORMAT, RecordError, RunDir, RunState, RunStatus, StageRecord, StageStatus,
    TokenCount,
};
use crate::tools::ToolContext;
use crate::ui::Ui;
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Bytes of the whole-run diff put into the PR body's diffstat section.
const PR_DIFF_BUDGET: usize = 64 * 1024;

/// Errors that stop a run before or between stages (a failing stage is not
/// one of them: it is recorded in the run state).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A git operation failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// The run record could not be written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A role named by the pipeline is missing.
    #[error("find role `{role}` for stage `{stage}`")]
    MissingRole {
        /// The stage.
        stage: String,
        /// The role it names.
        role: String,
    },
    /// Setting up the tools of a stage failed.
    #[error("prepare the tools of stage `{stage}` in {path}: {source}")]
    Tools {
        /// The stage.
        stage: String,
        /// The worktree.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A blocking task panicked or was cancelled.
    #[error("finish a background git task: {0}")]
    Join(String),
}

/// Everything a run needs.
pub struct RunOptions {
    /// Any path inside the user's repository.
    pub repo: PathBuf,
    /// The validated, unrolled pipeline.
    pub pipeline: Pipeline,
    /// The roles its stages name.
    pub roles: HashMap<String, Role>,
    /// The issue text (may be empty for `orch agent`).
    pub issue: String,
    /// The base revision (`HEAD` by default).
    pub base: String,
    /// The model backend.
    pub model: Arc<dyn ChatModel>,
    /// The model base URL, for the record (never a key).
    pub base_url: Option<String>,
    /// Values to redact from every record (API keys).
    pub secrets: Vec<String>,
    /// Bash policy inputs shared by all stages (`--yes`, TTY).
    pub assume_yes: bool,
    /// Whether `ask` rules may prompt on a terminal.
    pub interactive: bool,
}

/// How a run ended.
#[derive(Debug)]
pub struct RunSummary {
    /// The final state (also in `state.json`).
    pub state: RunState,
    /// The run's record directory.
    pub record_dir: PathBuf,
    /// The PR title and body (`None` when a stage failed).
    pub pr: Option<(String, String)>,
    /// True when the run failed because the model backend failed.
    pub model_failed: bool,
    /// The last agent's report (what `orch agent` prints).
    pub last_summary: String,
}

/// What the runner remembers of a finished stage for hand-offs.
struct Done {
    commit: String,
    digest: Vec<String>,
}

/// A new sortable run id: UTC time plus 4 hex digits of randomness.
pub fn new_run_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let now = chrono::Utc::now();
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(now.timestamp_nanos_opt().unwrap_or_default() as u128);
    h.write_u32(std::process::id());
    format!(
        "{}-{:04x}",
        now.format("%Y%m%d-%H%M%S"),
        h.finish() & 0xffff
    )
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, GitError> + Send + 'static,
) -> Result<T, RunError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RunError::Join(e.to_string()))?
        .map_err(RunError::Git)
}

/// Runs a whole pipeline and returns its summary. Stage failures are recorded
/// in the returned state, not returned as errors.
pub async fn run_pipeline(opts: RunOptions, ui: &Ui) -> Result<RunSummary, RunError> {
    let repo_path = opts.repo.clone();
    let info = blocking(move || git::open_repo(&repo_path)).await?;
    let common = info.common_dir.clone();
    let base = opts.base.clone();
    let c = common.clone();
    let base_sha = blocking(move || git::resolve_commit(&c, &base)).await?;

    let run_id = new_run_id();
    let run_dir = RunDir::create(&common, &run_id)?;
    run_dir.write_file("issue.md", opts.issue.as_bytes())?;
    let worktree = common.join("orch").join("worktrees").join(&run_id);
    let final_branch = format!("orch/{run_id}/pr");

    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut state = RunState {
        format: RUN_FORMAT.to_owned(),
        run_id: run_id.clone(),
        pipeline: opts.pipeline.name.clone(),
        pipeline_origin: opts.pipeline.origin.clone(),
        status: RunStatus::Running,
        created: now.clone(),
        updated: now,
        repo: info.workdir.display().to_string(),
        base_commit: base_sha.clone(),
        worktree: worktree.display().to_string(),
        final_branch: final_branch.clone(),
        model: opts.model.model_name(),
        model_label: opts.model.label(),
        base_url: opts.base_url.clone(),
        pr_title: None,
        stages: opts
            .pipeline
            .stages
            .iter()
            .map(|s| StageRecord {
                id: s.id.to_string(),
                role: s.role.clone(),
                status: StageStatus::Pending,
                branch: None,
                commit: None,
                parent_commit: None,
                verdict: None,
                summary: None,
                turns: 0,
                tokens: TokenCount::default(),
                duration_ms: 0,
                reason: None,
            })
            .collect(),
    };
    run_dir.write_state(&state)?;
    ui.run_started(&state);

    {
        let (c, wt, br, b) = (
            common.clone(),
            worktree.clone(),
            final_branch.clone(),
            base_sha.clone(),
        );
        let name = format!("orch-{run_id}");
        blocking(move || git::create_worktree(&c, &name, &wt, &br, &b)).await?;
    }

    let mut done: HashMap<String, Done> = HashMap::new();
    let mut head = base_sha.clone();
    let mut model_failed = false;
    let mut last_summary = String::new();
    let reviews = review_stage_bases(&opts.pipeline);

    for stage in &opts.pipeline.stages {
        let id = stage.id.to_string();
        if let Some(reason) = skip_reason(stage, &state) {
            let rec = state.stage_mut(&id).expect("stage records mirror the plan");
            rec.status = StageStatus::Skipped;
            rec.reason = Some(reason);
            ui.stage_skipped(rec);
            touch(&mut state);
            run_dir.write_state(&state)?;
            continue;
        }
        let role = opts
            .roles
            .get(&stage.role)
            .ok_or_else(|| RunError::MissingRole {
                stage: id.clone(),
                role: stage.role.clone(),
            })?;
        let require_verdict = reviews.contains(stage.base_id.as_str());
        let upstream = handoff(&opts.pipeline, stage, &state, &done, &common).await?;

        let rec = state.stage_mut(&id).expect("stage records mirror the plan");
        rec.status = StageStatus::Running;
        rec.parent_commit = Some(head.clone());
        touch(&mut state);
        run_dir.write_state(&state)?;
        ui.stage_started(&id, &role.name);

        let started = Instant::now();
        let stage_dir = run_dir.stage_dir(&id)?;
        let mut log = ActionLog::open(&stage_dir.join("actions.jsonl"), opts.secrets.clone())?;
        log.append(
            "stage_start",
            json!({"run": run_id, "stage": id, "role": role.name, "parent": head, "model": opts.model.model_name()}),
        )?;
        let policy = BashPolicy {
            allow: role.bash.allow.clone(),
            ask: role.bash.ask.clone(),
            deny: role.bash.deny.clone(),
            allowlist: BashPolicy::load_allowlist(&info.workdir).unwrap_or_default(),
            assume_yes: opts.assume_yes,
            interactive: opts.interactive,
        };
        let mut tool_ctx = ToolContext::new(&worktree, &role.tools, role.read_only, policy)
            .map_err(|source| RunError::Tools {
                stage: id.clone(),
                path: worktree.clone(),
                source,
            })?;
        tool_ctx.spawn = crate::subagent::SpawnContext::for_stage(
            &info.workdir,
            &tool_ctx.root,
            &run_dir.root,
            &id,
            opts.model.as_ref(),
            opts.assume_yes,
        );
        let cfg = AgentConfig {
            agent_path: id.clone(),
            system_prompt: prompt::system_prompt(
                &role.prompt,
                &crate::tools::offered_names(&tool_ctx),
            ),
            task: prompt::task_message(&stage.task, &opts.issue, &upstream),
            max_turns: stage.max_turns.unwrap_or(role.max_turns).max(1),
            require_verdict,
        };
        let on_turn = |turn: u32, tokens: TokenCount| ui.stage_progress(&id, turn, tokens);
        let outcome =
            agent::run_agent(opts.model.as_ref(), &tool_ctx, &cfg, &mut log, &on_turn).await?;
        let transcript = serde_json::to_vec_pretty(&outcome.transcript).unwrap_or_default();
        run_dir.write_file(
            &format!("stages/{id}/transcript.json"),
            crate::runlog::redact(&String::from_utf8_lossy(&transcript), &opts.secrets).as_bytes(),
        )?;

        if role.read_only {
            discard_changes_of_read_only_role(&worktree, &head, &common, &mut log).await?;
        }
        let failure = outcome.end.failure_reason(cfg.max_turns);
        if matches!(outcome.end, AgentEnd::ModelError(_)) {
            model_failed = true;
        }
        let duration_ms = started.elapsed().as_millis() as u64;
        let message = commit_message(&CommitInfo {
            run_id: &run_id,
            stage: &id,
            role: &role.name,
            model: &opts.model.model_name(),
            summary: failure.as_deref().unwrap_or(&outcome.summary),
            verdict: outcome.verdict,
            turns: outcome.turns,
            tokens: outcome.tokens,
            duration_ms,
            failed: failure.is_some(),
        });
        let (wt, parent) = (worktree.clone(), head.clone());
        let commit = blocking(move || git::commit_all(&wt, &message, &parent)).await?;
        let branch = format!("orch/{run_id}/{id}");
        let (c, b, s) = (common.clone(), branch.clone(), commit.clone());
        blocking(move || git::set_branch(&c, &b, &s)).await?;
        let (c, from, to) = (common.clone(), head.clone(), commit.clone());
        let diff = blocking(move || git::diff(&c, &from, &to, usize::MAX)).await?;
        run_dir.write_file(&format!("stages/{id}/diff.patch"), diff.patch.as_bytes())?;
        log.append(
            "stage_end",
            json!({
                "status": if failure.is_some() { "failed" } else { "succeeded" },
                "commit": commit, "branch": branch, "reason": failure,
                "files_changed": diff.stat.files_changed,
                "insertions": diff.stat.insertions, "deletions": diff.stat.deletions,
                "ms": duration_ms,
            }),
        )?;

        let rec = state.stage_mut(&id).expect("stage records mirror the plan");
        rec.status = if failure.is_some() {
            StageStatus::Failed
        } else {
            StageStatus::Succeeded
        };
        rec.branch = Some(branch);
        rec.commit = Some(commit.clone());
        rec.verdict = outcome.verdict;
        rec.summary = Some(outcome.summary.clone());
        rec.turns = outcome.turns;
        rec.tokens = outcome.tokens;
        rec.duration_ms = duration_ms;
        rec.reason = failure.clone();
        ui.stage_finished(rec);
        touch(&mut state);
        head = commit.clone();
        last_summary = outcome.summary;
        done.insert(
            id.clone(),
            Done {
                commit,
                digest: outcome.digest,
            },
        );
        if failure.is_some() {
            state.status = RunStatus::Failed;
            run_dir.write_state(&state)?;
            break;
        }
        run_dir.write_state(&state)?;
    }

    let mut pr = None;
    if state.status == RunStatus::Running {
        let (c, from, to) = (common.clone(), base_sha.clone(), head.clone());
        let total = blocking(move || git::diff(&c, &from, &to, PR_DIFF_BUDGET)).await?;
        let (title, body) = pr_text(
            &opts.issue,
            &state,
            &total.stat.render(),
            &total.stat.summary(),
        );
        run_dir.write_file("pr.md", format!("{title}\n\n{body}").as_bytes())?;
        state.pr_title = Some(title.clone());
        state.status = RunStatus::Succeeded;
        pr = Some((title, body));
        touch(&mut state);
        run_dir.write_state(&state)?;
        // The branches hold every result; the checkout itself is only needed
        // to resume a run that did not finish.
        let (c, wt, name) = (common.clone(), worktree.clone(), format!("orch-{run_id}"));
        blocking(move || git::remove_worktree(&c, &name, &wt)).await?;
    }
    ui.run_finished(&state);
    Ok(RunSummary {
        state,
        record_dir: run_dir.root.clone(),
        pr,
        model_failed,
        last_summary,
    })
}

fn touch(state: &mut RunState) {
    state.updated = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
}

/// Base ids of the stages whose verdict gates a rework round: those stages
/// (and their later rounds) must give a verdict.
fn review_stage_bases(p: &Pipeline) -> std::collections::HashSet<String> {
    let by_id: HashMap<&str, &Stage> = p.stages.iter().map(|s| (s.id.as_str(), s)).collect();
    p.stages
        .iter()
        .filter_map(|s| s.run_if_changes_requested_by.as_ref())
        .filter_map(|r| by_id.get(r.as_str()))
        .map(|s| s.base_id.to_string())
        .collect()
}

/// Why a conditional rework stage does not run, if it does not.
fn skip_reason(stage: &Stage, state: &RunState) -> Option<String> {
    let gate = stage.run_if_changes_requested_by.as_ref()?;
    let rec = state.stage(gate.as_str())?;
    match (rec.status, rec.verdict) {
        (StageStatus::Succeeded, Some(Verdict::RequestChanges)) => None,
        (StageStatus::Succeeded, v) => Some(format!(
            "`{gate}` gave verdict {}; no rework needed",
            v.map_or("none", Verdict::as_str)
        )),
        _ => Some(format!("`{gate}` did not run")),
    }
}

/// The hand-off of a stage: for each upstream stage that ran (looking through
/// skipped ones), its summary, verdict, digest and diff. A rework round's
/// diff is shown cumulatively from the start of its first round, so a
/// reviewer always sees the whole change it reviews.
async fn handoff(
    p: &Pipeline,
    stage: &Stage,
    state: &RunState,
    done: &HashMap<String, Done>,
    common: &Path,
) -> Result<Vec<prompt::Upstream>, RunError> {
    let mut ids: Vec<String> = Vec::new();
    let mut queue: Vec<String> = stage.needs.iter().map(|n| n.to_string()).collect();
    while let Some(n) = queue.pop() {
        if ids.contains(&n) {
            continue;
        }
        match state.stage(&n).map(|r| r.status) {
            Some(StageStatus::Skipped) => {
                if let Some(s) = p.stage(&n) {
                    queue.extend(s.needs.iter().map(|x| x.to_string()));
                }
            }
            Some(_) => ids.push(n),
            None => {}
        }
    }
    ids.sort_by_key(|id| p.stages.iter().position(|s| s.id.as_str() == id));
    let share = prompt::HANDOFF_DIFF_BUDGET / ids.len().max(1);
    let mut out = Vec::new();
    for id in ids {
        let (Some(rec), Some(d)) = (state.stage(&id), done.get(&id)) else {
            continue;
        };
        let first = p
            .stage(&id)
            .map(|s| s.base_id.to_string())
            .and_then(|b| state.stage(&b))
            .and_then(|r| r.parent_commit.clone());
        let from = first
            .or_else(|| rec.parent_commit.clone())
            .unwrap_or_default();
        let (c, to) = (common.to_path_buf(), d.commit.clone());
        let diff = blocking(move || git::diff(&c, &from, &to, share)).await?;
        out.push(prompt::Upstream {
            id: id.clone(),
            role: rec.role.clone(),
            summary: rec.summary.clone().unwrap_or_default(),
            verdict: rec.verdict,
            diffstat: diff.stat.render(),
            patch: diff.patch,
            digest: d.digest.clone(),
        });
    }
    Ok(out)
}

/// A read-only role must not change the tree; if its shell commands did,
/// the changes are discarded (and the log says so) before its commit.
async fn discard_changes_of_read_only_role(
    worktree: &Path,
    head: &str,
    common: &Path,
    log: &mut ActionLog,
) -> Result<(), RunError> {
    let (wt, h) = (worktree.to_path_buf(), head.to_owned());
    let probe_msg = "orch: probe".to_owned();
    // Commit to a throwaway object to learn whether anything changed; the
    // branch is reset right after, so the probe commit is unreachable.
    let probe = blocking(move || git::commit_all(&wt, &probe_msg, &h)).await?;
    let (c, h, p) = (common.to_path_buf(), head.to_owned(), probe.clone());
    let diff = blocking(move || git::diff(&c, &h, &p, 4096)).await?;
    let (wt, h) = (worktree.to_path_buf(), head.to_owned());
    blocking(move || git::reset_worktree(&wt, &h)).await?;
    if diff.stat.files_changed > 0 {
        let files: Vec<&str> = diff.stat.files.iter().map(|f| f.path.as_str()).collect();
        log.append(
            "read_only_violation",
            json!({"discarded": files, "reason": "a read-only role changed the worktree; its changes were discarded"}),
        )?;
    }
    Ok(())
}

struct CommitInfo<'a> {
    run_id: &'a str,
    stage: &'a str,
    role: &'a str,
    model: &'a str,
    summary: &'a str,
    verdict: Option<Verdict>,
    turns: u32,
    tokens: TokenCount,
    duration_ms: u64,
    failed: bool,
}

/// The stage commit's message: a subject, the summary, and trailers.
fn commit_message(c: &CommitInfo<'_>) -> String {
    let first = c
        .summary
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let first = agent::cap(first.trim(), 60);
    let status = if c.failed { " [failed]" } else { "" };
    let mut m = format!("orch({}){status}: {first}\n\n", c.stage);
    if !c.summary.trim().is_empty() {
        m.push_str(c.summary.trim());
        m.push_str("\n\n");
    }
    m.push_str(&format!(
        "Orch-Run: {}\nOrch-Stage: {}\nOrch-Role: {}\nOrch-Model: {}\nOrch-Turns: {}\nOrch-Tokens: {} (prompt {}, completion {})\nOrch-Duration: {:.1}s\n",
        c.run_id,
        c.stage,
        c.role,
        c.model,
        c.turns,
        c.tokens.total(),
        c.tokens.prompt,
        c.tokens.completion,
        c.duration_ms as f64 / 1000.0,
    ));
    if let Some(v) = c.verdict {
        m.push_str(&format!("Orch-Verdict: {v}\n"));
    }
    m
}

/// The PR title and body, from the issue, the stages' summaries, the review
/// verdict and the diffstat.
pub fn pr_text(
    issue: &str,
    state: &RunState,
    diffstat: &str,
    stat_summary: &str,
) -> (String, String) {
    let issue_title = issue
        .lines()
        .map(|l| l.trim().trim_start_matches('#').trim())
        .find(|l| !l.is_empty())
        .unwrap_or("Changes by orch");
    let title = agent::cap(issue_title, 72);
    let ran: Vec<&StageRecord> = state
        .stages
        .iter()
        .filter(|s| s.status == StageStatus::Succeeded)
        .collect();
    let mut body = String::new();
    body.push_str("## Summary\n\n");
    for s in ran.iter().filter(|s| s.verdict.is_none()) {
        let summary = s.summary.as_deref().unwrap_or("").trim();
        if !summary.is_empty() {
            body.push_str(&format!(
                "- **{}** ({}): {}\n",
                s.id,
                s.role,
                summary.replace('\n', " ")
            ));
        }
    }
    if let Some(r) = ran.iter().rev().find(|s| s.verdict.is_some()) {
        body.push_str(&format!(
            "\n## Review\n\nFinal verdict: **{}** (`{}`). {}\n",
            r.verdict.map_or("none", Verdict::as_str),
            r.id,
            r.summary.as_deref().unwrap_or("").trim().replace('\n', " ")
        ));
        let rounds = ran.iter().filter(|s| s.verdict.is_some()).count();
        if rounds > 1 {
            body.push_str(&format!("Review rounds: {rounds}.\n"));
        }
    }
    body.push_str(&format!(
        "\n## Changes\n\n```\n{}{}\n```\n",
        diffstat, stat_summary
    ));
    body.push_str(
        "\n## Stages\n\n| stage | role | status | verdict | commit |\n|---|---|---|---|---|\n",
    );
    for s in &state.stages {
        body.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            s.id,
            s.role,
            s.status.as_str(),
            s.verdict.map_or("", Verdict::as_str),
            s.commit.as_deref().map_or("", |c| &c[..c.len().min(12)]),
        ));
    }
    body.push_str(&format!(
        "\nGenerated by orch run `{}` (pipeline `{}`, model: {}). Per-stage branches: `orch/{}/<stage>`.\n",
        state.run_id, state.pipeline, state.model_label, state.run_id
    ));
    (title, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_sort_by_time_and_are_ref_safe() {
        let a = new_run_id();
        assert_eq!(a.len(), "20260101-000000-abcd".len());
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }

    #[test]
    fn commit_message_has_trailers() {
        let m = commit_message(&CommitInfo {
            run_id: "r1",
            stage: "review",
            role: "reviewer",
            model: "replay",
            summary: "Looks good.\nMore.",
            verdict: Some(Verdict::Approve),
            turns: 3,
            tokens: TokenCount {
                prompt: 10,
                completion: 5,
            },
            duration_ms: 1500,
            failed: false,
        });
        assert!(m.starts_with("orch(review): Looks good.\n\n"));
        for t in [
            "Orch-Run: r1",
            "Orch-Stage: review",
            "Orch-Role: reviewer",
            "Orch-Model: replay",
            "Orch-Turns: 3",
            "Orch-Tokens: 15",
            "Orch-Duration: 1.5s",
            "Orch-Verdict: approve",
        ] {
            assert!(m.contains(t), "{t} missing in {m}");
        }
    }
}
