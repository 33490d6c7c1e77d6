//! Project instructions: the `AGENTS.md` / `CLAUDE.md` files a repository
//! keeps for coding agents, put into every stage's system prompt.
//!
//! Where they are read from: the run's base commit (the tree orch works
//! on), never the user's working tree, so uncommitted edits are not read and
//! a stage cannot plant instructions for a later one. In each directory from
//! the repository root down to the directories of the paths the task and the
//! issue name (root first, nearest last, as Codex orders them), orch reads:
//!
//! - `AGENTS.override.md` if present, else `AGENTS.md` (Codex's documented
//!   convention: at most one of the two per directory);
//! - then `CLAUDE.md` (Claude Code's file), unless it has the same content
//!   as the AGENTS file just read (a common symlink or copy).
//!
//! A symlink is followed once, inside the tree. Empty files are skipped. The
//! total is capped at [`INSTRUCTIONS_BUDGET`] bytes; the cut is said in the
//! prompt and in the record.
//!
//! These files are the repository's text, not orch's: a run on an untrusted
//! branch reads them (turn them off with `--no-project-instructions` or
//! `project_instructions: false` in the pipeline file).

use crate::git::{CommitId, GitError, git_err};
use git2::{ObjectType, Oid, Repository, Tree};
use std::collections::BTreeSet;
use std::path::Path;

/// Bytes of instruction text a stage's system prompt holds at most.
pub(crate) const INSTRUCTIONS_BUDGET: usize = 16 * 1024;

/// Directories named in the task and issue text looked at, at most (a long
/// issue naming hundreds of paths must not make the prompt a directory walk).
const MAX_HINT_DIRS: usize = 32;

/// One instruction file that was found (a record type of the action log's
/// `project_instructions` event, so it lives with the run record).
pub(crate) use crate::runlog::event::InstructionFile;

/// The instructions of one stage: the files and the prompt section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ProjectInstructions {
    /// Every file found, root first.
    pub files: Vec<InstructionFile>,
    /// The system-prompt section (empty when no file was found).
    pub text: String,
    /// True when the budget cut the text.
    pub cut: bool,
}

/// Reads the instruction files of `commit` in the repository at `common`,
/// for a stage whose task and issue are `hints` (paths named there add
/// their directories).
pub(crate) fn load(
    common: &Path,
    commit: &CommitId,
    hints: &[&str],
) -> Result<ProjectInstructions, GitError> {
    let handle = crate::git::Repo::at(common);
    let repo = handle.git2()?;
    let tree = commit_tree(repo, commit)?;
    let dirs = directories(&tree, hints);
    let mut found: Vec<(String, Oid, Vec<u8>)> = Vec::new();
    for dir in &dirs {
        let agents = read_first(repo, &tree, dir, &["AGENTS.override.md", "AGENTS.md"]);
        let claude = read_first(repo, &tree, dir, &["CLAUDE.md"]);
        let agents_blob = agents.as_ref().map(|(_, oid, _)| *oid);
        found.extend(agents);
        if let Some(claude) = claude
            && Some(claude.1) != agents_blob
        {
            found.push(claude);
        }
    }
    Ok(render(found))
}

/// The tree of `commit` in `repo` (skills are read from it too).
pub(crate) fn commit_tree<'r>(
    repo: &'r Repository,
    commit: &CommitId,
) -> Result<Tree<'r>, GitError> {
    let oid = Oid::from_str(commit).map_err(git_err(format!("parse commit id {commit}")))?;
    repo.find_commit(oid)
        .and_then(|c| c.tree())
        .map_err(git_err(format!("read the tree of {commit}")))
}

/// The root and every directory on the way to the paths the hints name
/// that exist in `tree` (a file names its directory), root first, then by
/// depth and name.
fn directories(tree: &Tree<'_>, hints: &[&str]) -> Vec<String> {
    let mut dirs: BTreeSet<(usize, String)> = BTreeSet::new();
    dirs.insert((0, String::new()));
    let mut named = 0;
    for token in hints.iter().flat_map(|h| path_tokens(h)) {
        if named >= MAX_HINT_DIRS {
            break;
        }
        let Ok(entry) = tree.get_path(Path::new(&token)) else {
            continue;
        };
        let dir = if entry.kind() == Some(ObjectType::Tree) {
            token.as_str()
        } else {
            token.rsplit_once('/').map_or("", |(d, _)| d)
        };
        if dir.is_empty() {
            continue;
        }
        named += 1;
        let mut prefix = String::new();
        for (depth, part) in dir.split('/').enumerate() {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            dirs.insert((depth + 1, prefix.clone()));
        }
    }
    dirs.into_iter().map(|(_, d)| d).collect()
}

/// Words of `text` that look like relative paths (`src/a.rs`, `./docs/`),
/// normalised (no `./`, no trailing `/`), without `..` or absolute paths.
fn path_tokens(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || "`'\"()[]{}<>,;".contains(c))
        .map(|w| w.trim_end_matches([':', '.', '!', '?']))
        .filter(|w| w.contains('/') && !w.starts_with('/') && !w.contains("://"))
        .map(|w| w.strip_prefix("./").unwrap_or(w).trim_end_matches('/'))
        .filter(|w| !w.is_empty() && !w.split('/').any(|p| p.is_empty() || p == ".."))
        .map(str::to_owned)
        .collect()
}

