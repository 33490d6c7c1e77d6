//! `list_files`: files under a directory, skipping what `.gitignore` (and
//! `.ignore`) exclude, never `.git`; also the shared walker of `grep`.
//!
//! Ignore files are honoured whether or not a `.git` directory is present
//! (`require_git(false)`): a linked worktree has a `.git` *file*, and the rules
//! the user wrote apply either way. Only ignore files from the worktree root
//! down are read (`parents(false)`), never ones above it, and not the user's
//! global excludes, so listings depend on the repository alone. The walk
//! starts at the root (for the root's rules) but only descends into the
//! requested directory.

use std::path::{Path, PathBuf};

use ignore::WalkBuilder;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::args::{Args, io_message};
use super::fence::{self, Access, Fenced};
use super::outcome::ToolOutcome;

/// Paths listed at most per call.
pub(super) const MAX_ENTRIES: usize = 500;

pub(crate) fn run(root: &Path, args: &Args) -> Result<ToolOutcome, String> {
    let path = args
        .opt_string("path", "a directory relative to the worktree root")?
        .unwrap_or_else(|| ".".to_owned());
    let pattern = args.opt_string(
        "pattern",
        "a gitignore-style glob such as *.rs or src/**/*.md",
    )?;
    let target = fence::resolve(root, &path, Access::Read)?;
    let mut listed = String::new();
    let mut shown = 0usize;
    let total = walk_files(root, &target, "pattern", pattern.as_deref(), |_, rel| {
        if shown < MAX_ENTRIES {
            listed.push_str(rel);
            listed.push('\n');
            shown += 1;
        }
        true
    })?;
    let filter = pattern
        .as_deref()
        .map(|p| format!(" matching `{p}`"))
        .unwrap_or_default();
    if total == 0 {
        return Ok(ToolOutcome::ok(
            format!("no files{filter} in {}", target.rel),
            format!("list_files {} (0 files)", target.rel),
        ));
    }
    if total > shown {
        listed.push_str(&format!(
            "[… {} more files not listed; narrow with path or pattern …]",
            total - shown
        ));
    }
    Ok(ToolOutcome::ok(
        listed,
        format!("list_files {}{filter} ({total} files)", target.rel),
    ))
}

/// Calls `visit(abs, rel)` for each non-ignored file under `target` whose
/// root-relative path matches `glob` (gitignore syntax), in path order, until
/// `visit` returns false. Returns how many files matched.
pub(crate) fn walk_files(
    root: &Path,
    target: &Fenced,
    glob_arg: &str,
    glob: Option<&str>,
    mut visit: impl FnMut(&Path, &str) -> bool,
) -> Result<usize, String> {
    let target_rel: PathBuf = target
        .abs
        .strip_prefix(root)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    if target_rel
        .components()
        .next()
        .is_some_and(|c| c.as_os_str() == ".git")
    {
        return Err(format!(
            "{} is inside .git, which is not listed or searched",
            target.rel
        ));
    }
    let matcher = match glob {
        Some(g) if !g.trim().is_empty() => Some(
            build_glob(root, g)
                .map_err(|e| format!("argument `{glob_arg}` is not a valid glob: {e}"))?,
        ),
        _ => None,
    };
    let matches = |rel: &Path| {
        matcher
            .as_ref()
            .is_none_or(|m| m.matched_path_or_any_parents(rel, false).is_ignore())
    };
    let meta = std::fs::metadata(&target.abs).map_err(|e| io_message(&target.rel, &e))?;
    if !meta.is_dir() {
        let hit = matches(&target_rel);
        if hit {
            visit(&target.abs, &target.rel);
        }
        return Ok(usize::from(hit));
    }
    let mut builder = WalkBuilder::new(root);
    let root_owned = root.to_path_buf();
    let scope = target_rel.clone();
    builder
        .hidden(false)
        .parents(false)
        .require_git(false)
        .git_global(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |e| {
            if e.file_name() == ".git" {
                return false;
            }
            let rel = e.path().strip_prefix(&root_owned).unwrap_or(e.path());
            rel.starts_with(&scope) || scope.starts_with(rel)
        });
    let mut count = 0;
    let mut going = true;
    for entry in builder.build().flatten() {
        if entry.file_type().is_none_or(|t| t.is_dir()) {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root) else {
            continue;
        };
        if !rel.starts_with(&target_rel) || !matches(rel) {
            continue;
        }
        count += 1;
        if going {
            going = visit(entry.path(), &rel.to_string_lossy());
        }
    }
    Ok(count)
}

fn build_glob(root: &Path, glob: &str) -> Result<Gitignore, ignore::Error> {
    let mut builder = GitignoreBuilder::new(root);
    builder.add_line(None, glob)?;
    builder.build()
}

#[cfg(test)]
mod tests {
    use crate::tools::test_support::{call, ctx};
    use serde_json::json;

    fn tree(root: &std::path::Path) {
        for f in [
            "src/main.rs",
            "src/lib.rs",
            "src/deep/x.rs",
            "README.md",
            "target/debug/out.rs",
            "notes.log",
            ".github/ci.yml",
            ".git/HEAD",
            "build/gen.rs",
        ] {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "fn main() {}\n").unwrap();
        }
        std::fs::write(root.join(".gitignore"), "target/\n*.log\n").unwrap();
        std::fs::write(root.join("src/.gitignore"), "deep/\n").unwrap();
        std::fs::write(root.join(".ignore"), "build/\n").unwrap();
    }

    #[tokio::test]
    async fn respects_gitignore_and_skips_git() {
        let (dir, ctx) = ctx();
        tree(dir.path());
        let out = call(&ctx, "list_files", json!({})).await;
        assert!(!out.is_error, "{}", out.content);
        assert_eq!(
            out.content,
            ".github/ci.yml\n.gitignore\n.ignore\nREADME.md\nsrc/.gitignore\nsrc/lib.rs\nsrc/main.rs\n"
        );
        assert_eq!(out.summary, "list_files . (7 files)");
    }

    #[tokio::test]
    async fn path_and_pattern() {
        let (dir, ctx) = ctx();
        tree(dir.path());
        let out = call(
            &ctx,
            "list_files",
            json!({"path": "src", "pattern": "*.rs"}),
        )
        .await;
        assert_eq!(out.content, "src/lib.rs\nsrc/main.rs\n");
        let out = call(&ctx, "list_files", json!({"pattern": "*.md"})).await;
        assert_eq!(out.content, "README.md\n");
        let out = call(&ctx, "list_files", json!({"pattern": "*.none"})).await;
        assert!(!out.is_error);
        assert_eq!(out.content, "no files matching `*.none` in .");
        let out = call(&ctx, "list_files", json!({"path": ".git"})).await;
        assert!(out.is_error);
        let out = call(&ctx, "list_files", json!({"path": "../"})).await;
        assert!(out.is_error);
    }

    #[tokio::test]
    async fn capped() {
        let (dir, ctx) = ctx();
        for i in 0..(super::MAX_ENTRIES + 7) {
            std::fs::write(dir.path().join(format!("f{i:04}")), "").unwrap();
        }
        let out = call(&ctx, "list_files", json!({})).await;
        assert_eq!(out.content.lines().count(), super::MAX_ENTRIES + 1);
        assert!(
            out.content
                .ends_with("[… 7 more files not listed; narrow with path or pattern …]")
        );
    }
}
