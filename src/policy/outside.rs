//! Built-in rules for what lies outside the lane: the user's keys,
//! credentials and startup files, system files, other processes'
//! environments, the user's crontab, and orch itself.
//!
//! The kernel sandbox refuses all of these where it is active; the rules
//! give the model a clear reason instead of a permission error, and they
//! are what remains where the sandbox is unavailable.

use super::paths::{fold, home_relative};
use super::programs::basename;
use super::unwrap::Unit;

/// Files under the home directory that hold keys or credentials.
const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".netrc",
    ".git-credentials",
    ".config/gh",
    ".docker/config.json",
    ".kube/config",
    ".pgpass",
];

/// Files under the home directory that run or configure programs for the
/// user: writing one plants code or settings outside the run.
const HOME_STARTUP: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".config/fish",
    ".gitconfig",
    ".config/git",
    ".config/autostart",
    ".config/systemd",
];

/// System directories whose files no agent should write.
const SYSTEM_WRITES: &[&str] = &[
    "/etc/",
    "/usr/",
    "/bin/",
    "/sbin/",
    "/boot/",
    "/lib/",
    "/lib64/",
    "/var/spool/cron",
];

/// `path` relative to a home directory, in any spelling of it (`~`,
/// `$HOME`, `/home/alice`, the passwd entry's home, …; see
/// [`super::paths`]).
fn in_home(path: &str) -> Option<String> {
    home_relative(path)
}

/// An absolute path with `.`/`..` folded (`/tmp/../etc/x` is `/etc/x`).
fn folded(path: &str) -> String {
    if path.starts_with('/') {
        fold(path)
    } else {
        path.to_owned()
    }
}

fn under(rel: &str, entries: &[&str]) -> Option<String> {
    entries
        .iter()
        .find(|e| rel == **e || rel.strip_prefix(**e).is_some_and(|r| r.starts_with('/')))
        .map(|e| (*e).to_owned())
}

/// Why writing (or deleting) `path` is refused, if it is.
pub(super) fn protected_write(path: &str) -> Option<String> {
    if let Some(rel) = in_home(path) {
        let rel = rel.as_str();
        if under(rel, HOME_SECRETS).is_some() {
            return Some(format!("the user's keys or credentials (`{path}`)"));
        }
        if under(rel, HOME_STARTUP).is_some() {
            return Some(format!(
                "the user's shell or git startup configuration (`{path}`)"
            ));
        }
    }
    let abs = folded(path);
    SYSTEM_WRITES
        .iter()
        .any(|d| abs.starts_with(d))
        .then(|| format!("the system file `{path}`"))
}

/// Why reading `path` is refused, if it is: a key or credentials file, or
/// another process's environment or memory (orch's keys live there).
pub(super) fn secret_read(path: &str) -> Option<String> {
    if let Some(rel) = in_home(path)
        && under(&rel, HOME_SECRETS).is_some()
    {
        let public = rel.ends_with(".pub")
            || rel.ends_with("known_hosts")
            || rel == ".ssh/config"
            || rel == ".aws/config";
        return (!public).then(|| format!("`{path}` holds the user's keys or credentials"));
    }
    let abs = folded(path);
    if let Some(rest) = abs.strip_prefix("/proc/") {
        let (pid, file) = rest.split_once('/')?;
        let own = pid == "self" || pid == "$$" || pid == "thread-self";
        if !own && ["environ", "mem"].contains(&file) {
            return Some(format!(
                "`{path}` is another process's {} (orch's keys are in its environment)",
                if file == "mem" {
                    "memory"
                } else {
                    "environment"
                }
            ));
        }
    }
    (abs == "/etc/shadow" || abs == "/etc/gshadow")
        .then(|| format!("`{path}` holds the system's password hashes"))
}

