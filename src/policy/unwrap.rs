//! Finds every simple command of a command line, at every nesting level,
//! with wrappers removed: `sudo`, `env`, assignments, `nohup`, `time`,
//! `command`, `exec`, `nice`, `timeout`, `stdbuf`, and the commands hidden in
//! `xargs`, `find -exec`, `eval`, `bash -c`, `su -c`, `env -S` and command
//! substitutions. Nesting beyond [`MAX_DEPTH`] is flagged, not followed.

use super::MAX_DEPTH;
use super::shell::parse;

/// One simple command found anywhere in the command line.
#[derive(Debug)]
pub(super) struct Unit {
    /// Its words as written.
    pub(super) raw: Vec<String>,
    /// The words after unwrapping `sudo`, `env`, assignments, … (program first).
    pub(super) argv: Vec<String>,
    pub(super) redirects: Vec<(String, String)>,
}

#[derive(Debug, Default)]
pub(super) struct Analysis {
    pub(super) units: Vec<Unit>,
    /// Pipelines with two or more stages, as indices into `units`.
    pub(super) pipelines: Vec<Vec<usize>>,
    pub(super) too_deep: bool,
    pub(super) fork_bomb: bool,
}

pub(super) fn analyze(command: &str) -> Analysis {
    let mut an = Analysis::default();
    walk(command, 0, &mut an);
    an
}

fn walk(text: &str, depth: usize, an: &mut Analysis) {
    if depth > MAX_DEPTH {
        an.too_deep = true;
        return;
    }
    if is_fork_bomb(text) {
        an.fork_bomb = true;
    }
    let parsed = parse(text);
    for sub in &parsed.substitutions {
        walk(sub, depth + 1, an);
    }
    for pipeline in parsed.pipelines {
        let ids: Vec<usize> = pipeline
            .into_iter()
            .map(|s| add_unit(s.words, s.redirects, depth, an))
            .collect();
        if ids.len() > 1 {
            an.pipelines.push(ids);
        }
    }
}

fn add_unit(
    raw: Vec<String>,
    redirects: Vec<(String, String)>,
    depth: usize,
    an: &mut Analysis,
) -> usize {
    let (argv, split_string) = strip_wrappers(&raw);
    let argv = argv.to_vec();
    if let Some(s) = split_string {
        walk(&s, depth + 1, an);
    }
    let prog = argv.first().map(|p| basename(p)).unwrap_or_default();
    let args = argv.get(1..).unwrap_or_default();
    match prog {
        p if SHELLS.contains(&p) => {
            if let Some(script) = shell_c_string(args) {
                walk(&script, depth + 1, an);
            }
        }
        "su" => {
            if let Some(script) = su_command(args) {
                walk(&script, depth + 1, an);
            }
        }
        "eval" => walk(&args.join(" "), depth + 1, an),
        "xargs" => {
            let rest = skip_xargs_options(args);
            if !rest.is_empty() {
                add_unit(rest.to_vec(), Vec::new(), depth + 1, an);
            }
        }
        "find" => {
            for group in find_exec_groups(args) {
                add_unit(group, Vec::new(), depth + 1, an);
            }
        }
        _ => {}
    }
    an.units.push(Unit {
        raw,
        argv,
        redirects,
    });
    an.units.len() - 1
}

pub(super) const SHELLS: &[&str] = &[
    "bash", "sh", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "busybox",
];

pub(super) fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

fn is_assignment(w: &str) -> bool {
    match w.find('=') {
        Some(eq) if eq > 0 => {
            let name = w[..eq].trim_end_matches('+');
            let name = name.split('[').next().unwrap_or(name);
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        _ => false,
    }
}

/// Skips leading options of a wrapper. `with_arg` lists options that take a
/// separate argument. Returns the index of the first operand.
fn skip_opts(args: &[String], with_arg: &[&str]) -> usize {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--" {
            return i + 1;
        }
        if !a.starts_with('-') || a == "-" {
            return i;
        }
        if with_arg.contains(&a) {
            i += 1;
        }
        i += 1;
    }
    i
}

