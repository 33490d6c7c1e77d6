//! The built-in deny list: destructive commands no agent should run.
//!
//! Every simple command found by [`super::unwrap`] is matched by program and
//! arguments against the rules below (git's in [`super::git`]); pipelines
//! are checked for downloads and decoded data piped into a shell or an
//! interpreter. The repo allowlist lifts these rules for commands that equal
//! an entry word for word (after quotes and spacing are normalised), never
//! for a command that merely starts like one.

use super::detach::detach_rule;
use super::disk::allocation_rule;
use super::expand::whole_substitution;
use super::git::{git_env_rule, git_rule};
use super::inline::inline_rule;
use super::outside::{outside_rule, protected_write};
use super::paths::{fold, home_relative};
use super::programs::{
    SHELLS, basename, find_parts, interpreter_reading_stdin, is_interpreter, is_unknown_program,
    reads_script_from_stdin,
};
use super::shell::parse;
use super::unwrap::MAX_DEPTH;
use super::unwrap::{Analysis, MAX_WALKED_BYTES, MAX_WALKS, Unit};
use super::wrappers::strip_wrappers;

/// One line of the repo allowlist, parsed like a command.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) text: String,
    /// Words of each simple command, per pipeline.
    pipelines: Vec<Vec<Vec<String>>>,
}

impl Entry {
    pub(super) fn new(text: &str) -> Entry {
        Entry {
            text: text.to_owned(),
            pipelines: words_of(text),
        }
    }

    /// An entry of exactly one simple command: its words.
    fn simple(&self) -> Option<&Vec<String>> {
        match self.pipelines.as_slice() {
            [p] => match p.as_slice() {
                [s] => Some(s),
                _ => None,
            },
            _ => None,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.pipelines.is_empty()
    }
}

fn words_of(text: &str) -> Vec<Vec<Vec<String>>> {
    parse(text)
        .pipelines
        .into_iter()
        .map(|p| p.into_iter().map(|s| s.words).collect())
        .collect()
}

/// What the built-in list says about a command line.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    /// The rule that denies it.
    pub(super) deny: Option<String>,
    /// It is allowed only thanks to this allowlist entry, which lifted the
    /// rule named second.
    pub(super) lifted: Option<(String, String)>,
}

pub(super) fn builtin_deny(command: &str, an: &Analysis, allowlist: &[Entry]) -> Outcome {
    let deny = check(command, an, allowlist);
    if deny.is_some() || allowlist.is_empty() {
        return Outcome { deny, lifted: None };
    }
    let lifted = check(command, an, &[]).and_then(|reason| {
        let whole = words_of(command);
        allowlist
            .iter()
            .find(|e| {
                e.pipelines == whole
                    || an.units.iter().any(|u| unit_matches(u, e))
                    || an.pipelines.iter().any(|ids| pipeline_matches(an, ids, e))
            })
            .map(|e| (e.text.clone(), reason))
    });
    Outcome { deny: None, lifted }
}

fn unit_matches(u: &Unit, e: &Entry) -> bool {
    e.simple().is_some_and(|w| *w == u.raw || *w == u.argv)
}

fn pipeline_matches(an: &Analysis, ids: &[usize], e: &Entry) -> bool {
    ids.iter().any(|i| unit_matches(&an.units[*i], e))
        || e.pipelines.len() == 1
            && e.pipelines[0].len() == ids.len()
            && ids
                .iter()
                .zip(&e.pipelines[0])
                .all(|(i, w)| an.units[*i].raw == *w || an.units[*i].argv == *w)
}

