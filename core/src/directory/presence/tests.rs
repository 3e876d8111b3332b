//! `presence_of` over every actor state and every shape of work, `WorkState`'s tally of open
//! runs, and the text forms of the vocabulary.

use proptest::prelude::*;

use super::*;

fn settled() -> LastSettled {
    LastSettled {
        run: RunId::parse("run_0123456789abcdef0123456789abcdef").unwrap(),
        status: RunStatus::Succeeded,
        at_ms: 1_700_000_000_000,
    }
}

fn work(queued: u32, running: u32, waiting: u32, blocked: u32, last: bool) -> WorkState {
    WorkState {
        queued,
        running,
        waiting,
        blocked,
        last_settled: last.then(settled),
        ..WorkState::default()
    }
}

fn report(actor: ActorState, work: WorkState) -> AgentReport {
    AgentReport {
        agent: "cmo".into(),
        actor,
        work,
        incarnation: "1-1".into(),
    }
}

/// Every shape of work worth telling apart: nothing, each open status alone, all of them,
/// with and without a settled run, and counts at the top of the range.
fn works() -> Vec<WorkState> {
    let mut all = Vec::new();
    for last in [false, true] {
        all.extend([
            work(0, 0, 0, 0, last),
            work(1, 0, 0, 0, last),
            work(0, 1, 0, 0, last),
            work(0, 0, 1, 0, last),
            work(0, 0, 0, 1, last),
            work(2, 3, 4, 5, last),
            work(u32::MAX, u32::MAX, u32::MAX, u32::MAX, last),
        ]);
    }
    all
}

#[test]
fn an_agent_its_host_does_not_serve_is_unknown_whatever_its_work() {
    for w in works() {
        assert_eq!(
            presence_of(&report(ActorState::NotServed, w.clone())),
            (PresenceState::Unknown, PresenceBasis::NotServedByHost),
            "{w:?}"
        );
    }
}

#[test]
fn an_agent_whose_actor_is_down_is_unreachable_whatever_its_work() {
    for w in works() {
        assert_eq!(
            presence_of(&report(ActorState::Down, w.clone())),
            (PresenceState::Unreachable, PresenceBasis::AgentDown),
            "{w:?}"
        );
    }
}

#[test]
fn an_agent_down_on_its_store_is_unreachable_and_says_why_whatever_its_work() {
    for w in works() {
        assert_eq!(
            presence_of(&report(ActorState::StoreNotWritable, w.clone())),
            (PresenceState::Unreachable, PresenceBasis::StoreNotWritable),
            "{w:?}"
        );
    }
}

#[test]
fn a_run_parked_on_an_approval_makes_the_agent_blocked_even_when_others_run() {
    for w in [
        work(0, 0, 0, 1, false),
        work(0, 0, 0, 1, true),
        work(1, 0, 0, 1, false),
        work(0, 3, 0, 2, false),
        work(0, 0, 1, 1, true),
        work(5, 5, 5, 5, true),
        work(u32::MAX, u32::MAX, u32::MAX, u32::MAX, false),
    ] {
        assert_eq!(
            presence_of(&report(ActorState::Up, w.clone())),
            (PresenceState::Blocked, PresenceBasis::SupervisorRunTable),
            "{w:?}"
        );
    }
}

#[test]
fn any_open_run_makes_an_up_agent_working() {
    for last in [false, true] {
        for w in [
            work(1, 0, 0, 0, last),
            work(0, 1, 0, 0, last),
            work(0, 0, 1, 0, last),
            work(2, 3, 4, 0, last),
            work(u32::MAX, 0, 0, 0, last),
        ] {
            assert_eq!(
                presence_of(&report(ActorState::Up, w.clone())),
                (PresenceState::Working, PresenceBasis::SupervisorRunTable),
                "{w:?}"
            );
        }
    }
}

#[test]
fn an_up_agent_with_no_open_run_is_done_once_it_settled_one() {
    assert_eq!(
        presence_of(&report(ActorState::Up, work(0, 0, 0, 0, true))),
        (PresenceState::Done, PresenceBasis::SupervisorRunTable)
    );
    // However its last run settled.
    let mut failed = work(0, 0, 0, 0, true);
    failed.last_settled.as_mut().unwrap().status = RunStatus::Failed;
    assert_eq!(
        presence_of(&report(ActorState::Up, failed)),
        (PresenceState::Done, PresenceBasis::SupervisorRunTable)
    );
}

#[test]
fn an_up_agent_that_never_settled_a_run_and_has_none_open_is_idle() {
    assert_eq!(
        presence_of(&report(ActorState::Up, WorkState::default())),
        (PresenceState::Idle, PresenceBasis::SupervisorRunTable)
    );
}

