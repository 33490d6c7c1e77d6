//! A lane's index file patched in one streamed pass: the entries of the
//! changed paths are replaced, added or dropped while everything else is
//! copied through byte for byte, so memory does not grow with the index and
//! nothing is parsed that did not change. libgit2 instead reads the whole
//! index into one allocation per entry, re-verifies it with its
//! collision-detecting SHA-1 and writes it all back: at 100,000 files
//! ~10 MB of heap and ~100–150 ms for a one-path change.
//!
//! Only the plain case is handled here: index version 2 or 3, no conflict
//! stages, no index extension git requires to understand (`link`, `sdir`).
//! The cache-tree (`TREE`) survives with the trees above every changed path
//! invalidated, as git does; the other optional extensions (untracked cache,
//! fsmonitor, resolve-undo, end-of-index offsets) are dropped, which git
//! allows (they are caches). Anything else answers
//! [`Patched::Fallback`] with the index untouched, and the caller goes
//! through libgit2 — as does an index with a `.gitattributes` (the caller
//! hashed the files without filters).

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use git2::Oid;
use sha1::Digest as _;

/// The index entry of one path as it is on disk now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DiskEntry {
    /// ctime s, ctime ns, mtime s, mtime ns, dev, ino, mode, uid, gid,
    /// size: the on-disk fields, truncated to 32 bits as git does.
    pub fields: [u32; 10],
    pub id: Oid,
}

impl DiskEntry {
    /// The entry of a file whose `lstat` is `st`, holding blob `id` with
    /// git `mode` (0o100644, 0o100755, 0o120000 or 0o160000).
    pub(crate) fn from_stat(st: &libc::stat, mode: u32, id: Oid) -> DiskEntry {
        DiskEntry {
            fields: [
                st.st_ctime as u32,
                st.st_ctime_nsec as u32,
                st.st_mtime as u32,
                st.st_mtime_nsec as u32,
                st.st_dev as u32,
                st.st_ino as u32,
                mode,
                st.st_uid,
                st.st_gid,
                st.st_size as u32,
            ],
            id,
        }
    }

    /// [`DiskEntry::from_stat`] of std's metadata.
    pub(crate) fn from_metadata(m: &std::fs::Metadata, mode: u32, id: Oid) -> DiskEntry {
        use std::os::unix::fs::MetadataExt;
        DiskEntry {
            fields: [
                m.ctime() as u32,
                m.ctime_nsec() as u32,
                m.mtime() as u32,
                m.mtime_nsec() as u32,
                m.dev() as u32,
                m.ino() as u32,
                mode,
                m.uid(),
                m.gid(),
                m.size() as u32,
            ],
            id,
        }
    }
}

/// Writes the on-disk (version 2) form of an index entry for `path`: 62
/// bytes, the path, then 1 to 8 NULs to a multiple of 8.
pub(crate) fn write_entry(
    out: &mut (impl Write + ?Sized),
    e: &DiskEntry,
    path: &[u8],
) -> std::io::Result<()> {
    let mut raw = [0u8; 62];
    for (i, f) in e.fields.iter().enumerate() {
        raw[i * 4..i * 4 + 4].copy_from_slice(&f.to_be_bytes());
    }
    raw[40..60].copy_from_slice(e.id.as_bytes());
    let name_len = u16::try_from(path.len()).unwrap_or(u16::MAX).min(0xFFF);
    raw[60..62].copy_from_slice(&name_len.to_be_bytes());
    let pad = 8 - (62 + path.len()) % 8;
    out.write_all(&raw)?;
    out.write_all(path)?;
    out.write_all(&[0u8; 8][..pad])
}

