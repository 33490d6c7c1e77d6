//! What orch knows about a model server before its first request: the
//! server's kind (llama.cpp, vLLM, Ollama, another OpenAI-compatible one),
//! learned from its `GET /models` answer, and the context window the server
//! reported for a model, so nothing is asked twice.
//!
//! Two layers. In the process: the `/models` listing the preflight read (so
//! the client does not ask for it again) and every answer learned. On disk,
//! once the command line [`open`]s it: `servers.json` in the user's cache
//! dir, one entry per base URL and model (kind, window, when it was
//! learned), valid for [`CACHE_TTL`]; a second run within that time sends
//! no probe at all. The file holds no key and nothing from a request but
//! the base URL and the model name. A file that cannot be read as the cache
//! is reported (by the caller) and treated as empty, never fatal; the next
//! answer learned rewrites it whole (temp file + rename, so a reader never
//! sees half a file; two processes writing at once lose one entry at worst,
//! which is asked again next time).

use crate::llm::Provider;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a learned answer is used without asking the server again. A
/// server restarted with another window within it is corrected by its own
/// context-length error (the window it names is learned then).
pub(crate) const CACHE_TTL: Duration = Duration::from_secs(60 * 60);

/// The cache file's name in the user's cache dir.
pub(crate) const CACHE_FILE: &str = "servers.json";

/// Entries kept at most (the oldest go first): the file stays small.
const MAX_ENTRIES: usize = 200;

/// The cache file's format number.
const FORMAT: u32 = 1;

/// The kind of an OpenAI-compatible server, which decides what is asked of
/// it for the context window ([`probes_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ServerKind {
    /// llama.cpp's server (`Server: llama.cpp`, or `owned_by: "llamacpp"`).
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
    /// vLLM (`owned_by: "vllm"`, or a `max_model_len` in the list).
    #[serde(rename = "vllm")]
    Vllm,
    /// Ollama (`owned_by` is a model namespace such as `library`, or every
    /// id carries a `:tag`).
    #[serde(rename = "ollama")]
    Ollama,
    /// A server that lists its models in none of those shapes (OpenAI,
    /// DeepSeek, LiteLLM, OpenRouter, …): it reports no window.
    #[serde(rename = "other")]
    Other,
    /// No model list (no `/models`, or it did not answer in time).
    #[serde(rename = "unknown")]
    Unknown,
}

/// One request that may tell a server's context window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// llama.cpp's `GET {root}/props`.
    Props,
    /// Ollama's `POST {root}/api/show`.
    ApiShow,
}

/// The probes worth sending to a server of `kind`, sent together: none
/// when the `/models` answer already said all there is (vLLM's
/// `max_model_len`) or the server has no such endpoint (OpenAI and other
/// services), one for llama.cpp and Ollama, and both (in parallel) only
/// when the kind could not be told. These are OpenAI-compatible servers'
/// endpoints: a provider with its own API (Anthropic) asks none of them.
pub(crate) fn probes_for(kind: ServerKind) -> &'static [Probe] {
    match kind {
        ServerKind::LlamaCpp => &[Probe::Props],
        ServerKind::Ollama => &[Probe::ApiShow],
        ServerKind::Unknown => &[Probe::Props, Probe::ApiShow],
        ServerKind::Vllm | ServerKind::Other => &[],
    }
}

/// Whether a client speaking `provider` probes for the window at all: the
/// probes are OpenAI-compatible servers' endpoints (Chat Completions and
/// Responses are both served by them: Ollama, vLLM, llama.cpp); Anthropic's
/// API has none of them and is asked nothing.
pub(crate) fn has_probes(provider: Provider) -> bool {
    match provider {
        Provider::OpenAiChat | Provider::OpenAiResponses => true,
        Provider::Anthropic => false,
    }
}

/// What a server's `GET /models` answer said: its kind, and each listed
/// model's `max_model_len` where it gives one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listing {
    /// The server's kind.
    pub(crate) kind: ServerKind,
    /// The listed model ids with their `max_model_len`, in list order.
    pub(crate) models: Vec<(String, Option<u64>)>,
}

impl Listing {
    /// The listing of a server that gave no model list (`Server` header
    /// aside, which still tells llama.cpp).
    pub(crate) fn unlisted(server_header: Option<&str>) -> Listing {
        Listing {
            kind: kind_from_header(server_header).unwrap_or(ServerKind::Unknown),
            models: Vec::new(),
        }
    }

    /// Reads a `/models` answer (`None` for a body that is no model list)
    /// and the `Server` header that came with it.
    pub(crate) fn read(server_header: Option<&str>, body: &Value) -> Option<Listing> {
        let data = body.get("data")?.as_array()?;
        let models: Vec<(String, Option<u64>)> = data
            .iter()
            .filter_map(|m| {
                let id = m.get("id")?.as_str()?.to_owned();
                let len = m
                    .get("max_model_len")
                    .and_then(Value::as_u64)
                    .filter(|n| *n > 0);
                Some((id, len))
            })
            .collect();
        let owned = |name: &str| data.iter().any(|m| m["owned_by"] == name);
        let tagged = !models.is_empty()
            && models
                .iter()
                .all(|(id, _)| id.contains(':') && !id.starts_with("ft:"));
        let kind = kind_from_header(server_header).unwrap_or(if owned("llamacpp") {
            ServerKind::LlamaCpp
        } else if owned("vllm") || models.iter().any(|(_, len)| len.is_some()) {
            ServerKind::Vllm
        } else if owned("library") || owned("ollama") || tagged {
            ServerKind::Ollama
        } else {
            ServerKind::Other
        });
        Some(Listing { kind, models })
    }

