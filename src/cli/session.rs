//! The one session builder: how every command that runs agents turns its
//! flags into the runner's [`Session`] (model backend, limits, approvals,
//! parallelism), and finds the roles a pipeline names.
//!
//! A new run resolves its model from flags, environment and `orch.toml`. A
//! resumed run does the same, with the model it recorded (base URL, model
//! name and profile) standing in for the flags when none names a model or a
//! profile, so the profile's `stream`, timeouts, prices and `context_window`
//! apply after a resume too. Its recorded sampling settings are sent again,
//! field by field, unless a sampling flag (or `--profile`) of `resume` gives
//! that field; its recorded limits (`RunSettings`) apply to every limit flag
//! not given again. Each stage's `model:` is resolved on top
//! ([`route_stage_models`]).
//! The API key always comes from this process's environment; the record never
//! holds one.

use super::args::{LimitArgs, ModelArgs};
use super::error::CliError;
use super::model::{Chosen, choose_for_repo, choose_with_record};
use crate::agent::RunLimits;
use crate::catalog::Catalog;
use crate::pipeline::Pipeline;
use crate::role::Role;
use crate::runlog::RunState;
use crate::runner::{DEFAULT_MAX_PARALLEL, Session};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// Builds a [`Session`]: choose the model first (its context window is the
/// default for `--context-window`), then set approvals and parallelism.
pub(super) struct SessionBuilder {
    chosen: Chosen,
    /// `--no-stream`, for the record.
    no_stream: bool,
    /// The settings a recorded run was started with: limits not given as
    /// flags come from here.
    recorded: Option<crate::runlog::RunSettings>,
    assume_yes: bool,
    interactive: bool,
    asks: (crate::runlog::control::AskVia, Option<std::time::Duration>),
    max_parallel: usize,
    lane_pool: Option<usize>,
    memory: crate::memory::MemoryMode,
}

impl SessionBuilder {
    /// A session for a new run: the model from `model`'s flags, the
    /// environment and the `orch.toml` files of `repo` (when given) and the
    /// user config dir.
    pub(super) fn new(model: &ModelArgs, repo: Option<&Path>) -> Result<SessionBuilder, CliError> {
        Ok(SessionBuilder::with(
            choose_for_repo(model, repo)?,
            model.no_stream,
        ))
    }

    /// Limits not given as flags come from `recorded` (a replay of a run
    /// keeps that run's limits).
    pub(super) fn recorded_limits(
        mut self,
        recorded: Option<&crate::runlog::RunSettings>,
    ) -> SessionBuilder {
        self.recorded = recorded.cloned();
        self
    }

    /// A session to go on with a recorded run. Model flags, when any names a
    /// model or a profile, win (`--profile strong` sends to that profile's
    /// server and model); otherwise the recorded replay file is replayed
    /// again, or the recorded base URL and model are resolved through
    /// `orch.toml` like flags, with the recorded profile (and this command's
    /// `--no-stream`). Limits not given as flags are the recorded ones.
    pub(super) fn resumed(
        state: &RunState,
        model: &ModelArgs,
        repo: &Path,
    ) -> Result<SessionBuilder, CliError> {
        // A profile given to `resume` brings its own sampling keys; flags
        // still win over them.
        let recorded_sampling = state.sampling.as_ref().filter(|_| model.profile.is_none());
        let settings = state.settings.as_ref();
        let no_stream = model.no_stream || settings.is_some_and(|s| s.no_stream);
        let chosen = if model.names_a_model() || model.profile.is_some() {
            let flags = ModelArgs {
                no_stream,
                ..model.clone()
            };
            choose_with_record(&flags, Some(repo), recorded_sampling)?
        } else {
            let recorded = match &state.replay_file {
                Some(file) => ModelArgs {
                    replay: Some(file.into()),
                    ..ModelArgs::default()
                },
                None => ModelArgs {
                    provider: settings.and_then(|s| s.provider.clone()),
                    base_url: state.base_url.clone(),
                    model: Some(state.model.clone()),
                    replay: None,
                    profile: settings.and_then(|s| s.profile.clone()),
                    no_stream,
                    sampling: model.sampling,
                },
            };
            choose_with_record(&recorded, Some(repo), recorded_sampling)?
        };
        Ok(SessionBuilder::with(chosen, no_stream).recorded_limits(settings))
    }

