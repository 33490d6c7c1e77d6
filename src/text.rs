//! Cutting text down to size, by named policy. One module, so every cut in
//! orch is marked the same way and the run record's redaction knows the
//! markers ([`CUT_MARKER`]).
//!
//! - [`cap_bytes`]: the first `max` bytes and a `[… N more bytes …]` marker
//!   (log fields, partial reports);
//! - [`head_tail_lines`] and its streaming form [`HeadTail`]: whole lines from
//!   the head and the tail around a `[… N lines omitted …]` marker (command
//!   output, diffs);
//! - [`one_line`]: the first line, cut to a number of characters with `…`
//!   (summaries, labels);
//! - [`model_text`]: text a model wrote, made safe for the record, a commit
//!   message and the terminal: control bytes (NUL, ESC, …) dropped except
//!   newline and tab, cut to `max` bytes with the [`cap_bytes`] marker
//!   (stage summaries and failure reasons);
//! - [`tail_bytes`]: the last `max` bytes (the end of a crashed child's
//!   stderr);
//! - [`untrusted`]: text that came from a model, a forge, a lesson or a file,
//!   made safe to print, to write to `pr.md` or to send to a forge: every
//!   control character but newline and tab (and the bidi overrides) shown as
//!   a visible escape (`\e`, `\x00`, `\u{202e}`), nothing dropped silently.
//!
//! Every cut lands on a `char` boundary; nothing here allocates more than
//! its result (the streaming buffer holds at most head + 2 × tail bytes).

/// How every marker of a cut starts; redaction looks for it to catch a
/// secret cut in half.
pub(crate) const CUT_MARKER: &str = "[… ";

/// The largest index `<= i` that is a char boundary of `s`.
fn floor_boundary(s: &str, mut i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Cuts `s` to at most `max` bytes on a char boundary, marking the cut with
/// `[… N more bytes …]`.
pub(crate) fn cap_bytes(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let end = floor_boundary(s, max);
    format!("{}{CUT_MARKER}{} more bytes …]", &s[..end], s.len() - end)
}

/// Caps `text` to about `max_bytes`, keeping head and tail lines with the
/// same `[… N lines omitted …]` marker as command output.
pub(crate) fn head_tail_lines(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut buf = HeadTail::new(max_bytes);
    buf.push(text.as_bytes());
    buf.finish().0
}

/// The first line of `text`, cut to `max` characters with `…` (also marked
/// when more lines follow).
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or("");
    let multi = text.trim_end().contains('\n');
    if first.chars().count() <= max && !multi {
        return first.to_owned();
    }
    let cut: String = first.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// Text a model wrote, safe to store and show: every control character but
/// `\n` and `\t` is dropped (a NUL cannot go into a commit message; an ESC
/// would drive the user's terminal), then the rest is cut to `max` bytes.
pub(crate) fn model_text(text: &str, max: usize) -> String {
    let clean: String = if text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        text.chars()
            .filter(|&c| !c.is_control() || c == '\n' || c == '\t')
            .collect()
    } else {
        text.to_owned()
    };
    if clean.len() <= max {
        clean
    } else {
        cap_bytes(&clean, max)
    }
}

