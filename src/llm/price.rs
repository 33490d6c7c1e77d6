//! Token prices and the cost of a completion.
//!
//! Prices are USD per one million tokens, separately for prompt and
//! completion tokens and for the prompt tokens a server read from or wrote
//! to its prompt cache, keyed by model name. A built-in table
//! ([`BUILTIN_PRICES`], checked [`BUILTIN_PRICES_DATE`]) covers common OpenAI
//! and Anthropic models; `orch.toml` overrides and extends it
//! (`[prices."model"]` and a profile's `prices`, see [`crate::config`]). A
//! model that is in no table has no known price: [`cost_usd`] returns
//! `None`, shown as "unknown". An explicit entry of zeros (a local model)
//! costs 0.
//!
//! Cached tokens are part of `prompt_tokens` (as every provider counts them
//! in orch's [`Usage`]); they are billed at the entry's `cache_read` and
//! `cache_write` rates, the rest of the prompt at `prompt`. An entry without
//! a cache rate bills those tokens at the full `prompt` rate: an unknown
//! discount is never assumed.
//!
//! Lookup of a model name tries, in order: the exact name; the name after the
//! last `/` (`openai/gpt-4o-mini` on OpenRouter); and both of those with a
//! trailing date snapshot suffix removed (`gpt-4o-mini-2024-07-18`,
//! `claude-sonnet-4-5-20250929`).

use super::usage::Usage;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// When the built-in prices were last checked against the providers'
/// published price pages (OpenAI's API pricing page: "cached input";
/// Anthropic's pricing page: "5m cache writes" and "cache hits").
pub const BUILTIN_PRICES_DATE: &str = "2026-12-06";

/// One row of [`BUILTIN_PRICES`]: model, then USD per 1M prompt, completion,
/// cache-read and cache-write tokens.
pub type PriceRow = (&'static str, f64, f64, f64, f64);

/// The built-in prices, list prices as of [`BUILTIN_PRICES_DATE`]. OpenAI
/// bills cached input at its "cached input" rate and charges nothing extra
/// for writing its cache (the write rate is the prompt rate); Anthropic's
/// 5-minute cache writes cost 1.25× and its cache hits 0.1× the base input
/// price. They go stale: override them in `orch.toml`.
pub const BUILTIN_PRICES: &[PriceRow] = &[
    // OpenAI
    ("gpt-4o", 2.50, 10.00, 1.25, 2.50),
    ("gpt-4o-mini", 0.15, 0.60, 0.075, 0.15),
    ("gpt-4.1", 2.00, 8.00, 0.50, 2.00),
    ("gpt-4.1-mini", 0.40, 1.60, 0.10, 0.40),
    ("gpt-4.1-nano", 0.10, 0.40, 0.025, 0.10),
    ("o4-mini", 1.10, 4.40, 0.275, 1.10),
    ("gpt-5", 1.25, 10.00, 0.125, 1.25),
    ("gpt-5-mini", 0.25, 2.00, 0.025, 0.25),
    ("gpt-5-nano", 0.05, 0.40, 0.005, 0.05),
    // Anthropic (5-minute cache writes)
    ("claude-opus-4-5", 5.00, 25.00, 0.50, 6.25),
    ("claude-opus-4-1", 15.00, 75.00, 1.50, 18.75),
    ("claude-sonnet-4-5", 3.00, 15.00, 0.30, 3.75),
    ("claude-sonnet-4", 3.00, 15.00, 0.30, 3.75),
    ("claude-haiku-4-5", 1.00, 5.00, 0.10, 1.25),
];

/// The price of one model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// USD per one million prompt tokens.
    pub prompt: f64,
    /// USD per one million completion tokens.
    pub completion: f64,
    /// USD per one million prompt tokens read from the server's cache;
    /// unset: the `prompt` rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    /// USD per one million prompt tokens written to the server's cache;
    /// unset: the `prompt` rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

impl Price {
    /// A price without cache rates (cached tokens cost the prompt rate).
    pub fn flat(prompt: f64, completion: f64) -> Self {
        Price {
            prompt,
            completion,
            cache_read: None,
            cache_write: None,
        }
    }

    /// USD per 1M cache-read tokens in effect.
    pub fn cache_read_rate(&self) -> f64 {
        self.cache_read.unwrap_or(self.prompt)
    }

    /// USD per 1M cache-write tokens in effect.
    pub fn cache_write_rate(&self) -> f64 {
        self.cache_write.unwrap_or(self.prompt)
    }

    /// Every rate, for checking: (name, value).
    pub fn rates(&self) -> [(&'static str, Option<f64>); 4] {
        [
            ("prompt", Some(self.prompt)),
            ("completion", Some(self.completion)),
            ("cache_read", self.cache_read),
            ("cache_write", self.cache_write),
        ]
    }
}

/// Prices by model name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    prices: BTreeMap<String, Price>,
}

impl PriceTable {
    /// An empty table: every model's price is unknown.
    pub fn new() -> Self {
        PriceTable::default()
    }

    /// The built-in table ([`BUILTIN_PRICES`]).
    pub fn builtin() -> Self {
        let mut table = PriceTable::new();
        for (model, prompt, completion, read, write) in BUILTIN_PRICES {
            table.set(
                model,
                Price {
                    prompt: *prompt,
                    completion: *completion,
                    cache_read: Some(*read),
                    cache_write: Some(*write),
                },
            );
        }
        table
    }

    /// Sets (or overrides) the price of `model`.
    pub fn set(&mut self, model: &str, price: Price) {
        self.prices.insert(model.to_owned(), price);
    }

    /// The price of `model`, by the lookup rules in the module docs.
    pub fn get(&self, model: &str) -> Option<Price> {
        self.find(model).map(|(_, price)| price)
    }

    /// The entry that prices `model`: the table's name for it and its price.
    pub fn find(&self, model: &str) -> Option<(&str, Price)> {
        let base = model.rsplit('/').next().unwrap_or(model);
        [model, base]
            .into_iter()
            .flat_map(|name| [Some(name), strip_date_suffix(name)])
            .flatten()
            .find_map(|name| {
                self.prices
                    .get_key_value(name)
                    .map(|(k, v)| (k.as_str(), *v))
            })
    }

    /// Every entry, sorted by model name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Price)> {
        self.prices.iter().map(|(k, v)| (k.as_str(), *v))
    }
}

