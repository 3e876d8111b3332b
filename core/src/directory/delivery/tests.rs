use proptest::prelude::*;
use serde_json::json;

use super::*;

fn run() -> RunId {
    RunId::parse("run_0123456789abcdef0123456789abcdef").unwrap()
}

fn enqueued(seq: u64) -> Receipt {
    Receipt::Enqueued {
        delivery_id: "d-1".into(),
        run: run(),
        seq,
        existing: false,
    }
}

#[test]
fn the_digest_is_sha256_hex_and_tells_every_field_apart() {
    let digest = payload_digest("cfo", Some(&run()), "hello");
    assert_eq!(digest.len(), 64);
    assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(digest, payload_digest("cfo", Some(&run()), "hello"));
    assert_ne!(digest, payload_digest("cfo", None, "hello"));
    // Bytes moved between fields make another payload.
    assert_ne!(
        payload_digest("ab", None, "c"),
        payload_digest("a", None, "bc")
    );
}

#[test]
fn a_new_run_delivery_names_the_same_run_each_time_and_no_child_run() {
    let id = delivery_run_id("cfo", "cmo", "d-1");
    assert_eq!(id, delivery_run_id("cfo", "cmo", "d-1"));
    assert_ne!(id, delivery_run_id("cfo", "cmo", "d-2"));
    assert_ne!(id, delivery_run_id("cfo", "ops", "d-1"));
    assert_ne!(id, delivery_run_id("ops", "cmo", "d-1"));
    assert!(RunId::parse(id.as_str()).is_ok());
}

#[test]
fn delivery_ids_are_short_and_plain() {
    for good in ["d", "d-1", "a.b:c_D-9", &"x".repeat(128)] {
        assert_eq!(check_delivery_id(good), Ok(()), "{good}");
    }
    for bad in ["", "has space", "é", "a/b", &"x".repeat(129)] {
        assert_eq!(
            check_delivery_id(bad),
            Err(Refusal::MalformedDelivery),
            "{bad}"
        );
    }
}

#[test]
fn receipts_and_outcomes_have_their_wire_forms() {
    assert_eq!(
        serde_json::to_value(enqueued(7)).unwrap(),
        json!({"receipt": "enqueued", "delivery_id": "d-1", "run": run().as_str(), "seq": 7, "existing": false})
    );
    let rejected = Receipt::rejected(
        "d-1",
        &Refusal::DeliveryTargetBlocked {
            run: run().to_string(),
        },
    );
    assert_eq!(rejected.code(), "rejected");
    assert_eq!(rejected.delivery_id(), "d-1");
    let wire = serde_json::to_value(&rejected).unwrap();
    assert_eq!(wire["receipt"], "rejected");
    assert_eq!(wire["code"], "delivery_target_blocked");
    let unknown = Receipt::UnknownDelivery {
        delivery_id: "d-9".into(),
    };
    assert_eq!(unknown.code(), "unknown_delivery");
    for receipt in [enqueued(7), rejected, unknown] {
        let text = serde_json::to_string(&receipt).unwrap();
        assert_eq!(serde_json::from_str::<Receipt>(&text).unwrap(), receipt);
    }

    let outcomes = [
        DeliveryOutcome::Active {
            receipt: enqueued(7),
            activity_seq: 8,
        },
        DeliveryOutcome::Stalled {
            receipt: enqueued(7),
            window_ms: 5_000,
        },
        DeliveryOutcome::Rejected {
            delivery_id: "d-1".into(),
            code: "delivery_conflict".into(),
            reason: "no".into(),
        },
        DeliveryOutcome::Timeout {
            delivery_id: "d-1".into(),
            detail: "no receipt in 30s".into(),
        },
    ];
    let codes: Vec<_> = outcomes.iter().map(DeliveryOutcome::code).collect();
    assert_eq!(codes, ["active", "stalled", "rejected", "timeout"]);
    for outcome in outcomes {
        let wire = serde_json::to_value(&outcome).unwrap();
        assert_eq!(wire["outcome"], outcome.code());
        assert_eq!(
            serde_json::from_value::<DeliveryOutcome>(wire).unwrap(),
            outcome
        );
    }
}

#[test]
fn only_activity_past_the_message_makes_a_delivery_active() {
    assert_eq!(
        activity_outcome(enqueued(7), Some(9), 100),
        DeliveryOutcome::Active {
            receipt: enqueued(7),
            activity_seq: 9
        }
    );
    for observed in [None, Some(3), Some(7)] {
        assert_eq!(
            activity_outcome(enqueued(7), observed, 100),
            DeliveryOutcome::Stalled {
                receipt: enqueued(7),
                window_ms: 100
            }
        );
    }
    let rejected = Receipt::rejected("d-1", &Refusal::MalformedDelivery);
    let outcome = activity_outcome(rejected, Some(100), 100);
    assert!(
        matches!(&outcome, DeliveryOutcome::Rejected { code, .. } if code == "malformed_delivery")
    );
    let unknown = Receipt::UnknownDelivery {
        delivery_id: "d-9".into(),
    };
    let outcome = activity_outcome(unknown, Some(100), 100);
    assert!(
        matches!(&outcome, DeliveryOutcome::Rejected { code, delivery_id, .. } if code == "unknown_delivery" && delivery_id == "d-9")
    );
    assert!(!outcome.is_success());
}

