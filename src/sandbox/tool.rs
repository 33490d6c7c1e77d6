//! The sandbox of one agent's tool processes, as the `bash` tool uses it:
//! the chosen profile and network, the configured extra roots and secret
//! paths, the agent's private temp dir, and the [`RepoGuard`] of the user's
//! repository, taken around every call.
//!
//! Per call ([`ToolSandbox::begin`] → spawn → [`ToolSandbox::finish`]): the
//! policy is built for the lane, the ruleset prepared, the guard's
//! fingerprint re-taken; after the child is gone the lane's quarantined git
//! objects are moved into the user's store and the fingerprint compared.
//!
//! What a change means (the user's work is never undone): with the kernel
//! sandbox enforcing, tool processes cannot write the user's refs, `HEAD`,
//! config or hooks, so a change there is the user's own (a commit, a
//! checkout, a fetch in their checkout while the agent ran): it is noted
//! and the run goes on. Where the sandbox cannot enforce (profile `off`, no
//! Landlock), orch cannot tell the user's work from the command's: the
//! stage stops, saying what changed and that nothing was undone. A change
//! to orch's own lane files (`commondir`, `gitdir`, the lane's `.git`) is
//! put back and stops the stage: orch's git work would follow it.
//!
//! Invariant: calls of one `ToolSandbox` are serialised (the guard's
//! before/after pair must bracket exactly one command), so two `bash` calls
//! of one agent never overlap.

use std::path::Path;
use std::sync::Arc;

use super::error::SandboxError;
use super::guard::{RepoChange, RepoGuard};
use super::objects::migrate_objects;
use super::policy::Policy;
use super::prepare::{Prepared, availability, prepare};
use super::secrets::scan_files;
use super::settings::{SandboxChoice, SandboxSettings};
use crate::sandbox_profile::Profile;

/// The sandbox of one agent's tool calls (see the module docs).
#[derive(Debug)]
pub struct ToolSandbox {
    choice: SandboxChoice,
    /// Whether [`finish`](Self::finish) moves quarantined objects into the
    /// user's store (not inside a sandboxed subagent: the store is
    /// read-only there; its parent migrates when it ends).
    migrate: bool,
    tmp: tempfile::TempDir,
    guard: tokio::sync::Mutex<Option<RepoGuard>>,
    /// The last call's policy and sandbox, reused while the policy is the
    /// same and the sandbox [current](Prepared::is_current).
    last: std::sync::Mutex<Option<(Policy, Arc<Prepared>)>>,
    /// The stage's disk quota (`None`: off), counted from the first call.
    quota: Option<super::quota::DiskQuota>,
}

/// One call in progress: holds the agent's call lock until
/// [`ToolSandbox::finish`].
#[derive(Debug)]
pub struct SandboxCall<'a> {
    lock: tokio::sync::MutexGuard<'a, Option<RepoGuard>>,
    policy: Policy,
    /// The prepared sandbox, to enter in the child (`pre_exec`).
    pub prepared: Arc<Prepared>,
    /// Variables to add to the child's environment (`TMPDIR`, the git object
    /// quarantine).
    pub env: Vec<(String, String)>,
    /// What this call enforces, for the tool event.
    pub summary: String,
}

impl ToolSandbox {
    /// A sandbox for `choice`, with a fresh private temp dir.
    pub fn new(choice: SandboxChoice) -> std::io::Result<Self> {
        let tmp = tempfile::Builder::new().prefix("orch-tmp-").tempdir()?;
        Ok(Self {
            choice,
            migrate: true,
            tmp,
            guard: tokio::sync::Mutex::new(None),
            last: std::sync::Mutex::new(None),
            quota: None,
        })
    }

    /// The same sandbox for the tools of an `orch agent` child: quarantined
    /// git objects are left for the parent to migrate.
    pub fn in_subagent(mut self) -> Self {
        self.migrate = false;
        self
    }

    /// With a disk quota of `cap` bytes for what the calls write into the
    /// lane and the temp dir (`None`: no quota); see `quota.rs`.
    pub fn with_disk_quota(mut self, cap: Option<u64>) -> Self {
        self.quota = cap.map(super::quota::DiskQuota::new);
        self
    }

    /// The choice this sandbox enforces.
    pub fn choice(&self) -> &SandboxChoice {
        &self.choice
    }

    /// The private temp dir (`TMPDIR` of every call).
    pub fn tmp_dir(&self) -> &Path {
        self.tmp.path()
    }

