//! Edits a model wrote as text instead of calling `edit_file`/`write_file`
//! (small local models do: Aider's formats are what they have seen most).
//! They become ordinary `edit_file`/`write_file` calls, so they go through
//! the same fence, read-only check, atomic write, diff and action log as
//! native ones; the agent logs them `recovered_from: search_replace` or
//! `whole_file`.
//!
//! Two formats, as Aider writes them
//! (<https://aider.chat/docs/more/edit-formats.html>):
//!
//! - **search/replace** (Aider's `diff` and `diff-fenced`): the path on its
//!   own line before the block (before its opening fence, or inside it),
//!   then `<<<<<<< SEARCH`, the old lines, `=======`, the new lines,
//!   `>>>>>>> REPLACE` (5 to 9 marker characters, as Aider accepts). A block
//!   without a path takes the previous block's. Each block is an `edit_file`
//!   call; an empty SEARCH for a file that does not exist creates it
//!   (`write_file`), for one that exists it is `edit_file`'s "old_string is
//!   empty" error (Aider would append; orch does not guess).
//!   Prose around the blocks is accepted, as Aider does: the markers cannot
//!   be written by accident, and an edit applies only where its SEARCH text
//!   is found, so a block quoted in an explanation changes nothing that its
//!   author did not name exactly.
//! - **whole file** (Aider's `whole`): a path line, then a fenced block with
//!   the file's full new content (```` ```python ```` …); or the path in the
//!   fence's info string (```` ```python solution.py ````). Each block is a
//!   `write_file` call. These are taken only when they are the **whole**
//!   reply (blocks and blank lines, nothing else): a file excerpt shown in
//!   an explanation would otherwise overwrite the file with the excerpt.
//!   A block whose closing fence is missing (generation cut off) is never
//!   taken, so a truncated file is never written. A fence inside the
//!   content is kept when it opens with an info string (```` ```bash ````)
//!   and closes with a bare fence, or when the outer fence is longer.
//!
//! The parser ([`parse`]) and the calls ([`edit_calls`]) are pure; the
//! agent (`crate::agent::textedits`) decides when to use them.

use super::{ChatMessage, FunctionCall, ToolCall, ToolDef};
use serde_json::json;

/// Which text edit format a reply was written in (logged as
/// `recovered_from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextEditFormat {
    /// Aider's search/replace blocks.
    SearchReplace,
    /// Whole-file fenced blocks with a path.
    WholeFile,
}

impl TextEditFormat {
    /// A stable name for logs: `search_replace`, `whole_file`.
    pub fn as_str(self) -> &'static str {
        match self {
            TextEditFormat::SearchReplace => "search_replace",
            TextEditFormat::WholeFile => "whole_file",
        }
    }
}

/// One edit written as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextEdit {
    /// Replace `search` with `replace` in `path`.
    Replace {
        /// The file, as written.
        path: String,
        /// The old text (whole lines, with their endings).
        search: String,
        /// The new text.
        replace: String,
    },
    /// Write `content` as the whole of `path`.
    Whole {
        /// The file, as written.
        path: String,
        /// The file's full new content.
        content: String,
    },
}

/// Whether text edits are applied for a role whose own setting is
/// `explicit` (`text_edits:` in its front matter) under a model whose
/// `tool_calling` is `calling`: what the role says, else on unless the
/// profile (or role) said `native` — a model that only ever calls tools
/// natively has no use for edits recovered from its prose. `auto` counts
/// as not native: it is the setting under which a model that writes calls
/// as text is switched to constrained calls.
pub fn text_edits_enabled(explicit: Option<bool>, calling: crate::llm::ToolCalling) -> bool {
    explicit.unwrap_or(calling != crate::llm::ToolCalling::Native)
}

