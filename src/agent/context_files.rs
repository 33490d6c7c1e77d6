//! The files a stage's task names, shown in its first message (as Aider
//! adds files to the chat): a small model that is told "implement `median`
//! in solution.py" writes the file from that one line unless it sees the
//! docstring it is asked to implement.
//!
//! Which files: every path the task or the issue names — in backticks or
//! bare (`src/foo/bar.rs`, `solution.py`, `.env`; a `:12` line suffix and
//! trailing punctuation are dropped) — that is a regular file in the lane.
//! A word without a `.` or `/` counts only in backticks (`Makefile`).
//!
//! Never shown (each is recorded with its reason when the path exists):
//! - what `read_file` would refuse: a path outside the lane (`..`, an
//!   absolute path elsewhere, a symlink out — the same [`fence`]), a
//!   directory, a binary file (a NUL byte, not UTF-8);
//! - secret files: `.env` and its variants, key and credential files
//!   ([`secret_file`]), anything under `.git`, and the sandbox's secret
//!   paths (`deny`);
//! - a file over [`MAX_FILE_BYTES`] on disk (read it with `read_file`).
//!
//! Caps: [`FILE_CAP`] bytes of numbered text per file, [`TOTAL_CAP`] in all;
//! a file over its share is cut at a line boundary with a marker that says
//! how many lines and bytes were left out and that `read_file` gets the
//! rest. Known secret values are masked as in every tool result.

use std::path::{Path, PathBuf};

use crate::tools::fence::{self, Access};

/// Bytes of numbered text shown of one file.
pub(crate) const FILE_CAP: usize = 8 * 1024;
/// Bytes of numbered text shown of all named files together.
pub(crate) const TOTAL_CAP: usize = 24 * 1024;
/// A file larger than this on disk is not read (only named in the record).
pub(crate) const MAX_FILE_BYTES: u64 = 1 << 20;
/// Below this much room left in [`TOTAL_CAP`], a further file is not started.
const MIN_SHARE: usize = 512;
/// Path-like words looked up at most (one `stat` each; an issue naming
/// thousands gets the first ones).
const MAX_CANDIDATES: usize = 256;

/// One named file that was shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shown {
    /// The path relative to the lane root, `/`-separated.
    pub path: String,
    /// Its size on disk.
    pub bytes: u64,
    /// Bytes of numbered text the message holds for it.
    pub included: usize,
    /// Whether it was cut at its cap.
    pub truncated: bool,
}

/// The named files, as put into the first message and recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ContextFiles {
    /// The section for the first message (empty when nothing is shown).
    pub text: String,
    /// The files shown, in the order the text names them.
    pub shown: Vec<Shown>,
    /// Named paths that exist but were not shown, with the reason.
    pub skipped: Vec<(String, String)>,
}

/// The files that `texts` (the task, the issue) name and that exist in the
/// lane at `root` (canonical), read and cut to the caps. `deny` are paths
/// whose contents tools may not read (the sandbox's secret paths).
pub(crate) fn collect(root: &Path, texts: &[&str], deny: &[PathBuf]) -> ContextFiles {
    let mut out = ContextFiles::default();
    let mut body = String::new();
    let mut seen: Vec<String> = Vec::new();
    // Files left out for their size or for room: named in the text, so the
    // model knows to read them.
    let mut unshown: Vec<String> = Vec::new();
    let candidates = texts.iter().flat_map(|t| named_paths(t));
    for name in candidates.take(MAX_CANDIDATES) {
        let file = match vet(root, &name, deny) {
            Vet::Absent => continue,
            Vet::File(f) => f,
            // Named twice: recorded once.
            _ if out.skipped.iter().any(|(p, _)| *p == name) => continue,
            Vet::Refused(why) => {
                out.skipped.push((name, why));
                continue;
            }
            Vet::TooLarge(why) => {
                unshown.push(name.clone());
                out.skipped.push((name, why));
                continue;
            }
        };
        if seen.contains(&file.rel) {
            continue;
        }
        seen.push(file.rel.clone());
        let room = TOTAL_CAP.saturating_sub(body.len());
        if room < MIN_SHARE {
            unshown.push(file.rel.clone());
            out.skipped.push((
                file.rel,
                format!(
                    "the {} KB shown of named files are used up",
                    TOTAL_CAP / 1024
                ),
            ));
            continue;
        }
        match render(&file, FILE_CAP.min(room)) {
            Ok((section, shown)) => {
                body.push_str(&section);
                out.shown.push(shown);
            }
            Err(why) => out.skipped.push((file.rel, why)),
        }
    }
    if !out.shown.is_empty() {
        out.text = format!(
            "\n# Files the task names\n\nAs `read_file` shows them (numbered lines); they are in your worktree.\n{body}"
        );
        out.text = crate::secrets::redact(&out.text, &[]);
    }
    if !unshown.is_empty() {
        let names: Vec<String> = unshown.iter().map(|p| format!("`{p}`")).collect();
        out.text.push_str(&format!(
            "\nAlso named, not shown here (call read_file): {}\n",
            names.join(", ")
        ));
    }
    out
}

