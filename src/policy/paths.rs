//! Paths as the rules compare them: every spelling of a home directory
//! becomes `~`, and `.`/`..` are folded, before a rule asks "is this the
//! user's key, startup file or home?".
//!
//! A home is spelled `~`, `~user`, `$HOME`, `${HOME}`, the value of `$HOME`
//! (`/home/alice`), the home of the passwd entry of the user orch runs as
//! (which differs from `$HOME` when a tool or a test sets its own), either
//! of those with its symlinks resolved, or a conventional home
//! (`/home/NAME`, `/Users/NAME`, `/root`). An absolute path that exists in
//! part is also compared after resolving the symlinks of the part that
//! exists, so `/tmp/link/.ssh/id_rsa` with `/tmp/link -> $HOME` is a key.
//!
//! Not resolved: a relative path with `..` leading out of the working
//! directory (the policy does not know where that is; the kernel sandbox
//! bounds it), and a symlink created on the same command line (see the
//! link rule in [`super::outside`]).

use std::ffi::{CStr, CString};
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

/// The absolute spellings of the home directories of the user orch runs
/// as, longest first, none of them `/`.
fn homes() -> &'static [String] {
    static HOMES: OnceLock<Vec<String>> = OnceLock::new();
    HOMES.get_or_init(|| {
        let mut dirs: Vec<PathBuf> = Vec::new();
        if let Some(h) = crate::environment::current()
            .var_os(crate::environment::HOME)
            .filter(|h| !h.is_empty())
        {
            dirs.push(PathBuf::from(h));
        }
        let uid = rustix::process::getuid().as_raw();
        dirs.extend(passwd_home_of_uid(uid));
        let mut out: Vec<String> = Vec::new();
        for d in dirs {
            let resolved = d.canonicalize().ok();
            for p in std::iter::once(d).chain(resolved) {
                let s = fold(&p.to_string_lossy());
                if s != "/" && s.starts_with('/') && !out.contains(&s) {
                    out.push(s);
                }
            }
        }
        out.sort_by_key(|s| std::cmp::Reverse(s.len()));
        out
    })
}

/// The home directory of the passwd entry of `uid`.
pub(crate) fn passwd_home_of_uid(uid: libc::uid_t) -> Option<PathBuf> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: all-zero bytes are a valid `passwd` (null pointers, zero ids).
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the strings getpwuid_r
    // writes live in `buf`, which outlives their use below.
    let rc =
        unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
    home_of(rc, found, &pw)
}

/// The home directory of the passwd entry named `name` (`~name`).
fn passwd_home_of_name(name: &str) -> Option<PathBuf> {
    let cname = CString::new(name).ok()?;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: all-zero bytes are a valid `passwd` (null pointers, zero ids).
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: `cname` is NUL-terminated, `pw` and `found` are writable
    // locals, and the strings getpwnam_r writes live in `buf` (`buf.len()`
    // bytes), which outlives their use in `home_of`.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        )
    };
    home_of(rc, found, &pw)
}

fn home_of(rc: libc::c_int, found: *mut libc::passwd, pw: &libc::passwd) -> Option<PathBuf> {
    if rc != 0 || found.is_null() || pw.pw_dir.is_null() {
        return None;
    }
    // SAFETY: getpw*_r succeeded, so `pw_dir` points at a NUL-terminated
    // string inside the caller's buffer.
    let dir = unsafe { CStr::from_ptr(pw.pw_dir) };
    let dir = dir.to_string_lossy().into_owned();
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

/// `path` with `.` and empty components dropped and `..` folded where it
/// follows a named component (a leading `..` stays).
pub(crate) fn fold(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut comps: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => match comps.last() {
                Some(&last) if last != ".." => {
                    comps.pop();
                }
                // `/..` is `/`.
                _ if absolute => {}
                _ => comps.push(".."),
            },
            c => comps.push(c),
        }
    }
    let joined = comps.join("/");
    if absolute {
        format!("/{joined}")
    } else if joined.is_empty() {
        ".".to_owned()
    } else {
        joined
    }
}

