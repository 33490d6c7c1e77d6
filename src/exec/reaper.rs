//! The per-call reaper: a small process between orch and each child it
//! starts ([`super::ProcessGroup`]) that makes sure nothing the child
//! started outlives it — background jobs, `nohup`, double forks, and also
//! what left the child's process group or session (`setsid`, daemons), which
//! a kill of the process group cannot reach.
//!
//! ```text
//! orch ── reaper (subreaper, outside the command's group) ── bash -c … (own group) ── …
//! ```
//!
//! How: in the child, between fork and exec, [`enter`] makes the forked
//! process a *child subreaper* (`prctl(PR_SET_CHILD_SUBREAPER)`) and forks
//! once more. The new process puts itself in a process group of its own and
//! goes on to exec the command; the process that stays is the reaper. Every
//! process the command starts is then a descendant of the reaper for as long
//! as it lives: when its parent dies, the kernel re-parents it to the nearest
//! subreaper ancestor, the reaper, not to init. When the command exits — or
//! orch asks, or orch dies — the reaper SIGKILLs the command's process group
//! and then its own children, layer by layer (a killed child's children
//! become the reaper's children), until it has none left, and exits. orch
//! waits for the reaper, so by the time a wait returns, the command's whole
//! tree is gone.
//!
//! Why this and not the alternatives:
//! - orch itself as the subreaper (and sweeping orphans at the end of a
//!   call) cannot tell whose orphan is whose: once a command's shell exited,
//!   its `setsid` grandchild is just another child of orch, next to other
//!   stages' orphans, subagents and git's detached helpers; and orch would
//!   have to reap orphans without taking an exit status tokio waits for.
//!   A reaper per call knows exactly: its children are the call's processes.
//! - a PID namespace per call needs `CAP_SYS_ADMIN` or an unprivileged user
//!   namespace (refused in many containers and by Ubuntu's AppArmor
//!   default), makes the command see other pids than orch does (`$$`), and
//!   its init ignores SIGTERM from outside, which would change timeouts.
//! - a cgroup needs a delegated, writable cgroup tree: not there in CI
//!   containers or for most users.
//!
//! `PR_SET_CHILD_SUBREAPER` needs no privilege, works as root and as a user,
//! with and without Landlock (the reaper forks before the sandbox is entered,
//! so it is not confined; a confined command cannot signal it, Landlock's
//! signal scope). Where something is unavailable the reaper says so in its
//! report and orch logs it ([`Report::fallbacks`]):
//! - no subreaper (a kernel before 3.4): only the process group is killed;
//! - no `/proc/thread-self/children` (a kernel without
//!   `CONFIG_PROC_CHILDREN`): the reaper finds its children by scanning
//!   `/proc/*/stat` instead;
//! - no `/proc` at all: only the process group is killed, and the reaper
//!   waits (bounded) for what it cannot see.
//!
//! Cost, measured on a loaded 2-core machine: one more fork per command
//! (about 2–3 ms at orch's size, 30–40 MB resident; it grows with orch's
//! anonymous memory), and the reaper shares orch's memory copy-on-write for
//! the command's lifetime, so it keeps the pages orch changes meanwhile
//! (about 1 MB over a 4 s call). The sweep itself takes about 10 µs when
//! the command left nothing, about 300 µs when it kills a `setsid` survivor
//! (the debug log has each call's `sweep_us`).
//!
//! Invariants:
//! - the reaper runs in a forked copy of multi-threaded orch and never execs:
//!   it makes only raw system calls on stack memory (no allocation, no
//!   locks, no panics) and ends with `_exit`;
//! - it closes every descriptor but its two pipes at once (it must not keep
//!   the output pipe, the lane or a lock of orch's open), and leaves the
//!   lane (`chdir("/")`);
//! - it blocks every signal it can: a `kill 0` of the command, a terminal's
//!   Ctrl-C or orch's SIGTERM to the command's group do not stop it; orch
//!   signals the command through it ([`Reaper::signal`]), and it signals the
//!   command's group only while the command is not reaped, so a recycled
//!   process id is never hit; its own children cannot be recycled either
//!   while it has not reaped them, so its kills are exact;
//! - it ends the call when the command exits, when orch closes the control
//!   pipe ([`Reaper::end`], dropping the [`super::ProcessGroup`] does that)
//!   or when orch dies (the kernel closes the pipe);
//! - its sweep is bounded ([`SWEEP_STALE_ROUNDS`] rounds of
//!   [`SWEEP_TICK_MS`] without progress, [`SWEEP_MAX_ROUNDS`] in all): what it
//!   cannot kill (a process of another user, one stuck in the kernel) is
//!   counted in [`Report::survivors`] and outlives the call, logged.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// How long one sweep round waits for a killed child to be reported.
pub(crate) const SWEEP_TICK_MS: libc::c_int = 20;
/// Rounds without any child reaped after which the sweep gives up (about
/// 2 s): what is left cannot be killed.
pub(crate) const SWEEP_STALE_ROUNDS: u32 = 100;
/// Upper bound of sweep rounds (a fork bomb refilling the tree).
pub(crate) const SWEEP_MAX_ROUNDS: u32 = 10_000;

