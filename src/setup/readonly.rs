//! Which commands count as reconnaissance: the only ones `run_command` runs
//! (before a plan, and always in `--plan-only`), and the only ones a plan
//! step may mark `read`.
//!
//! The check is an allowlist over the command as the deny list parses it
//! ([`crate::policy::simple_commands`]: quoting, `;`/`&&`/`|`, `$(…)`,
//! `bash -c`, `sudo` are all seen through): every simple command must be a
//! known read-only program (or a known read-only subcommand of a package
//! manager, or a lone `--version`), and nothing may be redirected into a
//! file. Anything else is not read-only, so an unknown program is refused
//! rather than trusted. `sudo`/`su`/`doas` are never read-only.
//!
//! The kernel sandbox backs this up: reconnaissance commands run under the
//! read-only profile, so a command this check misjudged still cannot write.

use crate::policy::{SimpleCommand, simple_commands};

/// Programs that only read, whatever their arguments (apart from the ones
/// [`writes_anyway`] knows).
const READ_ONLY_PROGRAMS: &[&str] = &[
    "cat",
    "ls",
    "head",
    "tail",
    "grep",
    "egrep",
    "fgrep",
    "uname",
    "which",
    "command",
    "type",
    "echo",
    "printf",
    "id",
    "whoami",
    "groups",
    "df",
    "du",
    "free",
    "nproc",
    "lsb_release",
    "hostname",
    "hostnamectl",
    "pwd",
    "stat",
    "file",
    "wc",
    "sort",
    "uniq",
    "cut",
    "tr",
    "readlink",
    "realpath",
    "basename",
    "dirname",
    "test",
    "[",
    "true",
    "false",
    "env",
    "printenv",
    "date",
    "getconf",
    "ldd",
    "lscpu",
    "arch",
    "locale",
    "sed",
    "find",
    "tree",
    "dpkg-query",
    "apt-cache",
    "ps",
    "uptime",
    "diff",
    "cmp",
    "md5sum",
    "sha256sum",
    "column",
];

/// Package managers and tools with subcommands that only read.
const READ_ONLY_SUBCOMMANDS: &[(&str, &[&str])] = &[
    (
        "apt",
        &["list", "show", "policy", "search", "depends", "rdepends"],
    ),
    (
        "dpkg",
        &[
            "-l",
            "-s",
            "-L",
            "-S",
            "--list",
            "--status",
            "--print-architecture",
        ],
    ),
    ("rpm", &["-q", "-qa", "-qi", "-ql", "--query"]),
    ("dnf", &["list", "info", "search", "repolist", "--version"]),
    ("yum", &["list", "info", "search", "repolist"]),
    ("pacman", &["-Q", "-Qi", "-Ql", "-Ss", "-Si"]),
    ("apk", &["info", "search", "list", "policy"]),
    (
        "brew",
        &["list", "info", "search", "config", "--prefix", "doctor"],
    ),
    (
        "pip",
        &["list", "show", "freeze", "check", "--version", "-V"],
    ),
    (
        "pip3",
        &["list", "show", "freeze", "check", "--version", "-V"],
    ),
    (
        "npm",
        &[
            "ls",
            "list",
            "view",
            "config",
            "--version",
            "-v",
            "root",
            "prefix",
        ],
    ),
    (
        "git",
        &[
            "--version",
            "status",
            "log",
            "rev-parse",
            "config",
            "remote",
            "branch",
        ],
    ),
    (
        "systemctl",
        &["status", "is-active", "is-enabled", "list-units"],
    ),
    ("uv", &["--version", "python", "pip"]),
    ("rustup", &["show", "--version", "toolchain", "target"]),
    ("cargo", &["--version", "-V", "metadata", "tree"]),
    ("go", &["version", "env"]),
    ("snap", &["list", "info", "version"]),
];

/// Arguments that ask any program for its version or usage only.
const VERSION_ARGS: &[&str] = &[
    "--version",
    "-V",
    "-v",
    "version",
    "-version",
    "--help",
    "-h",
];

/// Why `command` is not read-only, or `None` when it is.
pub(crate) fn not_read_only(command: &str) -> Option<String> {
    let Some(units) = simple_commands(command) else {
        return Some("the command is too complex to check".into());
    };
    if units.is_empty() {
        return Some("the command is empty".into());
    }
    units.iter().find_map(unit_problem)
}

