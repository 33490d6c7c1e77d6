//! Finds every simple command of a command line, at every nesting level,
//! with wrappers removed: `sudo`, `env`, assignments, `nohup`, `time`,
//! `command`, `exec`, `nice`, `timeout`, `stdbuf`, and the commands hidden in
//! `xargs`, `find -exec`, `eval`, `bash -c`, `su -c`, `env -S`, command
//! substitutions, aliases defined on the line, and scripts fed to a shell's
//! stdin (here-documents, here-strings, `echo … | sh`). Variables assigned on
//! the line are substituted first (see [`super::expand`]). Nesting beyond
//! [`MAX_DEPTH`] is flagged, not followed.
//!
//! Arguments that only exist when the command runs are given their worst
//! evident value: what `xargs` appends is what the previous pipeline stage
//! prints (`/` when that cannot be told), and `find`'s `{}` is the starting
//! point itself when no test narrows the match.

use super::expand::{Scope, Written, produced_items};
use super::paths::stays_inside;
use super::programs::{
    SHELLS, basename, find_exec_groups, find_parts, is_interpreter, is_unknown_program,
    reads_script_from_stdin, shell_c_string, skip_xargs_options, su_command,
};
use super::scripts::{download_outputs, file_key, inline_code, scan_inline, script_operand};
use super::shell::{Simple, parse};
use super::wrappers::strip_wrappers;

/// Deepest nesting of `bash -c`, `$(…)`, `eval`, … that is analysed; deeper
/// commands are denied rather than run unchecked.
pub const MAX_DEPTH: usize = 8;

/// One simple command found anywhere in the command line.
#[derive(Debug)]
pub(super) struct Unit {
    /// Its words as written (after variable substitution).
    pub(super) raw: Vec<String>,
    /// The words after unwrapping `sudo`, `env`, assignments, … (program first).
    pub(super) argv: Vec<String>,
    pub(super) redirects: Vec<(String, String)>,
    /// How its words were derived when they differ from what was written,
    /// e.g. "`$x` is `/`", for the denial message.
    pub(super) note: Option<String>,
    /// It runs in the background (`… &`).
    pub(super) background: bool,
}

#[derive(Debug, Default)]
pub(super) struct Analysis {
    pub(super) units: Vec<Unit>,
    /// Pipelines with two or more stages, as indices into `units`.
    pub(super) pipelines: Vec<Vec<usize>>,
    pub(super) too_deep: bool,
    /// More than [`MAX_WALKS`] texts or [`MAX_WALKED_BYTES`] bytes were
    /// analysed (variables with many values feeding nested scripts multiply
    /// them).
    pub(super) too_large: bool,
    pub(super) fork_bomb: bool,
    /// Files downloaded earlier on the line and then run: `(file, by what)`.
    pub(super) ran_downloads: Vec<(String, String)>,
    walks: usize,
    walked_bytes: usize,
}

/// Most texts (the line, substitutions, `bash -c` strings, here-documents,
/// alias expansions, …) analysed for one command line.
pub(super) const MAX_WALKS: usize = 2000;

/// Most bytes of text analysed for one command line, all walks together.
pub(super) const MAX_WALKED_BYTES: usize = 16 << 20;

pub(super) fn analyze(command: &str) -> Analysis {
    let mut an = Analysis::default();
    walk(command, 0, &mut an, &mut Scope::default());
    an
}

/// What a simple command reads: the previous pipeline stage and any script
/// text that reaches its stdin from the line itself.
#[derive(Default)]
struct Input {
    /// The argv of the previous stage of the pipeline.
    producer: Option<Vec<String>>,
    /// Here-document bodies, here-strings and `echo`/`printf` text piped in.
    texts: Vec<String>,
}