/// The cost of `usage` for `model` in USD, or `None` when its price is unknown.
///
/// The cost the server reported ([`Usage::cost_usd`]) when there is one, else
/// the table's price: cache reads and writes at their rates, the rest of
/// the prompt at the prompt rate, the completion at the completion rate.
/// Estimated usage (see [`Usage::estimated`]) gives an estimated cost.
pub fn cost_usd(model: &str, usage: &Usage, prices: &PriceTable) -> Option<f64> {
    if let Some(reported) = usage.cost_usd {
        return Some(reported);
    }
    Some(priced(&prices.get(model)?, usage))
}

/// What `usage` costs at `price`, in USD.
pub fn priced(price: &Price, usage: &Usage) -> f64 {
    // A server that counts more cached tokens than prompt tokens is held to
    // its prompt count: nothing is billed twice.
    let read = usage.cache_read_tokens.min(usage.prompt_tokens);
    let write = usage
        .cache_write_tokens
        .min(usage.prompt_tokens.saturating_sub(read));
    let fresh = usage.prompt_tokens - read - write;
    (fresh as f64 * price.prompt
        + read as f64 * price.cache_read_rate()
        + write as f64 * price.cache_write_rate()
        + usage.completion_tokens as f64 * price.completion)
        / 1e6
}

/// Formats a cost for people: `$0.0123`, or `unknown`.
pub fn format_cost(cost: Option<f64>) -> String {
    match cost {
        Some(c) if c >= 1.0 => format!("${c:.2}"),
        Some(c) => format!("${c:.4}"),
        None => "unknown".to_owned(),
    }
}

