//! Tests of the ladder: T1 policy results, which candidates are probed, and the probe cache.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};

use super::{
    DEFAULT_PROBE_BUDGET, DecidedBy, PolicyDefinition, PolicyRegistry, Probe, ProbeOutcome,
    Verdict, Visibility, evaluate_candidates, evaluate_policies,
};
use crate::visibility::decision::{Decision, Rule};
use crate::visibility::descriptor::{Anonymity, Auth, PolicyRef};
use crate::visibility::error::VisibilityError;
use crate::visibility::facts::{
    Caller, CallerFacts, Identity, PolicyResult, Principal, RoleGrants,
};
use crate::visibility::origin::Origin;
use crate::visibility::probe_cache::ProbeCache;

/// A probe that answers from a table (default `ReachedCut`) and counts its invocations.
struct CountingProbe {
    calls: Cell<usize>,
    seen: RefCell<Vec<(String, Principal)>>,
    answers: BTreeMap<String, ProbeOutcome>,
}

impl CountingProbe {
    fn new(answers: &[(&str, ProbeOutcome)]) -> Self {
        Self {
            calls: Cell::new(0),
            seen: RefCell::new(Vec::new()),
            answers: answers
                .iter()
                .map(|(tool, outcome)| (tool.to_string(), *outcome))
                .collect(),
        }
    }
}

impl Probe for CountingProbe {
    fn probe(&self, tool: &str, principal: &Principal) -> ProbeOutcome {
        self.calls.set(self.calls.get() + 1);
        self.seen
            .borrow_mut()
            .push((tool.to_owned(), principal.clone()));
        self.answers
            .get(tool)
            .copied()
            .unwrap_or(ProbeOutcome::ReachedCut)
    }
}

fn guarded() -> Auth {
    Auth {
        anonymous: Anonymity::No,
        policies: vec![],
        imperative: true,
    }
}

fn caller(name: &str, roles: &[&str]) -> Identity {
    let mut grants = RoleGrants::new();
    grants.grant(Principal::Agent(name.into()), roles.iter().copied());
    // Trusted for any origin, so the grant alone decides here (the origin's part is tested
    // below).
    grants.for_any_origin(Principal::Agent(name.into()));
    Identity::peer(name, &grants, &Origin::Absent, &RoleGrants::new())
}

fn names(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("tool{i:02}")).collect()
}

