//! Learning the server's real context window, where the server says it:
//!
//! - llama.cpp: `GET {root}/props` → `default_generation_settings.n_ctx`
//!   (the window of one slot; older builds put `n_ctx` at the top level);
//! - vLLM: `GET {base_url}/models` → the model's `max_model_len`;
//! - Ollama: `POST {root}/api/show` → `num_ctx` in its `parameters`, when
//!   the model file sets one.
//!
//! `{root}` is the base URL without its trailing `/v1`. Only what the
//! server's kind needs is asked ([`server_cache::probes_for`]): the kind
//! comes from its `GET /models` answer, which the preflight already read
//! (else the client asks it itself, one request); vLLM's window is in that
//! answer; llama.cpp gets `/props`, Ollama `/api/show`, OpenAI and other
//! services nothing; a server whose kind could not be told gets both, in
//! parallel. What was learned (a window, or "none") is kept per base URL
//! and model in the user's cache ([`server_cache`]): within its expiry the
//! next client, in this process or the next run, asks nothing. Every
//! failure counts as "not said", each request is bounded by
//! [`PROBE_TIMEOUT`], and nothing here is retried. The agent never waits
//! for the answer unless its first request could pass the compaction
//! trigger under a small window (`Agent::start`): it goes on beside turn 1
//! and applies from the turn after it arrives.

use super::client::OpenAiClient;
use super::http::read_capped;
use crate::llm::server_cache::{self, Listing, Probe};
use reqwest::header::{AUTHORIZATION, HeaderValue, SERVER};
use serde_json::Value;
use std::time::Duration;

/// Bound on each probing request (they are answered at once by servers that
/// have them).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

impl OpenAiClient {
    /// The context window the server reports, if it reports one.
    pub(super) async fn ask_context_window(&self) -> Option<u64> {
        if !server_cache::has_probes(self.settings.provider) {
            return None;
        }
        let base = self.settings.base_url.trim_end_matches('/');
        let model = self.settings.model.as_str();
        let listed = server_cache::listing(base);
        if let Some(known) = server_cache::fresh(base, model)
            // A server of another kind answers there now: ask it.
            && listed.as_ref().is_none_or(|l| {
                l.kind == known.kind || l.kind == server_cache::ServerKind::Unknown
            })
        {
            tracing::debug!(url = %base, kind = ?known.kind, tokens = ?known.window, "the server's context window, from the cache");
            return known.window;
        }
        // Whether every request sent got an answer: "no window" is only
        // remembered then, not after a timeout or a 5xx.
        let mut answered = true;
        let listing = match listed {
            Some(listing) => listing,
            None => {
                let (listing, got) = self.ask_listing(&format!("{base}/models")).await;
                answered &= got;
                server_cache::note_listing(base, listing.clone());
                listing
            }
        };
        let root = base.strip_suffix("/v1").unwrap_or(base);
        let probes = server_cache::probes_for(listing.kind);
        let props = async {
            if !probes.contains(&Probe::Props) {
                return Ok(None);
            }
            let props = self.get_json(&format!("{root}/props")).await?;
            Ok(props.as_ref().and_then(llama_cpp_window))
        };
        let show = async {
            if !probes.contains(&Probe::ApiShow) {
                return Ok(None);
            }
            let body = serde_json::json!({"model": model});
            let show = self.post_json(&format!("{root}/api/show"), body).await?;
            Ok(show.as_ref().and_then(ollama_window))
        };
        let (props, show): (Result<_, NoAnswer>, Result<_, NoAnswer>) = tokio::join!(props, show);
        answered &= props.is_ok() && show.is_ok();
        let found = props
            .ok()
            .flatten()
            .map(|n| ("llama.cpp /props", n))
            .or_else(|| {
                listing
                    .window_of(model)
                    .map(|n| ("/models max_model_len", n))
            })
            .or_else(|| show.ok().flatten().map(|n| ("Ollama /api/show num_ctx", n)));
        if found.is_some() || answered {
            server_cache::remember(base, model, listing.kind, found.map(|(_, n)| n));
        }
        match found {
            Some((source, n)) => {
                tracing::info!(url = %base, source, tokens = n, "the server reports its context window");
                Some(n)
            }
            None => {
                tracing::debug!(url = %base, kind = ?listing.kind, answered, "the server does not report its context window");
                None
            }
        }
    }

    /// `GET /models`, read for the server's kind (see [`Listing`]), and
    /// whether the server answered at all.
    async fn ask_listing(&self, url: &str) -> (Listing, bool) {
        let Ok(mut resp) = self.send(self.http.get(url)).await else {
            return (Listing::unlisted(None), false);
        };
        let header = resp
            .headers()
            .get(SERVER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let status = resp.status();
        let body = if status.is_success() {
            self.read_json(&mut resp).await
        } else {
            None
        };
        let listing = body
            .and_then(|b| Listing::read(header.as_deref(), &b))
            .unwrap_or_else(|| Listing::unlisted(header.as_deref()));
        (listing, !status.is_server_error())
    }

    async fn get_json(&self, url: &str) -> Result<Option<Value>, NoAnswer> {
        self.send_probe(self.http.get(url)).await
    }

    async fn post_json(&self, url: &str, body: Value) -> Result<Option<Value>, NoAnswer> {
        self.send_probe(self.http.post(url).json(&body)).await
    }

    /// A probe's JSON answer: `Ok(None)` when the server answered without
    /// one (404 on a server without that endpoint, …), `Err` when it gave
    /// no answer (unreachable, too slow, a 5xx).
    async fn send_probe(
        &self,
        builder: reqwest::RequestBuilder,
    ) -> Result<Option<Value>, NoAnswer> {
        let mut resp = self.send(builder).await?;
        let status = resp.status();
        if status.is_server_error() {
            return Err(NoAnswer);
        }
        if !status.is_success() {
            return Ok(None);
        }
        Ok(self.read_json(&mut resp).await)
    }

    async fn send(
        &self,
        mut builder: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, NoAnswer> {
        builder = builder.timeout(PROBE_TIMEOUT.min(self.settings.request_timeout));
        if let Some(key) = &self.settings.api_key
            && let Ok(mut value) = HeaderValue::from_str(&format!("Bearer {key}"))
        {
            value.set_sensitive(true);
            builder = builder.header(AUTHORIZATION, value);
        }
        builder.send().await.map_err(|_| NoAnswer)
    }

    async fn read_json(&self, resp: &mut reqwest::Response) -> Option<Value> {
        // A model list can be long (OpenRouter's is ~1 MB), never unbounded.
        let deadline = tokio::time::Instant::now() + PROBE_TIMEOUT;
        let bytes = read_capped(resp, self.settings.max_body_bytes(), deadline, false)
            .await
            .ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// A probe the server gave no answer to (see [`OpenAiClient::send_probe`]).
#[derive(Debug)]
struct NoAnswer;

fn positive(v: Option<&Value>) -> Option<u64> {
    v.and_then(Value::as_u64).filter(|n| *n > 0)
}

/// llama.cpp's `/props`: `default_generation_settings.n_ctx`, else a
/// top-level `n_ctx`.
pub(super) fn llama_cpp_window(props: &Value) -> Option<u64> {
    positive(props.pointer("/default_generation_settings/n_ctx"))
        .or_else(|| positive(props.get("n_ctx")))
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
