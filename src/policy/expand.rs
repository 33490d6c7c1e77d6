//! What the words of a command line stand for before the shell runs them:
//! variables and aliases defined earlier on the same line, and command
//! substitutions whose output is evident (`$(echo rm)`, `$(pwd)`, `$(find
//! build …)`).
//!
//! Everything here errs towards the dangerous reading: a prefix assignment
//! (`x=/ rm -rf $x`) counts as set, a `for` loop variable takes each of its
//! values, a single-quoted `'$x'` is substituted like an unquoted one, and a
//! substitution's output is split into words. A substitution whose output
//! cannot be told stays literal, and the rules treat it as unknown.

use std::collections::HashMap;

use super::programs::basename;
use super::shell::parse;
use super::wrappers::{is_assignment, strip_wrappers};

/// Most variants of one simple command that are analysed (each variable with
/// several values multiplies them).
const MAX_VARIANTS: usize = 16;

/// Variables and aliases defined so far on the command line.
#[derive(Debug, Default)]
pub(super) struct Scope {
    vars: HashMap<String, Vec<String>>,
    pub(super) aliases: HashMap<String, String>,
    /// Files written earlier on the line (keyed by [`super::scripts::file_key`]).
    pub(super) files: HashMap<String, Written>,
    /// Set after a `cd`/`pushd` that leaves the worktree: where the line now is.
    pub(super) outside_dir: Option<String>,
    /// Where the line is inside the worktree, relative to its root (`""`).
    pub(super) inside_dir: String,
}

/// What the line wrote into a file.
#[derive(Debug, Clone)]
pub(super) enum Written {
    /// Text visible on the line (a here-document, `echo` arguments).
    Script(String),
    /// A download, by the command that made it (e.g. "`curl`").
    Download(String),
}

/// One reading of a simple command: its words and what was substituted.
#[derive(Debug)]
pub(super) struct Variant {
    pub(super) words: Vec<String>,
    /// E.g. "`$x` is `/`"; empty when nothing was substituted.
    pub(super) notes: Vec<String>,
}

impl Scope {
    /// Records the variables and aliases `words` defines: assignments (alone
    /// or as a prefix), `export`/`declare`/`local`/`readonly`/`typeset`,
    /// `for NAME in …` and `alias NAME=VALUE`.
    pub(super) fn record(&mut self, words: &[String]) {
        let Some(first) = words.first() else {
            return;
        };
        match first.as_str() {
            "export" | "declare" | "typeset" | "local" | "readonly" => {
                for w in words[1..].iter().filter(|w| is_assignment(w)) {
                    self.assign(w);
                }
            }
            "for" if words.get(2).is_some_and(|w| w == "in") => {
                let values: Vec<String> = words[3..]
                    .iter()
                    .flat_map(|w| self.substitute_vars(w))
                    .map(|(v, _)| v)
                    .collect();
                self.vars.insert(words[1].clone(), values);
            }
            "alias" => {
                for w in &words[1..] {
                    if let Some((name, value)) = w.split_once('=') {
                        self.aliases.insert(name.to_owned(), value.to_owned());
                    }
                }
            }
            _ => {
                for w in words.iter().take_while(|w| is_assignment(w)) {
                    self.assign(w);
                }
            }
        }
    }

    /// Sets a variable (e.g. a positional parameter) to one value.
    pub(super) fn set(&mut self, name: &str, value: &str) {
        self.vars.insert(name.to_owned(), vec![value.to_owned()]);
    }

    fn assign(&mut self, word: &str) {
        let Some((name, value)) = word.split_once('=') else {
            return;
        };
        let name = name.trim_end_matches('+');
        let name = name.split('[').next().unwrap_or(name).to_owned();
        let values = self
            .substitute_vars(value)
            .into_iter()
            .map(|(v, _)| v)
            .collect();
        self.vars.insert(name, values);
    }

