//! Chain and reply verification: what a receiving host accepts and refuses, hop by hop.

use super::*;
use crate::envelope::{BatchProof, HopSignature};
use crate::testing::{Fleet, NOW_MS, TTL_MS, alice, budget_of_hop, trace_of_hop};
use consort_core::visibility::Principal;
use consort_core::{TreeBudget, TreeSpend};

const SKEW_MS: u64 = 5_000;
/// The receiving host's limits in these tests.
const MAX_DEPTH: usize = 4;
const MAX_LIFETIME_MS: u64 = 15 * 60_000;

fn limits(now_ms: u64) -> ChainLimits {
    ChainLimits {
        now_ms,
        allowed_skew_ms: SKEW_MS,
        max_depth: MAX_DEPTH,
        max_lifetime_ms: MAX_LIFETIME_MS,
    }
}

/// Verifies with batching allowed, and checks that checking every signature alone with
/// `verify_strict` gives the same answer.
fn verify_with(
    envelope: &CallEnvelope,
    ring: &KeyRing,
    placements: &BTreeMap<String, String>,
    now_ms: u64,
) -> Result<VerifiedChain, ChainError> {
    let batched = verify_chain_batched(envelope, ring, placements, &limits(now_ms));
    let alone = verify_chain(envelope, ring, placements, &limits(now_ms));
    assert_eq!(
        batched, alone,
        "batched and one-by-one verification disagree"
    );
    // With a cache of verified roots, cold and then warm: the same answer.
    let roots = VerifiedRoots::new(8);
    for _ in 0..2 {
        assert_eq!(
            verify_chain_cached(envelope, ring, placements, &limits(now_ms), &roots),
            alone,
            "verification with a cache of verified roots disagrees"
        );
    }
    batched
}

/// `host`'s signature of these canonical bytes alone (a batch of one), whoever serves the hop.
fn sign_alone(fleet: &Fleet, host: &str, canonical: &[u8]) -> HopSignature {
    let root = leaf_hash(canonical);
    HopSignature {
        host: host.to_owned(),
        signature: fleet.keys[host].sign(&root_message(&root, 1)),
        batch: BatchProof {
            root,
            leaf_index: 0,
            leaf_count: 1,
            path: Vec::new(),
        },
    }
}

fn verify(fleet: &Fleet, envelope: &CallEnvelope) -> Result<VerifiedChain, ChainError> {
    verify_with(envelope, &fleet.ring, &fleet.placements, NOW_MS)
}

/// Re-signs hop `index` as `host` (what a compromised host could do with its own key).
fn resign(fleet: &Fleet, envelope: &mut CallEnvelope, index: usize, host: &str) {
    let hop = &mut envelope.hops[index];
    hop.signature = Some(sign_alone(fleet, host, &hop_canonical_bytes(hop)));
}

#[test]
fn a_signed_chain_verifies_and_reports_depth() {
    let fleet = Fleet::standard();
    let envelope = fleet.chain(&["cmo", "cfo", "cdo"]);
    let verified = verify(&fleet, &envelope).unwrap();
    assert_eq!(verified.depth(), 2);
    assert_eq!(verified.root_caller(), "cmo");
    assert_eq!(verified.origin(), &alice());
    assert_eq!(envelope.origin(), Some(&alice()));
    assert!(envelope.hops[1..].iter().all(|hop| hop.origin.is_none()));
    assert_eq!(verified.signers(), ["alpha", "beta"]);
    assert_eq!(verified.last_hop().callee, "cdo");
}

#[test]
fn a_chain_of_five_hops_reports_depth_five() {
    // Within the receiver's largest limit, the depth decision is the supervisor's;
    // verification only reports depth.
    let fleet = Fleet::standard();
    let envelope = fleet.chain(&["cmo", "cfo", "cdo", "ceo", "cfo", "cmo"]);
    let roomy = ChainLimits {
        max_depth: 16,
        ..limits(NOW_MS)
    };
    let verified = verify_chain(&envelope, &fleet.ring, &fleet.placements, &roomy).unwrap();
    assert_eq!(verified.depth(), 5);
}