/// Puts the header (`DIRC`, `version`, `entries`) in front of what `file`
/// holds after it and appends the SHA-1 of it all. The file is read back
/// (from the page cache) rather than hashed while written, because the
/// header, which the hash starts with, needs the count.
pub(crate) fn finish_index(mut file: &File, version: u32, entries: u32) -> std::io::Result<()> {
    let mut header = [0u8; 12];
    header[..4].copy_from_slice(b"DIRC");
    header[4..8].copy_from_slice(&version.to_be_bytes());
    header[8..].copy_from_slice(&entries.to_be_bytes());
    file.seek(SeekFrom::Start(0))?;
    file.write_all(&header)?;
    file.seek(SeekFrom::Start(0))?;
    let mut sha = sha1::Sha1::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        sha.update(&buf[..n]);
    }
    file.write_all(&sha.finalize())?;
    Ok(())
}

/// What [`patch_index`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Patched {
    /// The index holds the changes; it has this many entries.
    Done(u32),
    /// The index needs libgit2 (the reason); it was not touched.
    Fallback(&'static str),
}

/// Why the pass stopped.
enum Stop {
    Fallback(&'static str),
    Io(std::io::Error),
}

impl From<std::io::Error> for Stop {
    fn from(e: std::io::Error) -> Self {
        Stop::Io(e)
    }
}

/// Applies `changes` (sorted by path bytes, each path once; `None`: the
/// path has no entry any more) to the index file `index` of a worktree whose
/// git directory holds it, through `index.lock` and a rename, as git
/// writes an index. An existing lock is an error (someone else is writing).
pub(crate) fn patch_index(
    index: &Path,
    changes: &[(Vec<u8>, Option<DiskEntry>)],
) -> std::io::Result<Patched> {
    if changes.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Ok(Patched::Fallback("the changes are not sorted"));
    }
    let input = match File::open(index) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Patched::Fallback("the worktree has no index"));
        }
        Err(e) => return Err(e),
    };
    let size = input.metadata()?.len();
    let lock_path = index.with_file_name("index.lock");
    let lock = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&lock_path)?;
    let result = (|| {
        let mut reader = Hashed::new(input, size)?;
        let mut out = BufWriter::with_capacity(64 << 10, &lock);
        let (version, entries) = merge(&mut reader, &mut out, changes)?;
        out.flush()?;
        drop(out);
        finish_index(&lock, version, entries)?;
        Ok(entries)
    })();
    drop(lock);
    match result {
        Ok(entries) => {
            std::fs::rename(&lock_path, index)?;
            Ok(Patched::Done(entries))
        }
        Err(stop) => {
            let _ = std::fs::remove_file(&lock_path);
            match stop {
                Stop::Fallback(why) => Ok(Patched::Fallback(why)),
                Stop::Io(e) => Err(e),
            }
        }
    }
}

/// The index being read, through a window over a large buffer: every byte
/// but the trailing checksum goes through the SHA-1 as it is read, in bulk,
/// and [`Hashed::verify`] compares the sum with the trailer. Entries are
/// looked at in place ([`Hashed::peek`]), never copied out.
struct Hashed {
    file: File,
    buf: Vec<u8>,
    /// `buf[start..end]` is read and not yet consumed.
    start: usize,
    end: usize,
    sha: sha1::Sha1,
    /// Bytes before the trailer not yet hashed / not yet consumed.
    unhashed: u64,
    left: u64,
}

impl Hashed {
    fn new(file: File, size: u64) -> Result<Hashed, Stop> {
        if size < 12 + 20 {
            return Err(Stop::Fallback("the index is truncated"));
        }
        Ok(Hashed {
            file,
            buf: vec![0; 256 << 10],
            start: 0,
            end: 0,
            sha: sha1::Sha1::new(),
            unhashed: size - 20,
            left: size - 20,
        })
    }

    /// The next `n` bytes (before the trailer), not consumed.
    fn peek(&mut self, n: usize) -> Result<&[u8], Stop> {
        if n as u64 > self.left {
            return Err(Stop::Fallback("the index is truncated"));
        }
        while self.end - self.start < n {
            self.fill(n)?;
        }
        Ok(&self.buf[self.start..self.start + n])
    }

