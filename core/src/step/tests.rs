use std::collections::BTreeSet;

use proptest::prelude::*;
use serde_json::json;

use consort_config::Limits;

use super::{
    CALL_AGENT, CHECK_RUN, CallOutcome, CostDelta, Effect, Input, ModelAnswer, Policy, ReplyIn,
    Step, TurnAsked, Verdict, step,
};
use crate::event::{Created, ModelTurnStarted, ReplyOutcome};
use crate::{Channel, Message, ModelStep, Refusal, RunEvent, RunId, RunStatus, RunView, ToolUse};

const FLEET: [&str; 3] = ["cmo", "cfo", "ops"];

fn fleet() -> Vec<String> {
    FLEET.iter().map(|s| s.to_string()).collect()
}

fn can_call() -> Vec<String> {
    vec!["cfo".into(), "ops".into()]
}

fn policy<'a>(can_call: &'a [String], fleet: &'a [String], limits: Limits) -> Policy<'a> {
    Policy {
        agent: "cmo",
        can_call,
        fleet_agents: fleet,
        limits,
        reply_cap: 64,
        immediate_model: false,
        now_ms: 0,
    }
}

fn root() -> RunId {
    RunId::parse("run_0123456789abcdef0123456789abcdef").unwrap()
}

/// A run's log as the store keeps it, with the view folded from it.
struct Run {
    status: RunStatus,
    log: Vec<RunEvent>,
    view: RunView,
}

impl Run {
    fn new(hop_depth: u32) -> Self {
        let created = RunEvent::Created(Created {
            channel: Channel::Cli,
            input: "question".into(),
            parent_run: None,
            hop_depth,
            principal: "anonymous".into(),
            budget: None,
        });
        let mut run = Self {
            status: RunStatus::Queued,
            log: Vec::new(),
            view: RunView::default(),
        };
        run.push(created);
        run
    }

    fn push(&mut self, event: RunEvent) {
        self.view.apply(&event);
        self.log.push(event);
    }

    /// Applies a step's write as the store does.
    fn apply(&mut self, step: &Step) {
        if let Some(t) = &step.write {
            for event in t.appended_events(self.status) {
                self.push(event);
            }
            self.status = t.next_status(self.status);
        }
    }

    fn step(&mut self, input: Input, policy: &Policy<'_>) -> Step {
        let step = step(&self.view, input, policy);
        self.apply(&step);
        if step
            .effects
            .iter()
            .any(|e| matches!(e, Effect::AskModel(_)))
        {
            assert_ne!(
                self.status,
                RunStatus::Queued,
                "a run whose model is asked is running: {step:?}"
            );
        }
        step
    }
}

fn advance() -> Input {
    Input::Advance {
        busy: BTreeSet::new(),
        thinking: false,
    }
}

fn calls(ids: &[&str]) -> ModelStep {
    ModelStep::ToolUses(
        ids.iter()
            .map(|id| ToolUse {
                id: (*id).into(),
                name: CALL_AGENT.into(),
                input: json!({"agent": "cfo", "input": "numbers"}),
            })
            .collect(),
    )
}

fn answer(asked: TurnAsked, step: ModelStep) -> Input {
    Input::ModelAnswered {
        asked,
        answer: Ok(ModelAnswer {
            step,
            input_tokens: 3,
            output_tokens: 5,
        }),
    }
}

fn asked(step: &Step) -> TurnAsked {
    match step.effects.as_slice() {
        [Effect::AskModel(asked)] => asked.clone(),
        other => panic!("expected a model turn, got {other:?}"),
    }
}

