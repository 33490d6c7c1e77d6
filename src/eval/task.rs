//! Eval task sets on disk: finding the tasks of a directory and checking that
//! each is well formed before anything runs.
//!
//! A task is a directory holding `issue.md` (non-empty), `check.sh` (the
//! hidden check) and the starting repository: plain files in `repo/`, a git
//! repository in `repo/` (with its history; the run starts from its `HEAD`,
//! and uncommitted changes are refused rather than silently left out), or a
//! git bundle `repo.bundle` (exactly one of `repo/` and the bundle). With a
//! scripted model named `NAME`, each task also needs `replay.NAME.json`.
//! A task set is a directory of task directories (sorted by name; names
//! starting with `.` are skipped), or a single task directory.

use super::error::EvalError;
use std::path::{Path, PathBuf};

/// Where a task's starting repository comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TaskRepo {
    /// Plain files, committed as one commit on `main` in a fresh repository.
    Files(PathBuf),
    /// A git repository (`repo/.git`), cloned; the run starts from its `HEAD`.
    Git(PathBuf),
    /// A git bundle, cloned; the run starts from the bundle's `HEAD`.
    Bundle(PathBuf),
}

/// One validated eval task (all paths absolute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Task {
    /// The directory name, e.g. `01-py-one-line`.
    pub name: String,
    /// The task directory.
    pub dir: PathBuf,
    /// The starting repository.
    pub repo: TaskRepo,
    /// The issue text the pipeline gets.
    pub issue: PathBuf,
    /// The hidden check, run on the final branch.
    pub check: PathBuf,
    /// The scripted model for this task (`replay.NAME.json`), when one was asked for.
    pub replay: Option<PathBuf>,
}

/// The tasks of one task-set directory, in name order.
#[derive(Debug, Clone)]
pub(crate) struct TaskSet {
    /// The directory given (absolute).
    pub dir: PathBuf,
    /// The tasks to run.
    pub tasks: Vec<Task>,
}

impl TaskSet {
    /// Loads and validates the tasks under `dir`. `scripted` names the replay
    /// every task must carry (`replay.<scripted>.json`); `only`, when not
    /// empty, keeps just the tasks with those names (each must exist).
    pub(crate) fn load(
        dir: &Path,
        scripted: Option<&str>,
        only: &[String],
    ) -> Result<TaskSet, EvalError> {
        let dir = std::path::absolute(dir).map_err(|e| bad(dir, e.to_string()))?;
        if !dir.is_dir() {
            return Err(bad(&dir, "it is not a directory".to_owned()));
        }
        let mut task_dirs = Vec::new();
        if looks_like_task(&dir) {
            task_dirs.push(dir.clone());
        } else {
            let entries = std::fs::read_dir(&dir).map_err(|e| bad(&dir, e.to_string()))?;
            for entry in entries {
                let entry = entry.map_err(|e| bad(&dir, e.to_string()))?;
                let name = entry.file_name();
                let hidden = name.to_string_lossy().starts_with('.');
                if !hidden && entry.path().is_dir() {
                    task_dirs.push(entry.path());
                }
            }
            task_dirs.sort();
        }
        let mut tasks = Vec::new();
        for task_dir in task_dirs {
            let name = task_name(&task_dir)?;
            if only.is_empty() || only.contains(&name) {
                tasks.push(load_task(&task_dir, name, scripted)?);
            }
        }
        if let Some(missing) = only.iter().find(|n| !tasks.iter().any(|t| &t.name == *n)) {
            return Err(EvalError::UnknownTask {
                name: missing.clone(),
                dir: dir.clone(),
            });
        }
        if tasks.is_empty() {
            return Err(bad(
                &dir,
                "it holds no task directories (each needs issue.md, check.sh and repo/ or repo.bundle)"
                    .to_owned(),
            ));
        }
        Ok(TaskSet { dir, tasks })
    }
}

/// A directory that is itself one task (rather than a set of them).
fn looks_like_task(dir: &Path) -> bool {
    dir.join("issue.md").is_file() || dir.join("check.sh").is_file()
}

fn task_name(dir: &Path) -> Result<String, EvalError> {
    dir.file_name()
        .and_then(|n| n.to_str())
        .map(str::to_owned)
        .ok_or_else(|| bad(dir, "its name is not valid UTF-8".to_owned()))
}

