//! `orch eval`: measures a pipeline on a set of tasks with hidden checks,
//! or two pipelines side by side (`--compare`): the same tasks, in the same
//! order, with the same flags, through the same run and report code.
//!
//! For every task and run, eval builds the task's repository in a fresh temp
//! directory, runs the real `orch` binary on it (`orch run <pipeline> --repo …
//! --issue … --json`, as a child process with a timeout), and, when the run
//! succeeded, clones the run's final branch into a second directory and runs
//! the task's `check.sh` there. Exit 0 of the check means solved.
//!
//! Invariants:
//! - the agents never see the check: `check.sh` stays in the task directory,
//!   the repository is a copy, and the issue is copied next to (not into) it;
//! - nothing outside the temp directories is written except the results file
//!   ([`report::RESULTS_FILE`]), one JSON line per task run as it finishes and
//!   a closing `total` line;
//! - child processes go through [`crate::exec::run_shell`]: own process group,
//!   stdin closed, a timeout followed by SIGTERM, grace, SIGKILL.

mod error;
pub(crate) mod import;
mod report;
mod task;

pub(crate) use error::EvalError;

pub(crate) use report::{
    CheckRow, CompareReport, EVAL_FORMAT, EvalReport, RunRow, Score, StageRow, Tokens,
    default_out_dir,
};
pub(crate) use task::{Task, TaskRepo, TaskSet};

use crate::exec::{ExecLimits, ExecResult, run_shell};
use crate::ui::Ui;
use report::{CHECK_OUTPUT_CHARS, ResultsFile, row_line, tail_chars};
use serde::Deserialize;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Default bound on one `orch run` of one task.
pub(crate) const DEFAULT_RUN_TIMEOUT: Duration = Duration::from_secs(1800);
/// Default bound on one hidden check.
pub(crate) const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(120);
/// Bound on each git command eval runs itself (init, commit, clone).
const GIT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long an interrupted `orch run` gets to record the interruption.
const INTERRUPT_GRACE: Duration = Duration::from_secs(10);
/// The file in a work directory holding the pid of its running `orch run`.
const PID_FILE: &str = "orch-run.pid";
/// Characters of `orch run`'s stderr kept for an error message.
const STDERR_TAIL_CHARS: usize = 1500;
/// Author and committer of a task's base commit, and its fixed date, so base
/// commits of plain-file tasks are reproducible.
const BASE_AUTHOR: (&str, &str) = ("orch eval", "eval@orch.invalid");
const BASE_DATE: &str = "1767225600 +0000";

/// How to run an eval.
#[derive(Debug, Clone)]
pub(crate) struct EvalOptions {
    /// The tasks.
    pub tasks: TaskSet,
    /// The `orch` binary to run (normally the running one).
    pub orch_bin: PathBuf,
    /// The pipelines measured: one, or two for `--compare` (same tasks, same
    /// flags; each task run goes through every side before the next starts).
    pub sides: Vec<Side>,
    /// Runs per task (each on a fresh repository).
    pub runs: u32,
    /// Flags appended to every `orch run` (model, limits, anything else).
    pub run_args: Vec<String>,
    /// Bound on each `orch run`.
    pub run_timeout: Duration,
    /// Bound on each check.
    pub check_timeout: Duration,
    /// Keep each task run's work directory (repository, run record, checkout).
    pub keep: bool,
    /// Where the results file goes.
    pub out_dir: PathBuf,
    /// The model's label for the report; default: the label the first run reports.
    pub model_label: Option<String>,
}

/// One pipeline an eval measures, with what belongs to it alone.
#[derive(Debug, Clone)]
pub(crate) struct Side {
    /// The pipeline for `orch run`: a name, or an absolute path to a file.
    pub pipeline: String,
    /// With `--memory`: a bare repository holding the memory ref every run
    /// of this side starts from and adds to (`docs/memory.md`), so later runs
    /// see the lessons earlier ones distilled. One per side: a compared
    /// pipeline never learns from the other one's runs.
    pub memory_store: Option<PathBuf>,
}

