//! What a step decides once and keeps to: a turn's calls are decided as the turn is recorded
//! and placed as decided after a restart under a reloaded config; and a model that answered
//! `wait` while a reply arrived is asked again for it rather than left waiting.

use super::*;

fn reply(id: &str) -> Input {
    Input::Reply {
        reply: ReplyIn {
            parent_run: root(),
            child_run: RunId::child_of(&root(), id),
            callee: "cfo".into(),
            tool_use_id: id.into(),
            outcome: ReplyOutcome::Succeeded,
            output: "the numbers".into(),
            tree_cost: CostDelta::default(),
            tree_spent: None,
        },
        placing: false,
    }
}

#[test]
fn a_call_let_through_with_its_turn_is_placed_again_under_a_narrowed_config() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), &p));
    let recorded = run.step(answer(turn, calls(&["a"])), &p);
    let Some(RunEvent::ModelTurn(turn)) = recorded.write.as_ref().unwrap().events.first() else {
        panic!("no turn recorded: {recorded:?}");
    };
    assert!(turn.calls_decided);
    assert_eq!(placed(&run.step(advance(), &p)), ["a"]);
    // The host stopped before the call's outcome was recorded, and agent.yaml no longer
    // lists the callee: the call may have reached it, so it goes out again as decided.
    let none: Vec<String> = Vec::new();
    let narrowed = policy(&none, &fl, Limits::default());
    let restarted = step(&RunView::from_events(&run.log), advance(), &narrowed);
    assert_eq!(placed(&restarted), ["a"]);
    assert!(restarted.write.is_none());
}

#[test]
fn a_call_of_a_turn_recorded_before_calls_were_decided_is_decided_when_placed() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), &p));
    run.step(answer(turn, calls(&["a"])), &p);
    // The same log as an older version wrote it: the turn says nothing of its calls.
    let log: Vec<RunEvent> = run
        .log
        .iter()
        .cloned()
        .map(|e| match e {
            RunEvent::ModelTurn(mut turn) => {
                turn.calls_decided = false;
                RunEvent::ModelTurn(turn)
            }
            other => other,
        })
        .collect();
    let none: Vec<String> = Vec::new();
    let narrowed = policy(&none, &fl, Limits::default());
    let decided = step(&RunView::from_events(&log), advance(), &narrowed);
    assert!(placed(&decided).is_empty());
    let refused = decided.write.unwrap();
    assert!(matches!(
        refused.events.first(),
        Some(RunEvent::CallRefused(r)) if r.code == "not_in_can_call"
    ));
}

#[test]
fn a_wait_answered_while_a_reply_arrived_asks_the_model_again() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = waiting_run(&p);
    // A message is news: the waiting run asks its model again, its call still out.
    let delivered = run.step(
        Input::Deliver {
            run: root(),
            from: "ops".into(),
            delivery_id: "d1".into(),
            digest: "d1".into(),
            text: "any news?".into(),
        },
        &p,
    );
    assert!(matches!(delivered.verdict, Verdict::Delivered { .. }));
    let turn = asked(&run.step(advance(), &p));
    assert_eq!(turn.pending, 1);
    // The reply lands while the model thinks.
    let taken = run.step(reply("tu_0_0"), &p);
    assert_eq!(taken.verdict, Verdict::Taken);
    // The model, which did not see it, waits: the run asks again at once instead of waiting
    // on calls that are all answered.
    let waited = run.step(answer(turn, ModelStep::Wait), &p);
    assert_eq!(waited.effects, vec![Effect::Advance]);
    let again = run.step(advance(), &p);
    assert!(
        matches!(again.effects.as_slice(), [Effect::AskModel(_)]),
        "the reply is news the model has not read: {again:?}"
    );
}
