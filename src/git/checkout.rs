//! The first checkout of a lane without filters: files written straight from
//! the object database and the index streamed to disk as it goes.
//!
//! libgit2's `checkout_tree` on a fresh worktree diffs the target against the
//! baseline and the (empty) working directory, looks every path up from the
//! worktree's root (an `open`/`fstatat` per file through the whole
//! `<repo>/.git/orch/pool/lane-N/…` prefix) and builds the index in memory
//! (one allocation per entry: ~15 MB at 100,000 files). Here one depth-first
//! walk of the tree in index order creates each directory with `mkdirat` and
//! each file with `openat` relative to its parent's descriptor, takes the
//! stat data for the index from `fstat` of the file just written, and
//! appends its index entry to `index.lock` through a small buffer; memory
//! does not grow with the tree.
//!
//! Only for the safe case: no attribute file and no converting configuration
//! (the caller checks the configuration; a `.gitattributes` met in the tree
//! gives up), `core.symlinks` not false, and path names that need none of
//! git's protections (`.git` look-alikes, NTFS/HFS tricks, symlinked
//! `.gitmodules`). Anything else answers [`Plain::Fallback`] after removing
//! what was written, and the caller runs libgit2's checkout, which knows all
//! of git's rules.

use std::ffi::CString;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use git2::{ObjectType, Oid, Repository};

use super::{GitError, git_err, io_err};

/// What [`checkout_plain`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plain {
    /// The files are written and the worktree's index holds the tree.
    Done,
    /// The tree needs libgit2's checkout (a `.gitattributes`, a name git
    /// protects against, an unsorted tree); nothing this call wrote is left.
    Fallback(&'static str),
}

/// Why the walk stopped early.
enum Stop {
    Fallback(&'static str),
    Err(GitError),
}

impl From<GitError> for Stop {
    fn from(e: GitError) -> Self {
        Stop::Err(e)
    }
}

/// Whether a plain checkout can be byte-identical to git's under `repo`'s
/// configuration, as far as this module's part goes (the caller has checked
/// the attribute and filter configuration): symlinks are checked out as
/// symlinks.
pub(crate) fn config_allows_plain(repo: &Repository) -> Result<bool, GitError> {
    let config = repo
        .config()
        .map_err(git_err("read the repository configuration"))?;
    Ok(config.get_bool("core.symlinks").unwrap_or(true))
}

/// Writes `tree`'s files into the fresh worktree `wt` (whose working
/// directory holds only its `.git` file) and its index, as `git worktree add`
/// leaves them without filters. On an error, files written so far stay for
/// the caller's undo, which removes the whole worktree.
pub(crate) fn checkout_plain(wt: &Repository, tree: Oid) -> Result<Plain, GitError> {
    let workdir = wt.workdir().ok_or_else(|| GitError::NotLinkedWorktree {
        path: wt.path().to_path_buf(),
    })?;
    let index_path = wt.path().join("index");
    let lock_path = wt.path().join("index.lock");
    let root = open_dir(libc::AT_FDCWD, &cstr(workdir.as_os_str().as_bytes())?)
        .map_err(io_err("open the worktree directory", workdir))?;
    let lock = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&lock_path)
        .map_err(io_err("create the index lock", &lock_path))?;
    let result = (|| {
        let mut walk = Walk {
            repo: wt,
            odb: wt.odb().map_err(git_err("open the object database"))?,
            out: BufWriter::with_capacity(64 << 10, &lock),
            entries: 0,
            path: Vec::new(),
            last: Vec::new(),
            cache: Vec::new(),
            cache_ok: true,
        };
        walk.out
            .write_all(&[0; 12])
            .map_err(io_err("write the index", &lock_path))?;
        let tree = wt
            .find_tree(tree)
            .map_err(git_err(format!("read tree {tree}")))?;
        match walk.subtree(root.as_raw_fd(), Vec::new(), &tree) {
            Ok(()) => {}
            Err(Stop::Fallback(why)) => return Ok(Plain::Fallback(why)),
            Err(Stop::Err(e)) => return Err(e),
        }
        let entries = walk.entries;
        walk.write_cache_tree()
            .map_err(io_err("write the index", &lock_path))?;
        walk.out
            .flush()
            .map_err(io_err("write the index", &lock_path))?;
        drop(walk);
        super::index_file::finish_index(&lock, 2, entries)
            .map_err(io_err("write the index", &lock_path))?;
        Ok(Plain::Done)
    })();
    drop(lock);
    match result {
        Ok(Plain::Done) => {
            std::fs::rename(&lock_path, &index_path)
                .map_err(io_err("replace the index", &index_path))?;
            Ok(Plain::Done)
        }
        Ok(fallback) => {
            let _ = std::fs::remove_file(&lock_path);
            clear_workdir(workdir)?;
            Ok(fallback)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&lock_path);
            Err(e)
        }
    }
}

