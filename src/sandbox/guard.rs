//! The repository guard: a cheap fingerprint of what in the user's common git
//! dir a tool process must never change — `HEAD`, `config`, the refs (loose
//! and `packed-refs`, except orch's own `refs/heads/orch/`,
//! `refs/heads/orch-lanes/` and `refs/orch/`) and `hooks/` (but `*.sample`)
//! — taken before a
//! `bash` call and compared after it.
//!
//! Cost: one `lstat` per tracked file and directory; a directory is re-listed
//! and a file re-read only when its stat (inode, size, mtime, ctime) changed
//! or is too recent to trust (the "racy git" rule: a write within
//! [`RACY_WINDOW`] of the snapshot may not have moved the coarse timestamp).
//!
//! Invariant: [`RepoGuard::restore_lane_files`] only writes orch's own lane
//! files, back to the bytes (and mode) of the snapshot; nothing of the
//! user's is ever written.

use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A change whose timestamp is this close to the snapshot is re-read: kernel
/// file times come from a coarse clock (one tick, up to 10 ms).
pub const RACY_WINDOW: Duration = Duration::from_millis(50);

/// Ref prefixes that belong to orch and are not guarded.
const ORCH_REFS: &[&str] = &["refs/heads/orch/", "refs/heads/orch-lanes/", "refs/orch/"];

/// The single files tracked at the top of the common dir.
const TOP_FILES: &[&str] = &["HEAD", "config", "packed-refs"];

/// The trees tracked under the common dir.
const TREES: &[&str] = &["refs", "hooks"];

/// An error while fingerprinting or restoring.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// A tracked path could not be read or written.
    #[error("{action} {path}: {source}")]
    Io {
        /// `read`, `stat`, `list`, `restore`, `remove`.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    mode: u32,
}

impl Stat {
    fn of(m: &std::fs::Metadata) -> Self {
        Self {
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
            ctime_ns: m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128,
            mode: m.mode(),
        }
    }

