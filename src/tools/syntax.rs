//! Syntax checks of files the agent changed (issue 28.5, as Aider lints
//! every edit): after a `write_file`/`edit_file` and, for every changed
//! file, before a `finish` is accepted (`crate::agent::finish_check`).
//!
//! The checker is the language's own, chosen by build cost: a tree-sitter
//! grammar per language is a C compile each in a cold build (2 cores), while
//! the language's own parser costs orch nothing to build and parses exactly
//! what the language accepts. So:
//!
//! | files | checker | how |
//! |---|---|---|
//! | `.py`, `.pyi` | `python3 -I -B` running `ast.parse` | child process |
//! | `.js`, `.mjs`, `.cjs` | `node --check` | child process |
//! | `.go` | `gofmt -e` (output discarded) | child process |
//! | `.rs` | `rustfmt --edition 2021` reading the file on stdin | child process |
//! | `.json` | `serde_json` (already a dependency) | in process |
//! | `.toml` | `toml` (already a dependency) | in process |
//!
//! Invariants:
//! - a checker writes nothing in the lane: `ast.parse` compiles nothing to
//!   disk (and `-B` with `PYTHONDONTWRITEBYTECODE` forbids bytecode anyway;
//!   `-I` keeps a lane file named `ast.py` from shadowing the parser),
//!   `node --check`, `gofmt` without `-w` and `rustfmt` on stdin write
//!   only to their output;
//! - a child checker runs as a `bash` call does ([`super::run_sandboxed`]:
//!   the lane's sandbox, environment and limits) with a short bound
//!   ([`CHECK_TIMEOUT`]); what it reads is the lane's file;
//! - "does not parse" is said only when the checker exited non-zero *and*
//!   its output names the file with a line: a checker that is missing
//!   (exit 127), timed out or failed otherwise is "not checked", never a
//!   syntax error;
//! - an in-process check reads the file through the path fence.

use std::time::Duration;

use super::context::ToolContext;
use super::fence::{self, Access};

/// How long one child checker may run.
pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes of a checker's output kept (head and tail).
const OUTPUT_CAP: usize = 2 * 1024;

/// Largest file checked in process.
const MAX_IN_PROCESS_BYTES: u64 = 4 << 20;

/// The environment variable that carries the checked file's path to the
/// checker's command line (so no path is ever quoted into it).
const FILE_VAR: &str = "ORCH_SYNTAX_CHECK_FILE";

/// What checking one file came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SyntaxCheck {
    /// It parses.
    Parses,
    /// orch has no checker for this kind of file.
    NoChecker,
    /// It does not parse.
    Errors {
        /// The checker's name (`python3`, `node`, `json`, …).
        tool: &'static str,
        /// The first error in one line, `path:line[:col]: message`.
        first: String,
        /// The checker's errors (capped).
        text: String,
    },
    /// The checker could not say.
    NotChecked {
        /// The checker's name.
        tool: &'static str,
        /// Why, e.g. `node not found`.
        why: String,
    },
}

/// The checkers ([`Checker::for_path`] chooses one by the file's name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Checker {
    Python,
    Node,
    Gofmt,
    Rustfmt,
    Json,
    Toml,
}

/// `ast.parse` of the file in `argv[1]`; on failure the error as
/// `path:line:col: Kind: message` and the offending line. No single
/// quotes: the script is single-quoted on the command line.
const PYTHON_SCRIPT: &str = r#"import ast,sys
p=sys.argv[1]
try:
    ast.parse(open(p,"rb").read(),p)
except SyntaxError as e:
    print("%s:%s:%s: %s: %s"%(p,e.lineno,e.offset,type(e).__name__,e.msg))
    t=(e.text or "").rstrip()
    t and print("    "+t.lstrip())
    sys.exit(1)
except ValueError as e:
    print("%s:1: ValueError: %s"%(p,e))
    sys.exit(1)
"#;

