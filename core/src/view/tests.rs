use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::event::{CallPlaced, Created, MessageReceived, ModelTurn, ReplyReceived, ToolResult};
use crate::{Channel, RunEvent};

fn created(input: &str) -> RunEvent {
    RunEvent::Created(Created {
        channel: Channel::Api,
        input: input.into(),
        parent_run: None,
        hop_depth: 0,
        principal: "anonymous".into(),
        budget: None,
    })
}

fn turn(step: ModelStep, seen: Option<u64>) -> RunEvent {
    RunEvent::ModelTurn(ModelTurn {
        step,
        pending_calls: 0,
        seen_seq: seen,
        input_tokens: 0,
        output_tokens: 0,
        allowances: Default::default(),
        calls_decided: false,
    })
}

fn call_use(id: &str) -> ModelStep {
    ModelStep::ToolUses(vec![ToolUse {
        id: id.into(),
        name: "call_agent".into(),
        input: json!({"agent": "cfo", "input": "x"}),
    }])
}

fn placed(id: &str, child: &RunId) -> RunEvent {
    RunEvent::CallPlaced(CallPlaced {
        tool_use_id: id.into(),
        agent: "cfo".into(),
        child_run: child.clone(),
        existing: false,
    })
}

fn accepted(id: &str) -> RunEvent {
    RunEvent::ToolResult(ToolResult {
        tool_use_id: id.into(),
        name: "call_agent".into(),
        content: "{}".into(),
        is_error: false,
    })
}

fn reply(child: &RunId, output: &str) -> RunEvent {
    RunEvent::ReplyReceived(ReplyReceived {
        child_run: child.clone(),
        agent: "cfo".into(),
        status: ReplyOutcome::Succeeded,
        output: output.into(),
        in_turn: false,
        tree_cost: Default::default(),
        tree_spent: None,
    })
}

#[test]
fn folds_a_call_and_its_reply() {
    let child = RunId::random();
    let mut view = RunView::from_events(&[created("August"), turn(call_use("tu_0_0"), None)]);
    assert_eq!(view.status, Some(RunStatus::Queued));
    assert_eq!(view.unresolved_tool_uses().len(), 1);
    view.apply(&placed("tu_0_0", &child));
    view.apply(&accepted("tu_0_0"));
    assert!(view.unresolved_tool_uses().is_empty());
    assert_eq!(view.pending_calls(), 1);
    assert!(!view.needs_model(), "an accepted call waits for its reply");
    view.apply(&reply(&child, "42"));
    assert_eq!(view.pending_calls(), 0);
    assert!(view.needs_model());
    assert_eq!(
        view.conversation.last().map(Message::render).as_deref(),
        Some("[reply from cfo] 42")
    );
}

#[test]
fn a_refused_call_needs_the_model_again() {
    let view = RunView::from_events(&[
        created("x"),
        turn(call_use("tu_0_0"), None),
        RunEvent::tool_result("tu_0_0", "call_agent", "no", true),
    ]);
    assert!(view.needs_model());
    assert_eq!(view.pending_calls(), 0);
}

#[test]
fn a_reply_that_came_while_the_model_thought_is_news() {
    let child = RunId::random();
    let mut events = vec![
        created("x"),
        turn(call_use("tu_0_0"), Some(1)),
        placed("tu_0_0", &child),
        accepted("tu_0_0"),
        // The model was asked after event 4; the reply landed before its answer was written.
        reply(&child, "42"),
        turn(ModelStep::Wait, Some(4)),
    ];
    let view = RunView::from_events(&events);
    assert_eq!(view.last_seq, 6);
    assert!(view.needs_model(), "the model has not seen the reply yet");
    events[5] = turn(ModelStep::Wait, Some(5));
    assert!(!RunView::from_events(&events).needs_model());
}

#[test]
fn waiting_without_news_does_not_need_the_model() {
    let view = RunView::from_events(&[created("x"), turn(ModelStep::Wait, None)]);
    assert!(!view.needs_model());
    assert_eq!(view.model_turns, 1);
}