/// Why a link pointing at `path` is refused: it is a secret (or another
/// process's environment), a startup file, the home directory itself or a
/// directory holding a secret (`~/.config` holds `~/.config/gh`) — reading
/// or writing through the link would reach them.
pub(super) fn link_target_problem(path: &str) -> Option<String> {
    if let Some(why) = secret_read(path) {
        return Some(why);
    }
    let rel = in_home(path)?;
    if rel.is_empty() {
        return Some(format!(
            "the home directory (`{path}`), which holds the user's keys and startup files"
        ));
    }
    if under(&rel, HOME_STARTUP).is_some() {
        return Some(format!(
            "the user's shell or git startup configuration (`{path}`)"
        ));
    }
    HOME_SECRETS
        .iter()
        .any(|s| {
            s.strip_prefix(rel.as_str())
                .is_some_and(|r| r.starts_with('/'))
        })
        .then(|| format!("`{path}`, a directory holding the user's credentials"))
}

/// `ln [-s] TARGET… LINK` (or `-t DIR TARGET…`) pointing at what
/// [`link_target_problem`] refuses.
fn link_rule(prog: &str, args: &[String]) -> Option<String> {
    let mut ops: Vec<&str> = Vec::new();
    let mut to_dir = false;
    let mut it = args.iter();
    let mut opts_done = false;
    while let Some(a) = it.next() {
        if !opts_done && a == "--" {
            opts_done = true;
        } else if !opts_done && (a == "-t" || a == "--target-directory") {
            to_dir = true;
            it.next();
        } else if !opts_done && a.starts_with("--target-directory=") {
            to_dir = true;
        } else if opts_done || !a.starts_with('-') || a == "-" {
            ops.push(a);
        }
    }
    let targets = if to_dir || ops.len() < 2 {
        &ops[..]
    } else {
        &ops[..ops.len() - 1]
    };
    targets.iter().find_map(|t| {
        link_target_problem(t).map(|why| {
            format!(
                "`{prog}` makes a link to {why}: reading or writing through the link reaches it; copy what the task needs into the worktree, or leave it alone"
            )
        })
    })
}

/// Reads of secrets, crontab changes and signals to orch.
pub(super) fn outside_rule(u: &Unit) -> Option<String> {
    for (op, source) in &u.redirects {
        if op.starts_with('<')
            && op != "<<"
            && op != "<<-"
            && op != "<<<"
            && let Some(why) = secret_read(source)
        {
            return Some(format!("reading a secret: {why}; leave it alone"));
        }
    }
    let prog = basename(u.argv.first()?);
    let args = &u.argv[1..];
    if prog == "ln"
        && let Some(why) = link_rule(prog, args)
    {
        return Some(why);
    }
    if !["echo", "printf"].contains(&prog)
        && let Some(why) = args.iter().find_map(|a| {
            // `--file=PATH`, `curl -d @PATH`.
            let path = a.split_once('=').map(|(_, v)| v).unwrap_or(a);
            secret_read(path.trim_start_matches('@'))
        })
    {
        return Some(format!("reading a secret: {why}; leave it alone"));
    }
    match prog {
        "crontab" if !args.iter().all(|a| a == "-l" || a.starts_with("-u")) => Some(
            "`crontab` changes the user's scheduled jobs, which outlive the run; schedule nothing"
                .to_owned(),
        ),
        "kill" => {
            let orch = ["$PPID", "${PPID}", "1"];
            let all = args.iter().skip(1).any(|a| a == "-1")
                || args.first().is_some_and(|a| a == "--") && args.iter().any(|a| a == "-1");
            args.iter()
                .find(|a| orch.contains(&a.as_str()) || a.contains("orch"))
                .map(|a| format!("`kill {a}` signals orch or init, not a process this command started; stop only processes you started (by the PID `$!` gives)"))
                .or_else(|| all.then(|| "`kill -1` signals every process of the user, orch included; stop only processes you started".to_owned()))
        }
        "pkill" | "killall"
            if args
                .iter()
                .any(|a| !a.starts_with('-') && a.contains("orch")) =>
        {
            Some(format!(
                "`{prog}` matching `orch` signals orch itself; stop only processes you started"
            ))
        }
        _ => None,
    }
}