    /// The window the list gives `model`: its entry's `max_model_len`, else
    /// the only entry's (vLLM serves one model under any name it was given).
    pub(crate) fn window_of(&self, model: &str) -> Option<u64> {
        match self.models.iter().find(|(id, _)| id == model) {
            Some((_, len)) => *len,
            None if self.models.len() == 1 => self.models[0].1,
            None => None,
        }
    }
}

fn kind_from_header(server: Option<&str>) -> Option<ServerKind> {
    server
        .filter(|s| s.to_ascii_lowercase().contains("llama.cpp"))
        .map(|_| ServerKind::LlamaCpp)
}

/// One learned answer, as the file keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Entry {
    /// The base URL, without a trailing `/`.
    pub(crate) base_url: String,
    /// The model name asked for.
    pub(crate) model: String,
    /// The server's kind.
    pub(crate) kind: ServerKind,
    /// The context window it reported; `None`: it reports none.
    pub(crate) window: Option<u64>,
    /// When it was learned, seconds since the Unix epoch.
    pub(crate) learned: u64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CacheFile {
    format: u32,
    entries: Vec<Entry>,
}

#[derive(Default)]
struct Memo {
    /// The disk file, once [`open`]ed.
    file: Option<PathBuf>,
    /// Learned answers (from the file and from this process).
    entries: Vec<Entry>,
    /// `/models` listings read in this process, by base URL.
    listings: BTreeMap<String, Listing>,
}

static MEMO: Mutex<Memo> = Mutex::new(Memo {
    file: None,
    entries: Vec::new(),
    listings: BTreeMap::new(),
});

fn memo() -> MutexGuard<'static, Memo> {
    MEMO.lock().unwrap_or_else(|e| e.into_inner())
}

fn key(base_url: &str) -> &str {
    base_url.trim_end_matches('/')
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Whether an answer learned at `learned` is still used at `now`: younger
/// than [`CACHE_TTL`], and not from the future (a clock set back).
fn is_fresh(learned: u64, now: u64) -> bool {
    learned <= now && now - learned < CACHE_TTL.as_secs()
}

/// Uses `path` as this process's cache file (the first call wins) and reads
/// its fresh entries. A missing file is an empty cache; one that cannot be
/// read as the cache comes back as `Err` with the reason, for the caller to
/// warn about, and is treated as empty.
pub(crate) fn open(path: PathBuf) -> Result<(), String> {
    let mut memo = memo();
    if memo.file.is_some() {
        return Ok(());
    }
    let read = read_file(&path);
    memo.file = Some(path);
    let entries = read?;
    let now = now_secs();
    memo.entries
        .extend(entries.into_iter().filter(|e| is_fresh(e.learned, now)));
    Ok(())
}

fn read_file(path: &Path) -> Result<Vec<Entry>, String> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.to_string()),
    };
    let file: CacheFile = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    if file.format != FORMAT {
        return Err(format!("format {} (this orch reads {FORMAT})", file.format));
    }
    Ok(file.entries)
}

/// The fresh answer learned for `model` at `base_url`, if any: `Some(None)`
/// means the server is known to report no window.
pub(crate) fn fresh(base_url: &str, model: &str) -> Option<Entry> {
    let now = now_secs();
    memo()
        .entries
        .iter()
        .find(|e| e.base_url == key(base_url) && e.model == model && is_fresh(e.learned, now))
        .cloned()
}

/// The `/models` listing of `base_url` read in this process, if any.
pub(crate) fn listing(base_url: &str) -> Option<Listing> {
    memo().listings.get(key(base_url)).cloned()
}

/// Keeps what `base_url`'s `/models` answer said, for the client's probe.
pub(crate) fn note_listing(base_url: &str, listing: Listing) {
    memo().listings.insert(key(base_url).to_owned(), listing);
}

