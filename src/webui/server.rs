//! The HTTP side: the listener, the checks every request passes (peer,
//! `Host`, token), the routes, and the headers every answer carries.

use super::{UiError, actions, data, pages, sse};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// The body of every answer.
pub(super) type Body = BoxBody<Bytes, Infallible>;

/// The most bytes a POST body may have.
const MAX_POST_BYTES: usize = 64 * 1024;
/// The cookie that carries the token after the first visit.
const COOKIE: &str = "orch_ui";
/// How many runs the runs page lists.
const RUNS_LISTED: usize = 200;

/// Static assets, compiled in.
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// What every request handler shares.
#[derive(Debug)]
pub(crate) struct Ui {
    /// The repository (top of its working tree), as `--repo` named it.
    pub repo: PathBuf,
    /// Its common git directory (where `orch/runs/` is).
    pub common: PathBuf,
    /// The 32-hex-digit token.
    pub token: String,
    /// The port the server listens on (checked in `Host`).
    pub port: u16,
}

/// Binds `127.0.0.1:port` (0: any free port); returns the listener and the
/// port it got.
pub(crate) async fn bind(port: u16) -> Result<(tokio::net::TcpListener, u16), UiError> {
    let addr = format!("127.0.0.1:{port}");
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| UiError::Bind {
            addr: addr.clone(),
            source,
        })?;
    let port = listener
        .local_addr()
        .map_err(|source| UiError::Bind { addr, source })?
        .port();
    Ok((listener, port))
}

/// Serves connections on `listener` until the process ends.
pub(crate) async fn serve(listener: tokio::net::TcpListener, ui: Arc<Ui>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("ui: failed to accept a connection: {e}");
                continue;
            }
        };
        let ui = ui.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let ui = ui.clone();
                async move { Ok::<_, Infallible>(handle(&ui, peer, req).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!("ui: connection from {peer} ended: {e}");
            }
        });
    }
}

/// One request: the checks, then the route.
async fn handle(ui: &Ui, peer: SocketAddr, req: Request<Incoming>) -> Response<Body> {
    if let Err(why) = admit(ui, peer, &req) {
        return with_headers(text(StatusCode::FORBIDDEN, why));
    }
    let set_cookie = query_token(&req).is_some_and(|t| same(&t, &ui.token));
    let mut resp = match route(ui, req).await {
        Ok(r) => r,
        Err(e) => text(
            StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            &e.to_string(),
        ),
    };
    if set_cookie
        && let Ok(v) = HeaderValue::from_str(&format!(
            "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
            ui.token
        ))
    {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    with_headers(resp)
}

/// The checks every request passes: a loopback peer, a `Host` of this
/// server, the token (URL or cookie; a POST also in `X-Orch-Token`, so no
/// other page can make the browser post), and for a POST a same-origin
/// `Origin` when there is one.
fn admit(ui: &Ui, peer: SocketAddr, req: &Request<Incoming>) -> Result<(), &'static str> {
    if !peer.ip().is_loopback() {
        return Err("refused: not a loopback peer");
    }
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !allowed_host(host, ui.port) {
        return Err("refused: the Host header is not 127.0.0.1 or localhost");
    }
    if req.method() == Method::POST {
        let header_token = req
            .headers()
            .get("x-orch-token")
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if !same(header_token, &ui.token) {
            return Err("refused: a POST needs the X-Orch-Token header");
        }
        if let Some(origin) = req.headers().get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            let host = origin.strip_prefix("http://").unwrap_or("-");
            if !allowed_host(host, ui.port) {
                return Err("refused: a POST from another origin");
            }
        }
        return Ok(());
    }
    let by_query = query_token(req).is_some_and(|t| same(&t, &ui.token));
    let by_cookie = cookie_token(req).is_some_and(|t| same(&t, &ui.token));
    if by_query || by_cookie {
        Ok(())
    } else {
        Err("refused: this page needs the token in the URL `orch ui` printed")
    }
}

/// `127.0.0.1:<port>` or `localhost:<port>` (the port may be left out).
pub(super) fn allowed_host(host: &str, port: u16) -> bool {
    let (name, p) = match host.rsplit_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (host, None),
    };
    let port_ok = p.is_none_or(|p| p == port.to_string());
    port_ok && (name == "127.0.0.1" || name.eq_ignore_ascii_case("localhost"))
}

/// Compares two tokens in time independent of where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn query_token(req: &Request<Incoming>) -> Option<String> {
    req.uri()
        .query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("token=").map(str::to_owned))
}