/// Key file names that are secret wherever they are.
const KEY_FILES: &[&str] = &[
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "id_ecdsa_sk",
    "id_ed25519_sk",
    "authorized_keys",
];

/// The first path in `command` that names a secret or startup path of a
/// home — keys, credentials, `.netrc`, cloud credentials, shell rc files,
/// `authorized_keys` — in any word of any simple command at any depth, in
/// any redirection, or anywhere in the text between quotes (inline code);
/// with the reason. Stricter than the deny list: a path counts by its
/// names (`/.ssh/`, `.bashrc`, `id_ed25519`) whatever comes before them,
/// so `"$X"/.ssh/id_rsa` and `os.environ['HOME'] + '/.ssh/id_rsa'` count
/// too. For commands no run needs to point at such paths (`orch setup`'s
/// steps); public keys (`*.pub`, `known_hosts`) do not count.
pub(crate) fn secret_path_in(command: &str, units: &[Unit]) -> Option<String> {
    let mut words: Vec<&str> = Vec::new();
    for u in units {
        words.extend(u.raw.iter().map(String::as_str));
        words.extend(u.argv.iter().map(String::as_str));
        words.extend(u.redirects.iter().map(|(_, t)| t.as_str()));
    }
    words.push(command);
    words.into_iter().find_map(|w| {
        w.split(|c: char| {
            c.is_whitespace()
                || matches!(
                    c,
                    '\'' | '"'
                        | '`'
                        | '='
                        | ':'
                        | ';'
                        | ','
                        | '('
                        | ')'
                        | '['
                        | ']'
                        | '{'
                        | '}'
                        | '<'
                        | '>'
                        | '|'
                        | '&'
                        | '@'
                        | '+'
                )
        })
        .find_map(secret_named)
    })
}

/// Why `token` (one path-like word) names a secret or startup path (also
/// what keeps a lane file out of a stage's first message:
/// `agent::context_files`).
pub(crate) fn secret_named(token: &str) -> Option<String> {
    if token.is_empty() {
        return None;
    }
    let comps: Vec<&str> = token
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let public = |c: &str| c.ends_with(".pub") || c == "known_hosts";
    if comps.last().is_some_and(|c| public(c)) {
        return None;
    }
    let what = |entries: &[&str]| {
        entries.iter().find_map(|e| {
            let want: Vec<&str> = e.split('/').collect();
            comps
                .windows(want.len())
                .any(|w| w == want.as_slice())
                .then(|| (*e).to_owned())
        })
    };
    if let Some(e) = what(HOME_SECRETS) {
        return Some(format!(
            "`{token}` is under `~/{e}`, which holds the user's keys or credentials"
        ));
    }
    if let Some(e) = what(HOME_STARTUP) {
        return Some(format!(
            "`{token}` is the user's shell or git startup configuration (`~/{e}`)"
        ));
    }
    comps
        .iter()
        .find(|c| KEY_FILES.contains(c))
        .map(|k| format!("`{token}` names the key file `{k}`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_and_system_paths() {
        assert!(protected_write("~/.bashrc").is_some());
        assert!(protected_write("$HOME/.ssh/authorized_keys").is_some());
        assert!(protected_write("/etc/passwd").is_some());
        assert_eq!(protected_write("~/.cache/pip/x"), None);
        assert_eq!(protected_write("~/.bashrc.d-notes/../x"), None);
        assert!(secret_read("~/.ssh/id_rsa").is_some());
        assert_eq!(secret_read("~/.ssh/id_rsa.pub"), None);
        assert_eq!(secret_read("~/.sshx"), None);
        assert!(secret_read("/proc/$PPID/environ").is_some());
        assert!(secret_read("/proc/1/mem").is_some());
        assert_eq!(secret_read("/proc/self/environ"), None);
        assert_eq!(secret_read("/proc/cpuinfo"), None);
    }
}