fn placed(step: &Step) -> Vec<String> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::PlaceCall { tool_use_id, .. } => Some(tool_use_id.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_fresh_run_is_running_from_its_first_ask_and_its_turn_is_recorded_after() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = Run::new(0);
    let first = run.step(advance(), &p);
    let turn = asked(&first);
    assert_eq!(turn.seen_seq, 1);
    // The ask and the move to `running` are one transaction, before the model answers.
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(
        run.log.iter().map(RunEvent::kind).collect::<Vec<_>>(),
        ["created", "status", "model_turn_started"]
    );
    assert_eq!(
        run.log[2],
        RunEvent::ModelTurnStarted(ModelTurnStarted { turn: 1 })
    );
    let step = run.step(answer(turn, calls(&["tu_0_0", "tu_0_1"])), &p);
    assert_eq!(step.effects, vec![Effect::Advance]);
    let write = step.write.as_ref().unwrap();
    assert_eq!((write.start, write.status), (false, None));
    assert_eq!((write.cost.model_turns, write.cost.input_tokens), (1, 3));
    assert_eq!(
        run.log.iter().map(RunEvent::kind).collect::<Vec<_>>(),
        ["created", "status", "model_turn_started", "model_turn"],
        "one status change"
    );
    // Both calls go out at once; nothing is written until they come back.
    let out = run.step(advance(), &p);
    assert_eq!(placed(&out), ["tu_0_0", "tu_0_1"]);
    assert_eq!(out.write, None);
}

#[test]
fn calls_beyond_the_callers_cap_are_refused_with_a_code_and_the_rest_go_out() {
    let (cc, fl) = (can_call(), fleet());
    let limits = Limits {
        max_depth: 4,
        max_calls_per_run: 2,
        ..Limits::default()
    };
    let p = policy(&cc, &fl, limits);
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), &p));
    run.step(answer(turn, calls(&["a", "b", "c"])), &p);
    let out = run.step(advance(), &p);
    assert_eq!(
        placed(&out),
        ["a", "b"],
        "calls being placed count against the cap"
    );
    let refused: Vec<_> = run
        .log
        .iter()
        .filter_map(|e| match e {
            RunEvent::CallRefused(r) => Some((r.tool_use_id.clone(), r.code.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(refused, [("c".to_string(), "call_cap".to_string())]);
    assert!(run.view.resolved.contains("c"));
}

#[test]
fn a_run_at_the_depth_limit_is_told_to_answer_with_what_it_has() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = Run::new(4);
    let turn = asked(&run.step(advance(), &p));
    // The call is refused as its turn is recorded, in the same transaction.
    let recorded = run.step(answer(turn, calls(&["a"])), &p);
    let Some(Message::ToolResult {
        content, is_error, ..
    }) = run.view.conversation.last()
    else {
        panic!("no tool result");
    };
    assert!(is_error);
    assert_eq!(
        content,
        "call chain depth limit (4) reached: answer with what you have"
    );
    assert_eq!(recorded.effects, vec![Effect::Advance]);
    let out = run.step(advance(), &p);
    assert!(placed(&out).is_empty());
    assert!(
        matches!(out.effects.as_slice(), [Effect::AskModel(_)]),
        "the model reads the refusal next: {:?}",
        out.effects
    );
}

#[test]
fn a_malformed_call_and_an_unknown_check_are_answered_in_words() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), &p));
    let uses = ModelStep::ToolUses(vec![
        ToolUse {
            id: "a".into(),
            name: CALL_AGENT.into(),
            input: json!({"agent": "cfo"}),
        },
        ToolUse {
            id: "b".into(),
            name: CHECK_RUN.into(),
            input: json!({"run_id": "run_nope"}),
        },
    ]);
    run.step(answer(turn, uses), &p);
    let out = run.step(advance(), &p);
    assert_eq!(out.effects, vec![Effect::Advance]);
    let texts: Vec<_> = run
        .view
        .conversation
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(texts[0], Refusal::MalformedCall.to_string());
    assert!(
        texts[1].starts_with("unknown run `run_nope`"),
        "{}",
        texts[1]
    );
}