fn unit_problem(unit: &SimpleCommand) -> Option<String> {
    if let Some(w) = unit
        .raw
        .iter()
        .find(|w| matches!(base(w), "sudo" | "su" | "doas"))
    {
        return Some(format!("`{w}` runs commands as another user"));
    }
    for (op, target) in &unit.redirects {
        if op.contains('>') && !harmless_target(target) {
            return Some(format!("it writes to `{target}` (`{op}`)"));
        }
    }
    // Only redirections (`> /dev/null`): nothing runs.
    let program = unit.argv.first()?;
    let name = base(program);
    let args = &unit.argv[1..];
    if let Some(why) = writes_anyway(name, args) {
        return Some(why);
    }
    if READ_ONLY_PROGRAMS.contains(&name) {
        return None;
    }
    if args.len() == 1 && VERSION_ARGS.contains(&args[0].as_str()) {
        return None;
    }
    if let Some((_, subs)) = READ_ONLY_SUBCOMMANDS.iter().find(|(p, _)| *p == name) {
        let first = args
            .iter()
            .find(|a| !a.starts_with("--") || subs.contains(&a.as_str()));
        if first.is_some_and(|a| subs.contains(&a.as_str())) && !pip_writes(name, args) {
            return None;
        }
    }
    // `python3 -m pip list`, `python3 -c 'import sys; print(sys.version)'`
    // cannot be told apart from code that writes: only versions are trusted.
    Some(format!(
        "`{}` is not a known read-only command",
        unit.argv.join(" ")
    ))
}

/// Read-only programs used with an argument that writes.
fn writes_anyway(name: &str, args: &[String]) -> Option<String> {
    let has = |a: &str| {
        args.iter()
            .any(|x| x == a || x.starts_with(&format!("{a}=")))
    };
    match name {
        "sed"
            if args
                .iter()
                .any(|a| a.starts_with("-i") || a == "--in-place") =>
        {
            Some("`sed -i` edits files".into())
        }
        "find" if has("-delete") || has("-fprint") || has("-fprintf") || has("-fls") => {
            Some("`find` with an action that writes".into())
        }
        "env" | "command" if !args.is_empty() && !args[0].starts_with('-') => {
            // Unwrapping already checked the program they run.
            None
        }
        "sort" if has("-o") || has("--output") => Some("`sort -o` writes a file".into()),
        "git"
            if args.first().is_some_and(|a| a == "config")
                && !has("--get")
                && !has("-l")
                && !has("--list") =>
        {
            Some("`git config` without `--get`/`--list` can write".into())
        }
        _ => None,
    }
}

/// `uv pip install …` / `uv python install …`: read-only only for listing.
fn pip_writes(name: &str, args: &[String]) -> bool {
    name == "uv"
        && args
            .iter()
            .any(|a| matches!(a.as_str(), "install" | "uninstall" | "sync" | "pin"))
}

fn harmless_target(target: &str) -> bool {
    matches!(target, "/dev/null" | "/dev/stdout" | "/dev/stderr" | "-")
        || target
            .trim_start_matches('&')
            .chars()
            .all(|c| c.is_ascii_digit() || c == '-')
}

fn base(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnaissance_commands_are_read_only() {
        for c in [
            "uname -m",
            "cat /etc/os-release",
            "python3 --version",
            "command -v python3 && python3 --version 2>&1",
            "ls -la ~ | head -5",
            "dpkg -l python3-venv",
            "apt list --installed 2>/dev/null | grep python",
            "pip list",
            "node -v",
            "git config --get user.name",
        ] {
            assert_eq!(not_read_only(c), None, "{c}");
        }
    }

    #[test]
    fn writes_and_unknown_programs_are_not() {
        for (c, why) in [
            ("touch canary", "not a known read-only"),
            ("echo hi > canary", "writes to `canary`"),
            ("python3 -m venv venv", "not a known read-only"),
            ("sudo apt-get install -y curl", "another user"),
            ("apt install curl", "not a known read-only"),
            ("pip install requests", "not a known read-only"),
            ("sed -i s/a/b/ f", "sed -i"),
            ("find . -delete", "find"),
            ("bash -c 'rm -rf x'", "not a known read-only"),
            ("cat x | tee y", "`tee y`"),
            ("uv pip install x", "not a known read-only"),
            ("git config user.name x", "git config"),
            ("ls; $(echo touch) f", "not a known read-only"),
        ] {
            let got = not_read_only(c).unwrap_or_default();
            assert!(got.contains(why), "{c}: {got}");
        }
    }
}