fn walk(text: &str, depth: usize, an: &mut Analysis, scope: &mut Scope) {
    if depth > MAX_DEPTH {
        an.too_deep = true;
        return;
    }
    an.walks += 1;
    an.walked_bytes += text.len();
    if an.walks > MAX_WALKS || an.walked_bytes > MAX_WALKED_BYTES {
        an.too_large = true;
        return;
    }
    let parsed = parse(text);
    if is_fork_bomb(&parsed.code) {
        an.fork_bomb = true;
    }
    for sub in &parsed.substitutions {
        walk(sub, depth + 1, an, scope);
    }
    for pipeline in parsed.pipelines {
        let mut ids = Vec::new();
        let mut input = Input::default();
        for Simple {
            words,
            redirects,
            stdin_texts,
            background,
        } in pipeline
        {
            scope.record(&words);
            let redirects: Vec<(String, String)> = redirects
                .into_iter()
                .map(|(op, target)| {
                    let target = if op.starts_with("<<") {
                        target
                    } else {
                        scope.expand_one(&target)
                    };
                    (op, target)
                })
                .collect();
            let mut texts = input.texts.clone();
            texts.extend(stdin_texts.iter().cloned());
            let mut first = None;
            for variant in scope.expand(&words) {
                let note = (!variant.notes.is_empty()).then(|| variant.notes.join(", "));
                let unit_input = Input {
                    producer: input.producer.clone(),
                    texts: texts.clone(),
                };
                let id = add_unit(
                    variant.words,
                    redirects.clone(),
                    note,
                    &unit_input,
                    depth,
                    an,
                    scope,
                );
                an.units[id].background = background;
                first.get_or_insert(id);
            }
            let Some(id) = first else { continue };
            ids.push(id);
            let argv = an.units[id].argv.clone();
            let printed = printed_text(&argv, &stdin_texts);
            record_writes(
                &argv,
                &an.units[id].redirects,
                &printed,
                &input.texts,
                scope,
            );
            input.texts.extend(printed);
            input.producer = Some(argv);
        }
        if ids.len() > 1 {
            an.pipelines.push(ids);
        }
    }
}

/// Follows `cd`/`pushd` out of the worktree (and further moves from there).
fn track_cd(argv: &[String], scope: &mut Scope) {
    let Some(prog) = argv.first().map(|p| basename(p)) else {
        return;
    };
    if prog != "cd" && prog != "pushd" {
        return;
    }
    let target = argv[1..]
        .iter()
        .find(|a| !a.starts_with('-') || *a == "-")
        .map(String::as_str);
    let join = |dir: &str, t: &str| {
        if dir.is_empty() {
            t.to_owned()
        } else {
            format!("{}/{t}", dir.trim_end_matches('/'))
        }
    };
    scope.outside_dir = match (target, scope.outside_dir.take()) {
        (None, _) => Some("~".to_owned()),
        (Some("-"), _) => Some("$OLDPWD".to_owned()),
        (Some(t), _) if t.starts_with('/') || t.starts_with('~') || t.starts_with('$') => {
            Some(t.to_owned())
        }
        (Some(t), Some(dir)) => Some(join(&dir, t)),
        (Some(t), None) => {
            let there = join(&scope.inside_dir, t);
            if stays_inside(&there) {
                scope.inside_dir = there;
                None
            } else {
                Some(there)
            }
        }
    };
}

/// Rewrites a command that runs after a `cd` out of the worktree so the
/// rules see where it acts: `git` gets `-C DIR`; relative operands of `rm`,
/// `chmod`, `chown` and `find` are put under DIR. Returns whether anything
/// changed.
fn relocate(argv: &mut Vec<String>, dir: &str) -> bool {
    let Some(prog) = argv.first().map(|p| basename(p).to_owned()) else {
        return false;
    };
    match prog.as_str() {
        "git" => {
            argv.splice(1..1, ["-C".to_owned(), dir.to_owned()]);
            true
        }
        "rm" | "chmod" | "chown" | "find" => {
            let mut changed = false;
            for a in argv[1..].iter_mut() {
                if !a.starts_with('-')
                    && !a.starts_with('/')
                    && !a.starts_with('~')
                    && !a.starts_with('$')
                {
                    *a = format!("{}/{a}", dir.trim_end_matches('/'));
                    changed = true;
                }
            }
            changed
        }
        _ => false,
    }
}

