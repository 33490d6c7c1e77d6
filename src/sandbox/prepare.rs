//! Detecting what the kernel enforces and building one child's sandbox in
//! the parent ([`prepare`] → [`Prepared`], entered by
//! [`Prepared::apply_in_child`]); see the module docs of `sandbox`.

use std::fmt;
use std::sync::OnceLock;

#[cfg(not(target_os = "linux"))]
use super::caps;
use super::error::SandboxError;
use super::policy::Policy;
#[cfg(target_os = "linux")]
use super::{caps, linux, mounts};
use crate::sandbox_profile::Profile;

/// Set to `1` to run as if the kernel had no Landlock: [`availability`]
/// reports [`Availability::Unavailable`] and [`prepare`] enforces only
/// `no_new_privs` and the capability drop.
pub const DISABLE_VAR: &str = crate::environment::ORCH_SANDBOX_DISABLE;

/// What the running kernel can enforce, detected once per process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// Landlock is usable at this ABI version.
    Landlock {
        /// The kernel's Landlock ABI version (1 = Linux 5.13).
        abi: i32,
    },
    /// No Landlock: only `no_new_privs` and the capability drop apply.
    Unavailable {
        /// Why (kernel, platform, or [`DISABLE_VAR`]).
        reason: String,
    },
}

impl Availability {
    /// Decides availability from the `ORCH_SANDBOX_DISABLE` value and the
    /// kernel's answer to the ABI query (a version, or the errno).
    pub fn from_parts(disable: Option<&str>, abi: Result<i32, i32>) -> Self {
        if disable.is_some_and(|v| v == "1") {
            return Self::Unavailable {
                reason: format!("disabled by {DISABLE_VAR}=1"),
            };
        }
        match abi {
            Ok(abi) if abi >= 1 => Self::Landlock { abi },
            Ok(abi) => Self::Unavailable {
                reason: format!("the kernel reports Landlock ABI {abi}"),
            },
            Err(errno) if errno == libc::EOPNOTSUPP => Self::Unavailable {
                reason: "Landlock is built into the kernel but disabled at boot \
                         (add `landlock` to the `lsm=` kernel parameter)"
                    .into(),
            },
            Err(errno) if errno == libc::ENOSYS => Self::Unavailable {
                reason: "the kernel has no Landlock (needs Linux 5.13 or later)".into(),
            },
            Err(errno) => Self::Unavailable {
                reason: format!(
                    "the Landlock ABI query failed: {}",
                    std::io::Error::from_raw_os_error(errno)
                ),
            },
        }
    }

    /// The Landlock ABI in force, if any.
    pub fn abi(&self) -> Option<i32> {
        match self {
            Self::Landlock { abi } => Some(*abi),
            Self::Unavailable { .. } => None,
        }
    }

    /// What is enforced, as the features list [`describe`](Self::describe)
    /// prints (`filesystem`, `network`, `scoping`), and what is missing.
    pub fn features(&self) -> Features {
        let abi = self.abi().unwrap_or(0);
        Features {
            filesystem: abi >= 1,
            // ABI 3 adds truncate(2); before it a writable-looking open with
            // O_TRUNC is not checked, which matters only for read-only files.
            truncate: abi >= 3,
            network: abi >= 4,
            scoping: abi >= 6,
        }
    }

    /// One line for the start-of-run message and `orch config`: what the
    /// kernel enforces for tool processes, and what it cannot.
    pub fn describe(&self) -> String {
        let f = self.features();
        match self {
            Self::Unavailable { reason } => format!(
                "sandbox: Landlock unavailable ({reason}); tool processes run with \
                 no_new_privs and dropped capabilities only, the repository guard \
                 and the deny list still apply"
            ),
            Self::Landlock { abi } => {
                let mut on = vec!["filesystem"];
                let mut off = Vec::new();
                if !f.truncate {
                    off.push("truncate (ABI 3)");
                }
                if f.network {
                    on.push("TCP network");
                } else {
                    off.push("TCP network (ABI 4)");
                }
                if f.scoping {
                    on.push("signal and abstract-socket scoping");
                } else {
                    off.push("signal and abstract-socket scoping (ABI 6)");
                }
                let mut line = format!("sandbox: Landlock ABI {abi} enforces {}", on.join(", "));
                if !off.is_empty() {
                    line.push_str(&format!("; not enforced: {}", off.join(", ")));
                }
                line
            }
        }
    }
}

