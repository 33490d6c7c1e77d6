//! What a pull (merge) request says back to orch: reviews that request
//! changes, unresolved review threads and failing checks with the tail of
//! their logs (`orch react`, see `docs/forge.md`).
//!
//! Trust rule: only comments by users with write access to the project
//! count (GitHub: `admin`, `maintain` or `write` from the collaborator
//! permission API; GitLab: access level 30, Developer, or more), and never
//! orch's own (the token's user, or a comment carrying [`MARKER`]). Every
//! text is sanitised (control characters as visible escapes) and redacted
//! (the token and every registered secret) when it is read, before it is
//! stored or shown to a model.

use super::api::ForgeApi;
use super::types::{Forge, ForgeError, Project};
use serde_json::Value;
use std::collections::BTreeMap;

/// Marks every comment orch posts on a pull request, so orch never reads
/// its own words back as feedback.
pub(crate) const MARKER: &str = "<!-- orch:react -->";
/// Bytes of a failing check's log kept (its tail: where the error is).
pub(crate) const LOG_TAIL_BYTES: usize = 3000;
/// Characters of one comment kept.
const BODY_CHARS: usize = 4000;

/// A pull (merge) request: `github:OWNER/REPO#N` or `gitlab:GROUP/PROJECT!N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PrRef {
    /// The project.
    pub(crate) project: Project,
    /// Its number (GitLab: `iid`).
    pub(crate) number: u64,
}

impl PrRef {
    /// Parses `github:OWNER/REPO#N` or `gitlab:GROUP/PROJECT!N` (either
    /// separator is accepted on either forge).
    pub(crate) fn parse(spec: &str) -> Result<PrRef, ForgeError> {
        let bad = |why: &str| {
            ForgeError::Invalid(format!(
                "failed to read the pull request `{spec}`: {why} (expected github:OWNER/REPO#N or gitlab:GROUP/PROJECT!N)"
            ))
        };
        let cut = spec
            .rfind(['#', '!'])
            .ok_or_else(|| bad("no `#N` or `!N`"))?;
        let (project, number) = (&spec[..cut], &spec[cut + 1..]);
        let number = number
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| bad(&format!("`{number}` is not a number")))?;
        Ok(PrRef {
            project: Project::parse(project)?,
            number,
        })
    }
}

impl std::fmt::Display for PrRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sep = match self.project.forge {
            Forge::GitHub => '#',
            Forge::GitLab => '!',
        };
        write!(f, "{}{sep}{}", self.project, self.number)
    }
}

/// One thing the pull request asks of the change.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Finding {
    /// Its fingerprint: `review:ID`, `comment:ID`, `note:ID`,
    /// `check:ID@SHA`, `status:ID@SHA`, `job:ID@SHA`.
    pub(crate) key: String,
    /// `review`, `thread` or `check`.
    pub(crate) kind: String,
    /// Who wrote it (checks: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) author: Option<String>,
    /// The file a thread is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) path: Option<String>,
    /// Its first and last line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lines: Option<(u64, u64)>,
    /// A check's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    /// The text (sanitised, redacted): a comment, or a check's summary and
    /// the tail of its log.
    pub(crate) body: String,
    /// Its web page, when the forge gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) url: Option<String>,
}

/// What was read from the pull request.
#[derive(Debug, Default)]
pub(crate) struct Feedback {
    /// The commit the pull request's branch is at.
    pub(crate) head_sha: String,
    /// The pull request's branch.
    pub(crate) head_ref: String,
    /// Whether the forge says it merges (`None`: not known yet).
    pub(crate) mergeable: Option<bool>,
    /// The branch the pull request merges into (empty: not given).
    pub(crate) base_ref: String,
    /// What counts, in the forge's order.
    pub(crate) findings: Vec<Finding>,
    /// What was read and left out, one line each, with why.
    pub(crate) ignored: Vec<String>,
}

/// A candidate comment before the trust check.
struct Candidate {
    finding: Finding,
    author: String,
    /// GitLab's numeric user id (the members API takes it).
    author_id: Option<u64>,
}

impl Feedback {
    /// Keeps `c`'s finding when its author may write to `project`, else
    /// names it among the ignored.
    fn keep_if(
        &mut self,
        trusted: bool,
        c: Candidate,
        api: &ForgeApi,
        project: &dyn std::fmt::Display,
    ) {
        if trusted {
            self.findings.push(c.finding);
        } else {
            self.ignored.push(format!(
                "{} by {}: no write access to {project}",
                c.finding.key,
                clean(api, &c.author, 100),
            ));
        }
    }
}

