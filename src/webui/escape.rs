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

#[cfg(test)]
mod tests {
    use super::html;

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
