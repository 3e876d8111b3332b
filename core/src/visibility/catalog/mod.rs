//! The meta-tool answers over a catalog of tools: `search_tools` and `load_tool`.
//!
//! Ranking is deterministic token overlap. Text is split into lowercase ASCII-alphanumeric
//! tokens (everything else separates: `ledger_read` is `ledger`, `read`). For each distinct
//! query token, a tool scores 3 if the token is one of its name's tokens and 1 if it is one of
//! its description's tokens; a query equal to the tool's whole name (ignoring case and
//! surrounding space) adds 10. Tools scoring 0 are not candidates, except that a query with no
//! tokens makes every tool a candidate. Candidates are ordered by score, highest first, then by
//! name.
//!
//! Visibility then applies ([`super::ladder`]): allow and unknown are shown (unknown with
//! `authUncertain: true`), deny is hidden. `total` counts the shown matches before `limit`
//! cuts the list; it never counts hidden tools, since a count would reveal that they exist.
//! `load_tool` answers for a denied tool exactly as for a tool that does not exist, byte for
//! byte, and its answer never contains auth fields or policy names.
//!
//! The parts live in child modules: the request's bounds (`request`), ranking (`rank`), the
//! input summaries on cards (`inputs`) and the answer shapes (`answer`). This module holds the
//! catalog itself and the two meta-tools, which join ranking, the ladder and the answer shapes;
//! a rule about one of those parts belongs in its module, not in the meta-tool that uses it.
//!
//! This module only ranks and shapes answers: it never runs a tool and performs no I/O.

mod answer;
mod inputs;
mod rank;
mod request;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use serde_json::Value;

use super::decision::Decision;
use super::descriptor::Auth;
use super::error::VisibilityError;
use super::ladder::{Visibility, evaluate_candidates};
use super::probe_cache::ProbeCache;

pub use answer::{LoadToolAnswer, SearchAnswer, ToolCard, ToolDefinition};
pub use inputs::{InputSummary, summarize_input_schema};
use rank::rank;
use request::check_request;
pub use request::{DEFAULT_SEARCH_LIMIT, MAX_QUERY_CHARS, MAX_SEARCH_LIMIT, SearchRequest};

/// One tool as the catalog holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct CatalogEntry {
    /// The tool's name, unique in its catalog.
    pub name: String,
    /// What the tool does, as the model reads it.
    pub description: String,
    /// JSON Schema of the tool's input object.
    pub input_schema: Value,
    /// The tool's auth descriptor.
    pub auth: Auth,
}

/// The tools one agent can reach, with a generation number that changes whenever the set or
/// any tool's definition changes (the probe cache is tied to it).
#[derive(Clone, Debug, PartialEq)]
pub struct Catalog {
    generation: u64,
    entries: Vec<CatalogEntry>,
}

impl Catalog {
    /// A catalog; tool names must be unique.
    pub fn new(generation: u64, entries: Vec<CatalogEntry>) -> Result<Self, VisibilityError> {
        let mut names = BTreeSet::new();
        for entry in &entries {
            if !names.insert(entry.name.as_str()) {
                return Err(VisibilityError::DuplicateTool {
                    name: entry.name.clone(),
                });
            }
        }
        Ok(Self {
            generation,
            entries,
        })
    }

    /// A catalog with no tools.
    pub fn empty(generation: u64) -> Self {
        Self {
            generation,
            entries: Vec::new(),
        }
    }

    /// The catalog's generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Every tool, in the order given.
    pub fn entries(&self) -> &[CatalogEntry] {
        &self.entries
    }

    /// The tool named `name`, if the catalog has one.
    pub fn get(&self, name: &str) -> Option<&CatalogEntry> {
        self.entries.iter().find(|entry| entry.name == name)
    }
}

/// `search_tools`: ranks the catalog for the query, applies visibility (probing within the
/// budget), and returns up to `limit` cards of shown tools.
pub fn search_tools(
    catalog: &Catalog,
    request: &SearchRequest,
    visibility: &Visibility<'_>,
    cache: &mut ProbeCache,
) -> Result<SearchAnswer, VisibilityError> {
    check_request(request)?;
    let ranked = rank(catalog.entries(), &request.query);
    let candidates: Vec<(&str, &Auth)> = ranked
        .iter()
        .map(|entry| (entry.name.as_str(), &entry.auth))
        .collect();
    let verdicts = evaluate_candidates(&candidates, catalog.generation, visibility, cache);
    let shown: Vec<ToolCard> = ranked
        .iter()
        .zip(&verdicts)
        .filter(|(_, verdict)| verdict.decision.is_shown())
        .map(|(entry, verdict)| ToolCard {
            name: entry.name.clone(),
            description: entry.description.clone(),
            inputs: summarize_input_schema(&entry.input_schema),
            auth_uncertain: verdict.decision == Decision::Unknown,
        })
        .collect();
    let total = shown.len();
    Ok(SearchAnswer {
        generation: catalog.generation,
        total,
        tools: shown.into_iter().take(request.limit).collect(),
    })
}

/// `load_tool`: the full definition of a shown tool; for a denied tool, exactly the answer for a
/// tool that does not exist.
pub fn load_tool(
    catalog: &Catalog,
    name: &str,
    visibility: &Visibility<'_>,
    cache: &mut ProbeCache,
) -> LoadToolAnswer {
    let Some(entry) = catalog.get(name) else {
        return LoadToolAnswer::no_such_tool(name);
    };
    let verdicts = evaluate_candidates(
        &[(entry.name.as_str(), &entry.auth)],
        catalog.generation,
        visibility,
        cache,
    );
    match verdicts.first() {
        Some(verdict) if verdict.decision.is_shown() => {
            LoadToolAnswer::Definition(ToolDefinition {
                name: entry.name.clone(),
                description: entry.description.clone(),
                input_schema: entry.input_schema.clone(),
            })
        }
        _ => LoadToolAnswer::no_such_tool(name),
    }
}