#[test]
fn a_sender_whose_can_call_lacks_the_peer_is_refused_on_its_own_side() {
    let can_call = vec!["c7".to_owned()];
    assert_eq!(sender_consents("a1", &can_call, "c7"), Ok(()));
    assert_eq!(sender_consents(OPERATOR_SENDER, &[], "b3"), Ok(()));
    let refusal = sender_consents("a1", &can_call, "b3").unwrap_err();
    assert_eq!(
        refusal,
        Refusal::DeliveryNotInCanCall {
            sender: "a1".into(),
            callee: "b3".into(),
            allowed: "c7".into(),
        }
    );
    assert_eq!(refusal.code(), "delivery_not_in_can_call");
    // The sentence names the true reason, the sender's own can_call, and does not blame the
    // peer, which was not asked.
    assert_eq!(
        refusal.to_string(),
        "a1 may not deliver to b3: b3 is not in your own agents.can_call (c7); nothing was sent and b3 was not asked; deliver to one of those or answer with what you have"
    );
    let empty = sender_consents("a1", &[], "b3").unwrap_err();
    assert!(
        empty.to_string().contains("agents.can_call is empty"),
        "{empty}"
    );
    // The peer's half is another rule with another code.
    let peer = receiver_consents("a1", &[], "b3").unwrap_err();
    assert_eq!(peer.code(), "delivery_not_consented");
    assert_ne!(peer.code(), refusal.code());
    assert_eq!(receiver_consents("a1", &["a1".to_owned()], "b3"), Ok(()));
}