    /// Reads more, keeping room for `n` bytes from `start`.
    fn fill(&mut self, n: usize) -> Result<(), Stop> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() < n {
            self.buf.resize(n.next_power_of_two(), 0);
        }
        let got = self.file.read(&mut self.buf[self.end..])?;
        if got == 0 {
            return Err(Stop::Fallback("the index is truncated"));
        }
        let hashed = (got as u64).min(self.unhashed) as usize;
        self.sha.update(&self.buf[self.end..self.end + hashed]);
        self.unhashed -= hashed as u64;
        self.end += got;
        Ok(())
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        self.left -= n as u64;
    }

    /// `n` bytes, consumed (copied: headers and extensions).
    fn read(&mut self, n: usize) -> Result<Vec<u8>, Stop> {
        let bytes = self.peek(n)?.to_vec();
        self.consume(n);
        Ok(bytes)
    }

    fn verify(&mut self) -> Result<(), Stop> {
        let mut trailer = Vec::with_capacity(20);
        trailer.extend_from_slice(&self.buf[self.start..self.end]);
        self.file.read_to_end(&mut trailer)?;
        if self.unhashed != 0 || self.sha.clone().finalize()[..] != trailer[..] {
            return Err(Stop::Fallback("the index checksum does not match"));
        }
        Ok(())
    }
}

/// Proves the entries written are in git's order with no path both a file
/// and a directory: every path kept on `stack` is a byte prefix of the
/// last one, so a later path that extends one of them by `/` is a conflict.
#[derive(Default)]
struct Order {
    last: Vec<u8>,
    /// Lengths of prefixes of `last` that are earlier entries.
    stack: Vec<usize>,
}

impl Order {
    fn next(&mut self, path: &[u8]) -> Result<(), Stop> {
        if path == b".gitattributes" || path.ends_with(b"/.gitattributes") {
            // Its content hashes through filters: libgit2 knows them.
            return Err(Stop::Fallback("the index has a .gitattributes"));
        }
        if !self.last.is_empty() && path <= self.last.as_slice() {
            return Err(Stop::Fallback("the index is not sorted"));
        }
        while let Some(&len) = self.stack.last() {
            if path.len() > len && path[..len] == self.last[..len] {
                if path[len] == b'/' {
                    return Err(Stop::Fallback("a path is both a file and a directory"));
                }
                break;
            }
            self.stack.pop();
        }
        self.last.clear();
        self.last.extend_from_slice(path);
        self.stack.push(path.len());
        Ok(())
    }
}

