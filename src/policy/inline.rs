//! What an interpreter one-liner (`python3 -c`, `perl -e`, `node -e`,
//! `ruby -e`) does to files, as far as its string literals tell: the paths
//! it removes, writes, links to and reads, and the rule that refuses a
//! removal or a write outside the lane, a link to a secret and a read of
//! one.
//!
//! Like [`super::scripts`], the code is not parsed as its language: known
//! calls (`os.remove`, `open(…, 'w')`, `Path(…).write_text`, `unlink`,
//! `fs.writeFileSync`, `File.write`, `shutil.move`, `os.symlink`, …) are
//! found by name and their literal arguments read. A path built at run time
//! is not seen; the kernel sandbox bounds that.

use super::outside::{link_target_problem, secret_read};
use super::paths::stays_inside;
use super::paths::{fold, home_relative};
use super::programs::basename;
use super::scripts::{inline_code, string_literal};
use super::unwrap::Unit;

/// What a call does with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Effect {
    Remove,
    Write,
    /// Makes a link pointing at the path.
    LinkTo,
    Read,
}

/// Calls whose name alone is ambiguous (`str.replace`, `f.write`,
/// `requests.delete`): they count only after one of these qualifiers.
const QUALIFIED: &[(&str, &[&str])] = &[
    ("write", &["File.", "IO."]),
    ("read", &["File.", "IO."]),
    ("delete", &["File."]),
    ("replace", &["os."]),
    ("remove", &["os.", "fs.", "File.", "FileUtils."]),
    ("copy", &["shutil.", "FileUtils."]),
    ("move", &["shutil.", "FileUtils."]),
    ("rename", &["os.", "fs.", "File."]),
    ("truncate", &["os.", "fs.", "File."]),
    ("link", &["os.", "fs.", "File."]),
];

/// Calls and which of their literal arguments they act on, how.
const CALLS: &[(&str, &[(usize, Effect)])] = &[
    // Removals (Python, Perl, Node, Ruby).
    ("remove", &[(0, Effect::Remove)]),
    ("unlink", &[(0, Effect::Remove), (1, Effect::Remove)]),
    ("unlinkSync", &[(0, Effect::Remove)]),
    ("rmdir", &[(0, Effect::Remove)]),
    ("rmdirSync", &[(0, Effect::Remove)]),
    ("rm", &[(0, Effect::Remove)]),
    ("rmSync", &[(0, Effect::Remove)]),
    ("rmtree", &[(0, Effect::Remove)]),
    ("rm_rf", &[(0, Effect::Remove)]),
    ("rm_r", &[(0, Effect::Remove)]),
    ("rm_f", &[(0, Effect::Remove)]),
    ("remove_tree", &[(0, Effect::Remove)]),
    ("removedirs", &[(0, Effect::Remove)]),
    ("delete", &[(0, Effect::Remove)]),
    // Writes.
    ("writeFileSync", &[(0, Effect::Write)]),
    ("writeFile", &[(0, Effect::Write)]),
    ("appendFileSync", &[(0, Effect::Write)]),
    ("appendFile", &[(0, Effect::Write)]),
    ("createWriteStream", &[(0, Effect::Write)]),
    ("write", &[(0, Effect::Write)]),
    ("truncate", &[(0, Effect::Write)]),
    ("truncateSync", &[(0, Effect::Write)]),
    ("mkdir", &[(0, Effect::Write)]),
    ("makedirs", &[(0, Effect::Write)]),
    ("mkdirSync", &[(0, Effect::Write)]),
    ("mkdir_p", &[(0, Effect::Write)]),
    ("mkpath", &[(0, Effect::Write)]),
    ("copy", &[(1, Effect::Write)]),
    ("copy2", &[(1, Effect::Write)]),
    ("copyfile", &[(1, Effect::Write)]),
    ("copytree", &[(1, Effect::Write)]),
    ("copyFileSync", &[(1, Effect::Write)]),
    ("cp", &[(1, Effect::Write)]),
    ("move", &[(0, Effect::Remove), (1, Effect::Write)]),
    ("rename", &[(0, Effect::Remove), (1, Effect::Write)]),
    ("renameSync", &[(0, Effect::Remove), (1, Effect::Write)]),
    ("replace", &[(0, Effect::Remove), (1, Effect::Write)]),
    ("mv", &[(0, Effect::Remove), (1, Effect::Write)]),
    // Links: the first argument is what the link points at.
    ("symlink", &[(0, Effect::LinkTo), (1, Effect::Write)]),
    ("symlinkSync", &[(0, Effect::LinkTo), (1, Effect::Write)]),
    ("link", &[(0, Effect::LinkTo), (1, Effect::Write)]),
    ("linkSync", &[(0, Effect::LinkTo), (1, Effect::Write)]),
    ("ln_s", &[(0, Effect::LinkTo), (1, Effect::Write)]),
    // Reads.
    ("readFileSync", &[(0, Effect::Read)]),
    ("readFile", &[(0, Effect::Read)]),
    ("read", &[(0, Effect::Read)]),
    ("slurp", &[(0, Effect::Read)]),
];