#[test]
fn a_sender_side_refusal_has_the_shape_of_a_peer_side_one() {
    let mine = DeliveryOutcome::rejected("d-1", &sender_consents("a1", &[], "b3").unwrap_err());
    let peers = activity_outcome(
        Receipt::rejected("d-1", &receiver_consents("a1", &[], "b3").unwrap_err()),
        None,
        100,
    );
    assert_eq!(mine.code(), "rejected");
    assert_eq!(peers.code(), "rejected");
    let (mine, peers) = (
        serde_json::to_value(&mine).unwrap(),
        serde_json::to_value(&peers).unwrap(),
    );
    let keys = |v: &serde_json::Value| {
        v.as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    assert_eq!(keys(&mine), keys(&peers));
    assert_eq!(mine["outcome"], "rejected");
    assert_eq!(mine["delivery_id"], "d-1");
    assert_eq!(mine["code"], "delivery_not_in_can_call");
    assert_eq!(peers["code"], "delivery_not_consented");
}

#[test]
fn a_lookup_that_could_not_reach_the_host_is_unreachable_never_unknown() {
    let receipt = Receipt::unreachable("d-1", "beta", "beta is unreachable: timed out");
    assert_eq!(receipt.code(), "unreachable");
    assert_eq!(receipt.delivery_id(), "d-1");
    let wire = serde_json::to_value(&receipt).unwrap();
    assert_eq!(
        wire,
        json!({"receipt": "unreachable", "delivery_id": "d-1", "host": "beta", "detail": "beta is unreachable: timed out"})
    );
    assert_eq!(serde_json::from_value::<Receipt>(wire).unwrap(), receipt);
    // Read as an outcome it says what a timeout says: it may or may not have arrived.
    let outcome = activity_outcome(receipt, Some(100), 100);
    assert_eq!(outcome.code(), "timeout");
    assert!(!outcome.is_success());
    assert!(
        matches!(&outcome, DeliveryOutcome::Timeout { delivery_id, detail } if delivery_id == "d-1" && detail.contains("beta could not be asked")),
        "{outcome:?}"
    );
}

fn receipt() -> impl Strategy<Value = Receipt> {
    prop_oneof![
        (0..20u64, any::<bool>()).prop_map(|(seq, existing)| Receipt::Enqueued {
            delivery_id: "d-1".into(),
            run: run(),
            seq,
            existing,
        }),
        Just(Receipt::rejected("d-1", &Refusal::MalformedDelivery)),
        Just(Receipt::UnknownDelivery {
            delivery_id: "d-1".into()
        }),
        Just(Receipt::unreachable("d-1", "beta", "down")),
    ]
}

proptest! {
    /// The digest is a function of its fields, and changing any one of them changes it.
    #[test]
    fn the_digest_is_stable_and_sensitive_to_each_field(
        to in "[a-z]{1,4}",
        other_to in "[a-z]{1,4}",
        with_run in any::<bool>(),
        tool_use in "[a-z]{1,3}",
        text in "[a-z ]{0,8}",
        other_text in "[a-z ]{0,8}",
    ) {
        let target = with_run.then(|| RunId::child_of(&run(), &tool_use));
        let digest = payload_digest(&to, target.as_ref(), &text);
        prop_assert_eq!(&digest, &payload_digest(&to, target.as_ref(), &text));
        if other_to != to {
            prop_assert_ne!(&digest, &payload_digest(&other_to, target.as_ref(), &text));
        }
        if other_text != text {
            prop_assert_ne!(&digest, &payload_digest(&to, target.as_ref(), &other_text));
        }
        let other_run = match &target {
            Some(_) => None,
            None => Some(RunId::child_of(&run(), &tool_use)),
        };
        prop_assert_ne!(&digest, &payload_digest(&to, other_run.as_ref(), &text));
    }

    /// Two deliveries name the same new run only when (callee, sender, id) are the same.
    #[test]
    fn delivery_runs_are_distinct_per_callee_sender_and_id(
        a in ("[a-c]{1,2}", "[a-c]{1,2}", "[a-c]{1,2}"),
        b in ("[a-c]{1,2}", "[a-c]{1,2}", "[a-c]{1,2}"),
    ) {
        let same = delivery_run_id(&a.0, &a.1, &a.2) == delivery_run_id(&b.0, &b.1, &b.2);
        prop_assert_eq!(same, a == b);
    }

    /// A delivery is never active unless the run's seq moved past the message's; a refused
    /// one stays refused.
    #[test]
    fn an_outcome_is_never_active_without_a_forward_seq(
        receipt in receipt(),
        observed in proptest::option::of(0..25u64),
        window_ms in 0..10_000u64,
    ) {
        let outcome = activity_outcome(receipt.clone(), observed, window_ms);
        match &receipt {
            Receipt::Enqueued { seq, .. } => {
                let forward = observed.is_some_and(|o| o > *seq);
                prop_assert_eq!(outcome.is_success(), forward);
                if !forward {
                    prop_assert_eq!(outcome, DeliveryOutcome::Stalled { receipt, window_ms });
                }
            }
            Receipt::Rejected { .. } | Receipt::UnknownDelivery { .. } => {
                prop_assert_eq!(outcome.code(), "rejected");
            }
            Receipt::Queued { .. } => {
                prop_assert_eq!(outcome.code(), "queued");
                prop_assert!(!outcome.is_success());
            }
            Receipt::Unreachable { .. } => {
                prop_assert_eq!(outcome.code(), "timeout");
                prop_assert!(!outcome.is_success());
            }
        }
    }
}

#[test]
fn a_new_run_delivery_is_stored_once_answered_from_its_run_when_repeated_and_refused_when_reused() {
    let run = delivery_run_id("b3", "a1", "d-1");
    assert_eq!(new_run_delivery("b3", "d-1", &run, None, "hello"), Ok(()));
    assert_eq!(
        new_run_delivery("b3", "d-1", &run, Some("hello"), "hello"),
        Err(Receipt::Enqueued {
            delivery_id: "d-1".into(),
            run: run.clone(),
            seq: 1,
            existing: true,
        }),
        "the same message finds the run it made"
    );
    let Err(conflict) = new_run_delivery("b3", "d-1", &run, Some("hello"), "other") else {
        panic!("a reused id with another message is refused");
    };
    assert_eq!(conflict.code(), "rejected");
    assert!(matches!(&conflict, Receipt::Rejected { code, .. } if code == "delivery_conflict"));
    let Err(empty) = new_run_delivery("b3", "d-2", &run, None, "  ") else {
        panic!("an empty message is refused");
    };
    assert!(matches!(&empty, Receipt::Rejected { code, .. } if code == "malformed_delivery"));
}

#[test]
fn a_machines_verdict_is_the_receipt_the_sender_reads() {
    let run = RunId::random();
    assert_eq!(
        delivery_receipt(
            "d-1",
            &run,
            &Verdict::Delivered {
                seq: 7,
                existing: false
            }
        ),
        Receipt::Enqueued {
            delivery_id: "d-1".into(),
            run: run.clone(),
            seq: 7,
            existing: false,
        }
    );
    let refusal = Refusal::DeliveryTargetBlocked {
        run: run.to_string(),
    };
    assert_eq!(
        delivery_receipt("d-1", &run, &Verdict::Refused(refusal.clone())),
        Receipt::rejected("d-1", &refusal)
    );
    let code = |verdict: &Verdict| match delivery_receipt("d-1", &run, verdict) {
        Receipt::Rejected { code, .. } => code,
        other => panic!("{other:?}"),
    };
    assert_eq!(code(&Verdict::Dropped("gone")), "delivery_not_your_run");
    assert_eq!(code(&Verdict::Taken), "malformed_delivery");
    assert_eq!(
        run_not_found(&run).to_string(),
        format!(
            "{run} is not a run you placed; a delivery may only go into your own calls: nothing was written; deliver without a run to start a new one"
        )
    );
}
