//! Which files of the user's working tree `.worktreeinclude` selects for
//! every lane.
//!
//! A file is selected when it matches `.worktreeinclude` under git's own
//! rules **and** git ignores it in the user's tree. Tracked files come with
//! the checkout; an untracked file git does not ignore would be committed by
//! the stage, so neither is ever selected.
//!
//! Matching is git's, top down: a file under a directory a line matches
//! matches (a later `!` line cannot re-include it, as in git), else the last
//! line that matches the file itself decides (`!` re-includes). The tests
//! hold this against `git ls-files --ignored --exclude-from` on one tree.
//!
//! Candidates come from one status walk
//! ([`git::ignored::ignored_entries`]): every ignored file, at any depth, in
//! tracked and untracked directories alike, and one entry per directory an
//! ignore rule matches (`node_modules/`, `target/`). Such a directory is
//! entered only where a line can match inside it: the directory itself
//! matches (`local/`: all of it), or an anchored line (a `/` at its start or
//! in its middle) names a path below it, entered down to the line's depth
//! (`node_modules/.cache/*.json`, `*/secrets.yml`), or to any depth below the
//! literal directories before a `**` (`config/**/*.yml`). Unanchored lines
//! (`.env`, `*.local`, `**/.env`) do not reach into such directories, so a
//! bare `.env` costs nothing in a 100,000-file `target/`.

use crate::git::{self, GitError};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use std::path::Path;

/// The include file at the root of the user's working tree.
const INCLUDE_FILE: &str = ".worktreeinclude";

/// A parsed `.worktreeinclude`.
pub(super) struct Include {
    matcher: Gitignore,
    /// One per anchored line that is not a negation: how far it reaches
    /// into a directory git ignores whole.
    reaches: Vec<Reach>,
}

/// Where an anchored line can match: below `dir`, down to `depth`.
#[derive(Debug, PartialEq, Eq)]
struct Reach {
    /// The literal directories before the line's first glob character
    /// (`config/local` for `config/local/*.yml`, `""` for `*/secrets.yml`).
    dir: String,
    /// Path components of the paths the line matches (2 for
    /// `config/*.local`); `None` with a `**`, which matches at any depth.
    depth: Option<usize>,
}

impl Include {
    /// Reads `<workdir>/.worktreeinclude`; `None` when there is no such
    /// file. The error names the file and line.
    pub(super) fn read(workdir: &Path) -> Result<Option<Include>, String> {
        let path = workdir.join(INCLUDE_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => Include::parse(workdir, &path, &text).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("read {}: {e}", path.display())),
        }
    }

    /// Parses `text` (read from `origin`) for a tree rooted at `root`.
    fn parse(root: &Path, origin: &Path, text: &str) -> Result<Include, String> {
        let mut builder = GitignoreBuilder::new(root);
        let mut reaches = Vec::new();
        for (i, line) in text.lines().enumerate() {
            builder
                .add_line(None, line)
                .map_err(|e| format!("read {}:{}: {e}", origin.display(), i + 1))?;
            reaches.extend(Reach::of(line));
        }
        let matcher = builder
            .build()
            .map_err(|e| format!("read {}: {e}", origin.display()))?;
        Ok(Include { matcher, reaches })
    }

    /// Whether `rel` (relative, `/`-separated) matches as git decides it:
    /// each leading directory top down (one that matches takes everything
    /// below it), then the path itself.
    fn matches(&self, rel: &str, is_dir: bool) -> bool {
        let leading = rel.match_indices('/').map(|(i, _)| &rel[..i]);
        for dir in leading {
            if self.matcher.matched(dir, true).is_ignore() {
                return true;
            }
        }
        self.matcher.matched(rel, is_dir).is_ignore()
    }

    /// Whether a line can match a path strictly below the directory `dir`
    /// that does not match itself (see [`Reach`]).
    fn reaches_below(&self, dir: &str) -> bool {
        let depth = dir.split('/').count();
        self.reaches.iter().any(|r| {
            // The line's literal path runs through `dir`.
            if r.dir == dir || is_below(&r.dir, dir) {
                return true;
            }
            // `dir` is below the literal part: the globs decide, by depth.
            (r.dir.is_empty() || is_below(dir, &r.dir))
                && match r.depth {
                    Some(n) => n > depth,
                    None => !r.dir.is_empty(),
                }
        })
    }

    /// Appends the files below `dir`, a directory git ignores whole, that
    /// match: all of them when `dir` matches, else those a line reaches.
    fn collect_below(&self, root: &Path, dir: &str, out: &mut Vec<String>) {
        if self.matches(dir, true) {
            walk_files(root, dir, out);
        } else {
            self.collect_reached(root, dir, out);
        }
    }

    /// [`Include::collect_below`] for a `dir` known not to match, nor any
    /// directory above it: one match per entry, not one per leading
    /// directory, and only into the subdirectories a line reaches.
    fn collect_reached(&self, root: &Path, dir: &str, out: &mut Vec<String>) {
        if !self.reaches_below(dir) {
            return;
        }
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            return;
        };
        for entry in entries.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if name == ".git" {
                continue;
            }
            let path = format!("{dir}/{name}");
            match entry.file_type() {
                Ok(t) if t.is_dir() => {
                    if self.matcher.matched(&path, true).is_ignore() {
                        walk_files(root, &path, out);
                    } else {
                        self.collect_reached(root, &path, out);
                    }
                }
                Ok(t) if t.is_file() && self.matcher.matched(&path, false).is_ignore() => {
                    out.push(path)
                }
                _ => {}
            }
        }
    }
}

impl Reach {
    /// The reach of one line of the file; `None` for blanks, comments,
    /// negations (they never add a file) and unanchored lines.
    fn of(line: &str) -> Option<Reach> {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            return None;
        }
        let body = line.strip_suffix('/').unwrap_or(line);
        if !body.contains('/') {
            return None;
        }
        let pattern = body.strip_prefix('/').unwrap_or(body);
        let literal = &pattern[..pattern.find(['*', '?', '[', '\\']).unwrap_or(pattern.len())];
        Some(Reach {
            dir: literal
                .rfind('/')
                .map_or_else(String::new, |i| literal[..i].to_owned()),
            depth: (!pattern.contains("**")).then(|| pattern.split('/').count()),
        })
    }
}

/// Whether `path` lies strictly below the directory `dir`.
fn is_below(path: &str, dir: &str) -> bool {
    path.strip_prefix(dir)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// The files of the user's tree at `workdir` that `include` selects (see
/// the module doc), relative to the root, sorted.
pub(super) fn included_files(workdir: &Path, include: &Include) -> Result<Vec<String>, GitError> {
    let mut out = Vec::new();
    for entry in git::ignored::ignored_entries(workdir)? {
        if entry.is_dir {
            include.collect_below(workdir, &entry.path, &mut out);
        } else if include.matches(&entry.path, false) {
            out.push(entry.path);
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Regular files under `rel` (relative paths); symlinks are not followed,
/// and a nested repository's `.git` (file or directory) is left out.
fn walk_files(root: &Path, rel: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if name == ".git" {
            continue;
        }
        let path = format!("{rel}/{name}");
        match entry.file_type() {
            Ok(t) if t.is_dir() => walk_files(root, &path, out),
            Ok(t) if t.is_file() => out.push(path),
            _ => {}
        }
    }
}

#[cfg(test)]
#[path = "include_tests.rs"]
mod tests;
