//! A stage's tree, staged by git itself: `git add -A` and `git write-tree`
//! in the lane, so the commit holds exactly what git makes of the lane's
//! files (filters, encodings, modes, symlinks, nested repositories as
//! gitlinks, submodules kept as gitlinks).
//!
//! When the lane's watcher can vouch for which paths changed
//! ([`super::watch::Marks`]) and the lane's index still holds the stage's
//! start tree, only those paths are staged (`git add -A -- <paths>`), which
//! gives the same tree without git walking the whole lane: a path that is
//! not marked has the same content as in the start tree, so staging it
//! again changes nothing. Everything else — no marks, an index the agent
//! changed (`git add`, `git commit`, `git stash` in its lane), a sparse
//! checkout, any step of the narrow path that git refuses — stages the
//! whole lane (`git add -A`).
//!
//! Orch's own git runs outside the sandbox: the objects it writes go to a
//! quarantine beside the repository's object store ([`Quarantine`],
//! `GIT_OBJECT_DIRECTORY` for its own commands only, the store as its
//! alternate), kept into the store only once the stage's commit is
//! decided — so the blobs of a commit refused for a known secret never
//! reach it ([`stage_tree_held`]).

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::cli::Git;
use super::error::GitError;
use super::repo::CommitId;
use super::shadow::Quarantine;
use super::watch::Marks;

/// Ignored directories listed per `git ls-files` (its command line).
const LS_FILES_CHUNK: usize = 512;

/// How a stage's tree was staged, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Staged {
    /// `git add -A -- <the marked paths>` (this many pathspecs).
    Paths(usize),
    /// `git add -A` over the whole lane; the reason is logged.
    Whole,
}

/// Stages the lane at `lane` as `git add -A` would and returns the tree git
/// writes for it (`git write-tree`) and how it was staged. `start` is the
/// commit the stage began at; `marks` what the lane's watcher saw change
/// since then (`None`: it cannot vouch).
pub fn stage_tree(
    lane: &Path,
    start: &CommitId,
    marks: Option<&Marks>,
) -> Result<(String, Staged), GitError> {
    let (tree, staged, held) = stage_tree_held(lane, start, marks)?;
    if let Some(q) = held {
        q.keep()?;
    }
    Ok((tree, staged))
}

/// [`stage_tree`] with the objects git wrote held in a [`Quarantine`]
/// (`None` for a directory that is not a worktree orch can place one
/// beside): the caller keeps them once it commits, or discards them.
pub fn stage_tree_held(
    lane: &Path,
    start: &CommitId,
    marks: Option<&Marks>,
) -> Result<(String, Staged, Option<Quarantine>), GitError> {
    let lane = Lane::at(lane)?;
    let staged = match narrow_reason(&lane, start, marks)? {
        Ok(specs) => match stage_paths(&lane, &specs) {
            Ok(()) => Staged::Paths(specs.add.len() + specs.remove.len()),
            Err(e) => {
                tracing::debug!(lane = %lane.path.display(), "staging the marked paths failed, staging the whole lane: {e}");
                stage_whole(&lane)?;
                Staged::Whole
            }
        },
        Err(why) => {
            tracing::debug!(lane = %lane.path.display(), "staging the whole lane: {why}");
            stage_whole(&lane)?;
            Staged::Whole
        }
    };
    let out = lane.git().args(["write-tree"]).run()?;
    let tree = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    Ok((tree, staged, lane.held))
}

/// The lane being staged: where it is, and where orch's own git writes the
/// objects it makes there.
struct Lane<'a> {
    path: &'a Path,
    /// Where orch's objects go until the commit is decided (beside the
    /// user's store, never in a lane's shadow store).
    held: Option<Quarantine>,
    /// The lane's own store (its shadow's), read as one more alternate:
    /// what [`super::shadow::migrate_into`] left there (an object holding a
    /// known secret) may still be named by the lane's index, and git hashes
    /// a file again only when its stat data says so, so `write-tree` must
    /// find it. Only read: nothing is written there, and a tree naming it
    /// is refused by the secret scan before anything is kept.
    kept_back: Option<std::path::PathBuf>,
}