/// What [`move_plain`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Move {
    /// The files of the difference are written and the index holds them:
    /// these paths (sorted) changed.
    Done(Vec<Vec<u8>>),
    /// The difference needs libgit2's checkout (a `.gitattributes`, a
    /// submodule, a name git protects against); nothing was written.
    Fallback(&'static str),
}

/// Moves the files of the worktree `wt`, known to be exactly `old`'s tree
/// with nothing else in it (a stamped pooled lane), to `new`'s tree by
/// writing only what differs: vanished and replaced files are deleted
/// (and directories left empty), new and changed ones written from the
/// object database, the index entries of those paths left to the lane's
/// pending record (written first, so a kill midway leaves a record the next
/// reader applies; applying it patches the index in place, see
/// [`super::index_file`]), which whoever reads the index first applies. `HEAD`
/// is the caller's. On an error the worktree is half moved: the caller makes
/// the lane afresh.
pub(crate) fn move_plain(
    wt: &Repository,
    old: &git2::Tree<'_>,
    new: &git2::Tree<'_>,
) -> Result<Move, GitError> {
    use std::os::unix::fs::OpenOptionsExt;
    let workdir = wt.workdir().ok_or_else(|| GitError::NotLinkedWorktree {
        path: wt.path().to_path_buf(),
    })?;
    let (mut olds, mut news) = (Vec::new(), Vec::new());
    super::diff::changed_entries(wt, Some(old), Some(new), b"", &mut olds, &mut news)
        .map_err(git_err(format!("diff trees {} and {}", old.id(), new.id())))?;
    for (path, _, mode) in olds.iter().chain(&news) {
        if path.as_slice() == b".gitattributes" || path.ends_with(b"/.gitattributes") {
            return Ok(Move::Fallback("the difference has a .gitattributes"));
        }
        if *mode == 0o160000 {
            return Ok(Move::Fallback("a submodule changed"));
        }
        let mut parts = path.split(|&b| b == b'/').peekable();
        while let Some(name) = parts.next() {
            let link = *mode == 0o120000 && parts.peek().is_none();
            if let Some(why) = unsafe_name(name, link) {
                return Ok(Move::Fallback(why));
            }
        }
    }
    let mut changed: Vec<Vec<u8>> = olds.iter().chain(&news).map(|s| s.0.clone()).collect();
    changed.sort_unstable();
    changed.dedup();
    super::pending::record_pending(
        wt,
        olds.iter()
            .map(|s| (s.0.as_slice(), false))
            .chain(news.iter().map(|s| (s.0.as_slice(), true))),
    )?;
    // Deepest first, so directories empty out before they are removed.
    olds.sort_unstable_by(|a, b| b.0.cmp(&a.0));
    for (path, _, _) in &olds {
        let full = workdir.join(workdir_path(path));
        match std::fs::remove_file(&full) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io_err("remove", &full)(e));
            }
            _ => {}
        }
        let mut dir = full.parent();
        while let Some(d) = dir.filter(|d| *d != workdir) {
            if std::fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
    }
    let odb = wt.odb().map_err(git_err("open the object database"))?;
    news.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    for (path, id, mode) in &news {
        let full = workdir.join(workdir_path(path));
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).map_err(io_err("create the directory", parent))?;
        }
        let blob = odb.read(*id).map_err(git_err(format!("read blob {id}")))?;
        if *mode == 0o120000 {
            let target = std::ffi::OsStr::from_bytes(blob.data());
            std::os::unix::fs::symlink(target, &full)
                .map_err(io_err("create the symlink", &full))?;
        } else {
            std::fs::File::options()
                .write(true)
                .create_new(true)
                .mode(if mode & 0o100 != 0 { 0o777 } else { 0o666 })
                .open(&full)
                .and_then(|mut f| f.write_all(blob.data()))
                .map_err(io_err("write the file", &full))?;
        }
    }
    Ok(Move::Done(changed))
}

