//! Per-stage models (issue 26.5), through the real binary: a stage's
//! `model:` names an `orch.toml` profile (its own server and model) or a
//! model id; precedence `--model` > stage > role > profile; `--dry-run`
//! shows each stage's model and where it comes from; the stage's record
//! says which it used; `orch agent` keeps a role's model the server lists.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, orch_with_model, output_logged, record_dir,
    stage_events, stdout_json, write_issue, write_pipeline,
};
use serde_json::json;

/// Three servers: the run's profile `base`, and the profiles `alpha` and
/// `beta` that the two stages name.
struct Servers {
    base: FakeServer,
    alpha: FakeServer,
    beta: FakeServer,
}

fn servers() -> Servers {
    Servers {
        base: FakeServer::start(Script::new()),
        alpha: FakeServer::start(
            Script::new().agent("one", vec![Reply::finish("f1", "one done", None)]),
        ),
        beta: FakeServer::start(
            Script::new().agent("two", vec![Reply::finish("f2", "two done", None)]),
        ),
    }
}

fn repo_with_profiles(s: &Servers) -> TestRepo {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    repo.write(
        ".orch/orch.toml",
        format!(
            "default_profile = \"base\"\n\n[profiles.base]\nbase_url = \"{}\"\nmodel = \"base-model\"\n\n[profiles.alpha]\nbase_url = \"{}\"\nmodel = \"alpha-model\"\n\n[profiles.beta]\nbase_url = \"{}\"\nmodel = \"beta-model\"\n",
            s.base.base_url, s.alpha.base_url, s.beta.base_url
        ),
    );
    // A role naming its own model: the stage's `model:` wins over it.
    repo.write(
        ".orch/roles/worker.md",
        "---\nname: worker\nmodel: role-model\n---\nYou work in the worktree; call finish when done.\n",
    );
    repo.commit_all("profiles");
    repo
}

/// A scratch dir with an issue and the pipeline `<name>.yaml` holding `yaml`.
fn issue_and_pipeline(
    name: &str,
    yaml: &str,
) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# x\n\nDo x.\n");
    let pipeline = write_pipeline(scratch.path(), name, yaml);
    (scratch, issue, pipeline)
}

const PIPELINE: &str = "stages:\n  one:\n    role: worker\n    model: alpha\n  two:\n    role: worker\n    needs: [one]\n    model: beta\n";

#[test]
fn each_stage_sends_to_its_profiles_server_with_its_model_and_says_so() {
    let s = servers();
    let repo = repo_with_profiles(&s);
    let (_scratch, issue, pipeline) = issue_and_pipeline("two", PIPELINE);

    // --dry-run: each stage's model, its source and server; no request.
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .args(["--dry-run", "--json"])
        .output();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan = stdout_json(&out);
    let stage = |i: usize| plan["stages"][i].clone();
    assert_eq!(stage(0)["model"], "alpha-model");
    assert_eq!(stage(0)["model_source"], "stage model: profile `alpha`");
    assert_eq!(stage(0)["model_base_url"], s.alpha.base_url.as_str());
    assert_eq!(stage(1)["model"], "beta-model");
    assert_eq!(stage(1)["model_base_url"], s.beta.base_url.as_str());
    let human = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .args(["--dry-run"])
        .output();
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("== stage one (role worker, model alpha-model")
            && text.contains(&format!(
                "model from: stage model: profile `beta`, at {}",
                s.beta.base_url
            )),
        "{text}"
    );
    assert!(s.alpha.requests().is_empty() && s.beta.requests().is_empty());

    let out = OrchRun::new(&pipeline, &repo).issue(&issue).json().output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let (alpha, beta) = (s.alpha.requests(), s.beta.requests());
    assert_eq!(alpha.len(), 1, "alpha serves only stage one");
    assert_eq!(alpha[0].header("x-orch-agent"), Some("one"));
    assert_eq!(alpha[0].body["model"], "alpha-model");
    assert_eq!(beta.len(), 1, "beta serves only stage two");
    assert_eq!(beta[0].header("x-orch-agent"), Some("two"));
    assert_eq!(beta[0].body["model"], "beta-model");
    assert!(
        s.base.requests().is_empty(),
        "the run's profile served no stage"
    );
    // Recorded per stage.
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let start = &stage_events(&record_dir(&repo, &run_id), "two", "stage_start")[0];
    assert_eq!(start["model"], "beta-model");
    assert_eq!(start["model_source"], "stage model: profile `beta`");
    assert_eq!(start["base_url"], s.beta.base_url.as_str());
    let trailer = repo.git(&["log", "-1", "--format=%B", &format!("orch/{run_id}/one")]);
    assert!(trailer.contains("Orch-Model: alpha-model"), "{trailer}");
}

