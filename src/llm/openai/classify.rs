//! Failure classification: what a failed attempt was (a status, a transport
//! error, an error inside a stream) and whether retrying can help.

use super::client::OpenAiClient;
use super::http::error_chain;
use super::snippet::{compact, snippet};
use crate::llm::LlmError;
use crate::llm::retry::{
    context_window_in_message, is_context_length_message, is_deterministic_message,
};
use reqwest::StatusCode;
use std::time::Duration;

/// Where the key of an OpenAI-compatible server is read from, for the
/// message of an authentication failure.
pub(crate) const OPENAI_KEY_VARS: &str =
    "ORCH_API_KEY (or OPENAI_API_KEY, or the env var named by the profile's api_key_env)";

/// Outcome of one failed attempt.
pub(crate) enum Attempt {
    /// Retrying will not help.
    Fatal(LlmError),
    /// Worth another try.
    Transient(Transient),
    /// A streamed request failed in a way a plain one may not (an empty
    /// stream, tool calls lost in the stream): worth one try without
    /// streaming. The text says what happened.
    StreamOnly(String),
    /// HTTP 400 saying `max_tokens` is not supported and
    /// `max_completion_tokens` is wanted instead (OpenAI's reasoning models):
    /// worth one try with the other field.
    WantsMaxCompletionTokens(LlmError),
}

pub(crate) struct Transient {
    pub(crate) reason: String,
    pub(crate) retry_after: Option<Duration>,
    pub(crate) kind: Kind,
    /// The HTTP status of an error answer (before any stream chunk).
    pub(crate) status: Option<u16>,
    /// The quoted body, when it shows the request itself is invalid (a
    /// validation error): such a failure is retried at most once.
    pub(crate) invalid_request: Option<String>,
}

impl Transient {
    /// A failure with no status and no sign of being deterministic.
    pub(crate) fn new(reason: String, kind: Kind) -> Self {
        Transient {
            reason,
            retry_after: None,
            kind,
            status: None,
            invalid_request: None,
        }
    }
}

/// What kind of transient failure, for the advice when retries run out.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    RateLimit,
    Server,
    Connect,
    Timeout,
    Stall,
    /// No `data` line within the first-token wait (nothing at all, not even
    /// a keep-alive): retried once, like a stall.
    FirstToken,
    /// The idle timeout passed on a stream that sent keep-alive comments but
    /// never a `data` line: the server is alive and busy, so a retry would
    /// only queue the same work again. Not retried.
    KeepAlivesOnly,
    Network,
}

impl Kind {
    pub(crate) fn hint(self) -> &'static str {
        match self {
            Kind::RateLimit => {
                "; the server is rate-limiting: wait and run again, or raise your quota"
            }
            Kind::Server => "; the server is failing: try again later or use another provider",
            Kind::Connect => {
                "; check --base-url (or the profile's base_url) and that the server is up"
            }
            Kind::Timeout => {
                "; the server is too slow: raise request_timeout (or request_deadline) in orch.toml, or try again later"
            }
            Kind::Stall => {
                "; the stream stalled: raise stream_idle_timeout in orch.toml for slow models, or try --no-stream"
            }
            Kind::FirstToken => {
                "; the server sent no token in time, as when it is still evaluating a long prompt on a CPU: raise first_token_timeout or lower prompt_eval_rate (tokens/s) in orch.toml for slow servers, or try --no-stream"
            }
            Kind::KeepAlivesOnly => {
                "; the server is alive but sent only keep-alive comments, no data: not retried (a retry would queue the same work again); raise stream_idle_timeout in orch.toml for slow models, or try --no-stream"
            }
            Kind::Network => "; the connection broke: check the network, or try --no-stream",
        }
    }
}

