//! A small shell lexer and parser, enough to find every simple command of a
//! bash command line: quotes and escapes removed, `;` `&&` `||` `|` `&`
//! newlines and subshell parentheses split, `$(…)`, backticks and process
//! substitutions collected as commands of their own, here-document bodies
//! and here-strings attached to their command (data, unless that command is a
//! shell reading its script from stdin). It never fails: unterminated quotes
//! run to the end, as the safest reading for a policy check.

/// One simple command as the shell would see it: words with quotes removed,
/// and its redirections (`(operator, target)`).
#[derive(Debug, Default, Clone)]
pub(super) struct Simple {
    pub(super) words: Vec<String>,
    pub(super) redirects: Vec<(String, String)>,
    /// What the command reads on stdin from the line itself: here-document
    /// bodies (`<<EOF`) and here-strings (`<<<word`), in order.
    pub(super) stdin_texts: Vec<String>,
    /// Its pipeline is started in the background (`… &`).
    pub(super) background: bool,
}

/// A parsed command line: pipelines of simple commands, plus the texts of
/// every command substitution found (analysed as commands of their own).
#[derive(Debug, Default)]
pub(super) struct Parsed {
    pub(super) pipelines: Vec<Vec<Simple>>,
    pub(super) substitutions: Vec<String>,
    /// The text with every quoted string and here-document body blanked out:
    /// what the shell reads as code at this level (for the fork-bomb check).
    pub(super) code: String,
}

#[derive(Debug)]
enum Tok {
    Word(String),
    /// `|` or `|&`: continues the pipeline.
    Pipe,
    /// `;`, `&&`, `||`, newline, `(`, `)`: ends the pipeline.
    Sep,
    /// `&`: ends the pipeline, which runs in the background.
    Background,
    Redir(String),
}

struct Lexer {
    c: Vec<char>,
    i: usize,
    toks: Vec<Tok>,
    word: Option<String>,
    subs: Vec<String>,
    /// Here-document delimiters whose bodies start after the next newline.
    heredocs: Vec<(String, bool)>,
    /// The next word is a here-document delimiter (`true`: `<<-`).
    want_delim: Option<bool>,
    /// Here-document bodies in the order their delimiters appeared.
    bodies: Vec<String>,
    code: String,
}

impl Lexer {
    fn push(&mut self, ch: char) {
        self.word.get_or_insert_with(String::new).push(ch);
    }

    fn push_str(&mut self, s: &str) {
        self.word.get_or_insert_with(String::new).push_str(s);
    }

    fn flush(&mut self) {
        if let Some(w) = self.word.take() {
            if let Some(strip) = self.want_delim.take() {
                self.heredocs.push((w.clone(), strip));
            }
            self.toks.push(Tok::Word(w));
        }
    }

    fn peek(&self, k: usize) -> Option<char> {
        self.c.get(self.i + k).copied()
    }