fn load_task(dir: &Path, name: String, scripted: Option<&str>) -> Result<Task, EvalError> {
    let issue = dir.join("issue.md");
    match std::fs::read_to_string(&issue) {
        Ok(text) if text.trim().is_empty() => {
            return Err(bad(&issue, "it is empty".to_owned()));
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(bad(
                &issue,
                "it is missing (the task's issue text)".to_owned(),
            ));
        }
        Err(e) => return Err(bad(&issue, e.to_string())),
    }
    let check = dir.join("check.sh");
    if !check.is_file() {
        return Err(bad(
            &check,
            "it is missing (the hidden check: exit 0 = solved)".to_owned(),
        ));
    }
    let files = dir.join("repo");
    let bundle = dir.join("repo.bundle");
    let repo = match (files.is_dir(), bundle.is_file()) {
        (true, false) if files.join(".git").exists() => {
            committed(&files)?;
            TaskRepo::Git(files)
        }
        (true, false) => TaskRepo::Files(files),
        (false, true) => TaskRepo::Bundle(bundle),
        (true, true) => {
            return Err(bad(
                dir,
                "it has both repo/ and repo.bundle; keep one".to_owned(),
            ));
        }
        (false, false) => {
            return Err(bad(
                &files,
                "it is missing (the task needs repo/ with plain files or a git repository, or a git bundle repo.bundle)"
                    .to_owned(),
            ));
        }
    };
    let replay = match scripted {
        Some(script) => {
            let file = dir.join(format!("replay.{script}.json"));
            if !file.is_file() {
                return Err(bad(
                    &file,
                    format!("it is missing (asked for by --scripted {script})"),
                ));
            }
            Some(file)
        }
        None => None,
    };
    Ok(Task {
        name,
        dir: dir.to_path_buf(),
        repo,
        issue,
        check,
        replay,
    })
}

/// Checks that the git repository `repo` has a commit and nothing
/// uncommitted: the run starts from its `HEAD`, so a change only in its
/// working tree would be silently left out of the task.
fn committed(repo: &Path) -> Result<(), EvalError> {
    let git = |args: &[&str]| crate::git::cli::git(repo).args(args).output();
    let failed =
        |e: crate::git::GitError| bad(repo, format!("it is not a usable git repository: {e}"));
    let head = git(&["rev-parse", "--verify", "-q", "HEAD^{commit}"]).map_err(failed)?;
    if head.code != 0 {
        return Err(bad(
            repo,
            "it is a git repository without a commit; commit the task's files (the run starts from HEAD)"
                .to_owned(),
        ));
    }
    let status = git(&["status", "--porcelain", "--untracked-files=all"]).map_err(failed)?;
    if status.code != 0 {
        return Err(bad(
            repo,
            format!(
                "it is not a usable git repository: {}",
                crate::git::cli::failure_detail(&status)
            ),
        ));
    }
    let changed: Vec<String> = String::from_utf8_lossy(&status.stdout)
        .lines()
        .map(|l| l.get(3..).unwrap_or(l).to_owned())
        .collect();
    if !changed.is_empty() {
        const SHOWN: usize = 5;
        let more = changed.len().saturating_sub(SHOWN);
        return Err(bad(
            repo,
            format!(
                "it is a git repository with uncommitted changes ({}{}); commit or remove them: the run starts from HEAD",
                changed[..changed.len().min(SHOWN)].join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ),
        ));
    }
    Ok(())
}