/// Reads the pull request's feedback.
pub(crate) async fn fetch_feedback(api: &ForgeApi, pr: &PrRef) -> Result<Feedback, ForgeError> {
    match pr.project.forge {
        Forge::GitHub => fetch_github(api, pr).await,
        Forge::GitLab => fetch_gitlab(api, pr).await,
    }
}

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or("").to_owned()
}

/// Untrusted text as orch keeps it: control characters escaped, secrets
/// redacted, length capped.
fn clean(api: &ForgeApi, s: &str, max: usize) -> String {
    let s = api.redact(&crate::text::untrusted(s));
    if s.chars().count() <= max {
        s
    } else {
        let cut: String = s.chars().take(max).collect();
        format!("{cut} [… cut …]")
    }
}

async fn fetch_github(api: &ForgeApi, pr: &PrRef) -> Result<Feedback, ForgeError> {
    let repo = format!("/repos/{}", pr.project.path);
    let n = pr.number;
    let p = api.get(&format!("{repo}/pulls/{n}")).await?;
    let head_sha = text(&p["head"], "sha");
    if head_sha.is_empty() {
        return Err(api.unexpected(
            &format!("{repo}/pulls/{n}"),
            "a pull request with a head sha",
        ));
    }
    let mut fb = Feedback {
        head_ref: text(&p["head"], "ref"),
        // `mergeable_state: dirty` is GitHub's word for conflicts.
        mergeable: p["mergeable"]
            .as_bool()
            .map(|m| m && p["mergeable_state"] != "dirty"),
        base_ref: text(&p["base"], "ref"),
        head_sha: head_sha.clone(),
        ..Feedback::default()
    };
    let me = api.get("/user").await.ok().map(|u| text(&u, "login"));
    let mut candidates = Vec::new();
    for r in api.get_all(&format!("{repo}/pulls/{n}/reviews")).await? {
        let body = text(&r, "body");
        if r["state"] != "CHANGES_REQUESTED" || body.trim().is_empty() {
            continue;
        }
        candidates.push(Candidate {
            author: text(&r["user"], "login"),
            author_id: None,
            finding: Finding {
                key: format!("review:{}", r["id"]),
                kind: "review".into(),
                author: Some(clean(api, &text(&r["user"], "login"), 100)),
                path: None,
                lines: None,
                name: None,
                body: clean(api, &body, BODY_CHARS),
                url: r["html_url"].as_str().map(str::to_owned),
            },
        });
    }
    for c in api.get_all(&format!("{repo}/pulls/{n}/comments")).await? {
        let line = c["line"].as_u64().or(c["original_line"].as_u64());
        let start = c["start_line"].as_u64().or(line);
        candidates.push(Candidate {
            author: text(&c["user"], "login"),
            author_id: None,
            finding: Finding {
                key: format!("comment:{}", c["id"]),
                kind: "thread".into(),
                author: Some(clean(api, &text(&c["user"], "login"), 100)),
                path: c["path"].as_str().map(|p| clean(api, p, 300)),
                lines: start.zip(line),
                name: None,
                body: clean(api, &text(&c, "body"), BODY_CHARS),
                url: c["html_url"].as_str().map(str::to_owned),
            },
        });
    }
    let resolved = resolved_github_comments(api, pr).await;
    candidates.retain(|c| {
        let id = c.finding.key.strip_prefix("comment:").unwrap_or("");
        let keep = !resolved.iter().any(|r| r == id);
        if !keep {
            fb.ignored
                .push(format!("{}: its thread is resolved", c.finding.key));
        }
        keep
    });
    let mut perms: BTreeMap<String, bool> = BTreeMap::new();
    for c in candidates {
        if let Some(why) = own(&c, me.as_deref()) {
            fb.ignored.push(format!("{}: {why}", c.finding.key));
            continue;
        }
        let trusted = match perms.get(&c.author) {
            Some(t) => *t,
            None => {
                let path = format!(
                    "{repo}/collaborators/{}/permission",
                    super::types::percent_encode(&c.author)
                );
                let t = match api.get(&path).await {
                    Ok(v) => {
                        let writes = |s: &str| matches!(s, "admin" | "maintain" | "write");
                        writes(v["permission"].as_str().unwrap_or(""))
                            || writes(v["role_name"].as_str().unwrap_or(""))
                    }
                    // Not a collaborator at all: GitHub answers 404.
                    Err(_) => false,
                };
                perms.insert(c.author.clone(), t);
                t
            }
        };
        fb.keep_if(trusted, c, api, &pr.project);
    }
    let runs = api
        .get(&format!(
            "{repo}/commits/{head_sha}/check-runs?per_page=100"
        ))
        .await?;
    for r in runs["check_runs"].as_array().into_iter().flatten() {
        let failed = matches!(
            r["conclusion"].as_str(),
            Some("failure" | "timed_out" | "startup_failure")
        );
        if !failed {
            continue;
        }
        let id = r["id"].as_u64().unwrap_or(0);
        let mut body = String::new();
        for key in ["title", "summary"] {
            let t = text(&r["output"], key);
            if !t.trim().is_empty() {
                body.push_str(t.trim());
                body.push('\n');
            }
        }
        // A GitHub Actions check run's id is its job's id.
        let log = match api
            .get_text_tail(&format!("{repo}/actions/jobs/{id}/logs"), LOG_TAIL_BYTES)
            .await
        {
            Ok(l) => l,
            Err(_) => text(&r["output"], "text"),
        };
        if !log.trim().is_empty() {
            body.push_str("Log (tail):\n");
            body.push_str(crate::text::tail_bytes(&log, LOG_TAIL_BYTES));
        }
        fb.findings.push(Finding {
            key: format!("check:{id}@{head_sha}"),
            kind: "check".into(),
            author: None,
            path: None,
            lines: None,
            name: Some(clean(api, &text(r, "name"), 200)),
            body: clean(api, &body, BODY_CHARS + LOG_TAIL_BYTES),
            url: r["html_url"].as_str().map(str::to_owned),
        });
    }
    let status = api
        .get(&format!("{repo}/commits/{head_sha}/status"))
        .await?;
    for s in status["statuses"].as_array().into_iter().flatten() {
        if !matches!(s["state"].as_str(), Some("failure" | "error")) {
            continue;
        }
        fb.findings.push(Finding {
            key: format!("status:{}@{head_sha}", s["id"]),
            kind: "check".into(),
            author: None,
            path: None,
            lines: None,
            name: Some(clean(api, &text(s, "context"), 200)),
            body: clean(api, &text(s, "description"), BODY_CHARS),
            url: s["target_url"].as_str().map(str::to_owned),
        });
    }
    Ok(fb)
}