impl<'a> Lane<'a> {
    /// The lane at `path`, with what the agent's git wrote in the lane's
    /// own store moved into the user's first: its index may name those
    /// objects, and git skips writing an object it finds.
    fn at(path: &'a Path) -> Result<Self, GitError> {
        let mut kept_back = None;
        let store = match super::shadow::of_lane(path) {
            Some((real, shadow)) => {
                super::shadow::migrate_into(&shadow, &real)?;
                kept_back = Some(super::shadow::objects_dir(&shadow));
                Some(real.join("objects"))
            }
            None => store_of(path),
        };
        let held = store.map(|s| Quarantine::new(&s)).transpose()?;
        Ok(Lane {
            path,
            held,
            kept_back,
        })
    }

    /// A git command in the lane.
    fn git(&self) -> Git {
        let g = super::cli::git(self.path);
        match &self.held {
            Some(q) => {
                // The list is `:`-separated; a path holding `:` is left out
                // rather than quoted (git's quoting of this variable is
                // C-style and rarely needed).
                let mut alternates = q.store().as_os_str().to_owned();
                if let Some(kept) = self
                    .kept_back
                    .as_ref()
                    .filter(|k| k.is_dir() && !k.as_os_str().as_encoded_bytes().contains(&b':'))
                {
                    alternates.push(":");
                    alternates.push(kept);
                }
                g.env("GIT_OBJECT_DIRECTORY", q.objects())
                    .env("GIT_ALTERNATE_OBJECT_DIRECTORIES", alternates)
            }
            None => g,
        }
    }

    /// `git rm --cached -r -f --ignore-unmatch -- <paths>`: gone paths out
    /// of the index (as `git add -A` removes them).
    fn remove_from_index(&self, paths: &[Vec<u8>]) -> Result<(), GitError> {
        let list = pathspec_file(paths)?;
        self.git()
            .args(["--literal-pathspecs", "rm", "--cached", "-r", "-f", "-q"])
            .args(["--ignore-unmatch", "--pathspec-file-nul"])
            .arg_path("--pathspec-from-file=", list.path())
            .run()
            .map(drop)
    }
}

/// The object store of the worktree at `path` that has no shadow: its
/// linked admin dir's `commondir`, or its own `.git`.
fn store_of(path: &Path) -> Option<std::path::PathBuf> {
    let dot_git = path.join(".git");
    if dot_git.is_dir() {
        return Some(dot_git.join("objects"));
    }
    let text = std::fs::read_to_string(&dot_git).ok()?;
    let admin = path.join(text.trim_end().strip_prefix("gitdir: ")?);
    let commondir = std::fs::read_to_string(admin.join("commondir")).ok()?;
    std::path::absolute(admin.join(commondir.trim_end()).join("objects")).ok()
}

/// `git add -A` of the whole lane.
fn stage_whole(lane: &Lane<'_>) -> Result<(), GitError> {
    lane.git().args(["add", "-A"]).run().map(drop)
}

/// The pathspecs of a narrow staging.
#[derive(Debug, Default, PartialEq, Eq)]
struct Specs {
    /// Paths that exist: `git add -A -- …`.
    add: Vec<Vec<u8>>,
    /// Paths that are gone: `git rm --cached -r --ignore-unmatch -- …`.
    remove: Vec<Vec<u8>>,
}

/// The pathspecs to stage, or why the whole lane is staged instead.
fn narrow_reason(
    lane: &Lane<'_>,
    start: &CommitId,
    marks: Option<&Marks>,
) -> Result<Result<Specs, String>, GitError> {
    let Some(marks) = marks else {
        return Ok(Err(
            "the lane's watcher cannot vouch for what changed".into()
        ));
    };
    if marks.base != *start {
        return Ok(Err(format!(
            "the watcher's record starts at {}, the stage at {start}",
            marks.base
        )));
    }
    let admin = super::ignored::lane_admin_dir(lane.path)?;
    if admin.join("info").join("sparse-checkout").exists() {
        return Ok(Err("the lane is a sparse checkout".into()));
    }
    // The index must still hold the start tree: the agent's own `git add`,
    // `git commit` or `git rm --cached` changes entries no file change marks.
    let same = lane
        .git()
        .args([
            "diff-index",
            "--cached",
            "--quiet",
            "--no-renames",
            start,
            "--",
        ])
        .output()?;
    if same.code != 0 {
        return Ok(Err(if same.code == 1 {
            "the lane's index no longer holds the start tree (git ran in the lane)".into()
        } else {
            super::cli::failure_detail(&same)
        }));
    }
    Ok(specs_from_marks(lane.path, marks))
}