#[test]
fn model_flag_overrides_every_stage_and_a_model_id_stays_on_the_run_server() {
    let base = FakeServer::start(
        Script::new()
            .agent("one", vec![Reply::finish("f1", "one done", None)])
            .agent("two", vec![Reply::finish("f2", "two done", None)]),
    );
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    repo.write(
        ".orch/orch.toml",
        format!(
            "default_profile = \"base\"\n\n[profiles.base]\nbase_url = \"{}\"\nmodel = \"base-model\"\n",
            base.base_url
        ),
    );
    repo.commit_all("profile");
    // `small-model` is no profile: a model id asked of the run's server.
    let (_scratch, issue, pipeline) = issue_and_pipeline(
        "ids",
        "stages:\n  one:\n    role: coder\n    model: small-model\n  two:\n    role: coder\n    needs: [one]\n",
    );
    let out = OrchRun::new(&pipeline, &repo).issue(&issue).output();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(base.requests_for("one")[0].body["model"], "small-model");
    assert_eq!(base.requests_for("two")[0].body["model"], "base-model");

    let flagged = FakeServer::start(
        Script::new()
            .agent("one", vec![Reply::finish("f1", "one done", None)])
            .agent("two", vec![Reply::finish("f2", "two done", None)]),
    );
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&flagged.base_url, "flag-model")
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(flagged.requests_for("one")[0].body["model"], "flag-model");
    assert!(
        stderr.contains("stage `one` names model `small-model`; --model overrides it"),
        "{stderr}"
    );
}

#[test]
fn an_empty_stage_model_is_a_located_error() {
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    let (_scratch, issue, pipeline) =
        issue_and_pipeline("bad", "stages:\n  one:\n    role: coder\n    model: \"\"\n");
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .args(["--dry-run"])
        .output();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.yaml:4:12: model is empty"), "{stderr}");
}

#[test]
fn orch_agent_keeps_a_role_model_the_server_lists_like_run() {
    let list = json!({"object": "list", "data": [{"id": "fake-model"}, {"id": "small-model"}]});
    let server = FakeServer::start(
        Script::new()
            .route("/v1/models", Reply::Raw(list.to_string()))
            .agent(
                "asker",
                vec![Reply::finish("f", "it is in README.md", None)],
            ),
    );
    let repo = TestRepo::with_commit(&[("README.md", "# app\n")], "init");
    repo.write(
        ".orch/roles/asker.md",
        "---\nname: asker\nmodel: small-model\nread_only: true\n---\nYou answer questions about the worktree; call finish.\n",
    );
    repo.commit_all("role");
    let mut cmd = orch_with_model(&server.base_url);
    cmd.current_dir(&repo.path).args([
        "agent",
        "--role",
        "asker",
        "--task",
        "Where is the readme?",
    ]);
    let out = output_logged(&mut cmd);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reqs = server.requests_for("asker");
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].body["model"], "small-model");
}

#[test]
fn resume_sends_a_stage_to_its_profile_again() {
    let s = Servers {
        base: FakeServer::start(Script::new()),
        alpha: FakeServer::start(Script::new().agent(
            "one",
            vec![
                Reply::Status(
                    400,
                    "{\"error\": {\"message\": \"bad request\"}}".to_owned(),
                ),
                Reply::finish("f1", "one done", None),
            ],
        )),
        beta: FakeServer::start(
            Script::new().agent("two", vec![Reply::finish("f2", "two done", None)]),
        ),
    };
    let repo = repo_with_profiles(&s);
    let (_scratch, issue, pipeline) = issue_and_pipeline("two", PIPELINE);
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .json()
        .args(["--no-memory"])
        .output();
    assert_ne!(out.status.code(), Some(0));
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let mut cmd = crate::support::orch();
    cmd.args(["resume", &run_id, "--retry", "--no-memory", "--repo"])
        .arg(&repo.path);
    let out = output_logged(&mut cmd);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(s.alpha.requests_for("one").len(), 2);
    assert_eq!(s.alpha.requests_for("one")[1].body["model"], "alpha-model");
    assert_eq!(s.beta.requests_for("two").len(), 1);
    let to_base: Vec<_> = s
        .base
        .requests()
        .iter()
        .map(|r| {
            (
                r.header("x-orch-agent").map(str::to_owned),
                r.body["model"].clone(),
            )
        })
        .collect();
    assert!(to_base.is_empty(), "{to_base:?}");
}

#[test]
fn a_stage_profile_whose_server_is_down_fails_the_preflight_and_creates_nothing() {
    let s = servers();
    let repo = repo_with_profiles(&s);
    // Rebind `beta` to a port nothing listens on.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", l.local_addr().unwrap())
    };
    let toml = repo
        .read(".orch/orch.toml")
        .replace(&s.beta.base_url, &dead);
    repo.write(".orch/orch.toml", toml);
    repo.commit_all("dead beta");
    let (_scratch, issue, pipeline) = issue_and_pipeline("two", PIPELINE);
    let out = OrchRun::new(&pipeline, &repo).issue(&issue).output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("the model of stage `two`"), "{stderr}");
    assert!(s.alpha.requests().is_empty(), "no stage ran");
    assert!(repo.git(&["branch", "--list", "orch/*"]).is_empty());
}