    fn with(chosen: Chosen, no_stream: bool) -> SessionBuilder {
        SessionBuilder {
            chosen,
            no_stream,
            recorded: None,
            assume_yes: false,
            interactive: crate::policy::detect_interactive(),
            asks: Default::default(),
            max_parallel: DEFAULT_MAX_PARALLEL,
            lane_pool: None,
            memory: crate::memory::MemoryMode::Off,
        }
    }

    /// `--no-lane-pool` (`false`): keep no warm lanes; otherwise the pool
    /// `orch.toml` configures.
    pub(super) fn lane_pool(mut self, on: bool) -> SessionBuilder {
        self.lane_pool = (!on).then_some(0);
        self
    }

    /// Allow what a role's `ask` rules would ask about (`--yes`).
    pub(super) fn assume_yes(mut self, yes: bool) -> SessionBuilder {
        self.assume_yes = yes;
        self
    }

    /// Whether someone can be asked (default: stdin and stderr are terminals).
    pub(super) fn interactive(mut self, interactive: bool) -> SessionBuilder {
        self.interactive = interactive;
        self
    }

    /// How a call an `ask` rule names is answered without `--yes`
    /// (`--ask-via`, `--ask-timeout`).
    pub(super) fn asks(mut self, asks: &super::args::AskArgs) -> SessionBuilder {
        self.asks = (asks.ask_via, asks.ask_timeout_duration());
        self
    }

    /// How many stages may run at once (default [`DEFAULT_MAX_PARALLEL`]).
    pub(super) fn max_parallel(mut self, n: usize) -> SessionBuilder {
        self.max_parallel = n;
        self
    }

    /// What the run does with memory (default: off, for `orch agent`).
    pub(super) fn memory(mut self, mode: crate::memory::MemoryMode) -> SessionBuilder {
        self.memory = mode;
        self
    }

    /// The session, with limits from the flags (those not given from the
    /// recorded run, when there is one); the model's context window applies
    /// when `--context-window` is not given.
    pub(super) fn build(self, limits: &LimitArgs) -> Result<Session, CliError> {
        let limits = limits.or_recorded(self.recorded.as_ref());
        let mut settings = limits.record(self.chosen.profile.clone(), self.no_stream);
        settings.provider = self.chosen.provider.map(|p| p.as_str().to_owned());
        let run_limits = limits.to_limits(self.chosen.model.context_window())?;
        Ok(self.build_with(run_limits, settings))
    }

    /// The session, with limits as given.
    pub(super) fn build_with(
        self,
        limits: RunLimits,
        settings: crate::runlog::RunSettings,
    ) -> Session {
        let Chosen {
            model,
            base_url,
            secrets,
            replay_file,
            sampling,
            profile: _,
            provider: _,
        } = self.chosen;
        Session {
            limits,
            model,
            base_url,
            replay_file,
            sampling,
            settings,
            stage_models: Default::default(),
            escalations: Default::default(),
            secrets,
            assume_yes: self.assume_yes,
            interactive: self.interactive,
            ask_via: self.asks.0,
            ask_timeout: self.asks.1,
            max_parallel: self.max_parallel,
            lane_pool: self.lane_pool,
            memory: self.memory,
            hooks: Default::default(),
        }
    }
}

