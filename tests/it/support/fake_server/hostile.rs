//! Hostile answers: what a broken or malicious model server does to a
//! client — keep-alive comments forever, a reply of any size (generated
//! while it is written, so the server holds none of it), bytes that are not
//! text, silence before the headers. Each stops as soon as the client hangs
//! up, and none outlives [`HOSTILE_LIMIT`].

use super::server::Shared;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Longest a hostile answer holds a connection whose client stays; after
/// that it ends (a keep-alive flood, a silence) or is cut (a huge reply), so
/// a client without bounds fails its test instead of hanging it.
pub const HOSTILE_LIMIT: Duration = Duration::from_secs(60);

/// How often a keep-alive flood sends its comment.
const KEEP_ALIVE_EVERY: Duration = Duration::from_millis(100);

/// One write of a huge reply.
const PIECE: usize = 64 << 10;

/// What a hostile answer sends.
#[derive(Debug, Clone)]
pub(super) enum Hostile {
    /// 200 `text/event-stream`, then `: keep-alive` comments and nothing else.
    KeepAlives,
    /// 200 with a text reply of `bytes` bytes of content, streamed as SSE or
    /// as one chunked JSON body.
    Huge { bytes: usize, sse: bool },
    /// 200 `application/json` with these bytes as the body.
    Bytes(Vec<u8>),
    /// No answer at all: the connection stays open and silent.
    Silent,
}

pub(super) fn write_hostile(stream: TcpStream, hostile: Hostile, shared: &Shared) {
    let _ = stream.set_nodelay(true);
    match hostile {
        Hostile::KeepAlives => keep_alives(stream, shared),
        Hostile::Huge { bytes, sse } => huge(stream, bytes, sse, shared),
        Hostile::Bytes(body) => bytes_body(stream, &body),
        Hostile::Silent => {
            wait_for_hangup(&stream, shared);
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";

fn chunk(stream: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    let mut framed = format!("{:x}\r\n", bytes.len()).into_bytes();
    framed.extend_from_slice(bytes);
    framed.extend_from_slice(b"\r\n");
    stream.write_all(&framed)?;
    stream.flush()
}

fn end_chunks(mut stream: TcpStream) {
    let _ = stream.write_all(b"0\r\n\r\n");
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Write);
}

fn stopped(shared: &Shared, started: Instant) -> bool {
    shared.stop.load(Ordering::SeqCst) || started.elapsed() >= HOSTILE_LIMIT
}

fn keep_alives(mut stream: TcpStream, shared: &Shared) {
    if stream.write_all(SSE_HEAD.as_bytes()).is_err() {
        return;
    }
    let started = Instant::now();
    while !stopped(shared, started) {
        // A write to a client that left fails: that is the end.
        if chunk(&mut stream, b": keep-alive\n\n").is_err() {
            return;
        }
        std::thread::sleep(KEEP_ALIVE_EVERY);
    }
    end_chunks(stream);
}

fn huge(mut stream: TcpStream, bytes: usize, sse: bool, shared: &Shared) {
    let head = if sse {
        SSE_HEAD.to_owned()
    } else {
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_owned()
    };
    if stream.write_all(head.as_bytes()).is_err() {
        return;
    }
    let text = "lorem ipsum ".repeat(PIECE / 12);
    let (open, piece, close) = if sse {
        let delta = |d: &str| {
            format!(
                "data: {{\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{d},\"finish_reason\":null}}]}}\n\n"
            )
        };
        (
            delta(r#"{"role":"assistant","content":""}"#),
            delta(&format!("{{\"content\":\"{text}\"}}")),
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n".to_owned(),
        )
    } else {
        (
            r#"{"object":"chat.completion","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":""#.to_owned(),
            text.clone(),
            r#""}}]}"#.to_owned(),
        )
    };
    if chunk(&mut stream, open.as_bytes()).is_err() {
        return;
    }
    let started = Instant::now();
    let mut sent = 0;
    while sent < bytes {
        if stopped(shared, started) || chunk(&mut stream, piece.as_bytes()).is_err() {
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        sent += text.len();
    }
    if chunk(&mut stream, close.as_bytes()).is_ok() {
        end_chunks(stream);
    }
}

fn bytes_body(mut stream: TcpStream, body: &[u8]) {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Write);
}

/// Blocks until the client hangs up, the server stops or [`HOSTILE_LIMIT`].
fn wait_for_hangup(mut stream: &TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
    let started = Instant::now();
    let mut buf = [0u8; 256];
    while !stopped(shared, started) {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

/// `len` bytes of deterministic noise from `seed`: every byte value,
/// NULs and invalid UTF-8 included.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            // xorshift64
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}