impl fmt::Display for Availability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Which Landlock features the kernel's ABI provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// Path-based read/write/execute rules (ABI 1).
    pub filesystem: bool,
    /// Truncation is checked (ABI 3).
    pub truncate: bool,
    /// TCP bind/connect rules (ABI 4).
    pub network: bool,
    /// Signal and abstract unix socket scoping (ABI 6).
    pub scoping: bool,
}

/// The sandbox availability of this process, detected on the first call
/// (reads [`DISABLE_VAR`] and asks the kernel once).
/// Whether the kernel keeps metadata (mode, owner, times, attributes)
/// outside a tool process's writable paths read-only here: Landlock is
/// available and this process can give its children read-only mounts
/// (`mounts.rs`). Where not, the deny list's metadata rule applies.
pub fn metadata_enforced() -> bool {
    #[cfg(target_os = "linux")]
    {
        availability().abi().is_some() && mounts::available()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

pub fn availability() -> &'static Availability {
    static CACHE: OnceLock<Availability> = OnceLock::new();
    CACHE.get_or_init(|| {
        let disable = crate::environment::current().var(DISABLE_VAR);
        Availability::from_parts(disable, query_abi())
    })
}

#[cfg(target_os = "linux")]
fn query_abi() -> Result<i32, i32> {
    linux::query_abi()
}

#[cfg(not(target_os = "linux"))]
fn query_abi() -> Result<i32, i32> {
    Err(libc::ENOSYS)
}

/// A sandbox ready to be entered by one child process: the ruleset is built
/// and its file descriptor open. Cheap to move into a `pre_exec` closure;
/// drop it (closing the descriptor) once the child is spawned.
#[derive(Debug)]
pub struct Prepared {
    profile: Profile,
    #[cfg(target_os = "linux")]
    ruleset: Option<std::os::fd::OwnedFd>,
    drop_caps: bool,
    summary: String,
    /// What the ruleset was built from (`None`: nothing that can go stale).
    #[cfg(target_os = "linux")]
    listing: Option<linux::Listing>,
    /// The read-only mounts the child enters (`None`: not possible here).
    #[cfg(target_os = "linux")]
    mounts: Option<mounts::MountPlan>,
}

impl Prepared {
    /// The profile this was prepared for.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// Whether Landlock rules will be enforced (false for [`Profile::Off`] and
    /// where Landlock is unavailable).
    pub fn landlock_enforced(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.ruleset.is_some()
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }

    /// A one-line account of what this child gets (for the action log).
    pub fn summary(&self) -> &str {
        &self.summary
    }

    /// Whether preparing the same [`Policy`] again would give this sandbox:
    /// no directory listed to build the ruleset has changed since (a few
    /// `lstat`s). [`super::ToolSandbox`] reuses a current one for every call of a
    /// stage instead of listing and opening the paths again.
    pub fn is_current(&self) -> bool {
        self.stale_because().is_none()
    }

    /// The listed directory whose change makes this sandbox stale, if any.
    pub fn stale_because(&self) -> Option<&std::path::Path> {
        #[cfg(target_os = "linux")]
        {
            self.listing.as_ref().and_then(linux::Listing::changed)
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    }

    /// Enters the sandbox: call in the child between `fork` and `exec`.
    ///
    /// Only raw system calls on already-prepared values: no allocation, no
    /// locks, so it is async-signal-safe and may run after `fork` in a
    /// multi-threaded parent. Returns the first failing call's errno; the
    /// spawn then fails and the command never runs unsandboxed.
    pub fn apply_in_child(&self) -> std::io::Result<()> {
        if self.profile == Profile::Off {
            return Ok(());
        }
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // Mounting needs CAP_SYS_ADMIN and no Landlock domain yet.
            if let Some(m) = &self.mounts {
                m.apply()?;
            }
            linux::set_no_new_privs()?;
            if self.drop_caps {
                caps::drop_dangerous()?;
            }
            if let Some(fd) = &self.ruleset {
                linux::restrict_self(fd.as_raw_fd())?;
            }
        }
        Ok(())
    }

    /// A `pre_exec` hook owning this sandbox, for
    /// `std::process::Command::pre_exec` or tokio's equivalent.
    ///
    /// # Safety contract for the caller
    /// `pre_exec` is `unsafe` because the hook runs after `fork`; this hook
    /// only calls [`apply_in_child`](Self::apply_in_child), which is
    /// async-signal-safe.
    pub fn into_pre_exec(self) -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
        move || self.apply_in_child()
    }
}

