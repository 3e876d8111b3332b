//! A tree budget through `step`: the allowances a turn records and its placements carry, the
//! calls refused once nothing is left (with the code the model reads), replies that give back
//! what a child did not use, and the deadline. Every step is also taken from a view folded
//! again from the log, as a restarted host would, and must decide the same.

use super::*;
use crate::budget::{TreeResource, standing};
use crate::{TreeBudget, TreeSpend};

const NOW: u64 = 1_700_000_000_000;

fn budgeted(budget: TreeBudget) -> Run {
    let mut run = Run {
        status: RunStatus::Queued,
        log: Vec::new(),
        view: RunView::default(),
    };
    run.push(RunEvent::Created(Created {
        channel: Channel::Api,
        input: "question".into(),
        parent_run: None,
        hop_depth: 0,
        principal: "anonymous".into(),
        budget: Some(budget),
    }));
    run
}

fn runs(max_runs: u64) -> TreeBudget {
    TreeBudget {
        max_runs: Some(max_runs),
        ..TreeBudget::default()
    }
}

fn at<'a>(p: &Policy<'a>, now_ms: u64) -> Policy<'a> {
    Policy { now_ms, ..*p }
}

/// Steps `input` from the kept view and from the log folded again: both decide the same.
fn restartable(run: &mut Run, input: Input, p: &Policy<'_>) -> Step {
    let again = step(&RunView::from_events(&run.log), input.clone(), p);
    let step = run.step(input, p);
    assert_eq!(step, again, "a restarted host decides otherwise");
    assert_eq!(run.view, RunView::from_events(&run.log));
    step
}

fn allowances_placed(step: &Step) -> Vec<(String, Option<TreeBudget>)> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::PlaceCall {
                tool_use_id,
                allowance,
                ..
            } => Some((tool_use_id.clone(), *allowance)),
            _ => None,
        })
        .collect()
}

fn accepted(run: &mut Run, tool_use_id: &str, p: &Policy<'_>) -> RunId {
    let child = RunId::child_of(&root(), tool_use_id);
    restartable(
        run,
        Input::CallEnded {
            tool_use_id: tool_use_id.into(),
            callee: "cfo".into(),
            outcome: CallOutcome::Accepted {
                child_run: child.clone(),
                existing: false,
            },
        },
        p,
    );
    child
}

fn reply(child: &RunId, tool_use_id: &str, tree_spent: Option<TreeSpend>) -> Input {
    Input::Reply {
        reply: ReplyIn {
            parent_run: root(),
            child_run: child.clone(),
            callee: "cfo".into(),
            tool_use_id: tool_use_id.into(),
            outcome: ReplyOutcome::Succeeded,
            output: "done".into(),
            tree_cost: CostDelta::default(),
            tree_spent,
        },
        placing: false,
    }
}

