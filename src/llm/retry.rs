//! When to retry a model request, and how long to wait.
//!
//! The schedule (documented in `docs/model-client.md`):
//! - only transient failures are retried: HTTP 408, 409, 429 and 5xx,
//!   connection failures, timeouts, a stream that stalls (no `data` line for
//!   `stream_idle_timeout`) or is cut before it ends, and an error object sent
//!   inside a stream;
//! - retry `n` (0-based) waits `Retry-After` when the server sent one, capped
//!   at `retry_max_delay`; otherwise a random delay in
//!   `[c/2, c]` with `c = min(retry_max_delay, retry_base_delay * 2^n)`
//!   ("equal jitter");
//! - at most `max_retries` retries, and no retry whose wait would end more than
//!   `retry_max_total` after the first attempt started; the client also
//!   retries a timeout or a stall only once and stops at `request_deadline`;
//! - a failure whose body shows the request is invalid
//!   (`is_deterministic_message`) is retried at most once, whatever its
//!   status.
//!
//! Also here, as the one classifier of error bodies: whether a body says the
//! request did not fit the context window ([`is_context_length_message`]) and
//! which window it names (`context_window_in_message`).

use reqwest::header::HeaderValue;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// The retry bounds of one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// First backoff ceiling; doubled on every retry.
    pub base_delay: Duration,
    /// Cap on one wait (backoff or `Retry-After`).
    pub max_delay: Duration,
    /// Cap on the time from the first attempt's start to the last retry's start.
    pub max_total: Duration,
}

/// Why the next retry will not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUp {
    /// `max_retries` retries were made.
    Attempts,
    /// The wait would pass `max_total`.
    TotalTime,
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based), or why there is none,
    /// `elapsed` after the first attempt started.
    pub fn next_delay(
        &self,
        retry: u32,
        elapsed: Duration,
        retry_after: Option<Duration>,
    ) -> Result<Duration, GiveUp> {
        if retry >= self.max_retries {
            return Err(GiveUp::Attempts);
        }
        let delay = match retry_after {
            Some(after) => after.min(self.max_delay),
            None => backoff(retry, self.base_delay, self.max_delay),
        };
        if elapsed.saturating_add(delay) > self.max_total {
            return Err(GiveUp::TotalTime);
        }
        Ok(delay)
    }
}

/// Backoff before retry number `attempt + 1`: equal jitter over
/// `min(max, base * 2^attempt)`, i.e. between half and all of it.
pub fn backoff(attempt: u32, base: Duration, max: Duration) -> Duration {
    let ceiling = base
        .saturating_mul(2u32.saturating_pow(attempt.min(30)))
        .min(max);
    let half = ceiling / 2;
    let span = (ceiling - half).as_nanos() as u64;
    let jitter = if span == 0 {
        0
    } else {
        random_u64() % (span + 1)
    };
    half + Duration::from_nanos(jitter)
}

/// Cheap randomness without a dependency: `RandomState` is seeded per process
/// and advanced per instance, which is plenty for spreading retries.
fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// `Retry-After` in seconds (the HTTP-date form is not used by model servers).
pub fn parse_retry_after(value: &HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    text.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| Duration::from_secs_f64(s.min(86_400.0)))
}

/// Phrases servers use when a request does not fit the context window
/// (OpenAI, vLLM, llama.cpp, Ollama, LiteLLM, Anthropic-compatible proxies).
const CONTEXT_LENGTH_MARKERS: &[&str] = &[
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "context size",
    "too many tokens",
    "prompt is too long",
    "input is too long",
    "exceeds the available context",
    "exceed_context_size",
];

/// True when an error body says the request does not fit the context window.
/// Only meaningful for 400/413/422 answers (a 429 "too many tokens per
/// minute" is a rate limit).
pub fn is_context_length_message(body: &str) -> bool {
    let lower = body.to_ascii_lowercase();
    CONTEXT_LENGTH_MARKERS.iter().any(|m| lower.contains(m))
}

/// JSON keys under which servers put the window in a context-length error
/// (llama.cpp: `n_ctx`; vLLM and others: `max_model_len`, …).
const WINDOW_KEYS: &[&str] = &["n_ctx", "max_model_len", "context_length", "context_window"];

/// Phrases after which a context-length message names the window, each
/// followed (within a few characters) by the number.
const WINDOW_PHRASES: &[&str] = &[
    "maximum context length is",
    "context length is",
    "context length of",
    "context window of",
    "context window is",
    "context size of",
    "context size is",
    "n_ctx",
    "max_model_len",
    "tokens >",
];

/// How far after a phrase its number may start (`n_ctx` 4096, `n_ctx = 4096`,
/// `maximum context length is 8192 tokens`).
const WINDOW_NUMBER_REACH: usize = 12;

/// The context window a context-length error names, in tokens: a
/// [`WINDOW_KEYS`] field of a JSON body, else the number after one of
/// [`WINDOW_PHRASES`] in its text. `None` when it names none.
pub(crate) fn context_window_in_message(body: &str) -> Option<u64> {
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(body)
        && let Some(n) = window_field(&json)
    {
        return Some(n);
    }
    let lower = body.to_ascii_lowercase();
    WINDOW_PHRASES
        .iter()
        .filter_map(|phrase| {
            let at = lower.find(phrase)? + phrase.len();
            number_near(&lower[at..]).map(|n| (at, n))
        })
        .min_by_key(|(at, _)| *at)
        .map(|(_, n)| n)
}