fn check(command: &str, an: &Analysis, allowlist: &[Entry]) -> Option<String> {
    if an.too_deep {
        return Some(format!("command nesting deeper than {MAX_DEPTH} levels"));
    }
    if an.too_large {
        return Some(format!(
            "command too large to check (more than {MAX_WALKS} nested scripts or {} MiB of them after expanding variables); split it into smaller calls",
            MAX_WALKED_BYTES >> 20
        ));
    }
    let whole = words_of(command);
    // Redirections are not part of an entry: they are checked regardless.
    let whole_exempt = allowlist.iter().any(|e| e.pipelines == whole);
    if an.fork_bomb && !whole_exempt {
        return Some("fork bomb".to_owned());
    }
    if let Some((file, by)) = an.ran_downloads.first()
        && !whole_exempt
    {
        return Some(format!(
            "running `{file}`, which {by} downloads on the same command line: it cannot be read before it runs; download it in one call, read it, then run it"
        ));
    }
    for unit in &an.units {
        let exempt = whole_exempt || allowlist.iter().any(|e| unit_matches(unit, e));
        let found = redirect_rule(unit).or_else(|| {
            if exempt {
                None
            } else {
                git_env_rule(unit)
                    .or_else(|| outside_rule(unit))
                    .or_else(|| detach_rule(unit))
                    .or_else(|| inline_rule(unit))
                    .or_else(|| argv_rule(&unit.argv))
            }
        });
        if let Some(reason) = found {
            return Some(match &unit.note {
                Some(note) => format!("{reason}; {note}"),
                None => reason,
            });
        }
    }
    for ids in &an.pipelines {
        if whole_exempt || allowlist.iter().any(|e| pipeline_matches(an, ids, e)) {
            continue;
        }
        if let Some(reason) = pipeline_rule(ids.iter().map(|i| &an.units[*i].argv).collect()) {
            return Some(reason);
        }
    }
    None
}

const DOWNLOADERS: &[&str] = &["curl", "wget", "fetch", "aria2c"];

fn is_download(argv: &[String]) -> bool {
    argv.first()
        .is_some_and(|p| DOWNLOADERS.contains(&basename(p)))
}

/// Decodes or decompresses its input: what it prints cannot be read on the
/// command line.
fn is_decoder(argv: &[String]) -> bool {
    let Some(prog) = argv.first().map(|p| basename(p)) else {
        return false;
    };
    let has = |flags: &[&str]| argv[1..].iter().any(|a| flags.contains(&a.as_str()));
    let short = |c: char| {
        argv[1..]
            .iter()
            .any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains(c))
    };
    match prog {
        "base64" | "base32" | "basenc" | "gbase64" => has(&["--decode", "-D"]) || short('d'),
        "openssl" => has(&["-d", "-base64", "base64", "-a"]) && short('d'),
        "xxd" => has(&["-r", "-revert"]) || short('r'),
        "gpg" | "gpg2" => has(&["--decrypt"]) || short('d'),
        "uudecode" | "gunzip" | "zcat" | "bzcat" | "xzcat" | "unxz" | "unzstd" | "zstdcat"
        | "lzcat" => true,
        "gzip" | "bzip2" | "xz" | "zstd" | "lzma" => has(&["--decompress"]) || short('d'),
        _ => false,
    }
}

/// Downloads or decoded data piped into something that runs it.
fn pipeline_rule(stages: Vec<&Vec<String>>) -> Option<String> {
    for (s, runner) in stages.iter().enumerate() {
        let kind = if reads_script_from_stdin(runner) {
            "a shell".to_owned()
        } else if let Some(interp) = interpreter_reading_stdin(runner) {
            format!("an interpreter (`{interp}`)")
        } else {
            continue;
        };
        if stages[..s].iter().any(|u| is_download(u)) {
            return Some(format!(
                "download piped into {kind}; download it to a file, read it, then run the file"
            ));
        }
        if let Some(dec) = stages[..s].iter().find(|u| is_decoder(u)) {
            return Some(format!(
                "decoded data piped into {kind} (`{} … | {}`): the script cannot be read before it runs; decode it to a file, read it, then run the file",
                basename(&dec[0]),
                basename(&runner[0])
            ));
        }
    }
    None
}

fn redirect_rule(u: &Unit) -> Option<String> {
    for (op, target) in &u.redirects {
        let writes = op.contains('>')
            && !(op == ">&" && (target == "-" || target.bytes().all(|b| b.is_ascii_digit())));
        if writes && let Some(problem) = write_target_problem(target) {
            return Some(format!("{problem} (redirect to `{target}`)"));
        }
    }
    None
}

/// Programs tried in the place of one that is unknown until the shell runs
/// it (`$(…) -rf /`): the ones whose rules depend on their arguments.
const STAND_INS: &[&str] = &[
    "rm", "chmod", "chown", "dd", "tee", "cp", "mv", "git", "find",
];

fn argv_rule(argv: &[String]) -> Option<String> {
    if is_unknown_program(argv) {
        let spelled = &argv[0];
        return STAND_INS.iter().find_map(|stand_in| {
            let mut as_it = argv.to_vec();
            as_it[0] = (*stand_in).to_owned();
            program_rule(&as_it).map(|reason| {
                format!(
                    "the program `{spelled}` is only known when the shell runs it, and as `{stand_in}` this would be: {reason}; write the program name itself"
                )
            })
        });
    }
    program_rule(argv)
}

