//! Tests of the meta-tools over one agent's catalog: what two principals see, probes that never
//! run a handler, the probe budget, the real check behind `invoke_tool`, and typed errors.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use consort_config::{AgentConfig, GrantConfig, PolicyConfig, VisibilityConfig};
use serde_json::{Value, json};

use super::{AgentCatalog, MetaAnswer, parse_invoke, validate_arguments};
use crate::guard::{FeatureGuard, Guard, GuardContext, GuardVerdict};
use crate::model::ToolSpec;
use crate::tools::{Tool, ToolContext, ToolError, ToolFuture};
use crate::visibility::{
    AuthMarkers, Caller, Identity, MAX_QUERY_CHARS, MAX_SEARCH_LIMIT, Origin, PolicyRef, Principal,
    ProbeCache, RoleGrants,
};

/// A tool whose handler has a side effect: it counts its runs.
struct Counting {
    name: String,
    runs: Arc<AtomicUsize>,
    markers: AuthMarkers,
    guards: Vec<Arc<dyn Guard>>,
}

impl Tool for Counting {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: format!("{} tool", self.name),
            input_schema: json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"], "additionalProperties": false}),
        }
    }
    fn invoke<'a>(&'a self, _ctx: ToolContext<'a>, _input: &'a Value) -> ToolFuture<'a> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok("ran".to_owned()) })
    }
    fn auth_markers(&self) -> AuthMarkers {
        self.markers.clone()
    }
    fn guards(&self) -> Vec<Arc<dyn Guard>> {
        self.guards.clone()
    }
}

/// A guard that cannot tell.
struct Flaky;
impl Guard for Flaky {
    fn kind(&self) -> &str {
        "flaky"
    }
    fn check(&self, _ctx: &GuardContext<'_>) -> GuardVerdict {
        GuardVerdict::CannotTell("licence server down".into())
    }
}

fn config(probe_budget: usize) -> AgentConfig {
    let mut visibility = VisibilityConfig {
        probe_budget,
        ..VisibilityConfig::default()
    };
    visibility.policies.insert(
        "finance_team".into(),
        PolicyConfig {
            roles: vec!["finance".into()],
            ..PolicyConfig::default()
        },
    );
    visibility.grants.insert(
        "cmo".into(),
        GrantConfig {
            roles: vec!["marketing".into()],
            on_behalf_of_any: false,
        },
    );
    AgentConfig::builder("cfo")
        .accept_from(["cmo"])
        .visibility(visibility)
        .build()
        .expect("a valid agent")
}

struct Fixture {
    catalog: AgentCatalog,
    runs: Arc<AtomicUsize>,
}

fn tool(
    name: &str,
    runs: &Arc<AtomicUsize>,
    policies: &[&str],
    guards: Vec<Arc<dyn Guard>>,
) -> Arc<dyn Tool> {
    Arc::new(Counting {
        name: name.into(),
        runs: runs.clone(),
        markers: AuthMarkers {
            policies: policies
                .iter()
                .filter_map(|p| PolicyRef::parse(p).ok())
                .collect(),
            ..AuthMarkers::default()
        },
        guards,
    })
}

fn fixture(probe_budget: usize) -> Fixture {
    let runs = Arc::new(AtomicUsize::new(0));
    let off: Arc<dyn Guard> = Arc::new(FeatureGuard {
        enabled: false,
        message: "closed".into(),
    });
    let on: Arc<dyn Guard> = Arc::new(FeatureGuard {
        enabled: true,
        message: String::new(),
    });
    let tools = vec![
        tool("payroll", &runs, &["roles:finance"], vec![]),
        tool("budget", &runs, &["finance_team"], vec![]),
        tool("ledger", &runs, &[], vec![]),
        tool("gated_closed", &runs, &[], vec![off]),
        tool("gated_open", &runs, &[], vec![on]),
        tool("gated_flaky", &runs, &[], vec![Arc::new(Flaky)]),
    ];
    Fixture {
        catalog: AgentCatalog::build(&config(probe_budget), &tools, 7),
        runs,
    }
}

