//! `wait_decision`: a wait pinned to (agent, run, incarnation) ends only on a forward state
//! change of that very run into a state asked for; another occupant of the seat is
//! `replaced`, a gone agent `not_running`, a missing run `unknown_run`; a stale re-read ends
//! nothing. Checked on fixed cases and over random pins and random observations; and the JSON
//! a caller reads of every [`WaitOutcome`].

use proptest::prelude::*;
use serde_json::json;

use super::*;

fn pin(after_seq: u64, until: WaitUntil) -> WaitPin {
    WaitPin {
        agent: "cfo".into(),
        run: RunId::parse("run_0123456789abcdef0123456789abcdef").unwrap(),
        incarnation: "100-1".into(),
        after_seq,
        until,
    }
}

fn seen(incarnation: &str, run: Option<(RunStatus, u64)>) -> Observed {
    Observed::Agent {
        incarnation: incarnation.into(),
        run,
    }
}

const UNTILS: [WaitUntil; 3] = [
    WaitUntil::Settled,
    WaitUntil::BlockedOrSettled,
    WaitUntil::Changed,
];

#[test]
fn a_replacement_occupant_never_satisfies_a_wait() {
    let settled = Some((RunStatus::Succeeded, 9));
    for until in UNTILS {
        assert_eq!(
            wait_decision(&pin(3, until), &seen("200-1", settled)),
            Some(WaitOutcome::Replaced {
                pinned: "100-1".into(),
                current: "200-1".into()
            })
        );
    }
}

#[test]
fn a_stale_reread_does_not_satisfy_a_wait() {
    // The run was already settled at seq 7 when the caller looked: no change since.
    let p = pin(7, WaitUntil::Settled);
    assert_eq!(
        wait_decision(&p, &seen("100-1", Some((RunStatus::Succeeded, 7)))),
        None
    );
    assert_eq!(
        wait_decision(&p, &seen("100-1", Some((RunStatus::Succeeded, 8)))),
        Some(WaitOutcome::Matched {
            status: RunStatus::Succeeded,
            seq: 8
        })
    );
}

#[test]
fn only_the_states_asked_for_end_a_wait() {
    let running = seen("100-1", Some((RunStatus::Running, 5)));
    let blocked = seen("100-1", Some((RunStatus::Blocked, 5)));
    assert_eq!(wait_decision(&pin(1, WaitUntil::Settled), &running), None);
    assert_eq!(wait_decision(&pin(1, WaitUntil::Settled), &blocked), None);
    assert!(wait_decision(&pin(1, WaitUntil::BlockedOrSettled), &blocked).is_some());
    assert_eq!(
        wait_decision(&pin(1, WaitUntil::BlockedOrSettled), &running),
        None
    );
    assert!(wait_decision(&pin(1, WaitUntil::Changed), &running).is_some());
}

#[test]
fn disappearance_and_unknown_runs_are_typed() {
    let p = pin(0, WaitUntil::Settled);
    assert_eq!(
        wait_decision(&p, &Observed::AgentGone),
        Some(WaitOutcome::NotRunning)
    );
    assert_eq!(
        wait_decision(&p, &seen("100-1", None)),
        Some(WaitOutcome::UnknownRun)
    );
    // A gone agent is not-running even if the caller pinned it long ago.
    assert_eq!(WaitOutcome::NotRunning.code(), "not_running");
}

#[test]
fn until_reads_its_text_forms() {
    assert_eq!(WaitUntil::parse("settled"), Some(WaitUntil::Settled));
    assert_eq!(
        WaitUntil::parse("blocked"),
        Some(WaitUntil::BlockedOrSettled)
    );
    assert_eq!(WaitUntil::parse("changed"), Some(WaitUntil::Changed));
    assert_eq!(WaitUntil::parse("done"), None);
}

#[test]
fn every_outcome_serializes_with_its_outcome_tag_and_reads_back() {
    for (outcome, value) in [
        (
            WaitOutcome::Matched {
                status: RunStatus::Succeeded,
                seq: 3,
            },
            json!({"outcome": "matched", "status": "succeeded", "seq": 3}),
        ),
        (
            WaitOutcome::Replaced {
                pinned: "100-1".into(),
                current: "200-1".into(),
            },
            json!({"outcome": "replaced", "pinned": "100-1", "current": "200-1"}),
        ),
        (WaitOutcome::NotRunning, json!({"outcome": "not_running"})),
        (WaitOutcome::UnknownRun, json!({"outcome": "unknown_run"})),
        (WaitOutcome::Unreachable, json!({"outcome": "unreachable"})),
        (
            WaitOutcome::Timeout {
                status: Some(RunStatus::Blocked),
                last_seq: 12,
            },
            json!({"outcome": "timeout", "status": "blocked", "last_seq": 12}),
        ),
        (
            WaitOutcome::Timeout {
                status: None,
                last_seq: 0,
            },
            json!({"outcome": "timeout", "status": null, "last_seq": 0}),
        ),
    ] {
        assert_eq!(serde_json::to_value(&outcome).unwrap(), value);
        assert_eq!(value["outcome"], outcome.code(), "{outcome:?}");
        assert_eq!(
            serde_json::from_value::<WaitOutcome>(value).unwrap(),
            outcome
        );
    }
}

#[test]
fn until_serializes_as_its_text_form() {
    for (until, text) in [
        (WaitUntil::Settled, "settled"),
        (WaitUntil::BlockedOrSettled, "blocked_or_settled"),
        (WaitUntil::Changed, "changed"),
    ] {
        assert_eq!(serde_json::to_value(until).unwrap(), json!(text));
        assert_eq!(WaitUntil::parse(text), Some(until));
    }
}