/// Removes keywords, assignments and wrapper programs from the front of a
/// simple command. Returns the remaining words and, for `env -S STRING`, the
/// string to analyse as a command of its own.
fn strip_wrappers(words: &[String]) -> (&[String], Option<String>) {
    let mut w = words;
    let mut split = None;
    loop {
        let Some(first) = w.first() else {
            return (w, split);
        };
        let rest = &w[1..];
        if is_assignment(first) {
            w = rest;
            continue;
        }
        match basename(first) {
            "{" | "}" | "!" | "if" | "then" | "else" | "elif" | "do" | "while" | "until"
            | "nohup" | "builtin" => {
                w = rest;
            }
            "sudo" | "doas" => {
                w = &rest[skip_opts(
                    rest,
                    &[
                        "-u",
                        "-g",
                        "-h",
                        "-p",
                        "-C",
                        "-D",
                        "-r",
                        "-t",
                        "-U",
                        "-T",
                        "--user",
                        "--group",
                        "--host",
                        "--prompt",
                        "--chdir",
                        "--role",
                        "--type",
                        "--other-user",
                        "--close-from",
                        "--command-timeout",
                    ],
                )..];
            }
            "env" => {
                let mut i = 0;
                while i < rest.len() {
                    let a = rest[i].as_str();
                    if a == "-S" || a == "--split-string" {
                        let tail = rest.get(i + 2..).unwrap_or_default().join(" ");
                        split = rest.get(i + 1).map(|s| format!("{s} {tail}"));
                        return (&[], split);
                    } else if let Some(s) = a
                        .strip_prefix("--split-string=")
                        .or_else(|| a.strip_prefix("-S").filter(|s| !s.is_empty()))
                    {
                        let tail = rest.get(i + 1..).unwrap_or_default().join(" ");
                        return (&[], Some(format!("{s} {tail}")));
                    } else if ["-u", "--unset", "-C", "--chdir"].contains(&a) {
                        i += 2;
                    } else if a == "--" {
                        i += 1;
                        break;
                    } else if (a.starts_with('-') && a.len() > 1) || is_assignment(a) {
                        i += 1;
                    } else {
                        break;
                    }
                }
                w = &rest[i.min(rest.len())..];
            }
            "command" => {
                if rest
                    .iter()
                    .take_while(|a| a.starts_with('-'))
                    .any(|a| a.contains('v') || a.contains('V'))
                {
                    return (&[], split);
                }
                w = &rest[skip_opts(rest, &[])..];
            }
            "exec" => w = &rest[skip_opts(rest, &["-a"])..],
            "time" => w = &rest[skip_opts(rest, &["-f", "-o", "--format", "--output"])..],
            "nice" => w = &rest[skip_opts(rest, &["-n", "--adjustment"])..],
            "ionice" => {
                w = &rest[skip_opts(
                    rest,
                    &["-c", "-n", "-p", "-P", "-u", "--class", "--classdata"],
                )..]
            }
            "setsid" | "unbuffer" => w = &rest[skip_opts(rest, &[])..],
            "stdbuf" => w = &rest[skip_opts(rest, &["-i", "-o", "-e"])..],
            "timeout" => {
                let i = skip_opts(rest, &["-s", "-k", "--signal", "--kill-after"]);
                // The first operand is the duration.
                w = rest.get(i + 1..).unwrap_or_default();
            }
            _ => return (w, split),
        }
    }
}

/// For `bash [opts] -c STRING …`: the string.
pub(super) fn shell_c_string(args: &[String]) -> Option<String> {
    let mut has_c = false;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--" {
            i += 1;
            break;
        }
        if (a == "-o" || a == "+o" || a == "-O" || a == "+O") && i + 1 < args.len() {
            i += 2;
            continue;
        }
        if let Some(flags) = a
            .strip_prefix('-')
            .filter(|f| !f.starts_with('-') && !f.is_empty())
        {
            has_c |= flags.contains('c');
        } else if !a.starts_with("--") && !a.starts_with('+') {
            break;
        }
        i += 1;
    }
    if has_c { args.get(i).cloned() } else { None }
}

fn su_command(args: &[String]) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "-c" || a == "--command" {
            return it.next().cloned();
        }
        if let Some(s) = a.strip_prefix("--command=") {
            return Some(s.to_owned());
        }
    }
    None
}

fn skip_xargs_options(args: &[String]) -> &[String] {
    let with_arg = [
        "-I",
        "-n",
        "-P",
        "-L",
        "-l",
        "-s",
        "-d",
        "-E",
        "-e",
        "-a",
        "--arg-file",
        "--delimiter",
        "--max-args",
        "--max-procs",
        "--max-lines",
        "--max-chars",
        "--replace",
        "--eof",
    ];
    &args[skip_opts(args, &with_arg)..]
}

/// The commands of `find … -exec CMD … ;` (also `-execdir`, `-ok`, `-okdir`).
fn find_exec_groups(args: &[String]) -> Vec<Vec<String>> {
    let mut groups = Vec::new();
    let mut i = 0;
    while i < args.len() {
        if ["-exec", "-execdir", "-ok", "-okdir"].contains(&args[i].as_str()) {
            let start = i + 1;
            let mut j = start;
            while j < args.len() && args[j] != ";" && args[j] != "+" {
                j += 1;
            }
            groups.push(args[start..j].to_vec());
            i = j;
        }
        i += 1;
    }
    groups
}

/// `f(){ f|f& };f` in any spacing and with any function name.
fn is_fork_bomb(text: &str) -> bool {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let mut names: Vec<String> = Vec::new();
    let mut search = compact.as_str();
    while let Some(pos) = search.find("(){") {
        let name: String = search[..pos]
            .chars()
            .rev()
            .take_while(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '.' | '-'))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if !name.is_empty() {
            names.push(name);
        }
        search = &search[pos + 3..];
    }
    for part in text.split("function").skip(1) {
        if let Some(name) = part.split_whitespace().next() {
            names.push(name.trim_end_matches("()").trim_end_matches('{').to_owned());
        }
    }
    names
        .iter()
        .filter(|n| !n.is_empty())
        .any(|n| compact.contains(&format!("{n}|{n}")))
}