/// The ids of review comments in resolved threads (GitHub's REST API does
/// not say; its GraphQL API does). Best effort: when it cannot be asked,
/// every thread counts as unresolved.
async fn resolved_github_comments(api: &ForgeApi, pr: &PrRef) -> Vec<String> {
    let (owner, name) = pr.project.path.split_once('/').unwrap_or(("", ""));
    let query = "query($o:String!,$n:String!,$p:Int!){repository(owner:$o,name:$n){pullRequest(number:$p){reviewThreads(first:100){nodes{isResolved comments(first:100){nodes{databaseId}}}}}}}";
    let body = serde_json::json!({
        "query": query,
        "variables": {"o": owner, "n": name, "p": pr.number},
    });
    let Ok(v) = api.graphql(&body).await else {
        return Vec::new();
    };
    let threads = &v["data"]["repository"]["pullRequest"]["reviewThreads"]["nodes"];
    threads
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["isResolved"] == Value::Bool(true))
        .flat_map(|t| {
            t["comments"]["nodes"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|c| c["databaseId"].as_u64().map(|id| id.to_string()))
        .collect()
}

/// Why a comment is orch's own, if it is.
fn own(c: &Candidate, me: Option<&str>) -> Option<&'static str> {
    if me.is_some_and(|m| !m.is_empty() && m == c.author) {
        return Some("written by orch's own user");
    }
    if c.finding.body.contains(MARKER) {
        return Some("orch's own comment");
    }
    None
}