/// `gpt-4o-mini-2024-07-18` → `gpt-4o-mini`, `claude-haiku-4-5-20251001` →
/// `claude-haiku-4-5`; names without such a suffix → `None`.
fn strip_date_suffix(name: &str) -> Option<&str> {
    let bytes = name.as_bytes();
    let n = bytes.len();
    [b"-dddd-dd-dd".as_slice(), b"-dddddddd".as_slice()]
        .into_iter()
        .find_map(|shape| {
            let k = shape.len();
            let suffix = bytes.get(n.checked_sub(k)?..)?;
            let ok = suffix.iter().zip(shape).all(|(c, s)| match s {
                b'd' => c.is_ascii_digit(),
                other => c == other,
            });
            ok.then(|| &name[..n - k])
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(p: u64, c: u64) -> Usage {
        Usage {
            prompt_tokens: p,
            completion_tokens: c,
            total_tokens: p + c,
            estimated: false,
            cost_usd: None,
            ..Default::default()
        }
    }

    #[test]
    fn cost_is_per_million_tokens() {
        let t = PriceTable::builtin();
        let c = cost_usd("gpt-4o-mini", &usage(1_000_000, 500_000), &t).unwrap();
        assert!((c - (0.15 + 0.30)).abs() < 1e-9, "{c}");
        assert_eq!(cost_usd("my-local-model", &usage(10, 10), &t), None);
        assert_eq!(format_cost(None), "unknown");
        assert_eq!(format_cost(Some(0.012345)), "$0.0123");
        assert_eq!(format_cost(Some(12.345)), "$12.35");
    }

    #[test]
    fn lookup_strips_provider_prefix_and_date() {
        let mut t = PriceTable::builtin();
        assert_eq!(t.get("openai/gpt-4o-mini"), t.get("gpt-4o-mini"));
        assert_eq!(t.get("gpt-4o-2024-08-06"), t.get("gpt-4o"));
        assert_eq!(
            t.get("gpt-4o-mini-2024-07-18").map(|p| p.prompt),
            Some(0.15)
        );
        // Not a date snapshot: unknown, not gpt-4o's price.
        assert_eq!(t.get("gpt-4o-audio-preview"), None);
        // An override wins; zeros are a known (free) price.
        t.set("gpt-4o-mini", Price::flat(0.0, 0.0));
        assert_eq!(cost_usd("gpt-4o-mini", &usage(5, 5), &t), Some(0.0));
    }

    #[test]
    fn cached_tokens_cost_their_rates() {
        let t = PriceTable::builtin();
        // Anthropic: 10,000 prompt tokens of which 8,000 read and 1,500
        // written; 200 completion tokens. By hand: 500 × $3 + 8,000 × $0.30
        // + 1,500 × $3.75 + 200 × $15, per million.
        let u = Usage {
            cache_read_tokens: 8_000,
            cache_write_tokens: 1_500,
            ..usage(10_000, 200)
        };
        let c = cost_usd("claude-sonnet-4-5-20250929", &u, &t).unwrap();
        let by_hand = (500.0 * 3.0 + 8_000.0 * 0.30 + 1_500.0 * 3.75 + 200.0 * 15.0) / 1e6;
        assert!((c - by_hand).abs() < 1e-12, "{c} vs {by_hand}");
        // OpenAI: cached input at its rate, nothing else changes.
        let u = Usage {
            cache_read_tokens: 600,
            ..usage(1_000, 100)
        };
        let c = cost_usd("gpt-4o-mini", &u, &t).unwrap();
        let by_hand = (400.0 * 0.15 + 600.0 * 0.075 + 100.0 * 0.60) / 1e6;
        assert!((c - by_hand).abs() < 1e-12, "{c} vs {by_hand}");
        // Without cache rates the cached tokens cost the prompt rate; a
        // server counting more cached than prompt tokens bills no more.
        let flat = Price::flat(1.0, 2.0);
        let u = Usage {
            cache_read_tokens: 5_000,
            ..usage(1_000, 0)
        };
        assert!((priced(&flat, &u) - 1_000.0 / 1e6).abs() < 1e-15);
    }

    #[test]
    fn every_builtin_row_discounts_reads_and_no_write_is_cheaper() {
        for (model, prompt, _, read, write) in BUILTIN_PRICES {
            assert!(read < prompt, "{model}");
            assert!(write >= prompt, "{model}");
        }
    }
}
