//! Knowing what changed in a lane from the kernel (inotify) instead of
//! walking it: a [`LaneWatch`] marks every path the lane's processes touched
//! since the lane was at its start commit, so the stage end (secret scan,
//! read-only check, commit) looks at those paths only
//! ([`super::resolve_marks`], [`super::commit_edits`]) instead of three
//! whole-tree status walks (~300–600 ms each at 100,000 files).
//!
//! What was decided, and why it is complete:
//!
//! - **Start before anything runs.** A watcher starts when the lane is at
//!   its start commit and before any tool or setup process runs in it. It
//!   lists the lane's directories from the disk (a dirs-only `readdir` walk
//!   using `d_type`, so ignored directories a reset kept are watched too)
//!   and adds one watch per directory. At 100,000 files in 1,011
//!   directories that took 150–190 ms (load ~12 on 2 cores); listing the
//!   directories from the start commit's 1,011 tree objects instead was not
//!   measured and may be cheaper (it would miss ignored directories, which
//!   cannot matter unless a `.gitignore` changes, and that rewalks). A `.gitattributes` anywhere makes it give up at once: the
//!   commit from marks hashes files raw, with no filters.
//! - **What is marked.** Every event that names an entry marks that entry's
//!   relative path. A directory created or moved into a watched directory
//!   is marked *whole*: no watches are added inside it, the commit walks it
//!   entirely. So every path whose state may differ from the start commit
//!   is marked or lies under a whole-marked directory: a change to a file
//!   in a watched directory raises an event in that directory; a change in
//!   an unwatched directory happens under a whole-marked one (the only
//!   unwatched directories are those created or moved in since).
//! - **Moves.** A watch follows its inode, so after `mv a b` the events of
//!   `a`'s watch name stale paths (`a/…`). That is harmless: the move
//!   itself marked `a` (gone: everything below it is deleted) and `b`
//!   (whole: walked), and every marked path is re-examined on disk at
//!   commit time, so a stale mark only costs one more look. When the record
//!   restarts ([`LaneWatch::restart`]), the whole-marked directories get
//!   watches (re-adding a watch to an inode already watched returns its old
//!   descriptor, which is then mapped to the new path) and watches that
//!   moved and were not found again (moved out of the lane) are removed.
//! - **When it cannot vouch.** The record is *incomplete* (the caller falls
//!   back to the walks) on a queue overflow (`IN_Q_OVERFLOW`), a failed
//!   `inotify_add_watch` (e.g. `ENOSPC` past `max_user_watches`), more than
//!   [`MAX_WATCHES`] directories, an unparsable event, the lane's top
//!   directory deleted or moved, a `.gitattributes` or a `.git` (a nested
//!   repository) appearing anywhere but the lane's own `.git` file, or the
//!   repository's `info/exclude` changing (it is outside the lane).
//!   `ORCH_LANE_WATCH=0` turns watchers off (every stage end walks). A new
//!   hard link to a file gives up too (a write through one name of a file
//!   raises no event in the directories of its other names).
//! - **Known blind spots** (the same for any inotify user): a write through
//!   a hard link made from outside the lane, or through a shared `mmap` of
//!   a lane file after it was closed, raises no event in the lane. Neither
//!   happens in a checkout or a build; an agent would have to set it up.
//! - **Barrier.** A file-system call queues its inotify events before it
//!   returns, so once orch's own operation in the lane (a reset, a commit)
//!   has returned, draining the queue until `EAGAIN` under the record's lock
//!   sees all of its events; [`LaneWatch::restart`] does that, then clears
//!   the record.
//!
//! A small thread per watcher drains the queue as events come (so the
//! kernel's queue of 16,384 events rarely overflows), polling the inotify
//! descriptor and an eventfd that stops it.

use super::repo::CommitId;
use rustix::fs::inotify;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

/// The most directories one watcher watches; a lane with more falls back
/// to the walks (the per-user limit, `fs.inotify.max_user_watches`, is
/// shared by every process of the user).
pub const MAX_WATCHES: usize = 65_536;

/// The environment variable that turns lane watchers off when `0`.
pub const WATCH_ENV: &str = crate::environment::ORCH_LANE_WATCH;

const MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MODIFY
    | libc::IN_CLOSE_WRITE
    | libc::IN_ATTRIB
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR
    | libc::IN_DONT_FOLLOW
    | libc::IN_EXCL_UNLINK;

/// Whether lane watchers are on (`ORCH_LANE_WATCH` is not `0`).
pub fn enabled() -> bool {
    crate::environment::current()
        .var_os(WATCH_ENV)
        .is_none_or(|v| v != "0")
}