/// Removes everything in `workdir` but its `.git` file.
fn clear_workdir(workdir: &Path) -> Result<(), GitError> {
    let entries = std::fs::read_dir(workdir).map_err(io_err("list the worktree", workdir))?;
    for entry in entries {
        let entry = entry.map_err(io_err("list the worktree", workdir))?;
        if entry.file_name() == ".git" {
            continue;
        }
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        }
        .map_err(io_err("remove the partial checkout", &path))?;
    }
    Ok(())
}

/// The state of one checkout walk.
struct Walk<'r, 'f> {
    repo: &'r Repository,
    odb: git2::Odb<'r>,
    out: BufWriter<&'f File>,
    entries: u32,
    /// The path of the directory being walked, `/`-terminated (empty at the
    /// root).
    path: Vec<u8>,
    /// The previous index entry's path, to prove the order.
    last: Vec<u8>,
    /// The cache-tree (`TREE` extension) in pre-order: every tree's id and
    /// how many entries and subtrees it covers. One record per directory.
    /// Without it the first commit in the lane re-hashes every tree (0.45 s
    /// for `git write-tree` at 100,000 files).
    cache: Vec<CacheNode>,
    /// False once an empty subtree was met: git builds no tree for it, so
    /// the ids above it would not be what git computes from the index.
    cache_ok: bool,
}

/// One tree of the `TREE` extension.
struct CacheNode {
    name: Vec<u8>,
    id: Oid,
    entries: u32,
    subtrees: u32,
}

impl Walk<'_, '_> {
    /// Checks out `tree`, named `name` in its parent, into the directory
    /// `dir`, and records it for the cache-tree.
    fn subtree(&mut self, dir: RawFd, name: Vec<u8>, tree: &git2::Tree<'_>) -> Result<(), Stop> {
        let node = self.cache.len();
        self.cache.push(CacheNode {
            name,
            id: tree.id(),
            entries: 0,
            subtrees: 0,
        });
        let before = self.entries;
        let subtrees = self.tree(dir, tree)?;
        let n = &mut self.cache[node];
        n.entries = self.entries - before;
        n.subtrees = subtrees;
        Ok(())
    }

    /// Appends the `TREE` extension (when [`Walk::cache_ok`]): per tree in
    /// pre-order its name, NUL, entry count, space, subtree count, newline
    /// and id.
    fn write_cache_tree(&mut self) -> std::io::Result<()> {
        if !self.cache_ok {
            return Ok(());
        }
        let mut data = Vec::new();
        for n in &self.cache {
            data.extend_from_slice(&n.name);
            data.push(0);
            data.extend_from_slice(format!("{} {}\n", n.entries, n.subtrees).as_bytes());
            data.extend_from_slice(n.id.as_bytes());
        }
        let len = u32::try_from(data.len()).map_err(|_| std::io::ErrorKind::InvalidData)?;
        self.out.write_all(b"TREE")?;
        self.out.write_all(&len.to_be_bytes())?;
        self.out.write_all(&data)
    }

