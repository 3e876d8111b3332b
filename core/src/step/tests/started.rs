//! A turn is recorded when it is asked (`model_turn_started`): a run is `running` from its
//! first ask, every ask of a model that thinks is in the log before its answer, and a model that
//! answers at once records only its first.

use super::*;
use crate::event::ModelTurnStarted;

fn with_model<'a>(cc: &'a [String], fl: &'a [String], immediate_model: bool) -> Policy<'a> {
    Policy {
        immediate_model,
        ..policy(cc, fl, Limits::default())
    }
}

fn kinds(run: &Run) -> Vec<&'static str> {
    run.log.iter().map(RunEvent::kind).collect()
}

fn started(turn: u64) -> RunEvent {
    RunEvent::ModelTurnStarted(ModelTurnStarted { turn })
}

fn lookup(id: &str) -> ModelStep {
    ModelStep::ToolUses(vec![ToolUse {
        id: id.into(),
        name: "lookup".into(),
        input: json!({"q": 1}),
    }])
}

/// Plays a run through two turns: the first uses `lookup` (which answers "ok"), the second
/// answers. Returns the steps that asked the model.
fn two_turns(run: &mut Run, p: &Policy<'_>) -> Vec<Step> {
    let first = run.step(advance(), p);
    let step = run.step(answer(asked(&first), lookup("tu_0_0")), p);
    assert_eq!(step.effects, vec![Effect::Advance]);
    let tool = run.step(advance(), p);
    assert!(matches!(tool.effects.as_slice(), [Effect::UseTool(u)] if u.id == "tu_0_0"));
    let done = run.step(
        Input::ToolFinished {
            tool_use_id: "tu_0_0".into(),
            name: "lookup".into(),
            content: "ok".into(),
            is_error: false,
            counts: true,
        },
        p,
    );
    assert_eq!(done.effects, vec![Effect::Advance]);
    let second = run.step(advance(), p);
    let end = run.step(answer(asked(&second), ModelStep::Answer("done".into())), p);
    assert_eq!(end.effects, vec![Effect::Settled]);
    assert_eq!(run.status, RunStatus::Succeeded);
    vec![first, second]
}

#[test]
fn a_model_that_thinks_records_every_ask_with_its_number() {
    let (cc, fl) = (can_call(), fleet());
    let p = with_model(&cc, &fl, false);
    let mut run = Run::new(0);
    let asks = two_turns(&mut run, &p);
    assert_eq!(
        kinds(&run),
        [
            "created",
            "status",
            "model_turn_started",
            "model_turn",
            "tool_result",
            "model_turn_started",
            "model_turn",
            "answer",
            "status",
        ]
    );
    assert_eq!(
        (run.log[2].clone(), run.log[5].clone()),
        (started(1), started(2))
    );
    // The first ask moves the run; a later one only records the turn.
    let first = asks[0].write.as_ref().unwrap();
    assert!(first.start);
    let second = asks[1].write.as_ref().unwrap();
    assert_eq!(second.appended_events(RunStatus::Running), [started(2)]);
    assert_eq!(second.next_status(RunStatus::Running), RunStatus::Running);
}

#[test]
fn a_model_that_answers_at_once_records_its_first_ask_only() {
    let (cc, fl) = (can_call(), fleet());
    let p = with_model(&cc, &fl, true);
    let mut run = Run::new(0);
    let asks = two_turns(&mut run, &p);
    assert_eq!(
        kinds(&run),
        [
            "created",
            "status",
            "model_turn_started",
            "model_turn",
            "tool_result",
            "model_turn",
            "answer",
            "status",
        ]
    );
    assert!(
        asks[0].write.is_some(),
        "a first turn is recorded whatever the model"
    );
    assert_eq!(asks[1].write, None, "a later immediate turn adds no write");
}

#[test]
fn a_first_turn_that_answers_fails_or_waits_moves_the_run_once_from_running() {
    let (cc, fl) = (can_call(), fleet());
    for immediate in [false, true] {
        let p = with_model(&cc, &fl, immediate);
        let outcomes = [
            Ok(ModelStep::Answer("done".into())),
            Ok(ModelStep::Wait),
            Err("the model failed".to_owned()),
        ];
        for outcome in outcomes {
            let mut run = Run::new(0);
            let turn = asked(&run.step(advance(), &p));
            let input = match outcome.clone() {
                Ok(step) => answer(turn, step),
                Err(error) => Input::ModelAnswered {
                    asked: turn,
                    answer: Err(error),
                },
            };
            run.step(input, &p);
            let moves: Vec<(RunStatus, RunStatus)> = run
                .log
                .iter()
                .filter_map(|e| match e {
                    RunEvent::Status(s) => Some((s.from, s.to)),
                    _ => None,
                })
                .collect();
            let end = if matches!(outcome, Ok(ModelStep::Answer(_))) {
                RunStatus::Succeeded
            } else {
                RunStatus::Failed
            };
            assert_eq!(
                moves,
                [
                    (RunStatus::Queued, RunStatus::Running),
                    (RunStatus::Running, end)
                ],
                "{outcome:?}, immediate {immediate}"
            );
            assert_eq!(run.log[2], started(1));
            assert_eq!(&run.view, &RunView::from_events(&run.log));
        }
    }
}