    fn racy(&self, taken_ns: i128) -> bool {
        let newest = self.mtime_ns.max(self.ctime_ns);
        newest + RACY_WINDOW.as_nanos() as i128 >= taken_ns
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FileState {
    stat: Stat,
    /// Shared with the previous fingerprint when the file was not re-read,
    /// so an unchanged file costs one `lstat` and a pointer copy.
    content: Arc<[u8]>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct DirState {
    stat: Stat,
    /// (name, is a directory) of each entry.
    entries: Vec<(String, bool)>,
}

/// One fingerprint of the guarded part of a common git dir.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RepoFingerprint {
    files: BTreeMap<String, FileState>,
    dirs: BTreeMap<String, DirState>,
    taken_ns: i128,
}

impl RepoFingerprint {
    /// Takes a fingerprint of `common_dir`, reusing `prev`'s contents for
    /// files and directories whose stat did not change (and is not racy).
    fn take(
        common_dir: &Path,
        extra: &[String],
        prev: Option<&RepoFingerprint>,
    ) -> Result<Self, GuardError> {
        let taken_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(0);
        let mut fp = RepoFingerprint {
            files: BTreeMap::new(),
            dirs: BTreeMap::new(),
            taken_ns,
        };
        for rel in TOP_FILES {
            fp.visit_file(common_dir, rel, prev)?;
        }
        for rel in TREES {
            fp.visit_dir(common_dir, rel, prev)?;
        }
        for rel in extra {
            fp.visit_file(common_dir, rel, prev)?;
        }
        Ok(fp)
    }

    fn visit_file(
        &mut self,
        common: &Path,
        rel: &str,
        prev: Option<&RepoFingerprint>,
    ) -> Result<(), GuardError> {
        let path = common.join(rel);
        let Some(meta) = stat_if_present(&path)? else {
            return Ok(());
        };
        if meta.is_dir() {
            return self.visit_dir(common, rel, prev);
        }
        self.record_file(common, rel, Stat::of(&meta), prev)
    }

    /// [`visit_file`](Self::visit_file) for an entry `name` of the open
    /// directory `dir`: `fstatat` on one component instead of resolving the
    /// whole path again, which is most of the cost of an unchanged file.
    fn visit_entry(
        &mut self,
        common: &Path,
        rel: &str,
        dir: &std::fs::File,
        name: &str,
        prev: Option<&RepoFingerprint>,
    ) -> Result<(), GuardError> {
        let Ok(cname) = std::ffi::CString::new(name) else {
            return self.visit_file(common, rel, prev);
        };
        let st = match rustix::fs::statat(
            dir,
            cname.as_c_str(),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(errno) => {
                return Err(GuardError::Io {
                    action: "stat",
                    path: common.join(rel),
                    source: errno.into(),
                });
            }
        };
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            return self.visit_dir(common, rel, prev);
        }
        let stat = Stat {
            ino: st.st_ino,
            size: st.st_size as u64,
            mtime_ns: st.st_mtime as i128 * 1_000_000_000 + st.st_mtime_nsec as i128,
            ctime_ns: st.st_ctime as i128 * 1_000_000_000 + st.st_ctime_nsec as i128,
            mode: st.st_mode,
        };
        self.record_file(common, rel, stat, prev)
    }

    /// Keeps `prev`'s content for `rel` when `stat` matches and is not racy;
    /// reads the file (or symlink target) otherwise.
    fn record_file(
        &mut self,
        common: &Path,
        rel: &str,
        stat: Stat,
        prev: Option<&RepoFingerprint>,
    ) -> Result<(), GuardError> {
        if let Some(old) = prev.and_then(|p| p.files.get(rel))
            && old.stat == stat
            && !stat.racy(prev.map_or(0, |p| p.taken_ns))
        {
            self.files.insert(rel.to_owned(), old.clone());
            return Ok(());
        }
        let path = common.join(rel);
        let content = if stat.mode & libc::S_IFMT == libc::S_IFLNK {
            let target = std::fs::read_link(&path).map_err(|source| GuardError::Io {
                action: "read",
                path: path.clone(),
                source,
            })?;
            format!("symlink -> {}", target.display()).into_bytes()
        } else {
            std::fs::read(&path).map_err(|source| GuardError::Io {
                action: "read",
                path: path.clone(),
                source,
            })?
        };
        self.files.insert(
            rel.to_owned(),
            FileState {
                stat,
                content: content.into(),
            },
        );
        Ok(())
    }

    fn visit_dir(
        &mut self,
        common: &Path,
        rel: &str,
        prev: Option<&RepoFingerprint>,
    ) -> Result<(), GuardError> {
        let path = common.join(rel);
        let Some(meta) = stat_if_present(&path)? else {
            return Ok(());
        };
        if !meta.is_dir() {
            return self.visit_file(common, rel, prev);
        }
        let stat = Stat::of(&meta);
        let entries = match prev.and_then(|p| p.dirs.get(rel)) {
            Some(old) if old.stat == stat && !stat.racy(prev.map_or(0, |p| p.taken_ns)) => {
                old.entries.clone()
            }
            _ => {
                let mut entries = Vec::new();
                let rd = std::fs::read_dir(&path).map_err(|source| GuardError::Io {
                    action: "list",
                    path: path.clone(),
                    source,
                })?;
                for e in rd {
                    let e = e.map_err(|source| GuardError::Io {
                        action: "list",
                        path: path.clone(),
                        source,
                    })?;
                    let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                    entries.push((e.file_name().to_string_lossy().into_owned(), is_dir));
                }
                entries.sort();
                entries
            }
        };
        let dir_fd = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(&path)
            .ok();
        for (name, is_dir) in &entries {
            let child = format!("{rel}/{name}");
            let as_ref = if *is_dir {
                format!("{child}/")
            } else {
                child.clone()
            };
            // git never runs `*.sample` hooks; renaming one shows up as a
            // new hook, so skipping them saves a stat each and hides nothing.
            if is_orch_ref(&as_ref) || (rel == "hooks" && name.ends_with(".sample")) {
                continue;
            }
            match (&dir_fd, *is_dir) {
                (_, true) => self.visit_dir(common, &child, prev)?,
                (Some(fd), false) => self.visit_entry(common, &child, fd, name, prev)?,
                (None, false) => self.visit_file(common, &child, prev)?,
            }
        }
        self.dirs.insert(rel.to_owned(), DirState { stat, entries });
        Ok(())
    }

    /// The effective value of every guarded ref: packed, overridden by loose.
    fn refs(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        if let Some(packed) = self.files.get("packed-refs") {
            for (name, block) in parse_packed(&packed.content) {
                if !is_orch_ref(&name) {
                    let sha = block.split(' ').next().unwrap_or("").to_owned();
                    out.insert(name, sha);
                }
            }
        }
        for (rel, f) in &self.files {
            if rel.starts_with("refs/") && !is_orch_ref(rel) {
                out.insert(
                    rel.clone(),
                    String::from_utf8_lossy(&f.content).trim().to_owned(),
                );
            }
        }
        out
    }

    fn text(&self, rel: &str) -> Option<String> {
        self.files
            .get(rel)
            .map(|f| String::from_utf8_lossy(&f.content).trim_end().to_owned())
    }

    fn hooks(&self) -> BTreeMap<&str, &FileState> {
        self.files
            .iter()
            .filter_map(|(k, v)| k.strip_prefix("hooks/").map(|n| (n, v)))
            .collect()
    }

    /// Whether every tracked file has the same bytes (and mode) in both.
    fn same_files(&self, other: &RepoFingerprint) -> bool {
        self.files.len() == other.files.len()
            && self
                .files
                .iter()
                .zip(&other.files)
                .all(|((ka, a), (kb, b))| {
                    ka == kb
                        && a.stat.mode == b.stat.mode
                        && (Arc::ptr_eq(&a.content, &b.content) || a.content == b.content)
                })
    }

    /// What differs from `before` to `self`, in a stable order.
    fn changes_since(&self, before: &RepoFingerprint) -> Vec<RepoChange> {
        let mut out = Vec::new();
        if self.same_files(before) {
            return out;
        }
        let (old_head, new_head) = (before.text("HEAD"), self.text("HEAD"));
        if old_head != new_head {
            out.push(RepoChange::Head {
                from: old_head.unwrap_or_default(),
                to: new_head.unwrap_or_default(),
            });
        }
        let (old_refs, new_refs) = (before.refs(), self.refs());
        for (name, from) in &old_refs {
            match new_refs.get(name) {
                None => out.push(RepoChange::Ref {
                    name: name.clone(),
                    from: Some(from.clone()),
                    to: None,
                }),
                Some(to) if to != from => out.push(RepoChange::Ref {
                    name: name.clone(),
                    from: Some(from.clone()),
                    to: Some(to.clone()),
                }),
                Some(_) => {}
            }
        }
        for (name, to) in &new_refs {
            if !old_refs.contains_key(name) {
                out.push(RepoChange::Ref {
                    name: name.clone(),
                    from: None,
                    to: Some(to.clone()),
                });
            }
        }
        let (old_hooks, new_hooks) = (before.hooks(), self.hooks());
        for (name, old) in &old_hooks {
            match new_hooks.get(name) {
                None => out.push(RepoChange::Hook {
                    name: (*name).to_owned(),
                    what: HookChange::Removed,
                }),
                Some(new) if new.content != old.content || new.stat.mode != old.stat.mode => out
                    .push(RepoChange::Hook {
                        name: (*name).to_owned(),
                        what: HookChange::Changed,
                    }),
                Some(_) => {}
            }
        }
        for name in new_hooks.keys() {
            if !old_hooks.contains_key(name) {
                out.push(RepoChange::Hook {
                    name: (*name).to_owned(),
                    what: HookChange::Added,
                });
            }
        }
        for (rel, old) in &before.files {
            if !rel.starts_with("worktrees/") && !rel.starts_with('/') {
                continue;
            }
            let new = self.text(rel);
            let old_text = String::from_utf8_lossy(&old.content).trim_end().to_owned();
            if new.as_deref() != Some(old_text.as_str()) {
                out.push(RepoChange::LaneFile {
                    file: rel.clone(),
                    from: old_text,
                    to: new.unwrap_or_else(|| "(removed)".into()),
                });
            }
        }
        let (old_cfg, new_cfg) = (before.text("config"), self.text("config"));
        if old_cfg != new_cfg {
            out.push(RepoChange::Config {
                lines: line_diff(
                    old_cfg.as_deref().unwrap_or(""),
                    new_cfg.as_deref().unwrap_or(""),
                ),
            });
        }
        out
    }
}

/// How a hook changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookChange {
    /// A new file in `hooks/`.
    Added,
    /// Different bytes or mode.
    Changed,
    /// Gone.
    Removed,
}

