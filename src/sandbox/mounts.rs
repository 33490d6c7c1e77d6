//! Read-only mounts around a tool process, so metadata outside its writable
//! paths cannot change (issue 25.5): Landlock has no right for `chmod`,
//! `chown`, `utimensat` or extended attributes, so a root child could
//! `chmod 000 ~/.bashrc` or `chmod 777 <user repo>/calc.py` although it
//! cannot write either file.
//!
//! In the child, before Landlock: a mount namespace of its own (with a user
//! namespace mapping only its own uid and gid when it is not root), every
//! mount made read-only (`mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY)`),
//! then bind mounts of exactly the paths the ruleset lets it write (the lane,
//! its git admin dir, object quarantine and branch ref dirs, its temp dir,
//! `sandbox.writable` roots) made writable again. A change of mode, owner,
//! times or attributes anywhere else fails with `EROFS` ("Read-only file
//! system"). Device files stay usable (a read-only mount does not stop
//! writes to `/dev/null` or a terminal). The working directory is entered
//! again by path afterwards, so it is the writable bind and not the old
//! read-only mount.
//!
//! Whether this works is probed once per process ([`available`]): a forked
//! child tries the namespace and the read-only remount. It fails inside a
//! sandboxed `orch agent` (Landlock forbids mounting there and `CAP_SYS_ADMIN`
//! is dropped), whose tool processes then inherit the agent's own read-only
//! mounts; and where user namespaces are off (then only the deny list's
//! metadata rules, `src/policy/metadata.rs`, refuse such commands).
//!
//! Every step in the child is a raw system call on data prepared in the
//! parent (or on the stack), so it is safe after `fork` in a multi-threaded
//! process. The mount namespace dies with the child: nothing is left mounted.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
#[cfg(test)]
use std::path::Path;
use std::path::PathBuf;
use std::sync::OnceLock;

const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
const AT_RECURSIVE: libc::c_uint = 0x8000;
/// `mount_setattr(2)`: the same number on every architecture (Linux 5.12).
const SYS_MOUNT_SETATTR: libc::c_long = 442;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// What one child mounts (see the module docs).
#[derive(Debug)]
pub(crate) struct MountPlan {
    /// Paths bound writable over the read-only tree.
    writable: Vec<CString>,
    /// Paths under a writable one that stay read-only (a main worktree's
    /// own `.git` when it is the lane).
    read_only: Vec<CString>,
    /// `uid_map` and `gid_map` lines of a user namespace (not root).
    userns: Option<(Vec<u8>, Vec<u8>)>,
}

impl MountPlan {
    /// A plan writable at `writable` (existing paths; others are skipped)
    /// and read-only at `read_only`, or `None` where the mounts cannot be
    /// made in this process ([`available`]).
    pub(crate) fn new(writable: &[PathBuf], read_only: &[PathBuf]) -> Option<MountPlan> {
        if !available() {
            return None;
        }
        Some(Self::unprobed(writable, read_only))
    }

    fn unprobed(writable: &[PathBuf], read_only: &[PathBuf]) -> MountPlan {
        let c = |paths: &[PathBuf]| -> Vec<CString> {
            paths
                .iter()
                .filter(|p| p.exists())
                .filter_map(|p| CString::new(p.as_os_str().as_bytes()).ok())
                .collect()
        };
        MountPlan {
            writable: c(writable),
            read_only: c(read_only),
            userns: user_maps(),
        }
    }

    /// Enters the mount namespace in the child (between `fork` and `exec`,
    /// before Landlock and the capability drop). Async-signal-safe.
    pub(crate) fn apply(&self) -> std::io::Result<()> {
        let mut cwd = [0u8; 4096];
        // SAFETY: getcwd writes at most `cwd.len()` bytes into our buffer.
        let have_cwd = !unsafe { libc::getcwd(cwd.as_mut_ptr().cast(), cwd.len()) }.is_null();
        match &self.userns {
            Some((uid_map, gid_map)) => {
                // SAFETY: unshare takes only flags and touches no memory of
                // ours; the child is single-threaded (between fork and exec),
                // which CLONE_NEWUSER requires.
                check(unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) })?;
                write_proc(c"/proc/self/setgroups", b"deny")?;
                write_proc(c"/proc/self/uid_map", uid_map)?;
                write_proc(c"/proc/self/gid_map", gid_map)?;
            }
            // SAFETY: unshare takes only a flag and touches no memory of ours.
            None => check(unsafe { libc::unshare(libc::CLONE_NEWNS) })?,
        }
        // Nothing done here may reach the parent namespace.
        mount(None, c"/", libc::MS_REC | libc::MS_SLAVE)?;
        for p in self.writable.iter().chain(&self.read_only) {
            mount(Some(p), p, libc::MS_BIND | libc::MS_REC)?;
        }
        setattr(c"/", MOUNT_ATTR_RDONLY, 0)?;
        for p in &self.writable {
            setattr(p, 0, MOUNT_ATTR_RDONLY)?;
        }
        for p in &self.read_only {
            setattr(p, MOUNT_ATTR_RDONLY, 0)?;
        }
        if have_cwd {
            // SAFETY: getcwd NUL-terminated the buffer.
            check(unsafe { libc::chdir(cwd.as_ptr().cast()) })?;
        }
        Ok(())
    }
}

fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn mount(
    source: Option<&CString>,
    target: &std::ffi::CStr,
    flags: libc::c_ulong,
) -> std::io::Result<()> {
    let src = source.map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: NUL-terminated strings we own, or NULL where mount(2) allows it.
    check(unsafe {
        libc::mount(
            src,
            target.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    })
}

fn setattr(target: &std::ffi::CStr, set: u64, clear: u64) -> std::io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a NUL-terminated path and a mount_attr of the size passed.
    let rc = unsafe {
        libc::syscall(
            SYS_MOUNT_SETATTR,
            libc::AT_FDCWD,
            target.as_ptr(),
            AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn write_proc(path: &std::ffi::CStr, bytes: &[u8]) -> std::io::Result<()> {
    // SAFETY: open/write/close on a NUL-terminated path and our buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n != bytes.len() as isize {
            return Err(err);
        }
    }
    Ok(())
}

/// The identity maps of a user namespace for a process that is not root
/// (a root one mounts in its own namespace without one).
fn user_maps() -> Option<(Vec<u8>, Vec<u8>)> {
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    if uid == 0 {
        return None;
    }
    Some((
        format!("{uid} {uid} 1\n").into_bytes(),
        format!("{gid} {gid} 1\n").into_bytes(),
    ))
}

/// Whether this process can give a child read-only mounts: probed once, in
/// a forked child that makes an empty plan's mounts and exits.
pub(crate) fn available() -> bool {
    static PROBE: OnceLock<bool> = OnceLock::new();
    *PROBE.get_or_init(|| {
        let plan = MountPlan::unprobed(&[], &[]);
        // SAFETY: the child makes only raw system calls and `_exit`s.
        let pid = unsafe { libc::fork() };
        match pid {
            -1 => false,
            0 => {
                let code = i32::from(plan.apply().is_err());
                // SAFETY: leaves the forked child without running destructors.
                unsafe { libc::_exit(code) }
            }
            pid => {
                let mut status = 0;
                // SAFETY: waits for the child just forked.
                let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
                rc == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn outside_the_writable_paths_metadata_and_writes_fail_with_erofs() {
        if !available() {
            // Not root and no user namespaces: the mounts cannot be made.
            eprintln!("mount namespaces unavailable here; nothing to check");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let (rw, ro) = (root.join("rw"), root.join("ro"));
        std::fs::create_dir_all(rw.join("keep")).unwrap();
        std::fs::create_dir_all(&ro).unwrap();
        std::fs::write(ro.join("f"), "x").unwrap();
        std::fs::write(rw.join("f"), "x").unwrap();
        let plan = MountPlan::unprobed(std::slice::from_ref(&rw), &[rw.join("keep")]);
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c")
            .arg(
                "chmod 600 ../ro/f; echo ro=$?; touch keep/n; echo keep=$?; \
                 chmod 600 f && echo x >> f && touch n; echo rw=$?; echo hi > /dev/null; echo dev=$?",
            )
            .current_dir(&rw);
        // SAFETY: `apply` runs between fork and exec and only makes raw,
        // async-signal-safe system calls on buffers the plan built before
        // the fork (it allocates nothing).
        unsafe { cmd.pre_exec(move || plan.apply()) };
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            text.contains("ro=1") && text.contains("Read-only file system"),
            "{text}"
        );
        assert!(text.contains("keep=1"), "{text}");
        assert!(text.contains("rw=0") && text.contains("dev=0"), "{text}");
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_ne!(mode(&ro.join("f")), 0o600);
        assert_eq!(mode(&rw.join("f")), 0o600);
        assert!(rw.join("n").exists() && !rw.join("keep/n").exists());
    }
}