/// The edits `text` is written as, and in which format; `None` when it is
/// not one (see the module docs for what counts). `exists` says whether a
/// path names a file in the lane: a path line without a `.` or `/` (a
/// `Makefile`) is only taken for one that exists.
pub fn parse(text: &str, exists: &dyn Fn(&str) -> bool) -> Option<(TextEditFormat, Vec<TextEdit>)> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    if lines.iter().any(|l| is_marker(l, '<', "SEARCH")) {
        return search_replace(&lines, exists).map(|e| (TextEditFormat::SearchReplace, e));
    }
    whole_files(&lines, exists).map(|e| (TextEditFormat::WholeFile, e))
}

/// The tool calls that make `edits`, with ids `{id_prefix}_{n}`; `None`
/// when one of them needs a tool that is not offered (a read-only role is
/// offered neither `edit_file` nor `write_file`). `exists` as in [`parse`].
pub fn edit_calls(
    edits: &[TextEdit],
    tools: &[ToolDef],
    exists: &dyn Fn(&str) -> bool,
    id_prefix: &str,
) -> Option<Vec<ToolCall>> {
    let offered = |name: &str| tools.iter().any(|t| t.name == name);
    edits
        .iter()
        .enumerate()
        .map(|(i, edit)| {
            let (name, arguments) = match edit {
                TextEdit::Replace {
                    path,
                    search,
                    replace,
                } if search.trim().is_empty() && !exists(path) => {
                    ("write_file", json!({"path": path, "content": replace}))
                }
                TextEdit::Replace {
                    path,
                    search,
                    replace,
                } => (
                    "edit_file",
                    json!({"path": path, "old_string": search, "new_string": replace}),
                ),
                TextEdit::Whole { path, content } => {
                    ("write_file", json!({"path": path, "content": content}))
                }
            };
            offered(name).then(|| ToolCall {
                id: format!("{id_prefix}_{i}"),
                kind: "function".to_owned(),
                function: FunctionCall {
                    name: name.to_owned(),
                    arguments: arguments.to_string(),
                },
            })
        })
        .collect()
}

/// Applies [`parse`] and [`edit_calls`] to a reply: when `message` has no
/// tool calls and its text is edits the offered `tools` can make, the
/// calls become its `tool_calls` and its text is dropped (the calls are the
/// message now; the text stays in the log's `response` event). Returns the
/// format, for the `tool_calls_recovered` log entry.
pub fn recover_into(
    message: &mut ChatMessage,
    tools: &[ToolDef],
    exists: &dyn Fn(&str) -> bool,
    id_prefix: &str,
) -> Option<TextEditFormat> {
    if !message.tool_calls.is_empty() {
        return None;
    }
    let (format, edits) = parse(message.content.as_deref()?, exists)?;
    message.tool_calls = edit_calls(&edits, tools, exists, id_prefix)?;
    message.content = None;
    Some(format)
}

/// The reply to orch's request for one file's complete new content (the
/// agent asked for exactly that file, so no path is needed): the body of
/// the reply's first fenced block that closes, and how many more closed
/// blocks follow it (not written; the agent says so). Prose around the
/// block is allowed, as in a direct answer; a block cut off before its
/// closing fence is never taken.
pub fn asked_block(text: &str) -> Option<(String, usize)> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut found: Option<String> = None;
    let mut more = 0;
    let mut i = 0;
    while i < lines.len() {
        let Some((ticks, _)) = fence(lines[i]) else {
            i += 1;
            continue;
        };
        let Some((body, after)) = fence_body(&lines, i + 1, ticks) else {
            break;
        };
        match found {
            None => found = Some(body),
            Some(_) => more += 1,
        }
        i = after;
    }
    found.map(|body| (body, more))
}

/// Whether `line` is a marker: 5 to 9 `ch`, then `word` (none for the
/// divider), nothing else.
fn is_marker(line: &str, ch: char, word: &str) -> bool {
    let t = line.trim();
    let rest = t.trim_start_matches(ch);
    let n = t.len() - rest.len();
    (5..=9).contains(&n) && rest.trim() == word
}