#[test]
fn a_delivered_message_is_news_for_a_waiting_model() {
    let mut view = RunView::from_events(&[created("x"), turn(ModelStep::Wait, None)]);
    assert!(!view.needs_model());
    view.apply(&RunEvent::MessageReceived(MessageReceived {
        from: "cfo".into(),
        delivery_id: "d-1".into(),
        digest: "ab".into(),
        text: "revenue is up".into(),
    }));
    assert!(view.needs_model());
    assert_eq!(view.last_reply_seq, 3);
    assert_eq!(
        view.conversation.last().map(Message::render).as_deref(),
        Some("[message from cfo] revenue is up")
    );
    assert_eq!(
        view.deliveries.get(&("cfo".to_owned(), "d-1".to_owned())),
        Some(&("ab".to_owned(), 3))
    );
}

proptest! {
    /// The view a live run keeps (updated event by event, in the batches the store commits)
    /// equals the view folded from scratch out of the stored log.
    #[test]
    fn incremental_view_equals_the_view_folded_from_the_stored_log(
        log in crate::strategy::log(),
        cuts in proptest::collection::vec(0..40usize, 0..6),
    ) {
        let mut live = RunView::default();
        let mut at = 0;
        let mut cuts = cuts;
        cuts.push(log.len());
        cuts.sort_unstable();
        for cut in cuts {
            let cut = cut.min(log.len());
            for event in &log[at..cut.max(at)] {
                live.apply(event);
            }
            at = at.max(cut);
        }
        let stored: Vec<RunEvent> = log
            .iter()
            .map(|e| RunEvent::decode(e.kind(), serde_json::from_str(&e.data().to_string()).unwrap()).unwrap())
            .collect();
        prop_assert_eq!(live, RunView::from_events(&stored));
    }

    /// A replayed call (the same child run recorded again) never counts twice against the
    /// cap, and no more calls are pending than were placed.
    #[test]
    fn a_replayed_call_never_counts_twice(log in crate::strategy::log()) {
        let view = RunView::from_events(&log);
        let distinct: BTreeSet<_> = log
            .iter()
            .filter_map(|e| match e {
                RunEvent::CallPlaced(p) => Some(p.child_run.clone()),
                _ => None,
            })
            .collect();
        prop_assert_eq!(view.calls_placed(), distinct.len() as u64);
        prop_assert!(view.pending_calls() as u64 <= view.calls_placed());
        prop_assert_eq!(view.last_seq, log.len() as u64);
    }
}

#[test]
fn turns_fold_their_tokens_and_the_loop_guards_count() {
    let lookup = |id: &str, q: u64| ToolUse {
        id: id.into(),
        name: "lookup".into(),
        input: json!({ "q": q }),
    };
    let turn_of = |uses: Vec<ToolUse>, tokens: (u64, u64)| {
        RunEvent::ModelTurn(ModelTurn {
            step: ModelStep::ToolUses(uses),
            pending_calls: 0,
            seen_seq: None,
            input_tokens: tokens.0,
            output_tokens: tokens.1,
            allowances: Default::default(),
            calls_decided: false,
        })
    };
    let mut view = RunView::from_events(&[
        created("x"),
        turn_of(vec![lookup("a", 1)], (10, 2)),
        turn_of(vec![lookup("b", 1), lookup("c", 2)], (0, 0)),
        turn_of(vec![lookup("d", 1), lookup("e", 2)], (5, 1)),
    ]);
    assert_eq!(view.tokens, 18);
    assert_eq!(
        (
            view.repeats_of("d"),
            view.repeats_of("e"),
            view.repeats_of("b")
        ),
        (3, 2, 0),
        "only the last turn's uses are counted"
    );
    // A turn without tool uses breaks the run of repeats.
    view.apply(&turn(ModelStep::Wait, None));
    assert!(view.repeats.is_empty());
    view.apply(&turn_of(vec![lookup("f", 1)], (0, 0)));
    assert_eq!(view.repeats_of("f"), 1);
}