#[test]
fn an_accepted_replay_is_recorded_once_and_asks_for_its_reply_again() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), &p));
    run.step(answer(turn, calls(&["a"])), &p);
    run.step(advance(), &p);
    let child = RunId::child_of(&root(), "a");
    let ended = || Input::CallEnded {
        tool_use_id: "a".into(),
        callee: "cfo".into(),
        outcome: CallOutcome::Accepted {
            child_run: child.clone(),
            existing: true,
        },
    };
    let first = run.step(ended(), &p);
    assert_eq!(
        first.effects,
        vec![
            Effect::AskReplies(vec![("cfo".into(), child.clone())]),
            Effect::Advance
        ]
    );
    assert_eq!(first.write.as_ref().unwrap().cost.calls_placed, 1);
    let again = run.step(ended(), &p);
    assert_eq!(
        again,
        Step::default(),
        "a second outcome for the same use changes nothing"
    );
    assert_eq!(run.view.calls_placed(), 1);
    // With the call out and nothing new, the run waits.
    let wait = run.step(advance(), &p);
    assert_eq!(wait.write.unwrap().status, Some(RunStatus::Waiting));
}

#[test]
fn replies_are_taken_once_held_when_early_and_dropped_when_foreign() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), &p));
    run.step(answer(turn, calls(&["a"])), &p);
    run.step(advance(), &p);
    let child = RunId::child_of(&root(), "a");
    let reply = |child: &RunId, callee: &str| ReplyIn {
        parent_run: root(),
        child_run: child.clone(),
        callee: callee.into(),
        tool_use_id: "a".into(),
        outcome: ReplyOutcome::Succeeded,
        output: "x".repeat(500),
        tree_cost: CostDelta::default(),
        tree_spent: None,
    };
    let early = run.step(
        Input::Reply {
            reply: reply(&child, "cfo"),
            placing: true,
        },
        &p,
    );
    assert_eq!(early.verdict, Verdict::Hold);
    let stranger = run.step(
        Input::Reply {
            reply: reply(&RunId::child_of(&root(), "zz"), "cfo"),
            placing: false,
        },
        &p,
    );
    assert_eq!(
        stranger.verdict,
        Verdict::Dropped("a call this run never placed")
    );
    run.step(
        Input::CallEnded {
            tool_use_id: "a".into(),
            callee: "cfo".into(),
            outcome: CallOutcome::Accepted {
                child_run: child.clone(),
                existing: false,
            },
        },
        &p,
    );
    run.step(advance(), &p);
    assert_eq!(run.status, RunStatus::Waiting);
    let wrong = run.step(
        Input::Reply {
            reply: reply(&child, "ops"),
            placing: false,
        },
        &p,
    );
    assert!(matches!(wrong.verdict, Verdict::Dropped(_)));
    let taken = run.step(
        Input::Reply {
            reply: reply(&child, "cfo"),
            placing: false,
        },
        &p,
    );
    assert_eq!(taken.verdict, Verdict::Taken);
    assert_eq!(run.status, RunStatus::Running);
    let Some(Message::Reply { text, .. }) = run.view.conversation.last() else {
        panic!("no reply");
    };
    assert!(
        text.len() < 500 && text.contains("output truncated"),
        "{text}"
    );
    let dup = run.step(
        Input::Reply {
            reply: reply(&child, "cfo"),
            placing: false,
        },
        &p,
    );
    assert_eq!((dup.verdict, dup.write), (Verdict::Taken, None));
}

#[test]
fn a_wait_with_nothing_out_fails_the_run_in_the_turns_transaction() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), &p));
    let step = run.step(answer(turn, ModelStep::Wait), &p);
    assert_eq!(step.effects, vec![Effect::Settled]);
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(
        run.log.iter().map(RunEvent::kind).collect::<Vec<_>>(),
        [
            "created",
            "status",
            "model_turn_started",
            "model_turn",
            "failed",
            "status"
        ]
    );
}