/// The marked paths split into those that exist (staged with `git add -A`)
/// and those that are gone (removed from the index), each reduced to what
/// git would stage: a path inside a nested repository or below a symlink or
/// file becomes that entry; a path of the lane's own `.git` is dropped.
fn specs_from_marks(lane: &Path, marks: &Marks) -> Result<Specs, String> {
    let mut roots: Vec<&[u8]> = marks.paths.iter().map(Vec::as_slice).collect();
    roots.extend(marks.whole.iter().map(Vec::as_slice));
    // The directory of a changed `.gitignore`: what is ignored below it may
    // have changed, so it is staged whole.
    for p in &marks.paths {
        let name_at = p.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
        if &p[name_at..] == b".gitignore" {
            roots.push(&p[..name_at.saturating_sub(1)]);
        }
    }
    let mut kinds: HashMap<Vec<u8>, Kind> = HashMap::new();
    let mut add = std::collections::BTreeSet::new();
    let mut remove = std::collections::BTreeSet::new();
    for path in roots {
        if path.is_empty() {
            return Err(
                "the top-level .gitignore changed (what is ignored anywhere may have)".into(),
            );
        }
        if path == b".git" || path.starts_with(b".git/") {
            continue;
        }
        match resolve(lane, path, &mut kinds) {
            Some(entry) => add.insert(entry),
            None => remove.insert(path.to_vec()),
        };
    }
    // An entry that is both removed and added (a stale mark below a path
    // that exists again) is staged by the add.
    remove.retain(|p| !add.contains(p));
    Ok(Specs {
        add: add.into_iter().collect(),
        remove: remove.into_iter().collect(),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Missing,
    /// A directory (`true`: a repository of its own, it holds a `.git`).
    Dir(bool),
    Other,
}

/// The entry git stages for the marked `path`: the path itself when it
/// exists, the first component that is not a plain directory (a symlink, a
/// file, a nested repository) when it lies below one; `None` when it is gone.
fn resolve(lane: &Path, path: &[u8], kinds: &mut HashMap<Vec<u8>, Kind>) -> Option<Vec<u8>> {
    let mut end = 0;
    loop {
        let next = path[end..]
            .iter()
            .position(|&b| b == b'/')
            .map_or(path.len(), |i| end + i);
        let prefix = &path[..next];
        let kind = *kinds
            .entry(prefix.to_vec())
            .or_insert_with(|| kind_of(lane, prefix));
        let last = next == path.len();
        match kind {
            Kind::Missing => return None,
            Kind::Other | Kind::Dir(true) => return Some(prefix.to_vec()),
            Kind::Dir(false) if last => return Some(prefix.to_vec()),
            Kind::Dir(false) => end = next + 1,
        }
    }
}

fn kind_of(lane: &Path, rel: &[u8]) -> Kind {
    let path = lane.join(std::ffi::OsStr::from_bytes(rel));
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => Kind::Dir(std::fs::symlink_metadata(path.join(".git")).is_ok()),
        Ok(_) => Kind::Other,
        Err(_) => Kind::Missing,
    }
}

/// Stages `specs` in the lane: gone paths removed from the index, ignored
/// untracked ones left out (as `git add -A` leaves them), the rest added.
fn stage_paths(lane: &Lane<'_>, specs: &Specs) -> Result<(), GitError> {
    if !specs.remove.is_empty() {
        lane.remove_from_index(&specs.remove)?;
    }
    if specs.add.is_empty() {
        return Ok(());
    }
    // `git add` refuses a pathspec that names an ignored untracked path:
    // those are left out (a tracked file under an ignored directory is not
    // ignored: `check-ignore` skips tracked paths).
    let list = pathspec_file(&specs.add)?;
    let out = lane
        .git()
        .args(["check-ignore", "-z", "--stdin"])
        .stdin_file(list.path())?
        .output()?;
    if out.code > 1 {
        return Err(GitError::Cli {
            command: "run `git check-ignore`".into(),
            detail: super::cli::failure_detail(&out),
        });
    }
    let ignored: std::collections::HashSet<&[u8]> = out
        .stdout
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .collect();
    let mut add: Vec<Vec<u8>> = Vec::new();
    let mut ignored_dirs: Vec<Vec<u8>> = Vec::new();
    for p in &specs.add {
        if !ignored.contains(p.as_slice()) {
            add.push(p.clone());
        } else if kind_of(lane.path, p) != Kind::Other {
            ignored_dirs.push(p.clone());
        }
    }
    // An ignored directory may still hold tracked files (tracked stays
    // tracked): those are staged by name.
    if !ignored_dirs.is_empty() {
        // `ls-files` takes no pathspec file: the directories go on its
        // command line, a bounded number at a time.
        let mut listed = Vec::new();
        for chunk in ignored_dirs.chunks(LS_FILES_CHUNK) {
            let out = lane
                .git()
                .args(["--literal-pathspecs", "ls-files", "-z", "--cached", "--"])
                .args(chunk.iter().map(|p| std::ffi::OsStr::from_bytes(p)))
                .run()?;
            listed.extend(out.stdout);
        }
        let mut kinds = HashMap::new();
        let mut gone = Vec::new();
        for p in listed.split(|&b| b == 0).filter(|p| !p.is_empty()) {
            match resolve(lane.path, p, &mut kinds) {
                Some(e) => add.push(e),
                None => gone.push(p.to_vec()),
            }
        }
        if !gone.is_empty() {
            lane.remove_from_index(&gone)?;
        }
    }
    if add.is_empty() {
        return Ok(());
    }
    add.sort();
    add.dedup();
    let list = pathspec_file(&add)?;
    lane.git()
        .args(["--literal-pathspecs", "add", "-A", "--pathspec-file-nul"])
        .arg_path("--pathspec-from-file=", list.path())
        .run()
        .map(drop)
}

/// A temp file of NUL-terminated paths.
fn pathspec_file(paths: &[Vec<u8>]) -> Result<tempfile::NamedTempFile, GitError> {
    let io = |source| GitError::Io {
        op: "write the pathspec file in",
        path: std::env::temp_dir(),
        source,
    };
    let mut f = tempfile::Builder::new()
        .prefix("orch-pathspec-")
        .tempfile()
        .map_err(io)?;
    for p in paths {
        f.write_all(p).map_err(io)?;
        f.write_all(b"\0").map_err(io)?;
    }
    f.flush().map_err(io)?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks(paths: &[&str], whole: &[&str]) -> Marks {
        Marks {
            base: CommitId::parse(&"0".repeat(40)).unwrap(),
            paths: paths.iter().map(|p| p.as_bytes().to_vec()).collect(),
            whole: whole.iter().map(|p| p.as_bytes().to_vec()).collect(),
        }
    }

    #[test]
    fn marks_become_what_git_stages() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.rs"), "a").unwrap();
        std::fs::create_dir_all(root.join("inner/.git")).unwrap();
        std::fs::write(root.join("inner/f"), "f").unwrap();
        std::os::unix::fs::symlink("src", root.join("link")).unwrap();
        std::fs::write(root.join(".git"), "gitdir: x").unwrap();
        let m = marks(
            &[
                "src/a.rs",
                "gone.txt",
                "inner/f",
                "inner/.git/HEAD",
                "link/a.rs",
                ".git",
                "src/.gitignore",
            ],
            &["newdir"],
        );
        let specs = specs_from_marks(root, &m).unwrap();
        let show = |v: &[Vec<u8>]| {
            v.iter()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(show(&specs.add), ["inner", "link", "src", "src/a.rs"]);
        assert_eq!(
            show(&specs.remove),
            ["gone.txt", "newdir", "src/.gitignore"]
        );
        let top = marks(&["a", "b/.gitignore", ".gitignore"], &[]);
        assert!(
            specs_from_marks(root, &top).is_err(),
            "a top-level .gitignore stages the whole lane"
        );
    }
}
