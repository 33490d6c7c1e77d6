//! What common programs do with their arguments, as far as the rules need
//! to know: which words of a shell, an interpreter, `su`, `xargs` or `find`
//! are a program to run, and whether it is read from stdin.

pub(super) const SHELLS: &[&str] = &[
    "bash", "sh", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "busybox",
];

pub(super) fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// Skips leading options of a wrapper. `with_arg` lists options that take a
/// separate argument. Returns the index of the first operand.
pub(super) fn skip_opts(args: &[String], with_arg: &[&str]) -> usize {
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
    // An option that takes an argument may be the last word.
    i.min(args.len())
}

/// A program that is only known when the shell runs it: `$(…)`, backticks
/// or a variable not assigned on the line.
pub(super) fn is_unknown_program(argv: &[String]) -> bool {
    argv.first()
        .is_some_and(|p| p.starts_with('$') || p.contains("$(") || p.contains('`'))
}

/// Whether a shell invocation runs the script it reads on stdin (no `-c`,
/// no script file, or an explicit `-s` / `-` / `/dev/stdin`).
pub(super) fn reads_script_from_stdin(argv: &[String]) -> bool {
    let Some(prog) = argv.first().map(|p| basename(p)) else {
        return false;
    };
    if !SHELLS.contains(&prog) {
        return false;
    }
    let args = &argv[1..];
    shell_c_string(args).is_none()
        && args
            .iter()
            .all(|a| a.starts_with('-') || a.starts_with('+'))
        || args
            .iter()
            .any(|a| a == "-s" || a == "/dev/stdin" || a == "-")
}

/// How a script interpreter (not a shell) is given its program.
struct Family {
    /// Short options (letters, bundled or not) that give the program inline.
    inline: &'static str,
    /// Short options whose argument follows (attached or as the next word).
    with_arg: &'static str,
    /// Long options that give the program inline.
    inline_long: &'static [&'static str],
    /// Long options taking the next word as their argument.
    long_with_arg: &'static [&'static str],
}

fn interpreter_family(prog: &str) -> Option<Family> {
    let version = |p: &str| p.chars().all(|c| c.is_ascii_digit() || c == '.');
    let family = |inline, with_arg, inline_long, long_with_arg| Family {
        inline,
        with_arg,
        inline_long,
        long_with_arg,
    };
    if ["python", "pypy"]
        .iter()
        .any(|p| prog.strip_prefix(p).is_some_and(version))
    {
        return Some(family("cm", "WXQ", &[], &[]));
    }
    match prog {
        "perl" | "ruby" => Some(family("eE", "IMCmrx", &[], &[])),
        "node" | "nodejs" | "bun" => Some(family(
            "ep",
            "r",
            &["--eval", "--print"],
            &["--require", "--import", "--loader"],
        )),
        "php" => Some(family("rfBRFE", "dc", &[], &[])),
        "lua" | "luajit" | "tclsh" | "Rscript" | "julia" | "osascript" => {
            Some(family("e", "l", &[], &[]))
        }
        _ => None,
    }
}

/// A script interpreter other than a shell (`python3`, `perl`, `node`, …).
pub(super) fn is_interpreter(prog: &str) -> bool {
    interpreter_family(prog).is_some()
}

