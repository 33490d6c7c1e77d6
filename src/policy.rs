//! The bash policy: which commands an agent may run.
//!
//! [`BashPolicy::decide`] checks, in order:
//! 1. the built-in deny list (destructive commands no agent should run), unless
//!    the offending simple command (or pipeline, or the whole line) equals an
//!    entry of the repo allowlist (`<repo>/.orch/allowlist`) word for word,
//!    after quotes and spacing are normalised — never a mere prefix;
//! 2. the role's `deny` patterns, 3. its `ask` patterns, 4. its `allow`
//!    patterns; 5. anything else is allowed.
//!
//! The built-in list does not match on raw text. The command is parsed like a
//! shell would (quotes, escapes, `;` `&&` `||` `|` `&` newlines, subshells,
//! `$(…)`, backticks, process substitution, here-documents) into simple
//! commands; wrappers (`sudo`, `env VAR=x`, `nohup`, `time`, `command`,
//! `exec`, `nice`, `timeout`, `xargs`, `find -exec`, `eval`, `bash -c '…'`,
//! `su -c`, aliases, scripts fed to a shell's stdin, …) are unwrapped
//! recursively up to [`MAX_DEPTH`] levels (deeper nesting is denied), and
//! variables assigned on the line are substituted. The rules then look at the
//! program and its arguments, so spacing, flag order, quoting and wrapping do
//! not matter, while a quoted argument (`echo "rm -rf /"`,
//! `echo ':(){ :|:& };:'`) is never mistaken for a command.
//!
//! Arguments that only exist at run time get their worst evident value:
//! `xargs` appends what the previous stage prints (`/` when that cannot be
//! told), `find`'s `{}` is its starting point when no test narrows the
//! match, `$(echo rm)` is `rm`, and a program that stays unknown (`$(…)`,
//! an unset `$VAR`) is tried as `rm`, `chmod`, `git`, …. A file the line
//! writes from visible text and then runs is read as a script; one it
//! downloads and then runs is refused. Interpreter inline code (`python3
//! -c`, `perl -e`, …) is scanned for shell calls and tree deletions with
//! literal arguments. A `cd` out of the worktree moves the `git`, `rm`,
//! `chmod` and `find` that follow it.
//!
//! The built-in list is the approval layer, not the boundary: the kernel
//! sandbox decides what a tool process can touch at all. The list still
//! names what would be destructive inside the lane (`rm -rf .`, `find .
//! -delete`, `.git` internals) or outside the run's own branches (the
//! user's refs, tags, stash, reflog, objects and config; the run's branches
//! are `orch/…` and `orch-lanes/…`), so the model gets a clear refusal with
//! what to do instead rather than a permission error halfway through. Where
//! the sandbox is unavailable the list is all there is, so it also refuses
//! what lies outside the lane: writes to the user's startup files, keys and
//! system files, reads of keys, credentials and other processes'
//! `/proc/PID/environ`, `crontab` changes, and signals to orch.
//! Allowed on purpose, as they only touch the lane's own files or branch:
//! `git clean -fdx`, `git reset --hard`, `git stash pop`, `chmod -R … .`.
//! Not checked: code that builds its commands at run time (a script file
//! not written on the line, `python3 x.py`), `git checkout NAME` (branch or
//! path is only known to the repository), commands sent elsewhere (`ssh`,
//! `docker run`).
//!
//! Role patterns ([`pattern_matches`]) are command prefixes with `*` as a
//! wildcard, matched on whole words against the command with its whitespace
//! collapsed and against each simple command in it.

mod builtin;
mod detach;
mod disk;
mod expand;
#[cfg(test)]
mod family_tests;
mod git;
mod inline;
mod metadata;
mod outside;
mod paths;
mod programs;
mod scripts;
mod shell;
#[cfg(test)]
mod table_tests;
mod unwrap;
mod wrappers;

use std::path::Path;

use builtin::{Entry, builtin_deny};
pub(crate) use outside::secret_named;
pub use unwrap::MAX_DEPTH;
use unwrap::analyze;

/// The policy's answer for one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run it.
    Allow,
    /// Needs the user's approval; the text says which rule asked.
    Ask(String),
    /// Never run it; the text names the rule.
    Deny(String),
}