/// What a run in `repo` does with memory: `off` with `--no-memory`, else
/// `--memory MODE`, else `memory =` of its `orch.toml` files (default `propose`).
pub(super) fn memory_mode(
    repo: &Path,
    no_memory: bool,
    flag: Option<crate::memory::MemoryMode>,
) -> Result<crate::memory::MemoryMode, CliError> {
    if no_memory {
        return Ok(crate::memory::MemoryMode::Off);
    }
    if let Some(mode) = flag {
        return Ok(mode);
    }
    let resolved = super::model::resolve_config(&super::args::ModelArgs::default(), Some(repo))?;
    Ok(resolved.memory.value)
}

/// The roles a pipeline's stages name.
pub(super) fn roles_for(
    catalog: &Catalog,
    pipeline: &Pipeline,
) -> Result<HashMap<String, Role>, CliError> {
    let mut roles = HashMap::new();
    for s in &pipeline.stages {
        if !roles.contains_key(&s.role) {
            roles.insert(s.role.clone(), catalog.role(&s.role)?.clone());
        }
    }
    Ok(roles)
}

/// The hooks of a run in `repo` with `roles` (`--trust-hooks`: `trust`);
/// what is not run or not honoured is named on stderr once (docs/hooks.md;
/// the roles' own warnings are named by [`route_role_models`]).
pub(super) fn hooks_for(
    repo: &Path,
    trust: bool,
    roles: &HashMap<String, Role>,
) -> Result<Arc<crate::hooks::HookConfig>, CliError> {
    let workdir = crate::git::open_repo(repo)?.workdir;
    let mut sorted: Vec<&Role> = roles.values().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let user = crate::dirs::user_config_dir();
    let hooks = crate::hooks::HookConfig::load(&workdir, user.as_deref(), trust, &sorted)
        .map_err(|e| CliError::Invalid(format!("failed to {e}")))?;
    hooks.print_notes();
    Ok(Arc::new(hooks))
}

/// The hooks of a resumed run whose record is at `record`: the ones it
/// started with (its `hooks.json`, trust decided then), else those of a new
/// run without `--trust-hooks`.
pub(super) fn resumed_hooks(
    record: &Path,
    repo: &Path,
    roles: &HashMap<String, Role>,
) -> Result<Arc<crate::hooks::HookConfig>, CliError> {
    if record.join(crate::hooks::config::RUN_FILE).is_file() {
        return Ok(Arc::new(crate::hooks::HookConfig::of_run(record)));
    }
    hooks_for(repo, false, roles)
}

/// What a resumed run's session takes from its record once built (`orch
/// resume`, and each round of `orch react`): the hooks it started with,
/// what the run learned of its server (no preflight on resume), and the
/// stage and escalation models its plan names.
pub(super) fn resume_from_record(
    session: &mut Session,
    record: &Path,
    plan: &crate::runner::Plan,
    flags: &ModelArgs,
    repo: &Path,
) -> Result<(), CliError> {
    session.hooks = resumed_hooks(record, repo, &plan.roles)?;
    super::preflight::open_server_cache();
    route_stage_models(session, &plan.pipeline, flags, repo)?;
    super::escalation::route_escalations(session, &plan.pipeline, &plan.roles, flags, repo)
}

/// The base a new run starts from, as given by `--base`, and the note about
/// the user's working tree. `worktree` writes a snapshot commit of the
/// user's working tree (their index, HEAD and branch untouched) and returns
/// its SHA; that needs the status walk first. From `HEAD` (or any other
/// base) the repository is only opened: the walk that finds uncommitted
/// changes (left out, which stderr says) and checked-out submodules (not
/// checked out in lanes, which stderr says too) runs on a thread of its own,
/// off the way to the first model request; the returned [`DirtNote`] prints
/// what it found when it finishes.
pub(super) fn start_base(repo: &Path, base: &str) -> Result<(String, DirtNote), CliError> {
    if base != super::args::WORKTREE_BASE {
        let info = crate::git::open_repo(repo)?;
        return Ok((
            base.to_owned(),
            DirtNote::spawn(info.workdir, base == "HEAD"),
        ));
    }
    let (info, dirt) = crate::git::snapshot::open_repo_with_dirt(repo)?;
    if let Some(warning) = submodule_warning(&dirt) {
        crate::ui::status_line(&warning);
    }
    if !dirt.is_dirty() {
        crate::ui::status_line("orch: the working tree is clean: starting from HEAD");
        return Ok(("HEAD".to_owned(), DirtNote::none()));
    }
    let sha = crate::git::snapshot::snapshot_worktree(&info.workdir)?;
    crate::ui::status_line(&format!(
        "orch: starting from a snapshot of the working tree ({} uncommitted path(s) included): commit {}",
        dirt.paths.len(),
        &sha[..sha.len().min(12)]
    ));
    Ok((sha, DirtNote::none()))
}

