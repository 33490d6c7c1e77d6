//! Reading an issue with its comments from a forge and freezing it: the
//! run record keeps the Markdown the agents saw (`issue.md`) and the
//! fetched fields (`issue.json`), so `orch resume` never asks the forge again.

use super::api::ForgeApi;
use super::types::{Forge, ForgeError, IssueRef, Project};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One comment of an issue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Comment {
    /// The author's login.
    pub(crate) author: String,
    /// RFC 3339, as the forge gave it.
    pub(crate) created: String,
    /// Markdown.
    pub(crate) body: String,
}

/// An issue as fetched (`issue.json` of a run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FrozenIssue {
    /// Always `orch-issue/1`.
    pub(crate) format: String,
    /// Where it lives.
    pub(crate) project: Project,
    /// Its number (GitLab: `iid`).
    pub(crate) number: u64,
    /// The web page of the issue.
    pub(crate) url: String,
    /// Title.
    pub(crate) title: String,
    /// Body (Markdown; empty when the issue has none).
    pub(crate) body: String,
    /// Label names.
    pub(crate) labels: Vec<String>,
    /// The author's login.
    pub(crate) author: String,
    /// `open`/`opened`/`closed`, as the forge says.
    pub(crate) state: String,
    /// Comments, oldest first (GitLab's system notes left out).
    pub(crate) comments: Vec<Comment>,
    /// The API it was read from.
    pub(crate) api_url: String,
    /// When it was read (RFC 3339).
    pub(crate) fetched: String,
}

/// The version tag of `issue.json`.
const ISSUE_FORMAT: &str = "orch-issue/1";

/// Reads `issue` and its comments through `api`.
pub(crate) async fn fetch_issue(
    api: &ForgeApi,
    issue: &IssueRef,
) -> Result<FrozenIssue, ForgeError> {
    let n = issue.number;
    let (path, comments_path) = match issue.project.forge {
        Forge::GitHub => {
            let base = format!("/repos/{}/issues/{n}", issue.project.path);
            let comments = format!("{base}/comments");
            (base, comments)
        }
        Forge::GitLab => {
            let base = format!("/projects/{}/issues/{n}", issue.project.encoded());
            let notes = format!("{base}/notes?sort=asc&order_by=created_at");
            (base, notes)
        }
    };
    let raw = api.get(&path).await?;
    if !raw.is_object() {
        return Err(api.unexpected(&path, "an issue object"));
    }
    let text = |v: &Value, key: &str| v[key].as_str().unwrap_or("").to_owned();
    let login = |v: &Value| {
        v["user"]["login"]
            .as_str()
            .or(v["author"]["username"].as_str())
            .unwrap_or("")
            .to_owned()
    };
    let raw_comments = api.get_all(&comments_path).await?;
    let comments = raw_comments
        .iter()
        // GitLab records label changes, mentions and the like as system notes.
        .filter(|c| c["system"] != Value::Bool(true))
        .map(|c| Comment {
            author: login(c),
            created: text(c, "created_at"),
            body: text(c, "body"),
        })
        .collect();
    let labels = raw["labels"]
        .as_array()
        .map(|ls| {
            ls.iter()
                .filter_map(|l| l.as_str().or(l["name"].as_str()))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let (body_key, url_key) = match issue.project.forge {
        Forge::GitHub => ("body", "html_url"),
        Forge::GitLab => ("description", "web_url"),
    };
    Ok(FrozenIssue {
        format: ISSUE_FORMAT.to_owned(),
        project: issue.project.clone(),
        number: n,
        url: text(&raw, url_key),
        title: text(&raw, "title"),
        body: text(&raw, body_key),
        labels,
        author: login(&raw),
        state: text(&raw, "state"),
        comments,
        api_url: api.base().to_owned(),
        fetched: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    })
}

impl FrozenIssue {
    /// The issue as the agents read it (`issue.md`): the title as the first
    /// line (which the PR title is made from), the body, then the source,
    /// the labels and the comments.
    pub(crate) fn to_markdown(&self) -> String {
        let mut md = format!("# {}\n\n", self.title.trim());
        let body = self.body.trim();
        if !body.is_empty() {
            md.push_str(body);
            md.push_str("\n\n");
        }
        md.push_str(&format!(
            "Source: {} ({}#{}, by @{})\n",
            self.url, self.project, self.number, self.author
        ));
        if !self.labels.is_empty() {
            md.push_str(&format!("Labels: {}\n", self.labels.join(", ")));
        }
        if !self.comments.is_empty() {
            md.push_str("\n## Comments\n");
            for c in &self.comments {
                md.push_str(&format!(
                    "\n### @{} ({})\n\n{}\n",
                    c.author,
                    c.created,
                    c.body.trim()
                ));
            }
        }
        md
    }

    /// The `issue.json` text.
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Reads a run's `issue.json`; `None` when the run's issue was a file.
    pub(crate) fn read(run_root: &std::path::Path) -> Result<Option<FrozenIssue>, ForgeError> {
        let path = run_root.join("issue.json");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(ForgeError::Invalid(format!(
                    "failed to read {}: {e}",
                    path.display()
                )));
            }
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| ForgeError::Invalid(format!("failed to read {}: {e}", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_starts_with_the_title_and_lists_comments() {
        let issue = FrozenIssue {
            format: ISSUE_FORMAT.into(),
            project: Project::parse("github:o/r").unwrap(),
            number: 7,
            url: "https://github.com/o/r/issues/7".into(),
            title: "add() subtracts".into(),
            body: "It returns -1.".into(),
            labels: vec!["bug".into(), "orch".into()],
            author: "alice".into(),
            state: "open".into(),
            comments: vec![Comment {
                author: "bob".into(),
                created: "2026-01-02T00:00:00Z".into(),
                body: "Also for add(1, 1).".into(),
            }],
            api_url: "https://api.github.com".into(),
            fetched: "2026-01-03T00:00:00Z".into(),
        };
        let md = issue.to_markdown();
        assert!(
            md.starts_with("# add() subtracts\n\nIt returns -1.\n\n"),
            "{md}"
        );
        assert!(md.contains("Source: https://github.com/o/r/issues/7 (github:o/r#7, by @alice)"));
        assert!(md.contains("Labels: bug, orch"));
        assert!(md.contains("### @bob (2026-01-02T00:00:00Z)\n\nAlso for add(1, 1).\n"));
    }
}
