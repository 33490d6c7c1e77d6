//! Landlock on Linux: the ABI query, building the ruleset in the parent, and
//! the two raw calls the child makes.
//!
//! Landlock only grants (the union of rules over a path's ancestors), so a
//! secret path inside a readable tree is hidden by granting its *siblings*
//! instead of its parent, recursively up to `/` ([`grant_excluding`]).
//! Listing directories stays allowed everywhere (`ReadDir` on `/`), so
//! `ls ~` works and shows that `~/.ssh` exists, but its files cannot be opened.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};

use super::error::SandboxError;
use super::policy::Policy;
use crate::sandbox_profile::Profile;

/// Device files every shell needs to write (`> /dev/null`, terminals).
const WRITABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// The kernel's Landlock ABI version, or the errno of the query.
pub(crate) fn query_abi() -> Result<i32, i32> {
    // SAFETY: a NULL attribute with size 0 and the VERSION flag is the
    // documented ABI query; it touches no memory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOSYS))
    } else {
        Ok(rc as i32)
    }
}

/// `prctl(PR_SET_NO_NEW_PRIVS)`: setuid binaries and file capabilities no
/// longer raise privileges, and Landlock may be entered without
/// `CAP_SYS_ADMIN`. Async-signal-safe.
pub(crate) fn set_no_new_privs() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `landlock_restrict_self(fd, 0)` as a raw system call. The `landlock`
/// crate's `restrict_self` consumes the ruleset and builds a status value on
/// the way; this touches nothing but the descriptor. Async-signal-safe.
pub(crate) fn restrict_self(fd: libc::c_int) -> std::io::Result<()> {
    // SAFETY: a plain syscall on an fd number; no memory is passed.
    let rc = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// One rule before it is handed to the kernel.
struct Grant {
    path: PathBuf,
    access: BitFlags<AccessFs>,
    /// A sibling found by listing a directory: it may vanish before it is
    /// opened (another process's temp dir), and is then skipped.
    optional: bool,
}

/// What a ruleset was built from that can change under it: the directories
/// [`grant_excluding`] listed (a new entry in one would be missing from the
/// rules) and which optional writable roots existed. While
/// [`Listing::unchanged`] holds, the ruleset is still exactly what building
/// it again would give, so a stage builds it once (issue 25.7: with a HOME
/// of ~520 entries every build listed and opened ~580 paths).
#[derive(Debug)]
pub(crate) struct Listing {
    dirs: Vec<(PathBuf, Option<Stamp>)>,
    writable: Vec<(PathBuf, bool)>,
    taken_ns: i128,
}

/// A directory's identity and times: any entry added, removed or renamed in
/// it moves its mtime and ctime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        })
    }
}

fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

impl Listing {
    /// How many directories were listed to build the ruleset.
    pub(crate) fn dirs_listed(&self) -> usize {
        self.dirs.len()
    }

    fn new(policy: &Policy) -> Listing {
        Listing {
            dirs: Vec::new(),
            writable: policy
                .writable
                .iter()
                .map(|r| (r.clone(), r.canonicalize().is_ok()))
                .collect(),
            taken_ns: now_ns(),
        }
    }

    /// The first listed directory (or optional writable root) that changed
    /// since the listing, if any: why the ruleset must be built again. A
    /// directory counts as changed unless it has the same inode and times and
    /// none changed within [`super::RACY_WINDOW`] of the listing (the
    /// kernel's file clock is coarse, so a change in the same tick may not
    /// move it); a writable root, when it appeared or vanished. A few
    /// `lstat`s.
    pub(crate) fn changed(&self) -> Option<&Path> {
        let racy = super::guard::RACY_WINDOW.as_nanos() as i128;
        let dir = self.dirs.iter().find(|(dir, stamp)| {
            let now = Stamp::of(dir);
            !(now == *stamp
                && stamp.is_none_or(|s| s.mtime_ns.max(s.ctime_ns) + racy < self.taken_ns))
        });
        if let Some((dir, _)) = dir {
            return Some(dir);
        }
        self.writable
            .iter()
            .find(|(root, existed)| root.canonicalize().is_ok() != *existed)
            .map(|(root, _)| root.as_path())
    }
}

/// A built ruleset and what goes with it.
pub(crate) struct Built {
    /// The ruleset's descriptor.
    pub fd: OwnedFd,
    /// One line saying what it enforces.
    pub summary: String,
    /// What it was built from.
    pub listing: Listing,
    /// The paths it lets the child write (for [`super::mounts::MountPlan`]).
    pub writable: Vec<PathBuf>,
    /// Paths inside a writable one that it keeps read-only.
    pub kept_read_only: Vec<PathBuf>,
}