impl OpenAiClient {
    /// An `{"error": …}` chunk inside a 200 stream.
    pub(crate) fn stream_error(&self, err: &serde_json::Value) -> Attempt {
        let text = self.redact(&compact(err));
        if is_context_length_message(&err.to_string()) {
            return Attempt::Fatal(LlmError::ContextLength {
                url: self.endpoint.clone(),
                status: 200,
                body: text,
                window: context_window_in_message(&err.to_string()),
            });
        }
        // Mid-stream errors are overloads and internal errors in practice.
        Attempt::Transient(Transient::new(
            format!("the server reported an error mid-stream: {text}"),
            Kind::Server,
        ))
    }

    pub(crate) fn classify_status(
        &self,
        status: StatusCode,
        retry_after: Option<Duration>,
        bytes: &[u8],
        key_vars: &'static str,
    ) -> Attempt {
        let body = self.redact(&snippet(bytes));
        let full = String::from_utf8_lossy(bytes);
        let url = self.endpoint.clone();
        let code = status.as_u16();
        let transient = |kind: Kind| {
            Attempt::Transient(Transient {
                reason: format!("HTTP {code}: {body}"),
                retry_after,
                kind,
                status: Some(code),
                // A rate limit is transient whatever its body says.
                invalid_request: (!matches!(kind, Kind::RateLimit)
                    && is_deterministic_message(&full))
                .then(|| body.clone()),
            })
        };
        match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                let body = if self.settings.api_key.is_none() {
                    format!("no API key was sent; the server said: {body}")
                } else {
                    body.clone()
                };
                Attempt::Fatal(LlmError::Auth {
                    key_vars,
                    url,
                    status: code,
                    body,
                })
            }
            StatusCode::NOT_FOUND => Attempt::Fatal(LlmError::NotFound { url, body }),
            StatusCode::TOO_MANY_REQUESTS => transient(Kind::RateLimit),
            StatusCode::REQUEST_TIMEOUT | StatusCode::CONFLICT => transient(Kind::Server),
            s if s.is_server_error() => transient(Kind::Server),
            StatusCode::BAD_REQUEST
                if full.contains("max_completion_tokens") && full.contains("max_tokens") =>
            {
                Attempt::WantsMaxCompletionTokens(LlmError::Rejected {
                    url,
                    status: code,
                    body,
                })
            }
            StatusCode::BAD_REQUEST
            | StatusCode::PAYLOAD_TOO_LARGE
            | StatusCode::UNPROCESSABLE_ENTITY
                if is_context_length_message(&full) =>
            {
                Attempt::Fatal(LlmError::ContextLength {
                    url,
                    status: code,
                    body,
                    window: context_window_in_message(&full),
                })
            }
            _ => Attempt::Fatal(LlmError::Rejected {
                url,
                status: code,
                body,
            }),
        }
    }

    /// A reqwest failure; `chunks` is set when it happened inside a stream.
    pub(crate) fn transport_failure(&self, e: reqwest::Error, chunks: Option<usize>) -> Attempt {
        let (builder, timeout, connect) = (e.is_builder(), e.is_timeout(), e.is_connect());
        let reason = self.redact(&error_chain(&e.without_url()));
        if builder {
            return Attempt::Fatal(LlmError::Config(format!(
                "the request to {} could not be built: {reason}",
                self.endpoint
            )));
        }
        let (reason, kind) = if let Some(chunks) = chunks {
            (
                format!("the stream was cut after {chunks} chunks ({reason})"),
                Kind::Network,
            )
        } else if timeout {
            (format!("timed out ({reason})"), Kind::Timeout)
        } else if connect {
            (format!("could not connect ({reason})"), Kind::Connect)
        } else {
            (reason, Kind::Network)
        };
        Attempt::Transient(Transient::new(reason, kind))
    }
}

/// A timeout of `setting` (`request_timeout`, `request_deadline`) after
/// `limit` while doing `what`.
pub(crate) fn timed_out(limit: Duration, what: &str, setting: &str) -> Attempt {
    Attempt::Transient(Transient::new(
        format!(
            "timed out after {} {what} ({setting})",
            human_duration(limit)
        ),
        Kind::Timeout,
    ))
}

pub(crate) use crate::llm::settings::human_duration;
