//! The words in front of a simple command that are not its program:
//! assignments, keywords and wrapper programs (`sudo`, `env`, `timeout` …);
//! a leaf of `policy` shared by the unwrapping and the expansion.

use super::programs::{basename, skip_opts};

/// Whether `w` is a shell variable assignment (`NAME=value`, `NAME+=…`,
/// `NAME[i]=…`).
pub(super) fn is_assignment(w: &str) -> bool {
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

/// Removes keywords, assignments and wrapper programs from the front of a
/// simple command. Returns the remaining words and, for `env -S STRING`, the
/// string to analyse as a command of its own.
pub(super) fn strip_wrappers(words: &[String]) -> (&[String], Option<String>) {
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
            // `function NAME { …`: the body follows the name.
            "function" => w = rest.get(1..).unwrap_or_default(),
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