    /// Every reading of `words` (at most [`MAX_VARIANTS`]), the first being
    /// the one built from each variable's first value.
    pub(super) fn expand(&self, words: &[String]) -> Vec<Variant> {
        let mut variants = vec![Variant {
            words: Vec::new(),
            notes: Vec::new(),
        }];
        for word in words {
            let mut readings: Vec<(Vec<String>, Vec<String>)> = Vec::new();
            for (value, mut notes) in self.substitute_vars(word) {
                match substitution_output(&value) {
                    Some(out) => {
                        let shown = match value.strip_prefix('`') {
                            Some(_) => format!("$({})", value.trim_matches('`')),
                            None => value.clone(),
                        };
                        notes.push(format!("`{shown}` prints `{}`", out.join(" ")));
                        // Quoted, the output is one word; unquoted, several.
                        if out.len() > 1 {
                            readings.push((vec![out.join(" ")], notes.clone()));
                        }
                        readings.push((out, notes));
                    }
                    None if value != *word && value.contains(char::is_whitespace) => {
                        let split = value.split_whitespace().map(str::to_owned).collect();
                        readings.push((vec![value], notes.clone()));
                        readings.push((split, notes));
                    }
                    None => readings.push((vec![value], notes)),
                }
            }
            let mut next = Vec::new();
            for v in &variants {
                for (ws, notes) in &readings {
                    if next.len() == MAX_VARIANTS {
                        break;
                    }
                    let mut words = v.words.clone();
                    words.extend(ws.iter().cloned());
                    let mut all = v.notes.clone();
                    all.extend(notes.iter().cloned());
                    next.push(Variant { words, notes: all });
                }
            }
            variants = next;
        }
        variants
    }

    /// The first reading of one word (for redirect targets), as one word.
    pub(super) fn expand_one(&self, word: &str) -> String {
        self.expand(std::slice::from_ref(&word.to_owned()))
            .into_iter()
            .next()
            .map(|v| v.words.join(" "))
            .unwrap_or_else(|| word.to_owned())
    }

    /// `word` with `$NAME` / `${NAME}` of known variables replaced, once per
    /// combination of their values.
    fn substitute_vars(&self, word: &str) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = vec![(String::new(), Vec::new())];
        let mut rest = word;
        while let Some(pos) = rest.find('$') {
            let (before, after) = rest.split_at(pos);
            let after = &after[1..];
            let (name, len) = match after.strip_prefix('{') {
                Some(inner) => match inner.find('}') {
                    Some(e) => (&inner[..e], e + 2),
                    None => ("", 0),
                },
                None => {
                    let e = after
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(after.len());
                    (&after[..e], e)
                }
            };
            let values = (!name.is_empty()).then(|| self.vars.get(name)).flatten();
            for o in &mut out {
                o.0.push_str(before);
            }
            match values {
                Some(values) => {
                    let spelled = &rest[pos..pos + 1 + len];
                    let mut next = Vec::new();
                    for (text, notes) in &out {
                        for v in values {
                            if next.len() == MAX_VARIANTS {
                                break;
                            }
                            let mut notes = notes.clone();
                            notes.push(format!("`{spelled}` is `{v}`"));
                            next.push((format!("{text}{v}"), notes));
                        }
                    }
                    if next.is_empty() {
                        // A `for` over nothing: the variable stays as written.
                        for o in &mut out {
                            o.0.push_str(spelled);
                        }
                    } else {
                        out = next;
                    }
                    rest = &rest[pos + 1 + len..];
                }
                None => {
                    for o in &mut out {
                        o.0.push('$');
                    }
                    rest = after;
                }
            }
        }
        for o in &mut out {
            o.0.push_str(rest);
        }
        out
    }
}

/// The inner text of a word that is exactly one command substitution.
pub(super) fn whole_substitution(word: &str) -> Option<&str> {
    word.strip_prefix("$(")
        .and_then(|w| w.strip_suffix(')'))
        .or_else(|| {
            word.strip_prefix('`')
                .and_then(|w| w.strip_suffix('`'))
                .filter(|w| !w.contains('`'))
        })
}

