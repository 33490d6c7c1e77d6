//! The one HTML escape of the web UI: every text that is not the UI's own
//! markup (model and forge text, file names, diffs, commands) goes through
//! [`html`] before it reaches a page.

/// `text` with `&`, `<`, `>`, `"` and `'` replaced by entities, so it is
/// shown as text in element content and in quoted attribute values, and can
/// never open a tag or end an attribute.
pub(crate) fn html(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters (but tab and newlines) shown visibly, as
            // the terminal commands do.
            c if c.is_control() && c != '\n' && c != '\t' && c != '\r' => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

/// One URL path segment: every byte but the unreserved ones (`A-Z a-z
/// 0-9 - _ . ~`) percent-encoded, so a replica's `code#1` is `code%231`
/// (a raw `#` would end the path and start a fragment).
pub(crate) fn url_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A URL path segment decoded (`%23` → `#`); `None` when a `%` is not
/// followed by two hex digits or the bytes are not UTF-8.
pub(crate) fn decode_segment(seg: &str) -> Option<String> {
    let bytes = seg.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = seg.get(i + 1..i + 3)?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::{decode_segment, html, url_segment};

    #[test]
    fn url_segments_round_trip_and_encode_the_hash() {
        assert_eq!(url_segment("code#3"), "code%233");
        assert_eq!(url_segment("a b/c?d"), "a%20b%2Fc%3Fd");
        assert_eq!(url_segment("run-1_x"), "run-1_x");
        for s in ["code#3", "a b/c?d", "ü%", ""] {
            assert_eq!(decode_segment(&url_segment(s)).as_deref(), Some(s));
        }
        assert_eq!(decode_segment("code%233").as_deref(), Some("code#3"));
        assert_eq!(decode_segment("%2e%2E").as_deref(), Some(".."));
        assert_eq!(decode_segment("bad%2"), None);
        assert_eq!(decode_segment("bad%zz"), None);
        assert_eq!(decode_segment("%ff"), None);
    }

    #[test]
    fn markup_and_quotes_become_entities() {
        assert_eq!(
            html(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
    }

    #[test]
    fn an_entity_is_escaped_again_so_it_shows_as_written() {
        assert_eq!(html("&lt;b&gt;"), "&amp;lt;b&amp;gt;");
    }

    #[test]
    fn plain_text_and_newlines_are_kept_and_control_characters_shown() {
        assert_eq!(html("a\tb\nc é"), "a\tb\nc é");
        assert_eq!(html("\u{1b}[2J\0"), "\\u{1b}[2J\\u{0}");
    }
}
