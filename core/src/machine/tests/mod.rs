//! The machine's rules over what is out: busy uses, held replies, re-ask timers, replies.

use super::*;
use crate::RunEvent;

fn machine() -> AgentMachine {
    AgentMachine::new(
        "b",
        8,
        AdmissionLimits {
            admission_limit: 4,
            per_principal_limit: 4,
        },
    )
}

fn reply(parent: &RunId, tool_use_id: &str) -> ReplyIn {
    ReplyIn {
        parent_run: parent.clone(),
        child_run: RunId::child_of(parent, tool_use_id),
        callee: "c".into(),
        tool_use_id: tool_use_id.into(),
        outcome: ReplyOutcome::Succeeded,
        output: "done".into(),
        tree_cost: CostDelta::default(),
        tree_spent: None,
    }
}

#[test]
fn busy_uses_are_the_tasks_and_waits_out_of_one_run() {
    let mut m = machine();
    let (run, other) = (RunId::random(), RunId::random());
    m.task_out(&run, "t1");
    m.wait_started(&run, "t2");
    m.task_out(&other, "t9");
    m.thinking(&run);
    assert_eq!(
        m.advance_input(&run),
        Input::Advance {
            busy: ["t1".to_owned(), "t2".to_owned()].into(),
            thinking: true,
        }
    );
    assert!(m.task_back(&run, "t1"));
    assert!(!m.task_back(&run, "t1"));
    assert!(m.wait_over(&run, "t2"));
    m.answered(&run);
    assert_eq!(
        m.advance_input(&run),
        Input::Advance {
            busy: BTreeSet::new(),
            thinking: false,
        }
    );
    assert!(!m.is_quiet(), "the other run's task is out");
    m.task_back(&other, "t9");
    assert!(m.is_quiet());
}

#[test]
fn a_reply_ends_its_calls_blocking_wait() {
    let mut m = machine();
    let run = RunId::random();
    m.wait_started(&run, "tu");
    let Input::Reply { placing, .. } = m.reply_arrived(reply(&run, "tu")) else {
        panic!("a reply input");
    };
    assert!(!placing, "decided when the reply is stepped");
    assert!(!m.wait_over(&run, "tu"), "the reply ended the wait");
}

#[test]
fn only_taken_or_held_replies_count_as_taken() {
    let mut m = machine();
    let run = RunId::random();
    for (verdict, taken) in [
        (Verdict::Taken, true),
        (Verdict::None, false),
        (Verdict::Dropped("late"), false),
    ] {
        assert_eq!(m.reply_stepped(reply(&run, "tu"), &verdict), taken);
    }
    assert!(m.is_quiet(), "nothing was held");
}

#[test]
fn a_gated_use_may_run_only_under_a_start_of_this_incarnation() {
    let mut m = machine();
    let run = RunId::random();
    assert!(!m.started_here(&run, "pay"));
    m.gate_started(&run, "pay");
    assert!(m.started_here(&run, "pay"));
    m.gate_ran(&run, "pay");
    assert!(!m.started_here(&run, "pay"), "a start is spent once");
    m.gate_started(&run, "pay");
    m.forget_run(&run);
    assert!(!m.started_here(&run, "pay"));
    let fresh = machine();
    assert!(
        !fresh.started_here(&run, "pay"),
        "a restarted machine started nothing: the use is in doubt"
    );
}

#[test]
fn a_waiting_run_asks_again_after_the_delay_then_with_a_doubling_backoff() {
    let mut m = machine();
    let run = RunId::random();
    let t0 = Instant::now();
    let waiting = [run];
    assert!(m.reask_due(t0, &waiting).is_empty(), "the timer starts");
    assert_eq!(m.poll_timeout(), Some(t0 + REASK_AFTER));
    assert!(m.reask_due(t0 + REASK_AFTER / 2, &waiting).is_empty());
    let t1 = t0 + REASK_AFTER;
    assert_eq!(m.reask_due(t1, &waiting), waiting);
    assert_eq!(m.poll_timeout(), Some(t1 + REASK_AFTER * 2));
    let mut at = t1;
    let mut backoff = REASK_AFTER * 2;
    for _ in 0..10 {
        at += backoff;
        assert_eq!(m.reask_due(at, &waiting), waiting);
        backoff = (backoff * 2).min(REASK_MAX);
    }
    assert_eq!(m.poll_timeout(), Some(at + REASK_MAX));
    assert!(m.reask_due(at, &[]).is_empty());
    assert_eq!(
        m.poll_timeout(),
        None,
        "a run that no longer waits loses its timer"
    );
}

#[test]
fn a_settled_run_loses_its_timer() {
    let mut m = machine();
    let run = RunId::random();
    m.restore_unsettled(run.clone(), None);
    m.reask_due(Instant::now(), std::slice::from_ref(&run));
    m.run_settled(&run);
    assert_eq!(m.poll_timeout(), None);
    assert_eq!(m.unsettled(), 0);
}

