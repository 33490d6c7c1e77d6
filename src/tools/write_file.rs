//! `write_file`: creates or replaces a file atomically (a temp file in the same
//! directory, then rename) and reports a unified diff. Also the shared write
//! and diff helpers of `edit_file`.
//!
//! The temp file is not fsynced: renames keep readers from seeing a half-written
//! file, and durability comes from the stage commit that follows.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use similar::{ChangeTag, TextDiff};

use super::args::{Args, io_message};
use super::fence::{self, Access, Fenced};
use super::outcome::ToolOutcome;

/// Bytes of diff shown to the model (head + tail beyond this).
pub(super) const MAX_DIFF_BYTES: usize = 8 * 1024;

pub(crate) fn run(root: &Path, args: &Args) -> Result<ToolOutcome, String> {
    let path = args.string("path", "a file path relative to the worktree root")?;
    let content = args.string("content", "the complete new file content")?;
    let f = fence::resolve(root, &path, Access::Write)?;
    let old = match std::fs::read(&f.abs) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) if f.abs.is_dir() => return Err(format!("{path} is a directory, not a file ({e})")),
        Err(e) => return Err(io_message(&path, &e)),
    };
    if let Some(parent) = f.abs.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io_message(&path, &e))?;
    }
    atomic_write(&f, content.as_bytes()).map_err(|e| io_message(&path, &e))?;
    let old_text = old.as_deref().map(String::from_utf8_lossy);
    Ok(report(
        "write_file",
        &f,
        old_text.as_deref(),
        &content,
        None,
    ))
}

/// Writes `bytes` to `f.abs` through a temp file and rename, keeping the
/// permissions of a file it replaces (0644 for a new one).
pub(crate) fn atomic_write(f: &Fenced, bytes: &[u8]) -> std::io::Result<()> {
    let dir = f.abs.parent().unwrap_or(Path::new("."));
    let perms = std::fs::metadata(&f.abs)
        .map(|m| m.permissions())
        .unwrap_or_else(|_| std::fs::Permissions::from_mode(0o644));
    let mut tmp = tempfile::Builder::new()
        .prefix(".orch-write-")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().set_permissions(perms)?;
    tmp.persist(&f.abs).map_err(|e| e.error)?;
    Ok(())
}

/// The outcome of a write: a headline, the diff (capped), and `changed_path`.
pub(crate) fn report(
    tool: &str,
    f: &Fenced,
    old: Option<&str>,
    new: &str,
    note: Option<&str>,
) -> ToolOutcome {
    let rel = &f.rel;
    let diff = TextDiff::from_lines(old.unwrap_or(""), new);
    let (mut added, mut removed) = (0usize, 0usize);
    for change in diff.iter_all_changes() {
        match change.tag() {
            ChangeTag::Insert => added += 1,
            ChangeTag::Delete => removed += 1,
            ChangeTag::Equal => {}
        }
    }
    let old_header = if old.is_some() {
        format!("a/{rel}")
    } else {
        "/dev/null".to_owned()
    };
    let unified = diff
        .unified_diff()
        .context_radius(3)
        .header(&old_header, &format!("b/{rel}"))
        .to_string();
    let note = note.map(|n| format!("; {n}")).unwrap_or_default();
    let (headline, stat) = match old {
        None => (
            format!("created {rel} (+{added}){note}"),
            format!("(new, +{added})"),
        ),
        Some(o) if o == new => (
            format!("{rel} unchanged (identical content){note}"),
            "(unchanged)".to_owned(),
        ),
        Some(_) => (
            format!("updated {rel} (+{added} −{removed}){note}"),
            format!("(+{added} −{removed})"),
        ),
    };
    let content = if unified.is_empty() {
        headline
    } else {
        format!(
            "{headline}\n{}",
            crate::text::head_tail_lines(&unified, MAX_DIFF_BYTES)
        )
    };
    let mut out = ToolOutcome::ok(content, format!("{tool} {rel} {stat}"));
    out.changed_path = Some(rel.clone());
    out
}

#[cfg(test)]
mod tests {
    use crate::tools::test_support::{call, ctx};
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;

    #[tokio::test]
    async fn creates_dirs_and_reports_diff() {
        let (dir, ctx) = ctx();
        let out = call(
            &ctx,
            "write_file",
            json!({"path": "a/b/c.txt", "content": "one\ntwo\n"}),
        )
        .await;
        assert!(!out.is_error, "{}", out.content);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
            "one\ntwo\n"
        );
        assert_eq!(
            out.content,
            "created a/b/c.txt (+2)\n--- /dev/null\n+++ b/a/b/c.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n"
        );
        assert_eq!(out.summary, "write_file a/b/c.txt (new, +2)");
        assert_eq!(out.changed_path.as_deref(), Some("a/b/c.txt"));
        let mode = std::fs::metadata(dir.path().join("a/b/c.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);

        let out = call(
            &ctx,
            "write_file",
            json!({"path": "a/b/c.txt", "content": "one\n2\n"}),
        )
        .await;
        assert!(
            out.content
                .starts_with("updated a/b/c.txt (+1 −1)\n--- a/a/b/c.txt\n+++ b/a/b/c.txt\n"),
            "{}",
            out.content
        );
        assert!(out.content.contains("-two\n+2\n"));
        assert_eq!(out.summary, "write_file a/b/c.txt (+1 −1)");
    }

    #[tokio::test]
    async fn atomic_and_keeps_permissions() {
        let (dir, ctx) = ctx();
        let p = dir.path().join("run.sh");
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        let inode_before = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&p).unwrap());
        let out = call(
            &ctx,
            "write_file",
            json!({"path": "run.sh", "content": "#!/bin/sh\necho hi\n"}),
        )
        .await;
        assert!(!out.is_error);
        let meta = std::fs::metadata(&p).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o755);
        // Replaced by rename: a new inode, and no temp file left behind.
        assert_ne!(std::os::unix::fs::MetadataExt::ino(&meta), inode_before);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["run.sh"]);
    }

    #[tokio::test]
    async fn refuses_git_dirs_and_escapes() {
        let (dir, ctx) = ctx();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        let out = call(
            &ctx,
            "write_file",
            json!({"path": ".git/config", "content": "x"}),
        )
        .await;
        assert!(out.is_error);
        assert!(out.content.contains("inside .git"), "{}", out.content);
        let out = call(
            &ctx,
            "write_file",
            json!({"path": "../escape.txt", "content": "x"}),
        )
        .await;
        assert!(out.is_error);
        assert!(!dir.path().parent().unwrap().join("escape.txt").exists());
        let out = call(&ctx, "write_file", json!({"path": ".", "content": "x"})).await;
        assert!(out.is_error);
        let out = call(&ctx, "write_file", json!({"path": "x"})).await;
        assert!(
            out.content.contains("argument `content` is required"),
            "{}",
            out.content
        );
    }
}