/// Remembers the files a command writes whose content is evident: a
/// redirect of visible text or of a download, `tee` of piped-in text, and
/// `curl -o` / `wget -O`.
fn record_writes(
    argv: &[String],
    redirects: &[(String, String)],
    printed: &[String],
    piped_in: &[String],
    scope: &mut Scope,
) {
    let prog = argv.first().map(|p| basename(p)).unwrap_or_default();
    let downloaded = ["curl", "wget", "fetch", "aria2c"].contains(&prog);
    let targets = redirects
        .iter()
        .filter(|(op, _)| [">", ">>", ">|", "&>", "&>>"].contains(&op.as_str()))
        .map(|(_, t)| t.clone());
    if downloaded {
        for t in targets.chain(download_outputs(argv)) {
            scope
                .files
                .insert(file_key(&t), Written::Download(format!("`{prog}`")));
        }
    } else if !printed.is_empty() {
        for t in targets {
            scope
                .files
                .insert(file_key(&t), Written::Script(printed.join("\n")));
        }
    }
    if prog == "tee" && !piped_in.is_empty() {
        for t in argv[1..].iter().filter(|a| !a.starts_with('-')) {
            scope
                .files
                .insert(file_key(t), Written::Script(piped_in.join("\n")));
        }
    }
}

/// Text a command writes to its stdout that is visible on the line:
/// `echo`/`printf` arguments, or what `cat` reads from a here-document.
fn printed_text(argv: &[String], stdin_texts: &[String]) -> Vec<String> {
    match argv.first().map(|p| basename(p)) {
        Some("echo") => vec![argv[1..].join(" ")],
        Some("printf") => argv
            .get(1)
            .map(|f| f.replace("\\n", "\n"))
            .into_iter()
            .collect(),
        Some("cat") if argv.len() == 1 => stdin_texts.to_vec(),
        _ => Vec::new(),
    }
}

fn add_unit(
    raw: Vec<String>,
    redirects: Vec<(String, String)>,
    note: Option<String>,
    input: &Input,
    depth: usize,
    an: &mut Analysis,
    scope: &mut Scope,
) -> usize {
    let (argv, split_string) = strip_wrappers(&raw);
    let mut argv = argv.to_vec();
    if let Some(s) = split_string {
        walk(&s, depth + 1, an, scope);
    }
    let mut note = note;
    let mut raw = raw;
    if let Some(dir) = scope.outside_dir.clone()
        && relocate(&mut argv, &dir)
    {
        // What was written no longer says where it acts, so an allowlist
        // entry must match the relocated words.
        raw = argv.clone();
        let after = format!("it runs after `cd {dir}`");
        note = Some(match note {
            Some(n) => format!("{n}, {after}"),
            None => after,
        });
    }
    track_cd(&argv, scope);
    let prog = argv.first().map(|p| basename(p)).unwrap_or_default();
    let args = argv.get(1..).unwrap_or_default();
    if let Some(alias) = argv.first().and_then(|p| scope.aliases.remove(p.as_str())) {
        // Bash never re-expands the alias being expanded.
        let expanded = std::iter::once(alias.clone())
            .chain(args.iter().map(|a| crate::text::shell_quote(a)))
            .collect::<Vec<_>>()
            .join(" ");
        walk(&expanded, depth + 1, an, scope);
        scope.aliases.insert(argv[0].clone(), alias);
    }
    let interpreter = is_interpreter(prog);
    if let Some(file) = script_operand(&argv, interpreter) {
        match scope.files.get(&file_key(file)).cloned() {
            Some(Written::Script(text)) if !interpreter => walk(&text, depth + 1, an, scope),
            Some(Written::Download(by)) => an.ran_downloads.push((file.to_owned(), by)),
            _ => {}
        }
    }
    // `sudo -s` / `sudo -i` with no command run a shell on stdin.
    let sudo_shell = argv.is_empty()
        && raw
            .first()
            .is_some_and(|p| ["sudo", "doas"].contains(&basename(p)))
        && raw
            .iter()
            .any(|a| ["-s", "-i", "--shell", "--login"].contains(&a.as_str()));
    if sudo_shell {
        for script in &input.texts {
            walk(script, depth + 1, an, scope);
        }
    }
    match prog {
        p if SHELLS.contains(&p) || is_unknown_program(&argv) => {
            if let Some(script) = shell_c_string(args) {
                // `bash -c SCRIPT NAME ARGS…`: NAME is `$0`, ARGS are `$1`….
                if let Some(at) = args.iter().position(|a| *a == script) {
                    for (k, value) in args[at + 1..].iter().enumerate().take(10) {
                        scope.set(&k.to_string(), value);
                    }
                }
                walk(&script, depth + 1, an, scope);
            } else if SHELLS.contains(&p) && reads_script_from_stdin(&argv) {
                for script in &input.texts {
                    walk(script, depth + 1, an, scope);
                }
            }
        }
        p if interpreter => {
            if let Some(code) = inline_code(args) {
                let found = scan_inline(code, matches!(p, "perl" | "ruby"));
                for command in &found.commands {
                    walk(command, depth + 1, an, scope);
                }
                for (path, call) in found.deletes {
                    let how = format!("`{p}` code calls `{call}`");
                    let words = vec!["rm".to_owned(), "-r".to_owned(), path];
                    add_unit(
                        words,
                        Vec::new(),
                        Some(how),
                        &Input::default(),
                        depth + 1,
                        an,
                        scope,
                    );
                }
            }
        }
        "su" => match su_command(args) {
            Some(script) => walk(&script, depth + 1, an, scope),
            None => {
                for script in &input.texts {
                    walk(script, depth + 1, an, scope);
                }
            }
        },
        "git" => {
            // `git -c alias.x='!cmd' x` runs `cmd` in a shell.
            for pair in args.windows(2).filter(|w| w[0] == "-c") {
                if let Some((key, value)) = pair[1].split_once('=')
                    && key.starts_with("alias.")
                    && let Some(cmd) = value.strip_prefix('!')
                {
                    walk(cmd, depth + 1, an, scope);
                }
            }
        }
        "eval" => walk(&args.join(" "), depth + 1, an, scope),
        "xargs" => {
            let inner = skip_xargs_options(args);
            if !inner.is_empty() {
                let (variants, how) = xargs_variants(args, inner, input.producer.as_deref());
                for v in variants {
                    add_unit(
                        v,
                        Vec::new(),
                        Some(how.clone()),
                        &Input::default(),
                        depth + 1,
                        an,
                        scope,
                    );
                }
            }
        }
        "find" => {
            let parts = find_parts(args);
            for group in find_exec_groups(args) {
                if parts.selective {
                    add_unit(
                        group,
                        Vec::new(),
                        None,
                        &Input::default(),
                        depth + 1,
                        an,
                        scope,
                    );
                    continue;
                }
                for start in &parts.starts {
                    let words = group
                        .iter()
                        .map(|w| w.replace("{}", start))
                        .collect::<Vec<_>>();
                    let how = format!(
                        "`find` runs it on `{start}` itself, as no test such as `-name` narrows what it matches"
                    );
                    add_unit(
                        words,
                        Vec::new(),
                        Some(how),
                        &Input::default(),
                        depth + 1,
                        an,
                        scope,
                    );
                }
            }
        }
        _ => {}
    }
    an.units.push(Unit {
        raw,
        argv,
        redirects,
        note,
        background: false,
    });
    an.units.len() - 1
}

