//! Programs a command line carries inside itself beyond shell syntax: the
//! inline code of an interpreter (`python3 -c …`, `perl -e …`) that runs a
//! shell command or deletes a tree, and files the line writes and then runs
//! (`cat > x.sh <<EOF … EOF; bash x.sh`, `curl -o i.sh …; sh i.sh`).
//!
//! Inline code is not parsed as its language; string literals passed to a
//! known call (`os.system('…')`, `subprocess.run([...])`, `` `…` ``,
//! `shutil.rmtree('…')`) are read, which is enough for the approval layer:
//! the kernel sandbox is what bounds code that builds its commands at run
//! time.

use super::programs::{SHELLS, basename};

/// Calls whose string argument is a shell command (or, for `subprocess`, an
/// argv list read as one).
const SHELL_CALLS: &[&str] = &[
    "system(",
    "popen(",
    "check_output(",
    "check_call(",
    "call(",
    "run(",
    "Popen(",
    "getoutput(",
    "getstatusoutput(",
    "execSync(",
    "exec(",
    "spawnSync(",
    "execFileSync(",
    "%x(",
    "qx(",
    "qx{",
];

/// Calls that delete a directory tree given as their first argument.
const TREE_DELETES: &[&str] = &[
    "rmtree(",
    "rm_rf(",
    "rm_r(",
    "remove_tree(",
    "rmSync(",
    "rmdirSync(",
    "rimraf(",
    "rimraf.sync(",
    "removedirs(",
];

/// What inline interpreter code does that the rules can check.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Inline {
    /// Shell commands it runs.
    pub(super) commands: Vec<String>,
    /// Trees it deletes, with the call as written (e.g. `rmtree('/')`).
    pub(super) deletes: Vec<(String, String)>,
}

/// The inline program of an interpreter command line (`-c`, `-e`, `-E`,
/// `-r`, `--eval`, `--print`, or a bundle ending in one: `perl -ne`).
pub(super) fn inline_code(args: &[String]) -> Option<&str> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if ["--eval", "--print", "--command"].contains(&a.as_str())
            || (a.starts_with('-')
                && !a.starts_with("--")
                && a.len() > 1
                && a.ends_with(['c', 'e', 'E', 'r', 'p']))
        {
            return it.next().map(String::as_str);
        }
        if let Some(code) = a.strip_prefix("--eval=") {
            return Some(code);
        }
    }
    None
}

/// Reads the shell commands and tree deletions in `code`; `backticks`:
/// the language runs `` `…` `` as a shell command (Perl, Ruby).
pub(super) fn scan_inline(code: &str, backticks: bool) -> Inline {
    let mut found = Inline::default();
    for call in SHELL_CALLS {
        for (pos, _) in code.match_indices(call) {
            if let Some(arg) = first_argument(&code[pos + call.len()..]) {
                found.commands.push(arg);
            }
        }
    }
    // Backticks run a shell command in Perl and Ruby.
    let quoted = if backticks { code } else { "" };
    for inner in quoted.split('`').skip(1).step_by(2) {
        if !inner.trim().is_empty() {
            found.commands.push(inner.to_owned());
        }
    }
    for call in TREE_DELETES {
        for (pos, _) in code.match_indices(call) {
            let after = &code[pos + call.len()..];
            if let Some(path) = first_argument(after) {
                let end = after.find(')').map(|e| e + 1).unwrap_or(after.len());
                found
                    .deletes
                    .push((path, format!("{call}{}", &after[..end])));
            }
        }
    }
    found
}

/// The string literal (or list of string literals, joined by spaces) at the
/// start of `text`, after blanks and a Python string prefix (`r`, `b`, `f`).
fn first_argument(text: &str) -> Option<String> {
    let t = text.trim_start();
    if let Some(list) = t.strip_prefix('[') {
        let mut words = Vec::new();
        let mut rest = list.trim_start();
        while let Some((word, after)) = string_literal(rest) {
            words.push(word);
            rest = after.trim_start().trim_start_matches(',').trim_start();
        }
        return (!words.is_empty()).then(|| words.join(" "));
    }
    string_literal(t).map(|(s, _)| s)
}