/// Builds the ruleset for `policy` at `abi`.
pub(crate) fn build_ruleset(policy: &Policy, abi: i32) -> Result<Built, SandboxError> {
    let mut listing = Listing::new(policy);
    let mut writable = Vec::new();
    let mut kept_read_only = Vec::new();
    let abi_l = ABI::from(abi);
    let all = AccessFs::from_all(abi_l);
    let read = AccessFs::from_read(abi_l);
    let rs = |e: landlock::RulesetError| SandboxError::Ruleset(e.to_string());

    let mut ruleset = Ruleset::default().handle_access(all).map_err(rs)?;
    let net_enforced = !policy.network && abi >= 4;
    if net_enforced {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi_l))
            .map_err(rs)?;
    }
    let scoped = abi >= 6;
    if scoped {
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(rs)?;
    }
    let mut created = ruleset.create().map_err(rs)?;

    let mut grants = Vec::new();
    // Listing is allowed everywhere; reading and executing everywhere but
    // the secrets.
    grants.push(Grant {
        path: PathBuf::from("/"),
        access: AccessFs::ReadDir.into(),
        optional: false,
    });
    let secrets: Vec<PathBuf> = policy
        .secret_paths
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    let secret_refs: Vec<&Path> = secrets.iter().map(PathBuf::as_path).collect();
    grant_excluding(
        &mut grants,
        &mut listing,
        Path::new("/"),
        &secret_refs,
        read & !AccessFs::ReadDir,
    )?;

    let mut written = Vec::new();
    if policy.profile == Profile::WorkspaceWrite {
        let lane = canon(&policy.lane)?;
        let dot_git = lane.join(".git");
        if dot_git.is_dir() {
            // A main worktree as lane: its own .git stays read-only.
            grant_excluding(&mut grants, &mut listing, &lane, &[&dot_git], all)?;
            writable.push(lane.clone());
            kept_read_only.push(dot_git);
        } else {
            writable.push(lane.clone());
            grants.push(Grant {
                path: lane,
                access: all,
                optional: false,
            });
        }
        written.push("lane");
        if let Some(git) = &policy.git {
            grants.push(Grant {
                path: git.admin_dir.clone(),
                access: all,
                optional: false,
            });
            written.push("lane git admin dir");
            if git.shadow.is_some() {
                grants.push(Grant {
                    path: git.quarantine(),
                    access: all,
                    optional: false,
                });
                written.push("lane object store");
            }
            if let Some(branch) = &git.branch {
                for dir in lane_ref_dirs(git, branch) {
                    create_dir(&dir)?;
                    grants.push(Grant {
                        path: dir,
                        access: all,
                        optional: false,
                    });
                }
                create_dir(&git.quarantine())?;
                written.push("lane branch ref");
            }
        }
    }
    grants.push(Grant {
        path: canon(&policy.tmp_dir)?,
        access: all,
        optional: false,
    });
    written.push("temp dir");
    let mut extra = 0;
    for root in &policy.writable {
        if let Ok(root) = root.canonicalize() {
            grants.push(Grant {
                path: root,
                access: all,
                optional: true,
            });
            extra += 1;
        }
    }
    for dev in WRITABLE_DEVICES {
        if Path::new(dev).exists() {
            grants.push(Grant {
                path: PathBuf::from(dev),
                access: AccessFs::ReadFile
                    | AccessFs::WriteFile
                    | AccessFs::Truncate
                    | AccessFs::IoctlDev,
                optional: true,
            });
        }
    }

    let grants_written: Vec<PathBuf> = grants
        .iter()
        .filter(|g| g.access == all && !writable.iter().any(|w| g.path.starts_with(w)))
        .map(|g| g.path.clone())
        .collect();
    for g in grants {
        let fd = match open_path(&g.path) {
            Ok(fd) => fd,
            Err(SandboxError::Path { source, .. })
                if g.optional && source.kind() == std::io::ErrorKind::NotFound =>
            {
                continue;
            }
            Err(e) => return Err(e),
        };
        let is_dir = fd
            .metadata()
            .map_err(|source| SandboxError::Path {
                path: g.path.clone(),
                source,
            })?
            .is_dir();
        let access = if is_dir {
            g.access
        } else {
            g.access & AccessFs::from_file(abi_l)
        };
        if access.is_empty() {
            continue;
        }
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| SandboxError::Ruleset(format!("rule for {}: {e}", g.path.display())))?;
    }
    let fd: Option<OwnedFd> = created.into();
    let fd = fd.ok_or_else(|| SandboxError::Ruleset("the kernel returned no ruleset".into()))?;
    debug_assert!(fd.as_raw_fd() >= 0);

    let mut summary = format!(
        "landlock ABI {abi}: writable {}{}; {} secret path(s) unreadable; network {}",
        written.join(", "),
        if extra > 0 {
            format!(", {extra} extra root(s)")
        } else {
            String::new()
        },
        secrets.len(),
        match (policy.network, net_enforced) {
            (true, _) => "on",
            (false, true) => "off",
            (false, false) => "on (off needs ABI 4)",
        },
    );
    if scoped {
        summary.push_str("; signals and abstract sockets scoped");
    }
    for g in &grants_written {
        writable.push(g.clone());
    }
    Ok(Built {
        fd,
        summary,
        listing,
        writable,
        kept_read_only,
    })
}

