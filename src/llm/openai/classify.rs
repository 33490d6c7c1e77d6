//! Failure classification: what a failed attempt was (a status, a transport
//! error, an error inside a stream) and whether retrying can help.

use super::http::error_chain;
use super::wire::{compact, snippet};
use super::{OpenAiClient, human_duration};
use crate::llm::LlmError;
use crate::llm::retry::is_context_length_message;
use reqwest::StatusCode;
use std::time::Duration;

/// Outcome of one failed attempt.
pub(super) enum Attempt {
    /// Retrying will not help.
    Fatal(LlmError),
    /// Worth another try.
    Transient(Transient),
}

pub(super) struct Transient {
    pub(super) reason: String,
    pub(super) retry_after: Option<Duration>,
    pub(super) kind: Kind,
}

/// What kind of transient failure, for the advice when retries run out.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    RateLimit,
    Server,
    Connect,
    Timeout,
    Stall,
    Network,
}

impl Kind {
    pub(super) fn hint(self) -> &'static str {
        match self {
            Kind::RateLimit => {
                "; the server is rate-limiting: wait and run again, or raise your quota"
            }
            Kind::Server => "; the server is failing: try again later or use another provider",
            Kind::Connect => {
                "; check --base-url (or the profile's base_url) and that the server is up"
            }
            Kind::Timeout => {
                "; the server is too slow: raise request_timeout in orch.toml, or try again later"
            }
            Kind::Stall => {
                "; the stream stalled: raise stream_idle_timeout in orch.toml for slow models, or try --no-stream"
            }
            Kind::Network => "; the connection broke: check the network, or try --no-stream",
        }
    }
}

impl OpenAiClient {
    /// An `{"error": …}` chunk inside a 200 stream.
    pub(super) fn stream_error(&self, err: &serde_json::Value) -> Attempt {
        let text = self.redact(&compact(err));
        if is_context_length_message(&err.to_string()) {
            return Attempt::Fatal(LlmError::ContextLength {
                url: self.endpoint.clone(),
                status: 200,
                body: text,
            });
        }
        // Mid-stream errors are overloads and internal errors in practice.
        Attempt::Transient(Transient {
            reason: format!("the server reported an error mid-stream: {text}"),
            retry_after: None,
            kind: Kind::Server,
        })
    }

    pub(super) fn classify_status(
        &self,
        status: StatusCode,
        retry_after: Option<Duration>,
        bytes: &[u8],
    ) -> Attempt {
        let body = self.redact(&snippet(bytes));
        let url = self.endpoint.clone();
        let code = status.as_u16();
        match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Attempt::Fatal(LlmError::Auth {
                url,
                status: code,
                body,
            }),
            StatusCode::NOT_FOUND => Attempt::Fatal(LlmError::NotFound { url, body }),
            StatusCode::TOO_MANY_REQUESTS => Attempt::Transient(Transient {
                reason: format!("HTTP 429: {body}"),
                retry_after,
                kind: Kind::RateLimit,
            }),
            StatusCode::REQUEST_TIMEOUT | StatusCode::CONFLICT => Attempt::Transient(Transient {
                reason: format!("HTTP {code}: {body}"),
                retry_after,
                kind: Kind::Server,
            }),
            s if s.is_server_error() => Attempt::Transient(Transient {
                reason: format!("HTTP {code}: {body}"),
                retry_after,
                kind: Kind::Server,
            }),
            StatusCode::BAD_REQUEST
            | StatusCode::PAYLOAD_TOO_LARGE
            | StatusCode::UNPROCESSABLE_ENTITY
                if is_context_length_message(&String::from_utf8_lossy(bytes)) =>
            {
                Attempt::Fatal(LlmError::ContextLength {
                    url,
                    status: code,
                    body,
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
    pub(super) fn transport_failure(&self, e: reqwest::Error, chunks: Option<usize>) -> Attempt {
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
        Attempt::Transient(Transient {
            reason,
            retry_after: None,
            kind,
        })
    }
}

pub(super) fn timed_out(limit: Duration, what: &str) -> Attempt {
    Attempt::Transient(Transient {
        reason: format!(
            "timed out after {} {what} (request_timeout)",
            human_duration(limit)
        ),
        retry_after: None,
        kind: Kind::Timeout,
    })
}
