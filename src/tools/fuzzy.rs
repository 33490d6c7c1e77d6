//! `edit_file`'s second chance: when `old_string` is not in the file
//! exactly, the whole lines it matches after whitespace normalisation —
//! each line compared without its leading and trailing whitespace, so
//! trailing spaces, indentation and CRLF line endings do not count.
//!
//! A match is only ever applied by `edit_file` when it is the one place
//! that matches ([`find`] says how many do and where); the replacement then
//! keeps the file's line endings, and a uniform indentation difference
//! between `old_string` and the file (a method written at column 0) is
//! carried over to `new_string`.

/// Where `old_string` matches after normalisation.
#[derive(Debug, PartialEq)]
pub(super) enum Found {
    /// Nowhere (or `old_string` is only whitespace).
    None,
    /// At exactly one place.
    One(Match),
    /// At several places: the first line (1-based) of each.
    Several(Vec<usize>),
}

/// One place `old_string` matches after normalisation.
#[derive(Debug, PartialEq)]
pub(super) struct Match {
    /// First line, 1-based.
    pub line: usize,
    /// Byte range of the matched text in the file: whole lines, with the
    /// last line's ending when `old_string` ends with a newline.
    range: std::ops::Range<usize>,
    /// The file's line ending there (`"\r\n"` or `"\n"`).
    eol: &'static str,
    /// Indentation to add to (`Ok`) or remove from (`Err`) every
    /// non-blank line of the replacement.
    shift: Result<String, String>,
}

/// One line of the file: its byte range without and with its ending.
struct Line {
    start: usize,
    content_end: usize,
    end: usize,
}

/// Where `old` matches `text` line by line after whitespace normalisation.
pub(super) fn find(text: &str, old: &str) -> Found {
    let ends_with_newline = old.ends_with('\n');
    let old_core = old.strip_suffix('\n').unwrap_or(old);
    let old_core = old_core.strip_suffix('\r').unwrap_or(old_core);
    let wanted: Vec<&str> = old_core.split('\n').collect();
    if wanted.iter().all(|l| l.trim().is_empty()) {
        return Found::None;
    }
    let lines = lines(text);
    if lines.len() < wanted.len() {
        return Found::None;
    }
    let body = |l: &Line| &text[l.start..l.content_end];
    let starts: Vec<usize> = (0..=lines.len() - wanted.len())
        .filter(|&i| {
            wanted
                .iter()
                .zip(&lines[i..])
                .all(|(w, l)| w.trim() == body(l).trim())
        })
        .collect();
    match starts.as_slice() {
        [] => Found::None,
        [i] => {
            let window = &lines[*i..*i + wanted.len()];
            let last = &window[window.len() - 1];
            let first = &window[0];
            Found::One(Match {
                line: i + 1,
                range: first.start..if ends_with_newline {
                    last.end
                } else {
                    last.content_end
                },
                eol: if text[first.content_end..first.end].starts_with('\r') {
                    "\r\n"
                } else {
                    "\n"
                },
                shift: shift(
                    wanted
                        .iter()
                        .zip(window)
                        .map(|(w, l)| (*w, body(l).trim_end_matches('\r'))),
                ),
            })
        }
        several => Found::Several(several.iter().map(|i| i + 1).collect()),
    }
}

impl Match {
    /// `text` with the matched lines replaced by `new`, in the file's line
    /// endings and indentation.
    pub(super) fn apply(&self, text: &str, new: &str) -> String {
        let replacement: String = new
            .split_inclusive('\n')
            .map(|line| {
                let (body, nl) = match line.strip_suffix('\n') {
                    Some(b) => (b.strip_suffix('\r').unwrap_or(b), self.eol),
                    None => (line, ""),
                };
                let body = match &self.shift {
                    _ if body.trim().is_empty() => body.to_owned(),
                    Ok(add) => format!("{add}{body}"),
                    Err(remove) => body
                        .strip_prefix(remove.as_str())
                        .unwrap_or(body)
                        .to_owned(),
                };
                body + nl
            })
            .collect();
        format!(
            "{}{replacement}{}",
            &text[..self.range.start],
            &text[self.range.end..]
        )
    }
}

/// The file's lines (the last one may have no ending).
fn lines(text: &str) -> Vec<Line> {
    let mut out = Vec::new();
    let mut start = 0;
    for piece in text.split_inclusive('\n') {
        let end = start + piece.len();
        let content_end = if piece.ends_with("\r\n") {
            end - 2
        } else if piece.ends_with('\n') {
            end - 1
        } else {
            end
        };
        out.push(Line {
            start,
            content_end,
            end,
        });
        start = end;
    }
    out
}

/// The indentation every non-blank `(written, file)` line pair differs by,
/// when it is the same for all: `Ok(extra)` when the file has `extra` more,
/// `Err(extra)` when it has `extra` less; `Ok("")` when it differs from
/// pair to pair (the replacement is then taken as written).
fn shift<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> Result<String, String> {
    let indent = |s: &'a str| &s[..s.len() - s.trim_start().len()];
    let mut common: Option<Result<String, String>> = None;
    for (written, file) in pairs {
        if written.trim().is_empty() {
            continue;
        }
        let (w, f) = (indent(written), indent(file));
        let this = if let Some(extra) = f.strip_suffix(w) {
            Ok(extra.to_owned())
        } else if let Some(extra) = w.strip_suffix(f) {
            Err(extra.to_owned())
        } else {
            return Ok(String::new());
        };
        match &common {
            None => common = Some(this),
            Some(c) if *c == this => {}
            Some(_) => return Ok(String::new()),
        }
    }
    common.unwrap_or(Ok(String::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str, old: &str) -> Match {
        match find(text, old) {
            Found::One(m) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn trailing_spaces_crlf_and_a_uniform_indent_match_once() {
        let text = "class C:\r\n    def f(self):  \r\n        return 1\r\n\r\nx = 1\r\n";
        let m = one(text, "def f(self):\n    return 1\n");
        assert_eq!(m.line, 2);
        assert_eq!(
            m.apply(text, "def f(self):\n    return 2\n"),
            "class C:\r\n    def f(self):\r\n        return 2\r\n\r\nx = 1\r\n"
        );
    }

    #[test]
    fn more_indentation_written_than_the_file_has_is_removed() {
        let text = "def f():\n    return 1\n";
        let m = one(text, "        def f():\n            return 1");
        assert_eq!(
            m.apply(text, "        def f():\n            return 2"),
            "def f():\n    return 2\n"
        );
    }

    #[test]
    fn a_mixed_indent_difference_takes_the_replacement_as_written() {
        let text = "def f():\n        return 1\n";
        let m = one(text, "def f():\n    return 1\n");
        assert_eq!(
            m.apply(text, "def f():\n    return 2\n"),
            "def f():\n    return 2\n"
        );
    }

    #[test]
    fn several_places_are_listed_and_none_is_none() {
        let text = "a:\n  x\nb:\n  x\n";
        assert_eq!(find(text, "x \n"), Found::Several(vec![2, 4]));
        assert_eq!(find(text, "y"), Found::None);
        assert_eq!(find(text, "  \n\n"), Found::None);
        assert_eq!(find("", "x"), Found::None);
        assert_eq!(find("x", "x\ny\nz"), Found::None);
    }

    #[test]
    fn without_a_trailing_newline_the_line_ending_stays() {
        let text = "a = 1  \nb = 2\n";
        let m = one(text, "a = 1");
        assert_eq!(m.apply(text, "a = 3"), "a = 3\nb = 2\n");
    }
}