/// One change to the user's repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepoChange {
    /// `HEAD` of the main worktree changed (`ref: refs/heads/x` or a sha).
    Head {
        /// Before.
        from: String,
        /// After.
        to: String,
    },
    /// A ref was created (`from` none), deleted (`to` none) or moved.
    Ref {
        /// Full name, `refs/heads/main`.
        name: String,
        /// Value before.
        from: Option<String>,
        /// Value after.
        to: Option<String>,
    },
    /// A file in `hooks/` appeared, changed or disappeared.
    Hook {
        /// File name in `hooks/`.
        name: String,
        /// How.
        what: HookChange,
    },
    /// A watched lane file changed — its admin dir's `HEAD`, `commondir`,
    /// `gitdir`, or the lane's own `.git` file: orch's own later git work in
    /// the lane would follow it (a lane HEAD pointed at `refs/heads/main`, or
    /// a `.git` file pointed at the user's `.git`, makes orch's stage commit
    /// move the user's branch).
    LaneFile {
        /// Path under the common dir (`worktrees/<lane>/HEAD`), or the
        /// absolute path of the lane's `.git` file.
        file: String,
        /// Before.
        from: String,
        /// After.
        to: String,
    },
    /// `.git/config` changed; the differing lines, `-` old and `+` new.
    Config {
        /// At most a few lines.
        lines: Vec<String>,
    },
}

