//! The approval gate: gate ids, decisions bound to their gate, repeats and stale decisions,
//! and gates in doubt after a restart.

use super::*;
use crate::step::{Decision, Gate, GatedUse, approval_gate, gate_id};

fn input() -> serde_json::Value {
    json!({"amount": 100})
}

/// The gated use `id` of tool `pay`, as the agent asks the gate about it.
fn used<'a>(run: &'a RunId, id: &'a str, input: &'a serde_json::Value, here: bool) -> GatedUse<'a> {
    GatedUse {
        run,
        tool_use_id: id,
        result_name: "pay",
        tool: "pay",
        input,
        gated: true,
        requester_may_decide: false,
        started_here: here,
    }
}

fn decide(gate: Option<&str>, decision: Decision) -> Input {
    Input::Decide {
        run: root(),
        gate: gate.map(str::to_owned),
        decision,
        by: "operator".into(),
    }
}

/// A run whose model used `pay` once per id in `ids`, in one turn.
fn paying_run(p: &Policy<'_>, ids: &[&str]) -> Run {
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), p));
    let uses = ids
        .iter()
        .map(|id| ToolUse {
            id: (*id).into(),
            name: "pay".into(),
            input: input(),
        })
        .collect();
    run.step(answer(turn, ModelStep::ToolUses(uses)), p);
    run
}

/// Asks the gate of use `id` and writes what it says; returns it.
fn ask(run: &mut Run, id: &str, here: bool) -> Gate {
    let (root, input) = (root(), input());
    let gate = approval_gate(&run.view, &used(&root, id, &input, here));
    match &gate {
        Gate::Block(t) | Gate::Start(t) | Gate::Denied(t) => {
            run.apply(&Step::write(t.clone(), vec![]));
        }
        Gate::Proceed => {}
    }
    gate
}

fn decided(step: &Step) -> (String, bool) {
    match &step.verdict {
        Verdict::Decided { gate, already } => (gate.clone(), *already),
        other => panic!("expected a decision, got {other:?}"),
    }
}

fn stale(step: &Step) -> (String, String) {
    match &step.verdict {
        Verdict::Refused(Refusal::StaleDecision { gate, waiting }) => {
            (gate.clone(), waiting.clone())
        }
        other => panic!("expected a stale decision, got {other:?}"),
    }
}

#[test]
fn gate_ids_name_the_run_the_use_and_a_later_ask() {
    assert_eq!(
        gate_id(&root(), "tu_1_0", 1),
        "run_0123456789abcdef0123456789abcdef:tu_1_0"
    );
    assert_eq!(
        gate_id(&root(), "tu_1_0", 2),
        "run_0123456789abcdef0123456789abcdef:tu_1_0:2"
    );
    assert_eq!(gate_id(&root(), "t", 0), gate_id(&root(), "t", 1));
}

#[test]
fn an_ungated_tool_proceeds_and_writes_nothing() {
    let (root, input) = (root(), input());
    let view = RunView::default();
    let mut ungated = used(&root, "t", &input, false);
    ungated.gated = false;
    assert_eq!(approval_gate(&view, &ungated), Gate::Proceed);
}

#[test]
fn a_gated_use_blocks_with_its_gate_id_then_starts_once_approved_then_runs() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = paying_run(&p, &["t"]);
    let Gate::Block(block) = ask(&mut run, "t", false) else {
        panic!("a gated tool blocks first");
    };
    let RunEvent::ApprovalRequested(asked) = &block.events[0] else {
        panic!("the block asks: {block:?}");
    };
    assert_eq!(asked.gate, gate_id(&root(), "t", 1));
    assert!(!asked.in_doubt);
    assert_eq!(run.status, RunStatus::Blocked);
    // Asked again while it waits: still blocked, nothing new asked.
    assert!(matches!(ask(&mut run, "t", false), Gate::Block(t) if t.events.is_empty()));
    assert_eq!(run.view.waiting_gate().map(|(id, _)| id), Some("t"));

    let step = run.step(decide(None, Decision::Approve), &p);
    assert_eq!(decided(&step), (gate_id(&root(), "t", 1), false));
    assert_eq!(step.effects, vec![Effect::Advance]);
    assert_eq!(run.status, RunStatus::Running);
    // Approved: recorded as started before it runs, then it runs.
    let Gate::Start(start) = ask(&mut run, "t", false) else {
        panic!("an approved use is recorded as started first");
    };
    assert!(
        matches!(&start.events[0], RunEvent::ToolStarted(s) if s.gate == gate_id(&root(), "t", 1))
    );
    assert_eq!(start.status, None, "starting does not move the run");
    assert_eq!(ask(&mut run, "t", true), Gate::Proceed);
}

