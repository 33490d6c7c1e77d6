//! One forge's REST API: JSON requests with the token in a header and
//! errors that name the request (never the token).

use super::settings::ForgeSettings;
use super::types::{Forge, ForgeError};
use serde_json::Value;
use std::time::Duration;

/// Bound on one API request (the forge answers small JSON documents).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of an error answer goes into the message.
const ERROR_BODY_CHARS: usize = 300;
/// Items asked for per page of a list.
pub(super) const PER_PAGE: usize = 100;
/// Pages read of one list at most (10,000 comments is far more than an
/// issue a model could read anyway).
pub(super) const MAX_PAGES: usize = 100;

/// A client of one forge's API.
pub(crate) struct ForgeApi {
    forge: Forge,
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl ForgeApi {
    /// A client for `forge` at the configured API base, with its token.
    pub(crate) fn new(forge: Forge, settings: &ForgeSettings) -> Result<ForgeApi, ForgeError> {
        let base = settings.api_url(forge);
        let http = crate::llm::openai::http_client_for(&base, REQUEST_TIMEOUT)
            .map_err(|e| ForgeError::Api(format!("failed to {e}")))?;
        Ok(ForgeApi {
            forge,
            base,
            token: super::token::token(forge),
            http,
        })
    }

    /// The API base (shown in errors and recorded with a frozen issue).
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// `GET base + path`.
    pub(crate) async fn get(&self, path: &str) -> Result<Value, ForgeError> {
        self.send(reqwest::Method::GET, path, None).await
    }

    /// `GET base + path` answered with plain text (a job's log), of which
    /// only the last `keep` bytes are kept.
    pub(crate) async fn get_text_tail(
        &self,
        path: &str,
        keep: usize,
    ) -> Result<String, ForgeError> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.get(&url);
        if let Some(token) = &self.token {
            req = match self.forge {
                Forge::GitHub => req.bearer_auth(token),
                Forge::GitLab => req.header("PRIVATE-TOKEN", token),
            };
        }
        let what = format!("GET {url}");
        let resp = req.send().await.map_err(|e| {
            ForgeError::Api(self.redact(&format!("failed to {what}: {}", chain(&e))))
        })?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| {
            ForgeError::Api(self.redact(&format!(
                "failed to read the answer to {what}: {}",
                chain(&e)
            )))
        })?;
        if !status.is_success() {
            return Err(ForgeError::Api(
                self.redact(&format!("failed to {what}: HTTP {}", status.as_u16())),
            ));
        }
        Ok(crate::text::tail_bytes(&text, keep).to_owned())
    }

    /// Every item of a paginated list at `path` (which has no `?page`).
    pub(crate) async fn get_all(&self, path: &str) -> Result<Vec<Value>, ForgeError> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let mut all = Vec::new();
        for page in 1..=MAX_PAGES {
            let items = self
                .get(&format!("{path}{sep}per_page={PER_PAGE}&page={page}"))
                .await?;
            let Value::Array(items) = items else {
                return Err(self.unexpected(path, "a JSON array"));
            };
            let n = items.len();
            all.extend(items);
            if n < PER_PAGE {
                break;
            }
        }
        Ok(all)
    }

    /// A request with a JSON body (`POST`, `PATCH`, `PUT`).
    pub(crate) async fn send_json(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &Value,
    ) -> Result<Value, ForgeError> {
        self.send(method, path, Some(body)).await
    }

    /// A GitHub GraphQL query (`POST /graphql`; on GitHub Enterprise the
    /// endpoint beside `/api/v3`).
    pub(crate) async fn graphql(&self, body: &Value) -> Result<Value, ForgeError> {
        let url = match self.base.strip_suffix("/api/v3") {
            Some(host) => format!("{host}/api/graphql"),
            None => format!("{}/graphql", self.base),
        };
        self.send_to(reqwest::Method::POST, url, Some(body)).await
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ForgeError> {
        self.send_to(method, format!("{}{path}", self.base), body)
            .await
    }

    async fn send_to(
        &self,
        method: reqwest::Method,
        url: String,
        body: Option<&Value>,
    ) -> Result<Value, ForgeError> {
        let what = format!("{method} {url}");
        let mut req = self.http.request(method, &url);
        req = match self.forge {
            Forge::GitHub => req
                .header("Accept", "application/vnd.github+json")
                .header("X-GitHub-Api-Version", "2022-11-28"),
            Forge::GitLab => req.header("Accept", "application/json"),
        };
        if let Some(token) = &self.token {
            req = match self.forge {
                Forge::GitHub => req.bearer_auth(token),
                Forge::GitLab => req.header("PRIVATE-TOKEN", token),
            };
        }
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req.send().await.map_err(|e| {
            ForgeError::Api(self.redact(&format!(
                "failed to reach the {} API ({what}): {}",
                self.forge.as_str(),
                chain(&e)
            )))
        })?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| {
            ForgeError::Api(self.redact(&format!(
                "failed to read the answer to {what}: {}",
                chain(&e)
            )))
        })?;
        if !status.is_success() {
            let hint = match status.as_u16() {
                401 | 403 if self.token.is_none() => {
                    format!(" (no token: set {})", self.forge.token_vars().join(" or "))
                }
                401 => " (the token was refused)".to_owned(),
                _ => String::new(),
            };
            let snippet: String = text.chars().take(ERROR_BODY_CHARS).collect();
            return Err(ForgeError::Api(self.redact(&format!(
                "failed to {what}: HTTP {}{hint}: {}",
                status.as_u16(),
                snippet.trim()
            ))));
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| {
            ForgeError::Api(self.redact(&format!("failed to read the answer to {what}: {e}")))
        })
    }

    /// An answer of the wrong shape.
    pub(crate) fn unexpected(&self, path: &str, expected: &str) -> ForgeError {
        ForgeError::Api(format!(
            "failed to read the answer to {}{path}: expected {expected}",
            self.base
        ))
    }

    /// `text` with the token and every registered secret removed.
    pub(crate) fn redact(&self, text: &str) -> String {
        crate::secrets::redact(text, self.token.as_slice())
    }
}

/// An error with its sources (reqwest and hyper put the cause there).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