/// The words a whole-word command substitution prints, when that is evident
/// from its last command (`echo`, `printf`, `pwd`, `mktemp`, `find`, …).
fn substitution_output(word: &str) -> Option<Vec<String>> {
    let inner = whole_substitution(word)?;
    let parsed = parse(inner);
    let last = parsed.pipelines.last()?.last()?;
    let (argv, _) = strip_wrappers(&last.words);
    produced_items(argv).map(|p| p.items)
}

/// What a command prints, one item per path or word.
pub(super) struct Produced {
    pub(super) items: Vec<String>,
    /// Where the items come from, for a denial's explanation.
    pub(super) source: String,
}

/// The items `argv` prints when that is evident; `None` for anything else.
/// Paths under a directory are read as `<dir>/x`; a search that does not
/// narrow its match (`find /`) also prints the directory itself.
pub(super) fn produced_items(argv: &[String]) -> Option<Produced> {
    let prog = basename(argv.first()?);
    let args = &argv[1..];
    let words = |text: &[String]| -> Vec<String> {
        text.iter()
            .flat_map(|a| {
                a.replace("\\n", "\n")
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let items = match prog {
        "echo" => {
            let start = args
                .iter()
                .position(|a| {
                    !(a.starts_with('-')
                        && a.len() > 1
                        && a[1..].chars().all(|c| "neE".contains(c)))
                })
                .unwrap_or(args.len());
            words(&args[start..])
        }
        "printf" => words(args.get(..1).unwrap_or_default()),
        "pwd" => vec![".".to_owned()],
        "mktemp" => vec!["/tmp/tmp.x".to_owned()],
        "git"
            if args.first().is_some_and(|a| a == "rev-parse")
                && args.iter().any(|a| a == "--show-toplevel") =>
        {
            vec![".".to_owned()]
        }
        "git"
            if args.first().is_some_and(|a| {
                ["ls-files", "diff", "status", "grep", "ls-tree"].contains(&a.as_str())
            }) =>
        {
            vec!["x".to_owned()]
        }
        "find" => {
            let parts = super::programs::find_parts(args);
            parts
                .starts
                .iter()
                .map(|s| {
                    // What a search outside the worktree finds can be anything there.
                    let outside = s.starts_with('/') || s.starts_with('~') || s.contains("..");
                    if parts.selective && !outside {
                        format!("{}/x", s.trim_end_matches('/'))
                    } else {
                        s.clone()
                    }
                })
                .collect()
        }
        "ls" | "grep" | "rg" | "fd" => {
            // Listing outside the worktree can print anything there.
            let outside: Vec<String> = args
                .iter()
                .filter(|a| a.starts_with('/') || a.starts_with('~') || a.starts_with(".."))
                .cloned()
                .collect();
            if outside.is_empty() {
                vec!["x".to_owned()]
            } else {
                outside
            }
        }
        _ => return None,
    };
    Some(Produced {
        items,
        source: format!("`{prog}`"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn variables_and_substitutions_expand() {
        let mut scope = Scope::default();
        scope.record(&w(&["x=/"]));
        scope.record(&w(&["for", "d", "in", "a", "$x"]));
        let v = scope.expand(&w(&["rm", "-rf", "${x}", "$d", "$unknown"]));
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].words, w(&["rm", "-rf", "/", "a", "$unknown"]));
        assert_eq!(v[1].words, w(&["rm", "-rf", "/", "/", "$unknown"]));
        assert_eq!(v[0].notes, ["`${x}` is `/`", "`$d` is `a`"]);
        let v = scope.expand(&w(&["$(echo rm)", "-rf", "`echo / x`", "$(cat f)"]));
        // Quoted and unquoted readings of a substitution printing two words.
        assert_eq!(v[0].words, w(&["rm", "-rf", "/ x", "$(cat f)"]));
        assert_eq!(v[1].words, w(&["rm", "-rf", "/", "x", "$(cat f)"]));
        assert_eq!(v.len(), 2);
    }
}