fn cookie_token(req: &Request<Incoming>) -> Option<String> {
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| {
            kv.trim()
                .strip_prefix(&format!("{COOKIE}="))
                .map(str::to_owned)
        })
}

/// The routes. Path segments are percent-decoded, then matched whole; ids
/// are checked in [`data::open_run`] and [`data::RunView::stage`].
async fn route(ui: &Ui, req: Request<Incoming>) -> Result<Response<Body>, UiError> {
    let path = req.uri().path().to_owned();
    // Each segment decoded on its own (a replica `code#1` comes as
    // `code%231`), so a decoded `/` never splits one; a malformed escape
    // names nothing.
    let decoded: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(super::escape::decode_segment)
        .collect::<Option<_>>()
        .ok_or_else(|| UiError::NotFound(format!("nothing at {path}")))?;
    let segs: Vec<&str> = decoded.iter().map(String::as_str).collect();
    let method = req.method().clone();
    match (method, segs.as_slice()) {
        (Method::GET, [""]) => {
            let runs = data::list_runs(&ui.common, RUNS_LISTED);
            Ok(html(pages::runs_page(ui, &runs)))
        }
        (Method::GET, ["assets", "app.js"]) => Ok(asset("text/javascript; charset=utf-8", APP_JS)),
        (Method::GET, ["assets", "style.css"]) => Ok(asset("text/css; charset=utf-8", STYLE_CSS)),
        (Method::GET, ["run", run]) => {
            let view = data::open_run(&ui.common, run)?;
            let asks = super::control::pending_asks(&view.dir.root);
            Ok(html(pages::run_page(ui, &view, &asks)))
        }
        (Method::GET, ["run", run, "events"]) => {
            let view = data::open_run(&ui.common, run)?;
            Ok(sse::stream(ui.common.clone(), view))
        }
        (Method::GET, ["run", run, "stage", stage]) => {
            let view = data::open_run(&ui.common, run)?;
            let st = view.stage(stage)?;
            Ok(html(pages::stage_page(ui, &view, st)))
        }
        (Method::POST, ["run", run, action @ ..]) => {
            let view = data::open_run(&ui.common, run)?;
            let body = read_json(req).await?;
            let answer = actions::post(ui, &view, action, &body).await?;
            Ok(json(StatusCode::OK, &answer))
        }
        _ => Err(UiError::NotFound(format!("nothing at {path}"))),
    }
}

/// A POST body as JSON (empty: `{}`), at most [`MAX_POST_BYTES`].
async fn read_json(req: Request<Incoming>) -> Result<serde_json::Value, UiError> {
    let bytes = Limited::new(req.into_body(), MAX_POST_BYTES)
        .collect()
        .await
        .map_err(|e| UiError::BadRequest(format!("failed to read the request body: {e}")))?
        .to_bytes();
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::json!({}));
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| UiError::BadRequest(format!("failed to read the request body as JSON: {e}")))
}

/// A full body.
pub(super) fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed()
}

fn respond(status: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn html(page: String) -> Response<Body> {
    respond(StatusCode::OK, "text/html; charset=utf-8", full(page))
}

fn asset(content_type: &'static str, text: &'static str) -> Response<Body> {
    respond(StatusCode::OK, content_type, full(text))
}

fn text(status: StatusCode, msg: &str) -> Response<Body> {
    respond(
        status,
        "text/plain; charset=utf-8",
        full(format!("{msg}\n")),
    )
}

fn json(status: StatusCode, v: &serde_json::Value) -> Response<Body> {
    respond(status, "application/json", full(v.to_string()))
}

/// The headers of every answer: no caching, no sniffing, no referrer (the
/// URL holds the token), no framing, and only the UI's own script and
/// style may run: an inline `<script>` that escaped escaping would not.
fn with_headers(mut r: Response<Body>) -> Response<Body> {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    r
}

#[cfg(test)]
mod tests {
    use super::{allowed_host, same};

    #[test]
    fn only_loopback_names_with_this_port_are_allowed_hosts() {
        assert!(allowed_host("127.0.0.1:8080", 8080));
        assert!(allowed_host("localhost:8080", 8080));
        assert!(allowed_host("localhost", 8080));
        assert!(!allowed_host("127.0.0.1:8081", 8080));
        assert!(!allowed_host("evil.example:8080", 8080));
        assert!(!allowed_host("127.0.0.1.evil.example:8080", 8080));
        assert!(!allowed_host("", 8080));
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same("ab", "ab"));
        assert!(!same("ab", "ac"));
        assert!(!same("ab", "abc"));
    }
}