    /// Checks out the entries of `tree` into the directory `dir`; how many
    /// subtrees it has (that hold something).
    fn tree(&mut self, dir: RawFd, tree: &git2::Tree<'_>) -> Result<u32, Stop> {
        let mut subtrees = 0;
        for entry in tree.iter() {
            let name = entry.name_bytes();
            let mode = entry.filemode();
            let kind = entry.kind();
            let link = mode == 0o120000;
            if let Some(why) = unsafe_name(name, link) {
                return Err(Stop::Fallback(why));
            }
            if name == b".gitattributes" {
                return Err(Stop::Fallback("the tree has a .gitattributes"));
            }
            let c_name = cstr(name)?;
            let len = self.path.len();
            self.path.extend_from_slice(name);
            let at = |s: &Self| workdir_path(&s.path);
            match kind {
                Some(ObjectType::Tree) => {
                    self.path.push(b'/');
                    let id = entry.id();
                    let sub = self
                        .repo
                        .find_tree(id)
                        .map_err(git_err(format!("read tree {id}")))?;
                    // git checks out nothing for an empty tree (it has no
                    // index entry), so neither does this.
                    if sub.is_empty() {
                        self.cache_ok = false;
                    } else {
                        mkdir(dir, &c_name).map_err(io_err("create the directory", &at(self)))?;
                        let fd = open_dir(dir, &c_name)
                            .map_err(io_err("open the directory", &at(self)))?;
                        self.subtree(fd.as_raw_fd(), name.to_vec(), &sub)?;
                        subtrees += 1;
                    }
                }
                Some(ObjectType::Blob) if link => {
                    let blob = self.read_blob(entry.id())?;
                    let st = symlink(blob.data(), dir, &c_name)
                        .map_err(io_err("create the symlink", &at(self)))?;
                    drop(blob);
                    self.entry(&st, 0o120000, entry.id())?;
                }
                Some(ObjectType::Blob) if mode & 0o170000 == 0o100000 => {
                    let exec = mode & 0o100 != 0;
                    let blob = self.read_blob(entry.id())?;
                    let st = write_file(dir, &c_name, exec, blob.data())
                        .map_err(io_err("write the file", &at(self)))?;
                    drop(blob);
                    self.entry(&st, if exec { 0o100755 } else { 0o100644 }, entry.id())?;
                }
                Some(ObjectType::Commit) if mode == 0o160000 => {
                    // A submodule: an empty directory, as git leaves it
                    // without `--recurse-submodules`.
                    mkdir(dir, &c_name).map_err(io_err("create the directory", &at(self)))?;
                    let st = stat_at(dir, &c_name).map_err(io_err("inspect", &at(self)))?;
                    self.entry(&st, 0o160000, entry.id())?;
                }
                _ => return Err(Stop::Fallback("the tree has an entry of an unusual mode")),
            }
            self.path.truncate(len);
        }
        Ok(subtrees)
    }

    /// Blob `id` straight from the object database (libgit2 caches no
    /// blobs, so this memory is freed when the object drops).
    fn read_blob(&self, id: Oid) -> Result<git2::OdbObject<'_>, GitError> {
        self.odb
            .read(id)
            .map_err(git_err(format!("read blob {id}")))
    }

    /// Appends the index entry of the path being walked (`self.path`).
    fn entry(&mut self, st: &libc::stat, mode: u32, id: Oid) -> Result<(), Stop> {
        let path = &self.path;
        // Index order is bytewise order of full paths; the walk of sorted
        // trees (directories compared as `name/`) yields exactly it, so a
        // tree that breaks it is malformed.
        if self.entries > 0 && path.as_slice() <= self.last.as_slice() {
            return Err(Stop::Fallback("the tree is not sorted as git sorts it"));
        }
        self.last.clear();
        self.last.extend_from_slice(path);
        let e = super::index_file::DiskEntry::from_stat(st, mode, id);
        super::index_file::write_entry(&mut self.out, &e, path)
            .map_err(io_err("write the index", Path::new("index.lock")))?;
        self.entries = self
            .entries
            .checked_add(1)
            .ok_or(Stop::Fallback("the tree has too many entries"))?;
        Ok(())
    }
}

