//! The machine's drive: the order of its commands, what waits for a commit, askers, loads, the
//! approval gate of an authorized tool, and a restart's gate in doubt.

use serde_json::json;

use consort_config::Limits;

use super::super::{AdmissionLimits, AgentMachine, Answer, Command};
use crate::event::Created;
use crate::step::{Decision, Effect, Input, ModelAnswer, Policy, TurnAsked, Verdict};
use crate::{Channel, ModelStep, RunEvent, RunId, RunStatus, RunView, ToolUse};

fn machine() -> AgentMachine {
    AgentMachine::new(
        "cmo",
        64,
        AdmissionLimits {
            admission_limit: 8,
            per_principal_limit: 8,
        },
    )
}

fn with_policy<T>(f: impl FnOnce(&Policy<'_>) -> T) -> T {
    let can_call = vec!["cfo".to_owned()];
    let fleet = vec!["cmo".to_owned(), "cfo".to_owned()];
    f(&Policy {
        agent: "cmo",
        can_call: &can_call,
        fleet_agents: &fleet,
        limits: Limits::default(),
        reply_cap: 64,
        immediate_model: true,
        now_ms: 0,
    })
}

fn created() -> RunEvent {
    RunEvent::Created(Created {
        channel: Channel::Cli,
        input: "question".into(),
        parent_run: None,
        hop_depth: 0,
        principal: "api:alice".into(),
        budget: None,
    })
}

/// Every command the machine hands out now.
fn drain(m: &mut AgentMachine) -> Vec<Command> {
    with_policy(|p| std::iter::from_fn(|| m.poll(p)).collect())
}

fn appends(commands: &[Command]) -> Vec<u64> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Append { ticket, .. } => Some(*ticket),
            _ => None,
        })
        .collect()
}

fn asked(commands: &[Command]) -> Option<TurnAsked> {
    commands.iter().find_map(|c| match c {
        Command::Execute {
            effect: Effect::AskModel(asked),
            ..
        } => Some(asked.clone()),
        _ => None,
    })
}

fn answer(step: ModelStep) -> Result<ModelAnswer, String> {
    Ok(ModelAnswer {
        step,
        input_tokens: 0,
        output_tokens: 0,
    })
}

fn pay(id: &str) -> ModelStep {
    ModelStep::ToolUses(vec![ToolUse {
        id: id.into(),
        name: "pay".into(),
        input: json!({"amount": 5}),
    }])
}

#[test]
fn a_new_run_asks_its_model_without_waiting_for_its_insert() {
    let mut m = machine();
    let run = RunId::random();
    m.created(&run, &[created()]);
    let insert = m.insert_ticket(&run);
    m.again(&run);
    let commands = drain(&mut m);
    assert!(asked(&commands).is_some(), "{commands:?}");
    assert!(appends(&commands).iter().all(|t| *t > insert));
}

#[test]
fn what_lets_something_out_of_a_run_waits_for_its_writes_and_later_inputs_wait_behind_it() {
    let mut m = machine();
    let run = RunId::random();
    m.created(&run, &[created()]);
    m.again(&run);
    let turn = asked(&drain(&mut m)).expect("the model is asked");
    m.input_first(
        &run,
        Input::ModelAnswered {
            asked: turn,
            answer: answer(pay("tu1")),
        },
    );
    let commands = drain(&mut m);
    let tickets = appends(&commands);
    assert_eq!(tickets.len(), 1, "the turn is appended: {commands:?}");
    assert!(
        !commands.iter().any(|c| matches!(
            c,
            Command::Execute {
                effect: Effect::UseTool(_),
                ..
            }
        )),
        "the tool use waits for the turn's commit: {commands:?}"
    );
    assert!(m.is_suspended(&run));
    // A cancel arrives meanwhile: it waits in the drive, behind the tool use.
    m.input(
        &run,
        Input::Cancel {
            run: run.clone(),
            by: "operator".into(),
            reason: None,
        },
        Some(7),
    );
    assert!(drain(&mut m).is_empty());
    m.committed(tickets[0]);
    let commands = drain(&mut m);
    let first_use = commands
        .iter()
        .position(|c| {
            matches!(
                c,
                Command::Execute {
                    effect: Effect::UseTool(_),
                    ..
                }
            )
        })
        .expect("the use is handed out once the turn is durable");
    let cancel_write = commands
        .iter()
        .position(|c| matches!(c, Command::Append { .. }))
        .expect("then the cancel is stepped");
    assert!(first_use < cancel_write, "{commands:?}");
    assert!(
        !commands.iter().any(|c| matches!(c, Command::Answer(_))),
        "the canceler is answered once the cancel is durable"
    );
    let cancel_ticket = *appends(&commands).last().expect("the cancel's ticket");
    m.committed(cancel_ticket);
    let commands = drain(&mut m);
    assert!(commands.contains(&Command::Answer(Answer {
        asker: Some(7),
        run: run.clone(),
        verdict: Verdict::None,
    })));
}

