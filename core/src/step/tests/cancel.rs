//! Canceling a run in each status, and what reaches a canceled run afterwards.

use super::*;

fn cancel(by: &str, reason: Option<&str>) -> Input {
    Input::Cancel {
        run: root(),
        by: by.into(),
        reason: reason.map(str::to_owned),
    }
}

/// A run whose model turn placed a call that has not been accepted yet: `running`, with the
/// placement (and the model's next turn) still out.
fn placing_run(p: &Policy<'_>) -> Run {
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), p));
    run.step(answer(turn, calls(&["tu_0_0"])), p);
    let step = run.step(advance(), p);
    assert_eq!(placed(&step), ["tu_0_0"]);
    assert_eq!(run.status, RunStatus::Running);
    run
}

/// Runs in every unsettled status, named.
fn unsettled_runs(p: &Policy<'_>) -> Vec<(&'static str, Run)> {
    vec![
        ("queued", Run::new(0)),
        ("running", placing_run(p)),
        ("waiting", waiting_run(p)),
        ("blocked", blocked_run()),
    ]
}

#[test]
fn a_cancel_settles_every_unsettled_run_failed_in_one_transaction() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    for (name, mut run) in unsettled_runs(&p) {
        assert_eq!(run.status.to_string(), name);
        let before = run.log.len();
        let step = run.step(cancel("api:alice", Some("the model loops")), &p);
        assert_eq!(step.verdict, Verdict::None, "{name}");
        assert_eq!(step.effects, vec![Effect::Settled], "{name}");
        let write = step.write.expect("a cancel writes");
        assert_eq!(write.status, Some(RunStatus::Failed), "{name}");
        assert_eq!(
            write.error.as_deref(),
            Some("canceled by api:alice: the model loops"),
            "{name}"
        );
        assert_eq!(write.output, None);
        assert_eq!(write.cost, CostDelta::default(), "a cancel costs nothing");
        assert_eq!(run.status, RunStatus::Failed, "{name}");
        let kinds: Vec<_> = run.log[before..].iter().map(RunEvent::kind).collect();
        assert_eq!(kinds, ["canceled", "failed", "status"], "{name}");
        assert_eq!(
            run.log[before].data(),
            json!({"by": "api:alice", "reason": "the model loops"})
        );
        let RunEvent::Status(change) = &run.log[before + 2] else {
            panic!("the status change comes last");
        };
        assert_eq!(change.from.to_string(), name);
        assert_eq!(change.to, RunStatus::Failed);
        assert_eq!(
            change.error.as_deref(),
            Some("canceled by api:alice: the model loops")
        );
        assert_eq!(run.view, RunView::from_events(&run.log), "{name}");
    }
}

#[test]
fn a_cancel_without_a_reason_names_only_who_canceled() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    for reason in [None, Some(""), Some("   ")] {
        let mut run = waiting_run(&p);
        let before = run.log.len();
        let step = run.step(cancel("operator", reason), &p);
        assert_eq!(
            step.write.and_then(|w| w.error).as_deref(),
            Some("canceled by operator")
        );
        assert_eq!(run.log[before].data(), json!({"by": "operator"}));
    }
    let mut run = waiting_run(&p);
    let step = run.step(cancel("operator", Some("  stale  ")), &p);
    assert_eq!(
        step.write.and_then(|w| w.error).as_deref(),
        Some("canceled by operator: stale")
    );
}

#[test]
fn a_settled_run_refuses_a_cancel_and_writes_nothing() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut succeeded = settled_run(&p);
    let mut canceled = waiting_run(&p);
    canceled.step(cancel("operator", None), &p);
    let mut failed = Run::new(0);
    let turn = asked(&failed.step(advance(), &p));
    failed.step(answer(turn, ModelStep::Wait), &p);
    for (status, run) in [
        ("succeeded", &mut succeeded),
        ("failed", &mut canceled),
        ("failed", &mut failed),
    ] {
        let before = run.log.len();
        let step = run.step(cancel("api:alice", Some("again")), &p);
        assert_eq!(step.write, None);
        assert!(step.effects.is_empty());
        let Verdict::Refused(refusal) = step.verdict else {
            panic!("a settled run refuses a cancel");
        };
        assert_eq!(
            refusal,
            Refusal::AlreadySettled {
                run: root().to_string(),
                status: status.into(),
            }
        );
        assert_eq!(refusal.code(), "already_settled");
        assert!(refusal.to_string().contains("already settled"), "{refusal}");
        assert_eq!(run.log.len(), before);
    }
}