fn submodule_warning(dirt: &crate::git::snapshot::Dirt) -> Option<String> {
    (!dirt.submodules.is_empty()).then(|| format!(
        "orch: warning: the run's worktrees do not check out submodules ({}); stages see them as empty directories",
        dirt.submodules.join(", ")
    ))
}

/// The lines the user's working tree calls for on a run that does not
/// start from it: the submodule warning, and (from `HEAD`) the note that
/// uncommitted changes are left out.
fn dirt_lines(workdir: &Path, from_head: bool) -> Vec<String> {
    let dirt = match crate::git::snapshot::working_tree_dirt(workdir) {
        Ok(d) => d,
        Err(e) => {
            return vec![format!(
                "orch: note: could not check the working tree for uncommitted changes: {e}"
            )];
        }
    };
    let mut lines: Vec<String> = submodule_warning(&dirt).into_iter().collect();
    if from_head && dirt.is_dirty() {
        // orch reads its own settings from the working tree, so those
        // changes do count; the lanes get the rest from HEAD only.
        let (settings, code): (Vec<&String>, Vec<&String>) =
            dirt.paths.iter().partition(|p| read_from_working_tree(p));
        if let Some(first) = code.first() {
            lines.push(format!(
                "orch: note: the working tree has {} uncommitted change(s) (e.g. {first}); the run starts from HEAD without them (pass --base worktree to include them)",
                code.len(),
            ));
        }
        if !settings.is_empty() {
            let shown: Vec<&str> = settings.iter().take(5).map(|p| p.as_str()).collect();
            lines.push(format!(
                "orch: note: orch reads its settings from the working tree, uncommitted changes included: {}{} (used by this run; its worktrees do not contain them unless --base worktree)",
                shown.join(", "),
                if settings.len() > shown.len() {
                    format!(" and {} more", settings.len() - shown.len())
                } else {
                    String::new()
                }
            ));
        }
    }
    lines
}

/// Whether orch reads the repository file at `path` (relative, `/`
/// separated) from the working tree as it is, rather than from the run's
/// base commit: its pipelines, roles and settings under `.orch/` (lessons
/// excepted: they are read from the base commit), Claude Code agent files,
/// and `.worktreeinclude`.
fn read_from_working_tree(path: &str) -> bool {
    (path.starts_with(".orch/") && !path.starts_with(".orch/memory/"))
        || path.starts_with(".claude/agents/")
        || path == ".worktreeinclude"
}

/// The working-tree check of a run, running on its own thread: its lines
/// are printed as soon as it finishes (through the run's [`crate::ui::Ui`]
/// once [`DirtNote::attach`]ed, so they land above the progress bars), and
/// at the latest when it is [`DirtNote::finish`]ed or dropped, which waits
/// for it: every run that leaves changes out says so before its summary.
pub(super) struct DirtNote {
    thread: Option<std::thread::JoinHandle<()>>,
    sink: std::sync::Arc<std::sync::Mutex<Sink>>,
}

#[derive(Default)]
struct Sink {
    printer: Option<crate::ui::LinePrinter>,
    pending: Vec<String>,
}

impl Sink {
    fn flush(&mut self) {
        for line in std::mem::take(&mut self.pending) {
            match &self.printer {
                Some(p) => p.line(&line),
                None => crate::ui::status_line(&line),
            }
        }
    }
}

