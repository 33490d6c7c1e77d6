//! `read_file`: a text file with numbered lines (like `cat -n`), a window
//! (`offset`, `limit`), and caps on line length and total size.

use std::io::{BufRead, BufReader};
use std::path::Path;

use super::args::{Args, io_message};
use super::fence::{self, Access};
use super::outcome::ToolOutcome;

/// Lines returned when the model gives no `limit`.
pub(super) const DEFAULT_LIMIT: u64 = 2000;
/// Characters of numbered text returned at most per call.
pub(super) const MAX_CHARS: usize = 32 * 1024;
/// Characters shown of one very long line.
pub(super) const MAX_LINE_CHARS: usize = 2000;

pub(crate) fn run(root: &Path, args: &Args) -> Result<ToolOutcome, String> {
    let path = args.string("path", "a file path relative to the worktree root")?;
    let offset = args.opt_u64("offset")?.unwrap_or(1).max(1);
    let limit = args.opt_u64("limit")?.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 {
        return Err("argument `limit` must be at least 1".to_owned());
    }
    let f = fence::resolve(root, &path, Access::Read)?;
    let meta = std::fs::metadata(&f.abs).map_err(|e| io_message(&path, &e))?;
    if meta.is_dir() {
        return Err(format!(
            "{path} is a directory; use list_files to see its contents"
        ));
    }
    let file = std::fs::File::open(&f.abs).map_err(|e| io_message(&path, &e))?;
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let mut total: u64 = 0;
    let mut text = String::new();
    let mut last_shown: u64 = 0;
    let mut char_cap_hit = false;
    let end = offset.saturating_add(limit);
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| io_message(&path, &e))?;
        if n == 0 {
            break;
        }
        total += 1;
        let binary = |why: &str| {
            format!(
                "{path} looks binary ({why}) and is not shown; inspect it with bash (e.g. `file {path}` or `xxd {path} | head`)"
            )
        };
        if line.contains(&0) {
            return Err(binary("it contains NUL bytes"));
        }
        let Ok(s) = std::str::from_utf8(&line) else {
            return Err(binary(&format!("line {total} is not valid UTF-8")));
        };
        if total < offset || total >= end || char_cap_hit {
            continue;
        }
        let entry = numbered_line(total, s);
        if text.len() + entry.len() > MAX_CHARS && last_shown > 0 {
            char_cap_hit = true;
            continue;
        }
        text.push_str(&entry);
        last_shown = total;
    }
    if total == 0 {
        return Ok(ToolOutcome::ok(
            "(empty file; total_lines: 0, truncated: false)".to_owned(),
            format!("read_file {} (empty)", f.rel),
        ));
    }
    if offset > total {
        return Err(format!(
            "argument `offset` is {offset} but {path} has only {total} lines"
        ));
    }
    let truncated = last_shown < total;
    text.push_str(&format!("(total_lines: {total}, truncated: {truncated}"));
    if truncated {
        text.push_str(&format!(
            "; showing lines {offset}-{last_shown}, continue with offset={}",
            last_shown + 1
        ));
    }
    text.push(')');
    Ok(ToolOutcome::ok(
        text,
        format!(
            "read_file {} (lines {offset}-{last_shown} of {total})",
            f.rel
        ),
    ))
}

/// Line `n` as `read_file` shows it: the number right-aligned in 6 columns,
/// a tab, the line without its line ending (cut after [`MAX_LINE_CHARS`]
/// characters, saying so), and a newline. The first message's named files
/// (`agent::context_files`) are shown the same way.
pub(crate) fn numbered_line(n: u64, line: &str) -> String {
    let s = line.trim_end_matches('\n').trim_end_matches('\r');
    let count = s.chars().count();
    if count > MAX_LINE_CHARS {
        let cut: String = s.chars().take(MAX_LINE_CHARS).collect();
        format!("{n:>6}\t{cut}… [line cut: {count} chars]\n")
    } else {
        format!("{n:>6}\t{s}\n")
    }
}