/// Everything that can still arrive for a run canceled while its work was out.
fn late_inputs(turn: &TurnAsked) -> Vec<Input> {
    let child = RunId::child_of(&root(), "tu_0_0");
    let reply = |placing: bool, outcome: ReplyOutcome| Input::Reply {
        reply: ReplyIn {
            parent_run: root(),
            child_run: child.clone(),
            callee: "cfo".into(),
            tool_use_id: "tu_0_0".into(),
            outcome,
            output: "the numbers".into(),
            tree_cost: CostDelta {
                model_turns: 1,
                ..CostDelta::default()
            },
            tree_spent: None,
        },
        placing,
    };
    vec![
        advance(),
        Input::Advance {
            busy: BTreeSet::from(["tu_0_0".to_owned()]),
            thinking: true,
        },
        answer(turn.clone(), ModelStep::Answer("too late".into())),
        answer(turn.clone(), calls(&["tu_9_0"])),
        Input::ModelAnswered {
            asked: turn.clone(),
            answer: Err("the model failed".into()),
        },
        Input::ToolFinished {
            tool_use_id: "t".into(),
            name: "ledger".into(),
            content: "rows".into(),
            is_error: false,
            counts: true,
        },
        Input::CallEnded {
            tool_use_id: "tu_0_0".into(),
            callee: "cfo".into(),
            outcome: CallOutcome::Accepted {
                child_run: child.clone(),
                existing: false,
            },
        },
        reply(true, ReplyOutcome::Succeeded),
        reply(false, ReplyOutcome::Succeeded),
        reply(false, ReplyOutcome::Failed),
        Input::Decide {
            run: root(),
            gate: None,
            decision: crate::step::Decision::Approve,
            by: "operator".into(),
        },
        Input::WaitElapsed {
            tool_use_id: "tu_0_0".into(),
        },
        Input::Resume,
        deliver("ops", "d-1", "news"),
    ]
}

#[test]
fn a_canceled_run_takes_nothing_that_arrives_later() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    for (name, mut run) in unsettled_runs(&p) {
        let turn = TurnAsked {
            pending: 0,
            seen_seq: run.view.last_seq,
            seen_tool_uses: run.view.seen_tool_uses.clone(),
        };
        run.step(cancel("operator", None), &p);
        let canceled = run.log.clone();
        for input in late_inputs(&turn) {
            let shown = format!("{input:?}");
            let step = run.step(input, &p);
            assert_eq!(step.write, None, "{name}: {shown}");
            assert!(
                step.effects.is_empty(),
                "{name}: {shown} gave {:?}",
                step.effects
            );
            assert_ne!(step.verdict, Verdict::Hold, "{name}: {shown}");
            assert_eq!(run.status, RunStatus::Failed);
        }
        assert_eq!(run.log, canceled, "{name}: the log is final");
    }
}

#[test]
fn a_reply_to_a_canceled_run_is_taken_so_its_sender_stops_and_a_decision_is_refused() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let turn = TurnAsked {
        pending: 0,
        seen_seq: 0,
        seen_tool_uses: BTreeSet::new(),
    };
    // Placed and accepted before the cancel, or still being placed: either way the callee's
    // host is told the reply was taken, so it does not send it again.
    for mut run in [waiting_run(&p), placing_run(&p)] {
        run.step(cancel("operator", None), &p);
        for input in late_inputs(&turn) {
            let verdict = run.step(input.clone(), &p).verdict;
            match input {
                Input::Reply { .. } => assert_eq!(verdict, Verdict::Taken),
                Input::Decide { .. } => assert!(matches!(
                    verdict,
                    Verdict::Refused(Refusal::NotAwaitingApproval { .. })
                )),
                Input::Deliver { .. } => assert!(matches!(
                    verdict,
                    Verdict::Refused(Refusal::DeliveryTargetSettled { .. })
                )),
                _ => assert_eq!(verdict, Verdict::None),
            }
        }
    }
    // A reply naming a call the run never asked for is still dropped, settled or not.
    let mut run = waiting_run(&p);
    run.step(cancel("operator", None), &p);
    let stranger = run.step(
        Input::Reply {
            reply: ReplyIn {
                parent_run: root(),
                child_run: RunId::child_of(&root(), "zz"),
                callee: "cfo".into(),
                tool_use_id: "zz".into(),
                outcome: ReplyOutcome::Succeeded,
                output: "x".into(),
                tree_cost: CostDelta::default(),
                tree_spent: None,
            },
            placing: false,
        },
        &p,
    );
    assert_eq!(
        stranger.verdict,
        Verdict::Dropped("a call this run never placed")
    );
}

proptest! {
    /// Whatever arrives after a cancel, in any order and any number, the run stays `failed`
    /// with the cancel's error and its log does not grow.
    #[test]
    fn nothing_after_a_cancel_unsettles_the_run(
        state in 0..4usize,
        order in proptest::collection::vec(0..14usize, 0..20),
    ) {
        let (cc, fl) = (can_call(), fleet());
        let p = policy(&cc, &fl, Limits::default());
        let (_, mut run) = unsettled_runs(&p).swap_remove(state);
        let turn = TurnAsked {
                pending: run.view.pending_calls(),
            seen_seq: run.view.last_seq,
            seen_tool_uses: run.view.seen_tool_uses.clone(),
        };
        run.step(cancel("api:alice", Some("stop")), &p);
        let canceled = run.log.clone();
        let inputs = late_inputs(&turn);
        for i in order {
            let step = run.step(inputs[i % inputs.len()].clone(), &p);
            prop_assert_eq!(step.write, None);
        }
        prop_assert_eq!(run.status, RunStatus::Failed);
        prop_assert_eq!(&run.log, &canceled);
        prop_assert_eq!(&run.view, &RunView::from_events(&run.log));
    }
}
