//! What one `orch setup` is asked to do and where it talks to the user
//! (a leaf of `setup`: the session and the command line use it).

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
    pub(crate) model: Option<super::record::ModelFlags>,
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
