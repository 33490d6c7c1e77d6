//! The retrieval index: in-process BM25 over the lessons' text, derived and
//! rebuilt from the lessons whenever they are read (never a source of
//! truth, never stored). Chosen over SQLite FTS5 because it adds no build
//! cost (bundled SQLite is ~20 s debug / ~150–250 s release on 2 cores)
//! and, at the sizes a repository's memory reaches, builds and answers in
//! well under the budget (`examples/memory_bench.rs`, `docs/memory.md`).

use std::collections::HashMap;

/// BM25's term-frequency saturation.
const K1: f32 = 1.2;
/// BM25's length normalisation.
const B: f32 = 0.75;

/// Words too common to tell lessons apart.
const STOPWORDS: &[&str] = &[
    "the", "and", "for", "are", "but", "not", "you", "with", "this", "that", "from", "have", "has",
    "was", "were", "its", "into", "when", "then", "than", "them", "they", "their", "there", "what",
    "which", "who", "will", "would", "should", "could", "can", "all", "any", "each", "one", "our",
    "out", "use", "used", "using", "via", "also", "only", "must", "may", "does", "did", "done",
    "been", "being", "here", "how", "why", "it's", "let", "per", "some", "such", "task", "issue",
    "stage", "file", "files", "fix", "make", "run",
];

/// Lower-cased words of `text` (letters, digits, `_`), at least 2 long,
/// without stopwords.
pub fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.len() >= 2)
        .map(str::to_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
}

/// A BM25 index over documents numbered in build order.
#[derive(Debug, Default)]
pub struct Index {
    /// Term → (document, term frequency).
    postings: HashMap<String, Vec<(u32, u32)>>,
    /// Length in tokens of each document.
    lengths: Vec<u32>,
    avg_len: f32,
}

impl Index {
    /// Indexes `docs` (document `i` is the `i`-th).
    pub fn build<S: AsRef<str>>(docs: impl IntoIterator<Item = S>) -> Index {
        let mut idx = Index::default();
        let mut counts: HashMap<String, u32> = HashMap::new();
        for (i, doc) in docs.into_iter().enumerate() {
            counts.clear();
            let mut len = 0;
            for t in tokens(doc.as_ref()) {
                *counts.entry(t).or_default() += 1;
                len += 1;
            }
            for (t, n) in counts.drain() {
                idx.postings.entry(t).or_default().push((i as u32, n));
            }
            idx.lengths.push(len);
        }
        let total: u64 = idx.lengths.iter().map(|&l| u64::from(l)).sum();
        idx.avg_len = (total as f32 / idx.lengths.len().max(1) as f32).max(1.0);
        idx
    }

    /// The number of documents.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    /// True when it holds no document.
    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// Each document's BM25 score for `query` (0 when no word matches).
    pub fn scores(&self, query: &str) -> Vec<f32> {
        let mut scores = vec![0.0f32; self.lengths.len()];
        let n = self.lengths.len() as f32;
        let mut seen = std::collections::HashSet::new();
        for t in tokens(query) {
            if !seen.insert(t.clone()) {
                continue;
            }
            let Some(list) = self.postings.get(&t) else {
                continue;
            };
            let df = list.len() as f32;
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for &(doc, tf) in list {
                let tf = tf as f32;
                let len = self.lengths[doc as usize] as f32;
                scores[doc as usize] +=
                    idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / self.avg_len));
            }
        }
        scores
    }

    /// The `k` best documents for `query` with a positive score, best first.
    pub fn top(&self, query: &str, k: usize) -> Vec<(usize, f32)> {
        let mut hits: Vec<(usize, f32)> = self
            .scores(query)
            .into_iter()
            .enumerate()
            .filter(|(_, s)| *s > 0.0)
            .collect();
        let by_score = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if hits.len() > k && k > 0 {
            hits.select_nth_unstable_by(k - 1, by_score);
            hits.truncate(k);
        }
        hits.sort_by(by_score);
        hits.truncate(k);
        hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_the_document_that_shares_rare_words_first() {
        let idx = Index::build([
            "tests need ORCH_FIXTURE=1 set before pytest",
            "the parser rejects tabs in src/parser",
            "use cargo fmt before committing",
        ]);
        let top = idx.top("pytest fails without ORCH_FIXTURE", 5);
        assert_eq!(top[0].0, 0);
        assert_eq!(top.len(), 1, "{top:?}");
        assert!(idx.top("nothing shared here", 5).is_empty());
    }

    #[test]
    fn top_k_cuts_and_orders() {
        let docs: Vec<String> = (0..50).map(|i| format!("word{i} common")).collect();
        let idx = Index::build(&docs);
        let top = idx.top("common word7", 3);
        assert_eq!(top.len(), 3);
        assert_eq!(top[0].0, 7);
        assert!(top[1].1 <= top[0].1 && top[2].1 <= top[1].1);
    }
}