/// What a lane's processes touched since the record's base commit: paths
/// relative to the lane (raw bytes, `/`-separated), to re-examine on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marks {
    /// The commit the lane was at when the record (re)started.
    pub base: CommitId,
    /// Entries that may have changed (files, symlinks, directories; maybe
    /// gone, maybe stale names of moved directories).
    pub paths: BTreeSet<Vec<u8>>,
    /// Directories created or moved in: walked whole.
    pub whole: BTreeSet<Vec<u8>>,
}

/// The lane's directories as a record knows them ([`LaneWatch::directories`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Directories {
    /// Watched directories (relative; `""` is the lane itself).
    pub watched: Vec<Vec<u8>>,
    /// Directories marked whole since the record restarted: not watched
    /// inside, so listed from the disk.
    pub whole: Vec<Vec<u8>>,
}

/// A lane change watcher; see the module doc. Dropping it stops its thread
/// and removes its watches.
pub struct LaneWatch {
    root: PathBuf,
    shared: Arc<Shared>,
    /// The eventfd that stops the drain thread (which holds the other
    /// reference while it polls it).
    stop: Arc<OwnedFd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for LaneWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaneWatch")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

struct Shared {
    fd: OwnedFd,
    state: Mutex<State>,
}

struct State {
    /// The lane's top directory.
    root: PathBuf,
    /// Watch descriptor → the directory it was added for (relative).
    wds: HashMap<i32, Vec<u8>>,
    /// Watches whose directory moved since the record restarted.
    moved: HashSet<i32>,
    paths: BTreeSet<Vec<u8>>,
    whole: BTreeSet<Vec<u8>>,
    /// Why the record cannot vouch for completeness, if it cannot.
    incomplete: Option<String>,
    base: CommitId,
    /// Everything marked since the watcher started, across restarts (the
    /// marks of earlier records folded in): kept only when asked for
    /// ([`LaneWatch::keep_history`]).
    history: Option<History>,
    /// `info/exclude` of the common dir as it was at the start.
    exclude: Option<PathBuf>,
    exclude_stamp: Option<(SystemTime, u64)>,
}

impl State {
    /// The record of the lane at `root`, empty, starting at `base`.
    fn new(root: PathBuf, base: CommitId) -> State {
        State {
            root,
            wds: HashMap::new(),
            moved: HashSet::new(),
            paths: BTreeSet::new(),
            whole: BTreeSet::new(),
            incomplete: None,
            base,
            history: None,
            exclude: None,
            exclude_stamp: None,
        }
    }
}

/// Paths and whole-marked directories of earlier records.
#[derive(Default)]
struct History {
    paths: BTreeSet<Vec<u8>>,
    whole: BTreeSet<Vec<u8>>,
}

impl History {
    /// Whether `p` lies below a directory this history marks whole.
    fn covers(&self, p: &[u8]) -> bool {
        below(p, |dir| self.whole.contains(dir))
    }

    /// Folds one record's marks in (paths below a whole-marked directory
    /// are already covered by it).
    fn fold(&mut self, paths: &BTreeSet<Vec<u8>>, whole: &BTreeSet<Vec<u8>>) {
        for d in whole {
            if !self.covers(d) {
                self.whole.insert(d.clone());
            }
        }
        for p in paths {
            if !self.covers(p) && !self.whole.contains(p) {
                self.paths.insert(p.clone());
            }
        }
    }
}

impl State {
    fn give_up(&mut self, why: impl Into<String>) {
        if self.incomplete.is_none() {
            self.incomplete = Some(why.into());
        }
    }
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        name.to_vec()
    } else {
        let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
        p.extend_from_slice(dir);
        p.push(b'/');
        p.extend_from_slice(name);
        p
    }
}

fn under(root: &Path, rel: &[u8]) -> PathBuf {
    if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(OsStr::from_bytes(rel))
    }
}