    /// Index of the `)` closing a `(` whose content starts at `from`.
    fn matching_paren(&self, from: usize) -> usize {
        let mut depth = 1;
        let mut j = from;
        while j < self.c.len() {
            match self.c[j] {
                '\\' => j += 1,
                '\'' => {
                    j += 1;
                    while j < self.c.len() && self.c[j] != '\'' {
                        j += 1;
                    }
                }
                '"' => {
                    j += 1;
                    while j < self.c.len() && self.c[j] != '"' {
                        if self.c[j] == '\\' {
                            j += 1;
                        }
                        j += 1;
                    }
                }
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return j;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        self.c.len()
    }

    fn text(&self, from: usize, to: usize) -> String {
        self.c[from.min(self.c.len())..to.min(self.c.len())]
            .iter()
            .collect()
    }

    /// `$(…)` / `<(…)` / `>(…)` at `self.i` (pointing at the `(`): records the
    /// inner text as a substitution and keeps the raw text in the word.
    fn substitution(&mut self, prefix: &str) {
        let start = self.i + 1;
        let end = self.matching_paren(start);
        let inner = self.text(start, end);
        self.push_str(&format!("{prefix}({inner})"));
        self.subs.push(inner);
        self.i = end + 1;
    }

    fn backtick(&mut self) {
        let mut inner = String::new();
        self.i += 1;
        while let Some(ch) = self.peek(0) {
            self.i += 1;
            match ch {
                '`' => break,
                '\\' => {
                    if let Some(n) = self.peek(0) {
                        inner.push(n);
                        self.i += 1;
                    }
                }
                _ => inner.push(ch),
            }
        }
        self.push_str(&format!("`{inner}`"));
        self.subs.push(inner);
    }

    /// `$` at `self.i`.
    fn dollar(&mut self, in_double_quotes: bool) {
        match self.peek(1) {
            Some('(') if self.peek(2) == Some('(') => {
                // Arithmetic: keep literally.
                let start = self.i;
                let end = self.matching_paren(self.i + 2);
                let end = if self.c.get(end + 1) == Some(&')') {
                    end + 1
                } else {
                    end
                };
                let raw = self.text(start, end + 1);
                self.push_str(&raw);
                self.i = end + 1;
            }
            Some('(') => {
                self.i += 1;
                self.substitution("$");
            }
            Some('{') => {
                let start = self.i;
                let mut j = self.i + 2;
                while j < self.c.len() && self.c[j] != '}' {
                    j += 1;
                }
                let raw = self.text(start, j + 1);
                self.push_str(&raw);
                self.i = j + 1;
            }
            Some('\'') if !in_double_quotes => {
                // ANSI-C quoting: $'…' with backslash escapes.
                self.i += 2;
                self.push_str("");
                while let Some(ch) = self.peek(0) {
                    self.i += 1;
                    match ch {
                        '\'' => break,
                        '\\' => {
                            let e = self.peek(0).unwrap_or('\\');
                            self.i += 1;
                            let decoded = match e {
                                'n' => '\n',
                                't' => '\t',
                                'x' => {
                                    let hex = self.text(self.i, self.i + 2);
                                    match u8::from_str_radix(&hex, 16) {
                                        Ok(b) => {
                                            self.i += 2;
                                            b as char
                                        }
                                        Err(_) => 'x',
                                    }
                                }
                                other => other,
                            };
                            self.push(decoded);
                        }
                        _ => self.push(ch),
                    }
                }
            }
            _ => {
                self.push('$');
                self.i += 1;
            }
        }
    }

    fn skip_heredoc_bodies(&mut self) {
        for (delim, strip_tabs) in std::mem::take(&mut self.heredocs) {
            let mut body = String::new();
            while self.i < self.c.len() {
                let start = self.i;
                while self.i < self.c.len() && self.c[self.i] != '\n' {
                    self.i += 1;
                }
                let line = self.text(start, self.i);
                self.i += 1;
                let line = if strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    &line
                };
                if line == delim {
                    break;
                }
                body.push_str(line);
                body.push('\n');
            }
            self.bodies.push(body);
        }
    }

    fn run(mut self) -> Lexed {
        while let Some(ch) = self.peek(0) {
            let start = self.i;
            let quoted = matches!(ch, '\'' | '"') || (ch == '$' && self.peek(1) == Some('\''));
            self.step(ch);
            if quoted {
                self.code.push(' ');
            } else if ch == '\n' {
                self.code.push('\n');
            } else {
                let raw = self.text(start, self.i);
                self.code.push_str(&raw);
            }
        }
        self.flush();
        Lexed {
            toks: self.toks,
            subs: self.subs,
            bodies: self.bodies,
            code: self.code,
        }
    }

    fn step(&mut self, ch: char) {
        match ch {
            ' ' | '\t' | '\r' => {
                self.flush();
                self.i += 1;
            }
            '\n' => {
                self.flush();
                self.toks.push(Tok::Sep);
                self.i += 1;
                self.skip_heredoc_bodies();
            }
            '#' if self.word.is_none() => {
                while self.peek(0).is_some_and(|c| c != '\n') {
                    self.i += 1;
                }
            }
            '\\' => {
                match self.peek(1) {
                    Some('\n') => {}
                    Some(n) => self.push(n),
                    None => {}
                }
                self.i += 2;
            }
            '\'' => {
                self.push_str("");
                self.i += 1;
                while let Some(c) = self.peek(0) {
                    self.i += 1;
                    if c == '\'' {
                        break;
                    }
                    self.push(c);
                }
            }
            '"' => {
                self.push_str("");
                self.i += 1;
                while let Some(c) = self.peek(0) {
                    match c {
                        '"' => {
                            self.i += 1;
                            break;
                        }
                        '\\' => {
                            match self.peek(1) {
                                Some(n @ ('$' | '`' | '"' | '\\')) => self.push(n),
                                Some('\n') => {}
                                Some(n) => {
                                    self.push('\\');
                                    self.push(n);
                                }
                                None => {}
                            }
                            self.i += 2;
                        }
                        '$' => self.dollar(true),
                        '`' => self.backtick(),
                        _ => {
                            self.push(c);
                            self.i += 1;
                        }
                    }
                }
            }
            '$' => self.dollar(false),
            '`' => self.backtick(),
            '|' => {
                self.flush();
                match self.peek(1) {
                    Some('|') => {
                        self.toks.push(Tok::Sep);
                        self.i += 2;
                    }
                    Some('&') => {
                        self.toks.push(Tok::Pipe);
                        self.i += 2;
                    }
                    _ => {
                        self.toks.push(Tok::Pipe);
                        self.i += 1;
                    }
                }
            }
            '&' => {
                self.flush();
                if self.peek(1) == Some('>') {
                    let op = if self.peek(2) == Some('>') {
                        "&>>"
                    } else {
                        "&>"
                    };
                    self.i += op.len();
                    self.toks.push(Tok::Redir(op.to_owned()));
                } else if self.peek(1) == Some('&') {
                    self.i += 2;
                    self.toks.push(Tok::Sep);
                } else {
                    self.i += 1;
                    self.toks.push(Tok::Background);
                }
            }
            ';' | '(' | ')' => {
                self.flush();
                self.toks.push(Tok::Sep);
                self.i += 1;
            }
            '<' | '>' if self.peek(1) == Some('(') => {
                self.i += 1;
                self.substitution(if ch == '<' { "<" } else { ">" });
            }
            '<' | '>' => {
                // `2>file`: a word of digits right before is the fd number.
                if self
                    .word
                    .as_deref()
                    .is_some_and(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()))
                {
                    self.word = None;
                }
                self.flush();
                let rest: String = self.text(self.i, self.i + 3);
                let op = ["<<<", "<<-", ">>", ">|", ">&", "<<", "<&", "<>", ">", "<"]
                    .into_iter()
                    .find(|op| rest.starts_with(op))
                    .unwrap_or(">");
                self.i += op.len();
                if op == "<<" || op == "<<-" {
                    self.want_delim = Some(op == "<<-");
                }
                self.toks.push(Tok::Redir(op.to_owned()));
            }
            _ => {
                self.push(ch);
                self.i += 1;
            }
        }
    }
}