/// The search/replace blocks of `lines`, prose around them ignored.
fn search_replace(lines: &[&str], exists: &dyn Fn(&str) -> bool) -> Option<Vec<TextEdit>> {
    let mut edits = Vec::new();
    let mut current: Option<String> = None;
    let mut i = 0;
    while i < lines.len() {
        if !is_marker(lines[i], '<', "SEARCH") {
            i += 1;
            continue;
        }
        let path = path_before(&lines[..i], exists).or_else(|| current.clone())?;
        let (search, after) = section(lines, i + 1, '=', "")?;
        let (replace, after) = section(lines, after, '>', "REPLACE")?;
        edits.push(TextEdit::Replace {
            path: path.clone(),
            search,
            replace,
        });
        current = Some(path);
        i = after;
    }
    (!edits.is_empty()).then_some(edits)
}

/// The lines from `start` up to the marker `ch`/`word`, joined, and the
/// index after the marker; `None` when another marker or the end comes
/// first (a malformed block: the reply is not taken).
fn section(lines: &[&str], start: usize, ch: char, word: &str) -> Option<(String, usize)> {
    let mut text = String::new();
    for (i, line) in lines.iter().enumerate().skip(start) {
        if is_marker(line, ch, word) {
            return Some((text, i + 1));
        }
        if is_marker(line, '<', "SEARCH")
            || is_marker(line, '=', "")
            || is_marker(line, '>', "REPLACE")
        {
            return None;
        }
        text.push_str(line);
    }
    None
}

/// The path written just before a `SEARCH` marker: within the 3 lines
/// before it, the nearest line that is not blank and not an opening fence
/// without a path (a fence with one, ```` ```python a.py ````, gives it).
fn path_before(before: &[&str], exists: &dyn Fn(&str) -> bool) -> Option<String> {
    for line in before.iter().rev().take(3) {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if let Some(info) = t.strip_prefix("```") {
            match info_path(info.trim_start_matches('`'), exists) {
                Some(p) => return Some(p),
                None => continue,
            }
        }
        return path_line(t, exists);
    }
    None
}

/// A line that is only a path: one word, maybe in backticks or bold, maybe
/// after `#` or before `:`; with a `.` or `/`, or naming a file that exists.
fn path_line(line: &str, exists: &dyn Fn(&str) -> bool) -> Option<String> {
    let p = line
        .trim()
        .trim_end_matches(':')
        .trim_start_matches('#')
        .trim()
        .trim_matches(['`', '*'])
        .trim();
    let plausible = !p.is_empty()
        && !p.contains(char::is_whitespace)
        && !p.starts_with(['<', '=', '>'])
        && p != "..."
        && (p.contains(['.', '/']) || exists(p));
    plausible.then(|| p.to_owned())
}

/// The path in a fence's info string: `python solution.py`, or a lone
/// `solution.py` (a word with a `.` or `/`, which no language name has).
fn info_path(info: &str, exists: &dyn Fn(&str) -> bool) -> Option<String> {
    match info.split_whitespace().collect::<Vec<_>>().as_slice() {
        [_, path] => path_line(path, exists),
        [word] if word.contains(['.', '/']) => path_line(word, exists),
        _ => None,
    }
}

/// An opening or closing fence: its backtick count and info string.
fn fence(line: &str) -> Option<(usize, &str)> {
    let t = line.trim();
    let info = t.trim_start_matches('`');
    let n = t.len() - info.len();
    (n >= 3).then(|| (n, info.trim()))
}