#[test]
fn a_run_not_kept_is_loaded_first_and_one_the_store_lacks_answers_dropped() {
    let mut m = machine();
    let run = RunId::random();
    m.input(&run, Input::Resume, Some(1));
    assert_eq!(drain(&mut m), vec![Command::Load(run.clone())]);
    assert!(drain(&mut m).is_empty(), "nothing moves while it loads");
    m.loaded(&run, Some(RunView::from_events(&[created()])));
    let commands = drain(&mut m);
    assert!(
        commands
            .iter()
            .any(|c| matches!(c, Command::Answer(Answer { asker: Some(1), .. }))),
        "{commands:?}"
    );
    let gone = RunId::random();
    m.input(&gone, Input::Resume, Some(2));
    assert_eq!(drain(&mut m), vec![Command::Load(gone.clone())]);
    m.loaded(&gone, None);
    assert_eq!(
        drain(&mut m),
        vec![Command::Answer(Answer {
            asker: Some(2),
            run: gone,
            verdict: Verdict::Dropped("no such run"),
        })]
    );
}

/// Drives a run to the point where its model used the gated tool `pay` (use `tu1`) and the
/// use was handed out; returns the run and the ticket of the last write.
fn to_gated_use(m: &mut AgentMachine) -> (RunId, u64) {
    let run = RunId::random();
    m.created(&run, &[created()]);
    m.again(&run);
    let turn = asked(&drain(m)).expect("asked");
    m.input_first(
        &run,
        Input::ModelAnswered {
            asked: turn,
            answer: answer(pay("tu1")),
        },
    );
    let ticket = appends(&drain(m))[0];
    m.committed(ticket);
    let commands = drain(m);
    assert!(
        commands.iter().any(|c| matches!(
            c,
            Command::Execute {
                effect: Effect::UseTool(_),
                ..
            }
        )),
        "{commands:?}"
    );
    (run, ticket)
}

fn authorized(run: &RunId) -> Input {
    Input::ToolAuthorized {
        run: run.clone(),
        tool_use_id: "tu1".into(),
        result_name: "pay".into(),
        tool: "pay".into(),
        input: json!({"amount": 5}),
        gated: true,
        requester_may_decide: false,
        started_here: true,
    }
}

#[test]
fn an_approved_gated_tool_is_recorded_started_then_runs_once_and_a_restart_puts_it_in_doubt() {
    let mut m = machine();
    let (run, _) = to_gated_use(&mut m);
    // The driver authorized it (the machine ignores the driver's `started_here`).
    m.input(&run, authorized(&run), None);
    let commands = drain(&mut m);
    let blocked = appends(&commands);
    assert_eq!(blocked.len(), 1, "the gate asks: {commands:?}");
    assert_eq!(
        m.view(&run).and_then(|v| v.status),
        Some(RunStatus::Blocked)
    );
    m.committed(blocked[0]);
    drain(&mut m);
    m.input(
        &run,
        Input::Decide {
            run: run.clone(),
            gate: None,
            decision: Decision::Approve,
            by: "operator".into(),
        },
        Some(3),
    );
    let commands = drain(&mut m);
    let decided = appends(&commands)[0];
    m.committed(decided);
    let commands = drain(&mut m);
    assert!(
        commands.iter().any(|c| matches!(
            c,
            Command::Execute {
                effect: Effect::UseTool(_),
                ..
            }
        )),
        "the approved use is handed out again: {commands:?}"
    );
    m.input(&run, authorized(&run), None);
    let commands = drain(&mut m);
    let started = appends(&commands);
    assert_eq!(
        started.len(),
        1,
        "`tool_started` is written first: {commands:?}"
    );
    assert!(
        !commands.iter().any(|c| matches!(
            c,
            Command::Execute {
                effect: Effect::RunTool { .. },
                ..
            }
        )),
        "nothing runs before the start is durable"
    );
    // The host dies here: a new machine resumes from the log.
    let log_view = m.view(&run).cloned().expect("kept");
    let mut restarted = machine();
    restarted.loaded(&run, Some(log_view));
    restarted.input(&run, authorized(&run), None);
    let commands = drain(&mut restarted);
    assert_eq!(appends(&commands).len(), 1, "{commands:?}");
    let gate = &restarted.view(&run).expect("kept").approvals["tu1"];
    assert!(gate.in_doubt && gate.waiting(), "{gate:?}");
    assert!(
        !commands.iter().any(|c| matches!(
            c,
            Command::Execute {
                effect: Effect::RunTool { .. },
                ..
            }
        )),
        "never again under the old approval"
    );
    // The machine that wrote the start runs it, once.
    m.committed(started[0]);
    let commands = drain(&mut m);
    assert!(
        commands.iter().any(|c| matches!(
            c,
            Command::Execute {
                effect: Effect::UseTool(_),
                ..
            }
        )),
        "{commands:?}"
    );
    m.input(&run, authorized(&run), None);
    let commands = drain(&mut m);
    let runs = commands
        .iter()
        .filter(|c| {
            matches!(
                c,
                Command::Execute {
                    effect: Effect::RunTool { .. },
                    ..
                }
            )
        })
        .count();
    assert_eq!(runs, 1, "{commands:?}");
    m.input(&run, authorized(&run), None);
    let commands = drain(&mut m);
    assert_eq!(
        appends(&commands).len(),
        1,
        "a second authorization finds the start spent: {commands:?}"
    );
}

