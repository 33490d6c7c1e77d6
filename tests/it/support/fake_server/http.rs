//! HTTP/1.1 as the fake server speaks it: one request per connection, read
//! whole (`Content-Length` or chunked), answered with `Connection: close`,
//! SSE answers as one flushed HTTP chunk per event.

use super::server::Shared;
use std::io::{BufRead, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Largest request body accepted (a runaway client should fail, not eat memory).
const MAX_BODY_BYTES: usize = 64 << 20;
/// Longest a [`super::Reply::StallAfter`] holds a connection whose client stays.
pub const STALL_LIMIT: Duration = Duration::from_secs(20);

pub(super) struct Request {
    pub(super) path: String,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
}

pub(super) enum Answer {
    Send {
        status: u16,
        content_type: &'static str,
        extra: Vec<(String, String)>,
        body: String,
    },
    Close,
    Sse {
        chunks: Vec<Vec<u8>>,
        end: SseEnd,
    },
    Hostile(super::hostile::Hostile),
}

/// How an SSE answer ends.
#[derive(Clone, Copy)]
pub(super) enum SseEnd {
    /// The terminating chunk, then close.
    Finish,
    /// After this many chunks, silence until the client leaves.
    Stall(usize),
    /// After this many chunks, close without the terminating chunk.
    Cut(usize),
    /// Nothing for this long after the headers, then every chunk and the end.
    After(Duration),
}

pub(super) fn read_request(reader: &mut impl BufRead) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(_method), Some(path)) = (parts.next(), parts.next()) else {
        return Err(invalid(format!("bad request line {line:?}")));
    };
    let path = path.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 {
            return Err(invalid("connection closed inside the headers".into()));
        }
        let header = header.trim_end_matches(['\r', '\n']);
        if header.is_empty() {
            break;
        }
        let (name, value) = header
            .split_once(':')
            .ok_or_else(|| invalid(format!("bad header line {header:?}")))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let body = if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        read_chunked(reader)?
    } else {
        let len: usize = find("content-length")
            .map(|v| {
                v.parse()
                    .map_err(|_| invalid(format!("bad content-length {v:?}")))
            })
            .transpose()?
            .unwrap_or(0);
        if len > MAX_BODY_BYTES {
            return Err(invalid(format!("body of {len} bytes is too large")));
        }
        let mut body = vec![0; len];
        reader.read_exact(&mut body)?;
        body
    };
    Ok(Some(Request {
        path,
        headers,
        body,
    }))
}

pub(super) fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        reader.read_line(&mut size_line)?;
        let size_text = size_line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| invalid(format!("bad chunk size {size_line:?}")))?;
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                let mut trailer = String::new();
                if reader.read_line(&mut trailer)? == 0 || trailer.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        if body.len() + size > MAX_BODY_BYTES {
            return Err(invalid("chunked body is too large".into()));
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = String::new();
        reader.read_line(&mut crlf)?;
    }
}

pub(super) fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

pub(super) fn plain(status: u16, body: String) -> Answer {
    Answer::Send {
        status,
        content_type: "text/plain; charset=utf-8",
        extra: Vec::new(),
        body,
    }
}

pub(super) fn write_answer(mut stream: TcpStream, answer: Answer, shared: &Shared) {
    match answer {
        Answer::Close => {
            let _ = stream.shutdown(Shutdown::Both);
        }
        Answer::Sse { chunks, end } => write_sse(stream, chunks, end, shared),
        Answer::Hostile(hostile) => super::hostile::write_hostile(stream, hostile, shared),
        Answer::Send {
            status,
            content_type,
            extra,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
                reason(status),
                body.len()
            );
            for (name, value) in extra {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
            let _ = stream.flush();
            let _ = stream.shutdown(Shutdown::Write);
        }
    }
}

/// Writes the head of an SSE answer, then its chunks.
pub(super) fn write_sse(mut stream: TcpStream, chunks: Vec<Vec<u8>>, end: SseEnd, shared: &Shared) {
    // Small writes must leave at once, not wait to be coalesced.
    let _ = stream.set_nodelay(true);
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    if stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.flush())
        .is_err()
    {
        return;
    }
    write_sse_body(stream, chunks, end, shared);
}

/// Writes SSE chunks as HTTP chunks, one write and flush each, then ends as `end` says.
pub(super) fn write_sse_body(
    mut stream: TcpStream,
    chunks: Vec<Vec<u8>>,
    end: SseEnd,
    shared: &Shared,
) {
    if let SseEnd::After(delay) = end {
        // Silent, as a server is while it evaluates the prompt; a client
        // that left makes the first write below fail.
        std::thread::sleep(delay);
    }
    let limit = match end {
        SseEnd::Finish | SseEnd::After(_) => chunks.len(),
        SseEnd::Stall(n) | SseEnd::Cut(n) => n.min(chunks.len()),
    };
    for chunk in &chunks[..limit] {
        let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
        framed.extend_from_slice(chunk);
        framed.extend_from_slice(b"\r\n");
        if stream
            .write_all(&framed)
            .and_then(|()| stream.flush())
            .is_err()
        {
            return;
        }
    }
    match end {
        SseEnd::Finish | SseEnd::After(_) => {
            let _ = stream.write_all(b"0\r\n\r\n");
            let _ = stream.flush();
            let _ = stream.shutdown(Shutdown::Write);
        }
        SseEnd::Cut(_) => {
            let _ = stream.shutdown(Shutdown::Both);
        }
        SseEnd::Stall(n) => {
            // Silent until the client hangs up (read sees EOF or an error) or
            // the server stops. A client still there after STALL_LIMIT gets
            // the rest of the stream, so a client without an idle timeout
            // ends up with the stalled answer and its test fails.
            let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
            let started = Instant::now();
            let mut buf = [0u8; 256];
            loop {
                if shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                if started.elapsed() >= STALL_LIMIT {
                    let rest = chunks[n.min(chunks.len())..].to_vec();
                    write_sse_body(stream, rest, SseEnd::Finish, shared);
                    return;
                }
                match stream.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

pub(super) fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        409 => "Conflict",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