impl Checker {
    /// The checker of the file at `rel`, by its extension.
    fn for_path(rel: &str) -> Option<Checker> {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        let (stem, ext) = name.rsplit_once('.')?;
        if stem.is_empty() {
            return None;
        }
        let ext = ext.to_ascii_lowercase();
        Some(match ext.as_str() {
            "py" | "pyi" => Checker::Python,
            "js" | "mjs" | "cjs" => Checker::Node,
            "go" => Checker::Gofmt,
            "rs" => Checker::Rustfmt,
            // JSON with comments by convention (tsconfig, VS Code settings,
            // dev containers) is not JSON: left alone.
            "json" if !is_jsonc(rel) => Checker::Json,
            "toml" => Checker::Toml,
            _ => return None,
        })
    }

    /// The checker's name, as it is said to the model.
    fn name(self) -> &'static str {
        match self {
            Checker::Python => "python3",
            Checker::Node => "node",
            Checker::Gofmt => "gofmt",
            Checker::Rustfmt => "rustfmt",
            Checker::Json => "json",
            Checker::Toml => "toml",
        }
    }

    /// The command line of a child checker (the file is `"./$FILE_VAR"`).
    fn command(self) -> Option<String> {
        let file = format!("\"./${FILE_VAR}\"");
        Some(match self {
            Checker::Python => format!("python3 -I -B -c '{PYTHON_SCRIPT}' {file}"),
            Checker::Node => format!("node --check {file}"),
            Checker::Gofmt => format!("gofmt -e {file} >/dev/null"),
            Checker::Rustfmt => format!("rustfmt --edition 2021 --emit stdout < {file} >/dev/null"),
            Checker::Json | Checker::Toml => return None,
        })
    }
}

/// JSON files that by convention hold comments (JSONC).
fn is_jsonc(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name.starts_with("tsconfig")
        || name.starts_with("jsconfig")
        || name == "devcontainer.json"
        || name == ".devcontainer.json"
        || rel.starts_with(".vscode/")
        || rel.contains("/.vscode/")
}

/// Whether orch has a checker for the file at `rel` (relative to the root).
pub(crate) fn has_checker(rel: &str) -> bool {
    Checker::for_path(rel).is_some()
}

/// Checks the file at `rel` (relative to `ctx.root`) with its language's
/// checker.
pub(crate) async fn check(ctx: &ToolContext, rel: &str) -> SyntaxCheck {
    let Some(checker) = Checker::for_path(rel) else {
        return SyntaxCheck::NoChecker;
    };
    let Ok(f) = fence::resolve(&ctx.root, rel, Access::Read) else {
        return SyntaxCheck::NoChecker;
    };
    match checker.command() {
        Some(command) => run_child(ctx, checker, &f.rel, &command).await,
        None => {
            let path = f.abs.clone();
            let read = tokio::task::spawn_blocking(move || {
                let meta = std::fs::metadata(&path)?;
                if !meta.is_file() || meta.len() > MAX_IN_PROCESS_BYTES {
                    return Ok(None);
                }
                std::fs::read(&path).map(Some)
            })
            .await;
            match read {
                Ok(Ok(Some(bytes))) => in_process(checker, &f.rel, &bytes),
                Ok(Ok(None)) | Ok(Err(_)) | Err(_) => SyntaxCheck::NoChecker,
            }
        }
    }
}

/// Parses `bytes` (the file at `rel`) in process.
fn in_process(checker: Checker, rel: &str, bytes: &[u8]) -> SyntaxCheck {
    let error = match checker {
        Checker::Json => serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
            .err()
            .map(|e| {
                let at = format!(" at line {} column {}", e.line(), e.column());
                let msg = e.to_string();
                let msg = msg.strip_suffix(&at).unwrap_or(&msg).to_owned();
                format!("{rel}:{}:{}: {msg}", e.line(), e.column())
            }),
        Checker::Toml => {
            let text = String::from_utf8_lossy(bytes);
            toml::from_str::<toml::Table>(&text).err().map(|e| {
                let (line, col) = e.span().map_or((1, 1), |s| line_col(&text, s.start));
                format!("{rel}:{line}:{col}: {}", e.message().trim())
            })
        }
        _ => None,
    };
    match error {
        None => SyntaxCheck::Parses,
        Some(first) => SyntaxCheck::Errors {
            tool: checker.name(),
            text: first.clone(),
            first,
        },
    }
}

