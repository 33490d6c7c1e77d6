//! The one writer of stdout. Every result a command prints goes through
//! [`Out`], so there is one place that knows what a closed pipe means.
//!
//! Invariant: a reader that stops reading (`orch log last | head -1`) is a
//! normal end, not an error. A write that fails with `EPIPE` becomes
//! [`CliError::StdoutClosed`]; [`super::dispatch`] turns it into exit 0 with
//! nothing on stderr, and commands that ran agents keep the exit code of
//! their run ([`ignore_closed`]): the work is done and recorded whether or
//! not anyone read the summary. Rust ignores `SIGPIPE`, so without this the
//! write would panic (exit 101).

use super::error::CliError;
use std::fmt;
use std::io::{self, BufWriter, Stdout, Write};

/// Buffered stdout. Call [`Out::finish`] at the end: dropping it flushes too,
/// but silently.
pub(crate) struct Out {
    w: BufWriter<Stdout>,
}

impl Out {
    /// The process's stdout.
    pub(crate) fn stdout() -> Out {
        Out {
            w: BufWriter::new(io::stdout()),
        }
    }

    /// Writes formatted text. Named like [`std::io::Write::write_fmt`] so that
    /// `write!(out, …)` and `writeln!(out, …)` work and return a [`CliError`].
    pub(crate) fn write_fmt(&mut self, args: fmt::Arguments<'_>) -> Result<(), CliError> {
        self.w.write_fmt(args).map_err(stdout_error)
    }

    /// Writes text as it is.
    pub(crate) fn text(&mut self, text: &str) -> Result<(), CliError> {
        self.w.write_all(text.as_bytes()).map_err(stdout_error)
    }

    /// Writes text that quotes what came from a model, a forge, a lesson or
    /// a file, its control characters shown as visible escapes
    /// ([`crate::text::untrusted`]): human output, never JSON or a patch.
    pub(crate) fn untrusted(&mut self, text: &str) -> Result<(), CliError> {
        self.text(&crate::text::untrusted(text))
    }

    /// Flushes what is buffered.
    pub(crate) fn finish(mut self) -> Result<(), CliError> {
        self.w.flush().map_err(stdout_error)
    }
}

/// A failed write to stdout: a closed pipe is [`CliError::StdoutClosed`],
/// anything else an internal error naming stdout.
fn stdout_error(e: io::Error) -> CliError {
    if e.kind() == io::ErrorKind::BrokenPipe {
        CliError::StdoutClosed
    } else {
        CliError::Internal(format!("failed to write to stdout: {e}"))
    }
}

/// Treats a closed stdout as success, for commands whose exit code is the
/// outcome of work already done (a run), not of printing it.
pub(crate) fn ignore_closed(printed: Result<(), CliError>) -> Result<(), CliError> {
    match printed {
        Err(CliError::StdoutClosed) => Ok(()),
        other => other,
    }
}

/// Dollars to four places, never `-0.0000` (a float sum of nothing is -0.0).
pub(super) fn usd(v: f64) -> String {
    format!("${:.4}", v + 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::plural;

    #[test]
    fn a_broken_pipe_is_a_closed_stdout_and_other_errors_name_stdout() {
        let closed = stdout_error(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(matches!(closed, CliError::StdoutClosed));
        assert_eq!(closed.exit_code(), crate::exit::OK);
        let full = stdout_error(io::Error::other("disk full"));
        assert!(
            full.to_string().contains("write to stdout: disk full"),
            "{full}"
        );
        assert!(ignore_closed(Err(CliError::StdoutClosed)).is_ok());
        assert!(ignore_closed(Err(full)).is_err());
    }

    #[test]
    fn counts_are_singular_or_plural_and_costs_never_negative_zero() {
        assert_eq!(plural(1, "error", "errors"), "1 error");
        assert_eq!(plural(0, "error", "errors"), "0 errors");
        assert_eq!(plural(2, "turn", "turns"), "2 turns");
        let nothing: f64 = std::iter::empty::<f64>().sum();
        assert_eq!(usd(nothing), "$0.0000");
        assert_eq!(usd(-0.0), "$0.0000");
        assert_eq!(usd(0.01234), "$0.0123");
    }
}
