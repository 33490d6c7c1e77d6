//! The run page's live updates: a server-sent event stream of the run's
//! stage snapshot ([`data::snapshot`]), built by polling the run's files
//! only while the page is open (the stream ends when the browser goes, and
//! when the run has ended and its last snapshot was sent).

use super::data::{self, RunView};
use super::server::Body;
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::Response;
use hyper::body::Frame;
use hyper::header::{self, HeaderValue};
use std::convert::Infallible;
use std::path::PathBuf;
use std::time::Duration;

/// How often an open page's run files are read.
pub(crate) const POLL: Duration = Duration::from_millis(250);
/// A comment line this often keeps proxies and the browser from timing out.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// The event stream of the run `view` shows.
pub(super) fn stream(common: PathBuf, view: RunView) -> Response<Body> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(8);
    let run_id = view.state.run_id.to_string();
    tokio::spawn(async move {
        let mut last = String::new();
        let mut since_sent = Duration::ZERO;
        let mut view = Some(view);
        loop {
            let current = match view.take() {
                Some(v) => Some(v),
                None => {
                    let (common, id) = (common.clone(), run_id.clone());
                    tokio::task::spawn_blocking(move || data::open_run(&common, &id).ok())
                        .await
                        .ok()
                        .flatten()
                }
            };
            let Some(current) = current else { break };
            let snap = data::snapshot(&current).to_string();
            if snap != last {
                if tx
                    .send(Bytes::from(format!("data: {snap}\n\n")))
                    .await
                    .is_err()
                {
                    break;
                }
                last = snap;
                since_sent = Duration::ZERO;
            } else if since_sent >= KEEPALIVE {
                if tx
                    .send(Bytes::from_static(b": keepalive\n\n"))
                    .await
                    .is_err()
                {
                    break;
                }
                since_sent = Duration::ZERO;
            }
            if !current.is_live() {
                // The browser reconnects on its own after a close; tell it
                // the run is over so the page stops listening.
                let _ = tx
                    .send(Bytes::from_static(b"event: end\ndata: {}\n\n"))
                    .await;
                break;
            }
            tokio::time::sleep(POLL).await;
            since_sent += POLL;
            if tx.is_closed() {
                break;
            }
        }
    });
    let body = StreamBody::new(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    }));
    let mut r = Response::new(body.boxed());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r
}