/// Report records: 8 bytes, a kind (u32) and a value (i32), native endian.
const RECORD: usize = 8;
/// The command's pid (written before `spawn` returns).
const REC_PID: u32 = 1;
/// The command's raw wait status.
const REC_STATUS: u32 = 2;
/// Processes the sweep could not kill.
const REC_SURVIVORS: u32 = 3;
/// [`fallback`] bits.
const REC_FALLBACKS: u32 = 4;
/// Microseconds from the end of the call to the end of the sweep.
const REC_SWEEP_US: u32 = 5;

/// What the reaper could not use, as bits of [`Report::fallbacks`].
pub(crate) mod fallback {
    /// `PR_SET_CHILD_SUBREAPER` failed: orphans went to init, unseen.
    pub(crate) const NO_SUBREAPER: u32 = 1;
    /// `/proc/thread-self/children` unreadable: `/proc/*/stat` was scanned.
    pub(crate) const PROC_SCAN: u32 = 2;
    /// `/proc` unreadable: only the command's process group was killed.
    pub(crate) const NO_PROC: u32 = 4;
    /// `signalfd` failed: the reaper polled every tick instead.
    pub(crate) const NO_SIGNALFD: u32 = 8;
}

/// What the reaper reported about one command.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Report {
    /// The command's pid, which is also its process group id.
    pub pid: Option<libc::pid_t>,
    /// The command's raw wait status, once it was reaped.
    pub status: Option<libc::c_int>,
    /// Processes the sweep could not kill.
    pub survivors: u32,
    /// [`fallback`] bits: what was unavailable.
    pub fallbacks: u32,
    /// Microseconds the final kill and sweep took.
    pub sweep_us: Option<u32>,
}

/// orch's side of one reaper: the control pipe's write end (closing it ends
/// the call) and the report pipe's read end.
#[derive(Debug)]
pub(crate) struct Reaper {
    control: Option<OwnedFd>,
    reports: std::fs::File,
    report: Report,
}

/// The reaper's side of its pipes, open in orch until the spawn returned
/// (the child inherits them), then dropped.
#[derive(Debug)]
pub(crate) struct ReaperEnds {
    control: OwnedFd,
    reports: OwnedFd,
    /// Find children by scanning `/proc` even where the children file is
    /// there (tests of the fallback).
    scan: bool,
}

impl Reaper {
    /// Creates both pipes (close-on-exec: only the reaper, which never execs,
    /// keeps its ends past the spawn).
    pub(crate) fn pipes() -> std::io::Result<(Reaper, ReaperEnds)> {
        let (control_read, control_write) = super::pipe::cloexec_pipe()?;
        let (reports_read, reports_write) = super::pipe::cloexec_pipe()?;
        set_nonblocking(&control_write)?;
        set_nonblocking(&reports_read)?;
        Ok((
            Reaper {
                control: Some(control_write),
                reports: std::fs::File::from(reports_read),
                report: Report::default(),
            },
            ReaperEnds {
                control: control_read,
                reports: reports_write,
                scan: false,
            },
        ))
    }

