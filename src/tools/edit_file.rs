//! `edit_file`: replaces an exact string in a file; the match must be unique
//! unless `replace_all`. Writes atomically and reports a diff. When the exact
//! text is not there, the one place it matches after whitespace
//! normalisation is edited instead, and the result says so ([`fuzzy`]).

use std::path::Path;

use super::args::{Args, io_message};
use super::fence::{self, Access, Fenced};
use super::fuzzy::{self, Found};
use super::outcome::ToolOutcome;
use super::write_file::{atomic_write, report};

pub(crate) fn run(root: &Path, args: &Args) -> Result<ToolOutcome, String> {
    let path = args.string("path", "a file path relative to the worktree root")?;
    let old_string = args.string("old_string", "the exact text to replace")?;
    let new_string = args.string("new_string", "the replacement text")?;
    let replace_all = args.opt_bool("replace_all")?.unwrap_or(false);
    if old_string.is_empty() {
        return Err("argument `old_string` is empty; give the exact text to replace (use write_file to create or overwrite a file)".to_owned());
    }
    if old_string == new_string {
        return Err("`old_string` and `new_string` are identical; nothing would change".to_owned());
    }
    let f = fence::resolve(root, &path, Access::Write)?;
    let bytes = match std::fs::read(&f.abs) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("{path}: no such file; use write_file to create it"));
        }
        Err(e) => return Err(io_message(&path, &e)),
    };
    if bytes.contains(&0) {
        return Err(format!(
            "{path} looks binary (it contains NUL bytes) and cannot be edited; change binary files with bash"
        ));
    }
    let Ok(text) = String::from_utf8(bytes) else {
        return Err(format!(
            "{path} is not valid UTF-8 text and cannot be edited"
        ));
    };
    let count = text.matches(old_string.as_str()).count();
    if count == 0 {
        return fuzzy_edit(&f, &path, &text, &old_string, &new_string);
    }
    if count > 1 && !replace_all {
        return Err(format!(
            "`old_string` matches {count} times in {path}; include more surrounding lines to make it unique, or set replace_all: true"
        ));
    }
    let new_text = if replace_all {
        text.replace(old_string.as_str(), &new_string)
    } else {
        text.replacen(old_string.as_str(), &new_string, 1)
    };
    atomic_write(&f, new_text.as_bytes()).map_err(|e| io_message(&path, &e))?;
    let note = format!("{count} replacement{}", if count == 1 { "" } else { "s" });
    Ok(report("edit_file", &f, Some(&text), &new_text, Some(&note)))
}

/// `old_string` is not in the file exactly: applies it where it matches
/// after whitespace normalisation when that is one place, and says so;
/// otherwise the not-found error, with the places when there are several.
fn fuzzy_edit(
    f: &Fenced,
    path: &str,
    text: &str,
    old_string: &str,
    new_string: &str,
) -> Result<ToolOutcome, String> {
    let mut msg = format!(
        "`old_string` was not found in {path}; it must match the file exactly, including whitespace and indentation (read_file the region first)"
    );
    match fuzzy::find(text, old_string) {
        Found::One(m) => {
            let new_text = m.apply(text, new_string);
            atomic_write(f, new_text.as_bytes()).map_err(|e| io_message(path, &e))?;
            let note = format!(
                "1 replacement; matched after whitespace normalisation at line {}",
                m.line
            );
            return Ok(report("edit_file", f, Some(text), &new_text, Some(&note)));
        }
        Found::Several(lines) => {
            msg.push_str(&format!(
                "; after whitespace normalisation it matches {} places ({}); include more surrounding lines to make it unique",
                lines.len(),
                line_list(&lines)
            ));
        }
        Found::None => {
            let trimmed = old_string.trim();
            if trimmed != old_string && !trimmed.is_empty() && text.contains(trimmed) {
                msg.push_str("; the text matches without its leading/trailing whitespace");
            } else if text.contains("\r\n")
                && !old_string.contains('\r')
                && old_string.contains('\n')
            {
                msg.push_str("; note the file uses CRLF line endings");
            }
        }
    }
    Err(msg)
}

