//! Reading the lessons orch can see: the ref's, the checked-in ones, the
//! user config dir's.

use super::{Lesson, MemoryError, Origin, store};
use std::path::{Path, PathBuf};

/// The lessons orch can see for the repository whose common git dir is
/// `common`: the ref's, then the checked-in ones of `commit` (its
/// `.orch/memory/*.md`, read as blobs; none without a commit), then the
/// user config dir's. An id seen again later is shadowed. Checked-in files
/// are named under `dir` (the working tree or lane they belong to).
/// Malformed or skipped files are returned as problems, not errors, so one
/// bad file does not stop a run. Every lesson's text is redacted of the
/// known secrets.
pub fn load_all_at(
    common: &Path,
    commit: Option<&crate::git::CommitId>,
    dir: &Path,
) -> Result<(Vec<Lesson>, Vec<MemoryError>), MemoryError> {
    let checked_in = match commit {
        Some(c) => committed_lessons(common, c, dir)?,
        None => Vec::new(),
    };
    load_with(common, checked_in)
}

/// The `.md` entries of `commit:.orch/memory`, read from the object
/// database (never the file system, so a link is never followed): a
/// regular file's blob, or a [`MemoryError::NotAFile`] for a symlink or a
/// submodule. Named under `dir`, sorted.
fn committed_lessons(
    common: &Path,
    commit: &crate::git::CommitId,
    dir: &Path,
) -> Result<LessonFiles, MemoryError> {
    let dir = dir.join(".orch").join("memory");
    let handle = crate::git::Repo::at(common);
    let repo = handle.git2()?;
    let mut files = Vec::new();
    let tree = repo
        .revparse_single(&format!("{commit}:.orch/memory"))
        .ok()
        .and_then(|o| o.into_tree().ok());
    let Some(tree) = tree else {
        return Ok(files);
    };
    for entry in tree.iter() {
        let name = String::from_utf8_lossy(entry.name_bytes()).into_owned();
        if !name.ends_with(".md") {
            continue;
        }
        let path = dir.join(&name);
        let what = match entry.filemode() {
            0o100644 | 0o100755 => None,
            0o120000 => Some("symlink (mode 120000)"),
            0o160000 => Some("submodule"),
            _ => Some("directory"),
        };
        if let Some(what) = what {
            files.push((path.clone(), Err(MemoryError::NotAFile { path, what })));
            continue;
        }
        let text = repo
            .find_blob(entry.id())
            .map(|b| String::from_utf8_lossy(b.content()).into_owned())
            .map_err(|e| MemoryError::Io {
                path: path.clone(),
                source: std::io::Error::other(e.message().to_owned()),
            });
        files.push((path, text));
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}

/// The `.md` files of `dir`, sorted, with their text (or why not).
fn lesson_files(dir: &Path) -> Result<LessonFiles, MemoryError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(MemoryError::Io {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    paths.sort();
    Ok(paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).map_err(|source| MemoryError::Io {
                path: path.clone(),
                source,
            });
            (path, text)
        })
        .collect())
}

type LessonFiles = Vec<(PathBuf, Result<String, MemoryError>)>;

/// The ref's lessons, then `checked_in`, then the user config dir's.
fn load_with(
    common: &Path,
    checked_in: LessonFiles,
) -> Result<(Vec<Lesson>, Vec<MemoryError>), MemoryError> {
    let mut lessons = store::read(common)?;
    let mut problems = Vec::new();
    let user = match crate::dirs::user_config_dir() {
        Some(d) => lesson_files(&d.join("memory"))?,
        None => Vec::new(),
    };
    for (path, text) in checked_in.into_iter().chain(user) {
        let parsed = text.and_then(|t| {
            Lesson::parse(&t, &path.display().to_string(), Origin::File(path.clone()))
        });
        match parsed {
            Ok(l) if lessons.iter().any(|o| o.id == l.id) => {}
            Ok(l) => lessons.push(l),
            Err(e) => problems.push(e),
        }
    }
    for l in &mut lessons {
        l.redact(&[]);
    }
    Ok((lessons, problems))
}