#[test]
fn a_settled_called_run_replies_capped_and_a_root_run_replies_to_nobody() {
    let m = machine();
    let (parent, child) = (RunId::random(), RunId::random());
    let cost = CostDelta {
        model_turns: 2,
        ..CostDelta::default()
    };
    let settled = SettledRun {
        id: &child,
        agent: "b",
        status: RunStatus::Succeeded,
        call: Some((&parent, "a", "tu")),
        output: Some("a long answer that goes past the cap"),
        error: None,
        tree_cost: cost,
    };
    let out = m.reply_of(&settled).expect("a called run replies");
    assert_eq!(out.caller, "a");
    assert_eq!(out.reply.parent_run, parent);
    assert_eq!(out.reply.child_run, child);
    assert_eq!(out.reply.callee, "b");
    assert_eq!(out.reply.tool_use_id, "tu");
    assert_eq!(out.reply.outcome, ReplyOutcome::Succeeded);
    assert_eq!(
        out.reply.output,
        cap_output("a long answer that goes past the cap", 8)
    );
    assert_eq!(out.reply.tree_cost, cost);
    let failed = SettledRun {
        status: RunStatus::Failed,
        output: None,
        error: Some("no"),
        ..settled
    };
    let out = m.reply_of(&failed).expect("a failed run replies too");
    assert_eq!(
        (out.reply.outcome, out.reply.output.as_str()),
        (ReplyOutcome::Failed, "no")
    );
    let root = SettledRun {
        call: None,
        ..settled
    };
    assert_eq!(m.reply_of(&root), None);
}

mod drive;

fn accept_from() -> Vec<String> {
    vec!["a".to_owned()]
}

fn cap(max_calls_per_run: u32) -> Limits {
    Limits {
        max_calls_per_run,
        ..Limits::default()
    }
}

#[test]
fn a_copy_of_a_refused_call_is_refused_the_same_under_a_reloaded_config() {
    let mut m = machine();
    let (parent, child) = (RunId::random(), RunId::random());
    let (reservation, gate) =
        m.reserve_call(("a", &parent, &child), 1, &accept_from(), cap(1), (None, 0));
    // The store counted one child of the parent already: the cap of 1 refuses it.
    let Ok(CallAdmission::Refused { children, refusal }) = gate.admit(false, || Ok::<_, String>(1))
    else {
        panic!("the cap refuses");
    };
    assert_eq!(refusal.code(), "call_cap");
    m.call_admitted(&child, &reservation, &CallAdmitted::Refused { children });
    // The cap is raised; a link's late copy of the same call arrives.
    let (again, gate) =
        m.reserve_call(("a", &parent, &child), 1, &accept_from(), cap(5), (None, 0));
    let admitted = gate.admit(false, || Ok::<_, String>(1));
    assert_eq!(
        admitted,
        Ok(CallAdmission::Refused {
            children: 1,
            refusal
        }),
        "a call is decided once"
    );
    m.call_admitted(&child, &again, &CallAdmitted::Refused { children: 1 });
    // A call that starts another run is decided under the new config.
    let other = RunId::random();
    let (_, gate) = m.reserve_call(("a", &parent, &other), 1, &accept_from(), cap(5), (None, 0));
    assert!(matches!(
        gate.admit(false, || Ok::<_, String>(1)),
        Ok(CallAdmission::Insert { children_before: 1 })
    ));
}

#[test]
fn copies_of_a_call_admitted_at_once_share_the_first_ones_gate() {
    let mut m = machine();
    let (parent, child) = (RunId::random(), RunId::random());
    let (first, gate) =
        m.reserve_call(("a", &parent, &child), 1, &accept_from(), cap(1), (None, 0));
    // A copy arrives after a reload that stopped accepting the caller, before the first is in.
    let (copy, copy_gate) = m.reserve_call(("a", &parent, &child), 1, &[], cap(1), (None, 0));
    assert_eq!(
        gate.admit(false, || Ok::<_, String>(0)),
        Ok(CallAdmission::Insert { children_before: 0 })
    );
    // The copy's job runs after the first one's insert: the run exists, a replay.
    assert_eq!(
        copy_gate.admit(true, || Ok::<_, String>(1)),
        Ok(CallAdmission::Replay)
    );
    m.call_admitted(&child, &first, &CallAdmitted::Stored { children_before: 0 });
    assert!(!m.is_quiet(), "the copy is still out");
    m.call_admitted(&child, &copy, &CallAdmitted::Replay);
    assert_eq!(m.unsettled(), 1);
    m.run_settled(&child);
    assert!(m.is_quiet());
}

#[test]
fn a_run_stepped_before_its_admission_was_noticed_keeps_its_newer_view() {
    let mut m = machine();
    let run = RunId::random();
    let created = RunEvent::Created(crate::event::Created {
        channel: crate::Channel::Api,
        input: "question".into(),
        parent_run: None,
        hop_depth: 1,
        principal: "agent:a".into(),
        budget: None,
    });
    // An operator's cancel reached the run between its admission's commit and the notice of
    // it: the run was loaded and settled.
    let mut newer = RunView::from_events([&created]);
    newer.status = Some(RunStatus::Failed);
    m.loaded(&run, Some(newer.clone()));
    m.created(&run, std::slice::from_ref(&created));
    assert_eq!(m.view(&run), Some(&newer));
}