/// Why git (or libgit2, whose checkout validates every path) might refuse or
/// treat specially a tree entry named `name`, if it might: `.git` in any
/// disguise (case, trailing dots or spaces, NTFS short names, HFS ignorable
/// code points), path separators and NTFS stream syntax, and symlinks named
/// like git's own files. Over-cautious on purpose: such names take
/// libgit2's path.
fn unsafe_name(name: &[u8], link: bool) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    let odd = name.is_empty()
        || name == b"."
        || name == b".."
        || name.iter().any(|&b| matches!(b, b'/' | b'\\' | b':' | 0))
        || name.ends_with(b".")
        || name.ends_with(b" ")
        || lower == b".git"
        || lower.starts_with(b"git~")
        || (!name.is_ascii() && {
            // HFS ignores some code points: `.g\u{200c}it` is `.git` there.
            let ascii: Vec<u8> = lower.iter().copied().filter(u8::is_ascii).collect();
            ascii.windows(3).any(|w| w == b"git")
        })
        || (link && (lower.starts_with(b".git") || lower == b".mailmap" || name.contains(&b'~')));
    odd.then_some("the tree has a name git protects against")
}

fn cstr(bytes: &[u8]) -> Result<CString, GitError> {
    CString::new(bytes).map_err(|_| GitError::Io {
        op: "use a path with a NUL byte:",
        path: workdir_path(bytes),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })
}

/// A `/`-separated path of the tree as a native relative path.
fn workdir_path(bytes: &[u8]) -> std::path::PathBuf {
    std::path::PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

/// Retries `f` while it fails with `EINTR`; other failures are the OS error.
fn retry(mut f: impl FnMut() -> libc::c_int) -> std::io::Result<libc::c_int> {
    loop {
        let r = f();
        if r >= 0 {
            return Ok(r);
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

fn open_dir(dir: RawFd, name: &CString) -> std::io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    let fd = retry(|| unsafe { libc::openat(dir, name.as_ptr(), flags) })?;
    // SAFETY: `openat` just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn mkdir(dir: RawFd, name: &CString) -> std::io::Result<()> {
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    retry(|| unsafe { libc::mkdirat(dir, name.as_ptr(), 0o777) }).map(drop)
}

fn stat_at(dir: RawFd, name: &CString) -> std::io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated and `st` is writable, both outlive the call.
    retry(|| unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

/// Creates symlink `name` in `dir` pointing at `target`; its `lstat`.
fn symlink(target: &[u8], dir: RawFd, name: &CString) -> std::io::Result<libc::stat> {
    let target = CString::new(target)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "NUL in the target"))?;
    // SAFETY: both strings are NUL-terminated and outlive the call.
    retry(|| unsafe { libc::symlinkat(target.as_ptr(), dir, name.as_ptr()) })?;
    stat_at(dir, name)
}

/// Creates file `name` in `dir` (mode 0666 or 0777 less the umask, as git)
/// holding `data`; its `fstat` after the write.
fn write_file(dir: RawFd, name: &CString, exec: bool, data: &[u8]) -> std::io::Result<libc::stat> {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let mode: libc::c_uint = if exec { 0o777 } else { 0o666 };
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    let fd = retry(|| unsafe { libc::openat(dir, name.as_ptr(), flags, mode) })?;
    // SAFETY: `openat` just returned this descriptor; nothing else owns it.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(data)?;
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `file` is open and `st` is writable for the call.
    retry(|| unsafe { libc::fstat(file.as_raw_fd(), &mut st) })?;
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::unsafe_name;

    #[test]
    fn names_git_protects_against_take_libgit2s_path() {
        for name in [
            &b".git"[..],
            b".GIT",
            b".Git.",
            b".git ",
            b"GIT~1",
            b"a\\b",
            b"a:b",
            b"..",
            b".",
            b"",
            ".g\u{200c}it".as_bytes(),
        ] {
            assert!(unsafe_name(name, false).is_some(), "{name:?}");
        }
        for name in [&b".gitmodules"[..], b".gitignore", b".mailmap", b"a~b"] {
            assert!(unsafe_name(name, true).is_some(), "link {name:?}");
        }
        for name in [
            &b".gitignore"[..],
            b".github",
            b".gitmodules",
            b"a.txt",
            b"x~",
            "café".as_bytes(),
            "日本語.txt".as_bytes(),
        ] {
            assert!(unsafe_name(name, false).is_none(), "{name:?}");
        }
    }
}