/// Disk-level tools that destroy what is on a device.
fn wipes_disk(prog: &str, args: &[String]) -> bool {
    prog.starts_with("mkfs")
        || ["mke2fs", "wipefs", "mkswap", "blkdiscard"].contains(&prog)
        || (["fdisk", "sfdisk", "cfdisk", "gdisk", "sgdisk", "parted"].contains(&prog)
            && args.iter().any(|a| is_block_device(a))
            && !args
                .iter()
                .any(|a| a == "-l" || a == "--list" || a == "print"))
        || (prog == "cryptsetup"
            && args
                .iter()
                .any(|a| ["luksFormat", "erase", "luksErase", "open"].contains(&a.as_str())))
}

fn program_rule(argv: &[String]) -> Option<String> {
    let prog = basename(argv.first()?);
    let args = &argv[1..];
    if let Some(reason) = download_into_shell_arg(prog, args) {
        return Some(reason);
    }
    if let Some(reason) = allocation_rule(argv) {
        return Some(reason);
    }
    match prog {
        "rm" => rm_rule(args),
        p if wipes_disk(p, args) => Some(format!("filesystem creation or wipe (`{p}`)")),
        "find" => find_rule(args),
        "dd" => args.iter().find_map(|a| {
            let target = a.strip_prefix("of=")?;
            let safe = [
                "/dev/null",
                "/dev/zero",
                "/dev/stdout",
                "/dev/stderr",
                "/dev/tty",
            ];
            if target.starts_with("/dev/")
                && !safe.contains(&target)
                && !target.starts_with("/dev/fd/")
            {
                Some(format!("dd to a device (`of={target}`)"))
            } else {
                write_target_problem(target).map(|p| format!("{p} (`of={target}`)"))
            }
        }),
        "chmod" | "chown" | "chgrp" => {
            let recursive = args.iter().any(|a| {
                a == "--recursive"
                    || (a.starts_with('-') && !a.starts_with("--") && a.contains('R'))
            });
            let ops = operands(args);
            if recursive && let Some(what) = ops.iter().find_map(|o| dangerous_target(o, false)) {
                return Some(format!("recursive {prog} of {what}"));
            }
            git_write(prog, ops.iter().copied())
        }
        "git" => git_rule(args),
        "shutdown" | "reboot" | "halt" | "poweroff" => {
            Some(format!("system power command (`{prog}`)"))
        }
        "systemctl"
            if args
                .iter()
                .any(|a| ["poweroff", "reboot", "halt", "kexec"].contains(&a.as_str())) =>
        {
            Some("system power command (`systemctl`)".to_owned())
        }
        "init" | "telinit" if args.iter().any(|a| a == "0" || a == "6") => {
            Some(format!("system power command (`{prog}`)"))
        }
        "tee" | "touch" | "truncate" | "rmdir" | "unlink" | "shred" | "mkdir" | "mv" => {
            let ops = operands(args);
            if let Some(dev) = ops.iter().find(|o| is_block_device(o)) {
                return Some(format!("write to a block device (`{dev}`)"));
            }
            git_write(prog, ops.into_iter())
        }
        "cp" | "ln" | "install" | "rsync" => {
            let ops = operands(args);
            let dest = args
                .iter()
                .position(|a| a == "-t")
                .and_then(|i| args.get(i + 1).map(String::as_str))
                .or_else(|| {
                    args.iter()
                        .find_map(|a| a.strip_prefix("--target-directory="))
                })
                .or_else(|| ops.last().copied());
            if let Some(dest) = dest.filter(|d| is_block_device(d)) {
                return Some(format!("write to a block device (`{dest}`)"));
            }
            git_write(prog, dest.into_iter())
        }
        "sed" | "perl" => {
            let in_place = args.iter().any(|a| {
                a.starts_with("--in-place")
                    || (a.starts_with('-')
                        && !a.starts_with("--")
                        && a[1..].starts_with(|c: char| c.is_ascii_alphabetic())
                        && a.contains('i'))
            });
            if in_place {
                git_write(prog, operands(args).into_iter())
            } else {
                None
            }
        }
        _ => None,
    }
}