/// Runs every task `runs` times on every side, appending each result to the
/// results file as it finishes; returns one report per side, in order. With
/// two sides the runs alternate (task 1 on A, task 1 on B, task 2 on A, …),
/// so a drifting server or an interruption treats both alike. Ctrl-C stops
/// after killing the current run; the reports then say `interrupted` and
/// hold what finished.
pub(crate) async fn run_eval(opts: &EvalOptions, ui: &Ui) -> Result<Vec<EvalReport>, EvalError> {
    let start = Instant::now();
    let eval_id = crate::ids::RunId::new().into_string();
    let compared = opts.sides.len() > 1;
    let mut results = ResultsFile::open(&opts.out_dir)?;
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut reports: Vec<EvalReport> = opts
        .sides
        .iter()
        .enumerate()
        .map(|(i, side)| EvalReport {
            format: EVAL_FORMAT,
            // A compared side's id is the comparison's id and its letter.
            eval_id: if compared {
                format!("{eval_id}-{}", side_letter(i).to_ascii_lowercase())
            } else {
                eval_id.clone()
            },
            compare_id: compared.then(|| eval_id.clone()),
            started_at: started_at.clone(),
            tasks_dir: opts.tasks.dir.display().to_string(),
            pipeline: side.pipeline.clone(),
            model: opts.model_label.clone(),
            runs_per_task: opts.runs,
            interrupted: false,
            results: Vec::new(),
            tasks: Vec::new(),
            total: report::Total::default(),
            results_file: results.path().display().to_string(),
        })
        .collect();
    let total_runs = opts.tasks.tasks.len() as u32 * opts.runs * opts.sides.len() as u32;
    let pipelines: Vec<String> = opts
        .sides
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if compared {
                format!("{} {}", side_letter(i), s.pipeline)
            } else {
                s.pipeline.clone()
            }
        })
        .collect();
    ui.line(&format!(
        "orch eval {eval_id}: {} × {}, {} {}",
        crate::text::plural(opts.tasks.tasks.len() as u64, "task", "tasks"),
        crate::text::plural(u64::from(opts.runs), "run", "runs"),
        if compared { "pipelines" } else { "pipeline" },
        pipelines.join(", ")
    ));
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut done = 0;
    'tasks: for task in &opts.tasks.tasks {
        for run in 1..=opts.runs {
            for (i, side) in opts.sides.iter().enumerate() {
                done += 1;
                let work = tempfile::Builder::new()
                    .prefix(&format!("orch-eval-{}-", task.name))
                    .tempdir()
                    .map_err(|e| EvalError::Io {
                        what: "create a work directory".to_owned(),
                        path: std::env::temp_dir(),
                        source: e,
                    })?;
                // Boxed, so it can be dropped (its child killed) before `work` goes.
                let mut one = Box::pin(run_task(opts, side, task, run, work.path().to_path_buf()));
                let mut row = tokio::select! {
                    row = &mut one => row?,
                    _ = &mut ctrl_c => {
                        for r in &mut reports {
                            r.interrupted = true;
                        }
                        ui.line("orch eval: interrupted; stopping the current run");
                        // `orch run` is in its own process group, out of the
                        // terminal's reach: pass the Ctrl-C on so it stops its
                        // tools and records the run as interrupted.
                        if interrupt_run(work.path()) {
                            let _ = tokio::time::timeout(INTERRUPT_GRACE, &mut one).await;
                        }
                        drop(one);
                        if opts.keep {
                            ui.line(&format!("orch eval: kept {}", work.keep().display()));
                        }
                        break 'tasks;
                    }
                };
                if opts.keep {
                    row.workdir = Some(work.keep().display().to_string());
                }
                let label = compared.then(|| side_letter(i));
                ui.line(&progress_line(done, total_runs, label, &row));
                results.append(&row_line(&reports[i].eval_id, &row))?;
                reports[i].results.push(row);
            }
        }
    }
    let names: Vec<String> = opts.tasks.tasks.iter().map(|t| t.name.clone()).collect();
    for report in &mut reports {
        // A side's time is that of its own runs; a single eval's is the whole.
        let wall = if compared {
            secs(Duration::from_secs_f64(
                report.results.iter().map(|r| r.wall_secs).sum(),
            ))
        } else {
            secs(start.elapsed())
        };
        report.summarize(&names, wall);
        results.append(&report.total_line())?;
    }
    Ok(reports)
}

