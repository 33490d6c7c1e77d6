//! `--dry-run` of `orch run` and `orch agent`: the plan a run would follow,
//! resolved as the run would resolve it (pipeline, roles, model settings,
//! sandbox, budgets), with each first-wave stage's system prompt and first
//! message rendered by the same functions a stage uses
//! ([`crate::agent::prompt`]), its offered tools, and for every later stage
//! what it will receive from the stages it needs. Nothing is created: no
//! model request, no run record, branch, ref, object or worktree.

use super::error::CliError;
use super::output::Out;
use crate::agent::prompt;
use crate::pipeline::{Pipeline, Stage};
use crate::role::Role;
use crate::runner::Session;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;

/// Where the run would start.
pub(super) struct DryBase {
    /// The revision as given (`HEAD`, a SHA, `worktree`).
    pub rev: String,
    /// The commit it resolves to now, when it names one.
    pub commit: Option<crate::git::CommitId>,
    /// Paths that differ from `HEAD` in the user's working tree.
    pub dirty: Vec<String>,
    /// The repository's common git dir (project instructions are read there).
    pub common: std::path::PathBuf,
}

/// What a dry run needs.
pub(super) struct DryRun<'a> {
    /// The repository.
    pub repo: &'a Path,
    /// The unrolled pipeline.
    pub pipeline: &'a Pipeline,
    /// Its roles.
    pub roles: &'a HashMap<String, Role>,
    /// The issue text.
    pub issue: &'a str,
    /// The session the run would use.
    pub session: &'a Session,
    /// The base.
    pub base: DryBase,
}

/// The tools a stage of `role` is offered, in the order a stage offers them
/// (`spawn_agent` only when the model can be handed to a child process).
fn offered_tools(role: &Role, session: &Session) -> Vec<String> {
    let mut names: Vec<String> = crate::tools::definitions(&role.tools)
        .iter()
        .map(|d| d.name.to_owned())
        .collect();
    if role.tools.iter().any(|t| t == "spawn_agent") && session.model.spawn_settings().is_some() {
        names.push("spawn_agent".to_owned());
    }
    names
}

/// The plan as one JSON object.
pub(super) fn plan_json(d: &DryRun<'_>) -> Value {
    let s = d.session;
    let stages: Vec<Value> = d
        .pipeline
        .stages
        .iter()
        .map(|stage| stage_json(d, stage))
        .collect();
    json!({
        "dry_run": true,
        "repo": d.repo.display().to_string(),
        "pipeline": {
            "name": d.pipeline.name,
            "origin": d.pipeline.origin,
            "description": d.pipeline.description,
        },
        "base": {
            "rev": d.base.rev,
            "commit": d.base.commit,
            "uncommitted_paths": d.base.dirty,
        },
        "model": {
            "label": s.model.label(),
            "name": s.model.model_name(),
            "base_url": s.base_url,
            "replay_file": s.replay_file,
        },
        "settings": {
            "max_parallel": s.max_parallel,
            "assume_yes": s.assume_yes,
            "interactive": s.interactive,
            "context_window": s.limits.compaction.context_window,
            "compact_at": s.limits.compaction.compact_at,
        },
        "budget": s.limits.budget,
        "sandbox": crate::sandbox::availability().describe(),
        "mermaid": d.pipeline.to_mermaid(),
        "stages": stages,
    })
}

