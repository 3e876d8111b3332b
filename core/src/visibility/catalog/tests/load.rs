//! Tests of `load_tool`: a shown tool's definition never carries auth, and a denied tool's
//! answer is byte for byte the answer for a missing one.

use std::collections::BTreeSet;

use super::{catalog, cmo_finance, registry};
use crate::visibility::catalog::{Catalog, LoadToolAnswer, load_tool};
use crate::visibility::facts::Identity;
use crate::visibility::ladder::Visibility;
use crate::visibility::probe_cache::ProbeCache;

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