async fn fetch_gitlab(api: &ForgeApi, pr: &PrRef) -> Result<Feedback, ForgeError> {
    let proj = format!("/projects/{}", pr.project.encoded());
    let n = pr.number;
    let mr = api.get(&format!("{proj}/merge_requests/{n}")).await?;
    let head_sha = text(&mr, "sha");
    if head_sha.is_empty() {
        return Err(api.unexpected(
            &format!("{proj}/merge_requests/{n}"),
            "a merge request with a `sha`",
        ));
    }
    let status = mr["detailed_merge_status"]
        .as_str()
        .or(mr["merge_status"].as_str())
        .unwrap_or("");
    let mergeable = match status {
        _ if mr["has_conflicts"] == true => Some(false),
        "cannot_be_merged" | "conflict" | "need_rebase" => Some(false),
        "can_be_merged" | "mergeable" => Some(true),
        _ => None,
    };
    let mut fb = Feedback {
        head_ref: text(&mr, "source_branch"),
        mergeable,
        base_ref: text(&mr, "target_branch"),
        head_sha: head_sha.clone(),
        ..Feedback::default()
    };
    let me = api.get("/user").await.ok().map(|u| text(&u, "username"));
    let mut candidates = Vec::new();
    for d in api
        .get_all(&format!("{proj}/merge_requests/{n}/discussions"))
        .await?
    {
        let notes = d["notes"].as_array().cloned().unwrap_or_default();
        let Some(first) = notes.first() else {
            continue;
        };
        // Only open threads: resolvable and not resolved.
        if first["resolvable"] != Value::Bool(true) || first["resolved"] == Value::Bool(true) {
            continue;
        }
        for note in &notes {
            if note["system"] == Value::Bool(true) {
                continue;
            }
            let pos = &note["position"];
            let path = pos["new_path"].as_str().map(|p| clean(api, p, 300));
            let line = pos["new_line"].as_u64();
            let range = pos["line_range"]["start"]["new_line"]
                .as_u64()
                .zip(pos["line_range"]["end"]["new_line"].as_u64());
            candidates.push(Candidate {
                author: text(&note["author"], "username"),
                author_id: note["author"]["id"].as_u64(),
                finding: Finding {
                    key: format!("note:{}", note["id"]),
                    kind: "thread".into(),
                    author: Some(clean(api, &text(&note["author"], "username"), 100)),
                    path,
                    lines: range.or(line.map(|l| (l, l))),
                    name: None,
                    body: clean(api, &text(note, "body"), BODY_CHARS),
                    url: None,
                },
            });
        }
    }
    let mut levels: BTreeMap<String, bool> = BTreeMap::new();
    for c in candidates {
        if let Some(why) = own(&c, me.as_deref()) {
            fb.ignored.push(format!("{}: {why}", c.finding.key));
            continue;
        }
        let trusted = match (levels.get(&c.author), c.author_id) {
            (Some(t), _) => *t,
            (None, Some(id)) => {
                let t = match api.get(&format!("{proj}/members/all/{id}")).await {
                    Ok(v) => v["access_level"].as_u64().unwrap_or(0) >= 30,
                    Err(_) => false,
                };
                levels.insert(c.author.clone(), t);
                t
            }
            (None, None) => false,
        };
        fb.keep_if(trusted, c, api, &pr.project);
    }
    if let Some(pipeline) = mr["head_pipeline"]["id"].as_u64() {
        let jobs = api
            .get_all(&format!("{proj}/pipelines/{pipeline}/jobs?scope[]=failed"))
            .await?;
        for j in jobs {
            if j["status"] != "failed" || j["allow_failure"] == Value::Bool(true) {
                continue;
            }
            let id = j["id"].as_u64().unwrap_or(0);
            let mut body = format!(
                "Job `{}` (stage {}) failed.\n",
                text(&j, "name"),
                text(&j, "stage")
            );
            if let Ok(log) = api
                .get_text_tail(&format!("{proj}/jobs/{id}/trace"), LOG_TAIL_BYTES)
                .await
                && !log.trim().is_empty()
            {
                body.push_str("Log (tail):\n");
                body.push_str(&log);
            }
            fb.findings.push(Finding {
                key: format!("job:{id}@{head_sha}"),
                kind: "check".into(),
                author: None,
                path: None,
                lines: None,
                name: Some(clean(api, &text(&j, "name"), 200)),
                body: clean(api, &body, BODY_CHARS + LOG_TAIL_BYTES),
                url: j["web_url"].as_str().map(str::to_owned),
            });
        }
    }
    Ok(fb)
}

/// Posts `body` as one comment (GitHub: on the conversation; GitLab: a
/// note) and returns its web address when the forge gives one.
pub(crate) async fn post_comment(
    api: &ForgeApi,
    pr: &PrRef,
    body: &str,
) -> Result<Option<String>, ForgeError> {
    let (path, payload) = match pr.project.forge {
        Forge::GitHub => (
            format!("/repos/{}/issues/{}/comments", pr.project.path, pr.number),
            serde_json::json!({ "body": body }),
        ),
        Forge::GitLab => (
            format!(
                "/projects/{}/merge_requests/{}/notes",
                pr.project.encoded(),
                pr.number
            ),
            serde_json::json!({ "body": body }),
        ),
    };
    let v = api
        .send_json(reqwest::Method::POST, &path, &payload)
        .await?;
    Ok(v["html_url"].as_str().map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pr_specs_parse_and_bad_ones_say_why() {
        let p = PrRef::parse("github:o/r#12").unwrap();
        assert_eq!((p.project.path.as_str(), p.number), ("o/r", 12));
        assert_eq!(p.to_string(), "github:o/r#12");
        let g = PrRef::parse("gitlab:grp/sub/proj!4").unwrap();
        assert_eq!(g.project.forge, Forge::GitLab);
        assert_eq!(g.to_string(), "gitlab:grp/sub/proj!4");
        for (bad, why) in [
            ("github:o/r", "no `#N`"),
            ("github:o/r#x", "`x` is not a number"),
            ("gitlab:g/p!0", "`0` is not a number"),
        ] {
            let e = PrRef::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