fn stage_json(d: &DryRun<'_>, stage: &Stage) -> Value {
    let role = d.roles.get(&stage.role);
    let chosen = role.map(|r| crate::runner::models::model_for(d.session, stage, r));
    let mut v = json!({
        "id": stage.id,
        "role": stage.role,
        "needs": stage.needs,
        "round": stage.round,
        "runs_if_changes_requested_by": stage.run_if_changes_requested_by,
        "max_turns": stage.max_turns.or(role.map(|r| r.max_turns)),
        "budget": stage.budget,
        "verify": stage.verify,
        "read_only": role.map(|r| r.read_only),
        "model": chosen.as_ref().map_or_else(|| d.session.model.model_name(), |c| c.model.model_name()),
        "model_source": chosen.as_ref().map(|c| c.source.clone()),
        "model_base_url": chosen.as_ref().and_then(|c| c.base_url.clone()),
        // The profile a failed first attempt is retried with (`escalate_to:`).
        "escalate_to": d.session.escalations.get(stage.base_id.as_str()).map(|e| json!({
            "profile": e.profile,
            "model": e.model.model_name(),
            "origin": e.origin,
        })),
        "tools": role.map(|r| offered_tools(r, d.session)).unwrap_or_default(),
        // The hooks its agent would run (docs/hooks.md).
        "hooks": role.map(|r| d.session.hooks.for_role(&r.name).iter().map(crate::hooks::Hook::describe).collect::<Vec<_>>()).unwrap_or_default(),
        "first_wave": stage.needs.is_empty(),
        "mcp": role.map_or(Value::Null, |r| mcp(d, r)),
        // Best of N: which replica this is, or how the stage selects.
        "replica": stage.replica,
        "select": stage.select,
        "sampling": (!stage.sampling.is_empty()).then_some(stage.sampling),
    });
    let skills = role.map(|r| skills_of(d, r)).unwrap_or_default();
    if !skills.set.is_empty()
        && let Some(tools) = v["tools"].as_array_mut()
    {
        tools.push(json!(crate::tools::LOAD_SKILL));
    }
    let system = role.map(|role| {
        let mut tools = offered_tools(role, d.session);
        let instructions = instructions(d, stage);
        let without =
            prompt::with_instructions(prompt::system_prompt(&role.prompt, &tools), &instructions);
        let section = skills.set.section();
        if !skills.set.is_empty() {
            tools.push(crate::tools::LOAD_SKILL.to_owned());
        }
        let system = prompt::with_instructions(
            prompt::with_instructions(prompt::system_prompt(&role.prompt, &tools), &instructions),
            &section.text,
        );
        v["skills"] = skills_json(&skills, &section, &without, &system);
        system
    });
    if let Some((role, system)) = role.zip(system).filter(|_| stage.needs.is_empty()) {
        v["system_prompt"] = json!(system);
        let task = prompt::task_message(&stage.task, d.issue, &[]);
        let notes = memory_notes(d, &task);
        // The named files as the repository's working tree has them (the
        // lane would check out the base; nothing is created here).
        let files = match d.repo.canonicalize() {
            Ok(root) if stage.context_files && role.context_files => {
                crate::agent::context_files::collect(&root, &[&stage.task, d.issue], &[]).text
            }
            _ => String::new(),
        };
        v["first_message"] = json!(format!("{task}{files}{notes}"));
    } else {
        v["receives"] = json!(receives(stage));
    }
    v
}

/// The MCP servers and tools of `role`, listed by starting its servers once
/// ([`crate::mcp::dry`]).
fn mcp(d: &DryRun<'_>, role: &Role) -> Value {
    if role.mcp.is_empty() {
        return Value::Null;
    }
    let commit = d.base.commit.clone().or_else(|| {
        crate::git::Repo::at(&d.base.common)
            .resolve_commit("HEAD")
            .ok()
    });
    let config = crate::mcp::McpConfig::load(
        &d.base.common,
        commit.as_ref().map_or("HEAD", |c| c.as_str()),
        Some(d.repo),
        crate::dirs::user_config_dir().as_deref(),
    );
    let sandbox = crate::sandbox::ToolSandbox::for_role(&d.base.common, role);
    crate::mcp::dry::describe(&role.mcp, config, sandbox)
}

/// The memory notes a first-wave stage would be given (the checked-in
/// lessons read from the base commit, HEAD for `--base worktree`, as a run
/// reads them).
fn memory_notes(d: &DryRun<'_>, task: &str) -> String {
    if d.session.memory == crate::memory::MemoryMode::Off {
        return String::new();
    }
    let commit = d.base.commit.clone().or_else(|| {
        crate::git::Repo::at(&d.base.common)
            .resolve_commit("HEAD")
            .ok()
    });
    let paths = crate::memory::paths_in(task);
    crate::memory::hook::notes_for(&d.base.common, commit.as_ref(), d.repo, task, &paths)
        .map(|(n, _, _)| n.text)
        .unwrap_or_default()
}

/// The skills a stage of `role` would get, as a run finds them (from the
/// base commit, HEAD for `--base worktree`, and the user config dir).
#[derive(Default)]
struct DrySkills {
    set: crate::skills::SkillSet,
    skipped: Vec<String>,
    notes: Vec<String>,
}

fn skills_of(d: &DryRun<'_>, role: &Role) -> DrySkills {
    let Some(catalogue) = catalogue(d) else {
        return DrySkills::default();
    };
    let (set, missing) =
        crate::skills::for_role_file(&catalogue, &role.origin, &role.name, role.skills.as_deref())
            .unwrap_or_default();
    DrySkills {
        set,
        notes: catalogue.notes().into_iter().chain(missing).collect(),
        skipped: catalogue.problems,
    }
}

/// The skills found for the dry run's base (`None` when unreadable).
fn catalogue(d: &DryRun<'_>) -> Option<crate::skills::Catalogue> {
    let commit = match &d.base.commit {
        Some(c) => c.clone(),
        None => crate::git::Repo::at(&d.base.common)
            .resolve_commit("HEAD")
            .ok()?,
    };
    let user = crate::dirs::user_config_dir();
    crate::skills::discover(&d.base.common, &commit, user.as_deref()).ok()
}