impl LaneWatch {
    /// Starts watching the lane at `lane`, which is at commit `base` and in
    /// which nothing runs yet. `common` is the repository's common git dir
    /// (its `info/exclude` is stamped). A watcher that could not watch
    /// everything still starts, incomplete (its [`LaneWatch::changes`] is
    /// `None`); an error means inotify itself is unavailable.
    pub fn start(lane: &Path, common: &Path, base: &CommitId) -> std::io::Result<LaneWatch> {
        use rustix::event::EventfdFlags;
        use rustix::fs::inotify::CreateFlags;
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
        let stop = rustix::event::eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
        let stop = Arc::new(stop);
        let exclude = common.join("info").join("exclude");
        let shared = Arc::new(Shared {
            fd,
            state: Mutex::new(State {
                exclude_stamp: stamp(&exclude),
                exclude: Some(exclude),
                ..State::new(lane.to_path_buf(), base.clone())
            }),
        });
        {
            let mut state = shared.lock();
            shared.watch_tree(&mut state, lane, b"");
        }
        let (s, stop_fd) = (Arc::clone(&shared), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("lane-watch".to_owned())
            .spawn(move || s.run(&stop_fd))?;
        Ok(LaneWatch {
            root: lane.to_path_buf(),
            shared,
            stop,
            thread: Some(thread),
        })
    }

    /// The lane's top directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The commit the record started from.
    pub fn base(&self) -> CommitId {
        self.shared.lock().base.clone()
    }

    /// Everything marked since the record's base, after draining every
    /// event queued so far; `None` when the record cannot vouch for
    /// completeness (the caller walks the lane instead).
    pub fn changes(&self) -> Option<Marks> {
        let mut state = self.shared.lock();
        self.shared.drain(&mut state);
        if let Some(exclude) = &state.exclude
            && stamp(exclude) != state.exclude_stamp
        {
            state.give_up("the repository's info/exclude changed");
        }
        if let Some(why) = &state.incomplete {
            tracing::debug!(lane = %self.root.display(), "lane watch incomplete: {why}");
            return None;
        }
        Some(Marks {
            base: state.base.clone(),
            paths: state.paths.clone(),
            whole: state.whole.clone(),
        })
    }

    /// Keeps every record's marks from now on, across restarts, for
    /// [`LaneWatch::since_start`]: call it right after [`LaneWatch::start`],
    /// before anything runs in the lane.
    pub fn keep_history(&self) {
        self.shared.lock().history = Some(History::default());
    }

    /// Everything marked since the watcher started (every record since,
    /// folded together), after draining the queue, with the current base:
    /// the paths that may differ from the lane as it was then. `None` when
    /// no history is kept or the record cannot vouch for completeness.
    pub fn since_start(&self) -> Option<Marks> {
        let now = self.changes()?;
        let state = self.shared.lock();
        let kept = state.history.as_ref()?;
        let mut all = History {
            paths: kept.paths.clone(),
            whole: kept.whole.clone(),
        };
        all.fold(&now.paths, &now.whole);
        Some(Marks {
            base: now.base,
            paths: all.paths,
            whole: all.whole,
        })
    }

    /// The lane's directories as the record knows them: every watched one
    /// (each raises an event when an entry is added, removed or renamed in
    /// it) and the ones marked whole since the record restarted (nothing in
    /// those is watched: list them from the disk). `None` when the record
    /// cannot vouch for completeness.
    pub fn directories(&self) -> Option<Directories> {
        let mut state = self.shared.lock();
        self.shared.drain(&mut state);
        if state.incomplete.is_some() {
            return None;
        }
        let watched = state
            .wds
            .iter()
            .filter(|(wd, _)| !state.moved.contains(wd))
            .map(|(_, dir)| dir.clone())
            .collect();
        Some(Directories {
            watched,
            whole: state.whole.iter().cloned().collect(),
        })
    }

    /// Why the record cannot vouch for completeness, if it cannot.
    pub fn incomplete(&self) -> Option<String> {
        let mut state = self.shared.lock();
        self.shared.drain(&mut state);
        state.incomplete.clone()
    }

    /// Marks the record incomplete (its next [`LaneWatch::changes`] is
    /// `None`): for callers that changed the lane behind its back, and for
    /// tests of the fallback.
    pub fn mark_incomplete(&self, why: &str) {
        self.shared.lock().give_up(why);
    }

    /// Restarts the record from commit `base`, which the lane now holds
    /// exactly (orch's own commit of it or reset to it has returned): drains
    /// what is queued, gives the directories marked whole their watches,
    /// drops watches that moved out of sight, clears the marks. Returns
    /// `false` when the record stays incomplete (start a new watcher).
    pub fn restart(&self, base: &CommitId) -> bool {
        let shared = &self.shared;
        let mut state = shared.lock();
        shared.drain(&mut state);
        if state.incomplete.is_some() {
            return false;
        }
        let whole = std::mem::take(&mut state.whole);
        let mut done: Vec<&Vec<u8>> = Vec::new();
        for dir in &whole {
            if done
                .iter()
                .any(|d| dir.starts_with(d) && dir.get(d.len()) == Some(&b'/'))
            {
                continue;
            }
            done.push(dir);
            let full = under(&self.root, dir);
            if std::fs::symlink_metadata(&full).is_ok_and(|m| m.is_dir()) {
                shared.watch_tree(&mut state, &self.root, dir);
            }
        }
        for wd in std::mem::take(&mut state.moved) {
            // EINVAL (the kernel already dropped the watch) changes nothing.
            let _ = inotify::remove_watch(&shared.fd, wd);
            state.wds.remove(&wd);
        }
        shared.drain(&mut state);
        if state.incomplete.is_some() {
            return false;
        }
        if let Some(mut h) = state.history.take() {
            h.fold(&state.paths, &whole);
            state.history = Some(h);
        }
        state.paths.clear();
        state.whole.clear();
        state.moved.clear();
        state.base = base.clone();
        state.exclude_stamp = state.exclude.as_deref().and_then(stamp);
        true
    }
}

/// Drops `watches` side by side. Closing an inotify descriptor that held
/// watches waits for the kernel to reap its marks (a grace period: 4–12 ms
/// here, whatever orch does); closed one after the other, the eight
/// watchers of a width-8 run kept its exit waiting ~95 ms, closed together
/// they wait about one.
pub fn drop_together(watches: Vec<Arc<LaneWatch>>) {
    if watches.len() < 2 {
        drop(watches);
        return;
    }
    std::thread::scope(|s| {
        for w in watches {
            // A thread that cannot be made drops its watcher here (the
            // closure goes with the error).
            let _ = std::thread::Builder::new()
                .name("orch-unwatch".to_owned())
                .spawn_scoped(s, move || drop(w));
        }
    });
}

impl Drop for LaneWatch {
    fn drop(&mut self) {
        // Adds 1 to the eventfd's counter: the drain thread wakes and ends.
        let _ = rustix::io::write(&self.stop, &1u64.to_ne_bytes());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The drain thread: waits for events (or the stop eventfd) and records
    /// them.
    fn run(&self, stop: &OwnedFd) {
        use rustix::event::{PollFd, PollFlags};
        loop {
            let mut fds = [
                PollFd::new(&self.fd, PollFlags::IN),
                PollFd::new(stop, PollFlags::IN),
            ];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(errno) => {
                    let err = std::io::Error::from(errno);
                    self.lock()
                        .give_up(format!("poll the inotify queue: {err}"));
                    return;
                }
            }
            if !fds[1].revents().is_empty() {
                return;
            }
            if !fds[0].revents().is_empty() {
                let mut state = self.lock();
                self.drain(&mut state);
            }
        }
    }