/// The commands `xargs` runs: its command with the items of its input
/// appended (or put in place of the `-I` string), and how that was read.
fn xargs_variants(
    args: &[String],
    inner: &[String],
    producer: Option<&[String]>,
) -> (Vec<Vec<String>>, String) {
    let from_file = args
        .iter()
        .any(|a| a == "-a" || a.starts_with("--arg-file") || (a.starts_with("-a") && a.len() > 2));
    let produced = producer.filter(|_| !from_file).and_then(produced_items);
    let (items, how) = match produced {
        Some(p) => {
            let how = format!(
                "`xargs` gives it what {} prints: `{}`",
                p.source,
                p.items.join(" ")
            );
            (p.items, how)
        }
        None => (
            vec!["/".to_owned()],
            "`xargs` gives it arguments read from its input, which may be any path (`/` included); \
             name the paths in the command instead"
                .to_owned(),
        ),
    };
    let replace = args.iter().enumerate().find_map(|(i, a)| {
        if a == "-I" {
            args.get(i + 1).cloned()
        } else if let Some(r) = a.strip_prefix("-I").filter(|r| !r.is_empty()) {
            Some(r.to_owned())
        } else if a == "-i" || a == "--replace" {
            Some("{}".to_owned())
        } else {
            a.strip_prefix("-i")
                .or_else(|| a.strip_prefix("--replace="))
                .map(str::to_owned)
        }
    });
    let variants = match replace {
        Some(r) => items
            .iter()
            .take(8)
            .map(|item| inner.iter().map(|w| w.replace(&r, item)).collect())
            .collect(),
        None => vec![inner.iter().cloned().chain(items).collect()],
    };
    (variants, how)
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
    names.sort();
    names.dedup();
    names
        .iter()
        .filter(|n| !n.is_empty())
        .any(|n| compact.contains(&format!("{n}|{n}")))
}
