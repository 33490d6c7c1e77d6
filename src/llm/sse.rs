//! Decoding the server-sent-events framing of a streamed completion.
//!
//! The HTTP client feeds every network read to an [`SseDecoder`] and gets the
//! `data` of each complete event back. Pure: no I/O, so the framing rules and
//! the bounds are unit-tested here.
//!
//! Framing (the WHATWG rules, as far as model servers use them):
//! - lines end with `\n`, `\r\n` or `\r`, also when the two bytes of `\r\n`
//!   arrive in different reads; a UTF-8 byte-order mark at the very start is
//!   skipped;
//! - `data: x` (one optional space after the colon) appends `x` to the
//!   event's data, several `data` lines are joined with `\n`; a blank line
//!   ends the event; an event without data is dropped;
//! - lines starting with `:` are comments (`: keep-alive`); other fields
//!   (`event`, `id`, `retry`, unknown ones) are ignored;
//! - at the end of the body an unterminated last event is still delivered
//!   (servers that end with `data: [DONE]` and no blank line).
//!
//! Invariants:
//! - **Activity** is a byte of a `data` line. Comments, blank lines and other
//!   fields are not: a server that sends only keep-alives is silent as far as
//!   the idle timer is concerned ([`Fed::data`]).
//! - **Memory** is bounded by `max_line`: no line, and no event's data, may
//!   grow past it ([`SseError::TooLong`]); a stream is never buffered whole.
//! - A `data` line must be UTF-8 ([`SseError::NotUtf8`]); the bytes of other
//!   lines are never decoded, so garbage in a comment is harmless.

use std::fmt;

/// What one [`SseDecoder::feed`] brought.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Fed {
    /// The data of each event completed by these bytes, in order.
    pub events: Vec<String>,
    /// Whether any of these bytes belonged to a `data` line (activity).
    pub data: bool,
    /// Comment lines completed by these bytes (keep-alives).
    pub comments: usize,
}

/// A framing error: the stream cannot be decoded any further.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseError {
    /// A line, or one event's data, passed `limit` bytes.
    TooLong {
        /// The bound, in bytes.
        limit: usize,
    },
    /// A `data` line is not UTF-8.
    NotUtf8 {
        /// Byte offset of the line in the stream.
        at: u64,
    },
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::TooLong { limit } => write!(
                f,
                "an event of the stream is longer than {limit} bytes (the reply cap, max_reply_bytes, and room for its JSON)"
            ),
            SseError::NotUtf8 { at } => write!(
                f,
                "the stream is not valid UTF-8 (a data line at byte {at})"
            ),
        }
    }
}

/// Incremental SSE decoder with bounded buffers.
#[derive(Debug)]
pub struct SseDecoder {
    max_line: usize,
    /// The current, unterminated line.
    line: Vec<u8>,
    /// The current event's data so far (lines joined by `\n`).
    data: String,
    has_data: bool,
    /// The previous read ended with `\r`: a leading `\n` ends nothing.
    after_cr: bool,
    /// Bytes consumed so far (for error positions and the BOM).
    offset: u64,
    /// Offset of the current line's first byte.
    line_start: u64,
}

impl SseDecoder {
    /// A decoder refusing lines and events longer than `max_line` bytes.
    pub fn new(max_line: usize) -> Self {
        SseDecoder {
            max_line,
            line: Vec::new(),
            data: String::new(),
            has_data: false,
            after_cr: false,
            offset: 0,
            line_start: 0,
        }
    }

