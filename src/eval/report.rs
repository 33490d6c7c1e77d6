//! What an eval measured: one [`RunRow`] per task and run, per-task and total
//! sums, the `--json` object and the JSONL results file; for `--compare`, one
//! [`EvalReport`] per pipeline, side by side in a [`CompareReport`].
//!
//! Both the `--json` object and every JSONL line carry
//! `"format": "orch-eval/1"`; fields are only ever added under that format.
//! `--compare --json` prints `"format": "orch-eval-compare/1"`, whose sides
//! are `orch-eval/1` reports.

use super::error::EvalError;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The schema version of `--json` output and of each results line.
pub(crate) const EVAL_FORMAT: &str = "orch-eval/1";

/// The schema version of `orch eval --compare --json`.
pub(crate) const COMPARE_FORMAT: &str = "orch-eval-compare/1";

/// The file, inside the results directory, that every eval appends to.
pub(crate) const RESULTS_FILE: &str = "evals.jsonl";

/// Characters of check output kept in a row (the tail: that is where test
/// runners print the failure summary).
pub(crate) const CHECK_OUTPUT_CHARS: usize = 2000;

/// Prompt, completion and total tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Tokens {
    /// Prompt tokens.
    pub prompt: u64,
    /// Completion tokens.
    pub completion: u64,
    /// Both together.
    pub total: u64,
}

impl Tokens {
    fn add(&mut self, other: Tokens) {
        self.prompt += other.prompt;
        self.completion += other.completion;
        self.total += other.total;
    }
}

/// One stage of a measured run, as `orch run --json` reported it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct StageRow {
    /// Stage id, e.g. `code`.
    pub id: String,
    /// Role name.
    pub role: String,
    /// `succeeded`, `failed`, `skipped`, …
    pub status: String,
    /// The reviewer's verdict, when there was one.
    pub verdict: Option<String>,
    /// Model turns.
    pub turns: u64,
    /// Tokens of the stage.
    pub tokens: u64,
}

/// What the hidden check did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct CheckRow {
    /// Exit code (`None` when killed by a signal or the timeout).
    pub exit_code: Option<i32>,
    /// Whether the check timeout fired.
    pub timed_out: bool,
    /// Wall time of the check, seconds.
    pub secs: f64,
    /// The tail of its stdout and stderr (interleaved).
    pub output: String,
}

/// One run of one task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RunRow {
    /// Task name.
    pub task: String,
    /// Run number, from 1.
    pub run: u32,
    /// The run succeeded and the hidden check passed on its final branch.
    pub solved: bool,
    /// Why it is not solved (`None` when solved).
    pub reason: Option<String>,
    /// The exit code of `orch run` (`None` when it was killed).
    pub orch_exit: Option<i32>,
    /// The run's status (`succeeded`, `failed`, …), when it reported one.
    pub run_status: Option<String>,
    /// The run id.
    pub run_id: Option<String>,
    /// The model, as the run labelled it.
    pub model: Option<String>,
    /// Stages in pipeline order.
    pub stages: Vec<StageRow>,
    /// Model turns over all stages.
    pub turns: u64,
    /// Tokens over all stages.
    pub tokens: Tokens,
    /// Cost in US dollars, when the model's price is known.
    pub cost_usd: Option<f64>,
    /// Wall time of `orch run`, seconds.
    pub run_secs: f64,
    /// Wall time of the whole task run (repository set-up, run, checkout, check), seconds.
    pub wall_secs: f64,
    /// The final branch, when the run produced one.
    pub final_branch: Option<String>,
    /// The final commit.
    pub final_commit: Option<String>,
    /// The hidden check, when it ran (only for succeeded runs).
    pub check: Option<CheckRow>,
    /// The kept work directory (`--keep`), holding the repository and its run record.
    pub workdir: Option<String>,
}

/// Per-task sums over its runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TaskSummary {
    /// Task name.
    pub task: String,
    /// Runs made.
    pub runs: u32,
    /// Runs solved.
    pub solved: u32,
}