/// The path relative to a home directory when `path` is in one (`""` for
/// the home itself), whatever the spelling (see the module docs).
pub(crate) fn home_relative(path: &str) -> Option<String> {
    let p = path.trim();
    // `~`, `~/x`, `~user/x`, `$HOME/x`, `${HOME}/x`.
    let written = ["$HOME", "${HOME}"]
        .iter()
        .find_map(|h| p.strip_prefix(h))
        .or_else(|| {
            let rest = p.strip_prefix('~')?;
            let end = rest.find('/').unwrap_or(rest.len());
            let user = &rest[..end];
            // `~user` names a home when the user exists; `~+`, `~-` are dirs.
            (user.is_empty() || passwd_home_of_name(user).is_some()).then_some(&rest[end..])
        });
    if let Some(rest) = written {
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        let folded = fold(&format!("/{rest}"));
        return Some(folded.trim_start_matches('/').to_owned());
    }
    if !p.starts_with('/') {
        return None;
    }
    let folded = fold(p);
    if let Some(rel) = under_a_home(&folded) {
        return Some(rel);
    }
    // The part that exists, with its symlinks resolved.
    let resolved = resolve_existing(Path::new(&folded))?;
    under_a_home(&fold(&resolved.to_string_lossy()))
}

/// `folded` relative to one of [`homes`] or a conventional home.
fn under_a_home(folded: &str) -> Option<String> {
    let strip = |home: &str| -> Option<String> {
        let rest = folded.strip_prefix(home)?;
        (rest.is_empty() || rest.starts_with('/')).then(|| rest.trim_start_matches('/').to_owned())
    };
    if let Some(rel) = homes().iter().find_map(|h| strip(h)) {
        return Some(rel);
    }
    let comps: Vec<&str> = folded.trim_start_matches('/').split('/').collect();
    match comps.as_slice() {
        ["root", rest @ ..] => Some(rest.join("/")),
        ["home" | "Users", user, rest @ ..] if !user.is_empty() => Some(rest.join("/")),
        _ => None,
    }
}

/// `path` with the symlinks of its longest existing prefix resolved (the
/// rest appended); `None` when nothing of it exists but `/`, or when
/// nothing changes.
fn resolve_existing(path: &Path) -> Option<PathBuf> {
    let comps: Vec<Component> = path.components().collect();
    // At most a few lookups: paths are short, and each is one syscall.
    for cut in (2..=comps.len()).rev() {
        let prefix: PathBuf = comps[..cut].iter().collect();
        if let Ok(real) = prefix.canonicalize() {
            let mut out = real;
            out.extend(&comps[cut..]);
            return (out != path).then_some(out);
        }
    }
    None
}

/// A path that stays inside the worktree: relative, no `..` above it, no
/// variable or substitution whose value is unknown.
pub(crate) fn stays_inside(path: &str) -> bool {
    if path.starts_with('/') || path.starts_with('~') || path.contains('$') || path.contains('`') {
        return false;
    }
    let mut depth = 0i32;
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => depth += 1,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding() {
        assert_eq!(fold("/a/./b/../c//d/"), "/a/c/d");
        assert_eq!(fold("/.."), "/");
        assert_eq!(fold("../x/../.."), "../..");
        assert_eq!(fold("a/.."), ".");
    }

    #[test]
    fn every_spelling_of_a_home() {
        let home = std::env::var("HOME").unwrap();
        let real = passwd_home_of_uid(rustix::process::getuid().as_raw()).unwrap();
        let real = real.to_string_lossy().into_owned();
        for (p, want) in [
            ("~".to_owned(), Some("")),
            ("~/.ssh/id_rsa".to_owned(), Some(".ssh/id_rsa")),
            ("$HOME/.bashrc".to_owned(), Some(".bashrc")),
            ("${HOME}".to_owned(), Some("")),
            ("~root/.ssh".to_owned(), Some(".ssh")),
            (format!("{home}/.ssh/id_ed25519"), Some(".ssh/id_ed25519")),
            (format!("{home}/x/../.bashrc"), Some(".bashrc")),
            (format!("{real}/.netrc"), Some(".netrc")),
            (
                "/home/alice/.aws/credentials".to_owned(),
                Some(".aws/credentials"),
            ),
            ("/tmp/../root/.ssh".to_owned(), Some(".ssh")),
            ("~/a/../.ssh".to_owned(), Some(".ssh")),
            ("~nosuchuser-orch/.ssh".to_owned(), None),
            ("$HOMEX/.ssh".to_owned(), None),
            ("/etc/passwd".to_owned(), None),
            (".ssh/id_rsa".to_owned(), None),
        ] {
            assert_eq!(home_relative(&p).as_deref(), want, "{p}");
        }
    }

    #[test]
    fn a_symlink_to_a_home_is_seen_through() {
        let t = tempfile::tempdir().unwrap();
        let link = t.path().join("h");
        std::os::unix::fs::symlink(std::env::var("HOME").unwrap(), &link).unwrap();
        let p = format!("{}/.ssh/id_rsa", link.display());
        assert_eq!(home_relative(&p).as_deref(), Some(".ssh/id_rsa"));
    }
}