/// Methods of `Path('…')` (Python's pathlib) and what they do to it.
const PATH_METHODS: &[(&str, Effect)] = &[
    ("unlink", Effect::Remove),
    ("rmdir", Effect::Remove),
    ("write_text", Effect::Write),
    ("write_bytes", Effect::Write),
    ("touch", Effect::Write),
    ("mkdir", Effect::Write),
    ("rename", Effect::Remove),
    ("replace", Effect::Remove),
    ("symlink_to", Effect::Write),
    ("read_text", Effect::Read),
    ("read_bytes", Effect::Read),
];

/// One thing the code does to a path, with the call as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FileEffect {
    pub(super) effect: Effect,
    pub(super) path: String,
    pub(super) call: String,
}

/// The file effects of the inline code of `argv` (an interpreter command).
pub(super) fn file_effects(argv: &[String]) -> Vec<FileEffect> {
    match inline_code(argv.get(1..).unwrap_or_default()) {
        Some(code) => scan(code),
        None => Vec::new(),
    }
}

/// The file effects of `code`.
pub(super) fn scan(code: &str) -> Vec<FileEffect> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if !ident(bytes[i]) || (i > 0 && ident(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && ident(bytes[i]) {
            i += 1;
        }
        let name = &code[start..i];
        let rest = &code[i..];
        let after_ws = rest.trim_start();
        let (args_text, parens) = match after_ws.strip_prefix('(') {
            Some(a) => (a, true),
            // Perl calls without parentheses: `unlink "/x"`.
            None if after_ws.len() < rest.len() && after_ws.starts_with(['"', '\'']) => {
                (after_ws, false)
            }
            None => continue,
        };
        let _ = parens;
        let qualified = QUALIFIED.iter().find(|(n, _)| *n == name);
        if qualified.is_some_and(|(_, qs)| !qs.iter().any(|q| code[..start].ends_with(q))) {
            continue;
        }
        let args = call_args(args_text);
        // The call as written, for the message: up to its first `)`.
        let qualifier_start = code[..start]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .map_or(0, |k| k + 1);
        let call_end = code[start..]
            .find(')')
            .map_or(code.len(), |e| start + e + 1);
        let spelled = |end: usize| -> String {
            code[qualifier_start..end.min(code.len())]
                .chars()
                .take(120)
                .collect()
        };
        if name == "open" || name == "fopen" || name == "openSync" {
            out.extend(open_effects(&args, &spelled(call_end)));
        } else if name == "Path" || name == "PurePath" {
            if let Some(Some(path)) = args.first()
                && let Some(close) = args_text.find(')')
                && let Some(method) = args_text[close + 1..].strip_prefix('.')
                && let Some((_, effect)) = PATH_METHODS
                    .iter()
                    .find(|(m, _)| method.starts_with(m) && method[m.len()..].starts_with('('))
            {
                let end = code[call_end..]
                    .find(')')
                    .map_or(code.len(), |e| call_end + e + 1);
                out.push(FileEffect {
                    effect: *effect,
                    path: path.clone(),
                    call: spelled(end),
                });
            }
        } else if let Some((_, acts)) = CALLS.iter().find(|(n, _)| *n == name) {
            for (k, effect) in acts.iter() {
                if let Some(Some(path)) = args.get(*k) {
                    out.push(FileEffect {
                        effect: *effect,
                        path: path.clone(),
                        call: spelled(call_end),
                    });
                }
            }
        }
    }
    out
}