/// Grants `access` on `root` minus the `excluded` paths under it: `root`
/// itself when nothing is excluded beneath it, else each entry of `root`
/// (recursively for entries that lead to an excluded path). Symlinks are
/// skipped: their targets are granted through their own real paths.
fn grant_excluding(
    out: &mut Vec<Grant>,
    listing: &mut Listing,
    root: &Path,
    excluded: &[&Path],
    access: BitFlags<AccessFs>,
) -> Result<(), SandboxError> {
    let inside: Vec<&Path> = excluded
        .iter()
        .copied()
        .filter(|e| e.starts_with(root))
        .collect();
    if inside.is_empty() {
        out.push(Grant {
            path: root.to_path_buf(),
            access,
            optional: true,
        });
        return Ok(());
    }
    if inside.contains(&root) {
        return Ok(());
    }
    // Stamped before listing: an entry added while listing moves the stamp.
    listing.dirs.push((root.to_path_buf(), Stamp::of(root)));
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        // Vanished since its parent was listed: nothing left to grant.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(SandboxError::Path {
                path: root.to_path_buf(),
                source,
            });
        }
    };
    for entry in entries {
        let entry = entry.map_err(|source| SandboxError::Path {
            path: root.to_path_buf(),
            source,
        })?;
        let is_symlink = entry.file_type().is_ok_and(|t| t.is_symlink());
        if is_symlink {
            continue;
        }
        grant_excluding(out, listing, &entry.path(), &inside, access)?;
    }
    Ok(())
}

/// Opens `path` as an `O_PATH` descriptor without following a final symlink.
fn open_path(path: &Path) -> Result<File, SandboxError> {
    use rustix::fs::{Mode, OFlags};
    use std::os::unix::ffi::OsStrExt;
    let err = |source| SandboxError::Path {
        path: path.to_path_buf(),
        source,
    };
    // `open(2)` itself, not `OpenOptions::custom_flags`: on musl `O_ACCMODE`
    // includes `O_PATH`, so std strips it and the file is really opened
    // (`/dev/tty` without a terminal: ENXIO).
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| err(std::io::Error::from(std::io::ErrorKind::InvalidInput)))?;
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::open(c_path.as_c_str(), flags, Mode::empty()) {
        Ok(fd) => Ok(File::from(fd)),
        Err(errno) => Err(err(errno.into())),
    }
}

/// The directories holding the lane branch's ref file and reflog in the
/// common dir: git replaces a ref by `<ref>.lock` + rename in the same
/// directory, so the directory (shared with the run's other lane refs, all
/// orch's own) is the narrowest writable unit.
fn lane_ref_dirs(git: &super::policy::LaneGit, branch: &str) -> Vec<PathBuf> {
    let parent = Path::new(branch)
        .parent()
        .unwrap_or(Path::new("refs/heads"));
    vec![
        git.common_dir.join(parent),
        git.common_dir.join("logs").join(parent),
    ]
}

fn create_dir(dir: &Path) -> Result<(), SandboxError> {
    std::fs::create_dir_all(dir).map_err(|source| SandboxError::Path {
        path: dir.to_path_buf(),
        source,
    })
}

fn canon(path: &Path) -> Result<PathBuf, SandboxError> {
    path.canonicalize().map_err(|source| SandboxError::Path {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_abi_query_answers_on_this_kernel() {
        // Either a version or an errno; never a panic.
        match query_abi() {
            Ok(v) => assert!(v >= 1),
            Err(e) => assert!(e > 0),
        }
    }

    #[test]
    fn excluding_a_path_grants_its_siblings_up_the_tree() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        for d in ["a/secret/x", "a/keep", "b"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("a/file"), "f").unwrap();
        std::os::unix::fs::symlink(root.join("a/secret"), root.join("a/link")).unwrap();
        let mut out = Vec::new();
        let secret = root.join("a/secret");
        let policy = Policy::new(Profile::ReadOnly, &root, &root).unwrap();
        let mut listing = Listing::new(&policy);
        grant_excluding(
            &mut out,
            &mut listing,
            &root,
            &[&secret],
            AccessFs::ReadFile.into(),
        )
        .unwrap();
        let listed: Vec<&Path> = listing.dirs.iter().map(|(d, _)| d.as_path()).collect();
        assert_eq!(listed, [root.as_path(), root.join("a").as_path()]);
        let mut got: Vec<String> = out
            .iter()
            .map(|g| g.path.strip_prefix(&root).unwrap().display().to_string())
            .collect();
        got.sort();
        assert_eq!(got, ["a/file", "a/keep", "b"]);
    }
}
