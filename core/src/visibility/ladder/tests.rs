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
    Identity::peer(name, &grants)
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