/// `bash <(curl …)`, `sh -c "$(wget …)"`, `source <(curl …)`, `eval "$(curl …)"`,
/// `python3 -c "$(curl …)"`.
fn download_into_shell_arg(prog: &str, args: &[String]) -> Option<String> {
    let shell = SHELLS.contains(&prog) || ["source", ".", "eval"].contains(&prog);
    if !shell && !is_interpreter(prog) {
        return None;
    }
    let fetched = args.iter().any(|a| {
        parse(a).substitutions.iter().any(|inner| {
            parse(inner).pipelines.iter().flatten().any(|s| {
                let (argv, _) = strip_wrappers(&s.words);
                is_download(argv) || is_decoder(argv)
            })
        })
    });
    fetched.then(|| {
        let by = if shell {
            "a shell".to_owned()
        } else {
            format!("`{prog}`")
        };
        format!(
            "download or decoded data executed by {by}: it cannot be read before it runs; save it to a file, read it, then run the file"
        )
    })
}

/// `find` deleting what it finds under `/`, a system directory, a home
/// directory or the worktree's parent, or deleting the whole worktree.
fn find_rule(args: &[String]) -> Option<String> {
    let parts = find_parts(args);
    if !parts.deletes {
        return None;
    }
    parts.starts.iter().find_map(|s| {
        if let Some(what) = dangerous_target(s, false) {
            Some(format!(
                "find deleting files under {what} (`find {s}` with `-delete` or `-exec rm`); search a directory inside the worktree instead"
            ))
        } else if !parts.selective && dangerous_target(s, true).is_some() {
            Some(format!(
                "find deleting the whole worktree (`find {s}` with `-delete` and no test such as `-name`); add a test that narrows what it deletes"
            ))
        } else {
            None
        }
    })
}

/// Arguments that are not options (everything after `--` counts).
fn operands(args: &[String]) -> Vec<&str> {
    let mut out = Vec::new();
    let mut opts_done = false;
    for a in args {
        if !opts_done && a == "--" {
            opts_done = true;
        } else if opts_done || !a.starts_with('-') || a == "-" {
            out.push(a.as_str());
        }
    }
    out
}

fn rm_rule(args: &[String]) -> Option<String> {
    let mut recursive = false;
    let mut opts_done = false;
    for a in args {
        if opts_done {
            continue;
        }
        if a == "--" {
            opts_done = true;
        } else if a == "--recursive"
            || (a.starts_with('-') && !a.starts_with("--") && (a.contains('r') || a.contains('R')))
        {
            recursive = true;
        }
    }
    let ops = operands(args);
    if recursive && let Some(what) = ops.iter().find_map(|o| dangerous_target(o, true)) {
        return Some(format!("recursive delete of {what}"));
    }
    git_write("rm", ops.into_iter())
}

/// A write into `.git` internals, the user's home configuration and keys,
/// or system files.
fn git_write<'a>(prog: &str, mut paths: impl Iterator<Item = &'a str>) -> Option<String> {
    paths.find_map(|p| {
        if is_git_internal(p) {
            Some(format!("write into .git internals (`{prog} {p}`)"))
        } else {
            protected_write(p).map(|what| {
                format!("write to {what} (`{prog} {p}`); keep changes inside the worktree")
            })
        }
    })
}

/// Top-level directories whose recursive deletion or chmod breaks the system.
const SYSTEM_DIRS: &[&str] = &[
    "bin",
    "boot",
    "dev",
    "etc",
    "home",
    "lib",
    "lib32",
    "lib64",
    "libx32",
    "media",
    "mnt",
    "opt",
    "proc",
    "root",
    "run",
    "sbin",
    "snap",
    "srv",
    "sys",
    "tmp",
    "usr",
    "var",
    "nix",
    "Users",
    "System",
    "Library",
    "Applications",
    "private",
    "Volumes",
];