/// The whole-file blocks that make up all of `lines`.
fn whole_files(lines: &[&str], exists: &dyn Fn(&str) -> bool) -> Option<Vec<TextEdit>> {
    let mut edits = Vec::new();
    let mut i = 0;
    let blank = |i: usize| lines.get(i).is_some_and(|l| l.trim().is_empty());
    loop {
        while blank(i) {
            i += 1;
        }
        if i == lines.len() {
            break;
        }
        // A path line before the fence, or none.
        let written = match fence(lines[i]) {
            Some(_) => None,
            None => {
                let p = path_line(lines[i], exists)?;
                i += 1;
                Some(p)
            }
        };
        let (ticks, info) = fence(lines.get(i)?)?;
        let path = match (
            written,
            (!info.is_empty())
                .then(|| info_path(info, exists))
                .flatten(),
        ) {
            (Some(a), Some(b)) if a != b => return None,
            (Some(p), _) | (None, Some(p)) => p,
            (None, None) => return None,
        };
        let (content, after) = fence_body(lines, i + 1, ticks)?;
        edits.push(TextEdit::Whole { path, content });
        i = after;
    }
    (!edits.is_empty()).then_some(edits)
}

/// The body of a fence of `ticks` backticks opened before line `start`, and
/// the index after its closing fence; `None` when it never closes. Inside,
/// a fence with an info string opens a nested block that a bare fence
/// closes.
fn fence_body(lines: &[&str], start: usize, ticks: usize) -> Option<(String, usize)> {
    let mut depth = 0usize;
    let mut body = String::new();
    for (i, line) in lines.iter().enumerate().skip(start) {
        match fence(line) {
            Some((_, info)) if !info.is_empty() => depth += 1,
            Some(_) if depth > 0 => depth -= 1,
            Some((n, _)) if n >= ticks => return Some((body, i + 1)),
            _ => {}
        }
        body.push_str(line);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn none(_: &str) -> bool {
        false
    }

    fn parsed(text: &str) -> Option<(TextEditFormat, Vec<TextEdit>)> {
        parse(text, &none)
    }

    fn replace(path: &str, search: &str, replace: &str) -> TextEdit {
        TextEdit::Replace {
            path: path.into(),
            search: search.into(),
            replace: replace.into(),
        }
    }

    fn whole(path: &str, content: &str) -> TextEdit {
        TextEdit::Whole {
            path: path.into(),
            content: content.into(),
        }
    }

    #[test]
    fn an_asked_block_is_the_first_closed_fence_with_prose_around() {
        let reply =
            "Here it is:\n\n```python\ndef f():\n    return 1\n```\n\nUsage:\n```\nf()\n```\n";
        assert_eq!(
            asked_block(reply),
            Some(("def f():\n    return 1\n".to_owned(), 1))
        );
        // A fence inside the content with an info string is kept.
        let nested = "````markdown\nx\n```bash\nls\n```\ny\n````\n";
        assert_eq!(
            asked_block(nested),
            Some(("x\n```bash\nls\n```\ny\n".to_owned(), 0))
        );
        // Cut off before its closing fence, or no block at all: nothing.
        assert_eq!(asked_block("```python\ndef f():\n"), None);
        assert_eq!(asked_block("I implemented it."), None);
    }

    #[test]
    fn aider_diff_and_diff_fenced_blocks() {
        let diff = "mathweb/flask/app.py\n```python\n<<<<<<< SEARCH\nfrom flask import Flask\n=======\nimport math\nfrom flask import Flask\n>>>>>>> REPLACE\n```\n";
        let want = vec![replace(
            "mathweb/flask/app.py",
            "from flask import Flask\n",
            "import math\nfrom flask import Flask\n",
        )];
        assert_eq!(
            parsed(diff),
            Some((TextEditFormat::SearchReplace, want.clone()))
        );
        let fenced = "```python\nmathweb/flask/app.py\n<<<<<<< SEARCH\nfrom flask import Flask\n=======\nimport math\nfrom flask import Flask\n>>>>>>> REPLACE\n```";
        assert_eq!(parsed(fenced).unwrap().1, want);
        // Unfenced, with the path in the info string, with prose around.
        let bare = "Sure.\n\n```python app.py\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n```\nThat fixes it.";
        assert_eq!(parsed(bare).unwrap().1, [replace("app.py", "a\n", "b\n")]);
    }

    #[test]
    fn several_blocks_and_a_block_without_a_path_takes_the_previous_one() {
        let text = "a.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n<<<<<<< SEARCH\n=======\nz\n>>>>>>> REPLACE\n\nb/c.rs\n<<<<<<<< SEARCH\nold\n========\nnew\n>>>>>>>> REPLACE";
        assert_eq!(
            parsed(text).unwrap().1,
            [
                replace("a.py", "x\n", "y\n"),
                replace("a.py", "", "z\n"),
                replace("b/c.rs", "old\n", "new\n"),
            ]
        );
    }

    #[test]
    fn crlf_replies_keep_their_line_endings() {
        let text = "a.py\r\n<<<<<<< SEARCH\r\nx = 1\r\n=======\r\nx = 2\r\n>>>>>>> REPLACE\r\n";
        assert_eq!(
            parsed(text).unwrap().1,
            [replace("a.py", "x = 1\r\n", "x = 2\r\n")]
        );
        let text = "a.py\r\n```\r\none\r\n```\r\n";
        assert_eq!(parsed(text).unwrap().1, [whole("a.py", "one\r\n")]);
    }

    #[test]
    fn malformed_or_pathless_blocks_are_not_edits() {
        for text in [
            // No path anywhere.
            "<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n",
            "Here is the fix:\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n",
            // Missing divider, missing end, a second SEARCH inside.
            "a.py\n<<<<<<< SEARCH\na\n>>>>>>> REPLACE\n",
            "a.py\n<<<<<<< SEARCH\na\n=======\nb\n",
            "a.py\n<<<<<<< SEARCH\na\n<<<<<<< SEARCH\n=======\nb\n>>>>>>> REPLACE\n",
            // Too few or too many marker characters.
            "a.py\n<<<< SEARCH\na\n====\nb\n>>>> REPLACE\n",
        ] {
            assert_eq!(parsed(text), None, "{text:?}");
        }
    }

    #[test]
    fn whole_file_blocks_only_as_the_whole_reply() {
        let text = "solution.py\n```python\ndef f():\n    return 1\n```\n\n```python tests/test_f.py\nfrom solution import f\n```\n";
        assert_eq!(
            parsed(text),
            Some((
                TextEditFormat::WholeFile,
                vec![
                    whole("solution.py", "def f():\n    return 1\n"),
                    whole("tests/test_f.py", "from solution import f\n"),
                ]
            ))
        );
        assert_eq!(
            parsed("**`src/x.rs`**:\n```rust\nfn x() {}\n```")
                .unwrap()
                .1,
            [whole("src/x.rs", "fn x() {}\n")]
        );
        for text in [
            // Prose around, no path, a path that disagrees, cut off.
            "Here it is:\nsolution.py\n```python\nx = 1\n```\n",
            "solution.py\n```python\nx = 1\n```\nDone.",
            "```python\nx = 1\n```",
            "a.py\n```python b.py\nx = 1\n```",
            "solution.py\n```python\nx = 1\n",
            // A sentence is not a path; a bare word only when the file exists.
            "The file\n```\nx\n```",
            "Makefile\n```\nall:\n```",
            "",
        ] {
            assert_eq!(parsed(text), None, "{text:?}");
        }
        let makefile = |p: &str| p == "Makefile";
        assert_eq!(
            parse("Makefile\n```\nall:\n```", &makefile).unwrap().1,
            [whole("Makefile", "all:\n")]
        );
    }

    #[test]
    fn nested_fences_stay_in_the_content() {
        // An info-string fence inside, closed by a bare one.
        let text = "README.md\n```markdown\n# Use\n```bash\nmake\n```\nDone.\n```\n";
        assert_eq!(
            parsed(text).unwrap().1,
            [whole("README.md", "# Use\n```bash\nmake\n```\nDone.\n")]
        );
        // A longer outer fence keeps bare inner ones.
        let text = "README.md\n````\n```\nx\n```\n````\n";
        assert_eq!(
            parsed(text).unwrap().1,
            [whole("README.md", "```\nx\n```\n")]
        );
        // A bare inner fence under a short outer one closes it: the rest is
        // prose, and the reply is not taken.
        assert_eq!(parsed("README.md\n```\n```\nx\n```\n```\n"), None);
    }

    fn tool(name: &'static str) -> ToolDef {
        ToolDef {
            name,
            description: "",
            parameters: json!({}),
        }
    }

    #[test]
    fn calls_need_the_offered_write_tools() {
        let edits = [
            replace("a.py", "x\n", "y\n"),
            replace("new.py", "", "z\n"),
            whole("b.py", "b\n"),
        ];
        let both = [tool("read_file"), tool("edit_file"), tool("write_file")];
        let calls = edit_calls(&edits, &both, &none, "edit2").unwrap();
        let got: Vec<(&str, &str, Value)> = calls
            .iter()
            .map(|c| {
                (
                    c.id.as_str(),
                    c.function.name.as_str(),
                    serde_json::from_str(&c.function.arguments).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "edit2_0",
                    "edit_file",
                    json!({"path": "a.py", "old_string": "x\n", "new_string": "y\n"})
                ),
                (
                    "edit2_1",
                    "write_file",
                    json!({"path": "new.py", "content": "z\n"})
                ),
                (
                    "edit2_2",
                    "write_file",
                    json!({"path": "b.py", "content": "b\n"})
                ),
            ]
        );
        // An empty SEARCH for a file that exists is edit_file's error, not an overwrite.
        let exists = |_: &str| true;
        let calls = edit_calls(&edits[1..2], &both, &exists, "e").unwrap();
        assert_eq!(calls[0].function.name, "edit_file");
        // A path outside the lane is kept as written, for the fence to
        // refuse (tests/it/text_edits.rs shows the refusal).
        let out = [whole("../escape.py", "x\n")];
        let calls = edit_calls(&out, &both, &none, "e").unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&calls[0].function.arguments).unwrap()["path"],
            "../escape.py"
        );
        assert_eq!(
            parsed("../escape.py\n```\nx\n```").unwrap().1,
            [whole("../escape.py", "x\n")]
        );
        // A read-only role is offered neither.
        let read_only = [tool("read_file"), tool("finish")];
        assert_eq!(edit_calls(&edits[..1], &read_only, &none, "e"), None);
        assert_eq!(edit_calls(&edits[2..], &read_only, &none, "e"), None);
    }

    #[test]
    fn recover_into_replaces_the_text_only_without_native_calls() {
        let tools = [tool("edit_file"), tool("write_file")];
        let mut m = ChatMessage {
            role: super::super::MessageRole::Assistant,
            content: Some("a.py\n```\nx\n```\n".into()),
            tool_calls: vec![],
            tool_call_id: None,
        };
        assert_eq!(
            recover_into(&mut m, &tools, &none, "edit1"),
            Some(TextEditFormat::WholeFile)
        );
        assert_eq!(m.content, None);
        assert_eq!(m.tool_calls[0].function.name, "write_file");
        let before = m.clone();
        assert_eq!(recover_into(&mut m, &tools, &none, "edit2"), None);
        assert_eq!(m, before);
    }

    #[test]
    fn text_edits_are_on_unless_set_off() {
        use crate::llm::ToolCalling::{Auto, Constrained, Native, Text};
        for calling in [Auto, Constrained, Text] {
            assert!(text_edits_enabled(None, calling));
        }
        assert!(!text_edits_enabled(None, Native));
        assert!(text_edits_enabled(Some(true), Native));
        assert!(!text_edits_enabled(Some(false), Text));
    }
}
