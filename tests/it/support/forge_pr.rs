//! The pull (merge) request side of the scripted forge, for `orch react`:
//! a request's head (read from the bare remote the test pushes to), its
//! reviews, review comments and resolved threads (GraphQL), collaborator
//! permissions, check runs with job logs and commit statuses, and posted
//! comments — and the GitLab equivalents: discussions, members' access
//! levels, a head pipeline's failed jobs with traces, and notes.
//!
//! A test fills a [`PrFixture`] through `ForgeServer::pr`; checks and
//! statuses are served only for the commit named in `checks_sha` (the head
//! they failed on), as a forge runs them per commit.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What the forge knows about the requests `orch publish` opened.
#[derive(Debug, Default)]
pub struct PrFixture {
    /// The bare remote whose branches are the requests' heads.
    pub origin: Option<PathBuf>,
    /// The token's user (`GET /user`).
    pub me: String,
    /// GitHub reviews (`id`, `user.login`, `state`, `body`).
    pub reviews: Vec<Value>,
    /// GitHub review comments (`id`, `user.login`, `path`, `line`, `start_line`, `body`).
    pub review_comments: Vec<Value>,
    /// Review comment ids whose thread is resolved.
    pub resolved: Vec<u64>,
    /// Login → `permission` (`admin`, `write`, `read`); others get 404.
    pub permissions: BTreeMap<String, String>,
    /// The commit the checks ran on.
    pub checks_sha: String,
    /// GitHub check runs (`id`, `name`, `conclusion`, `output`).
    pub check_runs: Vec<Value>,
    /// GitHub commit statuses (`id`, `context`, `state`, `description`).
    pub statuses: Vec<Value>,
    /// Job id → log text (GitHub Actions job logs, GitLab traces).
    pub logs: BTreeMap<u64, String>,
    /// Whether the request merges (`mergeable`); `None`: git decides, on
    /// the bare remote (`git merge-tree` of the base and the head branch).
    pub mergeable: Option<bool>,
    /// Comments (GitHub) and notes (GitLab) posted, in order.
    pub posted: Vec<Value>,
    /// GitLab discussions on the merge request.
    pub discussions: Vec<Value>,
    /// GitLab user id → access level.
    pub members: BTreeMap<u64, u64>,
    /// GitLab failed jobs of the head pipeline (`id`, `name`, `stage`, `status`).
    pub failed_jobs: Vec<Value>,
}

/// A text answer (a log), not JSON: `serve` writes it as it is.
pub fn text_answer(text: &str) -> Value {
    json!({ "__text": text })
}