/// A quoted literal at the start of `t`: its content and what follows.
pub(super) fn string_literal(t: &str) -> Option<(String, &str)> {
    let t = t.trim_start_matches(['r', 'b', 'f', 'u', 'R', 'B', 'F', 'U']);
    let quote = t.chars().next().filter(|c| matches!(c, '\'' | '"'))?;
    let mut out = String::new();
    let mut chars = t[1..].char_indices();
    while let Some((i, c)) = chars.next() {
        if c == '\\' {
            if let Some((_, n)) = chars.next() {
                out.push(n);
            }
        } else if c == quote {
            return Some((out, &t[1 + i + 1..]));
        } else {
            out.push(c);
        }
    }
    None
}

/// The script file a command runs, if any: a shell's or an interpreter's
/// script operand, `source FILE`, or the program itself.
pub(super) fn script_operand(argv: &[String], interpreter: bool) -> Option<&str> {
    let prog = basename(argv.first()?);
    let args = &argv[1..];
    if prog == "source" || prog == "." {
        return args.first().map(String::as_str);
    }
    if SHELLS.contains(&prog) || interpreter {
        let mut i = 0;
        while i < args.len() {
            let a = args[i].as_str();
            if a == "-o" || a == "-O" || a == "+o" || a == "+O" {
                i += 2;
                continue;
            }
            if !a.starts_with('-') && !a.starts_with('+') {
                return Some(a);
            }
            i += 1;
        }
        return None;
    }
    argv.first().map(String::as_str)
}

/// `path` as a key for files written earlier on the line (`./x.sh` is `x.sh`).
pub(super) fn file_key(path: &str) -> String {
    let mut p = path;
    while let Some(rest) = p.strip_prefix("./") {
        p = rest;
    }
    p.to_owned()
}

/// Where a download command writes its file (`curl -o F`, `wget -O F`).
pub(super) fn download_outputs(argv: &[String]) -> Vec<String> {
    let Some(prog) = argv.first().map(|p| basename(p)) else {
        return Vec::new();
    };
    let flags: &[&str] = match prog {
        "curl" => &["-o", "--output"],
        "wget" => &["-O", "--output-document"],
        "aria2c" => &["-o", "--out"],
        "fetch" => &["-o"],
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    let mut it = argv[1..].iter();
    while let Some(a) = it.next() {
        if flags.contains(&a.as_str()) {
            out.extend(it.next().cloned());
        } else if let Some(v) = flags.iter().find_map(|f| {
            a.strip_prefix(f)
                .and_then(|v| v.strip_prefix('=').or((!f.starts_with("--")).then_some(v)))
                .filter(|v| !v.is_empty())
        }) {
            out.push(v.to_owned());
        }
    }
    out.retain(|f| f != "-");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_code_is_scanned() {
        let found = scan_inline(
            "import os, shutil, subprocess; os.system('rm -rf /'); subprocess.run([\"git\", \"push\", \"-f\"]); shutil.rmtree(r'/etc')",
            false,
        );
        assert_eq!(found.commands, ["rm -rf /", "git push -f"]);
        assert_eq!(
            found.deletes,
            [("/etc".to_owned(), "rmtree(r'/etc')".to_owned())]
        );
        assert_eq!(scan_inline("print `ls -la`", true).commands, ["ls -la"]);
        assert!(
            scan_inline("console.log(`rm -rf /`)", false)
                .commands
                .is_empty()
        );
        assert_eq!(scan_inline("print(1)", false), Inline::default());
        let args: Vec<String> = ["-ne", "print", "f"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(inline_code(&args), Some("print"));
    }

    #[test]
    fn download_outputs_are_found() {
        let argv: Vec<String> = [
            "curl",
            "-fsSL",
            "-o",
            "i.sh",
            "--output=j.sh",
            "-ok.sh",
            "u",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(download_outputs(&argv), ["i.sh", "j.sh", "k.sh"]);
    }
}