/// `lines 2 and 6`, `lines 2, 6 and 9`; at most [`MAX_LISTED`] of them.
fn line_list(lines: &[usize]) -> String {
    const MAX_LISTED: usize = 10;
    let shown: Vec<String> = lines
        .iter()
        .take(MAX_LISTED)
        .map(usize::to_string)
        .collect();
    let more = if lines.len() > MAX_LISTED {
        ", …"
    } else {
        ""
    };
    match shown.split_last() {
        Some((last, rest)) if !rest.is_empty() && more.is_empty() => {
            format!("lines {} and {last}", rest.join(", "))
        }
        _ => format!("lines {}{more}", shown.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use crate::tools::test_support::{call, ctx};
    use serde_json::json;

    #[tokio::test]
    async fn unique_edit_and_diff() {
        let (dir, ctx) = ctx();
        std::fs::write(dir.path().join("a.rs"), "fn a() {}\nfn b() {}\n").unwrap();
        let out = call(&ctx, "edit_file", json!({"path": "a.rs", "old_string": "fn b() {}", "new_string": "fn b() {\n    a();\n}"})).await;
        assert!(!out.is_error, "{}", out.content);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.rs")).unwrap(),
            "fn a() {}\nfn b() {\n    a();\n}\n"
        );
        assert!(
            out.content
                .starts_with("updated a.rs (+3 −1); 1 replacement\n--- a/a.rs\n+++ b/a.rs\n"),
            "{}",
            out.content
        );
        assert_eq!(out.summary, "edit_file a.rs (+3 −1)");
        assert_eq!(out.changed_path.as_deref(), Some("a.rs"));
    }

    #[tokio::test]
    async fn not_found_and_not_unique() {
        let (dir, ctx) = ctx();
        std::fs::write(dir.path().join("a.txt"), "x\nx\nx\n  y\n").unwrap();
        let out = call(
            &ctx,
            "edit_file",
            json!({"path": "a.txt", "old_string": "zzz", "new_string": "q"}),
        )
        .await;
        assert!(out.is_error);
        assert!(
            out.content
                .starts_with("error: edit_file: `old_string` was not found in a.txt"),
            "{}",
            out.content
        );

        let out = call(
            &ctx,
            "edit_file",
            json!({"path": "a.txt", "old_string": "x", "new_string": "q"}),
        )
        .await;
        assert!(out.is_error);
        assert!(
            out.content.contains("matches 3 times in a.txt"),
            "{}",
            out.content
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "x\nx\nx\n  y\n"
        );

        // Not exact, but one line after whitespace normalisation.
        let out = call(
            &ctx,
            "edit_file",
            json!({"path": "a.txt", "old_string": " y \n", "new_string": "q\n"}),
        )
        .await;
        assert!(
            out.content.starts_with(
                "updated a.txt (+1 −1); 1 replacement; matched after whitespace normalisation at line 4\n"
            ),
            "{}",
            out.content
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "x\nx\nx\n q\n"
        );
        // Within a line, the whitespace hint stays.
        std::fs::write(dir.path().join("b.txt"), "x = foo(1)\n").unwrap();
        let out = call(
            &ctx,
            "edit_file",
            json!({"path": "b.txt", "old_string": " foo(1) ", "new_string": "bar(1)"}),
        )
        .await;
        assert!(
            out.content
                .contains("matches without its leading/trailing whitespace"),
            "{}",
            out.content
        );

        let out = call(
            &ctx,
            "edit_file",
            json!({"path": "missing.txt", "old_string": "a", "new_string": "b"}),
        )
        .await;
        assert!(
            out.content.contains("no such file; use write_file"),
            "{}",
            out.content
        );
        let out = call(
            &ctx,
            "edit_file",
            json!({"path": "a.txt", "old_string": "", "new_string": "b"}),
        )
        .await;
        assert!(
            out.content.contains("`old_string` is empty"),
            "{}",
            out.content
        );
    }

    #[tokio::test]
    async fn binary_and_non_utf8_files_are_refused_unchanged() {
        let (dir, ctx) = ctx();
        let files: [(&str, &[u8], &str); 2] = [
            ("bin.dat", b"abc\0def abc", "contains NUL bytes"),
            ("latin1.txt", b"caf\xe9 abc\n", "not valid UTF-8"),
        ];
        for (name, bytes, why) in files {
            std::fs::write(dir.path().join(name), bytes).unwrap();
            let out = call(
                &ctx,
                "edit_file",
                json!({"path": name, "old_string": "abc", "new_string": "xyz"}),
            )
            .await;
            assert!(out.is_error, "{name}");
            assert!(
                out.content
                    .starts_with(&format!("error: edit_file: {name} "))
                    && out.content.contains(why),
                "{}",
                out.content
            );
            assert_eq!(std::fs::read(dir.path().join(name)).unwrap(), bytes);
        }
    }

    #[tokio::test]
    async fn replace_all() {
        let (dir, ctx) = ctx();
        std::fs::write(dir.path().join("a.txt"), "x-x-x").unwrap();
        let out = call(
            &ctx,
            "edit_file",
            json!({"path": "a.txt", "old_string": "x", "new_string": "yy", "replace_all": true}),
        )
        .await;
        assert!(!out.is_error, "{}", out.content);
        assert!(out.content.contains("3 replacements"));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "yy-yy-yy"
        );
    }
}