/// Every role's `skills:` names skills that exist (a run would refuse it).
fn check_skills(d: &DryRun<'_>) -> Result<(), CliError> {
    let Some(catalogue) = catalogue(d) else {
        return Ok(());
    };
    for role in d.roles.values() {
        crate::skills::for_role_file(&catalogue, &role.origin, &role.name, role.skills.as_deref())
            .map_err(|e| CliError::Invalid(format!("failed to {e}")))?;
    }
    Ok(())
}

/// The `skills` of a first-wave stage: offered, cut, skipped, and the
/// bytes they add to its first request (the system prompt's growth, JSON
/// escaped as sent, and the `load_skill` schema).
fn skills_json(
    s: &DrySkills,
    section: &crate::skills::Section,
    without: &str,
    with: &str,
) -> Value {
    let escaped = |t: &str| serde_json::to_string(t).map_or(0, |j| j.len());
    let schema = if s.set.is_empty() {
        0
    } else {
        // One more element of the `tools` array: the object and a comma.
        crate::tools::load_skill_definition_bytes() + 1
    };
    let offered: Vec<&str> = s.set.skills.iter().map(|k| k.name()).collect();
    json!({
        "offered": offered,
        "cut": section.cut,
        "skipped": s.skipped,
        "notes": s.notes,
        "prompt_bytes": section.text.len(),
        "first_request_bytes": escaped(with).saturating_sub(escaped(without)) + schema,
        "limit_bytes": crate::skills::SKILLS_BUDGET,
    })
}

/// What a later stage is handed, one line per stage it needs.
fn receives(stage: &Stage) -> Vec<String> {
    stage
        .needs
        .iter()
        .map(|n| {
            format!(
                "from `{n}`: its summary, verdict, diffstat, patch (up to {} KiB), action digest (up to {} lines) and verify result; plus the issue and this stage's task",
                prompt::HANDOFF_DIFF_BUDGET / 1024,
                prompt::HANDOFF_DIGEST_LINES
            )
        })
        .collect()
}