    /// Reads the records written so far and returns the report.
    pub(crate) fn read_report(&mut self) -> Report {
        let mut buf = [0u8; RECORD * 8];
        let mut pending = Vec::new();
        loop {
            match self.reports.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => pending.extend_from_slice(buf.get(..n).unwrap_or_default()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        for rec in pending.chunks_exact(RECORD) {
            let (kind, value) = rec.split_at(4);
            let kind = u32::from_ne_bytes(kind.try_into().unwrap_or_default());
            let value = i32::from_ne_bytes(value.try_into().unwrap_or_default());
            match kind {
                REC_PID => self.report.pid = Some(value),
                REC_STATUS => self.report.status = Some(value),
                REC_SURVIVORS => self.report.survivors = value as u32,
                REC_FALLBACKS => self.report.fallbacks |= value as u32,
                REC_SWEEP_US => self.report.sweep_us = Some(value as u32),
                _ => {}
            }
        }
        self.report
    }

    /// Asks the reaper to send `signal` to the command's process group (it
    /// does only while the command is not reaped). False when the reaper
    /// is gone or the call was ended.
    pub(crate) fn signal(&self, signal: libc::c_int) -> bool {
        let Some(fd) = &self.control else {
            return false;
        };
        // The pipe is non-blocking, and EPIPE is an error return (Rust
        // programs ignore SIGPIPE).
        rustix::io::write(fd, &[signal as u8]) == Ok(1)
    }

    /// Ends the call: the reaper SIGKILLs the command's group and every
    /// process of the tree, then exits.
    pub(crate) fn end(&mut self) {
        self.control = None;
    }
}

fn set_nonblocking(fd: &OwnedFd) -> std::io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK)?;
    Ok(())
}

/// The `pre_exec` hook that splits the child into the reaper and the
/// command (see the module doc). Register it before any other hook: those
/// then run in the command only. Returns `Err` (the spawn fails, nothing
/// ran) when the fork fails.
pub(crate) fn hook(
    ends: &ReaperEnds,
) -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
    let control = ends.control.as_raw_fd();
    let reports = ends.reports.as_raw_fd();
    let fallbacks = if ends.scan { fallback::PROC_SCAN } else { 0 };
    move || enter(control, reports, fallbacks)
}

/// In the child after fork: become a subreaper, fork, and either return (the
/// command, which goes on to exec) or supervise (the reaper, never returns).
fn enter(control: RawFd, reports: RawFd, mut fallbacks: u32) -> std::io::Result<()> {
    // SAFETY: all calls below are raw system calls on stack values, made in
    // the single-threaded child between fork and exec. glibc's `fork` left
    // this child's malloc and stdio locks consistent, so forking again here
    // is sound; the reaper branch never returns and only makes raw system
    // calls (see `supervise`).
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        // Blocked before the fork so that no signal reaches the reaper
        // through a handler it inherited from orch.
        libc::sigprocmask(libc::SIG_SETMASK, &all, &mut before);
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            fallbacks |= fallback::NO_SUBREAPER;
        }
        match libc::fork() {
            -1 => {
                let err = std::io::Error::last_os_error();
                libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
                Err(err)
            }
            0 => {
                libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
                // The command leads a group of its own: orch's and the
                // command's signals to "the group" never reach the reaper.
                if libc::setpgid(0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            }
            command => supervise(command, control, reports, fallbacks),
        }
    }
}