#[test]
fn a_barrier_holds_what_follows_until_the_writes_before_it_are_durable() {
    let mut m = machine();
    let run = RunId::random();
    m.created(&run, &[created()]);
    m.again(&run);
    let turn = asked(&drain(&mut m)).expect("asked");
    m.input_first(
        &run,
        Input::ModelAnswered {
            asked: turn,
            answer: answer(pay("tu1")),
        },
    );
    let mut commands = Vec::new();
    with_policy(|p| {
        while let Some(c) = m.poll(p) {
            if let Command::Append { run, .. } = &c {
                m.barrier(run, 4);
            }
            commands.push(c);
        }
    });
    let ticket = appends(&commands)[0];
    assert!(
        !commands
            .iter()
            .any(|c| matches!(c, Command::Barrier { .. }))
    );
    m.committed(ticket);
    let commands = drain(&mut m);
    assert_eq!(
        commands.first(),
        Some(&Command::Barrier {
            run: run.clone(),
            token: 4
        }),
        "{commands:?}"
    );
}

/// Drives a run whose model calls `cfo` (use `tc`) until the call is handed out; the driver
/// marks it out as a real one does.
fn to_placed_call(m: &mut AgentMachine) -> RunId {
    let run = RunId::random();
    m.created(&run, &[created()]);
    m.again(&run);
    let turn = asked(&drain(m)).expect("asked");
    m.input_first(
        &run,
        Input::ModelAnswered {
            asked: turn,
            answer: answer(ModelStep::ToolUses(vec![ToolUse {
                id: "tc".into(),
                name: "call_agent".into(),
                input: json!({"agent": "cfo", "input": "spend?"}),
            }])),
        },
    );
    let ticket = appends(&drain(m))[0];
    m.committed(ticket);
    let commands = drain(m);
    assert!(
        commands.iter().any(|c| matches!(
            c,
            Command::Execute {
                effect: Effect::PlaceCall { .. },
                ..
            }
        )),
        "{commands:?}"
    );
    m.task_out(&run, "tc");
    run
}

fn cfo_reply(run: &RunId) -> crate::step::ReplyIn {
    crate::step::ReplyIn {
        parent_run: run.clone(),
        child_run: RunId::child_of(run, "tc"),
        callee: "cfo".into(),
        tool_use_id: "tc".into(),
        outcome: crate::event::ReplyOutcome::Succeeded,
        output: "48250".into(),
        tree_cost: crate::step::CostDelta::default(),
        tree_spent: None,
    }
}

fn accepted(run: &RunId) -> Input {
    Input::CallEnded {
        tool_use_id: "tc".into(),
        callee: "cfo".into(),
        outcome: crate::step::CallOutcome::Accepted {
            child_run: RunId::child_of(run, "tc"),
            existing: false,
        },
    }
}

fn kinds(m: &AgentMachine, run: &RunId) -> (usize, bool) {
    let view = m.view(run).expect("kept");
    (view.calls.len(), view.calls.values().all(|c| c.replied))
}