/// Prints the plan, readable or as one JSON object.
pub(super) fn print_plan(d: &DryRun<'_>, json_out: bool) -> Result<(), CliError> {
    let plan = plan_json(d);
    let mut out = Out::stdout();
    if json_out {
        writeln!(out, "{plan}")?;
        return out.finish();
    }
    let s = d.session;
    writeln!(
        out,
        "dry run: pipeline {} ({}); nothing is created and no model is called",
        d.pipeline.name, d.pipeline.origin
    )?;
    writeln!(
        out,
        "base:     {} = {}",
        d.base.rev,
        d.base
            .commit
            .as_deref()
            .unwrap_or("(a snapshot, written when the run starts)")
    )?;
    if !d.base.dirty.is_empty() {
        writeln!(
            out,
            "          {} uncommitted path(s) in the working tree{}",
            d.base.dirty.len(),
            if d.base.rev == "worktree" {
                " are included"
            } else {
                " are NOT included (use --base worktree)"
            }
        )?;
    }
    writeln!(out, "model:    {}", s.model.label())?;
    writeln!(
        out,
        "settings: max_parallel {}, context window {} (compact at {}), --yes {}",
        s.max_parallel,
        s.limits.compaction.context_window,
        s.limits.compaction.compact_at,
        s.assume_yes
    )?;
    writeln!(out, "budget:   {}", d.session.limits.budget)?;
    writeln!(out, "{}", crate::sandbox::availability().describe())?;
    writeln!(out)?;
    writeln!(out, "DAG (unrolled):")?;
    out.text(&d.pipeline.to_mermaid())?;
    writeln!(out)?;
    for st in plan["stages"].as_array().into_iter().flatten() {
        let tools: Vec<&str> = st["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        writeln!(
            out,
            "== stage {} (role {}, model {}, max turns {})",
            text(&st["id"]),
            text(&st["role"]),
            text(&st["model"]),
            st["max_turns"]
        )?;
        if let Some(source) = st["model_source"].as_str() {
            match st["model_base_url"].as_str() {
                Some(url) => writeln!(out, "model from: {source}, at {url}")?,
                None => writeln!(out, "model from: {source}")?,
            }
        }
        if let Some(r) = st["replica"].as_object() {
            writeln!(
                out,
                "replica {} of {} of `{}`{}",
                r.get("k").unwrap_or(&Value::Null),
                r.get("n").unwrap_or(&Value::Null),
                r.get("of").map(text).unwrap_or_default(),
                st["sampling"]
                    .as_object()
                    .map(|s| format!(", sampling {}", Value::Object(s.clone())))
                    .unwrap_or_default(),
            )?;
        }
        if let Some(sel) = st["select"].as_object() {
            let list = |v: Option<&Value>| -> String {
                v.and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(text)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            writeln!(
                out,
                "selects one of: {} (strategy {}; checks: {}; budget {})",
                list(sel.get("replicas")),
                sel.get("strategy").map(text).unwrap_or_default(),
                match list(sel.get("commands")) {
                    c if c.is_empty() => "none".to_owned(),
                    c => c,
                },
                sel.get("budget").map(text).unwrap_or_default(),
            )?;
        }
        if let Some(esc) = st["escalate_to"].as_object() {
            writeln!(
                out,
                "escalates to: profile `{}` (model {}) if attempt 1 fails, from {}",
                esc.get("profile").map(text).unwrap_or_default(),
                esc.get("model").map(text).unwrap_or_default(),
                esc.get("origin").map(text).unwrap_or_default(),
            )?;
        }
        writeln!(out, "tools: {}", tools.join(", "))?;
        if let Some(skills) = st["skills"].as_object() {
            let names: Vec<&str> = skills["offered"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if !names.is_empty() {
                writeln!(
                    out,
                    "skills: {} (+{} bytes in the first request)",
                    names.join(", "),
                    skills["first_request_bytes"]
                )?;
            }
            for skipped in skills["skipped"].as_array().into_iter().flatten() {
                out.untrusted(&format!("skill skipped: {}\n", text(skipped)))?;
            }
            for note in skills["notes"].as_array().into_iter().flatten() {
                out.untrusted(&format!("skill note: {}\n", text(note)))?;
            }
        }
        for hook in st["hooks"].as_array().into_iter().flatten() {
            out.untrusted(&format!("hook: {}\n", text(hook)))?;
        }
        if let Some(m) = st["mcp"].as_object() {
            let names = |v: &Value| -> Vec<String> {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .map(|x| x.get("name").unwrap_or(x).as_str().unwrap_or("").to_owned())
                    .collect()
            };
            let servers = names(&m["servers"]);
            match m.get("error").and_then(Value::as_str) {
                Some(e) => writeln!(out, "mcp: servers {}: not listed: {e}", servers.join(", "))?,
                None => writeln!(
                    out,
                    "mcp: servers {}; tools {}; their definitions add {} B to every request",
                    servers.join(", "),
                    names(&m["tools"]).join(", "),
                    m["bytes"]
                )?,
            }
        }
        if let Some(by) = st["runs_if_changes_requested_by"].as_str() {
            writeln!(out, "runs only if `{by}` requests changes")?;
        }
        if let Some(system) = st["system_prompt"].as_str() {
            writeln!(out, "--- system prompt")?;
            out.untrusted(system)?;
            writeln!(out)?;
            writeln!(out, "--- first message")?;
            out.untrusted(text(&st["first_message"]))?;
            writeln!(out)?;
        } else {
            for line in st["receives"].as_array().into_iter().flatten() {
                out.untrusted(&format!("receives {}\n", text(line)))?;
            }
        }
        writeln!(out)?;
    }
    out.finish()
}

/// The project-instruction section the stage would get, read from the base
/// commit as the run would (HEAD for `--base worktree`, whose snapshot a dry
/// run does not write); empty when off or unreadable.
fn instructions(d: &DryRun<'_>, stage: &Stage) -> String {
    if !d.pipeline.project_instructions {
        return String::new();
    }
    let commit = match &d.base.commit {
        Some(c) => c.clone(),
        None => match crate::git::Repo::at(&d.base.common).resolve_commit("HEAD") {
            Ok(c) => c,
            Err(_) => return String::new(),
        },
    };
    let hints = [stage.task.as_str(), d.issue];
    crate::agent::instructions::load(&d.base.common, &commit, &hints)
        .map(|found| found.text)
        .unwrap_or_default()
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// The base of a dry run: resolved, never snapshotted (that writes objects).
pub(super) fn dry_base(repo: &Path, rev: &str) -> Result<DryBase, CliError> {
    let info = crate::git::open_repo(repo)?;
    let dirty = crate::git::snapshot::working_tree_dirt(&info.workdir)?.paths;
    let commit = if rev == super::args::WORKTREE_BASE {
        None
    } else {
        Some(crate::git::Repo::at(&info.common_dir).resolve_commit(rev)?)
    };
    Ok(DryBase {
        rev: rev.to_owned(),
        commit,
        dirty,
        common: info.common_dir,
    })
}

/// The whole `--dry-run` of a command: resolve the base, print the plan.
pub(super) fn dry_run(
    repo: &Path,
    pipeline: &Pipeline,
    roles: &HashMap<String, Role>,
    issue: &str,
    session: &Session,
    base: &str,
    json_out: bool,
) -> Result<i32, CliError> {
    let plan = DryRun {
        repo,
        pipeline,
        roles,
        issue,
        session,
        base: dry_base(repo, base)?,
    };
    check_skills(&plan)?;
    super::output::ignore_closed(print_plan(&plan, json_out))?;
    Ok(crate::exit::OK)
}