/// Sums over every run of an eval (all zero before the first run).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Total {
    /// Tasks measured.
    pub tasks: usize,
    /// Runs made (tasks × runs, fewer when interrupted).
    pub runs: u32,
    /// Runs solved.
    pub solved: u32,
    /// `solved / runs` in percent (0 when nothing ran).
    pub solved_pct: f64,
    /// Runs that `orch run` called succeeded and the hidden check did not:
    /// the run said it fixed the issue and had not.
    pub false_successes: u32,
    /// Model turns.
    pub turns: u64,
    pub tokens: Tokens,
    /// Cost of the runs whose cost is known; `None` when no run's cost is known.
    pub cost_usd: Option<f64>,
    /// Time of the `orch run`s alone (no set-up, no checks), summed, seconds.
    pub run_secs: f64,
    /// Wall time of the whole eval, seconds; for a compared side, the sum of
    /// its own task runs' wall times.
    pub wall_secs: f64,
}

/// The result of one `orch eval`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct EvalReport {
    /// Always [`EVAL_FORMAT`].
    pub format: &'static str,
    /// The eval's id (sortable by start time); a compared side's is the
    /// comparison's id with `-a` or `-b`.
    pub eval_id: String,
    /// The comparison this report is one side of (`--compare`), else absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compare_id: Option<String>,
    /// Start time, RFC 3339 UTC.
    pub started_at: String,
    /// The task-set directory.
    pub tasks_dir: String,
    /// The pipeline (name or path) every run used.
    pub pipeline: String,
    /// The model, as the first run labelled it.
    pub model: Option<String>,
    /// Runs per task asked for.
    pub runs_per_task: u32,
    /// True when Ctrl-C stopped the eval early.
    pub interrupted: bool,
    /// One row per task and run.
    pub results: Vec<RunRow>,
    /// Per-task sums.
    pub tasks: Vec<TaskSummary>,
    /// Sums over everything.
    pub total: Total,
    /// The JSONL file the rows were appended to.
    pub results_file: String,
}

impl EvalReport {
    /// Fills `tasks` and `total` from `results`; `task_names` gives the order.
    pub(crate) fn summarize(&mut self, task_names: &[String], wall_secs: f64) {
        self.tasks = task_names
            .iter()
            .filter_map(|name| {
                let rows: Vec<&RunRow> = self.results.iter().filter(|r| &r.task == name).collect();
                (!rows.is_empty()).then(|| TaskSummary {
                    task: name.clone(),
                    runs: rows.len() as u32,
                    solved: rows.iter().filter(|r| r.solved).count() as u32,
                })
            })
            .collect();
        let runs = self.results.len() as u32;
        let solved = self.results.iter().filter(|r| r.solved).count() as u32;
        let mut tokens = Tokens::default();
        for r in &self.results {
            tokens.add(r.tokens);
        }
        let costs: Vec<f64> = self.results.iter().filter_map(|r| r.cost_usd).collect();
        self.total = Total {
            tasks: self.tasks.len(),
            runs,
            solved,
            solved_pct: percent(solved, runs),
            false_successes: self
                .results
                .iter()
                .filter(|r| !r.solved && r.run_status.as_deref() == Some("succeeded"))
                .count() as u32,
            turns: self.results.iter().map(|r| r.turns).sum(),
            tokens,
            cost_usd: (!costs.is_empty()).then(|| costs.iter().sum()),
            // Rounded like each row's, so a sum of 0.1s does not print 0.30000000000000004.
            run_secs: (self.results.iter().map(|r| r.run_secs).sum::<f64>() * 1000.0).round()
                / 1000.0,
            wall_secs,
        };
        if self.model.is_none() {
            self.model = self.results.iter().find_map(|r| r.model.clone());
        }
    }

    /// The line that closes an eval in the results file: everything but the rows.
    pub(crate) fn total_line(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(obj) = v.as_object_mut() {
            obj.remove("results");
            obj.insert("kind".into(), "total".into());
        }
        v
    }
}

