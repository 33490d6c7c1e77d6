//! The `provider` setting and the native Anthropic Messages adapter, through
//! the real binary: configuration and its errors, then requests and replies
//! against the fake server's Anthropic mode (`support/fake_server/anthropic.rs`).

use crate::support::{TestRepo, orch, run_text};
use serde_json::Value;

fn config_json(
    repo: &TestRepo,
    env: &[(&str, &str)],
    args: &[&str],
) -> (Option<i32>, String, String) {
    let mut cmd = orch();
    cmd.current_dir(&repo.path).arg("config").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_text(&mut cmd)
}

#[test]
fn provider_is_a_profile_key_and_a_flag_shown_by_orch_config() {
    let repo = TestRepo::new();
    repo.write(
        ".orch/orch.toml",
        "default_profile = \"claude\"\n\n[profiles.claude]\nprovider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\n",
    );
    repo.commit_all("init");

    // The profile's provider, Anthropic's default base URL and key variable.
    let (code, out, err) = config_json(
        &repo,
        &[("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")],
        &["--json"],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["provider"]["value"], "anthropic", "{v}");
    assert!(
        v["provider"]["source"]
            .as_str()
            .unwrap()
            .ends_with(".orch/orch.toml:4"),
        "{v}"
    );
    assert_eq!(v["base_url"]["value"], "https://api.anthropic.com", "{v}");
    assert_eq!(v["base_url"]["source"], "default", "{v}");
    assert_eq!(v["api_key"]["source"], "env ANTHROPIC_API_KEY", "{v}");

    // ANTHROPIC_BASE_URL is honoured; the flag wins over the profile.
    let (code, out, err) = config_json(
        &repo,
        &[("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")],
        &["--json", "--provider", "openai-chat"],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["provider"]["value"], "openai-chat", "{v}");
    assert_eq!(v["provider"]["source"], "flag --provider", "{v}");
    assert_eq!(
        v["base_url"],
        Value::Null,
        "no Anthropic default for openai-chat: {v}"
    );
    let (code, out, err) = config_json(&repo, &[("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("provider") && out.contains("anthropic"),
        "{out}"
    );
    assert!(
        out.contains("http://127.0.0.1:9") && out.contains("env ANTHROPIC_BASE_URL"),
        "{out}"
    );

    // An unknown value is invalid input: exit 2, naming the value and where.
    let (code, out, err) = config_json(&repo, &[], &["--provider", "claude"]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains("flag --provider") && err.contains("unknown provider `claude`"),
        "{err}"
    );
    assert!(
        err.contains("`anthropic`"),
        "the accepted values are listed: {err}"
    );
    repo.write(
        ".orch/orch.toml",
        "default_profile = \"claude\"\n\n[profiles.claude]\nprovider = \"antropic\"\nmodel = \"m\"\n",
    );
    let (code, out, err) = config_json(&repo, &[], &[]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains("orch.toml:4") && err.contains("unknown provider `antropic`"),
        "{err}"
    );
}
