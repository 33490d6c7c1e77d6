//! A lane's own common directory: how the agent's git in a lane writes its
//! objects somewhere of its own while every other repository the agent
//! touches (one it `git init`s, clones, or a test fixture builds) behaves
//! exactly as under plain git.
//!
//! A linked worktree's admin dir names its common dir in `commondir`. Orch
//! points a lane's at `<common>/orch/shadow/<lane>/`: a directory whose
//! entries are symlinks to the user's common dir (refs, `packed-refs`,
//! config, hooks, info, logs, worktrees, …; a missing target is a dangling
//! link, which git reads as absent, so a `packed-refs` the user makes later
//! is seen) — all but `objects/`, which is the lane's own, with the user's
//! store as its alternate. So git in the lane reads everything of the
//! user's, and writes new objects into the lane's store: no environment
//! variable is involved, so nothing leaks into another repository. Under
//! the kernel sandbox the shadow's symlinks are read-only like the rest of
//! the common dir, its `objects/` writable ([`objects_dir`]).
//!
//! Orch moves the lane's objects into the user's store ([`migrate`]) after
//! every tool call and before it stages the lane itself — all but a loose
//! object holding a known secret value, which stays in the lane's store;
//! its own git runs in the lane write into a [`Quarantine`] beside the
//! user's store (`GIT_OBJECT_DIRECTORY`, `src/git/staging.rs`), kept only
//! once the stage's commit is decided, and its commits are written through
//! the user's repository, never the lane's.
//!
//! Invariant of [`migrate`]: it only adds. An object that already exists in
//! the store is never overwritten (loose objects are content-addressed, so
//! the existing one is the same object); a pack's `.idx` is moved last, as
//! git treats a pack as present once its index is.

use std::fs;
use std::path::{Path, PathBuf};

use super::error::{GitError, io_err};
use super::repo::Repo;

/// The file in a shadow dir naming the user's common dir it mirrors.
const MARKER: &str = "orch-shadow";

/// The entries of a common dir a lane reads through symlinks: everything
/// git keeps there but the object store (and orch's own `orch/`, which
/// holds the shadow: a link there would make a cycle for any walker that
/// follows links).
const LINKED: &[&str] = &[
    "HEAD",
    "config",
    "description",
    "packed-refs",
    "refs",
    "reftable",
    "logs",
    "hooks",
    "info",
    "worktrees",
    "modules",
    "lfs",
    "rr-cache",
    "shallow",
    "branches",
    "remotes",
];

impl Repo {
    /// The shadow common dir of lane `name`.
    pub fn shadow_dir(&self, name: &str) -> PathBuf {
        shadow_under(self.common_dir(), name)
    }
}

/// The shadow common dir of lane `name` of the common dir `common`.
fn shadow_under(common: &Path, name: &str) -> PathBuf {
    common.join("orch").join("shadow").join(name)
}

/// The lane's own object store in its shadow dir.
pub fn objects_dir(shadow: &Path) -> PathBuf {
    shadow.join("objects")
}

impl Repo {
    /// Makes (or repairs) the shadow common dir of the lane whose admin dir is
    /// `admin` (named `name`) and points the admin dir's `commondir` at it.
    /// Idempotent; a lane made by an older orch (its `commondir` at the user's
    /// common dir) is converted.
    pub fn attach_shadow(&self, admin: &Path, name: &str) -> Result<PathBuf, GitError> {
        let common_dir = self.common_dir();
        let common = std::path::absolute(common_dir).map_err(io_err("resolve", common_dir))?;
        let shadow = shadow_under(&common, name);
        let objects = objects_dir(&shadow);
        let info = objects.join("info");
        fs::create_dir_all(&info).map_err(io_err("create the lane's object store", &info))?;
        fs::create_dir_all(objects.join("pack"))
            .map_err(io_err("create the lane's object store", &objects))?;
        let alternates = info.join("alternates");
        let want = format!("{}\n", common.join("objects").display());
        if fs::read_to_string(&alternates).ok().as_deref() != Some(want.as_str()) {
            write_atomic(&alternates, &want)?;
        }
        for entry in LINKED {
            let link = shadow.join(entry);
            let target = common.join(entry);
            if fs::read_link(&link).ok().as_deref() == Some(target.as_path()) {
                continue;
            }
            match fs::symlink_metadata(&link) {
                Ok(m) if m.is_dir() => fs::remove_dir_all(&link),
                Ok(_) => fs::remove_file(&link),
                Err(_) => Ok(()),
            }
            .map_err(io_err("replace", &link))?;
            std::os::unix::fs::symlink(&target, &link).map_err(io_err("link", &link))?;
        }
        let marker = shadow.join(MARKER);
        let named = format!("{}\n", common.display());
        if fs::read_to_string(&marker).ok().as_deref() != Some(named.as_str()) {
            write_atomic(&marker, &named)?;
        }
        let commondir = admin.join("commondir");
        let pointed = format!("{}\n", shadow.display());
        if fs::read_to_string(&commondir).ok().as_deref() != Some(pointed.as_str()) {
            write_atomic(&commondir, &pointed)?;
        }
        Ok(shadow)
    }
}