/// The 1-based line and column of byte `at` in `text`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..at.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, col)
}

/// Runs a child checker on `rel` in the lane, as a `bash` call runs.
async fn run_child(ctx: &ToolContext, checker: Checker, rel: &str, command: &str) -> SyntaxCheck {
    let tool = checker.name();
    let mut ctx = ctx.clone();
    ctx.env
        .retain(|(k, _)| k != FILE_VAR && k != "PYTHONDONTWRITEBYTECODE");
    ctx.env.push((FILE_VAR.to_owned(), rel.to_owned()));
    ctx.env
        .push(("PYTHONDONTWRITEBYTECODE".to_owned(), "1".to_owned()));
    let ran = match super::run_sandboxed(&ctx, command, CHECK_TIMEOUT).await {
        Ok((Ok(ran), _)) => ran,
        Ok((Err(e), _)) => {
            return SyntaxCheck::NotChecked {
                tool,
                why: format!("could not start bash: {e}"),
            };
        }
        Err(why) => {
            return SyntaxCheck::NotChecked {
                tool,
                why: format!("{tool} could not run: {why}"),
            };
        }
    };
    if ran.timed_out {
        return SyntaxCheck::NotChecked {
            tool,
            why: format!("{tool} timed out after {}s", CHECK_TIMEOUT.as_secs()),
        };
    }
    match ran.exit_code {
        Some(0) => return SyntaxCheck::Parses,
        Some(127) => {
            return SyntaxCheck::NotChecked {
                tool,
                why: format!("{tool} not found"),
            };
        }
        _ => {}
    }
    let root = format!("{}/", ctx.root.display());
    let output = ran
        .output
        .replace(&root, "")
        .replace(&format!("./{rel}"), rel)
        .replace("<stdin>", rel);
    let output = output.trim_end();
    match first_error(checker, rel, output) {
        Some(first) => {
            // JSX is not JavaScript: node cannot vouch for such a file.
            if checker == Checker::Node && first.ends_with("Unexpected token '<'") {
                return SyntaxCheck::NotChecked {
                    tool,
                    why: format!("node cannot parse {rel} (JSX?)"),
                };
            }
            SyntaxCheck::Errors {
                tool,
                first,
                text: crate::text::head_tail_lines(&checker_text(checker, output), OUTPUT_CAP),
            }
        }
        None => SyntaxCheck::NotChecked {
            tool,
            why: format!(
                "{tool} failed without naming an error in {rel}: {}",
                crate::text::one_line(output, 160)
            ),
        },
    }
}

/// The checker's output without what only says where in the checker it
/// failed (node's stack and version lines).
fn checker_text(checker: Checker, output: &str) -> String {
    if checker != Checker::Node {
        return output.to_owned();
    }
    output
        .lines()
        .filter(|l| !l.starts_with("    at ") && !l.starts_with("Node.js v"))
        .collect::<Vec<_>>()
        .join("\n")
        .trim_end()
        .to_owned()
}

/// The first error of a failed checker's output as
/// `path:line[:col]: message`, when the output names the file with a line.
fn first_error(checker: Checker, rel: &str, output: &str) -> Option<String> {
    let located = |l: &str| {
        l.strip_prefix(rel)
            .and_then(|r| r.strip_prefix(':'))
            .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
    };
    match checker {
        Checker::Python | Checker::Gofmt => output
            .lines()
            .find(|l| located(l))
            .map(|l| l.trim().to_owned()),
        Checker::Node => {
            let at = output.lines().find(|l| located(l))?.trim();
            let msg = output
                .lines()
                .find(|l| !l.starts_with(' ') && l.contains("Error"))?;
            Some(format!("{at}: {}", msg.trim()))
        }
        Checker::Rustfmt => {
            let msg = output.lines().find(|l| l.starts_with("error"))?;
            let at = output
                .lines()
                .filter_map(|l| l.trim_start().strip_prefix("--> "))
                .find(|l| located(l))?;
            Some(format!("{}: {}", at.trim(), msg.trim()))
        }
        Checker::Json | Checker::Toml => None,
    }
}