#[test]
fn reused_tool_use_ids_and_the_turn_limit_end_the_run() {
    let (cc, fl) = (can_call(), fleet());
    let limits = Limits {
        max_turns: 8,
        ..Limits::default()
    };
    let p = policy(&cc, &fl, limits);
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), &p));
    let step = run.step(answer(turn, calls(&["a", "a"])), &p);
    assert_eq!(
        step.write.unwrap().error.as_deref(),
        Some("the model emitted no tool uses or reused a tool-use id")
    );
    let mut long = Run::new(0);
    long.view.model_turns = 8;
    let step = long.step(advance(), &p);
    assert_eq!(
        step.write.unwrap().error.as_deref(),
        Some(
            "model turn limit (8) reached (limits.max_turns): the model took that many turns without answering; raise the limit in agent.yaml if the task needs more turns"
        )
    );
}

#[test]
fn resume_asks_every_unreplied_call_whatever_the_status() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), &p));
    run.step(answer(turn, calls(&["a", "b"])), &p);
    let child = RunId::child_of(&root(), "a");
    run.step(
        Input::CallEnded {
            tool_use_id: "a".into(),
            callee: "cfo".into(),
            outcome: CallOutcome::Accepted {
                child_run: child.clone(),
                existing: false,
            },
        },
        &p,
    );
    assert_eq!(run.status, RunStatus::Running, "b is still being placed");
    let resume = run.step(Input::Resume, &p);
    assert_eq!(
        resume.effects,
        vec![
            Effect::AskReplies(vec![("cfo".into(), child)]),
            Effect::Advance
        ]
    );
}

/// One random thing that can happen to a run, for the property tests.
#[derive(Clone, Debug)]
enum Event {
    /// The model answers its pending turn with `n` calls (ids may repeat across turns).
    Calls(u8),
    /// The model answers with a wait or an answer.
    Wait,
    Answer,
    /// The call placed through use `i` ends, accepted (a replay when `existing`) or refused.
    Accepted(u8, bool),
    Refused(u8),
    /// A reply for use `i`'s child.
    Reply(u8),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (1..5u8).prop_map(Event::Calls),
        Just(Event::Wait),
        Just(Event::Answer),
        (0..12u8, any::<bool>()).prop_map(|(i, e)| Event::Accepted(i, e)),
        (0..12u8).prop_map(Event::Refused),
        (0..12u8).prop_map(Event::Reply),
    ]
}