#[test]
fn a_denied_use_gets_the_denial_as_its_result() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = paying_run(&p, &["t"]);
    ask(&mut run, "t", false);
    let step = run.step(decide(Some(&gate_id(&root(), "t", 1)), Decision::Deny), &p);
    assert_eq!(decided(&step), (gate_id(&root(), "t", 1), false));
    let Gate::Denied(denied) = ask(&mut run, "t", false) else {
        panic!("a denied use is answered");
    };
    assert!(
        denied.events[0].data()["content"]
            .as_str()
            .is_some_and(|c| c.contains("denied"))
    );
}

#[test]
fn a_decision_on_a_run_that_waits_on_no_gate_is_refused_and_writes_nothing() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = Run::new(0);
    let before = run.log.len();
    let refused = run.step(decide(None, Decision::Approve), &p);
    assert!(matches!(
        refused.verdict,
        Verdict::Refused(Refusal::NotAwaitingApproval { .. })
    ));
    let named = run.step(decide(Some("run_x:t"), Decision::Approve), &p);
    assert_eq!(stale(&named), ("run_x:t".into(), "none".into()));
    assert_eq!(run.log.len(), before);
}

#[test]
fn a_retried_approval_is_answered_as_decided_and_never_approves_the_next_gate() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = paying_run(&p, &["a", "b"]);
    ask(&mut run, "a", false);
    let first = gate_id(&root(), "a", 1);
    run.step(decide(Some(&first), Decision::Approve), &p);
    ask(&mut run, "a", false);
    ask(&mut run, "a", true);
    // The first payment runs; the second use blocks on its own gate.
    run.step(
        Input::ToolFinished {
            tool_use_id: "a".into(),
            name: "pay".into(),
            content: "paid".into(),
            is_error: false,
            counts: true,
        },
        &p,
    );
    ask(&mut run, "b", false);
    assert_eq!(run.status, RunStatus::Blocked);
    let before = run.log.len();

    // The client that missed the first answer sends it again.
    let again = run.step(decide(Some(&first), Decision::Approve), &p);
    assert_eq!(decided(&again), (first.clone(), true));
    assert!(again.write.is_none() && again.effects.is_empty());
    // The opposite decision on the decided gate is stale, and names the gate that waits.
    let opposite = run.step(decide(Some(&first), Decision::Deny), &p);
    assert_eq!(stale(&opposite), (first, gate_id(&root(), "b", 1)));
    // A gate that never existed is stale too.
    let unknown = run.step(decide(Some("run_x:zz"), Decision::Approve), &p);
    assert_eq!(stale(&unknown).0, "run_x:zz");
    assert_eq!(run.log.len(), before, "nothing was written");
    assert_eq!(run.status, RunStatus::Blocked);
    assert_eq!(run.view.waiting_gate().map(|(id, _)| id), Some("b"));
    // Without a gate, the one waiting is decided, and the answer names it.
    let step = run.step(decide(None, Decision::Deny), &p);
    assert_eq!(decided(&step), (gate_id(&root(), "b", 1), false));
}

/// A run whose approved `pay` was started by an incarnation that is gone, resumed.
fn resumed_in_doubt(p: &Policy<'_>) -> Run {
    let mut run = paying_run(p, &["t"]);
    ask(&mut run, "t", false);
    run.step(decide(None, Decision::Approve), p);
    assert!(matches!(ask(&mut run, "t", false), Gate::Start(_)));
    // The host dies while `pay` runs; the log is all that is left.
    let mut resumed = Run {
        status: run.status,
        log: run.log.clone(),
        view: RunView::from_events(&run.log),
    };
    assert_eq!(resumed.view, run.view);
    let Gate::Block(block) = ask(&mut resumed, "t", false) else {
        panic!("a use started before a restart is never run again under its approval");
    };
    let RunEvent::ApprovalRequested(asked) = &block.events[0] else {
        panic!("the gate is asked again: {block:?}");
    };
    assert!(asked.in_doubt);
    assert_eq!(asked.gate, gate_id(&root(), "t", 2));
    assert_eq!(asked.input, input());
    assert_eq!(resumed.status, RunStatus::Blocked);
    resumed
}