/// A named path that passed every check.
struct Vetted {
    abs: PathBuf,
    rel: String,
    bytes: u64,
}

enum Vet {
    /// Not a file in the lane (most words are not paths).
    Absent,
    /// It exists but may not be shown.
    Refused(String),
    /// A file too large to read here (`read_file` reads it in parts).
    TooLarge(String),
    File(Vetted),
}

/// Whether `name` is a file in the lane that may be shown.
fn vet(root: &Path, name: &str, deny: &[PathBuf]) -> Vet {
    let given = Path::new(name);
    let exists = |p: &Path| p.symlink_metadata().is_ok();
    let f = match fence::resolve(root, name, Access::Read) {
        Ok(f) => f,
        // Refused by the fence: say so only for a path that is there.
        Err(why) => {
            let there = if given.is_absolute() {
                exists(given)
            } else {
                exists(&root.join(given))
            };
            return if there {
                Vet::Refused(format!("read_file refuses it: {why}"))
            } else {
                Vet::Absent
            };
        }
    };
    let Ok(meta) = std::fs::metadata(&f.abs) else {
        return Vet::Absent;
    };
    if !meta.is_file() {
        // Directories (and sockets, fifos) are not shown, nor worth a note.
        return Vet::Absent;
    }
    if let Some(why) = secret_file(&f.rel) {
        return Vet::Refused(why);
    }
    if deny.iter().any(|d| f.abs.starts_with(d)) {
        return Vet::Refused("a secret path of the sandbox".to_owned());
    }
    if meta.len() > MAX_FILE_BYTES {
        return Vet::TooLarge(format!(
            "larger than {} KiB ({} bytes)",
            MAX_FILE_BYTES / 1024,
            meta.len()
        ));
    }
    Vet::File(Vetted {
        abs: f.abs,
        rel: f.rel,
        bytes: meta.len(),
    })
}

/// Why a lane path is a secret file that is never shown unasked: what the
/// bash policy calls a secret or startup path ([`crate::policy::secret_named`]:
/// under `.ssh`, `.aws`, `.gnupg`, `.netrc`, key files like `id_rsa`, …),
/// and besides `.env` files (not `.env.example` and the like), key stores
/// and credential files, and anything under `.git`. `read_file` still reads
/// them when the model asks (its output is redacted); they are only never
/// put into a prompt by orch itself.
pub(crate) fn secret_file(rel: &str) -> Option<String> {
    const NAMES: &[&str] = &[
        ".npmrc",
        ".pypirc",
        ".htpasswd",
        "credentials",
        "credentials.json",
    ];
    const KEY_EXTENSIONS: &[&str] = &[".pem", ".key", ".p12", ".pfx", ".jks", ".keystore"];
    const PUBLIC_ENV: &[&str] = &[".example", ".sample", ".template", ".dist"];
    if rel.split('/').any(|c| c == ".git") {
        return Some("a secret file (under `.git`)".to_owned());
    }
    if let Some(why) = crate::policy::secret_named(rel) {
        return Some(format!("a secret file: {why}"));
    }
    let name = rel.rsplit('/').next().unwrap_or(rel);
    let lower = name.to_ascii_lowercase();
    let env_file = (lower == ".env" || lower.starts_with(".env.") || lower.ends_with(".env"))
        && !PUBLIC_ENV.iter().any(|s| lower.ends_with(s));
    if env_file || NAMES.contains(&lower.as_str()) {
        return Some(format!("a secret file (`{name}`)"));
    }
    KEY_EXTENSIONS
        .iter()
        .find(|e| lower.ends_with(*e))
        .map(|e| format!("a secret file (a `{e}` key file)"))
}