/// `open(…)` in Python, Perl, Ruby, Node: the path it opens and whether
/// for writing (a mode with `w`, `a`, `x` or `+`, or a Perl `>`).
fn open_effects(args: &[Option<String>], call: &str) -> Vec<FileEffect> {
    let lits: Vec<&str> = args.iter().flatten().map(String::as_str).collect();
    let effect = |e, p: &str| FileEffect {
        effect: e,
        path: p.trim().to_owned(),
        call: call.to_owned(),
    };
    // Perl: `open(F, '>', '/x')` or `open(F, '>/x')`.
    for (k, l) in lits.iter().enumerate() {
        let t = l.trim_start();
        if let Some(mode_end) = t.find(|c: char| !matches!(c, '>' | '<' | '+')) {
            let mode = &t[..mode_end];
            if mode.contains('>') || mode.contains('+') {
                return vec![effect(Effect::Write, &t[mode_end..])];
            }
        } else if t.contains('>') || t.contains('+') {
            return lits
                .get(k + 1)
                .map(|p| vec![effect(Effect::Write, p)])
                .unwrap_or_default();
        }
    }
    let Some(Some(path)) = args.first() else {
        return Vec::new();
    };
    let mode = args.iter().skip(1).flatten().find_map(|a| {
        let m = a.strip_prefix("mode=").unwrap_or(a);
        (m.len() <= 4 && m.chars().all(|c| "rwaxbt+".contains(c))).then_some(m)
    });
    let writes = mode.is_some_and(|m| m.contains(['w', 'a', 'x', '+']));
    vec![effect(
        if writes { Effect::Write } else { Effect::Read },
        path,
    )]
}

/// The arguments of a call starting right after its `(` (or after the name,
/// without parentheses): each a string literal, `name=literal`, or `None`.
fn call_args(text: &str) -> Vec<Option<String>> {
    let mut args = Vec::new();
    let mut rest = text;
    while args.len() < 4 {
        rest = rest.trim_start();
        if rest.is_empty() || rest.starts_with(')') || rest.starts_with(';') {
            break;
        }
        let keyword = rest
            .find('=')
            .filter(|e| {
                rest[..*e]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && *e > 0
            })
            .map(|e| (&rest[..e], &rest[e + 1..]));
        let (value, after) = match keyword {
            Some((k, v)) => match string_literal(v.trim_start()) {
                Some((lit, after)) => (Some(format!("{k}={lit}")), after),
                None => (None, v),
            },
            None => match string_literal(rest) {
                Some((lit, after)) => (Some(lit), after),
                None => (None, rest),
            },
        };
        args.push(value);
        // To the next comma at this level.
        let mut depth = 0usize;
        let mut next = None;
        let mut quote: Option<char> = None;
        for (k, c) in after.char_indices() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(c),
                (None, '(' | '[' | '{') => depth += 1,
                (None, ')' | ']' | '}') if depth == 0 => break,
                (None, ')' | ']' | '}') => depth -= 1,
                (None, ';') if depth == 0 => break,
                (None, ',') if depth == 0 => {
                    next = Some(k + 1);
                    break;
                }
                _ => {}
            }
        }
        match next {
            Some(n) => rest = &after[n..],
            None => break,
        }
    }
    args
}

