//! Opening the pull (merge) request for a pushed branch, or updating the
//! open one that already exists for that head: a second publish creates
//! nothing new.

use super::api::ForgeApi;
use super::types::{Forge, ForgeError, Project, percent_encode};
use crate::text::untrusted;
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

/// Where a forge keeps its requests and what it calls their fields.
struct Dialect {
    /// `/repos/{o}/{r}` or `/projects/{id}`: answers `default_branch`.
    project: String,
    /// `…/pulls` or `…/merge_requests`: POST creates, `/{n}` updates.
    collection: String,
    /// The list of open requests for the head branch.
    open_for_head: String,
    number_key: &'static str,
    url_key: &'static str,
    update_method: reqwest::Method,
}

impl Dialect {
    fn of(pr: &PullRequest<'_>) -> Dialect {
        match pr.project.forge {
            Forge::GitHub => {
                let project = format!("/repos/{}", pr.project.path);
                let head = format!("{}:{}", pr.project.owner(), pr.head);
                Dialect {
                    collection: format!("{project}/pulls"),
                    open_for_head: format!(
                        "{project}/pulls?head={}&state=open",
                        percent_encode(&head)
                    ),
                    project,
                    number_key: "number",
                    url_key: "html_url",
                    update_method: reqwest::Method::PATCH,
                }
            }
            Forge::GitLab => {
                let project = format!("/projects/{}", pr.project.encoded());
                Dialect {
                    collection: format!("{project}/merge_requests"),
                    open_for_head: format!(
                        "{project}/merge_requests?source_branch={}&state=opened",
                        percent_encode(pr.head)
                    ),
                    project,
                    number_key: "iid",
                    url_key: "web_url",
                    update_method: reqwest::Method::PUT,
                }
            }
        }
    }
}

/// The body of an update of the open request `existing`: new title and text.
/// Title and text are untrusted (an issue's, a model's): their control
/// characters go as visible escapes, here as in `pr.md`.
fn update_body(pr: &PullRequest<'_>, existing: &Value) -> Value {
    match pr.project.forge {
        Forge::GitHub => json!({"title": untrusted(pr.title), "body": untrusted(pr.body)}),
        Forge::GitLab => {
            // Keep a draft a draft: its title carries the marker.
            let was_draft = existing["draft"] == Value::Bool(true)
                || existing["work_in_progress"] == Value::Bool(true);
            json!({"title": draft_title(&untrusted(pr.title), was_draft), "description": untrusted(pr.body)})
        }
    }
}

/// The body that creates the request, merging into `base`.
fn create_body(pr: &PullRequest<'_>, base: &str) -> Value {
    match pr.project.forge {
        Forge::GitHub => json!({
            "title": untrusted(pr.title),
            "body": untrusted(pr.body),
            "head": pr.head,
            "base": base,
            "draft": pr.draft,
        }),
        // `Draft: ` in the title is how every GitLab version marks a draft.
        Forge::GitLab => json!({
            "source_branch": pr.head,
            "target_branch": base,
            "title": draft_title(&untrusted(pr.title), pr.draft),
            "description": untrusted(pr.body),
        }),
    }
}

/// Creates the pull (merge) request for `pr.head`, or updates the open one.
pub(crate) async fn upsert_pull(
    api: &ForgeApi,
    pr: &PullRequest<'_>,
) -> Result<Upserted, ForgeError> {
    let d = Dialect::of(pr);
    let open = api.get(&d.open_for_head).await?;
    let found = open.as_array().and_then(|a| a.first()).cloned();
    let (answer, created) = match found {
        Some(existing) => {
            let n = number(api, &existing, d.number_key, &d.open_for_head)?;
            let path = format!("{}/{n}", d.collection);
            let body = update_body(pr, &existing);
            (
                api.send_json(d.update_method.clone(), &path, &body).await?,
                false,
            )
        }
        None => {
            let base = match pr.base {
                Some(b) => b.to_owned(),
                None => default_branch(api, &d.project).await?,
            };
            let body = create_body(pr, &base);
            let post = reqwest::Method::POST;
            (api.send_json(post, &d.collection, &body).await?, true)
        }
    };
    Ok(Upserted {
        url: answer[d.url_key].as_str().unwrap_or("").to_owned(),
        number: number(api, &answer, d.number_key, &d.collection)?,
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