/// The file's section: a heading and its numbered lines within `cap` bytes,
/// cut with a marker; `Err` when it is binary or cannot be read.
fn render(file: &Vetted, cap: usize) -> Result<(String, Shown), String> {
    let bytes = std::fs::read(&file.abs).map_err(|e| format!("could not read it: {e}"))?;
    if bytes.contains(&0) {
        return Err("binary (it contains NUL bytes)".to_owned());
    }
    let text = String::from_utf8(bytes).map_err(|_| "binary (not valid UTF-8)".to_owned())?;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut numbered = String::new();
    let mut shown_lines = 0usize;
    let mut shown_bytes = 0usize;
    for (i, line) in lines.iter().enumerate() {
        let entry = crate::tools::numbered_line(i as u64 + 1, line);
        if numbered.len() + entry.len() > cap {
            break;
        }
        numbered.push_str(&entry);
        shown_lines += 1;
        shown_bytes += line.len();
    }
    let truncated = shown_lines < lines.len();
    let mut section = format!(
        "\n## {} ({} line{}, {} bytes)\n\n",
        file.rel,
        lines.len(),
        if lines.len() == 1 { "" } else { "s" },
        text.len()
    );
    if lines.is_empty() {
        section.push_str("(empty file)\n");
    }
    section.push_str(&numbered);
    if truncated {
        section.push_str(&format!(
            "[… cut here: {} more lines ({} bytes) not shown; call read_file with path `{}` and offset={} for the rest …]\n",
            lines.len() - shown_lines,
            text.len() - shown_bytes,
            file.rel,
            shown_lines + 1
        ));
    }
    let shown = Shown {
        path: file.rel.clone(),
        bytes: file.bytes,
        included: numbered.len(),
        truncated,
    };
    Ok((section, shown))
}

/// The paths `text` names, in order, each once: words in backticks, and
/// bare words that hold a `/` or a `.` between name characters.
pub(crate) fn named_paths(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |word: &str, quoted: bool| {
        if let Some(p) = as_path(word, quoted)
            && !out.contains(&p)
        {
            out.push(p);
        }
    };
    // Backticked spans first keep their order with the bare words: walk the
    // text once, toggling at each backtick.
    for (i, part) in text.split('`').enumerate() {
        let quoted = i % 2 == 1;
        if quoted && !part.contains(char::is_whitespace) {
            push(part, true);
            continue;
        }
        for word in part.split(is_separator) {
            push(word, false);
        }
    }
    out
}

/// Characters that end a bare word.
fn is_separator(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '\'' | '"'
                | '('
                | ')'
                | '['
                | ']'
                | '{'
                | '}'
                | '<'
                | '>'
                | ','
                | ';'
                | '|'
                | '*'
                | '='
        )
}