fn refusals(run: &Run) -> Vec<(String, String, Option<Refusal>)> {
    run.log
        .iter()
        .filter_map(|e| match e {
            RunEvent::CallRefused(r) => {
                Some((r.tool_use_id.clone(), r.code.clone(), r.refusal.clone()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn calls_beyond_the_runs_left_are_refused_with_budget_exhausted_and_the_rest_carry_their_share() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    // Three runs: the root and two children.
    let mut run = budgeted(runs(3));
    let turn = asked(&restartable(&mut run, advance(), &p));
    restartable(&mut run, answer(turn, calls(&["a", "b", "c", "d"])), &p);
    let out = restartable(&mut run, advance(), &p);
    let one = Some(runs(1));
    assert_eq!(
        allowances_placed(&out),
        [("a".into(), one), ("b".into(), one)],
        "each placed child may hold its own run only"
    );
    let spent = Refusal::TreeBudgetExhausted {
        what: TreeResource::Runs,
        limit: 3,
        spent: 3,
    };
    assert_eq!(
        refusals(&run),
        [
            ("c".into(), "budget_exhausted".into(), Some(spent.clone())),
            ("d".into(), "budget_exhausted".into(), Some(spent.clone())),
        ]
    );
    // The model reads the refusal as the call's result.
    let Some(Message::ToolResult {
        content, is_error, ..
    }) = run.view.conversation.last()
    else {
        panic!("no tool result");
    };
    assert!(*is_error);
    assert_eq!(content, &spent.to_string());
    assert!(content.contains("answer with what you have"), "{content}");
}

#[test]
fn a_placement_made_again_after_a_restart_carries_the_allowance_its_turn_recorded() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = budgeted(runs(7));
    let turn = asked(&restartable(&mut run, advance(), &p));
    restartable(&mut run, answer(turn, calls(&["a", "b"])), &p);
    let first = restartable(&mut run, advance(), &p);
    assert_eq!(
        allowances_placed(&first),
        [("a".into(), Some(runs(3))), ("b".into(), Some(runs(3)))]
    );
    // a is accepted and replies having spent one run; b's placement was lost with the host.
    let child = accepted(&mut run, "a", &p);
    restartable(
        &mut run,
        reply(&child, "a", Some(TreeSpend { runs: 1, tokens: 0 })),
        &p,
    );
    // A restarted host places b again from the log alone: the same allowance, not a new
    // share of what a gave back.
    let again = step(&RunView::from_events(&run.log), advance(), &p);
    assert_eq!(allowances_placed(&again), [("b".into(), Some(runs(3)))]);
}

#[test]
fn a_reply_gives_back_what_its_child_did_not_use_and_a_later_turn_hands_it_out() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = budgeted(runs(4));
    let turn = asked(&restartable(&mut run, advance(), &p));
    restartable(&mut run, answer(turn, calls(&["a"])), &p);
    let out = restartable(&mut run, advance(), &p);
    assert_eq!(allowances_placed(&out), [("a".into(), Some(runs(3)))]);
    let child = accepted(&mut run, "a", &p);
    assert_eq!(standing(&run.view).committed().runs, 4);
    let taken = restartable(
        &mut run,
        reply(&child, "a", Some(TreeSpend { runs: 1, tokens: 0 })),
        &p,
    );
    assert_eq!(taken.verdict, Verdict::Taken);
    let RunEvent::ReplyReceived(received) = run
        .log
        .iter()
        .rev()
        .find(|e| e.kind() == "reply_received")
        .unwrap()
    else {
        unreachable!()
    };
    assert_eq!(received.tree_spent, Some(TreeSpend { runs: 1, tokens: 0 }));
    assert_eq!(standing(&run.view).committed().runs, 2);
    // Two runs left: two more calls fit.
    let turn = asked(&restartable(&mut run, advance(), &p));
    restartable(&mut run, answer(turn, calls(&["b", "c", "e"])), &p);
    let out = restartable(&mut run, advance(), &p);
    assert_eq!(
        allowances_placed(&out),
        [("b".into(), Some(runs(1))), ("c".into(), Some(runs(1)))]
    );
    assert_eq!(refusals(&run).len(), 1, "e");
}

#[test]
fn a_turn_recorded_past_the_deadline_has_its_calls_refused_with_it_and_the_run_fails_next() {
    let (cc, fl) = (can_call(), fleet());
    let before = policy(&cc, &fl, Limits::default());
    let before = at(&before, NOW);
    let after = at(&before, NOW + 60_000);
    let mut run = budgeted(TreeBudget {
        deadline_ms: Some(NOW + 30_000),
        ..TreeBudget::default()
    });
    let turn = asked(&restartable(&mut run, advance(), &before));
    // The model answered after the tree's time ran out: its call is refused as the turn is
    // recorded.
    restartable(&mut run, answer(turn, calls(&["a"])), &after);
    assert_eq!(
        refusals(&run),
        [(
            "a".into(),
            "budget_exhausted".into(),
            Some(Refusal::TreeBudgetExhausted {
                what: TreeResource::Wall,
                limit: NOW + 30_000,
                spent: NOW + 60_000,
            })
        )]
    );
    // The model would read the refusal next, but the tree's time is up.
    let failed = restartable(&mut run, advance(), &after);
    assert!(allowances_placed(&failed).is_empty());
    assert_eq!(failed.effects, vec![Effect::Settled]);
    assert_eq!(run.status, RunStatus::Failed);
    let error = failed.write.unwrap().error.unwrap();
    assert!(
        error.starts_with("budget_exhausted: the call tree's time budget ran out 30 s ago"),
        "{error}"
    );
}

#[test]
fn a_call_let_through_in_time_is_placed_as_decided_after_the_deadline() {
    let (cc, fl) = (can_call(), fleet());
    let before = policy(&cc, &fl, Limits::default());
    let before = at(&before, NOW);
    let after = at(&before, NOW + 60_000);
    let mut run = budgeted(TreeBudget {
        deadline_ms: Some(NOW + 30_000),
        ..TreeBudget::default()
    });
    let turn = asked(&restartable(&mut run, advance(), &before));
    restartable(&mut run, answer(turn, calls(&["a"])), &before);
    // Placed late (its host stopped in between): it goes out as decided, with the deadline in
    // its allowance, which the callee checks; deciding it again could record as refused a
    // call whose child runs.
    let out = restartable(&mut run, advance(), &after);
    let placed = allowances_placed(&out);
    assert_eq!(placed.len(), 1);
    assert_eq!(placed[0].1.and_then(|b| b.deadline_ms), Some(NOW + 30_000));
    assert!(refusals(&run).is_empty());
}

fn delivery(id: &str) -> Input {
    Input::Deliver {
        run: root(),
        from: "ops".into(),
        delivery_id: id.into(),
        digest: id.into(),
        text: "news".into(),
    }
}

#[test]
fn a_run_whose_tokens_are_handed_out_waits_for_its_replies_and_then_goes_on() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    // Each turn of `answer` uses 8 tokens.
    let mut run = budgeted(TreeBudget {
        max_tokens: Some(20),
        ..TreeBudget::default()
    });
    let turn = asked(&restartable(&mut run, advance(), &p));
    restartable(&mut run, answer(turn, calls(&["a"])), &p);
    // 12 left in 2 shares: a holds 6, the run keeps 6.
    let out = restartable(&mut run, advance(), &p);
    assert_eq!(
        allowances_placed(&out),
        [(
            "a".into(),
            Some(TreeBudget {
                max_tokens: Some(6),
                ..TreeBudget::default()
            })
        )]
    );
    let child = accepted(&mut run, "a", &p);
    // A delivered message wakes the model while a is out; its turn uses 8 (16 spent, 6 held).
    restartable(&mut run, delivery("d-1"), &p);
    let turn = asked(&restartable(&mut run, advance(), &p));
    restartable(&mut run, answer(turn, ModelStep::Wait), &p);
    assert_eq!(run.status, RunStatus::Waiting);
    // Another message: the model has news, but what is left is a's; the run keeps waiting.
    restartable(&mut run, delivery("d-2"), &p);
    let held = restartable(&mut run, advance(), &p);
    assert_eq!(held, Step::default());
    assert_eq!(run.status, RunStatus::Waiting);
    // a's reply: it used 2 of its 6. 18 of 20: the model is asked again, and reads both.
    restartable(
        &mut run,
        reply(&child, "a", Some(TreeSpend { runs: 1, tokens: 2 })),
        &p,
    );
    let next = restartable(&mut run, advance(), &p);
    assert!(
        matches!(next.effects.as_slice(), [Effect::AskModel(_)]),
        "{next:?}"
    );
}

#[test]
fn a_run_whose_own_turns_used_the_trees_tokens_fails_before_its_next_turn() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = budgeted(TreeBudget {
        max_tokens: Some(16),
        ..TreeBudget::default()
    });
    let turn = asked(&restartable(&mut run, advance(), &p));
    restartable(&mut run, answer(turn, calls(&["a"])), &p);
    restartable(&mut run, advance(), &p);
    let child = accepted(&mut run, "a", &p);
    // 8 spent, a holds 4: a message wakes the model, whose turn uses 8 more.
    restartable(&mut run, delivery("d-1"), &p);
    let turn = asked(&restartable(&mut run, advance(), &p));
    restartable(&mut run, answer(turn, ModelStep::Wait), &p);
    // 16 spent: the tree is spent whatever a gives back.
    let done = restartable(
        &mut run,
        reply(&child, "a", Some(TreeSpend { runs: 1, tokens: 0 })),
        &p,
    );
    assert_eq!(done.verdict, Verdict::Taken);
    let failed = restartable(&mut run, advance(), &p);
    assert_eq!(failed.effects, vec![Effect::Settled]);
    let error = failed.write.unwrap().error.unwrap();
    assert!(
        error.starts_with("budget_exhausted: the call tree used 16 tokens"),
        "{error}"
    );
}

#[test]
fn a_run_without_a_tree_budget_places_calls_without_an_allowance() {
    let (cc, fl) = (can_call(), fleet());
    let p = at(&policy(&cc, &fl, Limits::default()), u64::MAX);
    let mut run = Run::new(0);
    let turn = asked(&restartable(&mut run, advance(), &p));
    restartable(&mut run, answer(turn, calls(&["a", "b"])), &p);
    let out = restartable(&mut run, advance(), &p);
    assert_eq!(
        allowances_placed(&out),
        [("a".into(), None), ("b".into(), None)]
    );
    let RunEvent::ModelTurn(turn) = &run.log[3] else {
        panic!("{:?}", run.log[3]);
    };
    assert!(turn.allowances.is_empty());
    assert!(
        !serde_json::to_string(&run.log[3].data())
            .unwrap()
            .contains("allowances"),
        "a log without budgets reads as before"
    );
}