proptest! {
    /// Whatever happens, in any order: a run never has more calls out or recorded than its cap,
    /// never places a call past its depth limit, never records one use's call twice, every
    /// refusal carries a code, and its kept view equals the view folded from its log.
    #[test]
    fn cap_depth_replays_and_refusals_hold_under_any_order(
        events in proptest::collection::vec(event(), 1..40),
        depth in 0..6u32,
        cap in 1..5u32,
    ) {
        let (cc, fl) = (can_call(), fleet());
        let limits = Limits { max_depth: 4, max_calls_per_run: cap, ..Limits::default() };
        let p = policy(&cc, &fl, limits);
        let mut run = Run::new(depth);
        let mut busy = BTreeSet::new();
        let mut turn: Option<TurnAsked> = Some(asked(&run.step(advance(), &p)));
        let mut next_use = 0u8;
        for event in events {
            let input = match event {
                Event::Calls(n) => {
                    let Some(asked) = turn.take() else { continue };
                    let ids: Vec<String> = (0..n).map(|k| format!("u{}", next_use + k)).collect();
                    next_use += n;
                    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                    answer(asked, calls(&ids))
                }
                Event::Wait => match turn.take() { Some(a) => answer(a, ModelStep::Wait), None => continue },
                Event::Answer => match turn.take() { Some(a) => answer(a, ModelStep::Answer("done".into())), None => continue },
                Event::Accepted(i, existing) => {
                    let id = format!("u{i}");
                    if !busy.remove(&id) { continue }
                    Input::CallEnded { outcome: CallOutcome::Accepted { child_run: RunId::child_of(&root(), &id), existing }, tool_use_id: id, callee: "cfo".into() }
                }
                Event::Refused(i) => {
                    let id = format!("u{i}");
                    if !busy.remove(&id) { continue }
                    Input::CallEnded { outcome: CallOutcome::Refused(Refusal::Saturated { callee: "cfo".into(), active: 1 }), tool_use_id: id, callee: "cfo".into() }
                }
                Event::Reply(i) => {
                    let id = format!("u{i}");
                    Input::Reply { placing: busy.contains(&id), reply: ReplyIn { parent_run: root(), child_run: RunId::child_of(&root(), &id), callee: "cfo".into(), tool_use_id: id, outcome: ReplyOutcome::Succeeded, output: "r".into(), tree_cost: CostDelta::default(), tree_spent: None } }
                }
            };
            let mut pending = vec![input];
            while let Some(input) = pending.pop() {
                let step = run.step(input, &p);
                for effect in step.effects {
                    match effect {
                        Effect::Advance => pending.push(Input::Advance { busy: busy.clone(), thinking: turn.is_some() }),
                        Effect::AskModel(asked) => turn = Some(asked),
                        Effect::PlaceCall { tool_use_id, .. } => {
                            prop_assert!(busy.insert(tool_use_id), "a call placed twice at once");
                        }
                        _ => {}
                    }
                }
            }
            let out_or_recorded = run.view.calls_counted() + busy.iter().filter(|u| run.view.call_by_tool_use(u).is_none()).count() as u64;
            prop_assert!(out_or_recorded <= u64::from(cap), "{} calls out or recorded, cap {}", out_or_recorded, cap);
            if depth >= 4 {
                prop_assert!(busy.is_empty() && run.view.calls_placed() == 0, "a call placed past the depth limit");
            }
        }
        let placed: Vec<&str> = run.log.iter().filter_map(|e| match e {
            RunEvent::CallPlaced(c) => Some(c.tool_use_id.as_str()),
            _ => None,
        }).collect();
        let distinct: BTreeSet<&str> = placed.iter().copied().collect();
        prop_assert_eq!(placed.len(), distinct.len(), "one use's call recorded twice");
        for e in &run.log {
            if let RunEvent::CallRefused(r) = e {
                prop_assert!(!r.code.is_empty());
                prop_assert_eq!(r.refusal.as_ref().map(Refusal::code), Some(r.code.as_str()));
            }
        }
        prop_assert_eq!(&run.view, &RunView::from_events(&run.log));
    }
}

/// A delivery from `from` into the test run, with the digest the runtime would compute.
fn deliver(from: &str, delivery_id: &str, text: &str) -> Input {
    Input::Deliver {
        run: root(),
        from: from.into(),
        delivery_id: delivery_id.into(),
        digest: crate::directory::payload_digest("cmo", Some(&root()), text),
        text: text.into(),
    }
}

fn delivered(seq: u64, existing: bool) -> Verdict {
    Verdict::Delivered { seq, existing }
}

/// A run whose one call is out: its model waits for the reply.
fn waiting_run(p: &Policy<'_>) -> Run {
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), p));
    run.step(answer(turn, calls(&["tu_0_0"])), p);
    run.step(advance(), p);
    run.step(
        Input::CallEnded {
            tool_use_id: "tu_0_0".into(),
            callee: "cfo".into(),
            outcome: CallOutcome::Accepted {
                child_run: RunId::child_of(&root(), "tu_0_0"),
                existing: false,
            },
        },
        p,
    );
    run.step(advance(), p);
    assert_eq!(run.status, RunStatus::Waiting);
    run
}

/// A run parked on an operator's approval.
fn blocked_run() -> Run {
    let mut run = Run::new(0);
    let (id, input) = (root(), json!({}));
    let used = crate::step::GatedUse {
        run: &id,
        tool_use_id: "t",
        result_name: "ledger",
        tool: "ledger",
        input: &input,
        gated: true,
        requester_may_decide: false,
        started_here: false,
    };
    let crate::step::Gate::Block(block) = crate::step::approval_gate(&run.view, &used) else {
        panic!("a gated tool blocks first");
    };
    run.apply(&Step::write(block, vec![]));
    assert_eq!(run.status, RunStatus::Blocked);
    run
}

