//! A streamable-HTTP MCP server (`url`, `headers`): no process to start,
//! orch connects with rmcp's streamable-HTTP client on orch's own reqwest
//! build (rustls with the ring provider, no second TLS stack).
//!
//! Invariants:
//! - `${VAR}` in `url` and `headers` is expanded from orch's environment
//!   at connection time and every expanded value is registered as a secret,
//!   as is the whole value of a credential-like header (`Authorization`,
//!   `Cookie`, names with `key`, `token`, `secret`, `auth`): a token is
//!   redacted from tool results, the action log, transcripts and commits;
//! - headers live only in the connection: no tool process gets them (tool
//!   processes get the scrubbed environment, which never holds them);
//! - redirects are not followed (a redirect would replay the headers to
//!   another place): a 3xx is an error naming the status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::McpError;
use super::config::{Defined, expand};
use super::session::{START_TIMEOUT, Server, start_error};

/// How long connecting to an HTTP server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Headers the transport sets itself; a definition may not override them.
const RESERVED: &[&str] = &[
    "accept",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// Connects to HTTP server `name` and does its `initialize` handshake.
pub(super) async fn connect(name: &str, defined: &Defined) -> Result<Arc<Server>, McpError> {
    let spec = &defined.spec;
    let origin = &defined.origin;
    if spec.kind.as_deref() == Some("sse") {
        return Err(start_error(
            name,
            &format!(
                "it is a legacy HTTP+SSE server (`type: sse`, {origin}); orch speaks the \
                 streamable-HTTP transport only: use the server's streamable-HTTP endpoint \
                 with `type: http`"
            ),
        ));
    }
    let Some(url) = spec.url.as_deref() else {
        return Err(start_error(
            name,
            &format!("it has neither `command` nor `url` ({origin})"),
        ));
    };
    let (url, mut secrets) = expand(url, &format!("{origin}: mcpServers.{name}.url"))?;
    let parsed = reqwest::Url::parse(&url).map_err(|e| {
        McpError::Config(format!("{origin}: mcpServers.{name}.url: not a URL ({e})"))
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(McpError::Config(format!(
            "{origin}: mcpServers.{name}.url: scheme `{}` is not http or https",
            parsed.scheme()
        )));
    }
    let mut headers = HashMap::new();
    for (key, value) in &spec.headers {
        let what = format!("{origin}: mcpServers.{name}.headers.{key}");
        let (value, found) = expand(value, &what)?;
        secrets.extend(found);
        if credential_like(key) {
            secrets.push(value.clone());
            // `Bearer <token>`: the token alone is also a secret (a server
            // may echo it without its scheme).
            if let Some((_, token)) = value.split_once(' ') {
                secrets.push(token.trim().to_owned());
            }
        }
        if RESERVED.contains(&key.to_ascii_lowercase().as_str()) {
            return Err(McpError::Config(format!(
                "{what}: orch's MCP transport sets this header itself; remove it"
            )));
        }
        let header = HeaderName::from_bytes(key.as_bytes())
            .map_err(|e| McpError::Config(format!("{what}: not a header name ({e})")))?;
        let mut value = HeaderValue::from_str(&value)
            .map_err(|e| McpError::Config(format!("{what}: not a header value ({e})")))?;
        value.set_sensitive(true);
        headers.insert(header, value);
    }
    crate::secrets::add_secrets(secrets);

    let client = http_client(&url).map_err(|e| start_error(name, &e))?;
    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
        .custom_headers(headers)
        .max_concurrent_requests(1);
    let transport = StreamableHttpClientTransport::with_client(client, config);
    let shown = crate::secrets::redact(&url, crate::secrets::known_secrets());
    let client = match tokio::time::timeout(START_TIMEOUT, ().serve(transport)).await {
        Err(_) => {
            return Err(start_error(
                name,
                &format!(
                    "{shown} did not answer `initialize` within {}s",
                    START_TIMEOUT.as_secs()
                ),
            ));
        }
        Ok(Err(e)) => {
            return Err(start_error(
                name,
                &crate::secrets::redact(
                    &format!("initialize at {shown} failed: {}", super::session::tidy(&e)),
                    crate::secrets::known_secrets(),
                ),
            ));
        }
        Ok(Ok(c)) => c,
    };
    tracing::info!(server = name, url = %shown, "MCP HTTP server connected");
    Ok(Arc::new(Server {
        name: name.to_owned(),
        client: tokio::sync::Mutex::new(Some(client)),
        group: Mutex::new(None),
        dead: Mutex::new(None),
    }))
}

/// Whether a header's value is a credential (registered as a secret whole).
fn credential_like(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower == "cookie"
        || ["auth", "key", "token", "secret", "password"]
            .iter()
            .any(|w| lower.contains(w))
}

/// orch's reqwest client for one MCP endpoint: the ring TLS provider (the
/// build has `rustls-no-provider`), a connect timeout, no redirects, no
/// idle pool (rmcp's own choice: a reused half-read connection stalls), no
/// whole-request timeout (a call is bounded by the session's call timeout,
/// and the server's event stream lives for the stage).
fn http_client(url: &str) -> Result<reqwest::Client, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(0)
        .user_agent(concat!("orch/", env!("CARGO_PKG_VERSION")));
    if url.starts_with("http://") {
        // Plain HTTP needs no trust roots (loading them is the costly part).
        builder = builder.tls_certs_only(std::iter::empty::<reqwest::Certificate>());
    }
    builder
        .build()
        .map_err(|e| format!("the HTTP client could not be built: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_headers_are_recognised() {
        assert!(credential_like("Authorization"));
        assert!(credential_like("X-Api-Key"));
        assert!(credential_like("cookie"));
        assert!(!credential_like("X-Client"));
    }
}
