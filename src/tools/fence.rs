//! The path fence: every path a tool touches resolves inside the worktree.
//!
//! A path is taken relative to the root (an absolute path is accepted only if
//! it lies inside). It is first normalized lexically (`.` and `..` removed;
//! a `..` that climbs above the root is refused), then resolved through the
//! file system: the deepest existing ancestor is canonicalized, so symlinks
//! that lead outside — including ones a `bash` call planted — are refused.
//! Dangling symlinks are refused too (where they point cannot be checked).
//! The resolved, canonical path is what the tool then uses.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// What the caller will do with the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read it.
    Read,
    /// Create, change or delete it: `.git` is off limits.
    Write,
}

/// A path that passed the fence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced {
    /// Canonical absolute path (inside the root).
    pub abs: PathBuf,
    /// The same path relative to the root, `/`-separated; `.` for the root.
    pub rel: String,
}

/// Resolves `input` against the canonical `root`, or says why it is refused.
pub fn resolve(root: &Path, input: &str, access: Access) -> Result<Fenced, String> {
    if input.trim().is_empty() {
        return Err("the path is empty; give a path relative to the worktree root".to_owned());
    }
    if input.contains('\0') {
        return Err(format!(
            "path `{}` contains a NUL byte",
            input.escape_debug()
        ));
    }
    let given = Path::new(input);
    let joined = if given.is_absolute() {
        given.to_path_buf()
    } else {
        root.join(given)
    };
    let mut norm = PathBuf::new();
    for comp in joined.components() {
        match comp {
            Component::CurDir => {}
            Component::ParentDir => {
                norm.pop();
            }
            other => norm.push(other),
        }
    }
    if !given.is_absolute() && !norm.starts_with(root) {
        return Err(format!(
            "path `{input}` escapes the worktree root (`..` leads outside it); use a path inside the worktree"
        ));
    }

    let mut existing = norm.clone();
    let mut missing: Vec<OsString> = Vec::new();
    let canonical = loop {
        match existing.canonicalize() {
            Ok(c) => break c,
            Err(_) => {
                if existing
                    .symlink_metadata()
                    .is_ok_and(|m| m.file_type().is_symlink())
                {
                    return Err(format!(
                        "path `{input}` goes through a symlink whose target does not exist"
                    ));
                }
                match existing.file_name() {
                    Some(name) => {
                        missing.push(name.to_owned());
                        existing.pop();
                    }
                    None => return Err(format!("path `{input}` cannot be resolved")),
                }
            }
        }
    };
    let mut abs = canonical;
    for name in missing.iter().rev() {
        abs.push(name);
    }
    let Ok(rel_path) = abs.strip_prefix(root) else {
        return Err(if given.is_absolute() && !norm.starts_with(root) {
            format!(
                "path `{input}` is outside the worktree root {}; use a path inside it",
                root.display()
            )
        } else {
            format!("path `{input}` resolves outside the worktree through a symlink")
        });
    };
    let rel = if rel_path.as_os_str().is_empty() {
        ".".to_owned()
    } else {
        rel_path.to_string_lossy().replace('\\', "/")
    };
    if access == Access::Write && rel_path.components().any(|c| c.as_os_str() == ".git") {
        return Err(format!(
            "path `{input}` is inside .git; git internals cannot be changed with file tools"
        ));
    }
    Ok(Fenced { abs, rel })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn root() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(r.join("src")).unwrap();
        std::fs::write(r.join("src/a.rs"), "x").unwrap();
        (d, r)
    }

    #[test]
    fn relative_and_absolute_inside() {
        let (_d, r) = root();
        let f = resolve(&r, "src/a.rs", Access::Read).unwrap();
        assert_eq!(f.rel, "src/a.rs");
        assert_eq!(f.abs, r.join("src/a.rs"));
        assert_eq!(
            resolve(&r, "./src/../src/a.rs", Access::Read).unwrap().rel,
            "src/a.rs"
        );
        assert_eq!(
            resolve(&r, r.join("src/a.rs").to_str().unwrap(), Access::Read)
                .unwrap()
                .rel,
            "src/a.rs"
        );
        assert_eq!(resolve(&r, ".", Access::Read).unwrap().rel, ".");
        // Not existing yet: the deepest existing ancestor is resolved.
        assert_eq!(
            resolve(&r, "new/dir/b.rs", Access::Write).unwrap().abs,
            r.join("new/dir/b.rs")
        );
    }

    #[test]
    fn escapes_are_refused() {
        let (_d, r) = root();
        for p in ["..", "../x", "src/../../x", "/etc/passwd", "/"] {
            let err = resolve(&r, p, Access::Read).unwrap_err();
            assert!(
                err.contains("escapes") || err.contains("outside"),
                "{p}: {err}"
            );
        }
        assert!(resolve(&r, "", Access::Read).unwrap_err().contains("empty"));
    }

    #[test]
    fn symlinks_out_are_refused_and_in_are_allowed() {
        let (_d, r) = root();
        symlink("/etc", r.join("leak")).unwrap();
        symlink(r.join("src"), r.join("inside")).unwrap();
        symlink("src/a.rs", r.join("rel-link")).unwrap();
        symlink("/nonexistent/target", r.join("dangling")).unwrap();
        let err = resolve(&r, "leak/passwd", Access::Read).unwrap_err();
        assert!(err.contains("through a symlink"), "{err}");
        assert!(resolve(&r, "leak/newfile", Access::Write).is_err());
        assert!(resolve(&r, "leak", Access::Read).is_err());
        assert_eq!(
            resolve(&r, "inside/a.rs", Access::Read).unwrap().rel,
            "src/a.rs"
        );
        assert_eq!(
            resolve(&r, "rel-link", Access::Write).unwrap().rel,
            "src/a.rs"
        );
        assert!(
            resolve(&r, "dangling", Access::Write)
                .unwrap_err()
                .contains("does not exist")
        );
    }

    #[test]
    fn git_internals_are_read_only() {
        let (_d, r) = root();
        std::fs::create_dir(r.join(".git")).unwrap();
        std::fs::write(r.join(".git/HEAD"), "ref").unwrap();
        assert!(resolve(&r, ".git/HEAD", Access::Read).is_ok());
        for p in [
            ".git/HEAD",
            ".git",
            ".git/hooks/pre-commit",
            "src/../.git/config",
        ] {
            assert!(
                resolve(&r, p, Access::Write).unwrap_err().contains(".git"),
                "{p}"
            );
        }
        assert!(resolve(&r, ".gitignore", Access::Write).is_ok());
    }
}