/// The user's common dir a shadow dir mirrors, if `dir` is one.
pub fn real_common_dir(dir: &Path) -> Option<PathBuf> {
    let text = fs::read_to_string(dir.join(MARKER)).ok()?;
    Some(PathBuf::from(text.trim_end()))
}

/// `(the user's common dir, the lane's shadow dir)` of the linked worktree
/// at `lane`, when its common dir is a shadow.
pub fn of_lane(lane: &Path) -> Option<(PathBuf, PathBuf)> {
    let text = fs::read_to_string(lane.join(".git")).ok()?;
    let admin = lane.join(text.trim_end().strip_prefix("gitdir: ")?);
    let commondir = fs::read_to_string(admin.join("commondir")).ok()?;
    let shadow = admin.join(commondir.trim_end());
    real_common_dir(&shadow).map(|real| (real, shadow))
}

impl Repo {
    /// Removes lane `name`'s shadow dir (its objects were migrated after every
    /// call; what is left is garbage).
    pub fn remove_shadow(&self, name: &str) -> Result<(), GitError> {
        let shadow = self.shadow_dir(name);
        match fs::remove_dir_all(&shadow) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(io_err("remove the lane's shadow common dir", &shadow)(e))
            }
            _ => Ok(()),
        }
    }
}

fn write_atomic(path: &Path, text: &str) -> Result<(), GitError> {
    let tmp = path.with_extension("orch-tmp");
    fs::write(&tmp, text).map_err(io_err("write", &tmp))?;
    fs::rename(&tmp, path).map_err(io_err("replace", path))
}

/// An error while migrating a lane's objects.
#[derive(Debug, thiserror::Error)]
#[error("migrate git object {path}: {source}")]
pub struct MigrateError {
    /// The file that could not be moved.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// Moves every object in the lane store `from` into the store `to` and
/// returns how many files were moved. A missing store moves nothing.
///
/// A loose object that holds a known secret value
/// ([`crate::secrets::known_secrets`]) — a blob the agent's own `git add`
/// wrote of a file with a key — is not moved: it stays in the lane's store
/// and goes with the lane, so it never sits in the user's store. (Packs
/// are moved whole, unread.)
pub fn migrate(from: &Path, to: &Path) -> Result<usize, MigrateError> {
    migrate_with(from, to, SecretObjects::of(from))
}

/// Loose objects to leave behind: those holding a known secret value.
struct SecretObjects {
    odb: Option<git2::Odb<'static>>,
}

impl SecretObjects {
    /// A reader of the loose objects in `store` (none when no secret is
    /// known, so nothing is read).
    fn of(store: &Path) -> SecretObjects {
        let odb = (!crate::secrets::known_secrets().is_empty())
            .then(|| {
                let odb = git2::Odb::new().ok()?;
                odb.add_disk_alternate(&store.to_string_lossy()).ok()?;
                Some(odb)
            })
            .flatten();
        SecretObjects { odb }
    }

    /// None: moves everything.
    fn none() -> SecretObjects {
        SecretObjects { odb: None }
    }

