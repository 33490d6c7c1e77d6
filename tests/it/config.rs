//! `orch.toml`: profile selection, precedence (flag > env > repo file > user
//! file > default) with explicit dirs and env, located errors, `orch config`
//! through the real binary, and a profile driving a real agent run.

use crate::support::{FAKE_API_KEY, FakeServer, Reply, Script, TestRepo, orch, run_text};
use orch::config::{ConfigError, Overrides, Source, resolve};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

struct Dirs {
    _tmp: tempfile::TempDir,
    repo: PathBuf,
    user: PathBuf,
}

fn dirs(repo_toml: Option<&str>, user_toml: Option<&str>) -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    let user = tmp.path().join("user");
    std::fs::create_dir_all(repo.join(".orch")).unwrap();
    std::fs::create_dir_all(&user).unwrap();
    if let Some(text) = repo_toml {
        std::fs::write(repo.join(".orch/orch.toml"), text).unwrap();
    }
    if let Some(text) = user_toml {
        std::fs::write(user.join("orch.toml"), text).unwrap();
    }
    Dirs {
        _tmp: tmp,
        repo,
        user,
    }
}

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
}

fn file(path: &Path, line: usize) -> Source {
    Source::File {
        path: path.to_owned(),
        line,
    }
}

const USER: &str = r#"default_profile = "work"

[profiles.work]
base_url = "http://user.example/v1"
model = "user-model"
api_key_env = "WORK_KEY"
context_window = 32000

[profiles.local]
base_url = "http://localhost:11434/v1"
model = "qwen2.5-coder"
stream = false
prices = { prompt = 0, completion = 0 }
"#;

const REPO: &str = r#"[profiles.work]
model = "repo-model"
stream_idle_timeout = 5

[prices."repo-model"]
prompt = 1.5
completion = 3
"#;

#[test]
fn config_precedence_flag_env_repo_user_default() {
    let d = dirs(Some(REPO), Some(USER));
    let user_file = d.user.join("orch.toml");
    let repo_file = d.repo.join(".orch/orch.toml");

    // Files only: the user's default profile, merged key by key with the repo's.
    let r = resolve(
        &Overrides::default(),
        Some(&d.repo),
        Some(&d.user),
        &env_of(&[("WORK_KEY", "sk-work-0123456789")]),
    )
    .unwrap();
    let profile = r.profile.as_ref().unwrap();
    assert_eq!(
        (profile.value.as_str(), &profile.source),
        ("work", &file(&user_file, 1))
    );
    let model = r.model.as_ref().unwrap();
    assert_eq!(
        (model.value.as_str(), &model.source),
        ("repo-model", &file(&repo_file, 2))
    );
    let base = r.base_url.as_ref().unwrap();
    assert_eq!(
        (base.value.as_str(), &base.source),
        ("http://user.example/v1", &file(&user_file, 4))
    );
    assert_eq!(r.context_window.value, 32000);
    assert_eq!(r.context_window.source, file(&user_file, 7));
    assert_eq!(r.stream_idle_timeout.value.as_secs(), 5);
    assert_eq!((r.stream.value, &r.stream.source), (true, &Source::Default));
    let key = r.api_key.as_ref().unwrap();
    assert_eq!(
        (key.value.as_str(), &key.source),
        ("sk-work-0123456789", &Source::Env("WORK_KEY".into()))
    );
    let price = r.prices.get("repo-model").unwrap();
    assert_eq!((price.prompt, price.completion), (1.5, 3.0));
    let settings = r.model_settings().unwrap();
    assert_eq!(settings.model, "repo-model");
    assert_eq!(settings.context_window, 32000);

    // Env beats both files; ORCH_API_KEY beats the profile's key variable.
    let env = env_of(&[
        ("ORCH_MODEL", "env-model"),
        ("ORCH_API_KEY", "sk-orch-0123456789"),
        ("WORK_KEY", "sk-work-0123456789"),
    ]);
    let r = resolve(&Overrides::default(), Some(&d.repo), Some(&d.user), &env).unwrap();
    let model = r.model.as_ref().unwrap();
    assert_eq!(
        (model.value.as_str(), &model.source),
        ("env-model", &Source::Env("ORCH_MODEL".into()))
    );
    assert_eq!(r.api_key.as_ref().unwrap().value, "sk-orch-0123456789");

    // A flag beats env.
    let flags = Overrides {
        model: Some("flag-model".into()),
        no_stream: true,
        ..Overrides::default()
    };
    let r = resolve(&flags, Some(&d.repo), Some(&d.user), &env).unwrap();
    let model = r.model.as_ref().unwrap();
    assert_eq!(
        (model.value.as_str(), &model.source),
        ("flag-model", &Source::Flag("--model"))
    );
    assert_eq!(
        (r.stream.value, &r.stream.source),
        (false, &Source::Flag("--no-stream"))
    );

    // Without the repo file the user file decides; without both, defaults.
    let r = resolve(&Overrides::default(), None, Some(&d.user), &env_of(&[])).unwrap();
    assert_eq!(r.model.as_ref().unwrap().value, "user-model");
    assert!(
        r.api_key.is_none(),
        "the profile names WORK_KEY, which is unset"
    );
    let r = resolve(&Overrides::default(), None, None, &env_of(&[])).unwrap();
    assert!(r.model.is_none() && r.profile.is_none());
    assert_eq!(r.context_window.source, Source::Default);
}