#[test]
fn a_use_started_before_a_restart_parks_the_run_in_doubt() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = resumed_in_doubt(&p);
    // The approval of the first gate, retried, decides nothing now.
    let before = run.log.len();
    let retried = run.step(
        decide(Some(&gate_id(&root(), "t", 1)), Decision::Approve),
        &p,
    );
    assert_eq!(decided(&retried), (gate_id(&root(), "t", 1), true));
    assert_eq!(run.log.len(), before);
    assert_eq!(run.status, RunStatus::Blocked);
    // Nor does asking the gate again.
    assert!(matches!(ask(&mut run, "t", false), Gate::Block(t) if t.events.is_empty()));
}

#[test]
fn a_gate_in_doubt_can_be_run_again_under_a_new_approval() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = resumed_in_doubt(&p);
    let second = gate_id(&root(), "t", 2);
    let step = run.step(decide(Some(&second), Decision::Approve), &p);
    assert_eq!(decided(&step), (second.clone(), false));
    let Gate::Start(start) = ask(&mut run, "t", false) else {
        panic!("run again: recorded as started again first");
    };
    assert!(matches!(&start.events[0], RunEvent::ToolStarted(s) if s.gate == second));
    assert_eq!(ask(&mut run, "t", true), Gate::Proceed);
}

#[test]
fn a_gate_in_doubt_denied_tells_the_model_it_may_have_run() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = resumed_in_doubt(&p);
    let step = run.step(decide(None, Decision::Deny), &p);
    assert_eq!(decided(&step), (gate_id(&root(), "t", 2), false));
    assert!(run.view.resolved.contains("t"));
    let Some(Message::ToolResult {
        content, is_error, ..
    }) = run.view.conversation.last()
    else {
        panic!("the model reads a result");
    };
    assert!(
        *is_error && content.contains("may or may not have run"),
        "{content}"
    );
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(step.effects, vec![Effect::Advance]);
}

#[test]
fn a_gate_in_doubt_takes_the_result_its_decider_records() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = resumed_in_doubt(&p);
    let record = Decision::Record {
        content: "paid 100 (checked with the bank)".into(),
        is_error: false,
    };
    let step = run.step(decide(Some(&gate_id(&root(), "t", 2)), record.clone()), &p);
    assert_eq!(decided(&step), (gate_id(&root(), "t", 2), false));
    let Some(Message::ToolResult {
        name,
        content,
        is_error,
        ..
    }) = run.view.conversation.last()
    else {
        panic!("the model reads the recorded result");
    };
    assert_eq!(
        (name.as_str(), content.as_str(), *is_error),
        ("pay", "paid 100 (checked with the bank)", false)
    );
    assert!(
        run.log
            .iter()
            .any(|e| matches!(e, RunEvent::ApprovalDecided(d) if d.recorded && !d.approved))
    );
    // The same record again: already decided.
    let second = gate_id(&root(), "t", 2);
    assert_eq!(
        decided(&run.step(decide(Some(&second), record), &p)),
        (second.clone(), true)
    );
    // Another decision on the gate is not the one it had: a denial, or another result.
    let before = run.log.len();
    for other in [
        Decision::Deny,
        Decision::Record {
            content: "the payment failed".into(),
            is_error: true,
        },
    ] {
        let step = run.step(decide(Some(&second), other), &p);
        assert_eq!(stale(&step).0, second, "{step:?}");
    }
    assert_eq!(run.log.len(), before, "nothing written");
}

#[test]
fn a_result_is_recorded_only_for_a_gate_in_doubt() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = paying_run(&p, &["t"]);
    ask(&mut run, "t", false);
    let before = run.log.len();
    let step = run.step(
        decide(
            None,
            Decision::Record {
                content: "done by hand".into(),
                is_error: false,
            },
        ),
        &p,
    );
    assert!(matches!(
        step.verdict,
        Verdict::Refused(Refusal::NotInDoubt { .. })
    ));
    assert_eq!(run.log.len(), before);
    assert_eq!(run.status, RunStatus::Blocked);
}

