//! `orch setup "<goal>"`: the environment-setup agent. Setup is a state
//! migration from the detected machine to the goal: the model *detects*
//! (`detect_system`, `check_command`, read-only `run_command`), *plans*
//! (the `plan` tool: ordered steps with command, why, risk and check), orch
//! *shows* the plan, *asks*, *runs* each step (printed before it runs),
//! *verifies* it with its check and *reports*. See `docs/setup.md`.
//!
//! Invariants:
//! - the model never runs a command that writes: `run_command` runs only
//!   what [`readonly`] accepts (under the read-only sandbox profile), and
//!   every write is a plan step that orch runs after the plan was printed
//!   and, for `install`/`system` steps, confirmed (a terminal answer, or
//!   `--yes`); `--plan-only` stops after printing the plan;
//! - every plan and step command passes the built-in deny list; `sudo`
//!   only in a step whose risk is `system`;
//! - the record (`state.json` written after every step) lets
//!   `orch setup --resume <id>` continue from the first step not verified;
//! - at most [`MAX_ROUNDS`] model requests per setup, resumes included;
//! - every request carries the setup role's sampling keys; after a prose
//!   answer where a tool call was needed, the re-ask (and every later
//!   request of the setup) sends `tool_choice: "required"` unless the role
//!   set its own, so a server that supports it (llama.cpp with `--jinja`)
//!   constrains the answer to a tool call by grammar. `log.jsonl` records
//!   the `tool_choice` of each request.

mod detect;
mod event;
pub(crate) mod lane;
mod plan;
mod readonly;
mod record;
mod session;
mod steps;

pub(crate) use lane::{ScratchLane, save_lane_setup, saved_lane_setup};
pub use record::SETUP_DIR_VAR;
pub(crate) use record::{ModelFlags, recorded_model, shell_word};
pub(crate) use session::{SetupEnd, SetupError, run_setup};

use std::path::PathBuf;

/// Most model requests of one setup (the reference agent's limit).
pub const MAX_ROUNDS: u32 = 20;

/// The killpoint reached after a step's verified state is on disk (see
/// [`crate::killpoint`]; `ORCH_TEST_KILL_AT=setup-step-verified:N`).
pub const KILL_STEP_VERIFIED: &str = "setup-step-verified";

/// An answer to a step confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Confirm {
    /// Run this step.
    Yes,
    /// Skip this step.
    No,
    /// Run this and every later step without asking.
    All,
    /// Stop the setup here.
    Quit,
}

/// Where the setup talks to the user: results on stdout, questions on the
/// terminal. Implemented by the command line; the library never prints.
pub(crate) trait Console: Send + Sync {
    /// Prints `text` (one or more lines) on the result stream, at once.
    fn say(&self, text: &str);
    /// Asks `prompt` on the terminal; `None` when there is none.
    fn confirm(&self, prompt: &str) -> Option<Confirm>;
    /// Asks a free question on the terminal; `None` when there is none.
    fn ask(&self, question: &str) -> Option<String>;
}

/// What one `orch setup` is asked to do.
#[derive(Debug, Clone)]
pub(crate) struct SetupOptions {
    /// The goal (from the command line, or the record when resuming).
    pub(crate) goal: String,
    /// Where commands run (the current directory).
    pub(crate) cwd: PathBuf,
    /// Stop after the plan; only reconnaissance runs.
    pub(crate) plan_only: bool,
    /// `--yes`: project-local (read and install) steps run without a
    /// terminal; `ask_user` answers yes.
    pub(crate) yes: bool,
    /// `--yes-system`: system steps (risk `system`, `sudo`) run without a
    /// terminal too; implies `yes`.
    pub(crate) yes_system: bool,
    /// The model flags to record (a resume without flags reuses them).
    pub(crate) model: Option<record::ModelFlags>,
    /// For `--lane`, which is run again rather than resumed: the command
    /// line that runs it again, as `(before the approval flags, after
    /// them)`.
    pub(crate) rerun: Option<(String, String)>,
    /// A user can answer on a terminal.
    pub(crate) interactive: bool,
    /// The system prompt (the `setup` role's body).
    pub(crate) prompt: String,
    /// The round limit (the role's `max_turns`, at most [`MAX_ROUNDS`]).
    pub(crate) max_rounds: u32,
    /// House rules: `(file, text)`, given to the model.
    pub(crate) house_rules: Vec<(PathBuf, String)>,
    /// `--resume <id>`.
    pub(crate) resume: Option<String>,
    /// Values to redact from the record.
    pub(crate) secrets: Vec<String>,
    /// `--lane`: `cwd` is a scratch lane; install steps may write only there.
    pub(crate) lane: bool,
    /// The setup role's sampling keys (`temperature`, `seed`, `max_tokens`,
    /// `tool_choice`): every setup request carries them.
    pub(crate) sampling: crate::llm::Sampling,
    /// The `tool_choice` the flags or the profile send (`None`: `auto`), for
    /// the record.
    pub(crate) base_tool_choice: Option<crate::llm::ToolChoice>,
}

/// The team conventions that apply in `cwd`: `<config dir>/setup.md` and,
/// in a repository, `<repo>/.orch/setup.md` (found by walking up to the
/// first directory with a `.git`; no git needed).
pub(crate) fn house_rules(cwd: &std::path::Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    if let Some(cfg) = crate::catalog::user_config_dir() {
        files.push(cfg.join("setup.md"));
    }
    if let Some(repo) = cwd.ancestors().find(|d| d.join(".git").exists()) {
        files.push(repo.join(".orch").join("setup.md"));
    }
    files
        .into_iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(&f).ok()?;
            let text = text.trim().to_owned();
            (!text.is_empty()).then_some((f, crate::text::cap_bytes(&text, 8 * 1024)))
        })
        .collect()
}