#[test]
fn config_profile_selection_by_flag_and_env() {
    let d = dirs(Some(REPO), Some(USER));
    let user_file = d.user.join("orch.toml");
    // ORCH_PROFILE beats default_profile.
    let r = resolve(
        &Overrides::default(),
        Some(&d.repo),
        Some(&d.user),
        &env_of(&[
            ("ORCH_PROFILE", "local"),
            ("OPENAI_API_KEY", "sk-openai-0123456789"),
        ]),
    )
    .unwrap();
    assert_eq!(r.profile.as_ref().unwrap().value, "local");
    assert_eq!(r.model.as_ref().unwrap().value, "qwen2.5-coder");
    assert_eq!(
        (r.stream.value, &r.stream.source),
        (false, &file(&user_file, 12))
    );
    // A profile without api_key_env falls back to OPENAI_API_KEY.
    assert_eq!(
        r.api_key.as_ref().unwrap().source,
        Source::Env("OPENAI_API_KEY".into())
    );
    // The profile's prices price its model: zero is a known (free) price.
    let price = r.prices.get("qwen2.5-coder").unwrap();
    assert_eq!((price.prompt, price.completion), (0.0, 0.0));

    // --profile beats ORCH_PROFILE; an unknown one lists the known ones.
    let flags = Overrides {
        profile: Some("nope".into()),
        ..Overrides::default()
    };
    let err = resolve(
        &flags,
        Some(&d.repo),
        Some(&d.user),
        &env_of(&[("ORCH_PROFILE", "local")]),
    )
    .unwrap_err();
    assert!(matches!(err, ConfigError::UnknownProfile { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("`nope`") && text.contains("flag --profile") && text.contains("local, work"),
        "{text}"
    );
}

#[test]
fn config_unknown_keys_and_bad_values_name_the_place() {
    let d = dirs(
        Some("[profiles.work]\nmodel = \"m\"\nbase_urll = \"http://x\"\n"),
        None,
    );
    let err = resolve(&Overrides::default(), Some(&d.repo), None, &env_of(&[])).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&format!("{}:3:1", d.repo.join(".orch/orch.toml").display())),
        "{text}"
    );
    assert!(text.contains("base_urll"), "{text}");

    let d = dirs(
        None,
        Some("default_profile = \"p\"\n[profiles.p]\nstream_idle_timeout = -1\n"),
    );
    let err = resolve(&Overrides::default(), None, Some(&d.user), &env_of(&[])).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&format!("{}:3", d.user.join("orch.toml").display()))
            && text.contains("seconds"),
        "{text}"
    );

    let d = dirs(
        None,
        Some("default_profile = \"p\"\n[profiles.p]\napi_key_env = \"sk-live-0123456789abcdef\"\n"),
    );
    let err = resolve(&Overrides::default(), None, Some(&d.user), &env_of(&[])).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("NAME of an environment variable"), "{text}");
    assert!(
        !text.contains("0123456789abcdef"),
        "a pasted key is masked: {text}"
    );
}