/// Whether `c` must not reach a terminal raw: a control character other
/// than `\n` and `\t`, or a bidi override / isolate (it reorders what the
/// reader sees).
fn is_unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Untrusted text made safe for the user's terminal, `pr.md` and a forge:
/// each unsafe character (see [`is_unsafe_char`]) becomes a visible escape —
/// `\e` for ESC, `\xNN` for the other C0/C1 controls and DEL, `\u{NNNN}`
/// for the bidi controls. Borrowed when there is nothing to escape.
pub(crate) fn untrusted(text: &str) -> std::borrow::Cow<'_, str> {
    use std::fmt::Write as _;
    if !text.chars().any(is_unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !is_unsafe_char(c) {
            out.push(c);
        } else if c == '\u{1b}' {
            out.push_str("\\e");
        } else if (c as u32) < 0x100 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `content` in a fenced block with the info string `lang`: three
/// backticks, or four when the content holds three; a final newline added
/// when it has none.
pub(crate) fn fenced(content: &str, lang: &str) -> String {
    let fence = if content.contains("```") {
        "````"
    } else {
        "```"
    };
    let newline = if content.ends_with('\n') { "" } else { "\n" };
    format!("{fence}{lang}\n{content}{newline}{fence}")
}

/// `n` with the singular or plural noun: `1 turn`, `2 turns`, `0 turns`.
pub(crate) fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The last (at most) `max` bytes of `text`, starting on a char boundary.
pub(crate) fn tail_bytes(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// A bounded buffer for a stream of bytes: the first `head_cap` bytes and
/// the last `tail_cap` bytes (holding at most 2 × `tail_cap` between
/// compactions), counting the lines that fall in between.
#[derive(Debug)]
pub(crate) struct HeadTail {
    head: Vec<u8>,
    tail: Vec<u8>,
    head_cap: usize,
    tail_cap: usize,
    dropped_bytes: usize,
    dropped_newlines: usize,
}

impl HeadTail {
    /// A buffer keeping about `max_bytes` in total.
    pub(crate) fn new(max_bytes: usize) -> Self {
        let head_cap = max_bytes / 2;
        HeadTail {
            head: Vec::new(),
            tail: Vec::new(),
            head_cap,
            tail_cap: max_bytes - head_cap,
            dropped_bytes: 0,
            dropped_newlines: 0,
        }
    }

    /// Appends bytes.
    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        if self.head.len() < self.head_cap {
            let take = bytes.len().min(self.head_cap - self.head.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if bytes.is_empty() {
            return;
        }
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * self.tail_cap {
            let cut = self.tail.len() - self.tail_cap;
            self.drop_tail_front(cut);
        }
    }

    fn drop_tail_front(&mut self, n: usize) {
        self.dropped_bytes += n;
        self.dropped_newlines += count_newlines(&self.tail[..n]);
        self.tail.drain(..n);
    }

    /// The text (lossy UTF-8) and the number of omitted lines. When bytes were
    /// dropped, the head is cut back to its last newline and the tail forward
    /// past its first, so only whole lines are shown around the marker.
    pub(crate) fn finish(mut self) -> (String, usize) {
        if self.tail.len() > self.tail_cap {
            let cut = self.tail.len() - self.tail_cap;
            self.drop_tail_front(cut);
        }
        if self.dropped_bytes == 0 {
            let mut all = self.head;
            all.extend_from_slice(&self.tail);
            return (String::from_utf8_lossy(&all).into_owned(), 0);
        }
        if let Some(pos) = self.head.iter().rposition(|b| *b == b'\n') {
            self.dropped_bytes += self.head.len() - (pos + 1);
            self.head.truncate(pos + 1);
        }
        if let Some(pos) = self.tail.iter().position(|b| *b == b'\n')
            && pos + 1 < self.tail.len()
        {
            self.drop_tail_front(pos + 1);
        }
        let lines = self.dropped_newlines.max(1);
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("{CUT_MARKER}{lines} lines omitted …]\n"));
        text.push_str(&String::from_utf8_lossy(&self.tail));
        (text, lines)
    }
}

fn count_newlines(bytes: &[u8]) -> usize {
    bytes.iter().filter(|b| **b == b'\n').count()
}

/// `s` as one single-quoted word for bash or sh: what it holds is never
/// expanded (a `'` inside becomes `'\''`).
pub(crate) fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `a`, `b` as `` `a`, `b` ``: names in backticks, joined.
pub(crate) fn backticked(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_quoted_word_survives_quotes_spaces_and_expansions() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        let word = "x'y $HOME \"z\" `id` *";
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {}", shell_quote(word)))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), word);
    }

    #[test]
    fn cap_bytes_respects_char_boundaries() {
        assert_eq!(cap_bytes("abc", 10), "abc");
        let s = "ééé";
        let c = cap_bytes(s, 3);
        assert!(c.starts_with('é'));
        assert!(c.contains("4 more bytes"));
        assert!(c.contains(CUT_MARKER));
    }

    #[test]
    fn head_tail_counts_exactly_and_bounds_memory() {
        let mut c = HeadTail::new(100);
        let mut max_held = 0;
        for i in 0..10_000 {
            c.push(format!("line {i}\n").as_bytes());
            max_held = max_held.max(c.head.len() + c.tail.len());
        }
        assert!(max_held <= 150 + 16, "held {max_held}");
        let (text, omitted) = c.finish();
        let shown = text.lines().count() - 1;
        assert_eq!(shown + omitted, 10_000);
        assert!(text.starts_with("line 0\n"));
        assert!(text.ends_with("line 9999\n"));
    }

    #[test]
    fn head_tail_lines_short_is_unchanged() {
        assert_eq!(head_tail_lines("abc\n", 100), "abc\n");
        let long: String = (0..1000).map(|i| format!("{i}\n")).collect();
        let capped = head_tail_lines(&long, 200);
        assert!(capped.contains("lines omitted"));
        assert!(capped.len() < 300);
    }

    #[test]
    fn one_line_caps() {
        assert_eq!(one_line("short", 10), "short");
        assert_eq!(one_line("a\nb", 10), "a…");
        assert_eq!(one_line("abcdefghijkl", 5), "abcd…");
    }

    #[test]
    fn model_text_drops_control_bytes_and_caps() {
        assert_eq!(model_text("a\0b\x1b[31mc\r\nd\te", 100), "ab[31mc\nd\te");
        let long = "é".repeat(20_000);
        let cut = model_text(&long, 16 * 1024);
        assert!(cut.len() < 16 * 1024 + 64, "{}", cut.len());
        assert!(cut.contains(CUT_MARKER));
        assert_eq!(model_text("plain", 10), "plain");
    }

    #[test]
    fn untrusted_shows_every_control_as_an_escape() {
        assert!(matches!(
            untrusted("plain\ttext\n"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            untrusted("a\u{1b}[2J\u{1b}]0;t\u{7}b\0c\u{9b}d\u{202e}e\r"),
            "a\\e[2J\\e]0;t\\x07b\\x00c\\x9bd\\u{202e}e\\x0d"
        );
    }

    #[test]
    fn tail_bytes_starts_on_a_boundary() {
        assert_eq!(tail_bytes("abc", 10), "abc");
        assert_eq!(tail_bytes("abcdef", 2), "ef");
        assert_eq!(tail_bytes("aé", 1), "");
        assert_eq!(tail_bytes("aéb", 2), "b");
    }
}