/// Describes `target` if deleting or chmod-ing it recursively would be a
/// disaster: `/`, a top-level system directory, a home directory, `$HOME`,
/// the worktree's parent (`..`), a `$VAR/` that is `/` when the variable is
/// empty, and — when `include_cwd` — the worktree itself (`.`, `*`).
fn dangerous_target(target: &str, include_cwd: bool) -> Option<String> {
    let t = target.trim();
    if t.is_empty() {
        return None;
    }
    if whole_substitution(t).is_some() {
        return Some(format!(
            "`{t}`, whose output is only known when the shell runs it (it may be `/`); name the paths instead"
        ));
    }
    // An absolute spelling of a home (`/home/alice`, the passwd entry's
    // home, a symlink to it) is the home as much as `~` is.
    let abs;
    let t = if t.starts_with('/') {
        abs = fold(t);
        if let Some(rel) = home_relative(&abs)
            && rel
                .split('/')
                .all(|c| c.chars().all(|ch| matches!(ch, '*' | '.' | '?')))
        {
            return Some(format!("the home directory (`{target}`)"));
        }
        abs.as_str()
    } else {
        t
    };
    let (base, rest) = split_base(t);
    let mut up = 0usize;
    let mut comps: Vec<&str> = Vec::new();
    for c in rest.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if comps.pop().is_none() {
                    up += 1;
                }
            }
            c => comps.push(c),
        }
    }
    // A trailing pure glob (`*`, `.*`, `**`) means "everything in" the directory.
    if comps
        .last()
        .is_some_and(|c| c.chars().all(|ch| matches!(ch, '*' | '.' | '?')))
    {
        comps.pop();
    }
    match base {
        Base::Root => match comps.as_slice() {
            [] => Some("/".to_owned()),
            [top] if SYSTEM_DIRS.contains(top) => Some(format!("/{top}")),
            ["home" | "Users", user] => Some(format!("the home directory /{}/{user}", comps[0])),
            _ => None,
        },
        Base::Home => (comps.is_empty() || up > 0).then(|| "the home directory".to_owned()),
        Base::OtherHome => comps
            .is_empty()
            .then(|| format!("the home directory `{t}`")),
        Base::Var(v) => (comps.is_empty() && rest.starts_with('/'))
            .then(|| format!("`{t}` (that is / when ${v} is empty)")),
        Base::Cwd => {
            if up > 0 && comps.is_empty() {
                Some(format!("the worktree's parent (`{t}`)"))
            } else if up == 0 && comps.is_empty() && include_cwd {
                Some(format!("the whole worktree (`{t}`)"))
            } else {
                None
            }
        }
    }
}

enum Base<'a> {
    Root,
    Home,
    OtherHome,
    Var(&'a str),
    Cwd,
}

/// Splits a path into what it starts from and the rest.
fn split_base(t: &str) -> (Base<'_>, &str) {
    for home in ["~", "$HOME", "${HOME}"] {
        if let Some(rest) = t.strip_prefix(home)
            && (rest.is_empty() || rest.starts_with('/'))
        {
            return (Base::Home, rest);
        }
    }
    for pwd in ["$PWD", "${PWD}"] {
        if let Some(rest) = t.strip_prefix(pwd)
            && (rest.is_empty() || rest.starts_with('/'))
        {
            return (Base::Cwd, rest);
        }
    }
    if t.starts_with('~') {
        let end = t.find('/').unwrap_or(t.len());
        return (Base::OtherHome, &t[end..]);
    }
    if let Some(after) = t.strip_prefix('$') {
        let (name, rest) = match after.strip_prefix('{') {
            Some(inner) => match inner.find('}') {
                Some(e) => (&inner[..e], &inner[e + 1..]),
                None => (inner, ""),
            },
            None => {
                let e = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..e], &after[e..])
            }
        };
        return (Base::Var(name), rest);
    }
    if t.starts_with('/') {
        (Base::Root, t)
    } else {
        (Base::Cwd, t)
    }
}

/// A path with a `.git` component (the repository's internals), or one
/// built from where git keeps them (`$(git rev-parse --git-common-dir)/…`,
/// `$GIT_DIR/…`).
fn is_git_internal(path: &str) -> bool {
    path.split('/').any(|c| c == ".git")
        || [
            "rev-parse --git-dir",
            "rev-parse --git-common-dir",
            "rev-parse --absolute-git-dir",
            "rev-parse --git-path",
            "$GIT_DIR",
            "${GIT_DIR}",
            "$GIT_COMMON_DIR",
            "${GIT_COMMON_DIR}",
        ]
        .iter()
        .any(|s| path.contains(s))
}

fn is_block_device(path: &str) -> bool {
    let Some(dev) = path.strip_prefix("/dev/") else {
        return false;
    };
    [
        "sd", "hd", "vd", "xvd", "nvme", "mmcblk", "disk", "rdisk", "mapper/", "md", "dm-", "loop",
        "sr",
    ]
    .iter()
    .any(|p| dev.starts_with(p))
}

fn write_target_problem(target: &str) -> Option<String> {
    if is_block_device(target) {
        Some("write to a block device".to_owned())
    } else if is_git_internal(target) {
        Some("write into .git internals".to_owned())
    } else {
        protected_write(target)
            .map(|what| format!("write to {what}; keep changes inside the worktree"))
    }
}