#[cfg(test)]
mod tests {
    use crate::tools::test_support::{call, ctx};
    use serde_json::json;

    #[tokio::test]
    async fn numbered_lines_and_window() {
        let (dir, ctx) = ctx();
        let body: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        std::fs::write(dir.path().join("f.txt"), body).unwrap();
        let out = call(&ctx, "read_file", json!({"path": "f.txt"})).await;
        assert!(!out.is_error);
        assert!(
            out.content.starts_with("     1\tline 1\n     2\tline 2\n"),
            "{}",
            out.content
        );
        assert!(
            out.content
                .ends_with("    10\tline 10\n(total_lines: 10, truncated: false)"),
            "{}",
            out.content
        );
        assert_eq!(out.summary, "read_file f.txt (lines 1-10 of 10)");

        let out = call(
            &ctx,
            "read_file",
            json!({"path": "f.txt", "offset": 3, "limit": 2}),
        )
        .await;
        assert_eq!(
            out.content,
            "     3\tline 3\n     4\tline 4\n(total_lines: 10, truncated: true; showing lines 3-4, continue with offset=5)"
        );

        let out = call(&ctx, "read_file", json!({"path": "f.txt", "offset": 11})).await;
        assert!(out.is_error);
        assert!(out.content.contains("has only 10 lines"), "{}", out.content);
    }

    #[tokio::test]
    async fn no_trailing_newline_crlf_and_empty() {
        let (dir, ctx) = ctx();
        std::fs::write(dir.path().join("a"), "x\r\ny").unwrap();
        let out = call(&ctx, "read_file", json!({"path": "a"})).await;
        assert_eq!(
            out.content,
            "     1\tx\n     2\ty\n(total_lines: 2, truncated: false)"
        );
        std::fs::write(dir.path().join("e"), "").unwrap();
        let out = call(&ctx, "read_file", json!({"path": "e"})).await;
        assert_eq!(
            out.content,
            "(empty file; total_lines: 0, truncated: false)"
        );
    }

    #[tokio::test]
    async fn char_cap_truncates() {
        let (dir, ctx) = ctx();
        let body: String = (0..5000).map(|i| format!("{i:0>40}\n")).collect();
        std::fs::write(dir.path().join("big"), body).unwrap();
        let out = call(&ctx, "read_file", json!({"path": "big"})).await;
        assert!(out.content.len() < super::MAX_CHARS + 200);
        assert!(
            out.content
                .contains("(total_lines: 5000, truncated: true; showing lines 1-"),
            "{}",
            &out.content[out.content.len() - 120..]
        );
    }

    #[tokio::test]
    async fn binary_and_missing_and_directory() {
        let (dir, ctx) = ctx();
        std::fs::write(dir.path().join("bin"), b"ab\0cd").unwrap();
        std::fs::write(dir.path().join("latin1"), b"caf\xe9\n").unwrap();
        let out = call(&ctx, "read_file", json!({"path": "bin"})).await;
        assert!(out.is_error);
        assert!(
            out.content.contains("looks binary (it contains NUL bytes)"),
            "{}",
            out.content
        );
        let out = call(&ctx, "read_file", json!({"path": "latin1"})).await;
        assert!(
            out.content.contains("line 1 is not valid UTF-8"),
            "{}",
            out.content
        );
        let out = call(&ctx, "read_file", json!({"path": "nope.txt"})).await;
        assert_eq!(
            out.content,
            "error: read_file: nope.txt: no such file or directory"
        );
        assert_eq!(
            out.summary,
            "error: read_file: nope.txt: no such file or directory"
        );
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let out = call(&ctx, "read_file", json!({"path": "d"})).await;
        assert!(out.content.contains("is a directory; use list_files"));
        let out = call(&ctx, "read_file", json!({"path": "../x"})).await;
        assert!(
            out.content.contains("escapes the worktree root"),
            "{}",
            out.content
        );
        let out = call(&ctx, "read_file", json!({"path": "/etc/hostname"})).await;
        assert!(
            out.content.contains("outside the worktree root"),
            "{}",
            out.content
        );
    }
}