/// The first of `names` in `dir` that is a non-empty blob (a symlink is
/// followed once, inside the tree): (path, blob id, bytes).
fn read_first(
    repo: &Repository,
    tree: &Tree<'_>,
    dir: &str,
    names: &[&str],
) -> Option<(String, Oid, Vec<u8>)> {
    for name in names {
        let path = if dir.is_empty() {
            (*name).to_owned()
        } else {
            format!("{dir}/{name}")
        };
        let Ok(entry) = tree.get_path(Path::new(&path)) else {
            continue;
        };
        let Ok(blob) = repo.find_blob(entry.id()) else {
            continue;
        };
        let (oid, bytes) = if entry.filemode() == 0o120000 {
            // A symlink's blob is its target, relative to its directory.
            let target = String::from_utf8_lossy(blob.content()).into_owned();
            let joined = if dir.is_empty() {
                target
            } else {
                format!("{dir}/{target}")
            };
            let Some(resolved) = normalise(&joined) else {
                continue;
            };
            let Some(b) = tree
                .get_path(Path::new(&resolved))
                .ok()
                .and_then(|e| repo.find_blob(e.id()).ok())
            else {
                continue;
            };
            (b.id(), b.content().to_vec())
        } else {
            (blob.id(), blob.content().to_vec())
        };
        if String::from_utf8_lossy(&bytes).trim().is_empty() {
            continue;
        }
        return Some((path, oid, bytes));
    }
    None
}

/// `a/./b/../c` → `a/c`; `None` when it leaves the tree.
pub(crate) fn normalise(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// The prompt section for `found` (root first), cut at the budget.
fn render(found: Vec<(String, Oid, Vec<u8>)>) -> ProjectInstructions {
    if found.is_empty() {
        return ProjectInstructions::default();
    }
    let mut text = String::from(
        "# Project instructions\n\nThe repository keeps these instruction files for coding agents \
         (root first; a later file is closer to the work and takes precedence where they differ). \
         Follow them unless they conflict with your task.\n",
    );
    let mut files = Vec::new();
    let mut left = INSTRUCTIONS_BUDGET;
    let mut cut = false;
    for (path, oid, bytes) in found {
        let content = String::from_utf8_lossy(&bytes).into_owned();
        let body = content.trim();
        let mut take = body.len().min(left);
        while !body.is_char_boundary(take) {
            take -= 1;
        }
        files.push(InstructionFile {
            path: path.clone(),
            blob: oid.to_string(),
            bytes: bytes.len(),
            included: take,
        });
        if take == 0 {
            cut = true;
            continue;
        }
        text.push_str(&format!("\n## {path}\n\n"));
        text.push_str(&body[..take]);
        text.push('\n');
        if take < body.len() {
            cut = true;
            text.push_str(&format!(
                "\n[… cut: project instructions are limited to {INSTRUCTIONS_BUDGET} bytes; {} more bytes of {path} not shown …]\n",
                body.len() - take
            ));
        }
        left -= take;
    }
    let skipped: Vec<&str> = files
        .iter()
        .filter(|f| f.included == 0)
        .map(|f| f.path.as_str())
        .collect();
    if !skipped.is_empty() {
        text.push_str(&format!(
            "\n[… not shown, over the {INSTRUCTIONS_BUDGET}-byte limit: {} …]\n",
            skipped.join(", ")
        ));
    }
    ProjectInstructions { files, text, cut }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_tokens_find_relative_paths_only() {
        let t = path_tokens(
            "Fix `src/api/handler.rs`: see ./docs/ and (lib/x.py), not /etc/passwd, ../up, https://x.y/z or a/../b.",
        );
        assert_eq!(t, ["src/api/handler.rs", "docs", "lib/x.py"]);
    }

    #[test]
    fn normalise_stays_inside() {
        assert_eq!(normalise("a/./b/../c").as_deref(), Some("a/c"));
        assert_eq!(normalise("a/../../x"), None);
    }

    #[test]
    fn render_cuts_at_the_budget_and_says_so() {
        let big = vec![b'x'; INSTRUCTIONS_BUDGET - 10];
        let found = vec![
            ("AGENTS.md".to_owned(), Oid::ZERO_SHA1, big),
            ("a/AGENTS.md".to_owned(), Oid::ZERO_SHA1, vec![b'y'; 100]),
            ("a/b/AGENTS.md".to_owned(), Oid::ZERO_SHA1, b"z".to_vec()),
        ];
        let out = render(found);
        assert!(out.cut);
        assert_eq!(
            out.files.iter().map(|f| f.included).collect::<Vec<_>>(),
            [INSTRUCTIONS_BUDGET - 10, 10, 0]
        );
        assert!(out.text.contains("90 more bytes of a/AGENTS.md not shown"));
        assert!(out.text.contains("limit: a/b/AGENTS.md"));
        let order = |s: &str| out.text.find(s).unwrap();
        assert!(order("## AGENTS.md") < order("## a/AGENTS.md"));
    }

    #[test]
    fn override_replaces_agents_md_and_a_claude_md_copy_is_read_once() {
        let repo = crate::git::testutil::TestRepo::empty();
        repo.write("AGENTS.md", "root agents\n");
        repo.write("CLAUDE.md", "root agents\n");
        repo.write("pkg/AGENTS.md", "pkg agents\n");
        repo.write("pkg/AGENTS.override.md", "pkg override\n");
        repo.write("pkg/CLAUDE.md", "pkg claude\n");
        repo.write("pkg/mod.py", "x = 1\n");
        repo.write("empty/AGENTS.md", "  \n");
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-q", "-m", "c"]);
        let head = repo.rev("HEAD");
        let found = load(&repo.git_dir(), &head, &["Edit pkg/mod.py and empty/x."]).unwrap();
        let paths: Vec<&str> = found.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            ["AGENTS.md", "pkg/AGENTS.override.md", "pkg/CLAUDE.md"]
        );
        assert_eq!(found.files[0].blob, repo.rev("HEAD:AGENTS.md"));
        assert!(!found.text.contains("pkg agents"), "{}", found.text);
        assert!(!found.cut);
    }
}
