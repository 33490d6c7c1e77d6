//! The pipe a child's output (and the reaper's control channel) goes
//! through; a leaf of `exec`.

use std::os::fd::OwnedFd;

/// A pipe whose both ends are close-on-exec (the child gets its copies via
/// stdio redirection only).
pub(crate) fn cloexec_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    // `std::io::pipe` is `pipe2(O_CLOEXEC)` on Linux.
    let (read, write) = std::io::pipe()?;
    Ok((read.into(), write.into()))
}
