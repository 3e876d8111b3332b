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
//! This module only ranks and shapes answers: it never runs a tool and performs no I/O.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::decision::Decision;
use super::descriptor::Auth;
use super::error::VisibilityError;
use super::ladder::{Visibility, evaluate_candidates};
use super::probe_cache::ProbeCache;

/// The longest `search_tools` query, in characters.
pub const MAX_QUERY_CHARS: usize = 512;
/// The largest `search_tools` limit.
pub const MAX_SEARCH_LIMIT: usize = 50;
/// The limit when a request gives none.
pub const DEFAULT_SEARCH_LIMIT: usize = 10;

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

/// A `search_tools` request, as the model sends it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// Words to match against tool names and descriptions.
    pub query: String,
    #[serde(default = "default_limit")]
    /// The most cards to return (1 to [`MAX_SEARCH_LIMIT`]).
    pub limit: usize,
}

fn default_limit() -> usize {
    DEFAULT_SEARCH_LIMIT
}

/// One input property of a tool, for a card.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputSummary {
    /// The property's name.
    pub name: String,
    /// `string`, `integer`, `array<string>`, `string|null`, `enum`, `any`, ...
    #[serde(rename = "type")]
    pub type_label: String,
    /// Whether the schema requires it.
    pub required: bool,
}

/// A shown tool in a `search_tools` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCard {
    /// The tool's name.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// Its input properties.
    pub inputs: Vec<InputSummary>,
    /// The decision was unknown: the tool may refuse when invoked.
    pub auth_uncertain: bool,
}

/// A `search_tools` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchAnswer {
    /// The catalog generation the answer was computed from.
    pub generation: u64,
    /// Shown matches before `limit` (hidden tools are never counted).
    pub total: usize,
    /// The cards shown, best match first, at most `limit`.
    pub tools: Vec<ToolCard>,
}

/// A tool's full definition, as `load_tool` returns it: never any auth field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDefinition {
    /// The tool's name.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// JSON Schema of the tool's input object.
    pub input_schema: Value,
}

/// A `load_tool` answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LoadToolAnswer {
    /// The tool's definition.
    Definition(ToolDefinition),
    /// The tool does not exist, or the caller may not see it: the same answer either way.
    NoSuchTool {
        /// The sentence the model reads.
        error: String,
    },
}

impl LoadToolAnswer {
    fn no_such_tool(name: &str) -> Self {
        Self::NoSuchTool {
            error: format!(
                "no tool named `{name}`; use search_tools to find the tools you can use"
            ),
        }
    }
}

/// Lowercase ASCII-alphanumeric tokens of `text`.
fn tokens(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|token| !token.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// The ranking score of `entry` for a query (see the module doc).
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
fn rank<'c>(catalog: &'c Catalog, query: &str) -> Vec<&'c CatalogEntry> {
    let query_tokens = tokens(query);
    let mut scored: Vec<(u32, &CatalogEntry)> = catalog
        .entries
        .iter()
        .map(|entry| (score(query, &query_tokens, entry), entry))
        .filter(|(points, _)| query_tokens.is_empty() || *points > 0)
        .collect();
    scored.sort_by(|(a_points, a), (b_points, b)| {
        b_points.cmp(a_points).then_with(|| a.name.cmp(&b.name))
    });
    scored.into_iter().map(|(_, entry)| entry).collect()
}

fn type_label(property: &Value) -> String {
    match property.get("type") {
        Some(Value::String(kind)) if kind == "array" => {
            match property.get("items").and_then(|items| items.get("type")) {
                Some(Value::String(item)) => format!("array<{item}>"),
                _ => "array".to_owned(),
            }
        }
        Some(Value::String(kind)) => kind.clone(),
        Some(Value::Array(kinds)) if kinds.iter().all(Value::is_string) => kinds
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("|"),
        _ if property.get("enum").is_some() => "enum".to_owned(),
        _ if property.get("const").is_some() => "const".to_owned(),
        _ => "any".to_owned(),
    }
}

/// The property names of an input schema with their types, required ones marked; sorted by
/// name. A schema without `properties` has no inputs listed.
pub fn summarize_input_schema(schema: &Value) -> Vec<InputSummary> {
    let required: BTreeSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let properties: BTreeMap<&String, &Value> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|object| object.iter().collect())
        .unwrap_or_default();
    properties
        .into_iter()
        .map(|(name, property)| InputSummary {
            name: name.clone(),
            type_label: type_label(property),
            required: required.contains(name.as_str()),
        })
        .collect()
}