/// Copies the index from `r` to `out` (after a 12-byte space for the
/// header) with `changes` merged in; its version and entry count.
fn merge(
    r: &mut Hashed,
    out: &mut impl Write,
    changes: &[(Vec<u8>, Option<DiskEntry>)],
) -> Result<(u32, u32), Stop> {
    let header = r.read(12)?;
    let version = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    if &header[..4] != b"DIRC" {
        return Err(Stop::Fallback("the index has no DIRC signature"));
    }
    if version != 2 && version != 3 {
        return Err(Stop::Fallback("the index is not version 2 or 3"));
    }
    let count = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    out.write_all(&[0; 12])?;

    let mut order = Order::default();
    let mut written = 0u32;
    let mut count_one = |order: &mut Order, path: &[u8]| -> Result<(), Stop> {
        order.next(path)?;
        written = written
            .checked_add(1)
            .ok_or(Stop::Fallback("too many entries"))?;
        Ok(())
    };
    let mut next = changes.iter().peekable();
    for _ in 0..count {
        let head = r.peek(62)?;
        let flags = u16::from_be_bytes([head[60], head[61]]);
        if flags & 0x3000 != 0 {
            return Err(Stop::Fallback("the index has conflict stages"));
        }
        let fixed = if flags & 0x4000 != 0 {
            if version < 3 {
                return Err(Stop::Fallback("a version 2 index with extended flags"));
            }
            64
        } else {
            62
        };
        let mut name_len = usize::from(flags & 0xFFF);
        if name_len == 0xFFF {
            // A long name: its length is where the NUL is.
            let mut upto = fixed + 0xFFF + 1;
            name_len = loop {
                upto = upto.min(usize::try_from(r.left).unwrap_or(usize::MAX));
                if upto <= fixed + 0xFFF {
                    return Err(Stop::Fallback("the index is truncated"));
                }
                let seen = r.peek(upto)?;
                if let Some(nul) = seen[fixed + 0xFFF..].iter().position(|&b| b == 0) {
                    break 0xFFF + nul;
                }
                if upto as u64 == r.left {
                    return Err(Stop::Fallback("the index is truncated"));
                }
                upto *= 2;
            };
        }
        // Padded with 1 to 8 NULs to a multiple of 8.
        let total = (fixed + name_len + 8) & !7;
        let entry = r.peek(total)?;
        let name = &entry[fixed..fixed + name_len];
        while let Some((p, e)) = next.next_if(|(p, _)| p.as_slice() < name) {
            if let Some(e) = e {
                count_one(&mut order, p)?;
                write_entry(out, e, p)?;
            }
        }
        if let Some((_, e)) = next.next_if(|(p, _)| p.as_slice() == name) {
            if let Some(e) = e {
                count_one(&mut order, name)?;
                write_entry(out, e, name)?;
            }
        } else {
            count_one(&mut order, name)?;
            out.write_all(entry)?;
        }
        r.consume(total);
    }
    for (p, e) in next {
        if let Some(e) = e {
            count_one(&mut order, p)?;
            write_entry(out, e, p)?;
        }
    }

    // Extensions up to the trailer: the cache-tree kept (invalidated where
    // things changed), other caches dropped, required ones refused.
    while r.left > 0 {
        let head = r.read(8)?;
        let len = u32::from_be_bytes([head[4], head[5], head[6], head[7]]) as usize;
        if !head[0].is_ascii_uppercase() {
            return Err(Stop::Fallback("the index has an extension git requires"));
        }
        if len as u64 > r.left {
            return Err(Stop::Fallback("the index is truncated"));
        }
        let data = r.read(len)?;
        if &head[..4] == b"TREE" {
            let tree = invalidated_tree(&data, changes)?;
            let tree_len = u32::try_from(tree.len()).map_err(|_| Stop::Fallback("a huge TREE"))?;
            out.write_all(b"TREE")?;
            out.write_all(&tree_len.to_be_bytes())?;
            out.write_all(&tree)?;
        }
    }
    r.verify()?;
    Ok((version, written))
}