/// `A`, `B`, …: how the table, the progress lines and the ids name side `i`.
pub(crate) fn side_letter(i: usize) -> char {
    char::from(b'A' + (i % 26) as u8)
}

fn progress_line(done: u32, total: u32, side: Option<char>, row: &RunRow) -> String {
    let outcome = if row.solved {
        "solved".to_owned()
    } else {
        format!("not solved ({})", row.reason.as_deref().unwrap_or(""))
    };
    format!(
        "orch eval: [{done}/{total}] {} run {}{}: {outcome} in {:.1}s, {}, {}",
        row.task,
        row.run,
        side.map(|c| format!(" ({c})")).unwrap_or_default(),
        row.wall_secs,
        crate::text::plural(row.turns, "turn", "turns"),
        crate::text::plural(row.tokens.total, "token", "tokens"),
    )
}

/// Sends SIGINT to the process group of the `orch run` working in `work`, if
/// one is running (its pid file exists only while it does). True when sent.
fn interrupt_run(work: &Path) -> bool {
    let pid = std::fs::read_to_string(work.join(PID_FILE))
        .ok()
        .and_then(|t| t.trim().parse::<libc::pid_t>().ok())
        .filter(|p| *p > 0)
        .and_then(rustix::process::Pid::from_raw);
    match pid {
        // The group `run_shell` created for the child (`process_group(0)`,
        // so its id is the child's pid); the pid file is removed as soon as
        // the child is reaped, so the id is not a recycled one. ESRCH is
        // harmless.
        Some(pid) => rustix::process::kill_process_group(pid, rustix::process::Signal::INT).is_ok(),
        None => false,
    }
}

/// One run of one task, in its own work directory.
async fn run_task(
    opts: &EvalOptions,
    side: &Side,
    task: &Task,
    run: u32,
    work_dir: PathBuf,
) -> Result<RunRow, EvalError> {
    let start = Instant::now();
    let repo = work_dir.join("repo");
    let base = prepare_repo(task, &repo, &work_dir).await?;
    // The issue goes next to the repository, not into it, and not by its task
    // path: an agent's shell must not be pointed at the task directory.
    let issue = work_dir.join("issue.md");
    copy_file(&task.issue, &issue)?;

    if let Some(store) = &side.memory_store {
        share_memory(task, &repo, store, true).await?;
    }
    let run_start = Instant::now();
    let (exec, json) = run_orch(opts, &side.pipeline, task, &repo, &issue, &work_dir).await?;
    let run_secs = secs(run_start.elapsed());
    if let Some(store) = &side.memory_store {
        share_memory(task, &repo, store, false).await?;
    }
    let mut row = row_from_run(task, run, &exec, json.as_ref(), opts.run_timeout);
    row.run_secs = run_secs;

    if let (true, Some(branch)) = (
        row.run_status.as_deref() == Some("succeeded"),
        row.final_branch.clone(),
    ) {
        let checkout = work_dir.join("check");
        git(
            task,
            "clone the final branch",
            &work_dir,
            &[
                OsStr::new("clone"),
                OsStr::new("-q"),
                OsStr::new("--branch"),
                OsStr::new(&branch),
                repo.as_os_str(),
                checkout.as_os_str(),
            ],
        )
        .await?;
        let check = run_check(task, &checkout, &base, opts.check_timeout).await?;
        row.solved = check.exit_code == Some(0) && !check.timed_out;
        row.reason = if check.timed_out {
            Some(format!(
                "check.sh timed out after {}s",
                opts.check_timeout.as_secs()
            ))
        } else if row.solved {
            None
        } else {
            Some(match check.exit_code {
                Some(code) => format!("check.sh exited {code}"),
                None => "check.sh was killed by a signal".to_owned(),
            })
        };
        row.check = Some(check);
    }
    row.wall_secs = secs(start.elapsed());
    Ok(row)
}