/// The reaper's life: report the command's pid, wait for the command to
/// exit or the control pipe to close, sweep, report, exit.
///
/// # Safety
///
/// Only in the reaper branch of [`enter`]: a forked copy of orch that must
/// never return into Rust code that could allocate or take a lock.
unsafe fn supervise(command: libc::pid_t, control: RawFd, reports: RawFd, mut fallbacks: u32) -> ! {
    // SAFETY: the caller guarantees we are the reaper branch of `enter`, a
    // single-threaded forked child. Every call below is a raw,
    // async-signal-safe system call on stack values (sigset_t, pollfd arrays,
    // the status ints) or on descriptors this process owns: `control` and
    // `reports` (inherited from orch, kept open by `close_all_but`) and the
    // signalfd made here. `write_record` and `close_all_but` need exactly
    // that. Nothing allocates, and `_exit` ends the process without running
    // Rust or libc exit handlers.
    unsafe {
        write_record(reports, REC_PID, command);
        close_all_but(control, reports);
        libc::chdir(c"/".as_ptr());
        // Named for `ps`: otherwise it shows the orch thread that forked it.
        libc::prctl(libc::PR_SET_NAME, c"orch-reaper".as_ptr(), 0, 0, 0);
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        let sfd = libc::signalfd(-1, &chld, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC);
        if sfd < 0 {
            fallbacks |= fallback::NO_SIGNALFD;
        }
        let mut st = State {
            command,
            status: None,
            sfd,
        };

        // Wait for the command to exit or for orch to end the call.
        let mut control_open = true;
        loop {
            st.reap();
            if st.status.is_some() || !control_open {
                break;
            }
            let mut fds = [
                libc::pollfd {
                    fd: control,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: sfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let timeout = if sfd < 0 { SWEEP_TICK_MS } else { -1 };
            if libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) < 0 {
                continue;
            }
            if fds[0].revents != 0 {
                control_open = st.read_control(control);
            }
            st.drain_signalfd();
        }

        // The call is over: the command's group, then every descendant.
        let started = monotonic_us();
        if st.status.is_none() {
            libc::killpg(command, libc::SIGKILL);
        }
        let survivors = st.sweep(&mut fallbacks);
        let took = monotonic_us().saturating_sub(started);
        write_record(reports, REC_SWEEP_US, took.min(i32::MAX as u64) as i32);
        if let Some(status) = st.status {
            write_record(reports, REC_STATUS, status);
        }
        if survivors > 0 {
            write_record(reports, REC_SURVIVORS, survivors as i32);
        }
        if fallbacks != 0 {
            write_record(reports, REC_FALLBACKS, fallbacks as i32);
        }
        libc::_exit(0)
    }
}

/// The reaper's view of its command.
struct State {
    command: libc::pid_t,
    /// The command's raw wait status once reaped.
    status: Option<libc::c_int>,
    /// A signalfd for SIGCHLD, or -1.
    sfd: RawFd,
}

impl State {
    /// Reaps every child that exited. The command is SIGKILLed as a group
    /// while it is still a zombie (its pid, and so its group id, cannot be
    /// recycled before it is reaped), then reaped. Returns whether any child
    /// was reaped, and whether children remain.
    fn reap(&mut self) -> (bool, bool) {
        let mut reaped = false;
        // SAFETY: waitid/waitpid/killpg on our own children, stack values only.
        unsafe {
            if self.status.is_none() {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                let rc = libc::waitid(
                    libc::P_PID,
                    self.command as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                );
                if rc == 0 && info.si_pid() == self.command {
                    // Background jobs must not outlive their command.
                    libc::killpg(self.command, libc::SIGKILL);
                    let mut status = 0;
                    if libc::waitpid(self.command, &mut status, 0) == self.command {
                        self.status = Some(status);
                        reaped = true;
                    }
                }
            }
            loop {
                let mut status = 0;
                let pid = libc::waitpid(-1, &mut status, libc::WNOHANG | libc::__WALL);
                if pid > 0 {
                    reaped = true;
                    if pid == self.command {
                        self.status = Some(status);
                    }
                    continue;
                }
                if pid == 0 {
                    return (reaped, true);
                }
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                // ECHILD: no children at all.
                return (reaped, false);
            }
        }
    }

    /// Reads signal requests from orch; false when orch closed the pipe.
    fn read_control(&mut self, control: RawFd) -> bool {
        let mut buf = [0u8; 64];
        // SAFETY: read into a stack buffer of the given length.
        let n = unsafe { libc::read(control, buf.as_mut_ptr().cast(), buf.len()) };
        if n == 0 {
            return false;
        }
        if n < 0 {
            let err = std::io::Error::last_os_error().raw_os_error();
            return matches!(err, Some(libc::EINTR) | Some(libc::EAGAIN));
        }
        for &signal in buf.iter().take(n as usize) {
            if self.status.is_none() && signal != 0 {
                // SAFETY: killpg takes only integers and is async-signal-safe;
                // the command is not reaped, so its group id is not a
                // recycled one.
                unsafe { libc::killpg(self.command, signal as libc::c_int) };
            }
        }
        true
    }

    /// Empties the signalfd (its readiness is all that matters).
    fn drain_signalfd(&self) {
        if self.sfd < 0 {
            return;
        }
        let mut buf = [0u8; 128 * 4];
        // SAFETY: read into a stack buffer of the given length.
        while unsafe { libc::read(self.sfd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    }

    /// Waits up to one tick for a child to exit.
    fn tick(&self) {
        if self.sfd < 0 {
            // SAFETY: poll with no descriptors is a sleep.
            unsafe { libc::poll(std::ptr::null_mut(), 0, SWEEP_TICK_MS) };
            return;
        }
        let mut fd = libc::pollfd {
            fd: self.sfd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one stack pollfd.
        unsafe { libc::poll(&mut fd, 1, SWEEP_TICK_MS) };
        self.drain_signalfd();
    }

    /// SIGKILLs the reaper's children until it has none (what the command
    /// left, re-parented here), layer by layer. Returns how many it could
    /// not kill (0 when the tree is gone).
    fn sweep(&mut self, fallbacks: &mut u32) -> u32 {
        let mut stale = 0;
        let mut listed = 0;
        for _ in 0..SWEEP_MAX_ROUNDS {
            let (reaped, remain) = self.reap();
            if !remain {
                return 0;
            }
            stale = if reaped { 0 } else { stale + 1 };
            if stale > SWEEP_STALE_ROUNDS {
                break;
            }
            let listing = if *fallbacks & fallback::PROC_SCAN == 0 {
                kill_children_listed()
            } else {
                None
            };
            listed = match listing {
                Some(n) => n,
                None => {
                    *fallbacks |= fallback::PROC_SCAN;
                    match kill_children_scanned() {
                        Some(n) => n,
                        None => {
                            *fallbacks |= fallback::NO_PROC;
                            0
                        }
                    }
                }
            };
            self.tick();
        }
        listed.max(1)
    }
}

/// SIGKILLs every child listed in `/proc/thread-self/children` (the reaper
/// is single-threaded, so that is all of them); returns how many it found.
/// `None` when the file cannot be read.
fn kill_children_listed() -> Option<u32> {
    // SAFETY: open/read/close with stack buffers; the pids are our own
    // unreaped children, so none is a recycled id.
    unsafe {
        let fd = libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return None;
        }
        let mut buf = [0u8; 512];
        let mut number: Option<libc::pid_t> = None;
        let mut found = 0;
        loop {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if n <= 0 {
                break;
            }
            for &b in buf.iter().take(n as usize) {
                if b.is_ascii_digit() {
                    let digit = libc::pid_t::from(b - b'0');
                    number = Some(number.unwrap_or(0).saturating_mul(10).saturating_add(digit));
                } else if let Some(pid) = number.take() {
                    kill_child(pid);
                    found += 1;
                }
            }
        }
        if let Some(pid) = number {
            kill_child(pid);
            found += 1;
        }
        libc::close(fd);
        Some(found)
    }
}

/// SIGKILLs every process whose parent is the reaper, found by reading
/// `/proc/<pid>/stat` for every pid; returns how many it found. `None` when
/// `/proc` cannot be listed.
fn kill_children_scanned() -> Option<u32> {
    // SAFETY: open/getdents64/close with a stack buffer; the kernel fills
    // whole `linux_dirent64` records, read within the returned length.
    unsafe {
        let me = libc::getpid();
        let dir = libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return None;
        }
        // u64 elements: the records' 8-byte fields are aligned.
        let mut buf = [0u64; 1024];
        let bytes = std::mem::size_of_val(&buf);
        let mut found = 0;
        loop {
            let n = libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), bytes);
            if n <= 0 {
                break;
            }
            let base = buf.as_ptr().cast::<u8>();
            let mut off = 0usize;
            while off + 19 < n as usize {
                // struct linux_dirent64 { u64 ino; i64 off; u16 reclen; u8 type; char name[]; }
                let reclen = usize::from(u16::from_ne_bytes([
                    *base.add(off + 16),
                    *base.add(off + 17),
                ]));
                if reclen == 0 {
                    break;
                }
                let mut pid: libc::pid_t = 0;
                let mut p = off + 19;
                let end = (off + reclen).min(n as usize);
                while p < end && (*base.add(p)).is_ascii_digit() {
                    pid = pid
                        .saturating_mul(10)
                        .saturating_add(libc::pid_t::from(*base.add(p) - b'0'));
                    p += 1;
                }
                if pid > 0 && p < end && *base.add(p) == 0 && parent_of(pid) == Some(me) {
                    kill_child(pid);
                    found += 1;
                }
                off += reclen;
            }
        }
        libc::close(dir);
        Some(found)
    }
}

