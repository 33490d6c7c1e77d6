//! The preflight: before a run creates anything (record, branch, worktree),
//! one `GET <base>/models` checks that the model server is there, takes the
//! key and serves the model. Connection refused, a name that does not
//! resolve, 401/403 and a model missing from the server's list fail at once
//! (no retries, a short timeout), so a typo in `--base-url` costs a moment
//! and leaves nothing behind. A server without `/models` (404/405, or any
//! other answer that is not a model list) passes; so does one that answers
//! too slowly (the run's own retries then apply). The replay model has no
//! server and is not checked.

use super::error::CliError;
use crate::llm::{ChatModel, ModelSpawn};
use std::time::Duration;

/// Limit on connecting to the server in the preflight.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Limit on the whole `GET /models`.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What the preflight learned about the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Served {
    /// The model ids the server listed; `None` when it has no list (no
    /// `/models`, the replay model, a slow server).
    pub served_models: Option<Vec<String>>,
}

/// The preflight of a run on `repo` from `base`: the local checks first (a
/// repository with commits, a base that resolves; exit 4 like the run would
/// give), then the server behind `model`.
pub(crate) async fn check_run(
    repo: &std::path::Path,
    base: &str,
    model: &dyn ChatModel,
) -> Result<Served, CliError> {
    if base == super::args::WORKTREE_BASE {
        crate::git::open_repo(repo)?;
    } else {
        crate::git::open_repo_at(repo, base)?;
    }
    check(model).await
}

/// Checks the server behind `model` (see the module docs); a warning for a
/// slow server goes to stderr.
pub(crate) async fn check(model: &dyn ChatModel) -> Result<Served, CliError> {
    let Some(ModelSpawn::Http {
        provider: crate::llm::Provider::OpenAiChat,
        base_url,
        model,
        api_key,
    }) = model.spawn_settings()
    else {
        // Other wire formats list their models elsewhere (Anthropic:
        // `/v1/models` with its own headers): their first request checks.
        return Ok(Served::default());
    };
    check_server(&base_url, &model, api_key.as_deref()).await
}

/// [`check`] for a server at `base_url` that should serve `model`.
pub(crate) async fn check_server(
    base_url: &str,
    model: &str,
    api_key: Option<&str>,
) -> Result<Served, CliError> {
    let url = format!("{}/models", base_url.trim_end_matches('/'));
    let fail = |what: String| CliError::Preflight(format!("failed to {what}"));
    // As in the model client: reqwest needs a process-wide TLS provider,
    // even for plain http:// (installing twice is harmless).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .user_agent(concat!("orch/", env!("CARGO_PKG_VERSION")));
    if url.starts_with("http://") {
        builder = builder.tls_certs_only(std::iter::empty::<reqwest::Certificate>());
    }
    let http = builder
        .build()
        .map_err(|e| fail(format!("prepare the model server check: {e}")))?;
    let mut req = http.get(&url);
    if let Some(key) = api_key {
        req = req.bearer_auth(key);
    }
    let resp = match req.send().await {
        Ok(resp) => resp,
        Err(e) if e.is_timeout() => {
            crate::ui::status_line(&format!(
                "orch: warning: the model server at {base_url} did not answer GET /models within {}s; going on",
                REQUEST_TIMEOUT.as_secs()
            ));
            return Ok(Served::default());
        }
        Err(e) => {
            return Err(fail(format!(
                "reach the model server at {base_url} ({}); check --base-url or ORCH_BASE_URL and that the server is running",
                error_chain(&e)
            )));
        }
    };
    let status = resp.status().as_u16();
    if status == 401 || status == 403 {
        let body = resp.text().await.unwrap_or_default();
        return Err(fail(format!(
            "authenticate with the model server at {url} (HTTP {status}): {}; set ORCH_API_KEY (or OPENAI_API_KEY, or the env var named by the profile's api_key_env)",
            body.trim().chars().take(200).collect::<String>()
        )));
    }
    if !(200..300).contains(&status) {
        // No model list here (404/405 on servers without /models, …).
        return Ok(Served::default());
    }
    let Ok(body) = resp.json::<serde_json::Value>().await else {
        return Ok(Served::default());
    };
    let Some(entries) = body["data"].as_array() else {
        return Ok(Served::default());
    };
    let ids: Vec<String> = entries
        .iter()
        .filter_map(|e| e["id"].as_str().map(str::to_owned))
        .collect();
    // llama.cpp lists its one file and answers to any model name.
    let any_name = entries.len() == 1 && entries[0]["owned_by"] == "llamacpp";
    if !ids.is_empty() && !any_name && !lists(&ids, model) {
        let shown: Vec<&str> = ids.iter().take(20).map(String::as_str).collect();
        return Err(fail(format!(
            "use model `{model}`: the server at {base_url} does not serve it (it lists {}{}); pick one with --model or ORCH_MODEL",
            shown.join(", "),
            if ids.len() > shown.len() { ", …" } else { "" }
        )));
    }
    Ok(Served {
        served_models: Some(ids),
    })
}

/// Whether `model` is among `ids` (Ollama's `name` stands for `name:latest`).
fn lists(ids: &[String], model: &str) -> bool {
    ids.iter()
        .any(|id| id == model || id.strip_suffix(":latest") == Some(model))
}

/// An error with its causes ("connection refused", "dns error", …).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_is_listed_by_name_or_as_its_latest_tag() {
        let ids = ["qwen2.5-coder:latest".to_owned(), "gpt-4o".to_owned()];
        assert!(lists(&ids, "qwen2.5-coder"));
        assert!(lists(&ids, "gpt-4o"));
        assert!(!lists(&ids, "gpt-4o-mini"));
    }

    #[tokio::test]
    async fn a_closed_port_fails_at_once() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let err = check_server(&format!("http://{addr}/v1"), "m", None)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("reach the model server"), "{err}");
        assert_eq!(err.exit_code(), crate::exit::MODEL);
    }
}