#[test]
fn t1_role_and_named_policies() {
    let mut registry = PolicyRegistry::new();
    registry
        .define(
            "finance",
            PolicyDefinition {
                roles: vec!["finance".into()],
                ..PolicyDefinition::default()
            },
        )
        .unwrap()
        .define(
            "cmo-only",
            PolicyDefinition {
                principals: vec![Principal::Agent("cmo".into())],
                ..PolicyDefinition::default()
            },
        )
        .unwrap()
        .define(
            "own-records",
            PolicyDefinition {
                needs_resource: true,
                ..PolicyDefinition::default()
            },
        )
        .unwrap();
    let Identity::Present(cmo) = caller("cmo", &["finance"]) else {
        unreachable!()
    };
    let Identity::Present(cfo) = caller("cfo", &["audit"]) else {
        unreachable!()
    };
    let eval =
        |policy: &str, who: &Caller| registry.evaluate(&PolicyRef::parse(policy).unwrap(), who);
    assert_eq!(eval("finance", &cmo), PolicyResult::Allow);
    assert_eq!(eval("finance", &cfo), PolicyResult::Deny);
    assert_eq!(eval("cmo-only", &cmo), PolicyResult::Allow);
    assert_eq!(eval("cmo-only", &cfo), PolicyResult::Deny);
    assert_eq!(eval("own-records", &cmo), PolicyResult::NoResult);
    assert_eq!(eval("undefined", &cmo), PolicyResult::NoResult);
    assert_eq!(eval("roles:audit,legal", &cfo), PolicyResult::Allow);
    assert_eq!(eval("roles:audit,legal", &cmo), PolicyResult::Deny);

    assert!(matches!(
        registry.define("empty", PolicyDefinition::default()),
        Err(VisibilityError::EmptyPolicyDefinition { .. })
    ));
    assert!(matches!(
        registry.define(
            "roles:x",
            PolicyDefinition {
                roles: vec!["x".into()],
                ..PolicyDefinition::default()
            }
        ),
        Err(VisibilityError::InvalidPolicyName { .. })
    ));
    let parsed: PolicyDefinition =
        serde_json::from_str(r#"{"roles": ["finance"], "principals": ["agent:cmo"]}"#).unwrap();
    assert_eq!(parsed.evaluate(&cmo), PolicyResult::Allow);
    assert_eq!(parsed.evaluate(&cfo), PolicyResult::Deny);
    assert!(serde_json::from_str::<PolicyDefinition>(r#"{"role": ["x"]}"#).is_err());
}

#[test]
fn t1_asks_nothing_without_present_identity() {
    let auth = Auth {
        anonymous: Anonymity::No,
        policies: vec![PolicyRef::parse("roles:x").unwrap()],
        imperative: false,
    };
    let registry = PolicyRegistry::new();
    assert_eq!(
        evaluate_policies(&auth, &Identity::Absent, &registry),
        CallerFacts::absent()
    );
    assert_eq!(
        evaluate_policies(&auth, &Identity::Unknown, &registry),
        CallerFacts::unknown()
    );
}

#[test]
fn probes_run_only_on_the_first_k_candidates() {
    let identity = caller("cmo", &[]);
    let registry = PolicyRegistry::new();
    let probe = CountingProbe::new(&[]);
    let visibility = Visibility {
        identity: &identity,
        registry: &registry,
        probe: Some(&probe),
        probe_budget: 5,
    };
    let auth = guarded();
    let tools = names(12);
    let candidates: Vec<(&str, &Auth)> = tools.iter().map(|n| (n.as_str(), &auth)).collect();
    let mut cache = ProbeCache::new(7);
    let verdicts = evaluate_candidates(&candidates, 7, &visibility, &mut cache);
    assert_eq!(probe.calls.get(), 5);
    assert!(verdicts[..5].iter().all(|v| v.decision == Decision::Allow
        && v.decided_by == DecidedBy::Probe(ProbeOutcome::ReachedCut)));
    assert!(verdicts[5..].iter().all(|v| v.decision == Decision::Unknown
        && v.decided_by == DecidedBy::Unresolved(Rule::ImperativeCheck)));
    let probed: BTreeSet<String> = probe.seen.borrow().iter().map(|(t, _)| t.clone()).collect();
    assert_eq!(probed, tools[..5].iter().cloned().collect());
    assert!(
        probe
            .seen
            .borrow()
            .iter()
            .all(|(_, p)| *p == Principal::Agent("cmo".into()))
    );
}

#[test]
fn default_budget_is_25() {
    let identity = caller("cmo", &[]);
    let registry = PolicyRegistry::new();
    let probe = CountingProbe::new(&[]);
    let visibility = Visibility {
        probe: Some(&probe),
        ..Visibility::without_probe(&identity, &registry)
    };
    let auth = guarded();
    let tools = names(40);
    let candidates: Vec<(&str, &Auth)> = tools.iter().map(|n| (n.as_str(), &auth)).collect();
    evaluate_candidates(&candidates, 0, &visibility, &mut ProbeCache::new(0));
    assert_eq!(probe.calls.get(), DEFAULT_PROBE_BUDGET);
    assert_eq!(DEFAULT_PROBE_BUDGET, 25);
}

#[test]
fn settled_tools_are_not_probed_and_cache_hits_do_not_reprobe() {
    let identity = caller("cmo", &[]);
    let registry = PolicyRegistry::new();
    let probe = CountingProbe::new(&[("b", ProbeOutcome::Refused)]);
    let visibility = Visibility {
        identity: &identity,
        registry: &registry,
        probe: Some(&probe),
        probe_budget: 25,
    };
    let open = Auth {
        anonymous: Anonymity::Yes,
        policies: vec![],
        imperative: false,
    };
    let auth = guarded();
    let candidates = [("open", &open), ("a", &auth), ("b", &auth)];
    let mut cache = ProbeCache::new(1);
    let first = evaluate_candidates(&candidates, 1, &visibility, &mut cache);
    assert_eq!(probe.calls.get(), 2, "the allowed tool is never probed");
    assert_eq!(first[0].decided_by, DecidedBy::Rules(Rule::Otherwise));
    assert_eq!(first[2].decision, Decision::Deny);
    let second = evaluate_candidates(&candidates, 1, &visibility, &mut cache);
    assert_eq!(probe.calls.get(), 2, "cache hits do not re-probe");
    assert_eq!(first, second);

    // A cached outcome is used even beyond the budget: it costs nothing.
    let tight = Visibility {
        probe_budget: 0,
        ..visibility
    };
    let third = evaluate_candidates(&candidates, 1, &tight, &mut cache);
    assert_eq!(third, first);
    assert_eq!(probe.calls.get(), 2);
}

#[test]
fn a_generation_change_drops_the_cache_and_probes_again() {
    let identity = caller("cmo", &[]);
    let registry = PolicyRegistry::new();
    let probe = CountingProbe::new(&[]);
    let visibility = Visibility {
        identity: &identity,
        registry: &registry,
        probe: Some(&probe),
        probe_budget: 25,
    };
    let auth = guarded();
    let candidates = [("a", &auth)];
    let mut cache = ProbeCache::new(1);
    evaluate_candidates(&candidates, 1, &visibility, &mut cache);
    evaluate_candidates(&candidates, 1, &visibility, &mut cache);
    assert_eq!(probe.calls.get(), 1);
    evaluate_candidates(&candidates, 2, &visibility, &mut cache);
    assert_eq!(probe.calls.get(), 2);
    assert_eq!(cache.generation(), 2);
}

#[test]
fn an_other_outcome_disables_the_tool_for_everyone() {
    let registry = PolicyRegistry::new();
    let probe = CountingProbe::new(&[("flaky", ProbeOutcome::Other)]);
    let auth = guarded();
    let candidates = [("flaky", &auth)];
    let mut cache = ProbeCache::new(1);
    for name in ["cmo", "cfo", "cmo"] {
        let identity = caller(name, &[]);
        let visibility = Visibility {
            identity: &identity,
            registry: &registry,
            probe: Some(&probe),
            probe_budget: 25,
        };
        let verdicts = evaluate_candidates(&candidates, 1, &visibility, &mut cache);
        assert_eq!(
            verdicts[0],
            Verdict {
                decision: Decision::Unknown,
                decided_by: DecidedBy::Unresolved(Rule::ImperativeCheck),
            }
        );
    }
    assert_eq!(probe.calls.get(), 1);
    assert!(cache.is_disabled("flaky"));
}

#[test]
fn probes_run_as_anonymous_for_absent_identity_and_never_for_unknown() {
    let registry = PolicyRegistry::new();
    let probe = CountingProbe::new(&[]);
    let maybe_open = Auth {
        anonymous: Anonymity::Unknown,
        policies: vec![],
        imperative: false,
    };
    let candidates = [("maybe", &maybe_open)];
    let mut cache = ProbeCache::new(1);
    let absent = Visibility {
        probe: Some(&probe),
        ..Visibility::without_probe(&Identity::Absent, &registry)
    };
    let verdicts = evaluate_candidates(&candidates, 1, &absent, &mut cache);
    assert_eq!(verdicts[0].decision, Decision::Allow);
    assert_eq!(probe.seen.borrow()[0].1, Principal::Anonymous);

    let unknown = Visibility {
        probe: Some(&probe),
        ..Visibility::without_probe(&Identity::Unknown, &registry)
    };
    let verdicts = evaluate_candidates(&candidates, 1, &unknown, &mut cache);
    assert_eq!(
        verdicts[0].decided_by,
        DecidedBy::Unresolved(Rule::UnknownAnonymity)
    );
    assert_eq!(probe.calls.get(), 1);
}

#[test]
fn without_a_probe_unknown_stays_unknown() {
    let identity = caller("cmo", &[]);
    let registry = PolicyRegistry::new();
    let auth = guarded();
    let verdicts = evaluate_candidates(
        &[("a", &auth)],
        0,
        &Visibility::without_probe(&identity, &registry),
        &mut ProbeCache::new(0),
    );
    assert_eq!(
        verdicts[0].decided_by,
        DecidedBy::Unresolved(Rule::ImperativeCheck)
    );
}

/// `assistant` as `hr` sees it: granted `hr` (for origins that hold it), acting for `origin`,
/// on a host whose token `alice` holds `hr` and `bob` nothing.
fn assistant_for(origin: &Origin) -> Caller {
    let mut grants = RoleGrants::new();
    grants.grant(Principal::Agent("assistant".into()), ["hr"]);
    let mut host = RoleGrants::new();
    host.grant(Principal::Api("alice".into()), ["hr"]);
    host.grant(Principal::Api("bob".into()), ["sales"]);
    let Identity::Present(caller) = Identity::peer("assistant", &grants, origin, &host) else {
        unreachable!("a peer is present")
    };
    caller
}

fn api(name: &str) -> Origin {
    Origin::Present(Principal::Api(name.into()))
}

/// A role policy and an `origin_roles` policy for every origin state, and whether the origin
/// is what stands in the way.
#[test]
fn t1_reads_the_origin_three_valued() {
    let mut registry = PolicyRegistry::new();
    registry
        .define(
            "asked_by_hr",
            PolicyDefinition {
                origin_roles: vec!["hr".into()],
                ..PolicyDefinition::default()
            },
        )
        .unwrap()
        .define(
            "assistant_for_hr",
            PolicyDefinition {
                principals: vec![Principal::Agent("assistant".into())],
                origin_roles: vec!["hr".into()],
                ..PolicyDefinition::default()
            },
        )
        .unwrap();
    let role = PolicyRef::parse("roles:hr").unwrap();
    let asked = PolicyRef::parse("asked_by_hr").unwrap();
    let both = PolicyRef::parse("assistant_for_hr").unwrap();
    let cases = [
        (
            api("alice"),
            PolicyResult::Allow,
            PolicyResult::Allow,
            false,
        ),
        (api("bob"), PolicyResult::Deny, PolicyResult::Deny, true),
        (Origin::Absent, PolicyResult::Deny, PolicyResult::Deny, true),
        (
            Origin::Unknown,
            PolicyResult::Unknown,
            PolicyResult::Unknown,
            true,
        ),
    ];
    for (origin, by_role, by_origin, blocked) in cases {
        let caller = assistant_for(&origin);
        assert_eq!(
            registry.evaluate(&role, &caller),
            by_role,
            "roles:hr for {origin}"
        );
        assert_eq!(
            registry.evaluate(&asked, &caller),
            by_origin,
            "origin_roles for {origin}"
        );
        assert_eq!(
            registry.evaluate(&both, &caller),
            by_origin,
            "both for {origin}"
        );
        for policy in [&role, &asked, &both] {
            assert_eq!(
                registry.blocked_by_origin(policy, &caller),
                blocked,
                "{policy:?} for {origin}"
            );
        }
    }
    // A role nobody granted is not the origin's fault; nor is an undefined policy.
    let audit = PolicyRef::parse("roles:audit").unwrap();
    let undefined = PolicyRef::parse("nowhere").unwrap();
    for origin in [api("bob"), Origin::Absent, Origin::Unknown] {
        let caller = assistant_for(&origin);
        assert_eq!(registry.evaluate(&audit, &caller), PolicyResult::Deny);
        assert!(!registry.blocked_by_origin(&audit, &caller));
        assert!(!registry.blocked_by_origin(&undefined, &caller));
    }
    // A root run is its own origin: an origin_roles policy reads its own roles.
    let alice = Caller::new(
        Principal::Api("alice".into()),
        BTreeSet::from(["hr".to_owned()]),
    );
    assert_eq!(registry.evaluate(&asked, &alice), PolicyResult::Allow);
    let parsed: PolicyDefinition = serde_json::from_str(r#"{"origin_roles": ["hr"]}"#).unwrap();
    assert_eq!(parsed.evaluate(&alice), PolicyResult::Allow);
    assert!(registry.define("only-origin", parsed).is_ok());
}

/// An anonymous origin hides a role-gated tool from the calling agent; an origin that holds
/// the role shows it; an unknown origin leaves it unknown and is never probed.
#[test]
fn the_ladder_keeps_origins_apart() {
    let registry = PolicyRegistry::new();
    let probe = CountingProbe::new(&[]);
    let gated = Auth {
        anonymous: Anonymity::No,
        policies: vec![PolicyRef::parse("roles:hr").unwrap()],
        imperative: false,
    };
    let gated_and_guarded = Auth {
        imperative: true,
        ..gated.clone()
    };
    let candidates = [("salary", &gated), ("bonus", &gated_and_guarded)];
    let mut cache = ProbeCache::new(1);
    let mut verdicts_for = |origin: &Origin| {
        let identity = Identity::Present(assistant_for(origin));
        let visibility = Visibility {
            probe: Some(&probe),
            ..Visibility::without_probe(&identity, &registry)
        };
        evaluate_candidates(&candidates, 1, &visibility, &mut cache)
            .into_iter()
            .map(|v| v.decision)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        verdicts_for(&api("alice")),
        [Decision::Allow, Decision::Allow]
    );
    assert_eq!(
        verdicts_for(&Origin::Absent),
        [Decision::Deny, Decision::Deny]
    );
    assert_eq!(verdicts_for(&api("bob")), [Decision::Deny, Decision::Deny]);
    assert_eq!(
        verdicts_for(&Origin::Unknown),
        [Decision::Unknown, Decision::Unknown]
    );
    // Only alice's guarded tool was left to a probe: an unknown origin is never probed as.
    assert_eq!(probe.calls.get(), 1);
    assert!(!cache.is_disabled("bonus"));
}