fn check_request(request: &SearchRequest) -> Result<(), VisibilityError> {
    let length = request.query.chars().count();
    if length > MAX_QUERY_CHARS {
        return Err(VisibilityError::QueryTooLong {
            length,
            max: MAX_QUERY_CHARS,
        });
    }
    if request.limit == 0 || request.limit > MAX_SEARCH_LIMIT {
        return Err(VisibilityError::LimitOutOfRange {
            limit: request.limit,
            max: MAX_SEARCH_LIMIT,
        });
    }
    Ok(())
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
    let ranked = rank(catalog, &request.query);
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::visibility::descriptor::{Anonymity, PolicyRef};
    use crate::visibility::facts::{Identity, Principal, RoleGrants};
    use crate::visibility::ladder::{PolicyDefinition, PolicyRegistry};

    fn entry(name: &str, description: &str, auth: Auth) -> CatalogEntry {
        CatalogEntry {
            name: name.into(),
            description: description.into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "limit": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "mode": {"enum": ["a", "b"]},
                    "note": {"type": ["string", "null"]},
                },
                "required": ["query"],
            }),
            auth,
        }
    }

    fn open() -> Auth {
        Auth {
            anonymous: Anonymity::Yes,
            policies: vec![],
            imperative: false,
        }
    }

    fn policy(name: &str) -> Auth {
        Auth {
            anonymous: Anonymity::No,
            policies: vec![PolicyRef::parse(name).unwrap()],
            imperative: false,
        }
    }

    fn catalog() -> Catalog {
        Catalog::new(
            4,
            vec![
                entry(
                    "ledger_read",
                    "Read the finance ledger",
                    policy("roles:finance"),
                ),
                entry(
                    "payroll",
                    "Finance payroll of every employee",
                    policy("secret-payroll-policy"),
                ),
                entry("weather", "Today's weather", open()),
                entry(
                    "quota_report",
                    "Usage report behind a licence gate",
                    Auth {
                        imperative: true,
                        ..open()
                    },
                ),
                entry("ledger", "The ledger itself", policy("roles:finance")),
            ],
        )
        .unwrap()
    }

    fn registry() -> PolicyRegistry {
        let mut registry = PolicyRegistry::new();
        registry
            .define(
                "secret-payroll-policy",
                PolicyDefinition {
                    roles: vec!["hr".into()],
                    ..PolicyDefinition::default()
                },
            )
            .unwrap();
        registry
    }

    fn cmo_finance() -> Identity {
        let mut grants = RoleGrants::new();
        grants.grant(Principal::Agent("cmo".into()), ["finance"]);
        Identity::peer("cmo", &grants)
    }

    fn search(identity: &Identity, query: &str, limit: usize) -> SearchAnswer {
        let registry = registry();
        search_tools(
            &catalog(),
            &SearchRequest {
                query: query.into(),
                limit,
            },
            &Visibility::without_probe(identity, &registry),
            &mut ProbeCache::new(0),
        )
        .unwrap()
    }

    fn names(answer: &SearchAnswer) -> Vec<&str> {
        answer.tools.iter().map(|card| card.name.as_str()).collect()
    }

    #[test]
    fn ranking_is_deterministic_token_overlap() {
        let everyone = Identity::Absent;
        // "ledger" exact name: 3 + 1 + 10; ledger_read: 3 (name) + 1 (description).
        let answer = search(&cmo_finance(), "ledger", 10);
        assert_eq!(names(&answer), ["ledger", "ledger_read"]);
        // Description-only matches score 1; ties go by name.
        let answer = search(&cmo_finance(), "report", 10);
        assert_eq!(names(&answer), ["quota_report"]);
        // No tokens: everything is a candidate, by name.
        let answer = search(&everyone, "  ", 10);
        assert_eq!(names(&answer), ["quota_report", "weather"]);
        assert_eq!(answer.generation, 4);
        // No match at all.
        assert_eq!(search(&everyone, "zebra", 10).total, 0);
    }

    #[test]
    fn visibility_hides_deny_and_flags_unknown() {
        let answer = search(&cmo_finance(), "finance ledger payroll report", 50);
        // payroll is denied (cmo lacks hr) and hidden; the gated report is uncertain.
        assert_eq!(names(&answer), ["ledger_read", "ledger", "quota_report"]);
        assert_eq!(answer.total, 3);
        let uncertain: Vec<bool> = answer.tools.iter().map(|c| c.auth_uncertain).collect();
        assert_eq!(uncertain, [false, false, true]);
        let json = serde_json::to_string(&answer).unwrap();
        assert!(json.contains("\"authUncertain\":true"));
        assert!(!json.contains("payroll"));
        assert!(!json.contains("roles:"));
        assert!(!json.contains("anonymous"));
    }

    #[test]
    fn limit_cuts_the_list_but_not_the_total() {
        let answer = search(&cmo_finance(), "finance ledger report", 1);
        assert_eq!(answer.tools.len(), 1);
        assert_eq!(answer.total, 3);
    }

    #[test]
    fn cards_summarize_the_input_schema() {
        let answer = search(&Identity::Absent, "weather", 10);
        let inputs = &answer.tools[0].inputs;
        let shown: Vec<(&str, &str, bool)> = inputs
            .iter()
            .map(|i| (i.name.as_str(), i.type_label.as_str(), i.required))
            .collect();
        assert_eq!(
            shown,
            [
                ("limit", "integer", false),
                ("mode", "enum", false),
                ("note", "string|null", false),
                ("query", "string", true),
                ("tags", "array<string>", false),
            ]
        );
        assert!(summarize_input_schema(&json!({"type": "object"})).is_empty());
        assert!(summarize_input_schema(&json!("not a schema")).is_empty());
    }

    #[test]
    fn request_limits_are_typed_errors() {
        let registry = registry();
        let identity = Identity::Absent;
        let visibility = Visibility::without_probe(&identity, &registry);
        let run = |query: String, limit: usize| {
            search_tools(
                &catalog(),
                &SearchRequest { query, limit },
                &visibility,
                &mut ProbeCache::new(0),
            )
        };
        assert!(run("é".repeat(MAX_QUERY_CHARS), 10).is_ok());
        assert!(matches!(
            run("x".repeat(MAX_QUERY_CHARS + 1), 10),
            Err(VisibilityError::QueryTooLong {
                length: 513,
                max: 512
            })
        ));
        assert!(matches!(
            run("x".into(), 0),
            Err(VisibilityError::LimitOutOfRange { limit: 0, .. })
        ));
        assert!(matches!(
            run("x".into(), MAX_SEARCH_LIMIT + 1),
            Err(VisibilityError::LimitOutOfRange { limit: 51, max: 50 })
        ));
        assert!(run("x".into(), MAX_SEARCH_LIMIT).is_ok());
        let parsed: SearchRequest = serde_json::from_str(r#"{"query": "ledger"}"#).unwrap();
        assert_eq!(parsed.limit, DEFAULT_SEARCH_LIMIT);
    }

    #[test]
    fn duplicate_tool_names_are_refused() {
        assert!(matches!(
            Catalog::new(0, vec![entry("a", "", open()), entry("a", "", open())]),
            Err(VisibilityError::DuplicateTool { name }) if name == "a"
        ));
    }

    #[test]
    fn load_tool_never_shows_auth() {
        let registry = registry();
        let identity = cmo_finance();
        let answer = load_tool(
            &catalog(),
            "ledger_read",
            &Visibility::without_probe(&identity, &registry),
            &mut ProbeCache::new(0),
        );
        let LoadToolAnswer::Definition(definition) = &answer else {
            panic!("ledger_read is allowed: {answer:?}");
        };
        assert_eq!(definition.name, "ledger_read");
        let json = serde_json::to_value(&answer).unwrap();
        let keys: BTreeSet<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, BTreeSet::from(["name", "description", "inputSchema"]));
        let text = json.to_string();
        for leak in [
            "anonymous",
            "policies",
            "imperative",
            "roles:",
            "finance\"",
            "auth",
        ] {
            assert!(!text.contains(leak), "{leak} in {text}");
        }
        // An uncertain tool can be loaded too: it is shown by search_tools.
        let gated = load_tool(
            &catalog(),
            "quota_report",
            &Visibility::without_probe(&identity, &registry),
            &mut ProbeCache::new(0),
        );
        assert!(matches!(gated, LoadToolAnswer::Definition(_)));
    }

    #[test]
    fn a_denied_tool_answers_byte_for_byte_like_a_missing_one() {
        let registry = registry();
        let identity = cmo_finance();
        let visibility = Visibility::without_probe(&identity, &registry);
        let with_payroll = catalog();
        let without_payroll = Catalog::new(
            with_payroll.generation(),
            with_payroll
                .entries()
                .iter()
                .filter(|e| e.name != "payroll")
                .cloned()
                .collect(),
        )
        .unwrap();
        let denied = load_tool(
            &with_payroll,
            "payroll",
            &visibility,
            &mut ProbeCache::new(0),
        );
        let missing = load_tool(
            &without_payroll,
            "payroll",
            &visibility,
            &mut ProbeCache::new(0),
        );
        let denied_bytes = serde_json::to_vec(&denied).unwrap();
        let missing_bytes = serde_json::to_vec(&missing).unwrap();
        assert_eq!(denied_bytes, missing_bytes);
        assert!(
            !String::from_utf8(denied_bytes)
                .unwrap()
                .contains("secret-payroll-policy")
        );

        // Absent identity: a non-anonymous tool is denied by rule 1, same answer as missing.
        let absent = Identity::Absent;
        let anonymous = Visibility::without_probe(&absent, &registry);
        let without_ledger = Catalog::new(
            with_payroll.generation(),
            with_payroll
                .entries()
                .iter()
                .filter(|e| e.name != "ledger")
                .cloned()
                .collect(),
        )
        .unwrap();
        let denied = load_tool(&with_payroll, "ledger", &anonymous, &mut ProbeCache::new(0));
        let missing = load_tool(
            &without_ledger,
            "ledger",
            &anonymous,
            &mut ProbeCache::new(0),
        );
        assert_eq!(
            serde_json::to_vec(&denied).unwrap(),
            serde_json::to_vec(&missing).unwrap()
        );
        let unknown_name = load_tool(&with_payroll, "nope", &anonymous, &mut ProbeCache::new(0));
        assert_eq!(
            serde_json::to_string(&unknown_name)
                .unwrap()
                .replace("nope", "ledger"),
            serde_json::to_string(&denied).unwrap()
        );
    }

    /// Refuses every tool whose name ends in an odd digit; counts its invocations.
    struct OddRefuser {
        calls: std::cell::Cell<usize>,
    }

    impl crate::visibility::ladder::Probe for OddRefuser {
        fn probe(&self, tool: &str, _principal: &Principal) -> crate::visibility::ProbeOutcome {
            self.calls.set(self.calls.get() + 1);
            let odd = tool
                .chars()
                .last()
                .and_then(|c| c.to_digit(10))
                .is_some_and(|d| d % 2 == 1);
            if odd {
                crate::visibility::ProbeOutcome::Refused
            } else {
                crate::visibility::ProbeOutcome::ReachedCut
            }
        }
    }

    #[test]
    fn search_probes_the_first_k_ranked_candidates_only() {
        let gated = Auth {
            anonymous: Anonymity::No,
            policies: vec![],
            imperative: true,
        };
        // 30 gated tools; "report" in the name scores 3, so the two "report" tools rank first,
        // then the rest by name.
        let mut entries: Vec<CatalogEntry> = (0..28)
            .map(|i| entry(&format!("gate{i:02}"), "a gated report", gated.clone()))
            .collect();
        entries.push(entry("report_1", "a gated report", gated.clone()));
        entries.push(entry("report_2", "a gated report", gated));
        let catalog = Catalog::new(9, entries).unwrap();
        let registry = registry();
        let identity = cmo_finance();
        let probe = OddRefuser {
            calls: std::cell::Cell::new(0),
        };
        let visibility = Visibility {
            probe: Some(&probe),
            probe_budget: 4,
            ..Visibility::without_probe(&identity, &registry)
        };
        let mut cache = ProbeCache::new(0);
        let request = SearchRequest {
            query: "report".into(),
            limit: MAX_SEARCH_LIMIT,
        };
        let answer = search_tools(&catalog, &request, &visibility, &mut cache).unwrap();
        assert_eq!(probe.calls.get(), 4);
        assert_eq!(cache.generation(), 9);
        // Ranked: report_1 (refused, hidden), report_2 (allowed), gate00 (allowed),
        // gate01 (refused, hidden), then 26 unprobed tools shown as uncertain.
        assert_eq!(answer.total, 28);
        assert_eq!(answer.tools[0].name, "report_2");
        assert!(!answer.tools[0].auth_uncertain);
        assert_eq!(answer.tools[1].name, "gate00");
        assert!(!answer.tools[1].auth_uncertain);
        assert_eq!(answer.tools[2].name, "gate02");
        assert!(answer.tools[2..].iter().all(|card| card.auth_uncertain));
        assert!(
            !answer
                .tools
                .iter()
                .any(|c| c.name == "report_1" || c.name == "gate01")
        );

        // The same search again probes nothing new; a new generation probes again.
        search_tools(&catalog, &request, &visibility, &mut cache).unwrap();
        assert_eq!(probe.calls.get(), 4);
        let next = Catalog::new(10, catalog.entries().to_vec()).unwrap();
        search_tools(&next, &request, &visibility, &mut cache).unwrap();
        assert_eq!(probe.calls.get(), 8);

        // load_tool of a probe-denied tool answers as a missing one.
        let denied = load_tool(&next, "report_1", &visibility, &mut cache);
        let missing = load_tool(&next, "report_9", &visibility, &mut cache);
        assert_eq!(
            serde_json::to_string(&denied)
                .unwrap()
                .replace("report_1", "report_9"),
            serde_json::to_string(&missing).unwrap()
        );
    }
}