    /// Whether the kernel enforces the read-only profile here (then the
    /// snapshot/restore guard of read-only subagents is not needed).
    pub fn enforces_read_only(&self) -> bool {
        self.choice.profile == Profile::ReadOnly && availability().abi().is_some()
    }

    /// The policy of a child working in `lane`.
    pub fn policy(&self, lane: &Path) -> Result<Policy, SandboxError> {
        let mut p = Policy::new(self.choice.profile, lane, self.tmp.path())?;
        p.network = self.choice.network;
        p.writable.extend(self.choice.writable.iter().cloned());
        p.secret_paths.extend(self.choice.deny_read.iter().cloned());
        Ok(p)
    }

    /// Starts one call in `lane`: waits for the previous call of this agent,
    /// prepares the sandbox and fingerprints the user's repository. An `Err`
    /// is orch's own failure (the stage must end).
    pub async fn begin(&self, lane: &Path) -> Result<SandboxCall<'_>, String> {
        let mut lock = self.guard.lock().await;
        let policy = self
            .policy(lane)
            .map_err(|e| format!("failed to set up the sandbox: {e}"))?;
        let prepared = self
            .prepared(&policy)
            .map_err(|e| format!("failed to set up the sandbox: {e}"))?;
        if let Some(git) = &policy.git {
            match lock.as_mut() {
                Some(guard) => guard.before_call(),
                None => RepoGuard::new(&git.common_dir).and_then(|mut g| {
                    g.watch_lane(git)?;
                    *lock = Some(g);
                    Ok(())
                }),
            }
            .map_err(|e| format!("failed to fingerprint the user's repository: {e}"))?;
        }
        if let Some(q) = &self.quota {
            q.watch(&[lane, self.tmp.path()]);
        }
        let mut env = vec![("TMPDIR".to_owned(), self.tmp.path().display().to_string())];
        if let Some(git) = &policy.git
            && self.choice.profile != Profile::Off
        {
            // `GIT_OBJECT_DIRECTORY` must exist or every `git` in the lane
            // says "not a git repository" — also in a detached (pooled) lane,
            // where the sandbox grants no branch and so makes no quarantine.
            let quarantine = git.quarantine();
            std::fs::create_dir_all(&quarantine).map_err(|e| {
                format!(
                    "failed to set up the sandbox: create {}: {e}",
                    quarantine.display()
                )
            })?;
            env.extend(git.child_env());
        }
        let summary = format!("{}: {}", self.choice.label(), prepared.summary());
        Ok(SandboxCall {
            lock,
            policy,
            prepared,
            env,
            summary,
        })
    }

    /// The sandbox for `policy`: the last call's when its policy is the same
    /// and it is still current, else a fresh one (kept for the next call).
    /// Within a stage the policy rarely changes, so the ruleset is built once.
    fn prepared(&self, policy: &Policy) -> Result<Arc<Prepared>, SandboxError> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((p, prepared)) = last.as_ref()
            && p == policy
        {
            match prepared.stale_because() {
                None => return Ok(Arc::clone(prepared)),
                Some(dir) => tracing::debug!(
                    changed = %dir.display(),
                    "sandbox ruleset rebuilt: a directory it listed changed"
                ),
            }
        }
        let prepared = Arc::new(prepare(policy)?);
        *last = Some((policy.clone(), Arc::clone(&prepared)));
        Ok(prepared)
    }

    /// Whether the kernel keeps this sandbox's tool processes out of the
    /// user's common git dir (so a change there is the user's).
    pub fn enforces_repo(&self) -> bool {
        self.choice.profile != Profile::Off && availability().abi().is_some()
    }

    /// Ends a call whose child is gone: migrates the lane's new git objects
    /// and compares the user's repository with the fingerprint (see the
    /// module doc). `Ok(Some(note))`: the user changed their repository
    /// meanwhile (noted, the run goes on); `Err`: the stage must stop.
    pub fn finish(&self, call: SandboxCall<'_>) -> Result<Option<String>, String> {
        let SandboxCall { lock, policy, .. } = call;
        let quota = self.quota.as_ref().map_or(Ok(()), |q| q.check());
        let outcome = self.settle(&lock, &policy);
        // Over its quota, the stage stops after the call was settled.
        quota?;
        outcome
    }

    /// The repository side of [`finish`](Self::finish).
    fn settle(
        &self,
        lock: &tokio::sync::MutexGuard<'_, Option<RepoGuard>>,
        policy: &Policy,
    ) -> Result<Option<String>, String> {
        let Some(git) = &policy.git else {
            return Ok(None);
        };
        if self.migrate {
            migrate_objects(git).map_err(|e| format!("failed to {e}"))?;
        }
        let Some(guard) = lock.as_ref() else {
            return Ok(None);
        };
        let changes = guard
            .after_call()
            .map_err(|e| format!("failed to fingerprint the user's repository: {e}"))?;
        if changes.is_empty() {
            return Ok(None);
        }
        let (lane, user): (Vec<_>, Vec<_>) = changes
            .iter()
            .partition(|c| matches!(c, RepoChange::LaneFile { .. }));
        let list = |cs: &[&RepoChange]| {
            cs.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        };
        if !lane.is_empty() {
            let restored = match guard.restore_lane_files() {
                Ok(()) => "put back".to_owned(),
                Err(e) => format!("not all put back: {e}"),
            };
            return Err(format!(
                "the command changed orch's lane files ({}), which would point orch's git work elsewhere: {restored}",
                list(&lane)
            ));
        }
        if self.enforces_repo() {
            return Ok(Some(format!(
                "the user's repository {} changed while the command ran ({}); the sandbox kept the command out of it, so this is the user's own work: orch leaves it as it is",
                git.common_dir.display(),
                list(&user)
            )));
        }
        Err(format!(
            "the user's repository {} changed while the command ran ({}); with the sandbox off orch cannot tell the user's work from the command's, so the stage stops; nothing was undone",
            git.common_dir.display(),
            list(&user)
        ))
    }
}

