use proptest::prelude::*;

use super::*;
use crate::ConsentGraph;

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn outbound<'a>(
    can_call: &'a [String],
    fleet: &'a [String],
    depth: usize,
    placed: u64,
) -> OutboundFacts<'a> {
    OutboundFacts {
        caller: "cmo",
        callee: "cfo",
        can_call,
        fleet_agents: fleet,
        caller_depth: depth,
        calls_placed: placed,
        limits: Limits::default(),
    }
}

#[test]
fn outbound_allows_a_declared_peer_within_limits() {
    let (can, fleet) = (names(&["cfo"]), names(&["cmo", "cfo"]));
    assert_eq!(check_outbound(&outbound(&can, &fleet, 0, 0)), Ok(()));
    assert_eq!(check_outbound(&outbound(&can, &fleet, 3, 24)), Ok(()));
}

#[test]
fn outbound_refusals_in_order() {
    let (can, fleet) = (names(&["cfo"]), names(&["cmo", "cfo"]));
    let solo = names(&["cmo"]);
    let none: Vec<String> = vec![];
    assert!(matches!(
        check_outbound(&outbound(&can, &solo, 0, 0)),
        Err(Refusal::NoPeers { .. })
    ));
    assert!(matches!(
        check_outbound(&outbound(&none, &fleet, 0, 0)),
        Err(Refusal::NotInCanCall { .. })
    ));
    let other = names(&["cmo", "analyst"]);
    assert!(matches!(
        check_outbound(&outbound(&can, &other, 0, 0)),
        Err(Refusal::UnknownAgent { .. })
    ));
    let depth = check_outbound(&outbound(&can, &fleet, 4, 0)).unwrap_err();
    assert_eq!(
        depth.to_string(),
        "call chain depth limit (4) reached: answer with what you have"
    );
    let cap = check_outbound(&outbound(&can, &fleet, 0, 25)).unwrap_err();
    assert_eq!(
        cap.to_string(),
        "per-run call limit (25) reached: answer with what you have"
    );
    // Depth is checked before the cap: a deep chain is told about depth.
    assert!(matches!(
        check_outbound(&outbound(&can, &fleet, 4, 25)),
        Err(Refusal::DepthLimit { .. })
    ));
}

#[test]
fn outbound_uses_the_callers_configured_limits() {
    let (can, fleet) = (names(&["cfo"]), names(&["cmo", "cfo"]));
    let mut facts = outbound(&can, &fleet, 1, 2);
    facts.limits = Limits {
        max_depth: 2,
        max_calls_per_run: 3,
        ..Limits::default()
    };
    assert_eq!(check_outbound(&facts), Ok(()));
    facts.caller_depth = 2;
    assert_eq!(
        check_outbound(&facts),
        Err(Refusal::DepthLimit { limit: 2 })
    );
    facts.caller_depth = 1;
    facts.calls_placed = 3;
    assert_eq!(check_outbound(&facts), Err(Refusal::CallCap { limit: 3 }));
}

fn inbound(accept: &[String], depth: usize, children: u64, active: usize) -> Result<(), Refusal> {
    check_inbound(&InboundFacts {
        caller: "cmo",
        callee: "cfo",
        accept_from: accept,
        chain_depth: depth,
        children_accepted: children,
        active_runs: active,
        admission_limit: 8,
        limits: Limits::default(),
        budget: None,
        now_ms: 0,
    })
}

#[test]
fn inbound_table() {
    let yes = names(&["cmo"]);
    let no = names(&["analyst"]);
    assert_eq!(inbound(&yes, 1, 0, 0), Ok(()));
    assert_eq!(inbound(&yes, 4, 24, 7), Ok(()));
    assert!(matches!(
        inbound(&no, 1, 0, 0),
        Err(Refusal::NotAccepted { .. })
    ));
    assert!(matches!(
        inbound(&[], 1, 0, 0),
        Err(Refusal::NotAccepted { .. })
    ));
    assert!(matches!(
        inbound(&yes, 5, 0, 0),
        Err(Refusal::DepthLimit { .. })
    ));
    assert!(matches!(
        inbound(&yes, 0, 0, 0),
        Err(Refusal::DepthLimit { .. })
    ));
    assert!(matches!(
        inbound(&yes, 1, 25, 0),
        Err(Refusal::CallCap { .. })
    ));
    assert!(matches!(
        inbound(&yes, 1, 0, 8),
        Err(Refusal::Saturated { .. })
    ));
    // Consent is decided first: an unconsented caller learns nothing about limits.
    assert!(matches!(
        inbound(&no, 9, 99, 99),
        Err(Refusal::NotAccepted { .. })
    ));
}