    /// Adds watches to `rel` (under `root`) and every directory below it.
    fn watch_tree(&self, state: &mut State, root: &Path, rel: &[u8]) {
        let mut stack = vec![rel.to_vec()];
        while let Some(dir) = stack.pop() {
            if state.incomplete.is_some() {
                return;
            }
            if state.wds.len() >= MAX_WATCHES {
                state.give_up(format!("the lane has more than {MAX_WATCHES} directories"));
                return;
            }
            let full = under(root, &dir);
            let Ok(c) = std::ffi::CString::new(full.as_os_str().as_bytes()) else {
                state.give_up("a directory path holds a NUL");
                return;
            };
            let flags = inotify::WatchFlags::from_bits_retain(MASK);
            let wd = match inotify::add_watch(&self.fd, c.as_c_str(), flags) {
                Ok(wd) => wd,
                Err(errno) => {
                    let err = std::io::Error::from(errno);
                    state.give_up(format!("watch {}: {err}", full.display()));
                    return;
                }
            };
            state.moved.remove(&wd);
            state.wds.insert(wd, dir.clone());
            let entries = match std::fs::read_dir(&full) {
                Ok(e) => e,
                Err(e) => {
                    state.give_up(format!("list {}: {e}", full.display()));
                    return;
                }
            };
            for entry in entries {
                let Ok(entry) = entry else {
                    state.give_up(format!("list {}", full.display()));
                    return;
                };
                let name = entry.file_name();
                let name = name.as_bytes();
                if name == b".gitattributes" {
                    state.give_up("the lane has a .gitattributes");
                    return;
                }
                if name == b".git" {
                    if !dir.is_empty() {
                        state.give_up("the lane holds a nested repository");
                        return;
                    }
                    continue;
                }
                // `d_type`: no stat per entry.
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(join(&dir, name));
                }
            }
        }
    }

    /// Reads every queued event (until `EAGAIN`) into `state`.
    fn drain(&self, state: &mut State) {
        // Room for many events per read (`parse` reads the records byte by
        // byte, so the buffer needs no alignment).
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match rustix::io::read(&self.fd, &mut buf) {
                Ok(n) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::AGAIN) => return,
                Err(errno) => {
                    let err = std::io::Error::from(errno);
                    state.give_up(format!("read the inotify queue: {err}"));
                    return;
                }
            };
            if n == 0 {
                return;
            }
            parse(state, &buf[..n]);
        }
    }
}