/// `word` as a path, if it looks like one.
fn as_path(word: &str, quoted: bool) -> Option<String> {
    let w = word.trim_end_matches(['.', ',', ':', ';', '!', '?']);
    // `src/a.rs:12` and `src/a.rs:12:5` name the file.
    let w = match w.split_once(':') {
        Some((p, rest)) if rest.chars().all(|c| c.is_ascii_digit() || c == ':') => p,
        Some(_) => return None,
        None => w,
    };
    let w = w.strip_prefix("./").unwrap_or(w);
    if w.is_empty() || w.len() > 1024 || w.contains("://") || w.starts_with('-') {
        return None;
    }
    let path_chars = w
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '@' | '+' | '~'));
    if !path_chars {
        return None;
    }
    let dotted = w
        .char_indices()
        .any(|(i, c)| c == '.' && w[i + 1..].starts_with(|n: char| n.is_alphanumeric()));
    (quoted || w.contains('/') || dotted).then(|| w.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_in_backticks_and_bare_are_found_in_order_once() {
        let text = "Implement `median` in solution.py (see src/stats/mod.rs:12, and `Makefile`).\n\
                    Also ./solution.py, https://example.com/x.py, e.g. this; --flag.txt and `.env`.";
        assert_eq!(
            named_paths(text),
            [
                "median",
                "solution.py",
                "src/stats/mod.rs",
                "Makefile",
                "e.g",
                ".env",
            ]
        );
    }

    #[test]
    fn secret_files_are_named_and_public_ones_are_not() {
        for p in [
            ".env",
            "api/.env.local",
            "prod.env",
            "certs/server.key",
            "deploy/id_ed25519",
            ".git/config",
            "home/.aws/credentials",
            ".npmrc",
            "ci/.netrc",
            "deploy/.ssh/config",
        ] {
            assert!(secret_file(p).is_some(), "{p}");
        }
        for p in [
            ".env.example",
            "solution.py",
            "src/env.rs",
            "keys.md",
            "id_rsa.pub",
        ] {
            assert_eq!(secret_file(p), None, "{p}");
        }
    }

    #[test]
    fn the_demo_issue_names_no_file_of_its_repository() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo");
        let issue = std::fs::read_to_string(root.join("ISSUE.md")).unwrap();
        let c = collect(&root.join("repo").canonicalize().unwrap(), &[&issue], &[]);
        assert_eq!(c, ContextFiles::default(), "{:?}", named_paths(&issue));
    }

    fn lane(files: &[(&str, &[u8])]) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        for (p, body) in files {
            let abs = root.join(p);
            std::fs::create_dir_all(abs.parent().unwrap()).unwrap();
            std::fs::write(abs, body).unwrap();
        }
        (d, root)
    }

    #[test]
    fn named_files_are_numbered_and_refusals_recorded() {
        let (_d, root) = lane(&[
            ("solution.py", b"def f():\n    \"\"\"Doc.\"\"\"\n"),
            (".env", b"TOKEN=abc\n"),
            ("blob.bin", b"a\0b"),
            ("src/x.rs", b"fn x() {}"),
        ]);
        let c = collect(
            &root,
            &["Fix solution.py and `src/x.rs`; read .env, blob.bin, src/ and ../up.txt"],
            &[],
        );
        assert!(
            c.text
                .contains("\n## solution.py (2 lines, 24 bytes)\n\n     1\tdef f():\n     2\t    \"\"\"Doc.\"\"\"\n"),
            "{}",
            c.text
        );
        assert!(c.text.contains("     1\tfn x() {}\n"), "{}", c.text);
        assert!(!c.text.contains("TOKEN"), "{}", c.text);
        let paths: Vec<&str> = c.shown.iter().map(|s| s.path.as_str()).collect();
        assert_eq!(paths, ["solution.py", "src/x.rs"]);
        let skipped: Vec<&str> = c.skipped.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(skipped, [".env", "blob.bin"], "{:?}", c.skipped);
        assert!(c.skipped[1].1.contains("binary"));
    }

    #[test]
    fn a_big_file_is_cut_at_its_cap_and_the_total_is_bounded() {
        let big: String = (0..3000).map(|i| format!("line number {i}\n")).collect();
        let files: Vec<(String, Vec<u8>)> = (0..5)
            .map(|i| (format!("f{i}.txt"), big.clone().into_bytes()))
            .collect();
        let refs: Vec<(&str, &[u8])> = files
            .iter()
            .map(|(p, b)| (p.as_str(), b.as_slice()))
            .collect();
        let (_d, root) = lane(&refs);
        let c = collect(&root, &["f0.txt f1.txt f2.txt f3.txt f4.txt"], &[]);
        assert!(
            c.shown
                .iter()
                .all(|s| s.truncated && s.included <= FILE_CAP)
        );
        let total: usize = c.shown.iter().map(|s| s.included).sum();
        assert!(total <= TOTAL_CAP, "{total}");
        assert_eq!(c.shown.len(), 3);
        assert!(c.skipped.iter().all(|(_, why)| why.contains("used up")));
        assert!(
            c.text.contains("more lines (")
                && c.text
                    .contains("call read_file with path `f0.txt` and offset="),
            "{}",
            &c.text[..400]
        );
        assert!(
            c.text
                .contains("Also named, not shown here (call read_file): `f3.txt`, `f4.txt`")
        );
    }
}