#[test]
fn a_call_from_another_host_must_come_from_its_callers_host_to_an_agent_served_here() {
    let placements: BTreeMap<String, String> = [
        ("cmo", "alpha"),
        ("cfo", "beta"),
        ("ops", "beta"),
        ("audit", "gamma"),
    ]
    .iter()
    .map(|(a, h)| (a.to_string(), h.to_string()))
    .collect();
    assert_eq!(
        arrived_call(&placements, "beta", "alpha", "cmo", "cfo"),
        Ok(())
    );
    // gamma relays a hop of alpha's cmo: refused even if every signature holds.
    assert_eq!(
        arrived_call(&placements, "beta", "gamma", "cmo", "cfo"),
        Err(Refusal::BadEnvelope {
            callee: "cfo".into(),
            detail: "cmo is not served by host gamma, which sent the call".into()
        })
    );
    assert_eq!(
        arrived_call(&placements, "beta", "alpha", "nobody", "cfo").map_err(|r| r.code()),
        Err("bad_envelope")
    );
    // A callee this host does not serve: the refusal lists the agents it does serve.
    assert_eq!(
        arrived_call(&placements, "beta", "alpha", "cmo", "audit"),
        Err(Refusal::UnknownAgent {
            callee: "audit".into(),
            allowed: "cfo, ops".into()
        })
    );
}

const AGENTS: [&str; 4] = ["a", "b", "c", "d"];

fn subset() -> impl Strategy<Value = Vec<String>> {
    proptest::sample::subsequence(AGENTS.to_vec(), 0..=AGENTS.len())
        .prop_map(|v| v.into_iter().map(str::to_owned).collect())
}

fn limits() -> impl Strategy<Value = Limits> {
    (1..=Limits::MAX_DEPTH_BOUND, 1..=50u32).prop_map(|(max_depth, max_calls_per_run)| Limits {
        max_depth,
        max_calls_per_run,
        ..Limits::default()
    })
}

#[test]
fn one_principal_holds_at_most_its_share_of_an_agent() {
    assert_eq!(admit_for("cfo", "api:alice", 0, 2), Ok(()));
    assert_eq!(admit_for("cfo", "api:alice", 1, 2), Ok(()));
    let refused = admit_for("cfo", "anonymous", 2, 2).unwrap_err();
    assert_eq!(refused.code(), "principal_saturated");
    assert!(
        refused
            .to_string()
            .contains("anonymous already has 2 runs in progress on cfo")
    );
    assert!(admit_for("cfo", "api:alice", 0, 0).is_err());
}