#[test]
fn a_turn_asked_again_after_a_restart_is_recorded_again_under_its_number() {
    let (cc, fl) = (can_call(), fleet());
    let p = with_model(&cc, &fl, false);
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), &p));
    // While the model thinks, nothing else is asked or written.
    let thinking = Input::Advance {
        busy: BTreeSet::new(),
        thinking: true,
    };
    assert_eq!(run.step(thinking, &p), Step::default());
    // The host restarts before the answer: the view is folded from the log, nothing thinks.
    run.view = RunView::from_events(&run.log);
    let again = asked(&run.step(advance(), &p));
    assert_eq!(
        (again.pending, &again.seen_tool_uses),
        (turn.pending, &turn.seen_tool_uses),
        "the same turn is asked"
    );
    assert_eq!(
        kinds(&run),
        [
            "created",
            "status",
            "model_turn_started",
            "model_turn_started"
        ]
    );
    assert_eq!(run.log[3], started(1));
    // A model that answers at once asks again without a record: the run is running already.
    let p = with_model(&cc, &fl, true);
    let mut run = Run::new(0);
    asked(&run.step(advance(), &p));
    run.view = RunView::from_events(&run.log);
    assert_eq!(run.step(advance(), &p).write, None);
    assert_eq!(run.status, RunStatus::Running);
}

#[test]
fn a_waiting_run_that_takes_a_reply_records_the_ask_that_reads_it() {
    let (cc, fl) = (can_call(), fleet());
    let p = with_model(&cc, &fl, false);
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), &p));
    run.step(answer(turn, calls(&["tu_0_0"])), &p);
    assert_eq!(placed(&run.step(advance(), &p)), ["tu_0_0"]);
    let child = RunId::child_of(&root(), "tu_0_0");
    run.step(
        Input::CallEnded {
            tool_use_id: "tu_0_0".into(),
            callee: "cfo".into(),
            outcome: CallOutcome::Accepted {
                child_run: child.clone(),
                existing: false,
            },
        },
        &p,
    );
    // An accepted call is no news: the run waits without asking its model.
    assert_eq!(run.step(advance(), &p).effects, vec![]);
    assert_eq!(run.status, RunStatus::Waiting);
    let reply = Input::Reply {
        reply: ReplyIn {
            parent_run: root(),
            child_run: child,
            callee: "cfo".into(),
            tool_use_id: "tu_0_0".into(),
            outcome: ReplyOutcome::Succeeded,
            output: "42".into(),
            tree_cost: CostDelta::default(),
            tree_spent: None,
        },
        placing: false,
    };
    let taken = run.step(reply, &p);
    assert_eq!(taken.effects, vec![Effect::Advance]);
    asked(&run.step(advance(), &p));
    let tail: Vec<_> = kinds(&run).into_iter().rev().take(3).collect();
    assert_eq!(tail, ["model_turn_started", "status", "reply_received"]);
    assert_eq!(run.log.last(), Some(&started(2)));
}

#[test]
fn a_run_that_may_not_ask_again_records_no_ask() {
    let (cc, fl) = (can_call(), fleet());
    let p = Policy {
        immediate_model: false,
        ..policy(
            &cc,
            &fl,
            Limits {
                max_turns: 1,
                ..Limits::default()
            },
        )
    };
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), &p));
    run.step(answer(turn, lookup("tu_0_0")), &p);
    run.step(advance(), &p);
    run.step(
        Input::ToolFinished {
            tool_use_id: "tu_0_0".into(),
            name: "lookup".into(),
            content: "ok".into(),
            is_error: false,
            counts: true,
        },
        &p,
    );
    let spent = run.step(advance(), &p);
    assert_eq!(spent.effects, vec![Effect::Settled]);
    assert_eq!(
        run.log
            .iter()
            .filter(|e| matches!(e, RunEvent::ModelTurnStarted(_)))
            .count(),
        1
    );
    assert_eq!(run.status, RunStatus::Failed);
}
