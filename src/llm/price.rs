//! Token prices and the cost of a completion.
//!
//! Prices are USD per one million tokens, separately for prompt and
//! completion tokens, keyed by model name. A small built-in table
//! ([`BUILTIN_PRICES`], dated [`BUILTIN_PRICES_DATE`]) covers a few common
//! models; `orch.toml` overrides and extends it (`[prices."model"]` and a
//! profile's `prices`, see [`crate::config`]). A model that is in no table has
//! no known price: [`cost_usd`] returns `None`, shown as "unknown". An
//! explicit entry of zeros (a local model) costs 0.
//!
//! Lookup of a model name tries, in order: the exact name; the name after the
//! last `/` (`openai/gpt-4o-mini` on OpenRouter); and both of those with a
//! trailing date snapshot suffix removed (`gpt-4o-mini-2024-07-18`).

use super::usage::Usage;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// When the built-in prices were copied from the providers' list prices.
pub const BUILTIN_PRICES_DATE: &str = "2025-06";

/// The built-in prices: (model, USD per 1M prompt tokens, USD per 1M
/// completion tokens), OpenAI list prices as of [`BUILTIN_PRICES_DATE`].
/// They go stale: override them in `orch.toml`.
pub const BUILTIN_PRICES: &[(&str, f64, f64)] = &[
    ("gpt-4o", 2.50, 10.00),
    ("gpt-4o-mini", 0.15, 0.60),
    ("gpt-4.1", 2.00, 8.00),
    ("gpt-4.1-mini", 0.40, 1.60),
    ("gpt-4.1-nano", 0.10, 0.40),
    ("o4-mini", 1.10, 4.40),
];

/// The price of one model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// USD per one million prompt tokens.
    pub prompt: f64,
    /// USD per one million completion tokens.
    pub completion: f64,
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
        for (model, prompt, completion) in BUILTIN_PRICES {
            table.set(
                model,
                Price {
                    prompt: *prompt,
                    completion: *completion,
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
/// `prompt_tokens * prompt / 1e6 + completion_tokens * completion / 1e6`.
/// Estimated usage (see [`Usage::estimated`]) gives an estimated cost.
pub fn cost_usd(model: &str, usage: &Usage, prices: &PriceTable) -> Option<f64> {
    if let Some(reported) = usage.cost_usd {
        return Some(reported);
    }
    let price = prices.get(model)?;
    Some(
        usage.prompt_tokens as f64 * price.prompt / 1e6
            + usage.completion_tokens as f64 * price.completion / 1e6,
    )
}

/// Formats a cost for people: `$0.0123`, or `unknown`.
pub fn format_cost(cost: Option<f64>) -> String {
    match cost {
        Some(c) if c >= 1.0 => format!("${c:.2}"),
        Some(c) => format!("${c:.4}"),
        None => "unknown".to_owned(),
    }
}

/// `gpt-4o-mini-2024-07-18` → `gpt-4o-mini`; names without such a suffix → `None`.
fn strip_date_suffix(name: &str) -> Option<&str> {
    let bytes = name.as_bytes();
    let n = bytes.len();
    if n < 11 {
        return None;
    }
    let suffix = &bytes[n - 11..];
    let shape = b"-dddd-dd-dd";
    let ok = suffix.iter().zip(shape).all(|(c, s)| match s {
        b'd' => c.is_ascii_digit(),
        other => c == other,
    });
    ok.then(|| &name[..n - 11])
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
        t.set(
            "gpt-4o-mini",
            Price {
                prompt: 0.0,
                completion: 0.0,
            },
        );
        assert_eq!(cost_usd("gpt-4o-mini", &usage(5, 5), &t), Some(0.0));
    }
}