impl fmt::Display for RepoChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = |s: &str| s.chars().take(12).collect::<String>();
        match self {
            Self::Head { from, to } => write!(f, "HEAD changed from `{from}` to `{to}`"),
            Self::Ref {
                name,
                from: Some(a),
                to: Some(b),
            } => write!(f, "ref {name} moved from {} to {}", short(a), short(b)),
            Self::Ref {
                name,
                from: None,
                to: Some(b),
            } => write!(f, "ref {name} created at {}", short(b)),
            Self::Ref {
                name,
                from: Some(a),
                to: None,
            } => write!(f, "ref {name} deleted (was {})", short(a)),
            Self::Ref { name, .. } => write!(f, "ref {name} changed"),
            Self::Hook { name, what } => {
                let w = match what {
                    HookChange::Added => "appeared",
                    HookChange::Changed => "changed",
                    HookChange::Removed => "was removed",
                };
                write!(f, "hook {name} {w}")
            }
            Self::LaneFile { file, from, to } => {
                write!(f, "lane file {file} changed from `{from}` to `{to}`")
            }
            Self::Config { lines } => write!(f, "config changed: {}", lines.join("; ")),
        }
    }
}

/// Guards one user repository across tool calls.
#[derive(Debug)]
pub struct RepoGuard {
    common_dir: PathBuf,
    /// Lane admin files watched besides the fixed set (relative paths).
    lane_files: Vec<String>,
    snapshot: RepoFingerprint,
}

impl RepoGuard {
    /// Takes the first fingerprint of `common_dir` (the user's `.git`).
    pub fn new(common_dir: &Path) -> Result<Self, GuardError> {
        Ok(Self {
            common_dir: common_dir.to_path_buf(),
            lane_files: Vec::new(),
            snapshot: RepoFingerprint::take(common_dir, &[], None)?,
        })
    }

    /// Also watches the lane's `commondir`, `gitdir` and `config.worktree` in its admin dir and
    /// the lane's `.git` file (writable under the sandbox, as git needs
    /// those directories): a change there would redirect orch's own git
    /// work in the lane to another repository. The lane's `HEAD`, index and
    /// reflog are the agent's (its own `git commit` or `git checkout` in the
    /// lane): orch never follows the lane's `HEAD` (the stage commit names
    /// its parent and detaches the lane at the commit).
    pub fn watch_lane(&mut self, git: &super::policy::LaneGit) -> Result<(), GuardError> {
        let common = self
            .common_dir
            .canonicalize()
            .unwrap_or_else(|_| self.common_dir.clone());
        if let Ok(rel) = git.admin_dir.strip_prefix(&common) {
            // `config.worktree` too: with `extensions.worktreeConfig`, git
            // reads it — orch's own git in the lane (outside the sandbox)
            // included, so a filter driver written there would run as orch.
            for file in ["commondir", "gitdir", "config.worktree"] {
                self.lane_files.push(format!("{}/{file}", rel.display()));
            }
        }
        // The lane's own `.git` file (named by the admin dir's `gitdir`):
        // pointed at the user's `.git`, orch's stage commit in the lane
        // would land on the user's branch. An absolute path joins as itself.
        if let Ok(dot_git) = std::fs::read_to_string(git.admin_dir.join("gitdir")) {
            let dot_git = dot_git.trim_end();
            if Path::new(dot_git).is_absolute() {
                self.lane_files.push(dot_git.to_owned());
            }
        }
        self.before_call()
    }

    /// Re-takes the snapshot before a call, so changes orch (or the user)
    /// made between calls are not blamed on the next call.
    pub fn before_call(&mut self) -> Result<(), GuardError> {
        self.snapshot =
            RepoFingerprint::take(&self.common_dir, &self.lane_files, Some(&self.snapshot))?;
        Ok(())
    }