/// Copies `refs/orch/memory` from the eval's memory store into `repo`
/// (`fetch`) or back (`!fetch`), when the source has it: how a team shares
/// lessons, by fetching and pushing the ref.
async fn share_memory(
    task: &Task,
    repo: &Path,
    store: &Path,
    fetch: bool,
) -> Result<(), EvalError> {
    let has_ref = |git_dir: &Path| {
        crate::git::Repo::at(git_dir)
            .has_reference(crate::memory::store::MEMORY_REF)
            .unwrap_or(false)
    };
    let source = if fetch {
        store.to_path_buf()
    } else {
        repo.join(".git")
    };
    if !has_ref(&source) {
        return Ok(());
    }
    let spec = format!("+{0}:{0}", crate::memory::store::MEMORY_REF);
    let (verb, what) = if fetch {
        ("fetch", "fetch the shared memory ref")
    } else {
        ("push", "push the memory ref to the shared store")
    };
    git(
        task,
        what,
        repo,
        &[
            OsStr::new(verb),
            OsStr::new("-q"),
            store.as_os_str(),
            OsStr::new(&spec),
        ],
    )
    .await
    .map(|_| ())
}

/// Builds the task's repository at `repo`; returns the base commit.
async fn prepare_repo(task: &Task, repo: &Path, work: &Path) -> Result<String, EvalError> {
    match &task.repo {
        TaskRepo::Files(files) => {
            copy_tree(files, repo)?;
            git(
                task,
                "create the repository",
                repo,
                &["init", "-q", "-b", "main"],
            )
            .await?;
            git(task, "add the task's files", repo, &["add", "-A"]).await?;
            git(
                task,
                "commit the task's files",
                repo,
                &[
                    "commit",
                    "-q",
                    "--no-verify",
                    "-m",
                    &format!("eval task {}", task.name),
                ],
            )
            .await?;
        }
        TaskRepo::Git(source) | TaskRepo::Bundle(source) => {
            // A clone: the history and HEAD, not a source repository's
            // config, hooks or working-tree state (checked clean when the
            // task loaded); no hard links into the task directory.
            git(
                task,
                "clone the task's repository",
                work,
                &[
                    OsStr::new("clone"),
                    OsStr::new("-q"),
                    OsStr::new("--no-hardlinks"),
                    source.as_os_str(),
                    repo.as_os_str(),
                ],
            )
            .await?;
        }
    }
    // orch commits each stage with the repository's identity.
    for (key, value) in [
        ("user.name", BASE_AUTHOR.0),
        ("user.email", BASE_AUTHOR.1),
        ("commit.gpgsign", "false"),
    ] {
        git(
            task,
            "configure the repository",
            repo,
            &["config", key, value],
        )
        .await?;
    }
    let head = git(task, "read the base commit", repo, &["rev-parse", "HEAD"]).await?;
    Ok(head.trim().to_owned())
}