fn run_config(
    repo: &TestRepo,
    extra_env: &[(&str, &str)],
    args: &[&str],
) -> (Option<i32>, String, String) {
    let mut cmd = orch();
    cmd.current_dir(&repo.path).arg("config").args(args);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    run_text(&mut cmd)
}

#[test]
fn config_command_prints_sources_and_masks_the_key() {
    let repo = TestRepo::new();
    repo.write(
        ".orch/orch.toml",
        "default_profile = \"fake\"\n\n[profiles.fake]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"gpt-4o-mini\"\ncontext_window = 64000\n",
    );
    repo.commit_all("init");
    let before = repo.snapshot();

    let (code, out, err) = run_config(&repo, &[("ORCH_API_KEY", FAKE_API_KEY)], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        !out.contains(FAKE_API_KEY) && !err.contains(FAKE_API_KEY),
        "{out}{err}"
    );
    assert!(out.contains("sk-****leak"), "{out}");
    assert!(out.contains("env ORCH_API_KEY"), "{out}");
    assert!(out.contains(".orch/orch.toml:5"), "model's line: {out}");
    assert!(out.contains("64000"), "{out}");
    assert!(
        out.contains("built-in table"),
        "gpt-4o-mini has a built-in price: {out}"
    );

    let (code, out, err) = run_config(
        &repo,
        &[
            ("ORCH_API_KEY", FAKE_API_KEY),
            ("ORCH_MODEL", "my-local-model"),
        ],
        &["--json", "--no-stream"],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(!out.contains(FAKE_API_KEY), "{out}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        v["model"],
        json!({"value": "my-local-model", "source": "env ORCH_MODEL"})
    );
    assert_eq!(
        v["stream"],
        json!({"value": false, "source": "flag --no-stream"})
    );
    assert_eq!(v["api_key"]["value"], "sk-****leak");
    assert_eq!(v["context_window"]["value"], 64000);
    assert_eq!(v["price"], Value::Null, "unknown model: unknown price");
    assert!(
        v["profile"]["source"]
            .as_str()
            .unwrap()
            .ends_with(".orch/orch.toml:1"),
        "{v}"
    );

    // A broken file is invalid input: exit 2, file:line:column on stderr.
    repo.write(".orch/orch.toml", "[profiles.x]\nmodle = \"m\"\n");
    let (code, _, err) = run_config(&repo, &[], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("orch.toml:2:1"), "{err}");
    repo.write(
        ".orch/orch.toml",
        "default_profile = \"fake\"\n\n[profiles.fake]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"gpt-4o-mini\"\ncontext_window = 64000\n",
    );
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn config_profile_drives_a_real_agent_run() {
    let server = FakeServer::start(
        Script::new().agent("explore", vec![Reply::finish("f1", "nothing to see", None)]),
    );
    let repo = TestRepo::new();
    repo.write("a.txt", "a\n");
    repo.write(
        ".orch/orch.toml",
        format!(
            "[profiles.fake]\nbase_url = \"{}\"\nmodel = \"profile-model\"\nstream = false\napi_key_env = \"FAKE_PROVIDER_KEY\"\n",
            server.base_url
        ),
    );
    repo.commit_all("init");
    let before = repo.snapshot();
    let out = orch()
        .current_dir(&repo.path)
        .env("FAKE_PROVIDER_KEY", FAKE_API_KEY)
        .args([
            "agent",
            "--role",
            "explore",
            "--task",
            "Look around.",
            "--profile",
            "fake",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains(FAKE_API_KEY), "{stderr}");
    let reqs = server.requests_for("explore");
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].body["model"], "profile-model");
    assert!(
        reqs[0].body.get("stream").is_none(),
        "stream = false: {}",
        reqs[0].body
    );
    assert_eq!(
        reqs[0].header("authorization"),
        Some(format!("Bearer {FAKE_API_KEY}").as_str())
    );
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    before.assert_unchanged(&repo.snapshot());
}

#[test]
fn resume_without_model_flags_keeps_the_repo_profile_stream_false_and_prices() {
    let repo = TestRepo::new();
    repo.write("README.md", "base\n");
    // The profile sets no server or model (the run names them by flag), only
    // how to talk to it; the price table is the file's.
    repo.write(
        ".orch/orch.toml",
        "default_profile = \"plain\"\n\n[profiles.plain]\nstream = false\ncontext_window = 64000\n\n[prices.\"m\"]\nprompt = 1000.0\ncompletion = 2000.0\n",
    );
    repo.commit_all("base");
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = crate::support::write_pipeline(
        tmp.path(),
        "p",
        "name: p\nstages:\n  one:\n    role: coder\n  two:\n    role: coder\n    needs: [one]\n",
    );
    let issue = crate::support::write_issue(tmp.path(), "# do the thing\n");
    let write = |id: &str, path: &str| {
        Reply::tool_call(id, "write_file", json!({"path": path, "content": "x\n"}))
            .with_usage(100, 10)
    };
    // One server for both processes: stage two fails once (401), then the
    // resumed run finds the rest of the script there.
    let server = FakeServer::start(
        Script::new()
            .agent(
                "one",
                vec![
                    write("w", "one.txt"),
                    Reply::finish("f", "one done", None).with_usage(100, 10),
                ],
            )
            .agent("two", vec![Reply::Status(401, "bad key".into())])
            .agent(
                "two",
                vec![
                    write("w", "two.txt"),
                    Reply::finish("f", "two done", None).with_usage(100, 10),
                ],
            ),
    );
    let out = crate::support::OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .output();
    assert_eq!(out.status.code(), Some(3));
    let run_id = crate::support::stdout_json(&out)["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let streamed = |reqs: &[crate::support::Recorded]| {
        reqs.iter()
            .filter(|r| r.body.get("stream") == Some(&json!(true)))
            .count()
    };
    let first = server.requests_for("one");
    assert_eq!(first.len(), 2);
    assert_eq!(streamed(&first), 0, "the run itself follows stream = false");

    // No model flags: the recorded base URL and model, through orch.toml.
    let out = crate::support::output_logged(
        orch()
            .current_dir(&repo.path)
            .args(["resume", &run_id, "--retry", "--json"]),
    );
    crate::support::assert_exit(&out, 0);
    let resumed = &server.requests_for("two")[1..];
    assert_eq!(resumed.len(), 2, "the retried stage's two turns");
    assert_eq!(resumed[0].body["model"], "m");
    assert_eq!(
        streamed(resumed),
        0,
        "stream = false survives the resume: stream {}",
        resumed[0].body["stream"]
    );
    let summary = crate::support::stdout_json(&out);
    assert_eq!(summary["status"], "succeeded");
    assert!(
        summary["cost_usd"].as_f64().is_some_and(|c| c > 0.0),
        "the file's price survives the resume: {summary}"
    );
    assert!(server.violations().is_empty(), "{:?}", server.violations());
}

#[test]
fn config_sampling_keys_flag_over_repo_over_user_over_default() {
    let d = dirs(
        Some("[profiles.work]\ntemperature = 0.2\nmax_tokens = 0\n"),
        Some(
            "default_profile = \"work\"\n\n[profiles.work]\ntemperature = 0.7\nseed = 4\ntool_choice = \"required\"\n",
        ),
    );
    let user_file = d.user.join("orch.toml");
    let repo_file = d.repo.join(".orch/orch.toml");
    let r = resolve(
        &Overrides::default(),
        Some(&d.repo),
        Some(&d.user),
        &env_of(&[]),
    )
    .unwrap();
    let t = r.temperature.as_ref().unwrap();
    assert_eq!((t.value, &t.source), (0.2, &file(&repo_file, 2)));
    let s = r.seed.as_ref().unwrap();
    assert_eq!((s.value, &s.source), (4, &file(&user_file, 5)));
    assert_eq!(r.max_tokens.value, None, "0 sends no cap");
    assert_eq!(r.max_tokens.source, file(&repo_file, 3));
    let c = r.tool_choice.as_ref().unwrap();
    assert_eq!(c.value.as_str(), "required");
    assert_eq!(c.source, file(&user_file, 6));

    let flags = Overrides {
        sampling: orch::llm::Sampling {
            temperature: Some(0.0),
            seed: Some(8),
            max_tokens: Some(128),
            tool_choice: Some("auto".parse().unwrap()),
        },
        base_url: Some("http://127.0.0.1:9/v1".into()),
        model: Some("m".into()),
        ..Overrides::default()
    };
    let r = resolve(&flags, Some(&d.repo), Some(&d.user), &env_of(&[])).unwrap();
    assert_eq!(
        r.temperature.as_ref().unwrap().source,
        Source::Flag("--temperature")
    );
    assert_eq!(r.seed.as_ref().unwrap().value, 8);
    assert_eq!(r.max_tokens.value, Some(128));
    assert_eq!(r.max_tokens.source, Source::Flag("--max-output-tokens"));
    assert_eq!(
        r.tool_choice.as_ref().unwrap().source,
        Source::Flag("--tool-choice")
    );
    let s = r.model_settings().unwrap();
    assert_eq!(
        (
            s.sampling.temperature,
            s.sampling.seed,
            s.sampling.max_tokens,
            s.sampling.tool_choice.map(|c| c.as_str())
        ),
        (Some(0.0), Some(8), Some(128), Some("auto"))
    );

    // No files: nothing sent but the default cap.
    let r = resolve(&Overrides::default(), None, None, &env_of(&[])).unwrap();
    assert!(r.temperature.is_none() && r.seed.is_none() && r.tool_choice.is_none());
    assert_eq!(r.max_tokens.value, Some(4096));
    assert_eq!(r.max_tokens.source, Source::Default);

    // A bad value names its line; an unknown tool_choice its line and column.
    let d = dirs(Some("[profiles.x]\ntemperature = 2.1\n"), None);
    let flags = Overrides {
        profile: Some("x".into()),
        ..Overrides::default()
    };
    let err = resolve(&flags, Some(&d.repo), None, &env_of(&[])).unwrap_err();
    assert!(matches!(err, ConfigError::Invalid { .. }), "{err}");
    assert!(err.to_string().contains("orch.toml:2"), "{err}");
    let d = dirs(Some("[profiles.x]\ntool_choice = \"none\"\n"), None);
    let err = resolve(&flags, Some(&d.repo), None, &env_of(&[])).unwrap_err();
    assert!(
        err.to_string().contains("orch.toml:2:15") && err.to_string().contains("`required`"),
        "{err}"
    );
}

#[test]
fn config_command_shows_sampling_settings_and_their_sources() {
    let repo = TestRepo::new();
    repo.write(
        ".orch/orch.toml",
        "default_profile = \"p\"\n\n[profiles.p]\ntemperature = 0.4\nmax_tokens = 0\n",
    );
    repo.commit_all("init");
    let (code, out, err) = run_config(&repo, &[], &["--seed", "12"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let line = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} line: {out}"))
            .to_owned()
    };
    assert!(
        line("temperature").contains("0.4") && line("temperature").contains(".orch/orch.toml:4"),
        "{out}"
    );
    assert!(
        line("seed").contains("12") && line("seed").contains("flag --seed"),
        "{out}"
    );
    assert!(
        line("max_tokens").contains("no cap") && line("max_tokens").contains(".orch/orch.toml:5"),
        "{out}"
    );
    assert!(
        line("tool_choice").contains("(not set)") && line("tool_choice").contains("`auto`"),
        "{out}"
    );

    let (code, out, err) = run_config(
        &repo,
        &[],
        &[
            "--json",
            "--tool-choice",
            "required",
            "--max-output-tokens",
            "256",
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        v["tool_choice"],
        json!({"value": "required", "source": "flag --tool-choice"})
    );
    assert_eq!(
        v["max_tokens"],
        json!({"value": 256, "source": "flag --max-output-tokens"})
    );
    assert_eq!(v["seed"], Value::Null);
    assert_eq!(v["temperature"]["value"], 0.4);
}