/// Builds the sandbox for one child process from `policy` (in the parent).
///
/// Where Landlock is unavailable ([`availability`]) the result still sets
/// `no_new_privs` and drops capabilities; [`Prepared::landlock_enforced`]
/// tells which. [`Profile::Off`] prepares nothing.
pub fn prepare(policy: &Policy) -> Result<Prepared, SandboxError> {
    prepare_with(policy, availability())
}

/// [`prepare`] against an explicit availability (tests, `ORCH_SANDBOX_DISABLE`
/// without touching the environment).
pub fn prepare_with(policy: &Policy, avail: &Availability) -> Result<Prepared, SandboxError> {
    let drop_caps = caps::running_with_caps();
    if policy.profile == Profile::Off {
        return Ok(Prepared {
            profile: Profile::Off,
            #[cfg(target_os = "linux")]
            ruleset: None,
            drop_caps: false,
            summary: "sandbox off".into(),
            #[cfg(target_os = "linux")]
            listing: None,
            #[cfg(target_os = "linux")]
            mounts: None,
        });
    }
    #[cfg(target_os = "linux")]
    {
        let (ruleset, summary, listing, mounts) = match avail.abi() {
            Some(abi) => {
                let built = linux::build_ruleset(policy, abi)?;
                tracing::debug!(
                    listed_dirs = built.listing.dirs_listed(),
                    "sandbox ruleset built"
                );
                let mounts = mounts::MountPlan::new(&built.writable, &built.kept_read_only);
                let summary = format!(
                    "{}; metadata outside the writable paths {}",
                    built.summary,
                    if mounts.is_some() {
                        "read-only (mount namespace)"
                    } else {
                        "not enforced here (the deny list refuses chmod/chown/touch/setfacl/chattr outside the lane)"
                    }
                );
                (Some(built.fd), summary, Some(built.listing), mounts)
            }
            None => (None, avail.describe(), None, None),
        };
        Ok(Prepared {
            profile: policy.profile,
            ruleset,
            drop_caps,
            summary,
            listing,
            mounts,
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(Prepared {
            profile: policy.profile,
            drop_caps,
            summary: avail.describe(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disable_switch_wins_over_a_capable_kernel() {
        let a = Availability::from_parts(Some("1"), Ok(7));
        assert_eq!(a.abi(), None);
        assert!(a.describe().contains("ORCH_SANDBOX_DISABLE=1"), "{a}");
        assert_eq!(
            Availability::from_parts(Some("0"), Ok(7)),
            Availability::Landlock { abi: 7 }
        );
    }

    #[test]
    fn describe_names_what_an_old_abi_lacks() {
        let a = Availability::from_parts(None, Ok(3));
        let d = a.describe();
        assert!(d.contains("ABI 3 enforces filesystem"), "{d}");
        assert!(d.contains("not enforced: TCP network (ABI 4)"), "{d}");
        assert!(d.contains("scoping (ABI 6)"), "{d}");
        let full = Availability::from_parts(None, Ok(7)).describe();
        assert!(!full.contains("not enforced"), "{full}");
        assert!(
            Availability::from_parts(None, Err(libc::ENOSYS))
                .describe()
                .contains("5.13")
        );
        assert!(
            Availability::from_parts(None, Err(libc::EOPNOTSUPP))
                .describe()
                .contains("lsm=")
        );
    }
}