/// The parent pid in `/proc/<pid>/stat` (the field after the state, after
/// the last `)`: the command name may hold spaces and parentheses).
fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    let mut path = [0u8; 32];
    let mut len = 0;
    for &b in b"/proc/" {
        path[len] = b;
        len += 1;
    }
    let mut digits = [0u8; 12];
    let mut d = 0;
    let mut v = pid;
    while v > 0 && d < digits.len() {
        digits[d] = b'0' + (v % 10) as u8;
        v /= 10;
        d += 1;
    }
    while d > 0 {
        d -= 1;
        path[len] = digits[d];
        len += 1;
    }
    for &b in b"/stat" {
        path[len] = b;
        len += 1;
    }
    // SAFETY: `path` is NUL-terminated (zero-initialised, at most 6 + 12 + 5
    // bytes written); read into a stack buffer of the given length.
    let (buf, n) = unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let mut buf = [0u8; 512];
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        (buf, n)
    };
    let text = buf.get(..usize::try_from(n).ok()?)?;
    let close = text.iter().rposition(|b| *b == b')')?;
    // ") S 1234 …": skip ") ", the state and a space.
    let mut ppid: libc::pid_t = 0;
    let mut seen = false;
    for &b in text.get(close + 4..)? {
        if !b.is_ascii_digit() {
            break;
        }
        ppid = ppid
            .saturating_mul(10)
            .saturating_add(libc::pid_t::from(b - b'0'));
        seen = true;
    }
    seen.then_some(ppid)
}