fn head_of(fx: &PrFixture, branch: &str) -> String {
    let Some(origin) = &fx.origin else {
        return String::new();
    };
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(origin)
        .args(["rev-parse", &format!("refs/heads/{branch}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Whether `branch` merges into `base` on the bare remote, as a forge
/// computes it: `git merge-tree --write-tree` exits 0 (clean) or 1
/// (conflicts). `None` without a remote or with a branch it lacks.
fn merges_in_origin(fx: &PrFixture, base: &str, branch: &str) -> Option<bool> {
    let origin = fx.origin.as_ref()?;
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(origin)
        .args(["merge-tree", "--write-tree"])
        .arg(format!("refs/heads/{base}"))
        .arg(format!("refs/heads/{branch}"))
        .output()
        .unwrap();
    match out.status.code() {
        Some(0) => Some(true),
        Some(1) => Some(false),
        _ => None,
    }
}

/// Answers the pull-request endpoints; `None` for anything else.
pub(super) fn route(
    method: &str,
    segs: &[&str],
    req_body: &Value,
    fx: &mut PrFixture,
    pulls: &[Value],
    mrs: &[Value],
    base: &str,
) -> Option<(u16, Value)> {
    let checks_for = |sha: &str| sha == fx.checks_sha;
    Some(match (method, segs) {
        // ---- GitHub ----
        ("GET", ["user"]) => (200, json!({"login": fx.me})),
        ("POST", ["graphql"]) => {
            let nodes: Vec<Value> = fx
                .review_comments
                .iter()
                .map(|c| {
                    let id = c["id"].as_u64().unwrap_or(0);
                    json!({"isResolved": fx.resolved.contains(&id), "comments": {"nodes": [{"databaseId": id}]}})
                })
                .collect();
            (
                200,
                json!({"data": {"repository": {"pullRequest": {"reviewThreads": {"nodes": nodes}}}}}),
            )
        }
        ("GET", ["repos", "o", "r", "pulls", n]) => {
            let pr = pulls
                .iter()
                .find(|p| n.parse::<u64>().ok() == p["number"].as_u64())?;
            let branch = pr["head"]["ref"].as_str().unwrap_or("").to_owned();
            let base_ref = pr["base"]["ref"].as_str().unwrap_or("main").to_owned();
            let mergeable = fx
                .mergeable
                .or_else(|| merges_in_origin(fx, &base_ref, &branch));
            let mut pr = pr.clone();
            pr["head"] = json!({"ref": branch, "sha": head_of(fx, &branch)});
            pr["base"] = json!({"ref": base_ref, "sha": head_of(fx, &base_ref)});
            pr["mergeable"] = json!(mergeable);
            pr["mergeable_state"] = json!(match mergeable {
                Some(false) => "dirty",
                Some(true) => "clean",
                None => "unknown",
            });
            (200, pr)
        }
        ("GET", ["repos", "o", "r", "pulls", _, "reviews"]) => (200, json!(fx.reviews)),
        ("GET", ["repos", "o", "r", "pulls", _, "comments"]) => (200, json!(fx.review_comments)),
        ("GET", ["repos", "o", "r", "collaborators", user, "permission"]) => {
            match fx.permissions.get(*user) {
                Some(p) => (200, json!({"permission": p, "role_name": p})),
                None => (404, json!({"message": "Not Found"})),
            }
        }
        ("GET", ["repos", "o", "r", "commits", sha, "check-runs"]) => {
            let runs: Vec<Value> = if checks_for(sha) {
                fx.check_runs.clone()
            } else {
                Vec::new()
            };
            (200, json!({"total_count": runs.len(), "check_runs": runs}))
        }
        ("GET", ["repos", "o", "r", "commits", sha, "status"]) => {
            let st: Vec<Value> = if checks_for(sha) {
                fx.statuses.clone()
            } else {
                Vec::new()
            };
            (200, json!({"state": "failure", "statuses": st}))
        }
        ("GET", ["repos", "o", "r", "actions", "jobs", id, "logs"]) => {
            match id.parse::<u64>().ok().and_then(|i| fx.logs.get(&i)) {
                Some(log) => (200, text_answer(log)),
                None => (404, json!({"message": "Not Found"})),
            }
        }
        ("POST", ["repos", "o", "r", "issues", n, "comments"]) => {
            let id = fx.posted.len() as u64 + 9000;
            let c = json!({
                "id": id, "body": req_body["body"],
                "html_url": format!("{base}/o/r/pull/{n}#issuecomment-{id}"),
                "user": {"login": fx.me},
            });
            fx.posted.push(c.clone());
            (201, c)
        }
        // ---- GitLab ----
        ("GET", ["api", "v4", "user"]) => (200, json!({"username": fx.me, "id": 1})),
        ("GET", ["GL", "merge_requests", iid]) => {
            let mr = mrs
                .iter()
                .find(|m| iid.parse::<u64>().ok() == m["iid"].as_u64())?;
            let branch = mr["source_branch"].as_str().unwrap_or("").to_owned();
            let sha = head_of(fx, &branch);
            let target = mr["target_branch"].as_str().unwrap_or("main").to_owned();
            let mergeable = fx
                .mergeable
                .or_else(|| merges_in_origin(fx, &target, &branch));
            let mut mr = mr.clone();
            mr["sha"] = json!(sha);
            mr["detailed_merge_status"] = json!(match mergeable {
                Some(false) => "conflict",
                _ => "mergeable",
            });
            mr["merge_status"] = json!(match mergeable {
                Some(false) => "cannot_be_merged",
                _ => "can_be_merged",
            });
            mr["has_conflicts"] = json!(mergeable == Some(false));
            mr["head_pipeline"] = if checks_for(&sha) {
                json!({"id": 77, "sha": sha, "status": "failed"})
            } else {
                json!({"id": 78, "sha": sha, "status": "success"})
            };
            (200, mr)
        }
        ("GET", ["GL", "merge_requests", _, "discussions"]) => (200, json!(fx.discussions)),
        ("GET", ["GL", "members", "all", id]) => {
            match id.parse::<u64>().ok().and_then(|i| fx.members.get(&i)) {
                Some(level) => (200, json!({"id": id, "access_level": level})),
                None => (404, json!({"message": "404 Not found"})),
            }
        }
        ("GET", ["GL", "pipelines", "77", "jobs"]) => (200, json!(fx.failed_jobs)),
        ("GET", ["GL", "pipelines", _, "jobs"]) => (200, json!([])),
        ("GET", ["GL", "jobs", id, "trace"]) => {
            match id.parse::<u64>().ok().and_then(|i| fx.logs.get(&i)) {
                Some(log) => (200, text_answer(log)),
                None => (404, json!({"message": "404 Not found"})),
            }
        }
        ("POST", ["GL", "merge_requests", _, "notes"]) => {
            let id = fx.posted.len() as u64 + 9000;
            let n =
                json!({"id": id, "body": req_body["body"], "author": {"username": fx.me, "id": 1}});
            fx.posted.push(n.clone());
            (201, n)
        }
        _ => return None,
    })
}