#[test]
fn a_chain_longer_than_the_limit_is_refused_before_any_signature_is_checked() {
    let fleet = Fleet::standard();
    // Five hops, all signed: refused for depth alone.
    let envelope = fleet.chain(&["cmo", "cfo", "cdo", "ceo", "cfo", "cmo"]);
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::TooDeep { depth: 5, limit: 4 })
    );
    // Thousands of hops with garbage signatures: the same refusal, no signature looked at.
    let agents: Vec<&str> = (0..3001).map(|i| ["cmo", "cfo"][i % 2]).collect();
    let mut envelope = fleet.unsigned_chain(&agents);
    for hop in &mut envelope.hops {
        hop.signature = Some(HopSignature {
            host: "alpha".into(),
            signature: [7; 64],
            batch: BatchProof::default(),
        });
    }
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::TooDeep {
            depth: 3000,
            limit: 4
        })
    );
    // Exactly at the limit it verifies.
    let envelope = fleet.chain(&["cmo", "cfo", "cdo", "ceo", "cfo"]);
    assert_eq!(verify(&fleet, &envelope).unwrap().depth(), 4);
}

/// A one-hop call from cmo to cfo issued and expiring at these times, signed.
fn call_at(fleet: &Fleet, issued_at_ms: u64, expires_at_ms: u64) -> CallEnvelope {
    let root = RunId::random();
    let mut envelope = new_call(
        &alice(),
        NextHop {
            caller: "cmo",
            callee: "cfo",
            parent_run: &root,
            tool_use_id: "toolu_0",
            input: "a",
            issued_at_ms,
            expires_at_ms,
            trace: None,
        },
    );
    fleet.sign_all(&mut envelope);
    envelope
}

#[test]
fn a_lifetime_beyond_the_maximum_is_refused() {
    let fleet = Fleet::standard();
    let forever = call_at(&fleet, NOW_MS, u64::MAX);
    assert_eq!(
        verify(&fleet, &forever),
        Err(ChainError::LifetimeTooLong {
            hop: 0,
            lifetime_ms: u64::MAX - NOW_MS,
            limit_ms: MAX_LIFETIME_MS,
        })
    );
    let just_over = call_at(&fleet, NOW_MS, NOW_MS + MAX_LIFETIME_MS + 1);
    assert!(matches!(
        verify(&fleet, &just_over),
        Err(ChainError::LifetimeTooLong { .. })
    ));
    let at_the_limit = call_at(&fleet, NOW_MS, NOW_MS + MAX_LIFETIME_MS);
    assert!(verify(&fleet, &at_the_limit).is_ok());
}

#[test]
fn a_hop_issued_too_long_ago_is_refused() {
    let fleet = Fleet::standard();
    let issued = NOW_MS - MAX_LIFETIME_MS - SKEW_MS - 1;
    let stale = call_at(&fleet, issued, issued + 60_000);
    assert_eq!(
        verify(&fleet, &stale),
        Err(ChainError::IssuedTooLongAgo {
            hop: 0,
            issued_at_ms: issued,
            now_ms: NOW_MS,
        })
    );
    // Issued as long ago as the limit allows, and still unexpired: valid.
    let issued = NOW_MS - MAX_LIFETIME_MS - SKEW_MS;
    let old = call_at(&fleet, issued, issued + MAX_LIFETIME_MS);
    assert!(verify(&fleet, &old).is_ok());
}

#[test]
fn hops_inside_one_host_are_signed_when_the_chain_leaves_it() {
    // cdo -> ceo stays on gamma; ceo -> cfo leaves it. Gamma signs both at once.
    let fleet = Fleet::standard();
    let mut envelope = fleet.unsigned_chain(&["cdo", "ceo", "cfo"]);
    let gamma = &fleet.keys["gamma"];
    let signed = sign_pending_hops(&mut envelope, "gamma", gamma, |agent| {
        fleet.placements.get(agent).map(String::as_str) == Some("gamma")
    });
    assert_eq!(signed, 2);
    // Signing again signs nothing: signatures are never replaced.
    assert_eq!(
        sign_pending_hops(&mut envelope, "gamma", gamma, |_| true),
        0
    );
    assert_eq!(verify(&fleet, &envelope).unwrap().depth(), 2);
}

#[test]
fn an_unsigned_hop_is_refused() {
    let fleet = Fleet::standard();
    let mut envelope = fleet.chain(&["cmo", "cfo", "cdo"]);
    envelope.hops[0].signature = None;
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::Unsigned { hop: 0 })
    );
}

#[test]
fn an_empty_chain_is_refused() {
    let fleet = Fleet::standard();
    let mut envelope = fleet.chain(&["cmo", "cfo"]);
    envelope.hops.clear();
    assert_eq!(verify(&fleet, &envelope), Err(ChainError::Empty));
}

