//! `grep`: regex search over non-ignored text files, `path:line:text` lines,
//! capped in matches and bytes. Binary files (a NUL in the first 8 KiB) and
//! files over [`MAX_FILE_BYTES`] are skipped.

use std::path::Path;

use regex::RegexBuilder;

use super::args::Args;
use super::fence::{self, Access};
use super::list_files::walk_files;
use super::outcome::ToolOutcome;
use crate::text::one_line;

/// Matching lines returned at most.
pub(super) const MAX_MATCHES: usize = 200;
/// Bytes of output returned at most.
pub(super) const MAX_BYTES: usize = 16 * 1024;
/// Characters shown of one matching line.
pub(super) const MAX_LINE_CHARS: usize = 300;
/// Larger files are not searched.
pub(super) const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

pub(crate) fn run(root: &Path, args: &Args) -> Result<ToolOutcome, String> {
    let pattern = args.string("pattern", "a regular expression (Rust regex syntax)")?;
    let path = args
        .opt_string("path", "a file or directory relative to the worktree root")?
        .unwrap_or_else(|| ".".to_owned());
    let glob = args.opt_string("glob", "a gitignore-style glob such as *.rs")?;
    let re = RegexBuilder::new(&pattern)
        .size_limit(1 << 22)
        .build()
        .map_err(|e| {
            format!(
                "argument `pattern` is not a valid regex: {}",
                one_line(&e.to_string().replace('\n', " "), 200)
            )
        })?;
    let target = fence::resolve(root, &path, Access::Read)?;
    let mut out = String::new();
    let mut matches = 0usize;
    let mut capped = false;
    let files = walk_files(root, &target, "glob", glob.as_deref(), |abs, rel| {
        if std::fs::metadata(abs)
            .map(|m| m.len() > MAX_FILE_BYTES)
            .unwrap_or(true)
        {
            return true;
        }
        let Ok(bytes) = std::fs::read(abs) else {
            return true;
        };
        if bytes[..bytes.len().min(8192)].contains(&0) {
            return true;
        }
        let text = String::from_utf8_lossy(&bytes);
        for (i, line) in text.lines().enumerate() {
            if !re.is_match(line) {
                continue;
            }
            let shown = if line.chars().count() > MAX_LINE_CHARS {
                format!("{}…", line.chars().take(MAX_LINE_CHARS).collect::<String>())
            } else {
                line.to_owned()
            };
            let entry = format!("{rel}:{}:{shown}\n", i + 1);
            if matches >= MAX_MATCHES || out.len() + entry.len() > MAX_BYTES {
                capped = true;
                return false;
            }
            out.push_str(&entry);
            matches += 1;
        }
        true
    })?;
    let shown_pattern = one_line(&pattern, 40);
    if matches == 0 {
        return Ok(ToolOutcome::ok(
            format!(
                "no matches for `{pattern}` in {} ({files} files searched)",
                target.rel
            ),
            format!("grep `{shown_pattern}` → 0 matches"),
        ));
    }
    if capped {
        out.push_str(&format!(
            "[… stopped after {matches} matches; narrow the pattern, path or glob …]"
        ));
    }
    let more = if capped { "+" } else { "" };
    Ok(ToolOutcome::ok(
        out,
        format!("grep `{shown_pattern}` → {matches}{more} matches"),
    ))
}

#[cfg(test)]
mod tests {
    use crate::tools::test_support::{call, ctx};
    use serde_json::json;

    #[tokio::test]
    async fn finds_with_glob_and_respects_ignores() {
        let (dir, ctx) = ctx();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("target")).unwrap();
        std::fs::write(root.join("src/a.rs"), "fn alpha() {}\nfn beta() {}\n").unwrap();
        std::fs::write(root.join("src/b.md"), "alpha in docs\n").unwrap();
        std::fs::write(root.join("target/gen.rs"), "fn alpha() {}\n").unwrap();
        std::fs::write(root.join("bin.dat"), b"alpha\0").unwrap();
        std::fs::write(root.join(".gitignore"), "target/\n").unwrap();

        let out = call(&ctx, "grep", json!({"pattern": "fn al.*"})).await;
        assert_eq!(out.content, "src/a.rs:1:fn alpha() {}\n");
        let out = call(&ctx, "grep", json!({"pattern": "alpha", "glob": "*.md"})).await;
        assert_eq!(out.content, "src/b.md:1:alpha in docs\n");
        assert_eq!(out.summary, "grep `alpha` → 1 matches");
        let out = call(&ctx, "grep", json!({"pattern": "beta", "path": "src/a.rs"})).await;
        assert_eq!(out.content, "src/a.rs:2:fn beta() {}\n");
        let out = call(&ctx, "grep", json!({"pattern": "zeta"})).await;
        assert!(!out.is_error);
        assert!(
            out.content.starts_with("no matches for `zeta` in ."),
            "{}",
            out.content
        );
    }

    #[tokio::test]
    async fn bad_regex_and_cap() {
        let (dir, ctx) = ctx();
        let out = call(&ctx, "grep", json!({"pattern": "fn ("})).await;
        assert!(out.is_error);
        assert!(
            out.content
                .starts_with("error: grep: argument `pattern` is not a valid regex"),
            "{}",
            out.content
        );
        let body: String = (0..1000).map(|i| format!("hit {i}\n")).collect();
        std::fs::write(dir.path().join("many.txt"), body).unwrap();
        let out = call(&ctx, "grep", json!({"pattern": "hit"})).await;
        assert_eq!(out.content.lines().count(), super::MAX_MATCHES + 1);
        assert!(
            out.content
                .ends_with("[… stopped after 200 matches; narrow the pattern, path or glob …]")
        );
        assert_eq!(out.summary, "grep `hit` → 200+ matches");
    }
}