/// `orch run … --json` on the task's repository; its stdout goes to a file so
/// the JSON is not mixed with the progress lines on stderr.
async fn run_orch(
    opts: &EvalOptions,
    pipeline: &str,
    task: &Task,
    repo: &Path,
    issue: &Path,
    work: &Path,
) -> Result<(ExecResult, Option<RunJson>), EvalError> {
    let stdout = work.join("orch-run.json");
    let pid_file = work.join(PID_FILE);
    let mut argv: Vec<String> = vec![
        opts.orch_bin.display().to_string(),
        "run".to_owned(),
        pipeline.to_owned(),
        "--repo".to_owned(),
        repo.display().to_string(),
        "--issue".to_owned(),
        issue.display().to_string(),
        "--json".to_owned(),
    ];
    if let Some(replay) = &task.replay {
        argv.push("--replay".to_owned());
        argv.push(replay.display().to_string());
    }
    argv.extend(opts.run_args.iter().cloned());
    // `exec` keeps the shell's pid, so the pid file names `orch run` (and
    // its process group) for a Ctrl-C to be passed on.
    let command = format!(
        "echo $$ > {} && exec {} > {}",
        crate::text::shell_quote(&pid_file.display().to_string()),
        argv.iter()
            .map(|a| crate::text::shell_quote(a))
            .collect::<Vec<_>>()
            .join(" "),
        crate::text::shell_quote(&stdout.display().to_string())
    );
    // `orch run` itself needs the model settings and keys; it scrubs what
    // its own tool processes get.
    let env: Vec<(String, String)> = std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect();
    let exec = run_shell(
        &command,
        work,
        &env,
        opts.run_timeout,
        &ExecLimits::default(),
    )
    .await
    .map_err(|e| EvalError::Io {
        what: "start `orch run`".to_owned(),
        path: opts.orch_bin.clone(),
        source: e,
    });
    // The child is reaped: its pid may be reused from now on.
    let _ = std::fs::remove_file(&pid_file);
    let exec = exec?;
    let json = std::fs::read_to_string(&stdout)
        .ok()
        .and_then(|text| serde_json::from_str::<RunJson>(text.trim()).ok());
    if exec.exit_code == Some(crate::exit::INVALID) && json.is_none() {
        return Err(EvalError::RunRejected {
            task: task.name.clone(),
            message: last_lines(&exec.output),
        });
    }
    Ok((exec, json))
}

/// Runs the hidden check in the clean checkout: directly when it is
/// executable (its `#!` line chooses the interpreter), else with `sh`.
async fn run_check(
    task: &Task,
    checkout: &Path,
    base: &str,
    timeout: Duration,
) -> Result<CheckRow, EvalError> {
    let executable = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(&task.check).is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
    };
    let command = if executable {
        r#"exec "$ORCH_EVAL_CHECK""#
    } else {
        r#"exec sh "$ORCH_EVAL_CHECK""#
    };
    let mut env = crate::exec::scrubbed_env();
    env.extend([
        (
            "ORCH_EVAL_CHECK".to_owned(),
            task.check.display().to_string(),
        ),
        (
            "ORCH_EVAL_TASK_DIR".to_owned(),
            task.dir.display().to_string(),
        ),
        ("ORCH_EVAL_BASE".to_owned(), base.to_owned()),
        ("PYTHONDONTWRITEBYTECODE".to_owned(), "1".to_owned()),
    ]);
    let exec = run_shell(command, checkout, &env, timeout, &ExecLimits::default())
        .await
        .map_err(|e| EvalError::Io {
            what: "start check.sh".to_owned(),
            path: task.check.clone(),
            source: e,
        })?;
    Ok(CheckRow {
        exit_code: exec.exit_code,
        timed_out: exec.timed_out,
        secs: secs(exec.duration),
        output: tail_chars(&exec.output, CHECK_OUTPUT_CHARS),
    })
}