/// The cache-tree `data` with every tree above a changed path (and the
/// root) marked invalid (`-1` entries, no id), as git invalidates it; the
/// structure is kept, so git and libgit2 still find the valid subtrees.
fn invalidated_tree(
    data: &[u8],
    changes: &[(Vec<u8>, Option<DiskEntry>)],
) -> Result<Vec<u8>, Stop> {
    let mut dirty: HashSet<&[u8]> = HashSet::new();
    for (p, _) in changes {
        dirty.insert(b"");
        for (i, &b) in p.iter().enumerate() {
            if b == b'/' {
                dirty.insert(&p[..i]);
            }
        }
    }
    let bad = || Stop::Fallback("the index's TREE extension is malformed");
    let mut out = Vec::with_capacity(data.len());
    // The path of each open tree and how many subtrees it still expects.
    let mut open: Vec<(usize, u64)> = Vec::new();
    let mut path: Vec<u8> = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let nul = data[at..].iter().position(|&b| b == 0).ok_or_else(bad)?;
        let name = &data[at..at + nul];
        let nl = data[at + nul..]
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(bad)?;
        let counts = std::str::from_utf8(&data[at + nul + 1..at + nul + nl]).map_err(|_| bad())?;
        let (entries, subtrees) = counts.split_once(' ').ok_or_else(bad)?;
        let entries: i64 = entries.parse().map_err(|_| bad())?;
        let subtrees: u64 = subtrees.parse().map_err(|_| bad())?;
        let mut end = at + nul + nl + 1;
        // This tree's full path: the open parent's, then its name.
        while let Some(&(_, 0)) = open.last() {
            open.pop();
        }
        match open.last_mut() {
            Some((parent_len, left)) => {
                *left -= 1;
                path.truncate(*parent_len);
                if *parent_len > 0 {
                    path.push(b'/');
                }
                path.extend_from_slice(name);
            }
            None if at == 0 && name.is_empty() => path.clear(),
            None => return Err(bad()),
        }
        let id = if entries >= 0 {
            let id = data.get(end..end + 20).ok_or_else(bad)?;
            end += 20;
            Some(id)
        } else {
            None
        };
        out.extend_from_slice(name);
        out.push(0);
        match id {
            Some(id) if !dirty.contains(path.as_slice()) => {
                out.extend_from_slice(counts.as_bytes());
                out.push(b'\n');
                out.extend_from_slice(id);
            }
            _ => out.extend_from_slice(format!("-1 {subtrees}\n").as_bytes()),
        }
        open.push((path.len(), subtrees));
        at = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::testutil::TestRepo;
    use std::os::unix::fs::PermissionsExt;

    /// The changes that make `repo`'s index match the files at `paths`, as
    /// the pending record's apply builds them.
    /// Their blobs are written, as the stage commit before the apply has.
    fn changes_for(repo: &TestRepo, paths: &[&str]) -> Vec<(Vec<u8>, Option<DiskEntry>)> {
        let odb = git2::Repository::open(&repo.path).unwrap();
        let mut paths: Vec<&str> = paths.to_vec();
        paths.sort_unstable();
        paths
            .into_iter()
            .map(|p| {
                let full = repo.path.join(p);
                let entry = match std::fs::symlink_metadata(&full) {
                    Ok(m) if m.file_type().is_symlink() => {
                        let t = std::fs::read_link(&full).unwrap();
                        let id = odb.blob(t.as_os_str().as_encoded_bytes()).unwrap();
                        Some(DiskEntry::from_metadata(&m, 0o120000, id))
                    }
                    Ok(m) if m.is_file() => {
                        let id = odb.blob(&std::fs::read(&full).unwrap()).unwrap();
                        let exec = m.permissions().mode() & 0o100 != 0;
                        Some(DiskEntry::from_metadata(
                            &m,
                            if exec { 0o100755 } else { 0o100644 },
                            id,
                        ))
                    }
                    _ => None,
                };
                (p.as_bytes().to_vec(), entry)
            })
            .collect()
    }

    fn index_path(repo: &TestRepo) -> std::path::PathBuf {
        repo.git_dir().join("index")
    }

    /// What git makes of the index: every entry with its stat data, and the
    /// tree `git write-tree` writes from it (through the cache-tree).
    fn git_view(repo: &TestRepo) -> (String, String) {
        (
            repo.git(&["ls-files", "--stage", "--debug"]),
            repo.git(&["write-tree"]),
        )
    }

    /// A repository with a committed tree of nested files, its index (with
    /// a cache-tree, from `git commit`) written by git.
    fn nested() -> TestRepo {
        let repo = TestRepo::empty();
        for d in ["a", "a/b", "c", "d/e/f"] {
            for f in ["1.txt", "2.txt"] {
                repo.write(&format!("{d}/{f}"), &format!("{d}/{f}\n"));
            }
        }
        repo.write("top.txt", "top\n");
        repo.write("x", "a file that becomes a directory\n");
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-qm", "nested"]);
        // `git commit` leaves the cache-tree in the index; check it is there.
        let raw = std::fs::read(index_path(&repo)).unwrap();
        assert!(raw.windows(4).any(|w| w == b"TREE"), "git wrote a TREE");
        repo
    }

    #[test]
    fn a_patched_index_is_the_index_git_add_writes() {
        let repo = nested();
        // Modified, new in a new directory, deleted (emptying `c`), a file
        // replaced by a directory, an exec bit, a symlink, a long path.
        repo.write("a/b/1.txt", "changed\n");
        repo.write("new/dir/n.txt", "new\n");
        std::fs::remove_file(repo.path.join("c/1.txt")).unwrap();
        std::fs::remove_file(repo.path.join("c/2.txt")).unwrap();
        std::fs::remove_file(repo.path.join("x")).unwrap();
        repo.write("x/inside.txt", "now a directory\n");
        let exec = repo.path.join("d/e/f/1.txt");
        std::fs::set_permissions(&exec, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("../top.txt", repo.path.join("a/link")).unwrap();
        // A path longer than the entry's 12-bit length (no file: added to
        // the index only, as `--cacheinfo` does), copied through.
        let long = format!("long/{}", "n/".repeat(2100)) + "f";
        let blob = repo.git(&["hash-object", "-w", "top.txt"]);
        repo.git(&[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("100644,{},{long}", blob.trim()),
        ]);
        let paths = [
            "a/b/1.txt",
            "new/dir/n.txt",
            "c/1.txt",
            "c/2.txt",
            "x",
            "x/inside.txt",
            "d/e/f/1.txt",
            "a/link",
        ];
        let changes = changes_for(&repo, &paths);
        let done = patch_index(&index_path(&repo), &changes).unwrap();
        assert_eq!(done, Patched::Done(11));
        let ours = git_view(&repo);
        assert!(ours.0.contains(&long), "the long path came through");
        // git's own: the same paths added from the same files.
        repo.git(&["add", "-A"]);
        assert_eq!(ours, git_view(&repo));
        assert!(!repo.git_dir().join("index.lock").exists());
    }

    /// The tree of `repo`'s working tree as a fresh index (no cache-tree)
    /// of all its files gives it: what the patched index must write.
    fn fresh_tree(repo: &TestRepo) -> String {
        let fresh = repo.path.parent().unwrap().join("fresh-index");
        let _ = std::fs::remove_file(&fresh);
        for args in [&["add", "-A"][..], &["write-tree"][..]] {
            let out = repo
                .git_cmd(&repo.path, args)
                .env("GIT_INDEX_FILE", &fresh)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            if args[0] == "write-tree" {
                return String::from_utf8(out.stdout).unwrap();
            }
        }
        unreachable!()
    }

    /// The `(path, entry count)` of every tree in `index`'s cache-tree.
    fn cache_tree(index: &Path) -> Vec<(String, i64)> {
        let raw = std::fs::read(index).unwrap();
        let at = raw.windows(4).position(|w| w == b"TREE").unwrap();
        let len = u32::from_be_bytes(raw[at + 4..at + 8].try_into().unwrap()) as usize;
        let data = &raw[at + 8..at + 8 + len];
        let mut out: Vec<(String, i64)> = Vec::new();
        let mut open: Vec<(String, u64)> = Vec::new();
        let mut i = 0;
        while i < data.len() {
            let nul = i + data[i..].iter().position(|&b| b == 0).unwrap();
            let nl = nul + data[nul..].iter().position(|&b| b == b'\n').unwrap();
            let name = String::from_utf8(data[i..nul].to_vec()).unwrap();
            let counts = std::str::from_utf8(&data[nul + 1..nl]).unwrap();
            let (n, subs) = counts.split_once(' ').unwrap();
            let n: i64 = n.parse().unwrap();
            while open.last().is_some_and(|o| o.1 == 0) {
                open.pop();
            }
            let path = match open.last_mut() {
                Some((p, left)) => {
                    *left -= 1;
                    if p.is_empty() {
                        name
                    } else {
                        format!("{p}/{name}")
                    }
                }
                None => name,
            };
            out.push((path.clone(), n));
            open.push((path, subs.parse().unwrap()));
            i = nl + 1 + if n >= 0 { 20 } else { 0 };
        }
        out
    }

    #[test]
    fn the_cache_tree_is_invalidated_above_the_changes_only() {
        let repo = nested();
        repo.write("a/b/1.txt", "changed\n");
        let changes = changes_for(&repo, &["a/b/1.txt"]);
        patch_index(&index_path(&repo), &changes).unwrap();
        let valid: Vec<String> = cache_tree(&index_path(&repo))
            .into_iter()
            .filter(|(_, n)| *n >= 0)
            .map(|(p, _)| p)
            .collect();
        assert_eq!(valid, ["c", "d", "d/e", "d/e/f"]);
        // git trusts the valid trees: the tree it writes is the right one.
        assert_eq!(repo.git(&["write-tree"]), fresh_tree(&repo));
    }

    #[test]
    fn extended_flags_are_copied_and_caches_dropped() {
        let repo = nested();
        repo.git(&["update-index", "--index-version", "3"]);
        repo.write("later.txt", "intent\n");
        repo.git(&["add", "-N", "later.txt"]);
        repo.git(&["update-index", "--untracked-cache"]);
        repo.git(&["status", "--porcelain"]);
        repo.write("top.txt", "changed\n");
        let changes = changes_for(&repo, &["top.txt"]);
        assert_eq!(
            patch_index(&index_path(&repo), &changes).unwrap(),
            Patched::Done(11)
        );
        let listed = repo.git(&["ls-files", "--stage", "--debug"]);
        assert!(listed.contains("later.txt"), "{listed}");
        // Still intent-to-add (the extended flag came through); the change
        // is staged.
        assert_eq!(
            repo.git(&["status", "--porcelain"]),
            " A later.txt\nM  top.txt\n"
        );
    }

    #[test]
    fn what_this_pass_does_not_know_is_left_to_libgit2_untouched() {
        let repo = nested();
        repo.write("top.txt", "changed\n");
        let changes = changes_for(&repo, &["top.txt"]);
        let path = index_path(&repo);

        repo.git(&["update-index", "--index-version", "4"]);
        let before = std::fs::read(&path).unwrap();
        assert!(matches!(
            patch_index(&path, &changes).unwrap(),
            Patched::Fallback(_)
        ));
        assert_eq!(std::fs::read(&path).unwrap(), before);

        repo.git(&["update-index", "--index-version", "2"]);
        let mut corrupt = std::fs::read(&path).unwrap();
        let n = corrupt.len();
        corrupt[n - 1] ^= 0xFF;
        std::fs::write(&path, &corrupt).unwrap();
        assert_eq!(
            patch_index(&path, &changes).unwrap(),
            Patched::Fallback("the index checksum does not match")
        );
        assert_eq!(std::fs::read(&path).unwrap(), corrupt);
        assert!(!repo.git_dir().join("index.lock").exists());

        // Cut anywhere: refused, never a panic or a half-written index.
        let whole = {
            corrupt[n - 1] ^= 0xFF;
            corrupt
        };
        for cut in [0, 11, 12, 40, 100, n / 2, n - 21, n - 1] {
            std::fs::write(&path, &whole[..cut]).unwrap();
            assert!(
                matches!(patch_index(&path, &changes).unwrap(), Patched::Fallback(_)),
                "cut at {cut}"
            );
            assert_eq!(std::fs::read(&path).unwrap(), &whole[..cut]);
        }
        assert!(!repo.git_dir().join("index.lock").exists());
    }

    #[test]
    fn a_path_both_file_and_directory_is_refused() {
        let repo = nested();
        // The change adds `top.txt/x` but leaves the file `top.txt` in.
        std::fs::remove_file(repo.path.join("top.txt")).unwrap();
        repo.write("top.txt/x", "x\n");
        let changes = changes_for(&repo, &["top.txt/x"]);
        assert_eq!(
            patch_index(&index_path(&repo), &changes).unwrap(),
            Patched::Fallback("a path is both a file and a directory")
        );
    }

    #[test]
    fn an_existing_lock_is_an_error_and_stays() {
        let repo = nested();
        let lock = repo.git_dir().join("index.lock");
        std::fs::write(&lock, b"someone").unwrap();
        let changes = changes_for(&repo, &["top.txt"]);
        let err = patch_index(&index_path(&repo), &changes).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&lock).unwrap(), b"someone");
    }
}