/// What the sandbox needs to know of a role (its `sandbox:`, `network:` and
/// whether it is read-only). Defined here and implemented by `role::Role`,
/// so the sandbox, a floor below the role files, does not import them.
pub trait RoleAccess {
    /// The role's `sandbox:` profile, when it names one.
    fn sandbox_profile(&self) -> Option<Profile>;
    /// The role's `network:`, when it sets it.
    fn network(&self) -> Option<bool>;
    /// Whether the role may not change the tree.
    fn read_only(&self) -> bool;
}

impl ToolSandbox {
    /// The sandbox of `role`'s tool processes in a run on the repository
    /// whose common git dir is `common` (its parent is the working tree
    /// holding `.orch/`): `[sandbox]` of its
    /// `.orch/orch.toml` and the user's `orch.toml`, then the role's keys.
    pub fn for_role(common: &Path, role: &impl RoleAccess) -> std::io::Result<Self> {
        let home = crate::environment::current().home();
        let settings = SandboxSettings::load(
            common.parent(),
            crate::dirs::user_config_dir().as_deref(),
            home.as_deref(),
        )
        .map_err(std::io::Error::other)?;
        Ok(
            Self::new(settings.for_role(role.sandbox_profile(), role.network(), role.read_only()))?
                .with_disk_quota(settings.disk_quota()),
        )
    }
}

/// Before a stage commit: scans the files changed in `lane` for known secret
/// values (`secrets` and [`crate::secrets::known_secrets`]). When one holds a value,
/// every change of the lane is discarded (reset to `start`) and the stage's
/// failure reason is returned, naming the files with the values masked.
pub async fn refuse_secrets(
    lane: &Path,
    start: &crate::git::CommitId,
    secrets: &[String],
) -> std::io::Result<Option<String>> {
    refuse_secrets_in(lane, start, secrets, None).await
}

/// [`refuse_secrets`] scanning `changed` (the lane's changed paths, known
/// from its watcher), or the paths a status walk finds when `None`.
pub async fn refuse_secrets_in(
    lane: &Path,
    start: &crate::git::CommitId,
    secrets: &[String],
    changed: Option<Vec<String>>,
) -> std::io::Result<Option<String>> {
    let (lane, start, secrets) = (lane.to_path_buf(), start.clone(), secrets.to_vec());
    let work = move || -> Result<Option<String>, crate::git::GitError> {
        let changed = match changed {
            Some(paths) => paths,
            None => crate::git::changed_paths(&lane)?,
        };
        let hits = scan_files(&lane, &changed, &secrets);
        if hits.is_empty() {
            return Ok(None);
        }
        crate::git::reset_worktree(&lane, &start)?;
        let named: Vec<String> = hits.iter().map(ToString::to_string).collect();
        Ok(Some(format!(
            "refused to commit: {}; the stage's changes were discarded",
            named.join(", ")
        )))
    };
    match tokio::task::spawn_blocking(work).await {
        Ok(r) => r.map_err(|e| std::io::Error::other(format!("failed to {e}"))),
        Err(e) => Err(std::io::Error::other(format!(
            "the secret scan task failed: {e}"
        ))),
    }
}