/// The interpreter (not a shell) that runs a program it reads on stdin: no
/// inline program, no script file, or an explicit `-` / `/dev/stdin`.
pub(super) fn interpreter_reading_stdin(argv: &[String]) -> Option<&str> {
    let prog = basename(argv.first()?);
    let fam = interpreter_family(prog)?;
    let mut args = argv[1..].iter();
    while let Some(a) = args.next() {
        if a == "-" || a == "/dev/stdin" {
            return Some(prog);
        }
        if a == "--" {
            return match args.next().map(String::as_str) {
                None | Some("-" | "/dev/stdin") => Some(prog),
                Some(_) => None,
            };
        }
        if let Some(long) = a.strip_prefix("--") {
            let name = long.split('=').next().unwrap_or(long);
            let name = format!("--{name}");
            if fam.inline_long.contains(&name.as_str()) {
                return None;
            }
            if fam.long_with_arg.contains(&name.as_str()) && !long.contains('=') {
                args.next();
            }
        } else if let Some(short) = a.strip_prefix('-') {
            for (k, c) in short.char_indices() {
                if fam.inline.contains(c) {
                    return None;
                }
                if fam.with_arg.contains(c) {
                    if k + c.len_utf8() == short.len() {
                        args.next();
                    }
                    break;
                }
            }
        } else {
            // A script file.
            return None;
        }
    }
    Some(prog)
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

pub(super) fn su_command(args: &[String]) -> Option<String> {
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

pub(super) fn skip_xargs_options(args: &[String]) -> &[String] {
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

/// A `find` command line split into what it searches and how.
pub(super) struct FindParts {
    /// The starting points (`.` when none is given).
    pub(super) starts: Vec<String>,
    /// Some test (`-name`, `-type f`, `-newer`, …) narrows what it matches,
    /// so a starting point is not itself a match.
    pub(super) selective: bool,
    /// It deletes what it matches (`-delete`, or `-exec rm`/`rmdir`/`unlink`/`shred`).
    pub(super) deletes: bool,
}

/// Primaries that select nothing by themselves (options, actions, operators).
const FIND_NON_TESTS: &[&str] = &[
    "-maxdepth",
    "-mindepth",
    "-depth",
    "-d",
    "-xdev",
    "-mount",
    "-follow",
    "-noleaf",
    "-ignore_readdir_race",
    "-noignore_readdir_race",
    "-regextype",
    "-warn",
    "-nowarn",
    "-daystart",
    "-print",
    "-print0",
    "-printf",
    "-fprint",
    "-fprint0",
    "-fprintf",
    "-ls",
    "-fls",
    "-delete",
    "-prune",
    "-true",
    "-quit",
    "-o",
    "-or",
    "-a",
    "-and",
    "-not",
    "!",
    "(",
    ")",
    ",",
    "-help",
    "-version",
];

pub(super) fn find_parts(args: &[String]) -> FindParts {
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-H" | "-L" | "-P" => i += 1,
            "-D" => i += 2,
            a if a.starts_with("-O") => i += 1,
            _ => break,
        }
    }
    let mut starts = Vec::new();
    while i < args.len() {
        let a = args[i].as_str();
        if a.starts_with('-') || a == "(" || a == "!" || a == "," {
            break;
        }
        starts.push(a.to_owned());
        i += 1;
    }
    if starts.is_empty() {
        starts.push(".".to_owned());
    }
    let mut selective = false;
    let mut deletes = false;
    let expr = &args[i.min(args.len())..];
    let mut j = 0;
    while j < expr.len() {
        let a = expr[j].as_str();
        let next = expr.get(j + 1).map(String::as_str).unwrap_or("");
        match a {
            "-delete" => deletes = true,
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                deletes |= ["rm", "rmdir", "unlink", "shred"].contains(&basename(next));
                while j < expr.len() && expr[j] != ";" && expr[j] != "+" {
                    j += 1;
                }
            }
            "-type" | "-xtype" => {
                selective |= next != "d";
                j += 1;
            }
            "-name" | "-iname" | "-path" | "-ipath" | "-wholename" | "-iwholename" | "-regex"
            | "-iregex" | "-lname" | "-ilname" => {
                selective |= !next.chars().all(|c| matches!(c, '*' | '.'));
                j += 1;
            }
            "-maxdepth" | "-mindepth" | "-regextype" | "-fprint" | "-fprint0" | "-fls"
            | "-printf" => j += 1,
            "-fprintf" => j += 2,
            a if a.starts_with('-') && !FIND_NON_TESTS.contains(&a) => selective = true,
            _ => {}
        }
        j += 1;
    }
    FindParts {
        starts,
        selective,
        deletes,
    }
}

/// The commands of `find … -exec CMD … ;` (also `-execdir`, `-ok`, `-okdir`).
pub(super) fn find_exec_groups(args: &[String]) -> Vec<Vec<String>> {
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