proptest! {
    /// A call passes both checks only where both sides declared the edge: consent is never
    /// wider than the caller's `can_call` and the callee's `accept_from` together.
    #[test]
    fn consent_is_never_wider_than_both_sides(
        caller in 0..4usize, callee in 0..4usize,
        can_call in subset(), accept_from in subset(),
        depth in 0..20usize, placed in 0..60u64, children in 0..60u64,
        caller_limits in limits(), callee_limits in limits(),
    ) {
        let fleet: Vec<String> = AGENTS.iter().map(|s| s.to_string()).collect();
        let (caller, callee) = (AGENTS[caller], AGENTS[callee]);
        let out = check_outbound(&OutboundFacts {
            caller, callee, can_call: &can_call, fleet_agents: &fleet,
            caller_depth: depth, calls_placed: placed, limits: caller_limits,
        });
        let inn = check_inbound(&InboundFacts {
            caller, callee, accept_from: &accept_from, chain_depth: depth + 1,
            children_accepted: children, active_runs: 0, admission_limit: 1,
            limits: callee_limits,
            budget: None,
            now_ms: 0,
        });
        let graph = ConsentGraph::from_declarations([
            (caller.to_owned(), can_call.clone(), Vec::new()),
            (callee.to_owned(), Vec::new(), accept_from.clone()),
        ]);
        if out.is_ok() && inn.is_ok() {
            prop_assert!(can_call.iter().any(|c| c == callee));
            prop_assert!(accept_from.iter().any(|c| c == caller));
            prop_assert!(graph.allows(caller, callee), "edges must show what is enforced");
        }
        if !graph.allows(caller, callee) && caller != callee {
            prop_assert!(out.is_err() || inn.is_err());
        }
    }

    /// Whatever the facts, an accepted call never makes a chain deeper than either side's
    /// depth limit, nor a run's calls more than either side's cap.
    #[test]
    fn depth_and_cap_are_never_exceeded(
        depth in 0..40usize, placed in 0..2000u64, children in 0..2000u64,
        caller_limits in limits(), callee_limits in limits(),
    ) {
        let fleet = vec!["a".to_owned(), "b".to_owned()];
        let one = vec!["b".to_owned()];
        let back = vec!["a".to_owned()];
        let out = check_outbound(&OutboundFacts {
            caller: "a", callee: "b", can_call: &one, fleet_agents: &fleet,
            caller_depth: depth, calls_placed: placed, limits: caller_limits,
        });
        if out.is_ok() {
            prop_assert!(depth < caller_limits.max_depth as usize);
            prop_assert!(placed < u64::from(caller_limits.max_calls_per_run));
        }
        let inn = check_inbound(&InboundFacts {
            caller: "a", callee: "b", accept_from: &back, chain_depth: depth,
            children_accepted: children, active_runs: 0, admission_limit: 1,
            limits: callee_limits,
            budget: None,
            now_ms: 0,
        });
        if inn.is_ok() {
            prop_assert!((1..=callee_limits.max_depth as usize).contains(&depth));
            prop_assert!(children < u64::from(callee_limits.max_calls_per_run));
        }
        if let Err(refusal) = out.and(inn) {
            prop_assert!(!refusal.code().is_empty());
        }
    }
}

#[test]
fn inbound_refuses_a_call_whose_tree_budget_is_spent_after_depth_and_before_the_cap() {
    use crate::TreeBudget;
    use crate::budget::TreeResource;
    let accept = names(&["cmo"]);
    let facts = |budget: Option<TreeBudget>, depth: usize, children: u64| InboundFacts {
        caller: "cmo",
        callee: "cfo",
        accept_from: &accept,
        chain_depth: depth,
        children_accepted: children,
        active_runs: 0,
        admission_limit: 8,
        limits: Limits::default(),
        budget,
        now_ms: 1_000,
    };
    let live = TreeBudget {
        max_runs: Some(1),
        max_tokens: Some(1),
        deadline_ms: Some(1_001),
    };
    assert_eq!(check_inbound(&facts(Some(live), 1, 0)), Ok(()));
    assert_eq!(check_inbound(&facts(None, 1, 0)), Ok(()));
    let late = TreeBudget {
        deadline_ms: Some(1_000),
        ..live
    };
    assert_eq!(
        check_inbound(&facts(Some(late), 1, 0)),
        Err(Refusal::TreeBudgetExhausted {
            what: TreeResource::Wall,
            limit: 1_000,
            spent: 1_000,
        })
    );
    let empty = TreeBudget {
        max_runs: Some(0),
        ..live
    };
    assert_eq!(
        check_inbound(&facts(Some(empty), 1, 0)).map_err(|r| r.code()),
        Err("budget_exhausted")
    );
    // Depth first, the cap after.
    assert!(matches!(
        check_inbound(&facts(Some(empty), 5, 0)),
        Err(Refusal::DepthLimit { .. })
    ));
    assert!(matches!(
        check_inbound(&facts(Some(empty), 1, 25)),
        Err(Refusal::TreeBudgetExhausted { .. })
    ));
}