fn bad(path: &Path, reason: String) -> EvalError {
    EvalError::BadTask {
        path: path.to_path_buf(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn make_task(root: &Path, name: &str) -> PathBuf {
        let dir = root.join(name);
        write(&dir.join("issue.md"), "# fix it\n");
        write(&dir.join("check.sh"), "exit 0\n");
        write(&dir.join("repo/a.py"), "x = 1\n");
        write(&dir.join("replay.perfect.json"), "{}");
        dir
    }

    fn reason_and_path(e: EvalError) -> (PathBuf, String) {
        match e {
            EvalError::BadTask { path, reason } => (path, reason),
            other => panic!("expected BadTask, got {other:?}"),
        }
    }

    #[test]
    fn loads_tasks_in_name_order_and_skips_dot_dirs() {
        let root = tempfile::tempdir().unwrap();
        make_task(root.path(), "02-b");
        make_task(root.path(), "01-a");
        std::fs::create_dir_all(root.path().join(".hidden")).unwrap();
        write(&root.path().join("eval.yaml"), "name: eval\n");
        let set = TaskSet::load(root.path(), Some("perfect"), &[]).unwrap();
        let names: Vec<_> = set.tasks.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["01-a", "02-b"]);
        let t = &set.tasks[0];
        assert_eq!(t.repo, TaskRepo::Files(root.path().join("01-a/repo")));
        assert_eq!(
            t.replay.as_deref(),
            Some(root.path().join("01-a/replay.perfect.json").as_path())
        );
        assert!(t.check.is_absolute() && t.issue.ends_with("01-a/issue.md"));
    }

    #[test]
    fn a_single_task_directory_is_a_set_of_one() {
        let root = tempfile::tempdir().unwrap();
        let dir = make_task(root.path(), "only");
        let set = TaskSet::load(&dir, None, &[]).unwrap();
        assert_eq!(set.tasks.len(), 1);
        assert_eq!(set.tasks[0].name, "only");
        assert_eq!(set.tasks[0].replay, None);
    }

    #[test]
    fn missing_parts_are_named_by_path() {
        let root = tempfile::tempdir().unwrap();
        let dir = make_task(root.path(), "t");
        std::fs::remove_file(dir.join("check.sh")).unwrap();
        let (path, reason) = reason_and_path(TaskSet::load(root.path(), None, &[]).unwrap_err());
        assert_eq!(path, dir.join("check.sh"));
        assert!(reason.contains("missing"), "{reason}");

        write(&dir.join("check.sh"), "exit 0\n");
        write(&dir.join("issue.md"), "  \n");
        let (path, reason) = reason_and_path(TaskSet::load(root.path(), None, &[]).unwrap_err());
        assert_eq!(path, dir.join("issue.md"));
        assert!(reason.contains("empty"), "{reason}");

        write(&dir.join("issue.md"), "# fix\n");
        std::fs::remove_dir_all(dir.join("repo")).unwrap();
        let (path, _) = reason_and_path(TaskSet::load(root.path(), None, &[]).unwrap_err());
        assert_eq!(path, dir.join("repo"));

        write(&dir.join("repo.bundle"), "");
        assert!(matches!(
            TaskSet::load(root.path(), None, &[]).unwrap().tasks[0].repo,
            TaskRepo::Bundle(_)
        ));
        write(&dir.join("repo/a.py"), "x\n");
        let (path, reason) = reason_and_path(TaskSet::load(root.path(), None, &[]).unwrap_err());
        assert_eq!(path, dir);
        assert!(reason.contains("both"), "{reason}");
    }

    #[test]
    fn a_missing_scripted_replay_is_named() {
        let root = tempfile::tempdir().unwrap();
        let dir = make_task(root.path(), "t");
        let (path, reason) =
            reason_and_path(TaskSet::load(root.path(), Some("broken"), &[]).unwrap_err());
        assert_eq!(path, dir.join("replay.broken.json"));
        assert!(reason.contains("--scripted broken"), "{reason}");
    }

    #[test]
    fn only_filters_and_unknown_names_fail() {
        let root = tempfile::tempdir().unwrap();
        make_task(root.path(), "a");
        make_task(root.path(), "b");
        let set = TaskSet::load(root.path(), None, &["b".to_owned()]).unwrap();
        assert_eq!(set.tasks.len(), 1);
        assert_eq!(set.tasks[0].name, "b");
        let err = TaskSet::load(root.path(), None, &["zz".to_owned()]).unwrap_err();
        assert!(matches!(err, EvalError::UnknownTask { ref name, .. } if name == "zz"));
    }

    #[test]
    fn an_empty_directory_is_not_a_task_set() {
        let root = tempfile::tempdir().unwrap();
        let (path, reason) = reason_and_path(TaskSet::load(root.path(), None, &[]).unwrap_err());
        assert_eq!(path, std::path::absolute(root.path()).unwrap());
        assert!(reason.contains("no task"), "{reason}");
    }
}