#[test]
fn counting_tallies_open_statuses_and_ignores_settled_ones() {
    let mut w = WorkState::default();
    for status in [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Running,
        RunStatus::Waiting,
        RunStatus::Waiting,
        RunStatus::Waiting,
        RunStatus::Blocked,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Failed,
    ] {
        w.count(status);
    }
    assert_eq!(w, work(1, 2, 3, 1, false));
    assert_eq!(w.open(), 7);

    let mut only_settled = WorkState::default();
    only_settled.count(RunStatus::Succeeded);
    only_settled.count(RunStatus::Failed);
    assert_eq!(only_settled, WorkState::default());
    assert_eq!(only_settled.open(), 0);
}

#[test]
fn counting_leaves_the_last_settled_run_alone() {
    let mut w = work(0, 0, 0, 0, true);
    w.count(RunStatus::Succeeded);
    w.count(RunStatus::Running);
    assert_eq!(w, work(0, 1, 0, 0, true));
}

#[test]
fn counting_and_open_saturate_instead_of_overflowing() {
    let mut w = work(u32::MAX, 0, 0, 0, false);
    w.count(RunStatus::Queued);
    assert_eq!(w.queued, u32::MAX);
    assert_eq!(w.open(), u32::MAX);
    assert_eq!(work(u32::MAX, 1, 1, 1, false).open(), u32::MAX);
    assert_eq!(work(1, 1, 1, u32::MAX, false).open(), u32::MAX);
    assert_eq!(
        work(u32::MAX, u32::MAX, u32::MAX, u32::MAX, false).open(),
        u32::MAX
    );
    assert_eq!(work(1, 2, 3, 4, true).open(), 10);
}

#[test]
fn the_vocabulary_reads_as_its_serialized_form() {
    for state in [
        PresenceState::Working,
        PresenceState::Blocked,
        PresenceState::Idle,
        PresenceState::Done,
        PresenceState::Unreachable,
        PresenceState::Unknown,
    ] {
        assert_eq!(
            serde_json::to_value(state).unwrap(),
            serde_json::json!(state.as_str())
        );
        assert_eq!(state.to_string(), state.as_str());
    }
    for basis in [
        PresenceBasis::SupervisorRunTable,
        PresenceBasis::AgentDown,
        PresenceBasis::StoreNotWritable,
        PresenceBasis::NotServedByHost,
        PresenceBasis::NotReported,
        PresenceBasis::HostUnreachable,
        PresenceBasis::HostNoAnswer,
        PresenceBasis::HostRefused,
    ] {
        assert_eq!(
            serde_json::to_value(basis).unwrap(),
            serde_json::json!(basis.as_str())
        );
    }
    assert_eq!(PresenceState::Working.as_str(), "working");
    assert_eq!(
        PresenceBasis::SupervisorRunTable.as_str(),
        "supervisor_run_table"
    );
}

#[test]
fn a_hosts_presence_provider_is_its_supervisor() {
    assert_eq!(provider_of("alpha"), "supervisor@alpha");
}

fn count() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 0..3u32, 1 => Just(u32::MAX)]
}

fn any_work() -> impl Strategy<Value = WorkState> {
    (count(), count(), count(), count(), any::<bool>())
        .prop_map(|(q, r, w, b, last)| work(q, r, w, b, last))
}

proptest! {
    /// An up agent is ready for input (idle or done) exactly when it has no open run, and
    /// blocked exactly when a run of it is parked; it is never unreachable or unknown.
    #[test]
    fn an_up_agents_state_follows_its_open_runs(w in any_work()) {
        let (state, basis) = presence_of(&report(ActorState::Up, w.clone()));
        prop_assert_eq!(basis, PresenceBasis::SupervisorRunTable);
        prop_assert_eq!(
            matches!(state, PresenceState::Idle | PresenceState::Done),
            w.open() == 0
        );
        prop_assert_eq!(state == PresenceState::Blocked, w.blocked > 0);
        prop_assert_eq!(
            state == PresenceState::Working,
            w.open() > 0 && w.blocked == 0
        );
        prop_assert_eq!(
            state == PresenceState::Done,
            w.open() == 0 && w.last_settled.is_some()
        );
    }

    /// Counting statuses one by one gives the tally of the open ones.
    #[test]
    fn counting_statuses_gives_their_open_tally(
        statuses in proptest::collection::vec(
            prop_oneof![
                Just(RunStatus::Queued),
                Just(RunStatus::Running),
                Just(RunStatus::Waiting),
                Just(RunStatus::Blocked),
                Just(RunStatus::Succeeded),
                Just(RunStatus::Failed),
            ],
            0..30,
        ),
    ) {
        let mut w = WorkState::default();
        for s in &statuses {
            w.count(*s);
        }
        let n = |want: RunStatus| statuses.iter().filter(|s| **s == want).count() as u32;
        prop_assert_eq!(w.queued, n(RunStatus::Queued));
        prop_assert_eq!(w.running, n(RunStatus::Running));
        prop_assert_eq!(w.waiting, n(RunStatus::Waiting));
        prop_assert_eq!(w.blocked, n(RunStatus::Blocked));
        prop_assert_eq!(
            w.open() as usize,
            statuses.iter().filter(|s| !matches!(s, RunStatus::Succeeded | RunStatus::Failed)).count()
        );
        prop_assert_eq!(w.last_settled, None);
    }
}