impl DirtNote {
    /// Nothing to check.
    fn none() -> DirtNote {
        DirtNote {
            thread: None,
            sink: Default::default(),
        }
    }

    /// Starts the check of the working tree at `workdir`.
    fn spawn(workdir: std::path::PathBuf, from_head: bool) -> DirtNote {
        let sink: std::sync::Arc<std::sync::Mutex<Sink>> = Default::default();
        let theirs = std::sync::Arc::clone(&sink);
        let dir = workdir.clone();
        let thread = std::thread::Builder::new()
            .name("orch-dirt".to_owned())
            .spawn(move || {
                // At the run's own priority: a short run waits for this
                // check at its end (its note comes before the summary), and
                // at nice 10 the `git status` of a 100,000-file tree ended
                // ~100 ms after such a run's final answer, at nice 0 ~50 ms,
                // with the first request as fast either way (17-18 ms).
                let lines = dirt_lines(&dir, from_head);
                let mut sink = theirs.lock().unwrap_or_else(|e| e.into_inner());
                sink.pending.extend(lines);
                if sink.printer.is_some() {
                    sink.flush();
                }
            });
        match thread {
            Ok(t) => DirtNote {
                thread: Some(t),
                sink,
            },
            Err(e) => {
                tracing::debug!("could not start the working-tree check: {e}; checking now");
                let note = DirtNote::none();
                note.lock().pending = dirt_lines(&workdir, from_head);
                note
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sink> {
        self.sink.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Prints through `ui` from now on (what is already found at once).
    pub(super) fn attach(&self, ui: &crate::ui::Ui) {
        let mut sink = self.lock();
        sink.printer = Some(ui.printer());
        sink.flush();
    }

    /// Waits for the check and prints what it found, if not printed yet.
    pub(super) fn finish(mut self) {
        self.join();
    }

    fn join(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.lock().flush();
    }
}

/// Lowers the calling thread's CPU priority (nice 10; on Linux
/// `setpriority(PRIO_PROCESS, 0, …)` applies to the calling thread only):
/// work off the critical path yields the CPU to the run's own steps.
pub(super) fn lower_priority() {
    let _ = rustix::process::setpriority_process(None, 10);
}

impl Drop for DirtNote {
    fn drop(&mut self) {
        self.join();
    }
}

/// The preflight of the run's model server (see `cli::preflight`), then
/// each role's model routed with the models that server lists: what `orch
/// run` and `orch agent` do before anything exists.
pub(super) async fn preflight_and_route(
    roles: &mut HashMap<String, Role>,
    model: &ModelArgs,
    repo: &Path,
    base: &str,
    session: &Session,
) -> Result<(), CliError> {
    let served = super::preflight::check_run(repo, base, session.model.as_ref()).await?;
    tracing::debug!(served_models = ?served.served_models, "preflight passed");
    // The context-window probe goes out now that the preflight told the
    // server's kind (cli::preflight), overlapping the run's start-up and
    // turn 1: the first request waits for it only when its size could pass
    // the compaction trigger under a server's window (`Agent::start`);
    // otherwise the window applies from the turn after it arrives.
    let probe = std::sync::Arc::clone(&session.model);
    tokio::spawn(async move {
        probe.probe_context_window().await;
    });
    // The servers and models the stages name get the same check, once each.
    let mut checked = std::collections::BTreeSet::new();
    for (stage, m) in &session.stage_models {
        if checked.insert((m.base_url.clone(), m.model.model_name())) {
            super::preflight::check(m.model.as_ref())
                .await
                .map_err(|e| match e {
                    CliError::Preflight(msg) => {
                        CliError::Preflight(format!("{msg} (the model of stage `{stage}`)"))
                    }
                    other => other,
                })?;
        }
    }
    route_role_models(roles, model, repo, served.served_models.as_deref())
}

/// Decides each role's model once, before the plan is frozen (see
/// [`crate::role::resolve_model`]): `--model` on the command line overrides
/// every role; else `[models] aliases` maps it; else a model the server
/// serves (`served`, from a preflight; `None` when unknown) is kept; else
/// the run's model is used. The reason lands in the role's `model_note`,
/// which the stage logs.
pub(super) fn route_role_models(
    roles: &mut HashMap<String, Role>,
    model: &ModelArgs,
    repo: &Path,
    served: Option<&[String]>,
) -> Result<(), CliError> {
    let aliases = if model.replay_file().is_some() {
        Default::default()
    } else {
        super::model::resolve_config(model, Some(repo))?.model_aliases
    };
    let routing = crate::role::ModelRouting {
        aliases: Some(&aliases),
        served,
        cli_model: model.model.is_some(),
    };
    let mut names: Vec<&String> = roles.keys().collect();
    names.sort();
    for name in names {
        let role = &roles[name];
        for warning in &role.warnings {
            crate::ui::status_line(&format!(
                "warning: {}: role `{name}`: {warning}",
                role.origin
            ));
        }
    }
    for role in roles.values_mut() {
        let choice = crate::role::resolve_model(role, routing);
        if let Some(note) = &choice.note {
            crate::ui::status_line(&format!("orch: {note}"));
        }
        role.model = choice.model;
        role.model_alias = None;
        role.model_note = choice.note;
    }
    Ok(())
}

/// Resolves each stage's `model:` (see [`crate::runner::models`]) into the
/// session, once per base stage: an `orch.toml` profile of that name gives
/// its server, key and model; otherwise it is a model id asked of the run's
/// server (through `[models] aliases` when they map it). `--model` on the
/// command line overrides every stage, and a replay answers every stage.
/// A model the run's backend cannot ask for is an error naming the stage.
pub(super) fn route_stage_models(
    session: &mut Session,
    pipeline: &Pipeline,
    flags: &ModelArgs,
    repo: &Path,
) -> Result<(), CliError> {
    if session.replay_file.is_some() {
        return Ok(());
    }
    let mut aliases = None;
    for stage in &pipeline.stages {
        let Some(wanted) = stage.model.as_deref() else {
            continue;
        };
        let base = stage.base_id.as_str();
        if session.stage_models.contains_key(base) {
            continue;
        }
        if flags.model.is_some() {
            if stage.round == 1 {
                crate::ui::status_line(&format!(
                    "orch: stage `{base}` names model `{wanted}`; --model overrides it"
                ));
            }
            continue;
        }
        let chosen = match super::model::choose_profile(wanted, flags, Some(repo))? {
            Some(profile) => {
                for secret in profile.secrets {
                    if !session.secrets.contains(&secret) {
                        session.secrets.push(secret);
                    }
                }
                crate::runner::models::StageModel {
                    model: profile.model,
                    base_url: profile.base_url,
                    source: format!("stage model: profile `{wanted}`"),
                }
            }
            None => {
                let aliases = match &aliases {
                    Some(a) => a,
                    None => aliases
                        .insert(super::model::resolve_config(flags, Some(repo))?.model_aliases),
                };
                let id = aliases.get(wanted).map_or(wanted, String::as_str);
                let model = session.model.with_model(id).ok_or_else(|| {
                    CliError::Invalid(format!(
                        "failed to use model `{wanted}` of stage `{base}`: no orch.toml profile has that name, and the run's model ({}) cannot ask for another model",
                        session.model.label()
                    ))
                })?;
                let source = if id == wanted {
                    format!("stage model: `{wanted}`")
                } else {
                    format!("stage model: `{wanted}`, which [models] aliases maps to `{id}`")
                };
                crate::runner::models::StageModel {
                    model,
                    base_url: session.base_url.clone(),
                    source,
                }
            }
        };
        session.stage_models.insert(base.to_owned(), chosen);
    }
    Ok(())
}