/// A run that answered.
fn settled_run(p: &Policy<'_>) -> Run {
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), p));
    run.step(answer(turn, ModelStep::Answer("done".into())), p);
    assert_eq!(run.status, RunStatus::Succeeded);
    run
}

#[test]
fn a_message_delivered_to_a_waiting_run_is_news_and_advances_it() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = waiting_run(&p);
    assert!(!run.view.needs_model());
    let seq = run.view.last_seq + 1;
    let step = run.step(deliver("ops", "d-1", "the audit moved to Friday"), &p);
    assert_eq!(step.verdict, delivered(seq, false));
    assert_eq!(step.effects, vec![Effect::Advance]);
    let write = step.write.as_ref().unwrap();
    assert_eq!((write.events.len(), write.status), (1, None));
    assert_eq!(run.view.last_seq, seq);
    assert_eq!(run.log.last().map(RunEvent::kind), Some("message_received"));
    assert_eq!(run.status, RunStatus::Waiting);
    assert!(run.view.needs_model());
    assert_eq!(
        run.view.conversation.last().map(Message::render).as_deref(),
        Some("[message from ops] the audit moved to Friday")
    );
    // The advance it asked for asks the model, which sees the message.
    let turn = asked(&run.step(advance(), &p));
    assert_eq!(turn.seen_seq, seq);
    assert_eq!(&run.view, &RunView::from_events(&run.log));
}

#[test]
fn a_running_or_queued_run_reads_a_delivery_on_its_next_turn_without_an_effect() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    // Running: the turn in progress saw less than the message, so the next advance asks again.
    let mut run = Run::new(0);
    let turn = asked(&run.step(advance(), &p));
    run.step(answer(turn, calls(&["tu_0_0"])), &p);
    assert_eq!(run.status, RunStatus::Running);
    let step = run.step(deliver("ops", "d-1", "hi"), &p);
    assert_eq!(step.verdict, delivered(run.view.last_seq, false));
    assert!(step.write.is_some());
    assert_eq!(step.effects, vec![]);
    assert!(run.view.needs_model());
    // Queued: the first turn reads it.
    let mut run = Run::new(0);
    let step = run.step(deliver("ops", "d-1", "hi"), &p);
    assert_eq!(step.verdict, delivered(2, false));
    assert_eq!(step.effects, vec![]);
    assert_eq!(run.status, RunStatus::Queued);
    let turn = asked(&run.step(advance(), &p));
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(turn.seen_seq, 2);
}

#[test]
fn a_settled_or_blocked_run_refuses_a_delivery_and_writes_nothing() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = settled_run(&p);
    let before = run.log.len();
    let step = run.step(deliver("ops", "d-1", "hi"), &p);
    assert_eq!(
        step.verdict,
        Verdict::Refused(Refusal::DeliveryTargetSettled {
            run: root().to_string(),
            status: "succeeded".into(),
        })
    );
    assert_eq!(
        (step.write, step.effects, run.log.len()),
        (None, vec![], before)
    );

    let mut run = blocked_run();
    let before = run.log.len();
    let step = run.step(deliver("ops", "d-1", "hi"), &p);
    assert_eq!(
        step.verdict,
        Verdict::Refused(Refusal::DeliveryTargetBlocked {
            run: root().to_string(),
        })
    );
    assert_eq!(
        (step.write, step.effects, run.log.len()),
        (None, vec![], before)
    );
}