#[test]
fn a_use_started_and_finished_before_a_restart_is_not_in_doubt() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = paying_run(&p, &["t"]);
    ask(&mut run, "t", false);
    run.step(decide(None, Decision::Approve), &p);
    ask(&mut run, "t", false);
    run.step(
        Input::ToolFinished {
            tool_use_id: "t".into(),
            name: "pay".into(),
            content: "paid".into(),
            is_error: false,
            counts: true,
        },
        &p,
    );
    let resumed = RunView::from_events(&run.log);
    assert!(resumed.resolved.contains("t"));
    assert!(
        resumed.unresolved_tool_uses().is_empty(),
        "nothing to ask again"
    );
}

#[test]
fn two_gates_of_one_turn_wait_at_once_and_each_is_decided_by_its_own_id() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    // One turn used the gated tool twice: both uses are asked before anyone decides.
    let mut run = paying_run(&p, &["b", "a"]);
    ask(&mut run, "b", false);
    ask(&mut run, "a", false);
    let (first, second) = (gate_id(&root(), "b", 1), gate_id(&root(), "a", 1));
    // The one asked first is the run's waiting gate, whatever the ids' order.
    assert_eq!(run.view.waiting_gate().map(|(id, _)| id), Some("b"));
    assert_eq!(
        crate::step::waiting_request(&root(), &run.log).map(|r| r.gate),
        Some(first.clone())
    );
    // The second can be decided by its id while the first still waits.
    let step = run.step(decide(Some(&second), Decision::Deny), &p);
    assert_eq!(decided(&step), (second, false));
    assert_eq!(step.effects, vec![Effect::Advance]);
    // The run steps on: the denied use is answered, and the other still blocks it.
    assert!(matches!(ask(&mut run, "a", false), Gate::Denied(_)));
    assert!(matches!(ask(&mut run, "b", false), Gate::Block(t) if t.events.is_empty()));
    assert_eq!(run.status, RunStatus::Blocked);
    assert_eq!(run.view.waiting_gate().map(|(id, _)| id), Some("b"));
    assert_eq!(
        crate::step::waiting_request(&root(), &run.log).map(|r| r.gate),
        Some(first.clone())
    );
    // Without an id, the one waiting is decided.
    let step = run.step(decide(None, Decision::Approve), &p);
    assert_eq!(decided(&step), (first, false));
    assert!(run.view.waiting_gate().is_none());
    assert_eq!(crate::step::waiting_request(&root(), &run.log), None);
}

fn decide_by(by: &str, gate: Option<&str>) -> Input {
    Input::Decide {
        run: root(),
        gate: gate.map(str::to_owned),
        decision: Decision::Approve,
        by: by.into(),
    }
}

#[test]
fn the_runs_own_requester_may_not_decide_a_gate_that_does_not_allow_it() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = paying_run(&p, &["t1"]);
    ask(&mut run, "t1", false);
    let gate = gate_id(&root(), "t1", 1);
    // `Run::new` acts for `anonymous`: a decider of that name is the run's own requester.
    let own = run.step(decide_by("anonymous", None), &p);
    assert_eq!(
        own.verdict,
        Verdict::Refused(Refusal::FourEyes { gate: gate.clone() })
    );
    assert!(own.write.is_none(), "nothing was decided");
    let named = run.step(decide_by("anonymous", Some(&gate)), &p);
    assert!(matches!(
        named.verdict,
        Verdict::Refused(Refusal::FourEyes { .. })
    ));
    // Anyone else the host let decide may: an operator, the host's local operator.
    let ops = run.step(decide_by("api:ops", Some(&gate)), &p);
    assert_eq!(decided(&ops), (gate.clone(), false));
    // A repeat by the requester is refused too, never answered "already decided".
    let again = run.step(decide_by("anonymous", Some(&gate)), &p);
    assert!(
        matches!(again.verdict, Verdict::Refused(Refusal::FourEyes { .. })),
        "{:?}",
        again.verdict
    );
}

#[test]
fn a_gate_that_lets_its_requester_decide_takes_the_requesters_decision() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = paying_run(&p, &["t1"]);
    let (root, input) = (root(), input());
    let gate = approval_gate(
        &run.view,
        &GatedUse {
            requester_may_decide: true,
            ..used(&root, "t1", &input, false)
        },
    );
    let Gate::Block(t) = gate else {
        panic!("the gate asks");
    };
    run.apply(&Step::write(t, vec![]));
    let own = run.step(decide_by("anonymous", None), &p);
    assert_eq!(decided(&own), (gate_id(&root, "t1", 1), false));
}
