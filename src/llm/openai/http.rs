//! Building `reqwest` clients: the one place that installs the TLS provider
//! the build relies on (reqwest is built with `rustls-no-provider`).

use crate::llm::LlmError;
use crate::llm::settings::DEFAULT_CONNECT_TIMEOUT;
use std::time::Duration;

/// Builds an HTTP client with `timeout` per request and a connect timeout of
/// at most [`DEFAULT_CONNECT_TIMEOUT`].
///
/// Use this (or [`http_client_with`]) for every `reqwest::Client`: it installs
/// the TLS provider the build relies on.
pub fn http_client(timeout: Duration) -> Result<reqwest::Client, LlmError> {
    http_client_with(timeout, DEFAULT_CONNECT_TIMEOUT.min(timeout))
}

/// [`http_client`] for one endpoint: a plain `http://` one gets no TLS trust
/// roots, which are the largest cost of building a client (see [`build_client`]).
pub fn http_client_for(url: &str, timeout: Duration) -> Result<reqwest::Client, LlmError> {
    let plain_http = url.starts_with("http://");
    build_client(
        Some(timeout),
        DEFAULT_CONNECT_TIMEOUT.min(timeout),
        plain_http,
    )
}

/// Builds an HTTP client with explicit request and connect timeouts.
pub fn http_client_with(
    request_timeout: Duration,
    connect_timeout: Duration,
) -> Result<reqwest::Client, LlmError> {
    build_client(Some(request_timeout), connect_timeout, false)
}

/// A client with an optional whole-request timeout (streams have none: they
/// are bounded by the idle timeout between reads instead).
///
/// `plain_http`: the client only talks to an `http://` endpoint, so it gets
/// no TLS trust roots. Loading the system's roots (rustls-platform-verifier
/// reads and parses every certificate under /etc/ssl/certs) is the largest
/// single cost of orch's start (several ms); a local model server over plain
/// HTTP never needs it. Such a client cannot follow a redirect to https.
pub(super) fn build_client(
    request_timeout: Option<Duration>,
    connect_timeout: Duration,
    plain_http: bool,
) -> Result<reqwest::Client, LlmError> {
    // reqwest is built with `rustls-no-provider`: without a process-wide
    // provider the first client panics, even for plain http://. Installing is
    // idempotent; an `Err` only means one is already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .user_agent(concat!("orch/", env!("CARGO_PKG_VERSION")));
    if let Some(timeout) = request_timeout {
        builder = builder.timeout(timeout);
    }
    if plain_http {
        builder = builder.tls_certs_only(std::iter::empty::<reqwest::Certificate>());
    }
    builder.build().map_err(|e| {
        LlmError::Config(format!(
            "the HTTP client could not be built: {}",
            error_chain(&e)
        ))
    })
}

/// An error with its sources, which is where reqwest and hyper put the cause.
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

/// Why [`read_capped`] stopped short of the body's end.
pub(super) enum BodyError {
    /// More than the cap arrived; `read` bytes were seen when it stopped.
    TooLarge { read: usize },
    /// The connection failed.
    Transport(reqwest::Error),
    /// `deadline` passed.
    TimedOut,
}

/// Reads a body chunk by chunk until its end, `deadline` or `cap` bytes,
/// never holding more than `cap` (a hostile server's 100 MB answer is
/// refused after the cap, not buffered). With `truncate` the first `cap`
/// bytes are the answer (error bodies, quoted only in part); without, more
/// than `cap` is [`BodyError::TooLarge`].
pub(super) async fn read_capped(
    resp: &mut reqwest::Response,
    cap: usize,
    deadline: tokio::time::Instant,
    truncate: bool,
) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    loop {
        let chunk = match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(chunk))) => chunk,
            Ok(Ok(None)) => return Ok(body),
            Ok(Err(e)) => return Err(BodyError::Transport(e)),
            Err(_) => return Err(BodyError::TimedOut),
        };
        let room = cap - body.len();
        if chunk.len() > room {
            if truncate {
                body.extend_from_slice(&chunk[..room]);
                return Ok(body);
            }
            return Err(BodyError::TooLarge {
                read: body.len() + chunk.len(),
            });
        }
        body.extend_from_slice(&chunk);
    }
}
