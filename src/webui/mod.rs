//! `orch ui`: a local web page for a repository's runs (docs/ui.md).
//!
//! One small HTTP/1.1 server (hyper's own server connection on the tokio
//! runtime orch already has) bound to 127.0.0.1 only. Every request must
//! carry the random token printed with the URL (a cookie set on the first
//! visit carries it afterwards); a request from a non-loopback peer or with
//! a `Host` that is not `127.0.0.1`/`localhost` is refused (DNS rebinding);
//! no CORS header is ever sent; a strict Content-Security-Policy lets only
//! the UI's own compiled-in script run.
//!
//! What is served: the run records under `.git/orch/runs/` (states, plans,
//! action logs, diffs), read with the same code as `orch show`; run and
//! stage ids from a URL are checked against the recorded runs and the run's
//! own stages before they name a file ([`data`]). The buttons call the
//! functions behind `orch rollback`, `orch resume` (a detached child
//! process) and the control channel of asks and guidance ([`control`]).
//!
//! The UI costs a run nothing: the run process does no extra work; the
//! server reads the run's files, and polls them only while a run page is
//! open (its event stream).

mod actions;
mod control;
mod data;
mod escape;
mod pages;
mod server;
mod sse;

pub(crate) use server::{Ui, bind, serve};

/// Why a request or the server failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UiError {
    /// The listening socket could not be opened.
    #[error("failed to listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// What the request names does not exist (404).
    #[error("{0}")]
    NotFound(String),
    /// The request is malformed (400).
    #[error("{0}")]
    BadRequest(String),
    /// The action was refused (409): a live run, an answered ask, …
    #[error("{0}")]
    Refused(String),
    /// Anything else (500).
    #[error("{0}")]
    Internal(String),
}

impl UiError {
    /// The HTTP status of the error.
    fn status(&self) -> u16 {
        match self {
            UiError::NotFound(_) => 404,
            UiError::BadRequest(_) => 400,
            UiError::Refused(_) => 409,
            UiError::Bind { .. } | UiError::Internal(_) => 500,
        }
    }
}

/// 16 random bytes from the kernel as 32 hex digits: the URL's token.
pub(crate) fn new_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