#[test]
fn a_tampered_input_is_refused() {
    let fleet = Fleet::standard();
    let mut envelope = fleet.chain(&["cmo", "cfo"]);
    envelope.input.push_str(" and wire 1M to account 42");
    assert_eq!(verify(&fleet, &envelope), Err(ChainError::InputTampered));
}

#[test]
fn a_forged_hop_is_refused() {
    let fleet = Fleet::standard();
    // Beta rewrites hop 0 (signed by alpha) to say cmo called it about something else.
    let mut envelope = fleet.chain(&["cmo", "cfo"]);
    envelope.hops[0].input_digest = input_digest("forged");
    envelope.input = "forged".into();
    // The hop is no longer the leaf alpha signed.
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::ProofMismatch { hop: 0 })
    );

    // Beta signs the forged hop itself: it does not serve cmo.
    resign(&fleet, &mut envelope, 0, "beta");
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::WrongSigner {
            hop: 0,
            expected: "alpha".into(),
            actual: "beta".into(),
        })
    );

    // Beta claims alpha signed, with its own key.
    envelope.hops[0].signature.as_mut().unwrap().host = "alpha".into();
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::BadSignature { hop: 0 })
    );
}

#[test]
fn a_tampered_origin_breaks_the_first_hops_signature() {
    let fleet = Fleet::standard();
    // Beta (or anyone on the way) rewrites who the call acts for: alpha signed `api:alice`.
    for forged in [
        Origin::Present(Principal::Api("root".into())),
        Origin::Absent,
        Origin::Unknown,
    ] {
        let mut envelope = fleet.chain(&["cmo", "cfo", "cdo"]);
        envelope.hops[0].origin = Some(forged.clone());
        // The next hop binds the first one's digest, so the link breaks before any signature.
        assert_eq!(
            verify(&fleet, &envelope),
            Err(ChainError::BrokenLink { hop: 1 }),
            "{forged}"
        );
        let mut one_hop = fleet.chain(&["cmo", "cfo"]);
        one_hop.hops[0].origin = Some(forged.clone());
        assert_eq!(
            verify(&fleet, &one_hop),
            Err(ChainError::ProofMismatch { hop: 0 }),
            "{forged}"
        );
        assert_ne!(
            hop_canonical_bytes(&one_hop.hops[0]),
            hop_canonical_bytes(&fleet.chain(&["cmo", "cfo"]).hops[0])
        );
    }
}

#[test]
fn a_traced_chain_verifies_and_hands_the_callee_its_callers_span() {
    let fleet = Fleet::standard();
    let envelope = fleet.traced_chain(&["cmo", "cfo", "cdo"]);
    let verified = verify(&fleet, &envelope).unwrap();
    assert_eq!(verified.last_hop().trace, Some(trace_of_hop(1)));
    assert_eq!(envelope.hops[0].trace, Some(trace_of_hop(0)));
}