fn window_field(v: &serde_json::Value) -> Option<u64> {
    match v {
        serde_json::Value::Object(map) => WINDOW_KEYS
            .iter()
            .find_map(|k| map.get(*k).and_then(serde_json::Value::as_u64))
            .filter(|n| *n > 0)
            .or_else(|| map.values().find_map(window_field)),
        serde_json::Value::Array(items) => items.iter().find_map(window_field),
        // A message string may itself hold the number ("… n_ctx: 4096").
        serde_json::Value::String(s) if s.len() < 4096 && !s.trim_start().starts_with('{') => {
            let lower = s.to_ascii_lowercase();
            WINDOW_PHRASES.iter().find_map(|phrase| {
                let at = lower.find(phrase)? + phrase.len();
                number_near(&lower[at..])
            })
        }
        _ => None,
    }
}

/// The first positive integer starting within [`WINDOW_NUMBER_REACH`]
/// bytes of `text`, skipping only separators (`` ` ``, `:`, `=`, `"`, spaces).
fn number_near(text: &str) -> Option<u64> {
    let start = text
        .char_indices()
        .take_while(|(i, _)| *i <= WINDOW_NUMBER_REACH)
        .find(|(_, c)| !matches!(c, ' ' | '`' | ':' | '=' | '"' | '\'' | '(' | '\\'))
        .map(|(i, _)| i)?;
    let digits: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '_')
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse::<u64>().ok().filter(|n| *n > 0)
}

/// Phrases of an error body that show the request itself is wrong (a
/// validation error), so sending it again cannot help — whatever the status
/// (llama-cpp-python answers a schema violation with HTTP 500).
const DETERMINISTIC_MARKERS: &[&str] = &[
    "validation error",
    "input should be",
    "field required",
    "is not a valid",
    "extra inputs are not permitted",
    "unexpected keyword argument",
    "missing required",
    "invalid_request_error",
    "must be a string",
    "is not of type",
];

/// True when an error body says the request is invalid in itself (see
/// [`DETERMINISTIC_MARKERS`]): such a failure is retried at most once.
pub(crate) fn is_deterministic_message(body: &str) -> bool {
    let lower = body.to_ascii_lowercase();
    DETERMINISTIC_MARKERS.iter().any(|m| lower.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(1);
        for attempt in 0..12 {
            let ceiling = (base * 2u32.pow(attempt.min(20))).min(max);
            let d = backoff(attempt, base, max);
            assert!(
                d >= ceiling / 2 && d <= ceiling,
                "attempt {attempt}: {d:?} vs {ceiling:?}"
            );
        }
        assert_eq!(backoff(3, Duration::ZERO, max), Duration::ZERO);
        assert!(backoff(u32::MAX, base, max) <= max);
    }

    #[test]
    fn policy_bounds_attempts_and_total_time() {
        let p = RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(30),
            max_total: Duration::from_secs(10),
        };
        let d = p.next_delay(0, Duration::ZERO, None).unwrap();
        assert!(d >= Duration::from_millis(50) && d <= Duration::from_millis(100));
        assert_eq!(p.next_delay(2, Duration::ZERO, None), Err(GiveUp::Attempts));
        // Retry-After is honoured, capped at max_delay …
        assert_eq!(
            p.next_delay(1, Duration::ZERO, Some(Duration::from_secs(3))),
            Ok(Duration::from_secs(3))
        );
        let capped = RetryPolicy {
            max_delay: Duration::from_secs(2),
            ..p
        };
        assert_eq!(
            capped.next_delay(0, Duration::ZERO, Some(Duration::from_secs(60))),
            Ok(Duration::from_secs(2))
        );
        // … and no wait may end past max_total.
        assert_eq!(
            p.next_delay(1, Duration::from_secs(8), Some(Duration::from_secs(3))),
            Err(GiveUp::TotalTime)
        );
    }

    #[test]
    fn retry_after_parses_seconds() {
        assert_eq!(
            parse_retry_after(&HeaderValue::from_static("2")),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            parse_retry_after(&HeaderValue::from_static(" 0.5 ")),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_retry_after(&HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT")),
            None
        );
    }

    #[test]
    fn context_length_messages_are_recognised() {
        for body in [
            r#"{"error":{"code":"context_length_exceeded","message":"x"}}"#,
            "This model's maximum context length is 8192 tokens. However, you requested 9000",
            "Requested too many tokens for this model",
            "prompt is too long: 210000 tokens > 200000 maximum",
            r#"{"error":{"type":"exceed_context_size_error"}}"#,
        ] {
            assert!(is_context_length_message(body), "{body}");
        }
        assert!(!is_context_length_message("invalid value for temperature"));
    }

    #[test]
    fn context_windows_are_read_from_the_message() {
        for (body, n) in [
            (
                r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}"#,
                4096,
            ),
            (
                "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens",
                8192,
            ),
            ("prompt is too long: 210000 tokens > 200000 maximum", 200000),
            ("request (5000 tokens) exceeds `n_ctx` 4096", 4096),
            (
                "Requested tokens (5000) exceed context window of 2048",
                2048,
            ),
            (
                r#"{"error":{"message":"This model's maximum context length is 32,768 tokens."}}"#,
                32768,
            ),
        ] {
            assert_eq!(context_window_in_message(body), Some(n), "{body}");
        }
        assert_eq!(context_window_in_message("context length exceeded"), None);
        assert_eq!(context_window_in_message("{\"n_ctx\": 0}"), None);
    }

    #[test]
    fn deterministic_failures_are_recognised() {
        assert!(is_deterministic_message(
            "1 validation error for ChatCompletionRequestAssistantMessage\ncontent\n  Input should be a valid string"
        ));
        assert!(!is_deterministic_message("upstream exploded"));
        assert!(!is_deterministic_message(
            "fake server: script exhausted for agent \"code\""
        ));
    }
}
