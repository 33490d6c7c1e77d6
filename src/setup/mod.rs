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
//! - the check of every `install`/`system` step also runs before its step
//!   (when the plan is made, read-only, and right before the step): a
//!   check that already passes sends the plan back once; one seen failing
//!   that passes before its step marks it satisfied (not run); one never
//!   seen failing that passes before and after makes the step
//!   `unverified` (`session/precheck.rs`);
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
mod options;
mod plan;
mod readonly;
mod record;
mod session;
mod status;
mod steps;

pub(crate) use lane::{ScratchLane, save_lane_setup, saved_lane_setup};
pub(crate) use options::{Confirm, Console, SetupOptions};
pub use options::{KILL_STEP_VERIFIED, MAX_ROUNDS};
pub use record::SETUP_DIR_VAR;
pub(crate) use record::{ModelFlags, recorded_model, shell_word};
pub(crate) use session::{SetupEnd, SetupError, run_setup};

use std::path::PathBuf;

/// The team conventions that apply in `cwd`: `<config dir>/setup.md` and,
/// in a repository, `<repo>/.orch/setup.md` (found by walking up to the
/// first directory with a `.git`; no git needed).
pub(crate) fn house_rules(cwd: &std::path::Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    if let Some(cfg) = crate::dirs::user_config_dir() {
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