/// The parts of `orch run --json` eval reads; everything is optional so a
/// newer `orch run` that adds fields, or a failed one, still parses.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RunJson {
    run_id: Option<String>,
    status: Option<String>,
    model: Option<String>,
    stages: Vec<StageJson>,
    final_branch: Option<String>,
    final_commit: Option<String>,
    tokens: TokensJson,
    cost_usd: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct StageJson {
    id: String,
    role: String,
    status: String,
    verdict: Option<String>,
    turns: u64,
    tokens: u64,
    reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TokensJson {
    prompt: u64,
    completion: u64,
}

/// The row for a finished `orch run`, before the check.
fn row_from_run(
    task: &Task,
    run: u32,
    exec: &ExecResult,
    json: Option<&RunJson>,
    run_timeout: Duration,
) -> RunRow {
    let empty = RunJson::default();
    let j = json.unwrap_or(&empty);
    let failed_stage = j.stages.iter().find(|s| s.status == "failed").map(|s| {
        format!(
            "stage {} failed: {}",
            s.id,
            s.reason.as_deref().unwrap_or("")
        )
    });
    let reason = if exec.timed_out {
        Some(format!(
            "orch run timed out after {}s",
            run_timeout.as_secs()
        ))
    } else if j.status.as_deref() == Some("succeeded") {
        None
    } else {
        let code = exec
            .exit_code
            .map_or("a signal".to_owned(), |c| format!("exit {c}"));
        Some(format!(
            "the run did not succeed ({code}): {}",
            failed_stage.unwrap_or_else(|| last_lines(&exec.output))
        ))
    };
    RunRow {
        task: task.name.clone(),
        run,
        solved: false,
        reason,
        orch_exit: exec.exit_code,
        run_status: j.status.clone(),
        run_id: j.run_id.clone(),
        model: j.model.clone(),
        stages: j
            .stages
            .iter()
            .map(|s| StageRow {
                id: s.id.clone(),
                role: s.role.clone(),
                status: s.status.clone(),
                verdict: s.verdict.clone(),
                turns: s.turns,
                tokens: s.tokens,
            })
            .collect(),
        turns: j.stages.iter().map(|s| s.turns).sum(),
        tokens: Tokens {
            prompt: j.tokens.prompt,
            completion: j.tokens.completion,
            total: j.tokens.prompt + j.tokens.completion,
        },
        cost_usd: j.cost_usd,
        run_secs: 0.0,
        wall_secs: 0.0,
        final_branch: j.final_branch.clone(),
        final_commit: j.final_commit.clone(),
        check: None,
        workdir: None,
    }
}

/// The last non-empty lines of `output`, capped, on one line each.
fn last_lines(output: &str) -> String {
    let tail = tail_chars(output.trim_end(), STDERR_TAIL_CHARS);
    let lines: Vec<&str> = tail
        .lines()
        .filter(|l| !l.trim().is_empty() && *l != "[…]")
        .collect();
    let keep = &lines[lines.len().saturating_sub(3)..];
    if keep.is_empty() {
        "no output".to_owned()
    } else {
        keep.join(" | ")
    }
}

/// Seconds, rounded to milliseconds (more digits would only be noise).
fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// Runs git in `dir` with a hermetic environment (no user or system config,
/// fixed identity and dates); returns stdout.
async fn git<S: AsRef<OsStr>>(
    task: &Task,
    what: &str,
    dir: &Path,
    args: &[S],
) -> Result<String, EvalError> {
    let err = |message: String| EvalError::Git {
        task: task.name.clone(),
        what: what.to_owned(),
        message,
    };
    let mut cmd = tokio::process::Command::new("git");
    cmd.args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", BASE_AUTHOR.0)
        .env("GIT_AUTHOR_EMAIL", BASE_AUTHOR.1)
        .env("GIT_COMMITTER_NAME", BASE_AUTHOR.0)
        .env("GIT_COMMITTER_EMAIL", BASE_AUTHOR.1)
        .env("GIT_AUTHOR_DATE", BASE_DATE)
        .env("GIT_COMMITTER_DATE", BASE_DATE)
        .env("LC_ALL", "C")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(GIT_TIMEOUT, cmd.output())
        .await
        .map_err(|_| {
            err(format!(
                "git did not finish within {}s",
                GIT_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|e| err(format!("could not run git: {e}")))?;
    if !out.status.success() {
        return Err(err(String::from_utf8_lossy(&out.stderr).trim().to_owned()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn copy_file(from: &Path, to: &Path) -> Result<(), EvalError> {
    std::fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| EvalError::Io {
            what: format!("copy {}", from.display()),
            path: to.to_path_buf(),
            source: e,
        })
}

/// Copies the files under `from` into a new directory `to` (modes kept,
/// symlinks copied as symlinks, any `.git` skipped).
fn copy_tree(from: &Path, to: &Path) -> Result<(), EvalError> {
    let io = |path: &Path, e: std::io::Error| EvalError::Io {
        what: format!("copy the task's files from {}", from.display()),
        path: path.to_path_buf(),
        source: e,
    };
    std::fs::create_dir_all(to).map_err(|e| io(to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| io(from, e))? {
        let entry = entry.map_err(|e| io(from, e))?;
        if entry.file_name() == ".git" {
            continue;
        }
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let kind = entry.file_type().map_err(|e| io(&src, e))?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&src).map_err(|e| io(&src, e))?;
            std::os::unix::fs::symlink(target, &dst).map_err(|e| io(&dst, e))?;
        } else {
            std::fs::copy(&src, &dst).map_err(|e| io(&dst, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_lines_keeps_the_end_on_one_line() {
        assert_eq!(last_lines(""), "no output");
        assert_eq!(last_lines("a\n\nb\nc\nd\n"), "b | c | d");
    }

    #[test]
    fn copy_tree_skips_git_and_keeps_modes_and_links() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        std::fs::create_dir_all(from.join("sub")).unwrap();
        std::fs::create_dir_all(from.join(".git")).unwrap();
        std::fs::write(from.join("sub/run.sh"), "echo hi\n").unwrap();
        std::fs::set_permissions(
            from.join("sub/run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::symlink("sub/run.sh", from.join("link")).unwrap();
        let to = dir.path().join("to");
        copy_tree(&from, &to).unwrap();
        assert!(!to.join(".git").exists());
        let mode = std::fs::metadata(to.join("sub/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(
            std::fs::read_link(to.join("link")).unwrap(),
            Path::new("sub/run.sh")
        );
    }

    fn exec(code: Option<i32>, output: &str, timed_out: bool) -> ExecResult {
        ExecResult {
            exit_code: code,
            signal: None,
            timed_out,
            output: output.to_owned(),
            omitted_lines: 0,
            duration: Duration::from_millis(5),
        }
    }

    fn task() -> Task {
        Task {
            name: "t".into(),
            dir: "/t".into(),
            repo: TaskRepo::Files("/t/repo".into()),
            issue: "/t/issue.md".into(),
            check: "/t/check.sh".into(),
            replay: None,
        }
    }

    #[test]
    fn rows_sum_stages_and_explain_failures() {
        let json: RunJson = serde_json::from_value(serde_json::json!({
            "run_id": "r1", "status": "failed", "model": "m", "extra": 1,
            "stages": [
                {"id": "code", "role": "coder", "status": "succeeded", "turns": 3, "tokens": 100},
                {"id": "review", "role": "reviewer", "status": "failed", "turns": 2, "tokens": 50,
                 "reason": "no verdict"}
            ],
            "tokens": {"prompt": 120, "completion": 30},
            "cost_usd": 0.01
        }))
        .unwrap();
        let row = row_from_run(
            &task(),
            2,
            &exec(Some(1), "x", false),
            Some(&json),
            DEFAULT_RUN_TIMEOUT,
        );
        assert_eq!(row.turns, 5);
        assert_eq!(row.tokens.total, 150);
        assert_eq!(row.cost_usd, Some(0.01));
        assert_eq!(row.run, 2);
        assert!(!row.solved);
        let reason = row.reason.unwrap();
        assert!(
            reason.contains("exit 1") && reason.contains("stage review failed: no verdict"),
            "{reason}"
        );

        let row = row_from_run(
            &task(),
            1,
            &exec(None, "", true),
            None,
            Duration::from_secs(7),
        );
        assert_eq!(row.reason.as_deref(), Some("orch run timed out after 7s"));
        let row = row_from_run(
            &task(),
            1,
            &exec(
                Some(3),
                "orch: …\nerror: failed to reach the model\n",
                false,
            ),
            None,
            DEFAULT_RUN_TIMEOUT,
        );
        assert!(
            row.reason
                .unwrap()
                .contains("exit 3): orch: … | error: failed to reach the model")
        );
    }
}