struct Lexed {
    toks: Vec<Tok>,
    subs: Vec<String>,
    bodies: Vec<String>,
    code: String,
}

pub(super) fn parse(text: &str) -> Parsed {
    let lexer = Lexer {
        c: text.chars().collect(),
        i: 0,
        toks: Vec::new(),
        word: None,
        subs: Vec::new(),
        heredocs: Vec::new(),
        want_delim: None,
        bodies: Vec::new(),
        code: String::new(),
    };
    let Lexed {
        toks,
        subs: substitutions,
        bodies,
        code,
    } = lexer.run();
    let mut bodies = bodies.into_iter();
    let mut parsed = Parsed {
        pipelines: Vec::new(),
        substitutions,
        code,
    };
    let mut pipeline: Vec<Simple> = Vec::new();
    let mut simple = Simple::default();
    let mut redir: Option<String> = None;
    let end_simple = |simple: &mut Simple, pipeline: &mut Vec<Simple>| {
        let s = std::mem::take(simple);
        if !s.words.is_empty() || !s.redirects.is_empty() {
            pipeline.push(s);
        }
    };
    for tok in toks {
        match tok {
            Tok::Word(w) => match redir.take() {
                Some(op) => {
                    if op == "<<" || op == "<<-" {
                        simple.stdin_texts.extend(bodies.next());
                    } else if op == "<<<" {
                        simple.stdin_texts.push(w.clone());
                    }
                    simple.redirects.push((op, w));
                }
                None => simple.words.push(w),
            },
            Tok::Redir(op) => redir = Some(op),
            Tok::Pipe => end_simple(&mut simple, &mut pipeline),
            Tok::Sep => {
                end_simple(&mut simple, &mut pipeline);
                if !pipeline.is_empty() {
                    parsed.pipelines.push(std::mem::take(&mut pipeline));
                }
            }
            Tok::Background => {
                end_simple(&mut simple, &mut pipeline);
                for s in &mut pipeline {
                    s.background = true;
                }
                if !pipeline.is_empty() {
                    parsed.pipelines.push(std::mem::take(&mut pipeline));
                }
            }
        }
    }
    end_simple(&mut simple, &mut pipeline);
    if !pipeline.is_empty() {
        parsed.pipelines.push(pipeline);
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_splits_and_unquotes() {
        let p = parse("a 'b c' \"d $(e f)\" && g | h 2>&1 > out; i\\ j");
        let words: Vec<Vec<String>> = p
            .pipelines
            .iter()
            .flatten()
            .map(|s| s.words.clone())
            .collect();
        assert_eq!(
            words,
            vec![
                vec!["a", "b c", "d $(e f)"],
                vec!["g"],
                vec!["h"],
                vec!["i j"]
            ]
        );
        assert_eq!(p.substitutions, ["e f"]);
        assert_eq!(
            p.pipelines[1][1].redirects,
            [
                (">&".to_owned(), "1".to_owned()),
                (">".to_owned(), "out".to_owned())
            ]
        );
    }
}
