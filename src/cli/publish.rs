//! `orch publish <run>`: pushes a finished run's PR branch (and, with
//! `--stages`, its stage branches) to a remote, then opens the pull or
//! merge request with the run's PR text, or updates the open one for that
//! branch. Idempotent: publishing twice creates one request.

use super::error::CliError;
use super::output::Out;
use super::record::open;
use crate::forge::{
    ForgeApi, ForgeSettings, FrozenIssue, Project, PullRequest, project_of_url, push_refs,
    remote_url, upsert_pull, without_userinfo,
};
use crate::ids::RunId;
use crate::runlog::{self, RunState, RunStatus};
use std::path::{Path, PathBuf};

/// Longest slug of the PR title in a default branch name.
const SLUG_CHARS: usize = 40;

/// Arguments of `orch publish`.
#[derive(Debug, clap::Args)]
pub struct PublishArgs {
    /// The run: its id, or `last`
    pub run: String,
    /// The repository the run belongs to
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// The remote to push to: a remote's name or a URL (file, ssh, https)
    #[arg(long, value_name = "NAME", default_value = "origin")]
    pub remote: String,
    /// The branch on the remote (default: `orch/<issue number, else run id>-<slug of the PR title>`)
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
    /// The branch the request merges into (default: the project's default branch)
    #[arg(long, value_name = "BRANCH")]
    pub base: Option<String>,
    /// Open the request as a draft (when it is created; an existing one keeps its state)
    #[arg(long)]
    pub draft: bool,
    /// Also push the run's stage branches (`orch/<run>/<stage>`), for reviewers
    #[arg(long)]
    pub stages: bool,
    /// The forge project, `github:OWNER/REPO` or `gitlab:GROUP/PROJECT` (default: the issue's, else the remote URL's)
    #[arg(long, value_name = "FORGE:PROJECT")]
    pub forge: Option<String>,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

/// What `publish.json` in the run record holds (and `--json` prints).
#[derive(Debug, serde::Serialize)]
struct Published {
    url: String,
    number: u64,
    /// `created` or `updated`.
    action: &'static str,
    forge: &'static str,
    project: String,
    remote: String,
    branch: String,
    commit: crate::git::CommitId,
    draft: bool,
    stage_branches: Vec<String>,
    published: String,
}

/// `orch publish`.
pub(super) async fn cmd_publish(args: PublishArgs) -> Result<i32, CliError> {
    let (common, root, state) = open(&args.repo, &args.run)?;
    let run_id = state.run_id.clone();
    if state.status != RunStatus::Succeeded {
        return Err(CliError::Invalid(format!(
            "failed to publish run {run_id}: it is {}, and only a succeeded run has a PR to publish",
            state.status.as_str()
        )));
    }
    let pr_path = root.join("pr.md");
    let pr_text = std::fs::read_to_string(&pr_path).map_err(|e| {
        CliError::Invalid(format!(
            "failed to publish run {run_id}: read {}: {e}",
            pr_path.display()
        ))
    })?;
    let (title, body) = split_pr(&pr_text);
    let issue = FrozenIssue::read(&root)?;
    let project = target_project(&args, issue.as_ref())?;
    let branch = match &args.branch {
        Some(b) => b.clone(),
        None => default_branch_name(issue.as_ref().map(|i| i.number), &run_id, title),
    };
    if !git2::Reference::is_valid_name(&format!("refs/heads/{branch}")) {
        return Err(CliError::Invalid(format!(
            "failed to use --branch {branch:?}: not a valid git branch name"
        )));
    }
    let commit = crate::git::Repo::at(&common).resolve_commit(&state.final_branch)?;
    let mut refspecs = vec![format!("{commit}:refs/heads/{branch}")];
    let stage_branches = if args.stages {
        stage_branches(&common, &state)
    } else {
        Vec::new()
    };
    refspecs.extend(
        stage_branches
            .iter()
            .map(|b| format!("refs/heads/{b}:refs/heads/{b}")),
    );
    push_refs(&args.repo, &args.remote, &refspecs).await?;
    crate::ui::status_line(&format!(
        "orch: pushed {} to {} as {branch}",
        short(&commit),
        args.remote
    ));

    let body = with_issue_link(body, issue.as_ref(), &project);
    let api = ForgeApi::new(project.forge, &ForgeSettings::load(Some(&args.repo))?)?;
    let up = upsert_pull(
        &api,
        &PullRequest {
            project: &project,
            head: &branch,
            base: args.base.as_deref(),
            title,
            body: &body,
            draft: args.draft,
        },
    )
    .await?;
    let published = Published {
        url: up.url.clone(),
        number: up.number,
        action: if up.created { "created" } else { "updated" },
        forge: project.forge.as_str(),
        project: project.path.clone(),
        remote: args.remote.clone(),
        branch,
        commit,
        draft: args.draft,
        stage_branches,
        published: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    };
    record(&root, &run_id, &published)?;

    let mut out = Out::stdout();
    if args.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string(&published).unwrap_or_default()
        )?;
    } else {
        writeln!(
            out,
            "{} {} #{}: {}",
            published.action,
            project.forge.pr_noun(),
            up.number,
            up.url
        )?;
    }
    out.finish()?;
    Ok(crate::exit::OK)
}

/// `pr.md` is the title, a blank line, then the body.
fn split_pr(text: &str) -> (&str, &str) {
    let (title, body) = text.split_once('\n').unwrap_or((text, ""));
    (title.trim(), body.trim_start_matches('\n'))
}