#[test]
fn a_repeated_delivery_is_answered_from_the_first_and_a_reused_id_is_a_conflict() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = waiting_run(&p);
    let first = run.step(deliver("ops", "d-1", "hi"), &p);
    let Verdict::Delivered {
        seq,
        existing: false,
    } = first.verdict
    else {
        panic!("the first delivery is written: {:?}", first.verdict);
    };
    let before = run.log.len();
    let again = run.step(deliver("ops", "d-1", "hi"), &p);
    assert_eq!(again.verdict, delivered(seq, true));
    assert_eq!((again.write, again.effects), (None, vec![]));
    let conflict = run.step(deliver("ops", "d-1", "something else"), &p);
    assert_eq!(
        conflict.verdict,
        Verdict::Refused(Refusal::DeliveryConflict {
            delivery_id: "d-1".into()
        })
    );
    assert_eq!(conflict.write, None);
    // The same id from another sender is another delivery.
    let other = run.step(deliver("cfo", "d-1", "hi"), &p);
    assert_eq!(other.verdict, delivered(before as u64 + 1, false));
    // A repeat whose receipt was lost still finds it after the run settled.
    let turn = asked(&run.step(advance(), &p));
    run.step(answer(turn, ModelStep::Answer("done".into())), &p);
    assert_eq!(run.status, RunStatus::Succeeded);
    let late = run.step(deliver("ops", "d-1", "hi"), &p);
    assert_eq!(late.verdict, delivered(seq, true));
    assert_eq!(late.write, None);
}

#[test]
fn an_empty_message_or_a_malformed_id_is_refused() {
    let (cc, fl) = (can_call(), fleet());
    let p = policy(&cc, &fl, Limits::default());
    let mut run = waiting_run(&p);
    let before = run.log.len();
    for input in [
        deliver("ops", "d-1", ""),
        deliver("ops", "d-1", " \n\t "),
        deliver("ops", "", "hi"),
        deliver("ops", "has space", "hi"),
    ] {
        let step = run.step(input, &p);
        assert_eq!(step.verdict, Verdict::Refused(Refusal::MalformedDelivery));
        assert_eq!(step.write, None);
    }
    assert_eq!(run.log.len(), before);
}

/// A run in one of the states a delivery meets.
fn run_in(state: u8, p: &Policy<'_>) -> Run {
    match state {
        0 => Run::new(0),
        1 => waiting_run(p),
        2 => blocked_run(),
        3 => settled_run(p),
        _ => {
            let mut run = Run::new(0);
            let turn = asked(&run.step(advance(), p));
            run.step(answer(turn, calls(&["tu_0_0"])), p);
            run
        }
    }
}

proptest! {
    /// Delivering the same (sender, id, digest) twice in a row never writes twice: the second
    /// is answered from the first (or refused as the first was), and writes nothing.
    #[test]
    fn the_same_delivery_twice_in_a_row_never_writes_twice(
        state in 0..5u8,
        earlier in proptest::collection::vec(
            (prop_oneof![Just("ops"), Just("cfo")], 0..3u8, "[a-z ]{0,4}"),
            0..4,
        ),
        from in prop_oneof![Just("ops"), Just("cfo")],
        id in 0..3u8,
        text in "[a-z ]{0,4}",
    ) {
        let (cc, fl) = (can_call(), fleet());
        let p = policy(&cc, &fl, Limits::default());
        let mut run = run_in(state, &p);
        for (from, id, text) in earlier {
            run.step(deliver(from, &format!("d-{id}"), &text), &p);
        }
        let id = format!("d-{id}");
        let first = run.step(deliver(from, &id, &text), &p);
        let second = run.step(deliver(from, &id, &text), &p);
        prop_assert_eq!(&second.write, &None);
        match (&first.verdict, &second.verdict) {
            (Verdict::Delivered { seq, .. }, Verdict::Delivered { seq: again, existing: true }) => {
                prop_assert_eq!(seq, again);
            }
            (Verdict::Refused(a), Verdict::Refused(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "first {:?}, then {:?}", a, b),
        }
        let written = run
            .log
            .iter()
            .filter(|e| matches!(e, RunEvent::MessageReceived(m) if m.from == from && m.delivery_id == id))
            .count();
        prop_assert!(written <= 1, "one delivery written {} times", written);
        prop_assert_eq!(&run.view, &RunView::from_events(&run.log));
    }
}

mod budget;
mod cancel;
mod gate;
mod once;
mod started;
mod tree_budget;