    /// Whether the loose object `<fanout><rest>` holds a known secret.
    fn holds_secret(&self, fanout: &str, rest: &str) -> bool {
        let Some(odb) = &self.odb else {
            return false;
        };
        let Some(obj) = git2::Oid::from_str(&format!("{fanout}{rest}"))
            .ok()
            .and_then(|oid| odb.read(oid).ok())
        else {
            return false;
        };
        let data = obj.data();
        crate::secrets::known_secrets()
            .iter()
            .any(|s| !s.is_empty() && data.windows(s.len()).any(|w| w == s.as_bytes()))
    }
}

fn migrate_with(from: &Path, to: &Path, leave: SecretObjects) -> Result<usize, MigrateError> {
    let mut moved = 0;
    let Ok(dirs) = fs::read_dir(from) else {
        return Ok(0);
    };
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| MigrateError { path, source }
    };
    let mut packs = Vec::new();
    for d in dirs {
        let d = d.map_err(err(from))?;
        let name = d.file_name();
        let name = name.to_string_lossy();
        let is_fanout = name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit());
        if name == "pack" {
            packs.push(d.path());
        } else if is_fanout {
            for f in fs::read_dir(d.path()).map_err(err(&d.path()))? {
                let f = f.map_err(err(&d.path()))?;
                let fname = f.file_name();
                if fname.to_string_lossy().starts_with("tmp_")
                    || !f.file_type().is_ok_and(|t| t.is_file())
                {
                    continue;
                }
                if leave.holds_secret(&name, &fname.to_string_lossy()) {
                    tracing::warn!(
                        "git object {name}{} in the lane's store holds a known secret value: left out of the repository's store",
                        fname.to_string_lossy()
                    );
                    continue;
                }
                let target = to.join(&*name).join(&fname);
                moved += move_one(&f.path(), &target)? as usize;
            }
        }
    }
    for pack_dir in packs {
        let mut files: Vec<PathBuf> = fs::read_dir(&pack_dir)
            .map_err(err(&pack_dir))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("pack-"))
            })
            .collect();
        // Index files last: a pack counts as present once its .idx is.
        files.sort_by_key(|p| p.extension().is_some_and(|e| e == "idx"));
        for f in files {
            if let Some(name) = f.file_name() {
                moved += move_one(&f, &to.join("pack").join(name))? as usize;
            }
        }
    }
    Ok(moved)
}

/// Moves `from` to `to` unless `to` exists; returns whether it moved.
fn move_one(from: &Path, to: &Path) -> Result<bool, MigrateError> {
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| MigrateError { path, source }
    };
    if to.exists() {
        fs::remove_file(from).map_err(err(from))?;
        return Ok(false);
    }
    if let Some(dir) = to.parent() {
        fs::create_dir_all(dir).map_err(err(dir))?;
    }
    // hard_link fails if `to` appeared meanwhile, so nothing is overwritten.
    match fs::hard_link(from, to) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => {
            let tmp = to.with_extension("orch-tmp");
            fs::copy(from, &tmp).map_err(err(from))?;
            fs::rename(&tmp, to).map_err(err(to))?;
        }
    }
    fs::remove_file(from).map_err(err(from))?;
    Ok(true)
}

/// Moves the objects of a lane's shadow dir `shadow` into the store of the
/// user's common dir `real` ([`of_lane`] gives both).
pub fn migrate_into(shadow: &Path, real: &Path) -> Result<usize, GitError> {
    migrate(&objects_dir(shadow), &real.join("objects")).map_err(|e| GitError::Io {
        op: "move the lane's git objects into the repository's store:",
        path: e.path,
        source: e.source,
    })
}

/// The directory of orch's object quarantines in the common dir `common`.
fn quarantine_root(common: &Path) -> PathBuf {
    common.join("orch").join("quarantine")
}

/// An object store of orch's own, beside the user's, that a stage's
/// staging writes into (`GIT_OBJECT_DIRECTORY`, the user's store as its
/// alternate) until the commit is decided: [`Quarantine::keep`] moves its
/// objects into the user's store ([`migrate`]); [`Quarantine::discard`]
/// drops them, so a refused commit's blobs (a file holding a known secret)
/// never reach the user's store. Dropped undecided (an error between the
/// two), it keeps: the lane's index may name its objects.
#[derive(Debug)]
pub struct Quarantine {
    dir: Option<tempfile::TempDir>,
    store: PathBuf,
    /// An exclusive `flock` on `<dir>/lock` while it lives: a quarantine
    /// whose lock can be taken is a dead process's.
    _lock: fs::File,
}

/// The lock file in a quarantine.
const QUARANTINE_LOCK: &str = "lock";

/// Takes an exclusive `flock` on `file` without waiting; whether it was taken.
fn try_lock(file: &fs::File) -> bool {
    // std's `File::try_lock` is `flock(LOCK_EX | LOCK_NB)` on Linux.
    file.try_lock().is_ok()
}

