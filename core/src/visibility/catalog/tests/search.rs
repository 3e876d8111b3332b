//! Tests of `search_tools`: ranking, visibility, limits, cards, request bounds and probes.

use std::cell::Cell;

use serde_json::json;

use super::{catalog, cmo_finance, entry, names, open, registry, search};
use crate::visibility::catalog::{
    Catalog, CatalogEntry, DEFAULT_SEARCH_LIMIT, MAX_QUERY_CHARS, MAX_SEARCH_LIMIT, SearchRequest,
    load_tool, search_tools, summarize_input_schema,
};
use crate::visibility::descriptor::{Anonymity, Auth};
use crate::visibility::error::VisibilityError;
use crate::visibility::facts::{Identity, Principal};
use crate::visibility::ladder::{Probe, ProbeOutcome, Visibility};
use crate::visibility::probe_cache::ProbeCache;

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

/// Refuses every tool whose name ends in an odd digit; counts its invocations.
struct OddRefuser {
    calls: Cell<usize>,
}

impl Probe for OddRefuser {
    fn probe(&self, tool: &str, _principal: &Principal) -> ProbeOutcome {
        self.calls.set(self.calls.get() + 1);
        let odd = tool
            .chars()
            .last()
            .and_then(|c| c.to_digit(10))
            .is_some_and(|d| d % 2 == 1);
        if odd {
            ProbeOutcome::Refused
        } else {
            ProbeOutcome::ReachedCut
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
        calls: Cell::new(0),
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