#[test]
fn a_reply_that_beats_its_acceptance_is_held_and_taken_right_after_the_call_is_recorded() {
    let mut m = machine();
    let run = to_placed_call(&mut m);
    let input = m.reply_arrived(cfo_reply(&run));
    m.input(&run, input, Some(9));
    let commands = drain(&mut m);
    assert!(
        appends(&commands).is_empty(),
        "held, nothing written: {commands:?}"
    );
    assert!(
        commands.contains(&Command::Answer(Answer {
            asker: Some(9),
            run: run.clone(),
            verdict: Verdict::Taken,
        })),
        "a held reply is answered taken: {commands:?}"
    );
    m.input(&run, accepted(&run), None);
    drain(&mut m);
    assert_eq!(kinds(&m, &run), (1, true), "placed, then replied");
}

#[test]
fn a_reply_queued_behind_a_suspended_drive_reads_whether_its_call_is_recorded_when_stepped() {
    let mut m = machine();
    let run = to_placed_call(&mut m);
    // The run's view must be read again (its log was found out of step): its drive waits
    // for the load, and what arrives meanwhile queues behind it.
    let kept = m.view(&run).cloned().expect("kept");
    m.forget_view(&run);
    let reply = m.reply_arrived(cfo_reply(&run));
    m.input(&run, reply, None);
    // The call's acceptance arrives before the reply was stepped.
    m.input(&run, accepted(&run), None);
    assert_eq!(drain(&mut m), vec![Command::Load(run.clone())]);
    m.loaded(&run, Some(kept));
    drain(&mut m);
    assert_eq!(
        kinds(&m, &run),
        (1, true),
        "the reply is recorded once its call is, never left held"
    );
}

#[test]
fn a_reply_held_for_a_call_that_ended_refused_goes() {
    let mut m = machine();
    let run = to_placed_call(&mut m);
    let input = m.reply_arrived(cfo_reply(&run));
    m.input(&run, input, None);
    drain(&mut m);
    m.input(
        &run,
        Input::CallEnded {
            tool_use_id: "tc".into(),
            callee: "cfo".into(),
            outcome: crate::step::CallOutcome::Refused(crate::Refusal::AgentDown {
                callee: "cfo".into(),
            }),
        },
        None,
    );
    drain(&mut m);
    assert_eq!(kinds(&m, &run).0, 0, "a refused call is not placed");
    assert!(m.held.is_empty(), "the held reply goes");
}

#[test]
fn a_step_asked_for_is_taken_after_the_queued_inputs_even_when_they_ask_nothing() {
    let mut m = machine();
    let run = RunId::random();
    m.created(&run, &[created()]);
    // The run is to move on, and a reply it never asked for (a duplicate, say) is queued
    // before that step: its own step asks nothing, and must not swallow the one asked for.
    m.again(&run);
    let stray = m.reply_arrived(cfo_reply(&run));
    m.input(&run, stray, None);
    let commands = drain(&mut m);
    assert!(asked(&commands).is_some(), "{commands:?}");
}

#[test]
fn a_burst_of_requests_while_a_drive_waits_for_a_commit_is_answered_in_full() {
    let mut m = machine();
    let run = RunId::random();
    m.created(&run, &[created()]);
    m.again(&run);
    let turn = asked(&drain(&mut m)).expect("the model is asked");
    m.input_first(
        &run,
        Input::ModelAnswered {
            asked: turn,
            answer: answer(pay("tu1")),
        },
    );
    let tickets = appends(&drain(&mut m));
    assert!(m.is_suspended(&run));
    // Far more requests than the run's own steps are bounded by, while its drive waits.
    let burst = 300u64;
    for i in 0..burst {
        m.input(
            &run,
            Input::Deliver {
                run: run.clone(),
                from: "ops".into(),
                delivery_id: format!("d{i}"),
                digest: format!("d{i}"),
                text: "news".into(),
            },
            Some(i),
        );
    }
    m.committed(*tickets.last().expect("the turn was appended"));
    let mut answered = 0;
    for _ in 0..10 {
        let commands = drain(&mut m);
        assert!(
            !commands.iter().any(|c| matches!(c, Command::Stalled(_))),
            "a burst of requests is no run going round in circles"
        );
        for command in &commands {
            match command {
                Command::Answer(Answer {
                    asker: Some(_),
                    verdict,
                    ..
                }) => {
                    assert!(matches!(verdict, Verdict::Delivered { .. }), "{verdict:?}");
                    answered += 1;
                }
                Command::Append { ticket, .. } => m.committed(*ticket),
                _ => {}
            }
        }
    }
    assert_eq!(answered, burst);
}