/// A [`Decision`] with what the caller should log beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    /// The answer, as [`BashPolicy::decide`] gives it.
    pub decision: Decision,
    /// Set when the command passed the built-in deny list only because it
    /// equals a repo allowlist entry: `(entry, the built-in rule it lifted)`.
    pub allowlisted: Option<(String, String)>,
}

impl Evaluation {
    /// How the action log names an allowed decision: `allow`, or
    /// `allow (repo allowlist: `ENTRY` lifts: RULE)`.
    pub fn allow_label(&self) -> String {
        match &self.allowlisted {
            Some((entry, rule)) => format!("allow (repo allowlist: `{entry}` lifts: {rule})"),
            None => "allow".to_owned(),
        }
    }
}

/// A role's bash policy plus the repo allowlist and how to resolve `Ask`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BashPolicy {
    /// Patterns that are allowed (see [`pattern_matches`]).
    pub allow: Vec<String>,
    /// Patterns that need approval.
    pub ask: Vec<String>,
    /// Patterns that are denied.
    pub deny: Vec<String>,
    /// Commands exempt from the built-in deny list when a command line (or
    /// one simple command or pipeline in it) equals one exactly, from
    /// `<repo>/.orch/allowlist`.
    pub allowlist: Vec<String>,
    /// `--yes`: `Ask` counts as allowed.
    pub assume_yes: bool,
    /// A user can be asked on the terminal (see [`detect_interactive`]).
    pub interactive: bool,
}

impl BashPolicy {
    /// Decides whether `command` may run (see the module docs for the order).
    pub fn decide(&self, command: &str) -> Decision {
        self.evaluate(command).decision
    }

    /// [`Self::decide`], also saying whether the repo allowlist let the
    /// command through, so the caller can log it.
    pub fn evaluate(&self, command: &str) -> Evaluation {
        let analysis = analyze(command);
        let allowlist: Vec<Entry> = self
            .allowlist
            .iter()
            .map(|e| Entry::new(e))
            .filter(|e| !e.is_empty())
            .collect();
        let builtin = builtin_deny(command, &analysis, &allowlist);
        let with = |decision| Evaluation {
            decision,
            allowlisted: builtin.lifted.clone(),
        };
        if let Some(reason) = &builtin.deny {
            return with(Decision::Deny(format!("{reason} (built-in deny list)")));
        }
        // Only where the kernel cannot refuse it (see `policy/metadata.rs`).
        if let Some(reason) = analysis.units.iter().find_map(metadata::metadata_rule) {
            return with(Decision::Deny(format!("{reason} (built-in deny list)")));
        }
        let mut candidates = vec![collapse_ws(command)];
        for unit in &analysis.units {
            candidates.push(unit.raw.join(" "));
            candidates.push(unit.argv.join(" "));
        }
        let hit = |patterns: &[String]| {
            patterns
                .iter()
                .find(|p| candidates.iter().any(|c| pattern_matches(p, c)))
                .cloned()
        };
        if let Some(p) = hit(&self.deny) {
            return with(Decision::Deny(format!("role deny rule `{p}`")));
        }
        if let Some(p) = hit(&self.ask) {
            return with(Decision::Ask(format!("role ask rule `{p}`")));
        }
        with(Decision::Allow)
    }

