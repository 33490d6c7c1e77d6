//! `orch demo`: the main job, offline. It builds a small Python repository
//! with a real bug from the bundled fixtures, runs `issue-to-pr` on it with
//! the recorded replay model (tools run for real; only the model's replies
//! are replayed), and then runs the fixture's own tests on the PR branch.

use super::args::ModelArgs;
use super::error::CliError;
use super::output::{Out, ignore_closed};
use super::session::{SessionBuilder, roles_for};
use super::summary::{exit_code_of, print_summary};
use crate::catalog::Catalog;
use crate::exit;
use crate::runner::{RunOptions, run_pipeline};
use crate::ui::Ui;
use std::path::{Path, PathBuf};
use std::process::Command;

const REPO_FILES: &[(&str, &str)] = &[
    (
        "textstats.py",
        include_str!("../../fixtures/demo/repo/textstats.py"),
    ),
    (
        "test_textstats.py",
        include_str!("../../fixtures/demo/repo/test_textstats.py"),
    ),
    (
        "README.md",
        include_str!("../../fixtures/demo/repo/README.md"),
    ),
    (
        "CHANGELOG.md",
        include_str!("../../fixtures/demo/repo/CHANGELOG.md"),
    ),
    (
        ".gitignore",
        include_str!("../../fixtures/demo/repo/.gitignore"),
    ),
];
const ISSUE: &str = include_str!("../../fixtures/demo/ISSUE.md");
const REPLAY: &str = include_str!("../../fixtures/demo/replay.json");

/// Arguments of `orch demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Where to build the demo repository (must not exist or be empty); default: a new temp dir
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print the run's JSON object instead of the human summary
    #[arg(long)]
    pub json: bool,
}

/// `orch demo`.
pub(super) async fn cmd_demo(args: DemoArgs) -> Result<i32, CliError> {
    let dir = match args.dir {
        Some(d) => {
            if d.exists() && std::fs::read_dir(&d).map_or(true, |mut e| e.next().is_some()) {
                return Err(CliError::Invalid(format!(
                    "failed to use {} for the demo: it exists and is not an empty directory",
                    d.display()
                )));
            }
            d
        }
        None => tempfile::Builder::new()
            .prefix("orch-demo-")
            .tempdir()
            .map_err(|e| CliError::Internal(format!("failed to create a temp dir: {e}")))?
            .keep(),
    };
    let ui = Ui::new(args.json);
    let repo = dir.join("repo");
    build_repo(&repo)?;
    let issue_path = dir.join("ISSUE.md");
    let replay_path = dir.join("replay.json");
    write(&issue_path, ISSUE)?;
    write(&replay_path, REPLAY)?;
    ui.line(&format!(
        "orch demo: built {} (a Python module with a real bug)",
        repo.display()
    ));
    ui.line(&format!("orch demo: issue {}", issue_path.display()));
    ui.line("orch demo: model = REPLAY of recorded responses (offline; no model is called). Tools run for real.");
    let before = python(&repo, &["-c", REPRO]);
    ui.line(&format!(
        "orch demo: before the run, word_count(\"hello  world\"), word_count(\"one\\ntwo\") = {}",
        before.trim()
    ));

    let catalog = Catalog::load(Some(&repo))?;
    let pipeline = catalog.pipeline("issue-to-pr")?;
    let roles = roles_for(&catalog, &pipeline)?;
    let replay = ModelArgs {
        replay: Some(replay_path),
        ..ModelArgs::default()
    };
    let session = SessionBuilder::new(&replay, None)?
        .interactive(false)
        .build_with(Default::default(), Default::default());
    let summary = run_pipeline(
        RunOptions {
            repo: repo.clone(),
            pipeline,
            roles,
            issue: ISSUE.to_owned(),
            issue_json: None,
            base: "HEAD".to_owned(),
            session,
        },
        &ui,
    )
    .await?;
    ignore_closed(print_summary(&summary, args.json))?;
    let code = exit_code_of(&summary);
    if code != exit::OK {
        return Ok(code);
    }

    // Check the result the way a reviewer of the PR would: the fixture's own
    // tests, on a fresh export of the PR branch's tree.
    let result = dir.join("pr-tree");
    let final_commit = summary
        .state
        .stages
        .iter()
        .rev()
        .find_map(|s| s.commit.clone())
        .ok_or_else(|| {
            CliError::Internal(
                "failed to find the PR commit for the demo repository: no stage committed"
                    .to_owned(),
            )
        })?;
    crate::git::Repo::at(&repo).export_tree(&final_commit, &result)?;
    let after = python(&result, &["-c", REPRO]);
    let tests = Command::new("python3")
        .args(["-m", "unittest", "-v"])
        .current_dir(&result)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output();
    let (ok, report) = match tests {
        Ok(o) => (
            o.status.success(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        ),
        Err(e) => (false, format!("could not run python3: {e}")),
    };
    if !args.json {
        ignore_closed(print_verification(
            &result,
            &repo,
            (before.trim(), after.trim()),
            &report,
        ))?;
    }
    if ok {
        Ok(exit::OK)
    } else {
        crate::ui::status_line(&format!(
            "orch demo: the fixture's tests failed on the PR branch:\n{report}"
        ));
        Ok(exit::STAGE_FAILED)
    }
}

/// What the fixture's own tests said on the PR branch, on stdout.
fn print_verification(
    result: &Path,
    repo: &Path,
    (before, after): (&str, &str),
    report: &str,
) -> Result<(), CliError> {
    let mut out = Out::stdout();
    writeln!(out)?;
    writeln!(out, "verification on the PR branch ({}):", result.display())?;
    writeln!(
        out,
        "  word_count(\"hello  world\"), word_count(\"one\\ntwo\"): before {before} → after {after}"
    )?;
    let last = report
        .lines()
        .filter(|l| !l.trim().is_empty())
        .rev()
        .take(2)
        .collect::<Vec<_>>();
    writeln!(
        out,
        "  python3 -m unittest: {}",
        last.into_iter().rev().collect::<Vec<_>>().join(" — ")
    )?;
    writeln!(
        out,
        "  the demo repo's own branch and working tree are untouched: git -C {} status",
        repo.display()
    )?;
    writeln!(
        out,
        "  look at the run: orch review last --repo {0}   (also show, diff, log, rollback, resume)",
        repo.display()
    )?;
    out.finish()
}

const REPRO: &str = "import textstats; print(textstats.word_count('hello  world'), textstats.word_count('one\\ntwo'))";

fn write(path: &Path, text: &str) -> Result<(), CliError> {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p)
            .map_err(|e| CliError::Internal(format!("failed to create {}: {e}", p.display())))?;
    }
    std::fs::write(path, text)
        .map_err(|e| CliError::Internal(format!("failed to write {}: {e}", path.display())))
}

