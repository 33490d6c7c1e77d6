//! The kernel-enforced sandbox around tool processes and subagents (Linux
//! Landlock), the fingerprint guard of the user's repository, and the removal
//! of secret values from orch's own environment block.
//!
//! The split follows the fork/exec boundary:
//! - [`prepare`] runs in orch (the parent), may allocate and fail with a
//!   precise error: it detects the kernel's Landlock ABI, builds the ruleset,
//!   opens every path the rules name and returns a [`Prepared`];
//! - [`Prepared::apply_in_child`] runs in the child between `fork` and `exec`
//!   (a `pre_exec` hook) and only makes raw, async-signal-safe system calls on
//!   what was prepared: `PR_SET_NO_NEW_PRIVS`, dropping dangerous
//!   capabilities, `landlock_restrict_self`. It never allocates, so it is safe
//!   after `fork` in orch's multi-threaded process.
//!
//! Invariants:
//! - orch itself is never restricted: only the child calls
//!   `landlock_restrict_self`, and the restriction is inherited by everything
//!   the child starts;
//! - [`Profile::Off`] restricts nothing; every other profile at least sets
//!   `no_new_privs` and drops the capabilities in [`caps::DROPPED`], even where
//!   Landlock is unavailable;
//! - where Landlock is enforced, the child can write only the lane worktree
//!   (not in [`Profile::ReadOnly`]), the lane's own git admin directory, its
//!   private temp dir and the configured extra roots; it can read everything
//!   except the secret paths; with the network off it can neither connect nor
//!   bind a TCP port; it cannot signal or reach the abstract unix sockets of
//!   processes outside its domain (orch included).
//!
//! See `docs/sandbox.md` for what each profile enforces and what Landlock
//! cannot express.

mod caps;
mod environ;
mod error;
mod guard;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod mounts;
mod objects;
mod policy;
mod prepare;
mod quota;
mod secrets;
mod settings;
mod tool;

pub use environ::{SecretVars, take_secrets_from_environ};
pub use error::SandboxError;
pub use guard::{GuardError, HookChange, RACY_WINDOW, RepoChange, RepoGuard};
pub use objects::{MigrateError, migrate_objects};
pub use policy::{LaneGit, Policy, default_secret_paths};
pub use prepare::{
    Availability, DISABLE_VAR, Features, Prepared, availability, metadata_enforced, prepare,
    prepare_with,
};
pub use quota::DEFAULT_DISK_QUOTA;
pub use secrets::{
    ChildSecrets, SecretInFile, home_secrets, mask, read_secret_fd, scan_files, write_secret_pipe,
};
pub use settings::{SandboxChoice, SandboxSettings};
pub use tool::{RoleAccess, SandboxCall, ToolSandbox, refuse_secrets, refuse_secrets_in};