/// Two evals of the same tasks side by side (`orch eval --compare A B`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct CompareReport {
    /// Always [`COMPARE_FORMAT`].
    pub format: &'static str,
    /// The comparison's id; the sides' ids are it with `-a` and `-b`.
    pub compare_id: String,
    /// True when Ctrl-C stopped the comparison early.
    pub interrupted: bool,
    /// Pipeline A's eval.
    pub a: EvalReport,
    /// Pipeline B's eval.
    pub b: EvalReport,
    /// Per task, in task order: solved runs of A and of B.
    pub tasks: Vec<TaskPair>,
}

/// One task's score on both sides of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TaskPair {
    /// Task name.
    pub task: String,
    /// Pipeline A's runs and solved runs (`None` when interrupted before it ran).
    pub a: Option<Score>,
    /// Pipeline B's.
    pub b: Option<Score>,
}

/// Runs and solved runs of one task on one side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Score {
    /// Runs made.
    pub runs: u32,
    /// Runs solved.
    pub solved: u32,
}

impl CompareReport {
    /// Pairs two summarized reports of one comparison (see [`EvalReport::summarize`]).
    pub(crate) fn new(a: EvalReport, b: EvalReport) -> CompareReport {
        let score = |r: &EvalReport, name: &str| {
            r.tasks.iter().find(|t| t.task == name).map(|t| Score {
                runs: t.runs,
                solved: t.solved,
            })
        };
        // A runs each task first, so its list holds every task either has.
        let mut names: Vec<&str> = a.tasks.iter().map(|t| t.task.as_str()).collect();
        for t in &b.tasks {
            if !names.contains(&t.task.as_str()) {
                names.push(&t.task);
            }
        }
        let tasks = names
            .iter()
            .map(|name| TaskPair {
                task: (*name).to_owned(),
                a: score(&a, name),
                b: score(&b, name),
            })
            .collect();
        CompareReport {
            format: COMPARE_FORMAT,
            compare_id: a.compare_id.clone().unwrap_or_else(|| a.eval_id.clone()),
            interrupted: a.interrupted || b.interrupted,
            tasks,
            a,
            b,
        }
    }
}

/// `solved` of `runs` in percent, rounded to one decimal; 0 for no runs.
pub(crate) fn percent(solved: u32, runs: u32) -> f64 {
    if runs == 0 {
        return 0.0;
    }
    (1000.0 * f64::from(solved) / f64::from(runs)).round() / 10.0
}

/// A row as a results line: the row's fields plus `format`, `kind` and the eval id.
pub(crate) fn row_line(eval_id: &str, row: &RunRow) -> serde_json::Value {
    let mut v = serde_json::to_value(row).unwrap_or_default();
    if let Some(obj) = v.as_object_mut() {
        obj.insert("format".into(), EVAL_FORMAT.into());
        obj.insert("kind".into(), "run".into());
        obj.insert("eval_id".into(), eval_id.into());
    }
    v
}

/// Where results go when `--out` is not given: `<git dir>/orch/evals` of the
/// repository containing `cwd` (the common dir, for a linked worktree), else
/// `$XDG_STATE_HOME/orch/evals` (absolute values only), else
/// `$HOME/.local/state/orch/evals`.
pub(crate) fn default_out_dir(cwd: &Path, env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Ok(common) = crate::git::Repo::discover(cwd).and_then(|r| r.commondir()) {
        return Some(common.join("orch").join("evals"));
    }
    if let Some(xdg) = env("XDG_STATE_HOME").map(PathBuf::from)
        && xdg.is_absolute()
    {
        return Some(xdg.join("orch").join("evals"));
    }
    env("HOME").map(|h| PathBuf::from(h).join(".local/state/orch/evals"))
}

/// The results file of `dir`, open for appending (the directory is created).
pub(crate) struct ResultsFile {
    path: PathBuf,
    file: std::fs::File,
}