    /// Decodes one network read.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<Fed, SseError> {
        let mut fed = Fed::default();
        while !bytes.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if bytes[0] == b'\n' {
                    bytes = &bytes[1..];
                    self.offset += 1;
                    self.line_start = self.offset;
                    continue;
                }
            }
            match bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    self.extend_line(bytes)?;
                    self.offset += bytes.len() as u64;
                    if self.line_is_data() {
                        fed.data = true;
                    }
                    break;
                }
                Some(end) => {
                    self.extend_line(&bytes[..end])?;
                    self.after_cr = bytes[end] == b'\r';
                    self.offset += end as u64 + 1;
                    bytes = &bytes[end + 1..];
                    self.end_line(&mut fed)?;
                }
            }
        }
        Ok(fed)
    }

    /// The end of the body: the last event, if one was left unterminated.
    pub fn finish(&mut self) -> Result<Option<String>, SseError> {
        let mut fed = Fed::default();
        if !self.line.is_empty() {
            self.end_line(&mut fed)?;
        }
        if fed.events.is_empty() {
            self.dispatch(&mut fed);
        }
        Ok(fed.events.pop())
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > self.max_line {
            return Err(SseError::TooLong {
                limit: self.max_line,
            });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// Whether the current line is (so far) a `data` line.
    fn line_is_data(&self) -> bool {
        let l = without_bom(&self.line, self.line_start);
        l.starts_with(b"data") && (l.len() == 4 || l[4] == b':')
    }

    fn end_line(&mut self, fed: &mut Fed) -> Result<(), SseError> {
        let whole = std::mem::take(&mut self.line);
        let at = self.line_start;
        self.line_start = self.offset;
        let line = without_bom(&whole, at);
        if line.is_empty() {
            self.dispatch(fed);
            return Ok(());
        }
        if line[0] == b':' {
            fed.comments += 1;
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if field != b"data" {
            return Ok(());
        }
        fed.data = true;
        let value = std::str::from_utf8(value).map_err(|_| SseError::NotUtf8 { at })?;
        if self.data.len() + value.len() + 1 > self.max_line {
            return Err(SseError::TooLong {
                limit: self.max_line,
            });
        }
        if self.has_data {
            self.data.push('\n');
        }
        self.data.push_str(value);
        self.has_data = true;
        Ok(())
    }

    fn dispatch(&mut self, fed: &mut Fed) {
        if self.has_data {
            fed.events.push(std::mem::take(&mut self.data));
            self.has_data = false;
        }
    }
}

/// `line` without the byte-order mark a stream may start with.
fn without_bom(line: &[u8], line_start: u64) -> &[u8] {
    match line.strip_prefix(b"\xEF\xBB\xBF") {
        Some(rest) if line_start == 0 => rest,
        _ => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `reads` one by one; all events, whether any read was activity,
    /// and the comments seen.
    fn decode(reads: &[&[u8]]) -> (Vec<String>, Vec<bool>, usize) {
        let mut d = SseDecoder::new(1024);
        let mut events = Vec::new();
        let mut activity = Vec::new();
        let mut comments = 0;
        for read in reads {
            let fed = d.feed(read).unwrap();
            events.extend(fed.events);
            activity.push(fed.data);
            comments += fed.comments;
        }
        events.extend(d.finish().unwrap());
        (events, activity, comments)
    }

    #[test]
    fn events_are_split_on_blank_lines_in_every_line_ending() {
        let (events, _, _) = decode(&[b"data: a\n\ndata:b\r\n\r\ndata: c\r\rdata:  d\n\n"]);
        assert_eq!(events, ["a", "b", "c", " d"]);
    }

    #[test]
    fn reads_may_cut_anywhere() {
        let stream = "\u{feff}data: {\"x\": \"日本\"}\r\n\r\n: ping\r\ndata: [DONE]\r\n\r\n";
        let bytes = stream.as_bytes();
        for cut in 0..bytes.len() {
            let (events, _, comments) = decode(&[&bytes[..cut], &bytes[cut..]]);
            assert_eq!(events, ["{\"x\": \"日本\"}", "[DONE]"], "cut at {cut}");
            assert_eq!(comments, 1, "cut at {cut}");
        }
    }

    #[test]
    fn multi_line_data_is_joined_and_other_fields_are_ignored() {
        let (events, _, _) =
            decode(&[b"event: message\nid: 7\nretry: 10\ndata: one\ndata\ndata: three\n\n"]);
        assert_eq!(events, ["one\n\nthree"]);
        // An event with no data is dropped.
        let (events, _, _) = decode(&[b"event: ping\n\n\n\n"]);
        assert!(events.is_empty());
    }

    #[test]
    fn keep_alives_are_not_activity() {
        let (events, activity, comments) = decode(&[
            b": keep-alive\n\n",
            b"\n\n",
            b"event: ping\n\n",
            b"da",
            b"ta: {}",
            b"\n\n",
        ]);
        assert_eq!(events, ["{}"]);
        assert_eq!(comments, 1);
        // A read that is part of a data line is activity, even before the
        // line is known to be one ("da") only once it is ("ta: {}" and the
        // read that ends it).
        assert_eq!(activity, [false, false, false, false, true, true]);
    }

    #[test]
    fn an_unterminated_last_event_is_delivered() {
        assert_eq!(decode(&[b"data: [DONE]"]).0, ["[DONE]"]);
        assert_eq!(decode(&[b"data: x\n"]).0, ["x"]);
        assert!(decode(&[b": bye"]).0.is_empty());
    }

    #[test]
    fn lines_and_events_are_bounded() {
        let mut d = SseDecoder::new(16);
        assert_eq!(d.feed(&[b'x'; 17]), Err(SseError::TooLong { limit: 16 }));
        // A comment line counts too: nothing unbounded is held.
        let mut d = SseDecoder::new(16);
        assert!(d.feed(b": ").is_ok());
        assert_eq!(d.feed(&[b'k'; 20]), Err(SseError::TooLong { limit: 16 }));
        // Many short data lines of one event add up.
        let mut d = SseDecoder::new(16);
        assert!(d.feed(b"data: 12345\ndata: 12345\n").is_ok());
        assert_eq!(
            d.feed(b"data: 12345\n"),
            Err(SseError::TooLong { limit: 16 })
        );
    }

    #[test]
    fn data_must_be_utf8_but_other_lines_need_not_be() {
        let mut d = SseDecoder::new(64);
        let fed = d.feed(b": \xff\xfe\x00\nid: \xc3\n\n").unwrap();
        assert_eq!(fed.comments, 1);
        assert!(fed.events.is_empty());
        assert_eq!(
            d.feed(b"data: ok\n\ndata: \xff\n"),
            Err(SseError::NotUtf8 { at: 23 })
        );
    }
}