/// Whether a removal or write of `path` stays in the lane or the call's
/// private temp dir (`$TMPDIR`).
fn stays_in_lane(path: &str) -> bool {
    let p = path.trim();
    if p.is_empty() {
        return true;
    }
    for tmp in ["$TMPDIR", "${TMPDIR}"] {
        if p == tmp || p.strip_prefix(tmp).is_some_and(|r| r.starts_with('/')) {
            return true;
        }
    }
    if p.starts_with('/') {
        let f = fold(p);
        // Not `/tmp` itself: it is shared with every other process (the
        // sandbox grants the call's private `$TMPDIR` only).
        return ["/dev/null", "/dev/stdout", "/dev/stderr"].contains(&f.as_str())
            || f.starts_with("/dev/fd/");
    }
    home_relative(p).is_none() && stays_inside(p)
}

/// The rule for an interpreter one-liner: a removal or write outside the
/// lane, a link to a secret, a read of one.
pub(super) fn inline_rule(u: &Unit) -> Option<String> {
    let prog = basename(u.argv.first()?);
    if !super::programs::is_interpreter(prog) {
        return None;
    }
    file_effects(&u.argv).into_iter().find_map(|e| {
        let FileEffect { effect, path, call } = &e;
        match effect {
            Effect::Remove | Effect::Write if !stays_in_lane(path) => {
                let what = if *effect == Effect::Remove {
                    "removes"
                } else {
                    "writes"
                };
                Some(format!(
                    "`{prog}` code calls `{call}`, which {what} `{path}`, outside the worktree; change only files inside the worktree (a relative path) or in the temp dir (`$TMPDIR`)"
                ))
            }
            Effect::LinkTo => link_target_problem(path).map(|why| {
                format!("`{prog}` code calls `{call}`, which makes a link to {why}")
            }),
            Effect::Read => secret_read(path).map(|why| {
                format!("reading a secret: `{prog}` code calls `{call}`: {why}; leave it alone")
            }),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effects(code: &str) -> Vec<(Effect, String)> {
        scan(code).into_iter().map(|e| (e.effect, e.path)).collect()
    }

    #[test]
    fn calls_are_read() {
        use Effect::*;
        assert_eq!(
            effects("import os; os.remove('/x/y')"),
            [(Remove, "/x/y".into())]
        );
        assert_eq!(
            effects("open('/a', 'w').write('x')"),
            [(Write, "/a".into())]
        );
        assert_eq!(effects("open('/a', mode='a')"), [(Write, "/a".into())]);
        assert_eq!(effects("print(open('/a').read())"), [(Read, "/a".into())]);
        assert_eq!(
            effects("unlink \"/h/.bashrc\""),
            [(Remove, "/h/.bashrc".into())]
        );
        assert_eq!(
            effects("open(F, '>', '/x'); print F 1"),
            [(Write, "/x".into())]
        );
        assert_eq!(effects("open(my $f, \">>/x\")"), [(Write, "/x".into())]);
        assert_eq!(
            effects("require('fs').writeFileSync('/etc/x', 'y')"),
            [(Write, "/etc/x".into())]
        );
        assert_eq!(
            effects("from pathlib import Path; Path('/x').write_text('y')"),
            [(Write, "/x".into())]
        );
        assert_eq!(
            effects("import shutil; shutil.move('a', '/b')"),
            [(Remove, "a".into()), (Write, "/b".into())]
        );
        assert_eq!(effects("print(1)"), []);
        assert_eq!(effects("print('/a/b'.replace('/a', '/c'))"), []);
        assert_eq!(effects("import sys; sys.stdout.write('/x')"), []);
        assert_eq!(effects("File.write('/x', 'y')"), [(Write, "/x".into())]);
    }
}