    /// What changed since [`before_call`](Self::before_call); empty when
    /// nothing guarded changed. The snapshot is kept for
    /// [`restore_lane_files`](Self::restore_lane_files).
    pub fn after_call(&self) -> Result<Vec<RepoChange>, GuardError> {
        let now = RepoFingerprint::take(&self.common_dir, &self.lane_files, Some(&self.snapshot))?;
        Ok(now.changes_since(&self.snapshot))
    }

    /// Puts orch's own lane files ([`RepoChange::LaneFile`]) back as they
    /// were in the snapshot (bytes and mode; whatever took a file's place,
    /// a directory included, goes), and removes lane files that appeared.
    /// Nothing of the user's (refs, `HEAD`, config, hooks) is ever written:
    /// a change there is reported, never undone.
    pub fn restore_lane_files(&self) -> Result<(), GuardError> {
        let now = RepoFingerprint::take(&self.common_dir, &self.lane_files, Some(&self.snapshot))?;
        for (rel, old) in self
            .snapshot
            .files
            .iter()
            .filter(|(rel, _)| is_lane_file(rel))
        {
            let same = now
                .files
                .get(rel)
                .is_some_and(|f| f.content == old.content && f.stat.mode == old.stat.mode);
            if !same {
                write_back(&self.common_dir.join(rel), &old.content, old.stat.mode)?;
            }
        }
        for rel in now.files.keys().filter(|rel| is_lane_file(rel)) {
            if !self.snapshot.files.contains_key(rel) {
                let path = self.common_dir.join(rel);
                std::fs::remove_file(&path).map_err(|source| GuardError::Io {
                    action: "remove",
                    path,
                    source,
                })?;
            }
        }
        Ok(())
    }
}

/// Whether a tracked path is one of orch's lane files (its admin dir's, or
/// the lane's `.git` file, kept by absolute path), not the user's.
fn is_lane_file(rel: &str) -> bool {
    rel.starts_with("worktrees/") || rel.starts_with('/')
}

fn is_orch_ref(rel: &str) -> bool {
    ORCH_REFS.iter().any(|p| rel.starts_with(p))
}

/// `packed-refs` as (ref name, its line plus any `^peeled` line), in order.
fn parse_packed(content: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(content);
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if line.starts_with('^') {
            if let Some(last) = out.last_mut() {
                last.1.push('\n');
                last.1.push_str(line);
            }
            continue;
        }
        if let Some((_, name)) = line.split_once(' ') {
            out.push((name.to_owned(), line.to_owned()));
        }
    }
    out
}

/// Writes `content` to `path` through a temp file and rename, with `mode`.
fn write_back(path: &Path, content: &[u8], mode: u32) -> Result<(), GuardError> {
    let io = |action, source| GuardError::Io {
        action,
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io("restore", e))?;
    }
    // A directory where a file was (e.g. a ref turned into a dir) goes first.
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        std::fs::remove_dir_all(path).map_err(|e| io("remove", e))?;
    }
    let tmp = path.with_extension("orch-restore");
    std::fs::write(&tmp, content).map_err(|e| io("restore", e))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode & 0o7777))
        .map_err(|e| io("restore", e))?;
    std::fs::rename(&tmp, path).map_err(|e| io("restore", e))
}

/// Lines only in `old` (`- `) and only in `new` (`+ `), at most 6.
fn line_diff(old: &str, new: &str) -> Vec<String> {
    let gone = old
        .lines()
        .filter(|l| !new.lines().any(|n| n == *l))
        .map(|l| format!("- {}", l.trim()));
    let came = new
        .lines()
        .filter(|l| !old.lines().any(|o| o == *l))
        .map(|l| format!("+ {}", l.trim()));
    gone.chain(came).take(6).collect()
}

/// `lstat` of `path`; `None` when it does not exist (nothing to fingerprint).
fn stat_if_present(path: &Path) -> Result<Option<std::fs::Metadata>, GuardError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(GuardError::Io {
            action: "stat",
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_diff_names_the_new_line() {
        let d = line_diff(
            "[core]\n\tbare = false\n",
            "[core]\n\tbare = false\n\thooksPath = x\n",
        );
        assert_eq!(d, ["+ hooksPath = x"]);
    }

    #[test]
    fn orch_refs_are_not_guarded() {
        assert!(is_orch_ref("refs/heads/orch/run/stage"));
        assert!(is_orch_ref("refs/heads/orch-lanes/"));
        assert!(!is_orch_ref("refs/heads/orchard"));
        assert!(!is_orch_ref("refs/heads/main"));
    }
}
