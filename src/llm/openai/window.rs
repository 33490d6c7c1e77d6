//! Learning the server's real context window, where the server says it:
//!
//! - llama.cpp: `GET {root}/props` → `default_generation_settings.n_ctx`
//!   (the window of one slot; older builds put `n_ctx` at the top level);
//! - vLLM: `GET {base_url}/models` → the model's `max_model_len`;
//! - Ollama: `POST {root}/api/show` → `num_ctx` in its `parameters`, when
//!   the model file sets one.
//!
//! `{root}` is the base URL without its trailing `/v1`. The endpoints are
//! tried in that order and the first number wins. Servers without them
//! (OpenAI, proxies) answer 404 or something else: every failure counts as
//! "not said", each request is bounded by [`PROBE_TIMEOUT`], and nothing
//! here is retried.

use super::client::OpenAiClient;
use super::http::read_capped;
use reqwest::header::{AUTHORIZATION, HeaderValue};
use serde_json::Value;
use std::time::Duration;

/// Bound on each probing request (they are answered at once by servers that
/// have them).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

impl OpenAiClient {
    /// The context window the server reports, if it reports one.
    pub(super) async fn ask_context_window(&self) -> Option<u64> {
        let base = self.settings.base_url.trim_end_matches('/');
        let root = base.strip_suffix("/v1").unwrap_or(base);
        let found = match self.get_json(&format!("{root}/props")).await {
            Some(props) => llama_cpp_window(&props),
            None => None,
        };
        let found = match found {
            Some(n) => Some(("llama.cpp /props", n)),
            None => self
                .get_json(&format!("{base}/models"))
                .await
                .and_then(|models| vllm_window(&models, &self.settings.model))
                .map(|n| ("/models max_model_len", n)),
        };
        let found = match found {
            Some(found) => Some(found),
            None => self
                .post_json(
                    &format!("{root}/api/show"),
                    serde_json::json!({"model": self.settings.model}),
                )
                .await
                .and_then(|show| ollama_window(&show))
                .map(|n| ("Ollama /api/show num_ctx", n)),
        };
        match found {
            Some((source, n)) => {
                tracing::info!(url = %base, source, tokens = n, "the server reports its context window");
                Some(n)
            }
            None => {
                tracing::debug!(url = %base, "the server does not report its context window");
                None
            }
        }
    }

    async fn get_json(&self, url: &str) -> Option<Value> {
        self.send_probe(self.http.get(url)).await
    }

    async fn post_json(&self, url: &str, body: Value) -> Option<Value> {
        self.send_probe(self.http.post(url).json(&body)).await
    }

    async fn send_probe(&self, mut builder: reqwest::RequestBuilder) -> Option<Value> {
        builder = builder.timeout(PROBE_TIMEOUT.min(self.settings.request_timeout));
        if let Some(key) = &self.settings.api_key
            && let Ok(mut value) = HeaderValue::from_str(&format!("Bearer {key}"))
        {
            value.set_sensitive(true);
            builder = builder.header(AUTHORIZATION, value);
        }
        let mut resp = builder.send().await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        // A model list can be long (OpenRouter's is ~1 MB), never unbounded.
        let deadline = tokio::time::Instant::now() + PROBE_TIMEOUT;
        let bytes = read_capped(&mut resp, self.settings.max_body_bytes(), deadline, false)
            .await
            .ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

fn positive(v: Option<&Value>) -> Option<u64> {
    v.and_then(Value::as_u64).filter(|n| *n > 0)
}

/// llama.cpp's `/props`: `default_generation_settings.n_ctx`, else a
/// top-level `n_ctx`.
pub(super) fn llama_cpp_window(props: &Value) -> Option<u64> {
    positive(props.pointer("/default_generation_settings/n_ctx"))
        .or_else(|| positive(props.get("n_ctx")))
}

/// vLLM's `/v1/models`: `max_model_len` of the entry named `model`, else
/// of the only entry.
pub(super) fn vllm_window(models: &Value, model: &str) -> Option<u64> {
    let data = models.get("data")?.as_array()?;
    let entry = data
        .iter()
        .find(|m| m.get("id").and_then(Value::as_str) == Some(model))
        .or_else(|| (data.len() == 1).then(|| &data[0]))?;
    positive(entry.get("max_model_len"))
}

/// Ollama's `/api/show`: `num_ctx N` in the `parameters` text.
pub(super) fn ollama_window(show: &Value) -> Option<u64> {
    let params = show.get("parameters")?.as_str()?;
    params.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some("num_ctx"))
            .then(|| words.next()?.parse::<u64>().ok())
            .flatten()
            .filter(|n| *n > 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn windows_are_read_from_each_servers_answer() {
        assert_eq!(
            llama_cpp_window(
                &json!({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1})
            ),
            Some(4096)
        );
        assert_eq!(llama_cpp_window(&json!({"n_ctx": 2048})), Some(2048));
        assert_eq!(llama_cpp_window(&json!({"build_info": "b1"})), None);
        let models = json!({"object": "list", "data": [
            {"id": "a", "max_model_len": 8192},
            {"id": "b", "max_model_len": 32768}]});
        assert_eq!(vllm_window(&models, "b"), Some(32768));
        assert_eq!(vllm_window(&models, "c"), None);
        let openai = json!({"data": [{"id": "gpt-4o-mini", "object": "model"}]});
        assert_eq!(vllm_window(&openai, "gpt-4o-mini"), None);
        assert_eq!(
            ollama_window(&json!({"parameters": "stop \"<|im_end|>\"\nnum_ctx 8192"})),
            Some(8192)
        );
        assert_eq!(
            ollama_window(&json!({"parameters": "temperature 0.7"})),
            None
        );
    }
}