#[test]
fn a_tampered_trace_context_is_refused_like_any_tampered_hop() {
    let fleet = Fleet::standard();
    let forgeries: [fn(&mut Option<TraceContext>); 5] = [
        |trace| trace.as_mut().unwrap().trace_id[0] ^= 1,
        |trace| trace.as_mut().unwrap().parent_span_id[7] ^= 1,
        |trace| trace.as_mut().unwrap().flags ^= 1,
        |trace| *trace = None,
        |trace| *trace = TraceContext::new([1; 16], [2; 8], 1),
    ];
    for (case, forge) in forgeries.iter().enumerate() {
        // The last hop (the one the receiver runs): its own proof no longer leads to the root
        // its host signed.
        let mut one_hop = fleet.traced_chain(&["cmo", "cfo"]);
        forge(&mut one_hop.hops[0].trace);
        assert_eq!(
            verify(&fleet, &one_hop),
            Err(ChainError::ProofMismatch { hop: 0 }),
            "forgery {case}"
        );
        // An earlier hop: the next hop binds its digest, so the link breaks first.
        let mut two_hops = fleet.traced_chain(&["cmo", "cfo", "cdo"]);
        forge(&mut two_hops.hops[0].trace);
        assert_eq!(
            verify(&fleet, &two_hops),
            Err(ChainError::BrokenLink { hop: 1 }),
            "forgery {case}"
        );
    }
    // A trace context added to a hop signed without one is refused the same way.
    let mut untraced = fleet.chain(&["cmo", "cfo"]);
    untraced.hops[0].trace = Some(trace_of_hop(0));
    assert_eq!(
        verify(&fleet, &untraced),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
}

#[test]
fn a_budgeted_chain_verifies_and_hands_the_callee_its_allowance() {
    let fleet = Fleet::standard();
    let envelope = fleet.budgeted_chain(&["cmo", "cfo", "cdo"]);
    let verified = verify(&fleet, &envelope).unwrap();
    assert_eq!(verified.last_hop().budget, Some(budget_of_hop(1)));
    assert_eq!(envelope.hops[0].budget, Some(budget_of_hop(0)));
}

#[test]
fn a_tampered_allowance_is_refused_like_any_tampered_hop() {
    let fleet = Fleet::standard();
    let forgeries: [fn(&mut Option<TreeBudget>); 5] = [
        |b| b.as_mut().unwrap().max_runs = Some(100),
        |b| b.as_mut().unwrap().max_tokens = None,
        |b| b.as_mut().unwrap().deadline_ms = Some(u64::MAX),
        |b| *b = None,
        |b| *b = Some(TreeBudget::default()),
    ];
    for (case, forge) in forgeries.iter().enumerate() {
        let mut one_hop = fleet.budgeted_chain(&["cmo", "cfo"]);
        forge(&mut one_hop.hops[0].budget);
        assert_eq!(
            verify(&fleet, &one_hop),
            Err(ChainError::ProofMismatch { hop: 0 }),
            "forgery {case}"
        );
        // An earlier hop: the next hop binds its digest, so the link breaks first.
        let mut two_hops = fleet.budgeted_chain(&["cmo", "cfo", "cdo"]);
        forge(&mut two_hops.hops[0].budget);
        assert_eq!(
            verify(&fleet, &two_hops),
            Err(ChainError::BrokenLink { hop: 1 }),
            "forgery {case}"
        );
    }
    // An allowance added to a hop signed without one is refused the same way.
    let mut open = fleet.chain(&["cmo", "cfo"]);
    open.hops[0].budget = Some(budget_of_hop(0));
    assert_eq!(
        verify(&fleet, &open),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
}

#[test]
fn a_host_on_the_way_cannot_widen_the_allowance_it_hands_on_even_signing_it_itself() {
    let fleet = Fleet::standard();
    let widened = |second: Option<TreeBudget>| {
        let mut envelope = fleet.unsigned_chain_with(
            &["cmo", "cfo", "cdo"],
            |_| None,
            |index| match index {
                0 => Some(budget_of_hop(0)),
                _ => second,
            },
        );
        fleet.sign_all(&mut envelope);
        verify(&fleet, &envelope)
    };
    let first = budget_of_hop(0);
    for second in [
        // cfo's run may not hand on its own run, nor more tokens, nor a later deadline.
        Some(first),
        Some(TreeBudget {
            max_runs: Some(8),
            max_tokens: Some(5_001),
            ..first
        }),
        Some(TreeBudget {
            max_runs: Some(1),
            deadline_ms: first.deadline_ms.map(|d| d + 1),
            ..first
        }),
        Some(TreeBudget {
            max_runs: None,
            ..first
        }),
        None,
    ] {
        assert_eq!(
            widened(second),
            Err(ChainError::BudgetWidened { hop: 1 }),
            "{second:?}"
        );
    }
    let narrower = TreeBudget {
        max_runs: Some(8),
        max_tokens: Some(0),
        deadline_ms: Some(NOW_MS),
    };
    assert!(widened(Some(narrower)).is_ok());
    // A tree without a budget at its root may start one on the way: it only narrows.
    let mut late = fleet.unsigned_chain_with(
        &["cmo", "cfo", "cdo"],
        |_| None,
        |index| (index == 1).then(|| budget_of_hop(1)),
    );
    fleet.sign_all(&mut late);
    assert!(verify(&fleet, &late).is_ok());
}

#[test]
fn a_replys_tree_spend_is_signed() {
    let fleet = Fleet::standard();
    let envelope = fleet.budgeted_chain(&["cmo", "cfo"]);
    let hop = envelope.hops[0].clone();
    let mut reply = new_reply(&hop, ReplyStatus::Succeeded, "42");
    reply.tree_spent = Some(TreeSpend {
        runs: 2,
        tokens: 40,
    });
    sign_reply(&mut reply, "beta", &fleet.keys["beta"]);
    assert!(verify_reply(&reply, &fleet.ring, &fleet.placements).is_ok());
    for forged in [
        Some(TreeSpend {
            runs: 1,
            tokens: 40,
        }),
        Some(TreeSpend { runs: 2, tokens: 0 }),
        None,
    ] {
        let mut tampered = reply.clone();
        tampered.tree_spent = forged;
        assert!(
            verify_reply(&tampered, &fleet.ring, &fleet.placements).is_err(),
            "{forged:?}"
        );
    }
}

#[test]
fn the_origin_lives_in_the_first_hop_only() {
    let fleet = Fleet::standard();
    let mut without = fleet.unsigned_chain(&["cmo", "cfo"]);
    without.hops[0].origin = None;
    fleet.sign_all(&mut without);
    assert_eq!(verify(&fleet, &without), Err(ChainError::MissingOrigin));

    // A later hop naming another origin is refused, even signed by its own host.
    let mut second = fleet.unsigned_chain(&["cmo", "cfo", "cdo"]);
    second.hops[1].origin = Some(Origin::Present(Principal::Api("root".into())));
    fleet.sign_all(&mut second);
    assert_eq!(
        verify(&fleet, &second),
        Err(ChainError::MisplacedOrigin { hop: 1 })
    );
}

#[test]
fn a_dropped_hop_is_refused() {
    let fleet = Fleet::standard();
    // Dropping the middle hop of cmo -> cfo -> cdo -> ceo.
    let mut envelope = fleet.chain(&["cmo", "cfo", "cdo", "ceo"]);
    envelope.hops.remove(1);
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::BrokenLink { hop: 1 })
    );

    // Dropping the root hop, to hide who started the chain.
    let mut envelope = fleet.chain(&["cmo", "cfo", "cdo"]);
    envelope.hops.remove(0);
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::BrokenLink { hop: 0 })
    );
}