impl SyntaxCheck {
    /// What the model is told after a write: the errors, or why the file
    /// could not be checked; `None` when there is nothing to say.
    pub(crate) fn note(&self, rel: &str) -> Option<String> {
        match self {
            SyntaxCheck::Parses | SyntaxCheck::NoChecker => None,
            SyntaxCheck::Errors { tool, text, .. } => Some(format!(
                "syntax check ({tool}): {rel} does not parse:\n{text}"
            )),
            SyntaxCheck::NotChecked { why, .. } => Some(format!("not checked: {why}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_support::ctx;

    #[test]
    fn checkers_by_name() {
        assert_eq!(Checker::for_path("a/b.py"), Some(Checker::Python));
        assert_eq!(Checker::for_path("x.MJS"), Some(Checker::Node));
        assert_eq!(Checker::for_path("cfg/a.json"), Some(Checker::Json));
        assert_eq!(Checker::for_path("tsconfig.json"), None);
        assert_eq!(Checker::for_path("web/tsconfig.base.json"), None);
        assert_eq!(Checker::for_path(".vscode/settings.json"), None);
        assert_eq!(Checker::for_path("README.md"), None);
        assert_eq!(Checker::for_path("Makefile"), None);
        assert_eq!(Checker::for_path(".py"), None);
    }

    #[test]
    fn json_and_toml_errors_have_their_line() {
        let bad = in_process(Checker::Json, "c.json", b"{\"a\": 1,\n}\n");
        let SyntaxCheck::Errors { first, .. } = bad else {
            panic!("{bad:?}")
        };
        assert_eq!(first, "c.json:2:1: key must be a string");
        assert_eq!(
            in_process(Checker::Json, "c.json", b"{\"a\": [1]}"),
            SyntaxCheck::Parses
        );
        let bad = in_process(Checker::Toml, "c.toml", b"[a]\nx = 1\ny = \n");
        let SyntaxCheck::Errors { first, .. } = bad else {
            panic!("{bad:?}")
        };
        assert!(first.starts_with("c.toml:3:"), "{first}");
        assert_eq!(
            in_process(Checker::Toml, "c.toml", b"[a]\nx = 1\n"),
            SyntaxCheck::Parses
        );
    }

    #[tokio::test]
    async fn python_errors_name_the_line_and_leave_no_bytecode() {
        let (dir, ctx) = ctx();
        std::fs::write(dir.path().join("ast.py"), "raise SystemExit(3)\n").unwrap();
        std::fs::write(dir.path().join("s.py"), "def f(:\n    pass\n").unwrap();
        std::fs::write(dir.path().join("ok.py"), "def f():\n    pass\n").unwrap();
        let checked = check(&ctx, "s.py").await;
        match &checked {
            SyntaxCheck::Errors { first, .. } => {
                assert!(first.starts_with("s.py:1:"), "{first}");
                assert!(first.contains("SyntaxError"), "{first}");
            }
            SyntaxCheck::NotChecked { why, .. } if why == "python3 not found" => return,
            other => panic!("{other:?}"),
        }
        assert_eq!(check(&ctx, "ok.py").await, SyntaxCheck::Parses);
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["ast.py", "ok.py", "s.py"]);
    }

    #[tokio::test]
    async fn a_missing_checker_is_not_a_syntax_error() {
        let (dir, mut ctx) = ctx();
        std::fs::write(dir.path().join("a.js"), "function f( {\n").unwrap();
        // A PATH with bash and nothing else.
        let bin = tempfile::tempdir().unwrap();
        let bash = ["/bin/bash", "/usr/bin/bash"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("bash");
        std::os::unix::fs::symlink(bash, bin.path().join("bash")).unwrap();
        ctx.env.retain(|(k, _)| k != "PATH");
        ctx.env
            .push(("PATH".to_owned(), bin.path().display().to_string()));
        assert_eq!(
            check(&ctx, "a.js").await,
            SyntaxCheck::NotChecked {
                tool: "node",
                why: "node not found".to_owned()
            }
        );
    }
}
