//! Dropping the capabilities that let a root tool process read other
//! processes' memory and environment, load kernel code, or leave the
//! filesystem sandbox — from the bounding, effective, permitted, inheritable
//! and ambient sets, with raw system calls that are safe after `fork`.
//!
//! Kept on purpose: `CAP_DAC_OVERRIDE`, `CAP_CHOWN`, `CAP_FOWNER`,
//! `CAP_SETUID`/`CAP_SETGID` and the like, which package managers running as
//! root in a container rely on. None of them bypasses Landlock: its checks
//! come after the DAC checks and do not consult capabilities.

/// The capabilities removed from root tool processes, with why.
pub(crate) const DROPPED: &[(u32, &str)] = &[
    // open_by_handle_at(2) opens any inode by handle: escapes path rules.
    (2, "CAP_DAC_READ_SEARCH"),
    (5, "CAP_KILL"),
    (8, "CAP_SETPCAP"),
    (9, "CAP_LINUX_IMMUTABLE"),
    (12, "CAP_NET_ADMIN"),
    // Raw sockets craft TCP without connect(2): around the network rules.
    (13, "CAP_NET_RAW"),
    (15, "CAP_IPC_OWNER"),
    (16, "CAP_SYS_MODULE"),
    (17, "CAP_SYS_RAWIO"),
    // With it, /proc/<orch>/environ and /proc/<orch>/mem are readable.
    (19, "CAP_SYS_PTRACE"),
    (20, "CAP_SYS_PACCT"),
    // Measured: with it, a Landlocked root child still reads /proc/<orch>/environ.
    (21, "CAP_SYS_ADMIN"),
    (22, "CAP_SYS_BOOT"),
    (25, "CAP_SYS_TIME"),
    (26, "CAP_SYS_TTY_CONFIG"),
    // Device nodes would give raw access to disks.
    (27, "CAP_MKNOD"),
    (30, "CAP_AUDIT_CONTROL"),
    (31, "CAP_SETFCAP"),
    (32, "CAP_MAC_OVERRIDE"),
    (33, "CAP_MAC_ADMIN"),
    (34, "CAP_SYSLOG"),
    (35, "CAP_WAKE_ALARM"),
    (36, "CAP_BLOCK_SUSPEND"),
    (37, "CAP_AUDIT_READ"),
    // Measured like CAP_SYS_ADMIN: reads /proc/<orch>/environ.
    (38, "CAP_PERFMON"),
    (39, "CAP_BPF"),
    (40, "CAP_CHECKPOINT_RESTORE"),
];

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The current thread's capability sets (effective, permitted, inheritable).
fn capget() -> std::io::Result<[CapData; 2]> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and data are valid for the v3 layout (two data structs).
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(data)
}

/// Whether this process holds any capability (root, or a binary with file
/// capabilities): then children must drop [`DROPPED`].
pub(crate) fn running_with_caps() -> bool {
    let root = rustix::process::geteuid().is_root();
    root || capget().is_ok_and(|d| d.iter().any(|s| s.effective | s.permitted != 0))
}

/// Removes [`DROPPED`] from every capability set of the calling process.
///
/// Async-signal-safe: only `prctl`, `capget`, `capset` on stack values.
/// Fails when a capability that is in the bounding set cannot be dropped
/// while running as root (it would come back at `exec`).
pub(crate) fn drop_dangerous() -> std::io::Result<()> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    for &(cap, _) in DROPPED {
        // SAFETY: prctl with integer arguments only.
        let present = unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) };
        if present != 1 {
            // 0: not in the set; -1 (EINVAL): unknown to this kernel.
            continue;
        }
        // SAFETY: prctl with integer arguments only; async-signal-safe.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if rc != 0 && root {
            return Err(std::io::Error::last_os_error());
        }
    }
    let mut data = capget()?;
    for &(cap, _) in DROPPED {
        let (word, bit) = ((cap / 32) as usize, 1u32 << (cap % 32));
        data[word].effective &= !bit;
        data[word].permitted &= !bit;
        data[word].inheritable &= !bit;
    }
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: header and data are valid for the v3 layout.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: prctl with integer arguments only. EINVAL on kernels before
    // 4.3 (no ambient set) is fine: there is nothing to clear.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_holds_the_caps_that_read_other_processes() {
        for name in [
            "CAP_SYS_ADMIN",
            "CAP_PERFMON",
            "CAP_SYS_PTRACE",
            "CAP_DAC_READ_SEARCH",
            "CAP_SYS_MODULE",
            "CAP_NET_RAW",
        ] {
            assert!(DROPPED.iter().any(|(_, n)| *n == name), "{name}");
        }
        assert!(!DROPPED.iter().any(|(_, n)| *n == "CAP_DAC_OVERRIDE"));
        assert!(DROPPED.iter().all(|(c, _)| *c <= 40));
    }
}
