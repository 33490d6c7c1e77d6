//! The repository handle ([`Repo`]) and the commit id ([`CommitId`]).
//!
//! A [`Repo`] names one repository by the directory orch opens it at (the
//! common git dir, or the top of a linked worktree when that worktree's
//! `HEAD` is meant) and holds the libgit2 handles of it, each opened on
//! first use and then kept: a blocking task that does several git steps
//! makes one `Repo` and calls its methods, so the repository is opened (its
//! config files and refs read) once per task, not once per step. Steps that
//! only need the path (admin lock, pool files, the `git` CLI) never open it.
//!
//! A `git2::Repository` may move between threads but not be shared by them,
//! so neither may a `Repo`: make one inside the blocking task (or move it
//! in), never keep one across tasks.

use std::cell::OnceCell;
use std::fmt;
use std::path::{Path, PathBuf};

use git2::Repository;
use serde::{Deserialize, Serialize};

use super::error::{GitError, git_err};

/// One repository orch works on, with its libgit2 handles opened lazily,
/// once each. See the module docs for the rule.
pub struct Repo {
    /// Where the repository is opened, as given.
    dir: PathBuf,
    /// The plain handle (config, refs, objects, commits, merges).
    handle: OnceCell<Repository>,
    /// The handle for diffs between commits (see [`Repo::for_diff`]).
    diff: OnceCell<Repository>,
}

impl fmt::Debug for Repo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Repo").field("dir", &self.dir).finish()
    }
}

impl Repo {
    /// The repository at `dir`, opened exactly there (no upward search) on
    /// first use. Given the common git dir, `HEAD` is the main working
    /// tree's; given the top of a linked worktree, that worktree's.
    pub fn at(dir: impl Into<PathBuf>) -> Repo {
        Repo {
            dir: dir.into(),
            handle: OnceCell::new(),
            diff: OnceCell::new(),
        }
    }

    /// The repository at or above `path`, found by libgit2's upward search
    /// as `git` finds it from a working directory, opened now and kept. Its
    /// directory is the git dir found (a linked worktree's admin dir when
    /// `path` is inside one).
    pub fn discover(path: &Path) -> Result<Repo, GitError> {
        let repo = Repository::discover(path).map_err(|source| GitError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let dir = repo.path().components().collect();
        Ok(Repo {
            dir,
            handle: OnceCell::from(repo),
            diff: OnceCell::new(),
        })
    }

    /// The shared `.git` directory of the repository as libgit2 opened it
    /// (also when it was found from inside a linked worktree).
    pub fn commondir(&self) -> Result<PathBuf, GitError> {
        Ok(self.git2()?.commondir().components().collect())
    }

    /// The directory the repository is opened at: the common git dir for
    /// every handle orch makes of the user's repository.
    pub fn common_dir(&self) -> &Path {
        &self.dir
    }

    /// The libgit2 handle, opened on the first call.
    pub(crate) fn git2(&self) -> Result<&Repository, GitError> {
        if let Some(repo) = self.handle.get() {
            return Ok(repo);
        }
        let repo = super::open::open_at(&self.dir)?;
        Ok(self.handle.get_or_init(|| repo))
    }

    /// Gives the plain handle an empty in-memory index
    /// ([`super::open::without_index`]), for a task that stages nothing: a merge's
    /// attribute lookups then do not load the repository's index.
    pub(crate) fn without_index(&self) -> Result<(), GitError> {
        super::open::without_index(self.git2()?)
    }

    /// The handle for diffs between commits only, opened on the first call:
    /// it has an empty in-memory index ([`super::open::without_index`]) and writes
    /// objects to memory (the sparse trees of a diff), so it never commits,
    /// merges or stages anything — hence a handle of its own.
    pub(crate) fn for_diff(&self) -> Result<&Repository, GitError> {
        if let Some(repo) = self.diff.get() {
            return Ok(repo);
        }
        let repo = super::open::open_at(&self.dir)?;
        super::open::without_index(&repo)?;
        let op = || format!("open {} for a diff", self.dir.display());
        let odb = repo.odb().map_err(git_err(op()))?;
        // Above the loose (1) and pack (2) backends: every write lands here.
        odb.add_new_mempack_backend(1000).map_err(git_err(op()))?;
        drop(odb);
        Ok(self.diff.get_or_init(|| repo))
    }
}

/// A commit's full id: 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
/// Made from git's answer or parsed once where a sha enters orch (a record
/// read from disk, git's output); on disk it is the plain string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CommitId(String);

/// A string that is not a full commit id; names the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("read `{value}` as a commit id: expected 40 or 64 hex digits")]
pub struct InvalidCommitId {
    /// The value as given.
    pub value: String,
}

impl CommitId {
    /// Parses a full commit id (either case; kept lowercase).
    pub fn parse(value: &str) -> Result<CommitId, InvalidCommitId> {
        if matches!(value.len(), 40 | 64) && value.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(CommitId(value.to_ascii_lowercase()))
        } else {
            Err(InvalidCommitId {
                value: value.to_owned(),
            })
        }
    }

    /// The id of a libgit2 object id.
    pub fn from_oid(oid: git2::Oid) -> CommitId {
        CommitId(oid.to_string())
    }

    /// The id as hex.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for CommitId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for CommitId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for CommitId {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_ref()
    }
}

impl fmt::Display for CommitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for CommitId {
    type Err = InvalidCommitId;
    fn from_str(s: &str) -> Result<CommitId, InvalidCommitId> {
        CommitId::parse(s)
    }
}

impl TryFrom<String> for CommitId {
    type Error = InvalidCommitId;
    fn try_from(value: String) -> Result<CommitId, InvalidCommitId> {
        CommitId::parse(&value)
    }
}

impl From<CommitId> for String {
    fn from(id: CommitId) -> String {
        id.0
    }
}

impl PartialEq<str> for CommitId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for CommitId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for CommitId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<CommitId> for String {
    fn eq(&self, other: &CommitId) -> bool {
        *self == other.0
    }
}

impl PartialEq<CommitId> for str {
    fn eq(&self, other: &CommitId) -> bool {
        self == other.0
    }
}

impl PartialEq<CommitId> for &str {
    fn eq(&self, other: &CommitId) -> bool {
        *self == other.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_id_is_full_hex_and_reads_back_as_the_plain_string() {
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let id = CommitId::parse(sha).unwrap();
        assert_eq!(id.as_str(), sha);
        assert_eq!(serde_json::to_string(&id).unwrap(), format!("\"{sha}\""));
        let back: CommitId = serde_json::from_str(&format!("\"{sha}\"")).unwrap();
        assert_eq!(back, id);
        assert_eq!(CommitId::parse(&sha.to_uppercase()).unwrap(), id);
        assert!(CommitId::parse(&"a".repeat(64)).is_ok());
        for bad in ["", "HEAD", &sha[..39], &format!("{sha}0"), &"g".repeat(40)] {
            let err = CommitId::parse(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("`{bad}`")), "{err}");
        }
        let err = serde_json::from_str::<CommitId>("\"main\"").unwrap_err();
        assert!(err.to_string().contains("`main`"), "{err}");
    }
}