/// The monotonic clock in microseconds (`clock_gettime` is
/// async-signal-safe).
fn monotonic_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a stack value.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000) + (ts.tv_nsec as u64) / 1000
}

/// SIGKILLs one of the reaper's children (EPERM for another user's process
/// is left to the sweep's bound).
fn kill_child(pid: libc::pid_t) {
    if pid > 1 {
        // SAFETY: kill takes only integers and is async-signal-safe; `pid`
        // is our own unreaped child, so not a recycled id.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Closes every descriptor but `a` and `b` (`close_range`, or one by one up
/// to the descriptor limit where the kernel lacks it).
///
/// # Safety
///
/// Only in the reaper: it closes descriptors other code may think it owns.
unsafe fn close_all_but(a: RawFd, b: RawFd) {
    let (lo, hi) = (a.min(b) as libc::c_uint, a.max(b) as libc::c_uint);
    let ranges = [
        (0, lo.checked_sub(1)),
        (lo + 1, hi.checked_sub(1)),
        (hi + 1, Some(libc::c_uint::MAX)),
    ];
    for (first, last) in ranges {
        let Some(last) = last else { continue };
        if first > last {
            continue;
        }
        // SAFETY: close_range on descriptor numbers; no memory passed.
        let rc = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0) };
        if rc != 0 {
            // SAFETY: getrlimit into a stack value, close on numbers.
            unsafe {
                let mut lim: libc::rlimit = std::mem::zeroed();
                let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                    lim.rlim_cur.min(65_536) as libc::c_uint
                } else {
                    1024
                };
                for fd in first..=last.min(max) {
                    libc::close(fd as libc::c_int);
                }
            }
        }
    }
}

