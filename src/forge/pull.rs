//! Opening the pull (merge) request for a pushed branch, or updating the
//! open one that already exists for that head: a second publish creates
//! nothing new.

use super::{Forge, ForgeApi, ForgeError, Project, percent_encode};
use serde_json::{Value, json};

/// What `orch publish` asks for.
pub(crate) struct PullRequest<'a> {
    /// Where.
    pub(crate) project: &'a Project,
    /// The pushed branch (the head).
    pub(crate) head: &'a str,
    /// The branch to merge into; `None`: the project's default branch.
    pub(crate) base: Option<&'a str>,
    /// Title.
    pub(crate) title: &'a str,
    /// Body (Markdown).
    pub(crate) body: &'a str,
    /// Open as a draft (only when creating: an existing request keeps its state).
    pub(crate) draft: bool,
}

/// The request after publishing.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Upserted {
    /// Its web page.
    pub(crate) url: String,
    /// Its number (GitLab: `iid`).
    pub(crate) number: u64,
    /// True when this call created it; false when it updated an open one.
    pub(crate) created: bool,
}

/// Creates the pull (merge) request for `pr.head`, or updates the open one.
pub(crate) async fn upsert_pull(
    api: &ForgeApi,
    pr: &PullRequest<'_>,
) -> Result<Upserted, ForgeError> {
    match pr.project.forge {
        Forge::GitHub => github(api, pr).await,
        Forge::GitLab => gitlab(api, pr).await,
    }
}

async fn github(api: &ForgeApi, pr: &PullRequest<'_>) -> Result<Upserted, ForgeError> {
    let repo = format!("/repos/{}", pr.project.path);
    let head = format!("{}:{}", pr.project.owner(), pr.head);
    let list = format!("{repo}/pulls?head={}&state=open", percent_encode(&head));
    let open = api.get(&list).await?;
    let found = open.as_array().and_then(|a| a.first()).cloned();
    let (answer, created) = match found {
        Some(existing) => {
            let n = number(api, &existing, "number", &list)?;
            let body = json!({"title": pr.title, "body": pr.body});
            let path = format!("{repo}/pulls/{n}");
            let patched = api.send_json(reqwest::Method::PATCH, &path, &body).await?;
            (patched, false)
        }
        None => {
            let base = match pr.base {
                Some(b) => b.to_owned(),
                None => default_branch(api, &repo).await?,
            };
            let body = json!({
                "title": pr.title,
                "body": pr.body,
                "head": pr.head,
                "base": base,
                "draft": pr.draft,
            });
            let path = format!("{repo}/pulls");
            (
                api.send_json(reqwest::Method::POST, &path, &body).await?,
                true,
            )
        }
    };
    Ok(Upserted {
        url: answer["html_url"].as_str().unwrap_or("").to_owned(),
        number: number(api, &answer, "number", &repo)?,
        created,
    })
}

async fn gitlab(api: &ForgeApi, pr: &PullRequest<'_>) -> Result<Upserted, ForgeError> {
    let project = format!("/projects/{}", pr.project.encoded());
    let list = format!(
        "{project}/merge_requests?source_branch={}&state=opened",
        percent_encode(pr.head)
    );
    let open = api.get(&list).await?;
    let found = open.as_array().and_then(|a| a.first()).cloned();
    let (answer, created) = match found {
        Some(existing) => {
            let iid = number(api, &existing, "iid", &list)?;
            // Keep a draft a draft: its title carries the marker.
            let was_draft = existing["draft"] == Value::Bool(true)
                || existing["work_in_progress"] == Value::Bool(true);
            let body = json!({"title": draft_title(pr.title, was_draft), "description": pr.body});
            let path = format!("{project}/merge_requests/{iid}");
            (
                api.send_json(reqwest::Method::PUT, &path, &body).await?,
                false,
            )
        }
        None => {
            let target = match pr.base {
                Some(b) => b.to_owned(),
                None => default_branch(api, &project).await?,
            };
            // `Draft: ` in the title is how every GitLab version marks a draft.
            let body = json!({
                "source_branch": pr.head,
                "target_branch": target,
                "title": draft_title(pr.title, pr.draft),
                "description": pr.body,
            });
            let path = format!("{project}/merge_requests");
            (
                api.send_json(reqwest::Method::POST, &path, &body).await?,
                true,
            )
        }
    };
    Ok(Upserted {
        url: answer["web_url"].as_str().unwrap_or("").to_owned(),
        number: number(api, &answer, "iid", &project)?,
        created,
    })
}

fn draft_title(title: &str, draft: bool) -> String {
    if draft {
        format!("Draft: {title}")
    } else {
        title.to_owned()
    }
}

async fn default_branch(api: &ForgeApi, path: &str) -> Result<String, ForgeError> {
    let v = api.get(path).await?;
    v["default_branch"]
        .as_str()
        .filter(|b| !b.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| api.unexpected(path, "a `default_branch` (or pass --base BRANCH)"))
}

fn number(api: &ForgeApi, v: &Value, key: &str, path: &str) -> Result<u64, ForgeError> {
    v[key]
        .as_u64()
        .ok_or_else(|| api.unexpected(path, &format!("a request with a `{key}`")))
}
