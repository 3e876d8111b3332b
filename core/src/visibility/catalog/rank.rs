//! Ranking for `search_tools`: deterministic token overlap, as the parent module's docs
//! describe it.
//!
//! This module only orders candidates; whether a candidate is shown is the ladder's decision,
//! taken afterwards, so nothing here may look at a tool's auth.

use std::collections::BTreeSet;

use super::CatalogEntry;

/// Lowercase ASCII-alphanumeric tokens of `text`.
fn tokens(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|token| !token.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// The ranking score of `entry` for a query (see the parent module's docs).
fn score(query: &str, query_tokens: &BTreeSet<String>, entry: &CatalogEntry) -> u32 {
    let name_tokens = tokens(&entry.name);
    let description_tokens = tokens(&entry.description);
    let overlap: u32 = query_tokens
        .iter()
        .map(|token| {
            3 * u32::from(name_tokens.contains(token))
                + u32::from(description_tokens.contains(token))
        })
        .sum();
    let whole_name = query.trim().eq_ignore_ascii_case(&entry.name);
    overlap + if whole_name { 10 } else { 0 }
}

/// Candidates for `query`, best first.
pub(super) fn rank<'c>(entries: &'c [CatalogEntry], query: &str) -> Vec<&'c CatalogEntry> {
    let query_tokens = tokens(query);
    let mut scored: Vec<(u32, &CatalogEntry)> = entries
        .iter()
        .map(|entry| (score(query, &query_tokens, entry), entry))
        .filter(|(points, _)| query_tokens.is_empty() || *points > 0)
        .collect();
    scored.sort_by(|(a_points, a), (b_points, b)| {
        b_points.cmp(a_points).then_with(|| a.name.cmp(&b.name))
    });
    scored.into_iter().map(|(_, entry)| entry).collect()
}
