//! The deny list's metadata rule (issue 25.5), the fallback where the
//! kernel cannot keep metadata outside the lane read-only: `chmod`,
//! `chown`, `chgrp`, `touch`, `setfacl`, `chattr`, `setfattr` of a path
//! outside the lane are refused with a message.
//!
//! Where the sandbox's read-only mounts apply
//! ([`crate::sandbox::metadata_enforced`]: Landlock plus a mount namespace,
//! as root or with user namespaces) this rule is off: the kernel refuses
//! such changes whatever the command line looks like, and the lane's own
//! absolute paths (which this rule cannot tell from others) stay usable.
//!
//! "Outside" as written: `~…`, `$HOME…`/`${HOME}…`, an absolute path other
//! than the agent's private temp dir (`$TMPDIR…`, `<temp>/orch-tmp-…`) and
//! `/dev/…` (absolute paths into the lane are refused too: the rule cannot
//! tell them from the user's files), or a relative path that climbs out
//! with `..`.

use super::programs::basename;
use super::unwrap::Unit;

/// Programs that change a file's mode, owner, times or attributes.
const METADATA_PROGRAMS: &[&str] = &[
    "chmod", "chown", "chgrp", "touch", "setfacl", "chattr", "setfattr",
];

/// Why `u` is refused, when metadata is not enforced by the kernel.
pub(super) fn metadata_rule(u: &Unit) -> Option<String> {
    if crate::sandbox::metadata_enforced() {
        return None;
    }
    rule(u)
}

fn rule(u: &Unit) -> Option<String> {
    let prog = basename(u.argv.first()?);
    if !METADATA_PROGRAMS.contains(&prog) {
        return None;
    }
    let target = u.argv[1..]
        .iter()
        .filter(|a| !a.starts_with('-') && !a.starts_with('+'))
        .find(|a| outside(a))?;
    Some(format!(
        "`{prog}` of `{target}` changes a file outside the lane (its mode, owner, times or attributes), and this machine's sandbox cannot keep those read-only; change only files in the lane"
    ))
}

fn outside(path: &str) -> bool {
    if ["~", "$HOME", "${HOME}"]
        .iter()
        .any(|h| path == *h || path.starts_with(&format!("{h}/")))
        || path.starts_with('~')
    {
        return true;
    }
    if path.starts_with('/') {
        // The agent's private temp dir (`TMPDIR`, `orch-tmp-…` in orch's
        // temp dir) and device files are its own; any other absolute path
        // may be the user's (a repository in /tmp too).
        let private = std::env::temp_dir().join("orch-tmp-");
        return !(path.starts_with(&*private.to_string_lossy()) || path.starts_with("/dev/"));
    }
    if path.starts_with("$TMPDIR") || path.starts_with("${TMPDIR}") {
        return false;
    }
    let mut depth: i32 = 0;
    for part in path.split('/') {
        match part {
            ".." => depth -= 1,
            "" | "." => {}
            _ => depth += 1,
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(words: &[&str]) -> Unit {
        let argv: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
        Unit {
            raw: argv.clone(),
            argv,
            redirects: Vec::new(),
            note: None,
            background: false,
        }
    }

    #[test]
    fn metadata_outside_the_lane_is_refused_and_inside_it_is_not() {
        for denied in [
            &["chmod", "000", "~/.bashrc"][..],
            &["chmod", "777", "/home/u/repo/calc.py"],
            &["chown", "1:1", "$HOME/.profile"],
            &["chgrp", "x", "${HOME}/notes"],
            &["touch", "-d", "2001-01-01", "/etc/hosts"],
            &["setfacl", "-m", "u:x:rwx", "~"],
            &["chattr", "+i", "../../calc.py"],
            &["setfattr", "-n", "user.x", "-v", "1", "/srv/data"],
            &["chmod", "644", "/tmp/repo/calc.py"],
            &["chmod", "-R", "u+w", "~user/x"],
        ] {
            assert!(rule(&unit(denied)).is_some(), "{denied:?}");
        }
        for allowed in [
            &["chmod", "+x", "script.sh"][..],
            &["chmod", "600", "src/../key.pem"],
            &["chmod", "-R", "755", "."],
            &["touch", "new_file.py"],
            &["touch", "/tmp/orch-tmp-Ab12/marker"],
            &["chmod", "+x", "$TMPDIR/run.sh"],
            &["touch", "/dev/null"],
            &["ls", "-l", "/etc/hosts"],
            &["chown", "-R", "me:me", "build"],
        ] {
            assert_eq!(rule(&unit(allowed)), None, "{allowed:?}");
        }
    }
}