/// Writes one report record (atomic: far below `PIPE_BUF`).
///
/// # Safety
///
/// `fd` must be the reaper's report pipe.
unsafe fn write_record(fd: RawFd, kind: u32, value: i32) {
    let mut rec = [0u8; RECORD];
    rec[..4].copy_from_slice(&kind.to_ne_bytes());
    rec[4..].copy_from_slice(&value.to_ne_bytes());
    // SAFETY: write from a stack buffer of the given length.
    unsafe { libc::write(fd, rec.as_ptr().cast(), RECORD) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;
    use std::time::Duration;

    /// Runs `bash -c command` in `dir` under a reaper (finding children by
    /// scanning `/proc` when `scan`); returns the reaper's report.
    async fn reaped(command: &str, dir: &std::path::Path, scan: bool) -> Report {
        let (mut reaper, mut ends) = Reaper::pipes().unwrap();
        ends.scan = scan;
        let mut cmd = tokio::process::Command::new("bash");
        cmd.args(["-c", command])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        // SAFETY: the hook runs between fork and exec and only makes raw,
        // async-signal-safe system calls on stack values and the two pipe
        // ends `ends` keeps open until the spawn (see `enter`).
        unsafe {
            cmd.pre_exec(hook(&ends));
        }
        let mut child = cmd.spawn().unwrap();
        drop(ends);
        let own = tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .expect("the reaper hung")
            .unwrap();
        assert!(own.success(), "the reaper itself exits 0: {own}");
        reaper.read_report()
    }

    /// A `setsid` sleeper that wrote its pid to `p` before the command exits.
    const SETSID_SLEEPER: &str = "setsid sh -c 'echo $$ > p; exec sleep 1000' >/dev/null 2>&1 & \
        for _ in $(seq 1000); do [ -s p ] && break; sleep 0.01; done; exit 3";

    fn sleeper_pid(dir: &std::path::Path) -> libc::pid_t {
        std::fs::read_to_string(dir.join("p"))
            .expect("the sleeper started")
            .trim()
            .parse()
            .unwrap()
    }

    fn alive(pid: libc::pid_t) -> bool {
        std::path::Path::new(&format!("/proc/{pid}")).exists()
    }

    #[tokio::test]
    async fn the_report_has_the_commands_pid_and_status_and_the_sweep_took_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let report = reaped(SETSID_SLEEPER, dir.path(), false).await;
        assert!(report.pid.is_some_and(|p| p > 0));
        let status = report.status.expect("the command's status");
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 3);
        assert_eq!(report.survivors, 0);
        assert_eq!(report.fallbacks, 0);
        let pid = sleeper_pid(dir.path());
        assert!(!alive(pid), "the setsid sleeper {pid} survived");
    }

    #[tokio::test]
    async fn the_proc_scan_fallback_also_takes_what_left_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let report = reaped(SETSID_SLEEPER, dir.path(), true).await;
        assert_eq!(report.fallbacks, fallback::PROC_SCAN);
        assert_eq!(report.survivors, 0);
        let pid = sleeper_pid(dir.path());
        assert!(!alive(pid), "the setsid sleeper {pid} survived");
    }

    #[test]
    fn the_parent_is_read_past_a_command_name_with_spaces_and_parentheses() {
        let dir = tempfile::tempdir().unwrap();
        let odd = dir.path().join("a) 1 2 (b");
        std::os::unix::fs::symlink(which_sleep(), &odd).unwrap();
        let mut child = std::process::Command::new(&odd).arg("30").spawn().unwrap();
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
        assert!(stat.contains("(a) 1 2 (b)"), "{stat}");
        let parent = parent_of(child.id() as libc::pid_t);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(parent, Some(std::process::id() as libc::pid_t));
        assert_eq!(parent_of(0), None);
    }

    fn which_sleep() -> std::path::PathBuf {
        std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .map(|d| d.join("sleep"))
            .find(|p| p.is_file())
            .expect("sleep on PATH")
    }
}