impl Quarantine {
    /// A new, empty quarantine for the object store `store`
    /// (`<common>/objects`), made in `<common>/orch/quarantine/` (the same
    /// file system, so keeping is a hard link per object). Quarantines a
    /// killed orch left behind are removed first.
    pub fn new(store: &Path) -> Result<Quarantine, GitError> {
        let common = store.parent().unwrap_or(store);
        let root = quarantine_root(common);
        fs::create_dir_all(&root).map_err(io_err("create the object quarantine", &root))?;
        remove_dead_quarantines(&root);
        let dir = tempfile::Builder::new()
            .prefix(&format!("q-{}-", std::process::id()))
            .tempdir_in(&root)
            .map_err(io_err("create the object quarantine", &root))?;
        for sub in ["pack", "info"] {
            let p = dir.path().join(sub);
            fs::create_dir_all(&p).map_err(io_err("create the object quarantine", &p))?;
        }
        // The lock is taken under another name and then renamed into place,
        // so a cleaner in another stage or process never finds `lock`
        // unlocked while this quarantine lives.
        let path = dir.path().join(QUARANTINE_LOCK);
        let fresh = dir.path().join(format!("{QUARANTINE_LOCK}.new"));
        let lock =
            fs::File::create(&fresh).map_err(io_err("create the object quarantine", &fresh))?;
        if !try_lock(&lock) {
            return Err(io_err("lock the object quarantine", &fresh)(
                std::io::Error::last_os_error(),
            ));
        }
        fs::rename(&fresh, &path).map_err(io_err("lock the object quarantine", &path))?;
        Ok(Quarantine {
            dir: Some(dir),
            store: store.to_path_buf(),
            _lock: lock,
        })
    }

    /// The quarantine's object directory (for `GIT_OBJECT_DIRECTORY`).
    pub fn objects(&self) -> &Path {
        self.dir.as_ref().map_or(self.store.as_path(), |d| d.path())
    }

    /// The user's object store it belongs to.
    pub fn store(&self) -> &Path {
        &self.store
    }

    /// Moves its objects into the user's store; how many were moved.
    pub fn keep(mut self) -> Result<usize, GitError> {
        self.keep_now()
    }

    fn keep_now(&mut self) -> Result<usize, GitError> {
        let Some(dir) = self.dir.take() else {
            return Ok(0);
        };
        // The staged tree was scanned for secrets before it was kept.
        migrate_with(dir.path(), &self.store, SecretObjects::none()).map_err(|e| GitError::Io {
            op: "move the staged objects into the repository's store:",
            path: e.path,
            source: e.source,
        })
    }

    /// Drops its objects: none reaches the user's store.
    pub fn discard(mut self) {
        if let Some(dir) = self.dir.take()
            && let Err(e) = dir.close()
        {
            tracing::warn!("could not remove a refused commit's object quarantine: {e}");
        }
    }
}

impl Drop for Quarantine {
    fn drop(&mut self) {
        if let Err(e) = self.keep_now() {
            tracing::warn!("{e}");
        }
    }
}

/// Removes the quarantines whose lock no process holds: a killed orch's
/// staging, whose objects no commit names. (The lock, not the pid, says
/// so: another orch on the same repository may live in another pid
/// namespace.) One without a lock file yet is left alone.
fn remove_dead_quarantines(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with("q-") {
            continue;
        }
        let Ok(lock) = fs::File::open(e.path().join(QUARANTINE_LOCK)) else {
            continue;
        };
        if try_lock(&lock) {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object_in(objects: &Path) -> PathBuf {
        let f = objects
            .join("ab")
            .join("cdef0123456789abcdef0123456789abcdef01");
        fs::create_dir_all(f.parent().unwrap()).unwrap();
        fs::write(&f, b"x").unwrap();
        f
    }

    #[test]
    fn a_quarantine_keeps_into_the_store_or_drops_and_a_dead_ones_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("objects");
        fs::create_dir_all(&store).unwrap();
        let moved = store
            .join("ab")
            .join("cdef0123456789abcdef0123456789abcdef01");

        let q = Quarantine::new(&store).unwrap();
        object_in(q.objects());
        q.discard();
        assert!(!moved.exists());

        let q = Quarantine::new(&store).unwrap();
        object_in(q.objects());
        assert_eq!(q.keep().unwrap(), 1);
        assert!(moved.exists());
        let root = quarantine_root(tmp.path());
        assert_eq!(fs::read_dir(&root).unwrap().count(), 0);

        // A killed process's quarantine (its lock free) goes; a live one stays.
        let dead = root.join("q-1-dead");
        fs::create_dir_all(&dead).unwrap();
        fs::write(dead.join(QUARANTINE_LOCK), b"").unwrap();
        let live = Quarantine::new(&store).unwrap();
        assert!(!dead.exists());
        let other = Quarantine::new(&store).unwrap();
        assert!(live.objects().exists() && other.objects().exists());
    }

    #[test]
    fn quarantines_made_at_once_never_clean_each_other_away() {
        // Two stages of one run stage at the same moment: one's cleaner must
        // never find the other's lock free while it is being made.
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("objects");
        fs::create_dir_all(&store).unwrap();
        let threads: Vec<_> = (0..6)
            .map(|_| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for _ in 0..60 {
                        let q = Quarantine::new(&store).expect("a quarantine is made");
                        object_in(q.objects());
                        assert!(q.objects().exists(), "a live quarantine was removed");
                        q.discard();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