/// Runs python3 in `dir` (without writing bytecode into the tree) and returns stdout.
fn python(dir: &Path, args: &[&str]) -> String {
    Command::new("python3")
        .args(args)
        .current_dir(dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|e| format!("(python3 not runnable: {e})"))
}

fn git_err(what: &str, e: git2::Error) -> CliError {
    CliError::Internal(format!(
        "failed to {what} for the demo repository: {}",
        e.message()
    ))
}

/// A fresh repository with the fixture files in one commit on `main`.
fn build_repo(repo: &Path) -> Result<(), CliError> {
    for (name, text) in REPO_FILES {
        write(&repo.join(name), text)?;
    }
    let mut opts = git2::RepositoryInitOptions::new();
    opts.initial_head("main");
    let r = git2::Repository::init_opts(repo, &opts).map_err(|e| git_err("init", e))?;
    let mut cfg = r.config().map_err(|e| git_err("configure", e))?;
    cfg.set_str("user.name", "orch demo")
        .map_err(|e| git_err("configure", e))?;
    cfg.set_str("user.email", "demo@orch.invalid")
        .map_err(|e| git_err("configure", e))?;
    let mut index = r.index().map_err(|e| git_err("open the index", e))?;
    index
        .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
        .map_err(|e| git_err("add files", e))?;
    index.write().map_err(|e| git_err("write the index", e))?;
    let tree_id = index
        .write_tree()
        .map_err(|e| git_err("write the tree", e))?;
    let tree = r
        .find_tree(tree_id)
        .map_err(|e| git_err("find the tree", e))?;
    let when = git2::Time::new(1_767_225_600, 0);
    let sig = git2::Signature::new("orch demo", "demo@orch.invalid", &when)
        .map_err(|e| git_err("sign", e))?;
    r.commit(Some("HEAD"), &sig, &sig, "textstats 0.1.0", &tree, &[])
        .map_err(|e| git_err("commit", e))?;
    Ok(())
}
