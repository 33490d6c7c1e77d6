//! Token usage of one completion and its reported cost (a leaf of `llm`).

use serde::{Deserialize, Serialize};

/// Token usage of one completion, and its cost when the server reported it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the prompt.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Tokens generated.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Sum of both.
    #[serde(default)]
    pub total_tokens: u64,
    /// True when the server reported no usage and the counts are an estimate
    /// (bytes / 4, see [`crate::llm::estimate_usage`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
    /// The call's cost in US dollars as the server reported it (OpenRouter's
    /// `usage.cost`, LiteLLM's `x-litellm-response-cost` header); it wins
    /// over the price table ([`crate::llm::ChatModel::cost_usd`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Prompt tokens the server read from its prompt cache (OpenAI's
    /// `prompt_tokens_details.cached_tokens`, Anthropic's
    /// `cache_read_input_tokens`); part of `prompt_tokens`. 0 when the server
    /// said nothing.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the server's prompt cache this call
    /// (Anthropic's `cache_creation_input_tokens`); part of `prompt_tokens`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

// `cost_usd` is never NaN: [`reported_cost`] keeps only finite values.
impl Eq for Usage {}

/// A cost a server reported, when it is a finite amount of 0 or more.
pub(crate) fn reported_cost(value: f64) -> Option<f64> {
    (value.is_finite() && value >= 0.0).then_some(value)
}

impl Usage {
    /// The usage of a call that used `tokens` (no reported cost), to price it.
    pub fn of(tokens: crate::budget::TokenCount) -> Self {
        Usage {
            prompt_tokens: tokens.prompt,
            completion_tokens: tokens.completion,
            total_tokens: tokens.total(),
            cache_read_tokens: tokens.cache_read,
            cache_write_tokens: tokens.cache_write,
            ..Usage::default()
        }
    }

    /// The counts the budget and the records keep (cache reads and writes
    /// included).
    pub fn tokens(&self) -> crate::budget::TokenCount {
        crate::budget::TokenCount {
            prompt: self.prompt_tokens,
            completion: self.completion_tokens,
            cache_read: self.cache_read_tokens,
            cache_write: self.cache_write_tokens,
        }
    }
}