#[test]
fn reordered_hops_are_refused() {
    let fleet = Fleet::standard();
    let mut envelope = fleet.chain(&["cmo", "cfo", "cdo", "ceo"]);
    envelope.hops.swap(1, 2);
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::BrokenLink { hop: 1 })
    );
}

#[test]
fn a_hop_from_another_chain_is_refused() {
    // Two chains cmo -> cfo -> cdo; splice the second hop of one onto the other.
    let fleet = Fleet::standard();
    let mut first = fleet.chain(&["cmo", "cfo", "cdo"]);
    let second = fleet.chain(&["cmo", "cfo", "cdo"]);
    first.hops[1] = second.hops[1].clone();
    first.input = second.input;
    assert_eq!(
        verify(&fleet, &first),
        Err(ChainError::BrokenLink { hop: 1 })
    );
}

#[test]
fn a_callee_that_is_not_the_next_caller_is_refused() {
    // extend() refuses to build it; a hand-built one is refused by verification.
    let fleet = Fleet::standard();
    let chain = fleet.unsigned_chain(&["cmo", "cfo"]);
    let last = chain.hops[0].clone();
    let next = NextHop {
        caller: "cdo",
        callee: "ceo",
        parent_run: &last.child_run,
        tool_use_id: "toolu_x",
        input: "x",
        issued_at_ms: NOW_MS,
        expires_at_ms: NOW_MS + TTL_MS,
        trace: None,
    };
    assert_eq!(extend(&chain, next), Err(ChainError::BrokenLink { hop: 1 }));
    let mut envelope = chain;
    envelope.hops.push(next_hop(&last, next));
    envelope.input = "x".into();
    fleet.sign_all(&mut envelope);
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::BrokenLink { hop: 1 })
    );
}

#[test]
fn a_child_run_not_derived_from_its_parent_is_refused() {
    let fleet = Fleet::standard();
    let mut envelope = fleet.unsigned_chain(&["cmo", "cfo"]);
    envelope.hops[0].child_run = RunId::random();
    fleet.sign_all(&mut envelope);
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::BadRunId { hop: 0 })
    );
}

#[test]
fn expiry_is_checked_with_skew() {
    let fleet = Fleet::standard();
    let envelope = fleet.chain(&["cmo", "cfo"]);
    let expires = NOW_MS + TTL_MS;
    let at = |now| verify_with(&envelope, &fleet.ring, &fleet.placements, now);
    assert!(at(expires).is_ok());
    assert!(at(expires + SKEW_MS).is_ok());
    assert_eq!(
        at(expires + SKEW_MS + 1),
        Err(ChainError::Expired {
            hop: 0,
            expires_at_ms: expires,
            now_ms: expires + SKEW_MS + 1,
        })
    );
}