impl ResultsFile {
    /// Creates `dir` if needed and opens `dir/evals.jsonl` for appending.
    pub(crate) fn open(dir: &Path) -> Result<ResultsFile, EvalError> {
        let io = |e: std::io::Error| EvalError::Io {
            what: "open the results file".to_owned(),
            path: dir.join(RESULTS_FILE),
            source: e,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let path = dir.join(RESULTS_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io)?;
        Ok(ResultsFile { path, file })
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one JSON line (written in one call, so lines of concurrent
    /// evals do not interleave).
    pub(crate) fn append(&mut self, line: &serde_json::Value) -> Result<(), EvalError> {
        let mut text = line.to_string();
        text.push('\n');
        self.file
            .write_all(text.as_bytes())
            .map_err(|e| EvalError::Io {
                what: "append to the results file".to_owned(),
                path: self.path.clone(),
                source: e,
            })
    }
}

/// The last `max` characters of `text`, on a line boundary when one is near.
pub(crate) fn tail_chars(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let tail: String = text.chars().skip(count - max).collect();
    match tail.find('\n') {
        Some(i) if i + 1 < tail.len() => format!("[…]\n{}", &tail[i + 1..]),
        _ => format!("[…]{tail}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(task: &str, solved: bool, tokens: u64, cost: Option<f64>) -> RunRow {
        RunRow {
            task: task.to_owned(),
            run: 1,
            solved,
            reason: (!solved).then(|| "check.sh exited 1".to_owned()),
            orch_exit: Some(0),
            run_status: Some("succeeded".to_owned()),
            run_id: Some("r".to_owned()),
            model: Some("replay of x".to_owned()),
            stages: vec![],
            turns: 3,
            tokens: Tokens {
                prompt: tokens,
                completion: 1,
                total: tokens + 1,
            },
            cost_usd: cost,
            run_secs: 0.5,
            wall_secs: 0.7,
            final_branch: None,
            final_commit: None,
            check: None,
            workdir: None,
        }
    }

    fn report(results: Vec<RunRow>) -> EvalReport {
        EvalReport {
            format: EVAL_FORMAT,
            eval_id: "e1".to_owned(),
            compare_id: None,
            started_at: "t".to_owned(),
            tasks_dir: "d".to_owned(),
            pipeline: "p".to_owned(),
            model: None,
            runs_per_task: 2,
            interrupted: false,
            results,
            tasks: vec![],
            total: Total::default(),
            results_file: "f".to_owned(),
        }
    }

    #[test]
    fn sums_per_task_and_in_total() {
        let mut r = report(vec![
            row("a", true, 10, None),
            row("a", false, 20, Some(0.25)),
            row("b", false, 5, Some(0.5)),
        ]);
        r.summarize(&["a".to_owned(), "b".to_owned(), "c".to_owned()], 3.0);
        assert_eq!(
            r.tasks,
            [
                TaskSummary {
                    task: "a".into(),
                    runs: 2,
                    solved: 1
                },
                TaskSummary {
                    task: "b".into(),
                    runs: 1,
                    solved: 0
                }
            ]
        );
        assert_eq!(r.total.runs, 3);
        assert_eq!(r.total.solved, 1);
        assert_eq!(r.total.solved_pct, 33.3);
        assert_eq!(r.total.turns, 9);
        assert_eq!(r.total.tokens.prompt, 35);
        assert_eq!(r.total.tokens.total, 38);
        assert_eq!(r.total.cost_usd, Some(0.75));
        assert_eq!(r.model.as_deref(), Some("replay of x"));
        // Both unsolved runs said they succeeded.
        assert_eq!(r.total.false_successes, 2);
        assert_eq!(r.total.run_secs, 1.5);
        r.results[1].run_status = Some("failed".to_owned());
        r.summarize(&["a".to_owned(), "b".to_owned()], 3.0);
        assert_eq!(r.total.false_successes, 1);
    }

    #[test]
    fn a_comparison_pairs_each_tasks_scores() {
        let mut a = report(vec![row("x", true, 10, None), row("y", true, 10, None)]);
        a.compare_id = Some("c".to_owned());
        a.summarize(&["x".to_owned(), "y".to_owned()], 1.0);
        // B was interrupted before task y.
        let mut b = report(vec![row("x", false, 5, None)]);
        b.interrupted = true;
        b.summarize(&["x".to_owned(), "y".to_owned()], 1.0);
        let c = CompareReport::new(a, b);
        assert_eq!(c.compare_id, "c");
        assert!(c.interrupted);
        let score = |runs, solved| Some(Score { runs, solved });
        assert_eq!(
            c.tasks,
            [
                TaskPair {
                    task: "x".into(),
                    a: score(1, 1),
                    b: score(1, 0)
                },
                TaskPair {
                    task: "y".into(),
                    a: score(1, 1),
                    b: None
                }
            ]
        );
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["format"], COMPARE_FORMAT);
        assert_eq!(json["a"]["compare_id"], "c");
        assert_eq!(json["b"]["total"]["false_successes"], 1);
        // A single eval's object has no compare_id at all.
        let mut single = report(vec![]);
        single.summarize(&[], 0.0);
        assert!(
            serde_json::to_value(&single)
                .unwrap()
                .get("compare_id")
                .is_none()
        );
    }

    #[test]
    fn unknown_costs_stay_unknown_and_no_runs_is_zero_percent() {
        let mut r = report(vec![row("a", true, 1, None)]);
        r.summarize(&["a".to_owned()], 1.0);
        assert_eq!(r.total.cost_usd, None);
        assert_eq!(r.total.solved_pct, 100.0);
        assert_eq!(percent(0, 0), 0.0);
        assert_eq!(percent(2, 3), 66.7);
    }

    #[test]
    fn lines_carry_format_kind_and_eval_id() {
        let mut r = report(vec![row("a", true, 1, None)]);
        r.summarize(&["a".to_owned()], 1.0);
        let line = row_line("e1", &r.results[0]);
        assert_eq!(line["format"], EVAL_FORMAT);
        assert_eq!(line["kind"], "run");
        assert_eq!(line["eval_id"], "e1");
        assert_eq!(line["task"], "a");
        let total = r.total_line();
        assert_eq!(total["kind"], "total");
        assert_eq!(total["format"], EVAL_FORMAT);
        assert!(total.get("results").is_none());
        assert_eq!(total["total"]["solved"], 1);
    }

    #[test]
    fn results_are_appended() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("a/b");
        for n in 0..2 {
            let mut f = ResultsFile::open(&out).unwrap();
            f.append(&serde_json::json!({ "n": n })).unwrap();
        }
        let text = std::fs::read_to_string(out.join(RESULTS_FILE)).unwrap();
        assert_eq!(text, "{\"n\":0}\n{\"n\":1}\n");
    }

    #[test]
    fn default_out_dir_prefers_the_repository_then_state_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        git2::Repository::init(&repo).unwrap();
        std::fs::create_dir_all(repo.join("sub")).unwrap();
        let none = |_: &str| None;
        let got = default_out_dir(&repo.join("sub"), &none).unwrap();
        assert!(got.ends_with(".git/orch/evals"), "{}", got.display());
        let plain = dir.path().join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        // Outside any repository (a temp dir normally is): state dirs.
        if git2::Repository::discover(&plain).is_err() {
            let env = |k: &str| match k {
                "XDG_STATE_HOME" => Some("/state".to_owned()),
                "HOME" => Some("/home/u".to_owned()),
                _ => None,
            };
            assert_eq!(
                default_out_dir(&plain, &env),
                Some(PathBuf::from("/state/orch/evals"))
            );
            let env = |k: &str| match k {
                "XDG_STATE_HOME" => Some("relative".to_owned()),
                "HOME" => Some("/home/u".to_owned()),
                _ => None,
            };
            assert_eq!(
                default_out_dir(&plain, &env),
                Some(PathBuf::from("/home/u/.local/state/orch/evals"))
            );
            assert_eq!(default_out_dir(&plain, &none), None);
        }
    }

    #[test]
    fn tails_keep_whole_lines() {
        assert_eq!(tail_chars("short", 10), "short");
        let t = tail_chars("line one\nline two\nline three\n", 15);
        assert_eq!(t, "[…]\nline three\n");
        assert!(tail_chars("ééééé", 2).ends_with("éé"));
    }
}
