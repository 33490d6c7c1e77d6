//! Capturing a child's output: stdout and stderr share one pipe (so the
//! text is interleaved in the order the child wrote it), read into a bounded
//! [`HeadTail`] buffer while waiting for the child, then drained for a
//! bounded time (a process that escaped the reaper with the pipe cannot hold
//! the caller).

use std::os::fd::OwnedFd;
use std::process::ExitStatus;
use std::time::Instant;

use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;

use super::group::ProcessGroup;
use crate::text::HeadTail;

/// The read end of a child's output pipe and what was read from it.
pub(crate) struct PipeCapture {
    reader: pipe::Receiver,
    buf: HeadTail,
    eof: bool,
}

impl PipeCapture {
    /// Reads `read_end`, keeping about `max_bytes` (head + tail).
    pub(crate) fn new(read_end: OwnedFd, max_bytes: usize) -> std::io::Result<Self> {
        Ok(PipeCapture {
            reader: pipe::Receiver::from_owned_fd(read_end)?,
            buf: HeadTail::new(max_bytes),
            eof: false,
        })
    }

    /// Reads output while waiting for the group's leader; `None` when
    /// `until` passed first.
    pub(crate) async fn wait_reading(
        &mut self,
        group: &mut ProcessGroup,
        until: Instant,
    ) -> std::io::Result<Option<ExitStatus>> {
        let mut chunk = [0u8; 8192];
        let sleep = tokio::time::sleep_until(until.into());
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                status = group.wait() => return status.map(Some),
                n = self.reader.read(&mut chunk), if !self.eof => match n {
                    Ok(0) | Err(_) => self.eof = true,
                    Ok(n) => self.buf.push(&chunk[..n]),
                },
                _ = &mut sleep => return Ok(None),
            }
        }
    }

    /// After the child exited: reads until end of file or `until`.
    pub(crate) async fn drain(&mut self, until: Instant) {
        let mut chunk = [0u8; 8192];
        while !self.eof {
            tokio::select! {
                n = self.reader.read(&mut chunk) => match n {
                    Ok(0) | Err(_) => self.eof = true,
                    Ok(n) => self.buf.push(&chunk[..n]),
                },
                _ = tokio::time::sleep_until(until.into()) => break,
            }
        }
    }

    /// The captured text and the number of omitted lines.
    pub(crate) fn finish(self) -> (String, usize) {
        self.buf.finish()
    }
}