/// Incarnations drawn from a small set, so that pins and observations often agree.
const INCARNATIONS: [&str; 3] = ["100-1", "100-2", "200-1"];

fn status() -> impl Strategy<Value = RunStatus> {
    prop_oneof![
        Just(RunStatus::Queued),
        Just(RunStatus::Running),
        Just(RunStatus::Waiting),
        Just(RunStatus::Blocked),
        Just(RunStatus::Succeeded),
        Just(RunStatus::Failed),
    ]
}

fn until() -> impl Strategy<Value = WaitUntil> {
    proptest::sample::select(UNTILS.to_vec())
}

fn pins() -> impl Strategy<Value = WaitPin> {
    (
        proptest::sample::select(INCARNATIONS.to_vec()),
        0..20u64,
        until(),
    )
        .prop_map(|(incarnation, after_seq, until)| WaitPin {
            incarnation: incarnation.into(),
            ..pin(after_seq, until)
        })
}

fn observations() -> impl Strategy<Value = Observed> {
    prop_oneof![
        1 => Just(Observed::AgentGone),
        6 => (
            proptest::sample::select(INCARNATIONS.to_vec()),
            proptest::option::weighted(0.8, (status(), 0..25u64)),
        )
            .prop_map(|(incarnation, run)| seen(incarnation, run)),
    ]
}

/// The statuses `until` accepts, written out from its documentation.
fn accepted(until: WaitUntil, status: RunStatus) -> bool {
    match until {
        WaitUntil::Settled => matches!(status, RunStatus::Succeeded | RunStatus::Failed),
        WaitUntil::BlockedOrSettled => matches!(
            status,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Blocked
        ),
        WaitUntil::Changed => true,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Another incarnation in the seat always ends the wait as `replaced`, naming both, and
    /// never as `matched`, whatever the run did.
    #[test]
    fn a_different_incarnation_is_always_replaced_never_matched(
        p in pins(),
        observed in observations(),
    ) {
        let decision = wait_decision(&p, &observed);
        if let Observed::Agent { incarnation, .. } = &observed
            && incarnation != &p.incarnation
        {
            let replaced = WaitOutcome::Replaced {
                pinned: p.incarnation.clone(),
                current: incarnation.clone(),
            };
            prop_assert_eq!(decision, Some(replaced), "{:?} on {:?}", p, observed);
        } else if let Some(WaitOutcome::Replaced { pinned, current }) = decision {
            prop_assert!(false, "replaced {} by {} with {:?}", pinned, current, observed);
        }
    }

    /// `matched` exactly when the pinned incarnation's run moved past `after_seq` into a
    /// state `until` accepts, and then with that status and sequence.
    #[test]
    fn a_wait_matches_exactly_on_a_forward_change_of_the_pinned_run_into_a_state_asked_for(
        p in pins(),
        observed in observations(),
    ) {
        let decision = wait_decision(&p, &observed);
        let expected = match &observed {
            Observed::Agent { incarnation, run: Some((status, seq)) }
                if incarnation == &p.incarnation
                    && *seq > p.after_seq
                    && accepted(p.until, *status) =>
            {
                Some((*status, *seq))
            }
            _ => None,
        };
        match (expected, &decision) {
            (Some((status, seq)), _) => {
                prop_assert_eq!(decision, Some(WaitOutcome::Matched { status, seq }));
            }
            (None, Some(WaitOutcome::Matched { .. })) => {
                prop_assert!(false, "{:?} matched {:?} for {:?}", observed, decision, p);
            }
            (None, _) => {}
        }
    }

    /// A run whose sequence has not moved past `after_seq` ends no wait as `matched`,
    /// whatever its status: the caller has already seen that state.
    #[test]
    fn a_stale_reread_never_matches(
        p in pins(),
        status in status(),
        back in 0..20u64,
    ) {
        let seq = p.after_seq.saturating_sub(back);
        let decision = wait_decision(&p, &seen(&p.incarnation, Some((status, seq))));
        prop_assert_eq!(decision, None);
    }

    /// A gone agent is `not_running` and a missing run of the pinned incarnation is
    /// `unknown_run`, whatever the pin.
    #[test]
    fn a_gone_agent_is_not_running_and_a_missing_run_is_unknown(p in pins()) {
        prop_assert_eq!(
            wait_decision(&p, &Observed::AgentGone),
            Some(WaitOutcome::NotRunning)
        );
        prop_assert_eq!(
            wait_decision(&p, &seen(&p.incarnation, None)),
            Some(WaitOutcome::UnknownRun)
        );
    }

    /// The wait goes on (`None`) exactly when the pinned incarnation's run exists and either
    /// has not moved past `after_seq` or is in a state not asked for.
    #[test]
    fn a_wait_goes_on_exactly_while_the_pinned_run_has_not_reached_a_new_state_asked_for(
        p in pins(),
        observed in observations(),
    ) {
        let goes_on = match &observed {
            Observed::Agent { incarnation, run: Some((status, seq)) } => {
                incarnation == &p.incarnation
                    && (*seq <= p.after_seq || !accepted(p.until, *status))
            }
            _ => false,
        };
        let decision = wait_decision(&p, &observed);
        prop_assert_eq!(decision.is_none(), goes_on, "{:?} on {:?}: {:?}", p, observed, decision);
    }
}