fn api(name: &str, roles: &[&str]) -> Identity {
    Identity::Present(Caller::new(
        Principal::Api(name.into()),
        roles.iter().map(|r| r.to_string()).collect(),
    ))
}

/// The host's tokens: `boss` holds every role the tests grant, `intern` none.
fn host_grants() -> RoleGrants {
    let mut grants = RoleGrants::new();
    grants.grant(Principal::Api("boss".into()), ["marketing", "finance"]);
    grants.grant(Principal::Api("intern".into()), ["coffee"]);
    grants
}

/// The cmo calling for `boss`, who holds what the cmo was granted.
fn peer_cmo(f: &Fixture) -> Identity {
    let boss = Origin::Present(Principal::Api("boss".into()));
    f.catalog.peer_identity("cmo", &boss, &host_grants())
}

fn shown(answer: &MetaAnswer) -> Vec<(String, bool)> {
    let v: Value = serde_json::from_str(&answer.content).unwrap();
    v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["authUncertain"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn search(f: &Fixture, who: &Identity, query: &str) -> MetaAnswer {
    let mut cache = ProbeCache::new(0);
    f.catalog
        .search(who, &mut cache, &json!({"query": query, "limit": 50}))
}

#[test]
fn two_principals_of_one_agent_see_different_catalogs() {
    let f = fixture(25);
    let cmo = peer_cmo(&f);
    let alice = api("alice", &["finance"]);
    let cmo_sees: BTreeSet<String> = shown(&search(&f, &cmo, ""))
        .into_iter()
        .map(|c| c.0)
        .collect();
    let alice_sees: BTreeSet<String> = shown(&search(&f, &alice, ""))
        .into_iter()
        .map(|c| c.0)
        .collect();
    assert!(!cmo_sees.contains("payroll") && !cmo_sees.contains("budget"));
    assert!(alice_sees.contains("payroll") && alice_sees.contains("budget"));
    assert!(cmo_sees.contains("ledger"));
    let v: Value = serde_json::from_str(&search(&f, &cmo, "").content).unwrap();
    assert_eq!(v["generation"], 7);
    assert_eq!(v["total"], cmo_sees.len());
    let specs: Vec<String> = f
        .catalog
        .visible_specs(&cmo, &mut ProbeCache::new(0))
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert!(!specs.contains(&"payroll".to_owned()), "{specs:?}");
}

#[test]
fn load_of_a_denied_tool_equals_a_missing_one_byte_for_byte() {
    let f = fixture(25);
    let cmo = peer_cmo(&f);
    let mut cache = ProbeCache::new(0);
    let denied = f
        .catalog
        .load(&cmo, &mut cache, &json!({"name": "payroll"}));
    let denied_other = f.catalog.load(&cmo, &mut cache, &json!({"name": "nope"}));
    // Same name, so compare with a tool that does not exist under that name elsewhere.
    let missing = fixture_without_payroll().load(&cmo, &mut cache, &json!({"name": "payroll"}));
    assert_eq!(denied.content.as_bytes(), missing.content.as_bytes());
    assert!(denied.is_error && missing.is_error && denied_other.is_error);
    let alice = f.catalog.load(
        &api("alice", &["finance"]),
        &mut cache,
        &json!({"name": "payroll"}),
    );
    assert!(!alice.is_error);
    assert!(!alice.content.contains("roles") && !alice.content.contains("finance_team"));
    assert!(alice.content.contains("inputSchema"), "{}", alice.content);
}

fn fixture_without_payroll() -> AgentCatalog {
    let runs = Arc::new(AtomicUsize::new(0));
    AgentCatalog::build(&config(25), &[tool("ledger", &runs, &[], vec![])], 7)
}

#[test]
fn probes_decide_unknown_tools_and_never_run_a_handler() {
    let f = fixture(25);
    let cmo = peer_cmo(&f);
    let cards = shown(&search(&f, &cmo, "gated"));
    // closed: the guard refused the probe (deny, hidden); open: reached the cut (allow);
    // flaky: the guard could not tell (unknown, shown with authUncertain).
    assert_eq!(
        cards,
        vec![("gated_flaky".into(), true), ("gated_open".into(), false)]
    );
    assert_eq!(
        f.runs.load(Ordering::SeqCst),
        0,
        "no handler ran under a probe"
    );
    // Without an identity, a tool with declared policies is denied by rule 1 at once.
    let anon = shown(&search(&f, &Identity::Absent, ""));
    assert!(!anon.iter().any(|(n, _)| n == "payroll"));
    assert_eq!(f.runs.load(Ordering::SeqCst), 0);
}

#[test]
fn the_probe_budget_is_respected() {
    let f = fixture(1);
    let cmo = peer_cmo(&f);
    // Ranked by name among equal scores: gated_closed, gated_flaky, gated_open. Only the
    // first is probed (and hidden); the others stay unknown.
    let cards = shown(&search(&f, &cmo, "gated"));
    assert_eq!(
        cards,
        vec![("gated_flaky".into(), true), ("gated_open".into(), true)]
    );
    let none = fixture(0);
    let cards = shown(&search(&none, &cmo, "gated"));
    assert_eq!(cards.len(), 3);
    assert!(cards.iter().all(|(_, uncertain)| *uncertain));
}

#[test]
fn invoking_a_hidden_tool_fails_in_the_real_check() {
    let f = fixture(25);
    let cmo = peer_cmo(&f);
    let args = json!({"query": "x"});
    for hidden in ["payroll", "budget", "gated_closed"] {
        let refusal = f.catalog.authorize(hidden, &cmo, &args).unwrap_err();
        assert!(
            matches!(refusal, ToolError::Forbidden(_)),
            "{hidden}: {refusal}"
        );
        let typed = MetaAnswer::from_tool_error(&refusal);
        assert!(typed.content.contains("\"forbidden\""));
        assert!(
            !typed.content.contains("finance"),
            "no policy names: {}",
            typed.content
        );
    }
    assert!(f.catalog.authorize("gated_flaky", &cmo, &args).is_err());
    assert!(f.catalog.authorize("ledger", &cmo, &args).is_ok());
    assert!(
        f.catalog
            .authorize("payroll", &api("alice", &["finance"]), &args)
            .is_ok()
    );
    assert!(
        f.catalog
            .authorize("payroll", &Identity::Absent, &args)
            .is_err()
    );
}

/// `cfo` grants the cmo `finance`: a run the cmo places acts with it only for an origin that
/// holds it too, and a refusal says that the origin is why; `on_behalf_of: any` lends it to
/// anyone.
#[test]
fn a_peer_borrows_no_role_its_origin_lacks_and_is_told_why() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tools = [tool("payroll", &runs, &["roles:finance"], vec![])];
    let mut lending = config(25);
    lending.visibility.grants.insert(
        "cmo".into(),
        GrantConfig {
            roles: vec!["finance".into()],
            on_behalf_of_any: false,
        },
    );
    let catalog = AgentCatalog::build(&lending, &tools, 1);
    let args = json!({"query": "x"});
    let as_cmo_for = |origin: Origin| catalog.peer_identity("cmo", &origin, &host_grants());
    let boss = Origin::Present(Principal::Api("boss".into()));
    let intern = Origin::Present(Principal::Api("intern".into()));

    assert!(
        catalog
            .authorize("payroll", &as_cmo_for(boss), &args)
            .is_ok()
    );
    for (origin, words) in [
        (
            Origin::Absent,
            "this request came from anonymous, who does not",
        ),
        (intern, "this request came from api:intern, who does not"),
        (
            Origin::Unknown,
            "who started this request could not be established",
        ),
    ] {
        let who = as_cmo_for(origin.clone());
        let refusal = catalog.authorize("payroll", &who, &args).unwrap_err();
        let text = refusal.to_string();
        assert!(matches!(refusal, ToolError::Forbidden(_)), "{text}");
        assert!(text.contains(words), "{origin}: {text}");
        assert!(
            text.contains("agent:cmo may use this tool only on behalf of"),
            "{text}"
        );
        assert!(!text.contains("finance"), "no role names: {text}");
        let mut cache = ProbeCache::new(0);
        let listed = shown(&catalog.search(&who, &mut cache, &json!({"query": "payroll"})));
        let expected: Vec<(String, bool)> = match origin {
            Origin::Unknown => vec![("payroll".into(), true)],
            _ => vec![],
        };
        assert_eq!(listed, expected, "{origin}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // A role nobody granted is refused as before, without blaming the origin.
    let plain = AgentCatalog::build(&config(25), &tools, 1);
    let who = plain.peer_identity("cmo", &Origin::Absent, &host_grants());
    let refusal = plain.authorize("payroll", &who, &args).unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "forbidden: the caller does not satisfy this tool's access policy"
    );

    // The explicit opt-out: the grant holds on behalf of anyone.
    lending.visibility.grants.insert(
        "cmo".into(),
        GrantConfig {
            roles: vec!["finance".into()],
            on_behalf_of_any: true,
        },
    );
    let trusting = AgentCatalog::build(&lending, &tools, 2);
    let anonymous = trusting.peer_identity("cmo", &Origin::Absent, &host_grants());
    assert!(trusting.authorize("payroll", &anonymous, &args).is_ok());
}

#[test]
fn quota_guard_counts_real_uses_only() {
    let runs = Arc::new(AtomicUsize::new(0));
    let quota: Arc<dyn Guard> = Arc::new(crate::guard::QuotaGuard::new(1));
    let catalog = AgentCatalog::build(&config(25), &[tool("once", &runs, &[], vec![quota])], 1);
    let who = Identity::Absent;
    for _ in 0..3 {
        assert_eq!(
            shown(&catalog.search(&who, &mut ProbeCache::new(0), &json!({"query": "once"}))).len(),
            1
        );
    }
    assert!(
        catalog
            .authorize("once", &who, &json!({"query": "x"}))
            .is_ok()
    );
    catalog.record_use("once", &who);
    assert!(matches!(
        catalog.authorize("once", &who, &json!({"query": "x"})),
        Err(ToolError::Forbidden(_))
    ));
    assert!(
        shown(&catalog.search(&who, &mut ProbeCache::new(0), &json!({"query": "once"}))).is_empty()
    );
}

#[test]
fn bad_requests_are_typed_errors() {
    let f = fixture(25);
    let who = Identity::Absent;
    let mut cache = ProbeCache::new(0);
    let code = |a: &MetaAnswer| {
        assert!(a.is_error);
        let v: Value = serde_json::from_str(&a.content).unwrap();
        v["error"]["code"].as_str().unwrap().to_owned()
    };
    let long = "q".repeat(MAX_QUERY_CHARS + 1);
    assert_eq!(
        code(&f.catalog.search(&who, &mut cache, &json!({"query": long}))),
        "query_too_long"
    );
    for limit in [0, MAX_SEARCH_LIMIT + 1] {
        let a = f
            .catalog
            .search(&who, &mut cache, &json!({"query": "x", "limit": limit}));
        assert_eq!(code(&a), "limit_out_of_range");
    }
    for bad in [
        json!({"query": 3}),
        json!({"limit": 2}),
        json!({"query": "x", "limit": -1}),
        json!("x"),
    ] {
        assert_eq!(
            code(&f.catalog.search(&who, &mut cache, &bad)),
            "invalid_request"
        );
    }
    assert_eq!(
        code(&f.catalog.load(&who, &mut cache, &json!({"nam": "x"}))),
        "invalid_request"
    );
    assert!(parse_invoke(&json!({"name": "x", "arguments": 3})).is_err());
    assert!(parse_invoke(&json!({"name": "x", "args": {}})).is_err());
    assert!(parse_invoke(&json!({"arguments": {}})).is_err());
    let schema = json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"], "additionalProperties": false});
    assert!(validate_arguments(&schema, &json!({"query": "x"})).is_ok());
    assert!(
        validate_arguments(&schema, &json!({}))
            .unwrap_err()
            .contains("missing")
    );
    assert!(
        validate_arguments(&schema, &json!({"query": 1}))
            .unwrap_err()
            .contains("type")
    );
    assert!(
        validate_arguments(&schema, &json!({"query": "x", "x": 1}))
            .unwrap_err()
            .contains("unknown")
    );
}