#[test]
fn an_earlier_expired_hop_does_not_expire_the_chain() {
    // cfo ran for longer than cmo's call deadline, then called cdo: still valid.
    let fleet = Fleet::standard();
    let now = NOW_MS + 10 * TTL_MS;
    let root = RunId::random();
    let first = new_call(
        &alice(),
        NextHop {
            caller: "cmo",
            callee: "cfo",
            parent_run: &root,
            tool_use_id: "toolu_0",
            input: "a",
            issued_at_ms: NOW_MS,
            expires_at_ms: NOW_MS + TTL_MS,
            trace: None,
        },
    );
    let mut envelope = extend(
        &first,
        NextHop {
            caller: "cfo",
            callee: "cdo",
            parent_run: &first.hops[0].child_run,
            tool_use_id: "toolu_1",
            input: "b",
            issued_at_ms: now,
            expires_at_ms: now + TTL_MS,
            trace: None,
        },
    )
    .unwrap();
    fleet.sign_all(&mut envelope);
    assert!(verify_with(&envelope, &fleet.ring, &fleet.placements, now).is_ok());
}

#[test]
fn a_hop_issued_in_the_future_is_refused() {
    let fleet = Fleet::standard();
    let envelope = fleet.chain(&["cmo", "cfo"]);
    let now = NOW_MS - SKEW_MS - 1;
    assert_eq!(
        verify_with(&envelope, &fleet.ring, &fleet.placements, now),
        Err(ChainError::NotYetValid {
            hop: 0,
            issued_at_ms: NOW_MS,
            now_ms: now,
        })
    );
    assert!(verify_with(&envelope, &fleet.ring, &fleet.placements, NOW_MS - SKEW_MS).is_ok());
}

#[test]
fn a_wrong_signer_is_refused() {
    let fleet = Fleet::standard();
    let mut envelope = fleet.chain(&["cmo", "cfo", "cdo"]);
    resign(&fleet, &mut envelope, 1, "gamma");
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::WrongSigner {
            hop: 1,
            expected: "beta".into(),
            actual: "gamma".into(),
        })
    );
}

#[test]
fn unknown_agents_and_hosts_are_refused() {
    let fleet = Fleet::standard();
    let envelope = fleet.chain(&["cmo", "cfo"]);
    let mut placements = fleet.placements.clone();
    placements.remove("cmo");
    assert_eq!(
        verify_with(&envelope, &fleet.ring, &placements, NOW_MS),
        Err(ChainError::UnknownAgent {
            hop: 0,
            agent: "cmo".into(),
        })
    );
    let ring = KeyRing::from_hosts(
        fleet
            .ring
            .iter()
            .filter(|(host, _)| *host != "alpha")
            .map(|(h, k)| (h, *k)),
    )
    .unwrap();
    assert_eq!(
        verify_with(&envelope, &ring, &fleet.placements, NOW_MS),
        Err(ChainError::UnknownHost {
            hop: 0,
            host: "alpha".into(),
        })
    );
}

#[test]
fn a_malleated_signature_is_refused() {
    // Adding the group order L to the scalar half gives the same signature equation with a
    // non-canonical scalar (the classic ed25519 malleation); it must be refused.
    const L: [u8; 32] = [
        0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde,
        0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
    ];
    let fleet = Fleet::standard();
    let mut envelope = fleet.chain(&["cmo", "cfo"]);
    let signature = &mut envelope.hops[0].signature.as_mut().unwrap().signature;
    let mut carry = 0u16;
    for (byte, add) in signature[32..].iter_mut().zip(L) {
        let sum = *byte as u16 + add as u16 + carry;
        *byte = sum as u8;
        carry = sum >> 8;
    }
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::BadSignature { hop: 0 })
    );

    // Flipping any bit of the signature is refused too.
    let mut envelope = fleet.chain(&["cmo", "cfo"]);
    envelope.hops[0].signature.as_mut().unwrap().signature[0] ^= 1;
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::BadSignature { hop: 0 })
    );
}