/// Keeps what was learned about `model` at `base_url`, and writes the cache
/// file when one is [`open`]: the other entries of the file as it is now
/// (other processes may have added some), minus the stale ones, plus this.
/// Failing to write is logged, never an error.
pub(crate) fn remember(base_url: &str, model: &str, kind: ServerKind, window: Option<u64>) {
    let entry = Entry {
        base_url: key(base_url).to_owned(),
        model: model.to_owned(),
        kind,
        window,
        learned: now_secs(),
    };
    let mut memo = memo();
    let same = |e: &Entry| e.base_url == entry.base_url && e.model == entry.model;
    memo.entries.retain(|e| !same(e));
    memo.entries.push(entry.clone());
    let Some(path) = memo.file.clone() else {
        return;
    };
    // Held while writing: this process's writers queue up.
    let now = entry.learned;
    let mut entries: Vec<Entry> = read_file(&path)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| !same(e) && is_fresh(e.learned, now))
        .collect();
    entries.push(entry);
    let excess = entries.len().saturating_sub(MAX_ENTRIES);
    entries.drain(..excess);
    if let Err(e) = write_file(
        &path,
        &CacheFile {
            format: FORMAT,
            entries,
        },
    ) {
        tracing::warn!(path = %path.display(), error = %e, "failed to write the server cache");
    }
}

fn write_file(path: &Path, file: &CacheFile) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut bytes = serde_json::to_vec_pretty(file).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(&bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_kind_is_read_from_the_models_answer_and_the_server_header() {
        let read = |header: Option<&str>, body: Value| Listing::read(header, &body).unwrap().kind;
        let llama = json!({"object": "list", "data": [{"id": "q.gguf", "owned_by": "llamacpp"}]});
        assert_eq!(read(None, llama), ServerKind::LlamaCpp);
        let bare = json!({"data": [{"id": "q.gguf"}]});
        assert_eq!(read(Some("llama.cpp"), bare.clone()), ServerKind::LlamaCpp);
        assert_eq!(read(None, bare), ServerKind::Other);
        let vllm = json!({"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 8192}]});
        assert_eq!(read(None, vllm), ServerKind::Vllm);
        let ollama = json!({"data": [{"id": "qwen2.5-coder:1.5b", "owned_by": "library"}]});
        assert_eq!(read(None, ollama), ServerKind::Ollama);
        let user = json!({"data": [{"id": "me/coder:q4", "owned_by": "me"}]});
        assert_eq!(read(None, user), ServerKind::Ollama);
        let openai = json!({"data": [
            {"id": "gpt-4o-mini", "owned_by": "system"},
            {"id": "ft:gpt-4o-mini:org::abc", "owned_by": "user-1"}]});
        assert_eq!(read(None, openai), ServerKind::Other);
        assert_eq!(Listing::read(None, &json!({"error": "no"})), None);
        assert_eq!(Listing::unlisted(None).kind, ServerKind::Unknown);
        assert_eq!(
            Listing::unlisted(Some("llama.cpp")).kind,
            ServerKind::LlamaCpp
        );
    }

    #[test]
    fn each_kind_gets_only_its_own_probes() {
        assert_eq!(probes_for(ServerKind::LlamaCpp), [Probe::Props]);
        assert_eq!(probes_for(ServerKind::Ollama), [Probe::ApiShow]);
        assert!(probes_for(ServerKind::Vllm).is_empty());
        assert!(probes_for(ServerKind::Other).is_empty());
        assert_eq!(
            probes_for(ServerKind::Unknown),
            [Probe::Props, Probe::ApiShow]
        );
    }

    #[test]
    fn anthropic_is_sent_no_probe() {
        assert!(!has_probes(Provider::Anthropic));
        assert!(has_probes(Provider::OpenAiChat));
        assert!(has_probes(Provider::OpenAiResponses));
    }

    #[test]
    fn a_listing_gives_the_named_models_window_or_the_only_ones() {
        let body = json!({"data": [{"id": "a", "max_model_len": 8192}, {"id": "b"}]});
        let listing = Listing::read(None, &body).unwrap();
        assert_eq!(listing.window_of("a"), Some(8192));
        assert_eq!(listing.window_of("b"), None);
        assert_eq!(listing.window_of("c"), None);
        let one = Listing::read(None, &json!({"data": [{"id": "a", "max_model_len": 4096}]}));
        assert_eq!(one.unwrap().window_of("served-as"), Some(4096));
    }

    #[test]
    fn answers_expire_and_never_come_from_the_future() {
        let ttl = CACHE_TTL.as_secs();
        assert!(is_fresh(1000, 1000));
        assert!(is_fresh(1000, 1000 + ttl - 1));
        assert!(!is_fresh(1000, 1000 + ttl));
        assert!(!is_fresh(2000, 1000));
    }

    #[test]
    fn the_file_is_read_back_and_a_corrupt_one_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join(CACHE_FILE);
        assert_eq!(read_file(&path), Ok(Vec::new()), "missing: empty");
        let entry = Entry {
            base_url: "http://h/v1".into(),
            model: "m".into(),
            kind: ServerKind::LlamaCpp,
            window: Some(4096),
            learned: 7,
        };
        let file = CacheFile {
            format: FORMAT,
            entries: vec![entry.clone()],
        };
        write_file(&path, &file).unwrap();
        assert_eq!(read_file(&path), Ok(vec![entry]));
        for bad in [
            "{not json",
            r#"{"format": 99, "entries": []}"#,
            r#"{"format": 1, "entries": [{"kind": "x"}]}"#,
        ] {
            std::fs::write(&path, bad).unwrap();
            assert!(read_file(&path).is_err(), "{bad}");
        }
    }
}
