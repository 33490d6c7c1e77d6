//! The secret values orch knows and keeps out of everything that leaves it
//! (tool results sent to the model, every record file, stage commits): the
//! process-wide registry ([`register_secrets`], read by [`known_secrets`])
//! and [`redact`]. A leaf, so the sandbox, git, the run record and the event
//! stream all take it from below; what fills the registry (the environment,
//! `~/.netrc`, the secret pipe) stays in `sandbox::secrets`.
//!
//! Invariant: a value shorter than [`MIN_SECRET_LEN`] is not registered —
//! redacting it would mangle ordinary text, and it reveals too little.

use std::io::Write;
use std::sync::OnceLock;

/// Shortest value treated as a secret.
pub const MIN_SECRET_LEN: usize = 8;

static REGISTRY: OnceLock<Vec<String>> = OnceLock::new();
/// Values added after start ([`add_secrets`]: MCP configuration's
/// `${VAR}` values), merged with the registry; each distinct set is kept for
/// the life of the process, as [`known_secrets`] hands out `'static` slices.
static MERGED: std::sync::RwLock<Option<&'static [String]>> = std::sync::RwLock::new(None);

/// Whether the value of the secret variable `name` is long enough to redact
/// ([`MIN_SECRET_LEN`]). A shorter non-empty value is not treated as a
/// secret — redacting an `ORCH_API_KEY` of `x` would mask every "x" orch
/// prints — and the first time a name is seen with one, a warning naming the
/// variable (never the value) goes to stderr.
pub fn redactable(name: &str, value: &str) -> bool {
    if value.len() >= MIN_SECRET_LEN {
        return true;
    }
    if value.is_empty() {
        return false;
    }
    static WARNED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let first = match WARNED.lock() {
        Ok(mut warned) if !warned.iter().any(|n| n == name) => {
            warned.push(name.to_owned());
            true
        }
        _ => false,
    };
    if first {
        // The status line `ui::status_line` writes, without importing `ui`.
        let msg = format!(
            "orch: warning: {name} is shorter than {MIN_SECRET_LEN} characters, so orch does not treat it as a secret and does not redact it from its output"
        );
        let _ = writeln!(std::io::stderr().lock(), "{}", crate::text::untrusted(&msg));
    }
    false
}

/// Registers the process's secret values (first call wins; later calls are
/// ignored and return false). Short and duplicate values are dropped.
pub fn register_secrets(values: impl IntoIterator<Item = String>) -> bool {
    let mut v: Vec<String> = values
        .into_iter()
        .filter(|s| s.len() >= MIN_SECRET_LEN)
        .collect();
    // Longest first: a secret that contains another is replaced whole.
    v.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
    v.dedup();
    REGISTRY.set(v).is_ok()
}

/// Every secret value registered at start (empty when nothing registered, as
/// in unit tests).
pub fn known_secrets() -> &'static [String] {
    if let Some(merged) = *MERGED.read().unwrap_or_else(|e| e.into_inner()) {
        return merged;
    }
    REGISTRY.get().map(Vec::as_slice).unwrap_or(&[])
}

/// Adds secret values found after start (a configuration's expanded
/// variables); short ones are dropped as by [`register_secrets`].
pub(crate) fn add_secrets(values: impl IntoIterator<Item = String>) {
    let new: Vec<String> = values
        .into_iter()
        .filter(|s| s.len() >= MIN_SECRET_LEN)
        .filter(|s| !known_secrets().contains(s))
        .collect();
    if new.is_empty() {
        return;
    }
    let mut merged = MERGED.write().unwrap_or_else(|e| e.into_inner());
    let mut v: Vec<String> = merged
        .unwrap_or_else(|| REGISTRY.get().map(Vec::as_slice).unwrap_or(&[]))
        .to_vec();
    v.extend(new);
    v.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
    v.dedup();
    *merged = Some(Vec::leak(v));
}

/// How the marker starts that [`crate::text`] puts where it cut a long field.
const CAP_MARKER: &str = crate::text::CUT_MARKER;

/// Shortest prefix of a secret that is still redacted when a field cap cut
/// the secret in half; shorter stubs reveal too little to matter.
const MIN_CUT_PREFIX: usize = 4;

/// Replaces every occurrence of each secret in `text`, and of every value
/// registered at start ([`known_secrets`]), with `[REDACTED]`.
///
/// Three spellings are caught: the secret as is, its JSON-escaped form (the
/// log and the transcript are JSON, and a secret with a quote, a backslash or
/// a control character is escaped there), and a prefix of it left just before
/// a `[… N more bytes …]` cap marker when capping cut through the secret.
pub(crate) fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_owned();
    let known = known_secrets();
    // A value shorter than a secret's minimum is not one: redacting it would
    // mangle ordinary text (an API key of `x` in every word with an "x").
    let long_enough = |s: &&String| s.len() >= MIN_SECRET_LEN;
    for s in secrets.iter().chain(known).filter(long_enough) {
        let escaped = json_escaped(s);
        for form in [s.as_str(), escaped.as_str()] {
            if out.contains(form) {
                out = out.replace(form, "[REDACTED]");
            }
        }
        if out.contains(CAP_MARKER) {
            out = redact_cut_prefixes(&out, s);
        }
    }
    out
}

/// `s` as it appears inside a JSON string literal.
fn json_escaped(s: &str) -> String {
    let quoted = serde_json::to_string(s).unwrap_or_default();
    quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .unwrap_or_default()
        .to_owned()
}

/// Redacts a prefix of `secret` that ends right at a cap marker.
fn redact_cut_prefixes(text: &str, secret: &str) -> String {
    let mut out = text.to_owned();
    let cuts: Vec<usize> = secret
        .char_indices()
        .map(|(i, _)| i)
        .filter(|&i| i >= MIN_CUT_PREFIX)
        .collect();
    for end in cuts.into_iter().rev() {
        let stub = format!("{}{CAP_MARKER}", &secret[..end]);
        if out.contains(&stub) {
            out = out.replace(&stub, &format!("[REDACTED]{CAP_MARKER}"));
        }
    }
    out
}