#[test]
fn a_wrong_version_is_refused() {
    let fleet = Fleet::standard();
    let mut envelope = fleet.chain(&["cmo", "cfo"]);
    envelope.version = 9;
    assert!(matches!(
        verify(&fleet, &envelope),
        Err(ChainError::WrongVersion { found: 9, .. })
    ));
    // The layout before trace contexts.
    envelope.version = 4;
    assert_eq!(
        verify(&fleet, &envelope),
        Err(ChainError::WrongVersion {
            found: 4,
            expected: ENVELOPE_VERSION
        })
    );
}

#[test]
fn canonical_bytes_keep_field_boundaries() {
    let fleet = Fleet::standard();
    let envelope = fleet.unsigned_chain(&["cmo", "cfo"]);
    let mut shifted = envelope.hops[0].clone();
    shifted.caller = "cmoc".into();
    shifted.callee = "fo".into();
    assert_ne!(
        hop_canonical_bytes(&envelope.hops[0]),
        hop_canonical_bytes(&shifted)
    );
    assert!(
        hop_canonical_bytes(&shifted)
            .windows(HOP_DOMAIN.len())
            .any(|w| w == HOP_DOMAIN)
    );
}

#[test]
fn replies_are_signed_by_the_callee_host() {
    let fleet = Fleet::standard();
    let envelope = fleet.chain(&["cmo", "cfo"]);
    let mut reply = new_reply(&envelope.hops[0], ReplyStatus::Succeeded, "12 400 EUR");
    assert_eq!(
        verify_reply(&reply, &fleet.ring, &fleet.placements),
        Err(ChainError::Unsigned { hop: 0 })
    );
    sign_reply(&mut reply, "beta", &fleet.keys["beta"]);
    verify_reply(&reply, &fleet.ring, &fleet.placements).unwrap();

    // A changed reply is no longer the leaf beta signed.
    let mut tampered = reply.clone();
    tampered.output = "0 EUR".into();
    assert_eq!(
        verify_reply(&tampered, &fleet.ring, &fleet.placements),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
    let mut tampered = reply.clone();
    tampered.status = ReplyStatus::Failed;
    assert_eq!(
        verify_reply(&tampered, &fleet.ring, &fleet.placements),
        Err(ChainError::ProofMismatch { hop: 0 })
    );
    let mut tampered = reply.clone();
    tampered.signature.as_mut().unwrap().signature[3] ^= 1;
    assert_eq!(
        verify_reply(&tampered, &fleet.ring, &fleet.placements),
        Err(ChainError::BadSignature { hop: 0 })
    );

    // The caller's host cannot forge the callee's answer.
    let mut forged = new_reply(&envelope.hops[0], ReplyStatus::Succeeded, "0 EUR");
    sign_reply(&mut forged, "alpha", &fleet.keys["alpha"]);
    assert!(matches!(
        verify_reply(&forged, &fleet.ring, &fleet.placements),
        Err(ChainError::WrongSigner { .. })
    ));

    let mut rerouted = reply.clone();
    rerouted.child_run = RunId::random();
    assert_eq!(
        verify_reply(&rerouted, &fleet.ring, &fleet.placements),
        Err(ChainError::BadRunId { hop: 0 })
    );
}

mod batch;
mod batches;

#[test]
fn a_run_continues_its_own_chain_or_opens_one_as_a_root() {
    let fleet = Fleet::standard();
    let origin = Origin::Absent;
    let root_run = RunId::random();
    let next = |caller, parent_run| NextHop {
        caller,
        callee: "cdo",
        parent_run,
        tool_use_id: "toolu_y",
        input: "y",
        issued_at_ms: NOW_MS,
        expires_at_ms: NOW_MS + TTL_MS,
        trace: None,
    };
    // A root run holds no hops: its call opens a chain, as new_call would.
    let opened = continue_chain(&[], &origin, next("cfo", &root_run)).expect("a root run's call");
    assert_eq!(opened, new_call(&origin, next("cfo", &root_run)));
    // A called run's call extends the chain that ends in it, as extend would.
    let chain = fleet.unsigned_chain(&["cmo", "cfo"]);
    let child = chain.hops[0].child_run.clone();
    let continued = continue_chain(&chain.hops, &origin, next("cfo", &child)).expect("extends");
    assert_eq!(Ok(continued.clone()), extend(&chain, next("cfo", &child)));
    assert_eq!(continued.hops.len(), 2);
    // A chain that does not end in the run placing the call is refused.
    assert_eq!(
        continue_chain(&chain.hops, &origin, next("cfo", &root_run)),
        Err(ChainError::BrokenLink { hop: 1 })
    );
}