/// Records the events in `raw` (whole `inotify_event` records).
fn parse(state: &mut State, raw: &[u8]) {
    const HEAD: usize = 16;
    let mut at = 0;
    while at < raw.len() {
        let Some(head) = raw.get(at..at + HEAD) else {
            state.give_up("a truncated inotify event");
            return;
        };
        let word = |i: usize| u32::from_ne_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        let wd = word(0).cast_signed();
        let mask = word(4);
        let len = word(12) as usize;
        let Some(name) = raw.get(at + HEAD..at + HEAD + len) else {
            state.give_up("a truncated inotify event name");
            return;
        };
        at += HEAD + len;
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        event(state, wd, mask, name);
    }
}

fn event(state: &mut State, wd: i32, mask: u32, name: &[u8]) {
    if mask & libc::IN_Q_OVERFLOW != 0 {
        state.give_up("the inotify queue overflowed");
        return;
    }
    if mask & libc::IN_IGNORED != 0 {
        state.wds.remove(&wd);
        state.moved.remove(&wd);
        return;
    }
    let Some(dir) = state.wds.get(&wd).cloned() else {
        // A watch already removed: its directory is gone or moved away,
        // which its parent's event marked.
        return;
    };
    if name.is_empty() {
        if mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF) != 0 {
            if dir.is_empty() {
                state.give_up("the lane's top directory was deleted or moved");
                return;
            }
            if mask & libc::IN_MOVE_SELF != 0 {
                state.moved.insert(wd);
            }
            state.paths.insert(dir);
        }
        return;
    }
    if name == b".git" {
        if dir.is_empty() {
            return;
        }
        state.give_up("a nested repository appeared in the lane");
        return;
    }
    if name == b".gitattributes" {
        state.give_up("a .gitattributes appeared in the lane");
        return;
    }
    let path = join(&dir, name);
    if mask & libc::IN_ISDIR != 0 && mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
        state.whole.insert(path.clone());
    }
    // A write through one name of a hard-linked file changes the others
    // without an event in their directories: a new name of an existing
    // file (`link(2)` raises `IN_CREATE` too) gives up.
    if mask & (libc::IN_ISDIR | libc::IN_CREATE) == libc::IN_CREATE {
        use std::os::unix::fs::MetadataExt;
        let full = under(&state.root, &path);
        if std::fs::symlink_metadata(&full).is_ok_and(|m| m.is_file() && m.nlink() > 1) {
            state.give_up(format!("{} is a hard link", full.display()));
        }
    }
    state.paths.insert(path);
}

/// Whether `p` lies below a directory for which `is_whole` holds.
fn below(p: &[u8], is_whole: impl Fn(&[u8]) -> bool) -> bool {
    p.iter()
        .enumerate()
        .any(|(i, &b)| b == b'/' && is_whole(&p[..i]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_packed_events_and_keeps_names_without_padding() {
        let mut state = State::new(PathBuf::new(), CommitId::parse(&"0".repeat(40)).unwrap());
        state.wds.insert(1, b"".to_vec());
        state.wds.insert(2, b"src".to_vec());
        let mut raw = Vec::new();
        let mut push = |wd: i32, mask: u32, name: &[u8]| {
            let len = if name.is_empty() {
                0
            } else {
                (name.len() / 16 + 1) * 16
            };
            raw.extend_from_slice(&wd.to_ne_bytes());
            raw.extend_from_slice(&mask.to_ne_bytes());
            raw.extend_from_slice(&0u32.to_ne_bytes());
            raw.extend_from_slice(&(len as u32).to_ne_bytes());
            let mut n = name.to_vec();
            n.resize(len, 0);
            raw.extend_from_slice(&n);
        };
        push(2, libc::IN_CLOSE_WRITE, b"lib.rs");
        push(1, libc::IN_CREATE | libc::IN_ISDIR, b"new");
        push(1, libc::IN_CREATE, b".git");
        push(9, libc::IN_CREATE, b"stale");
        parse(&mut state, &raw);
        assert_eq!(state.incomplete, None);
        let paths: Vec<&[u8]> = state.paths.iter().map(Vec::as_slice).collect();
        assert_eq!(paths, [b"new".as_slice(), b"src/lib.rs"]);
        assert!(state.whole.contains(b"new".as_slice()));
        push_overflow(&mut state);
        assert!(state.incomplete.is_some());
    }

    fn push_overflow(state: &mut State) {
        event(state, -1, libc::IN_Q_OVERFLOW, b"");
    }
}