    /// Reads `<repo_root>/.orch/allowlist`: one command per line, blank
    /// lines and `#` comments ignored. A missing file is an empty list.
    pub fn load_allowlist(repo_root: &Path) -> std::io::Result<Vec<String>> {
        match std::fs::read_to_string(repo_root.join(".orch").join("allowlist")) {
            Ok(text) => Ok(text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_owned)
                .collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}

/// One simple command of a command line as the deny list sees it (for
/// callers that classify commands, e.g. `orch setup`'s read-only check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SimpleCommand {
    /// Its words as written (after variable substitution).
    pub(crate) raw: Vec<String>,
    /// The words after unwrapping `sudo`, `env`, `bash -c`, … (program first).
    pub(crate) argv: Vec<String>,
    /// Its redirections: `(operator, target)`.
    pub(crate) redirects: Vec<(String, String)>,
}

/// Every simple command of `command`, wrappers unwrapped as the deny list
/// does; `None` when the line cannot be analysed completely (too deep, too
/// large, a fork bomb).
pub(crate) fn simple_commands(command: &str) -> Option<Vec<SimpleCommand>> {
    let analysis = analyze(command);
    if analysis.too_deep || analysis.too_large || analysis.fork_bomb {
        return None;
    }
    Some(
        analysis
            .units
            .into_iter()
            .map(|u| SimpleCommand {
                raw: u.raw,
                argv: u.argv,
                redirects: u.redirects,
            })
            .collect(),
    )
}

/// Why `command` names a secret or startup path of a home (keys,
/// credentials, `.netrc`, cloud credentials, shell rc files,
/// `authorized_keys`) in any argument, redirection or quoted text at any
/// nesting level, whatever spelling of the home it uses; `None` when it
/// names none. Stricter than [`BashPolicy::decide`]: for `orch setup`'s
/// steps, which never need such a path (`sudo` or not).
pub(crate) fn secret_path_in(command: &str) -> Option<String> {
    outside::secret_path_in(command, &analyze(command).units)
}

/// The home directory of the passwd entry of the user orch runs as (which
/// differs from `$HOME` when something set its own).
pub(crate) fn passwd_home() -> Option<std::path::PathBuf> {
    paths::passwd_home_of_uid(rustix::process::getuid().as_raw())
}

/// True when a user can answer a prompt: stdin and stderr are terminals and
/// `CI` is not `true`.
pub fn detect_interactive() -> bool {
    use std::io::IsTerminal;
    let ttys = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    ttys && crate::environment::current()
        .var(crate::environment::CI)
        .is_none_or(|v| v != "true")
}

/// Whether a role pattern matches a command.
///
/// Syntax: a command prefix matched on whole words, `*` matching any run of
/// characters (spaces included). `git push` matches `git push` and
/// `git push origin main` but not `git pushy`; `cargo * --release` matches
/// `cargo build --release`; `*` matches everything. Runs of whitespace in both
/// count as one space.
pub fn pattern_matches(pattern: &str, command: &str) -> bool {
    let p = collapse_ws(pattern);
    let c = collapse_ws(command);
    if p.is_empty() {
        return false;
    }
    wildcard(p.as_bytes(), c.as_bytes()) || wildcard(format!("{p} *").as_bytes(), c.as_bytes())
}

fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `*`-only glob match over bytes (iterative, with backtracking to the last star).
fn wildcard(p: &[u8], t: &[u8]) -> bool {
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|b| *b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> BashPolicy {
        BashPolicy::default()
    }

    #[test]
    fn role_rules_in_order() {
        let p = BashPolicy {
            deny: vec!["git push".into()],
            ask: vec!["cargo publish".into(), "npm *".into()],
            allow: vec!["cargo *".into()],
            ..policy()
        };
        assert!(
            matches!(p.decide("git push origin main"), Decision::Deny(r) if r.contains("`git push`"))
        );
        assert!(matches!(p.decide("cd x && git  push"), Decision::Deny(_)));
        assert!(matches!(p.decide("sudo git push"), Decision::Deny(_)));
        assert_eq!(p.decide("git pushy"), Decision::Allow);
        assert!(
            matches!(p.decide("cargo publish --dry-run"), Decision::Ask(r) if r.contains("cargo publish"))
        );
        assert!(matches!(p.decide("npm install"), Decision::Ask(_)));
        assert_eq!(p.decide("cargo test"), Decision::Allow);
        assert_eq!(p.decide("ls"), Decision::Allow);
    }

    #[test]
    fn pattern_syntax() {
        assert!(pattern_matches("git push", "git push"));
        assert!(pattern_matches("git push", "git push origin main"));
        assert!(!pattern_matches("git push", "git pushy"));
        assert!(pattern_matches(
            "cargo * --release",
            "cargo build --release"
        ));
        assert!(pattern_matches("*", "anything at all"));
        assert!(pattern_matches("git  push", "git\tpush  -f"));
        assert!(!pattern_matches("", "ls"));
        assert!(!pattern_matches("rm", "git rm"));
    }

    #[test]
    fn allowlist_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        assert!(BashPolicy::load_allowlist(dir.path()).unwrap().is_empty());
        std::fs::create_dir(dir.path().join(".orch")).unwrap();
        std::fs::write(
            dir.path().join(".orch/allowlist"),
            "# comment\n\ngit push --force origin scratch\n  rm -rf /tmp/x  \n",
        )
        .unwrap();
        assert_eq!(
            BashPolicy::load_allowlist(dir.path()).unwrap(),
            ["git push --force origin scratch", "rm -rf /tmp/x"]
        );
    }
}