/// `--forge`, else the issue's project, else the one the remote's URL names.
fn target_project(args: &PublishArgs, issue: Option<&FrozenIssue>) -> Result<Project, CliError> {
    check_remote(&args.repo, &args.remote)?;
    if let Some(spec) = &args.forge {
        return Ok(Project::parse(spec)?);
    }
    if let Some(i) = issue {
        return Ok(i.project.clone());
    }
    let url = remote_url(&args.repo, &args.remote).unwrap_or_else(|| args.remote.clone());
    project_of_url(&url).ok_or_else(|| {
        CliError::Invalid(format!(
            "failed to tell which forge to open the request on: the run's issue was a file and the remote {} ({}) is not on github.com or a gitlab host; pass --forge github:OWNER/REPO or gitlab:GROUP/PROJECT",
            args.remote,
            without_userinfo(&crate::secrets::redact(&url, &[]))
        ))
    })
}

/// `remote` is a remote of the repository, or a URL or path `git` can push
/// to: said before anything is asked of the forge or pushed.
fn check_remote(repo: &Path, remote: &str) -> Result<(), CliError> {
    let url_or_path = remote.contains(':') || remote.contains('/') || Path::new(remote).exists();
    let known = crate::git::Repo::discover(repo)
        .and_then(|r| r.has_remote(remote))
        .unwrap_or(false);
    if url_or_path || known {
        return Ok(());
    }
    Err(CliError::Invalid(format!(
        "failed to publish: the repository has no remote `{remote}` (see `git remote -v`); add it (`git remote add {remote} URL`) or pass --remote NAME|URL"
    )))
}

/// `orch/<issue number, else run id>-<slug>`.
fn default_branch_name(issue: Option<u64>, run_id: &RunId, title: &str) -> String {
    let mut slug = String::new();
    for c in title.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            slug.push(c);
        } else if !slug.ends_with('-') && !slug.is_empty() {
            slug.push('-');
        }
    }
    if slug.len() > SLUG_CHARS {
        let cut = slug[..SLUG_CHARS].rfind('-').unwrap_or(SLUG_CHARS);
        slug.truncate(cut);
    }
    let slug = slug.trim_matches('-');
    let id = issue.map_or_else(|| run_id.as_str().to_ascii_lowercase(), |n| n.to_string());
    if slug.is_empty() {
        format!("orch/{id}")
    } else {
        format!("orch/{id}-{slug}")
    }
}

/// The stage branches of the run that still exist locally.
fn stage_branches(common: &Path, state: &RunState) -> Vec<String> {
    state
        .stages
        .iter()
        .filter_map(|s| s.branch.clone())
        .filter(|b| {
            crate::git::Repo::at(common)
                .resolve_commit(&format!("refs/heads/{b}"))
                .is_ok()
        })
        .collect()
}

/// The body with a closing reference to the issue it came from (a URL when
/// the issue lives in another project than the request).
fn with_issue_link(body: &str, issue: Option<&FrozenIssue>, project: &Project) -> String {
    match issue {
        Some(i) if &i.project == project => {
            format!("{}\n\nCloses #{}\n", body.trim_end(), i.number)
        }
        Some(i) => format!("{}\n\nIssue: {}\n", body.trim_end(), i.url),
        None => body.to_owned(),
    }
}

/// Writes `publish.json` and the request's URL into `state.json`, holding
/// the run's lock (a run still being driven cannot be published into).
fn record(root: &Path, run_id: &RunId, published: &Published) -> Result<(), CliError> {
    let _lock = runlog::lock_run(root, run_id.as_str())?;
    let dir = runlog::RunDir::at(root.to_owned());
    let mut state = dir.read_state()?;
    state.pr_url = Some(published.url.clone());
    dir.write_state(&state)?;
    let json = serde_json::to_vec_pretty(published).unwrap_or_default();
    dir.write_file("publish.json", &json)?;
    Ok(())
}

fn short(sha: &str) -> &str {
    sha.get(..10).unwrap_or(sha)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_remote_is_named_before_anything_happens() {
        let dir = tempfile::tempdir().unwrap();
        git2::Repository::init(dir.path()).unwrap();
        let err = check_remote(dir.path(), "origin").unwrap_err().to_string();
        assert!(err.contains("no remote `origin`"), "{err}");
        assert!(check_remote(dir.path(), "https://example.com/o/r.git").is_ok());
        assert!(check_remote(dir.path(), dir.path().to_str().unwrap()).is_ok());
    }

    #[test]
    fn default_branch_names_are_readable() {
        assert_eq!(
            default_branch_name(
                Some(7),
                &"01ABC".parse().unwrap(),
                "add() subtracts instead of adding"
            ),
            "orch/7-add-subtracts-instead-of-adding"
        );
        assert_eq!(
            default_branch_name(
                None,
                &"01ABC".parse().unwrap(),
                "Fix: the very long title of an issue that goes on and on"
            ),
            "orch/01abc-fix-the-very-long-title-of-an-issue"
        );
        assert_eq!(
            default_branch_name(None, &"01ABC".parse().unwrap(), "!!!"),
            "orch/01abc"
        );
    }

    #[test]
    fn pr_text_splits_into_title_and_body() {
        assert_eq!(split_pr("T\n\n## Summary\n"), ("T", "## Summary\n"));
        assert_eq!(split_pr("only"), ("only", ""));
    }
}
