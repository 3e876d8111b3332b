//! `assemble` and `scope_gap_packet`: one row per registered agent in name order up to the
//! cap, presence taken from the agent's own host, every gap named as a limitation; the JSON a
//! reader gets; and the same invariants over random fleets and random host answers.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::directory::presence::{ActorState, LastSettled};
use crate::{RunId, RunStatus};

const NOW: u64 = 1_700_000_000_000;
/// When the answering hosts observed their agents (their clocks lag a little).
const SEEN: u64 = NOW - 250;

fn request(row_cap: usize) -> PacketRequest {
    PacketRequest {
        goal: "launch".into(),
        now_ms: NOW,
        row_cap,
    }
}

fn reg(agent: &str, host: &str) -> RegisteredAgent {
    RegisteredAgent {
        agent: agent.into(),
        host: host.into(),
    }
}

fn settled() -> LastSettled {
    LastSettled {
        run: RunId::parse("run_0123456789abcdef0123456789abcdef").unwrap(),
        status: RunStatus::Succeeded,
        at_ms: NOW - 10_000,
    }
}

fn busy() -> WorkState {
    WorkState {
        running: 1,
        waiting: 2,
        last_settled: Some(settled()),
        ..WorkState::default()
    }
}

fn report(agent: &str, actor: ActorState, work: WorkState) -> AgentReport {
    AgentReport {
        agent: agent.into(),
        actor,
        work,
        incarnation: "1-1".into(),
    }
}

fn answered(host: &str, reports: Vec<AgentReport>) -> HostAnswer {
    HostAnswer::Answered {
        host: host.into(),
        observed_at_ms: SEEN,
        reports,
    }
}

fn unreachable(host: &str) -> HostAnswer {
    HostAnswer::Unreachable { host: host.into() }
}

fn row<'a>(packet: &'a DirectoryPacket, agent: &str) -> &'a DirectoryRow {
    packet
        .rows
        .iter()
        .find(|r| r.agent == agent)
        .unwrap_or_else(|| panic!("no row for {agent}"))
}

fn agents(packet: &DirectoryPacket) -> Vec<&str> {
    packet.rows.iter().map(|r| r.agent.as_str()).collect()
}

#[test]
fn a_live_host_and_an_unreachable_one_give_a_row_each_and_name_the_gap() {
    let packet = assemble(
        &request(50),
        &[reg("cmo", "alpha"), reg("cfo", "beta")],
        &[
            answered("alpha", vec![report("cmo", ActorState::Up, busy())]),
            unreachable("beta"),
        ],
    );
    assert_eq!(packet.schema_version, SCHEMA_VERSION);
    assert_eq!(packet.goal.as_deref(), Some("launch"));
    assert_eq!(packet.collected_at_ms, NOW);
    assert_eq!(packet.scope, "goal_registered_agents");
    assert_eq!(packet.scope_gap, None);
    assert_eq!(agents(&packet), ["cfo", "cmo"]);
    assert_eq!(packet.registered_agent_count, 2);
    assert_eq!(packet.omitted_row_count, 0);

    let cmo = row(&packet, "cmo");
    assert_eq!(cmo.host, "alpha");
    assert!(cmo.registered);
    assert_eq!(cmo.work, Some(busy()));
    assert_eq!(
        cmo.presence,
        Presence {
            state: PresenceState::Working,
            provider: "supervisor@alpha".into(),
            observed_at_ms: SEEN,
            basis: PresenceBasis::SupervisorRunTable,
        }
    );

    let cfo = row(&packet, "cfo");
    assert_eq!(cfo.host, "beta");
    assert!(cfo.registered);
    assert_eq!(cfo.work, None);
    assert_eq!(
        cfo.presence,
        Presence {
            state: PresenceState::Unreachable,
            provider: "supervisor@beta".into(),
            observed_at_ms: NOW,
            basis: PresenceBasis::HostUnreachable,
        }
    );

    assert!(packet.limitations.contains(&Limitation::PresenceIsAdvisory));
    assert!(packet.limitations.contains(&Limitation::HostUnreachable {
        host: "beta".into()
    }));
    assert!(
        !packet
            .limitations
            .contains(&Limitation::PresenceProviderUnavailable)
    );
    assert_eq!(
        packet.limitations,
        [
            Limitation::PresenceIsAdvisory,
            Limitation::HostUnreachable {
                host: "beta".into()
            },
        ]
    );
}

#[test]
fn when_no_host_provides_presence_the_provider_is_unavailable() {
    let packet = assemble(
        &request(50),
        &[reg("cmo", "alpha"), reg("cfo", "beta"), reg("cdo", "beta")],
        &[unreachable("alpha"), unreachable("beta")],
    );
    assert_eq!(packet.rows.len(), 3);
    for r in &packet.rows {
        assert_eq!(r.work, None);
        assert_eq!(r.presence.state, PresenceState::Unreachable);
        assert_eq!(r.presence.basis, PresenceBasis::HostUnreachable);
    }
    assert_eq!(
        packet.limitations,
        [
            Limitation::PresenceIsAdvisory,
            Limitation::PresenceProviderUnavailable,
            Limitation::HostUnreachable {
                host: "alpha".into()
            },
            Limitation::HostUnreachable {
                host: "beta".into()
            },
        ]
    );
}

#[test]
fn an_agent_its_answering_host_does_not_report_is_a_coverage_gap() {
    let packet = assemble(
        &request(50),
        &[reg("cmo", "alpha"), reg("cfo", "alpha")],
        &[answered(
            "alpha",
            vec![report("cmo", ActorState::Up, WorkState::default())],
        )],
    );
    let cfo = row(&packet, "cfo");
    assert_eq!(cfo.work, None);
    assert_eq!(cfo.presence.state, PresenceState::Unknown);
    assert_eq!(cfo.presence.basis, PresenceBasis::NotReported);
    assert_eq!(cfo.presence.observed_at_ms, SEEN);
    assert_eq!(row(&packet, "cmo").presence.state, PresenceState::Idle);
    assert_eq!(
        packet.limitations,
        [
            Limitation::PresenceIsAdvisory,
            Limitation::PresenceCoverageGap {
                agents: vec!["cfo".into()]
            },
        ]
    );
}

#[test]
fn an_agent_its_host_does_not_serve_has_no_work_and_is_a_coverage_gap() {
    let packet = assemble(
        &request(50),
        &[reg("cmo", "alpha"), reg("cfo", "alpha")],
        &[answered(
            "alpha",
            vec![
                report("cmo", ActorState::Up, WorkState::default()),
                report("cfo", ActorState::NotServed, busy()),
            ],
        )],
    );
    let cfo = row(&packet, "cfo");
    // The host does not serve it: whatever it counted is not the agent's work.
    assert_eq!(cfo.work, None);
    assert_eq!(cfo.presence.state, PresenceState::Unknown);
    assert_eq!(cfo.presence.basis, PresenceBasis::NotServedByHost);
    assert_eq!(
        packet.limitations,
        [
            Limitation::PresenceIsAdvisory,
            Limitation::PresenceCoverageGap {
                agents: vec!["cfo".into()]
            },
        ]
    );
}

#[test]
fn an_agent_whose_actor_is_down_keeps_its_work_and_counts_as_provided() {
    let packet = assemble(
        &request(50),
        &[reg("cmo", "alpha")],
        &[answered(
            "alpha",
            vec![report("cmo", ActorState::Down, busy())],
        )],
    );
    let cmo = row(&packet, "cmo");
    assert_eq!(cmo.work, Some(busy()));
    assert_eq!(cmo.presence.state, PresenceState::Unreachable);
    assert_eq!(cmo.presence.basis, PresenceBasis::AgentDown);
    assert_eq!(packet.limitations, [Limitation::PresenceIsAdvisory]);
}

#[test]
fn a_host_that_does_not_answer_in_time_leaves_its_agents_unknown() {
    let packet = assemble(
        &request(50),
        &[reg("cmo", "alpha"), reg("cfo", "beta")],
        &[
            answered("alpha", vec![report("cmo", ActorState::Up, busy())]),
            HostAnswer::NoAnswer {
                host: "beta".into(),
            },
        ],
    );
    let cfo = row(&packet, "cfo");
    assert_eq!(cfo.work, None);
    assert_eq!(cfo.presence.state, PresenceState::Unknown);
    assert_eq!(cfo.presence.basis, PresenceBasis::HostNoAnswer);
    assert_eq!(cfo.presence.observed_at_ms, NOW);
    assert_eq!(
        packet.limitations,
        [
            Limitation::PresenceIsAdvisory,
            Limitation::HostNoAnswer {
                host: "beta".into()
            },
        ]
    );
}

#[test]
fn a_host_that_refuses_leaves_its_agents_unknown() {
    let packet = assemble(
        &request(50),
        &[reg("cmo", "alpha"), reg("cfo", "beta")],
        &[
            answered("alpha", vec![report("cmo", ActorState::Up, busy())]),
            HostAnswer::Refused {
                host: "beta".into(),
            },
        ],
    );
    let cfo = row(&packet, "cfo");
    assert_eq!(cfo.work, None);
    assert_eq!(cfo.presence.state, PresenceState::Unknown);
    assert_eq!(cfo.presence.basis, PresenceBasis::HostRefused);
    assert_eq!(
        packet.limitations,
        [
            Limitation::PresenceIsAdvisory,
            Limitation::HostRefused {
                host: "beta".into()
            },
        ]
    );
}

#[test]
fn an_agent_whose_host_was_not_asked_is_unknown_and_its_host_is_named() {
    // beta is missing from the answers, while alpha provided presence.
    let packet = assemble(
        &request(50),
        &[reg("cmo", "alpha"), reg("cfo", "beta")],
        &[answered(
            "alpha",
            vec![report("cmo", ActorState::Up, busy())],
        )],
    );
    let cfo = row(&packet, "cfo");
    assert_eq!(cfo.work, None);
    assert_eq!(cfo.presence.state, PresenceState::Unknown);
    assert_eq!(cfo.presence.basis, PresenceBasis::HostNoAnswer);
    assert_eq!(cfo.presence.provider, "supervisor@beta");
    assert_eq!(cfo.presence.observed_at_ms, NOW);
    assert_eq!(
        packet.limitations,
        [
            Limitation::PresenceIsAdvisory,
            Limitation::HostNoAnswer {
                host: "beta".into()
            },
        ]
    );

    // With no answer at all, nobody provided presence either.
    let packet = assemble(&request(50), &[reg("cmo", "alpha")], &[]);
    assert_eq!(row(&packet, "cmo").presence.state, PresenceState::Unknown);
    assert_eq!(
        packet.limitations,
        [
            Limitation::PresenceIsAdvisory,
            Limitation::PresenceProviderUnavailable,
            Limitation::HostNoAnswer {
                host: "alpha".into()
            },
        ]
    );
}

#[test]
fn a_row_takes_presence_only_from_its_own_host() {
    // gamma reports cmo as working, but the fleet places cmo on alpha, which cannot be reached.
    let packet = assemble(
        &request(50),
        &[reg("cmo", "alpha")],
        &[
            unreachable("alpha"),
            answered("gamma", vec![report("cmo", ActorState::Up, busy())]),
        ],
    );
    let cmo = row(&packet, "cmo");
    assert_eq!(cmo.work, None);
    assert_eq!(cmo.presence.basis, PresenceBasis::HostUnreachable);
    // gamma has no row: the packet says nothing about it.
    assert_eq!(
        packet.limitations,
        [
            Limitation::PresenceIsAdvisory,
            Limitation::PresenceProviderUnavailable,
            Limitation::HostUnreachable {
                host: "alpha".into()
            },
        ]
    );
}

#[test]
fn rows_past_the_cap_are_counted_as_omitted_and_named_as_truncated() {
    let registered: Vec<RegisteredAgent> = ["e", "b", "d", "a", "c"]
        .iter()
        .map(|a| reg(a, "alpha"))
        .collect();
    let packet = assemble(&request(3), &registered, &[unreachable("alpha")]);
    assert_eq!(agents(&packet), ["a", "b", "c"]);
    assert_eq!(packet.registered_agent_count, 5);
    assert_eq!(packet.omitted_row_count, 2);
    assert!(
        packet
            .limitations
            .contains(&Limitation::RowsTruncatedAtCap { cap: 3 })
    );

    // At the cap exactly, nothing is omitted.
    let packet = assemble(&request(5), &registered, &[unreachable("alpha")]);
    assert_eq!(packet.rows.len(), 5);
    assert_eq!(packet.omitted_row_count, 0);
    assert!(
        !packet
            .limitations
            .iter()
            .any(|l| matches!(l, Limitation::RowsTruncatedAtCap { .. }))
    );
}

#[test]
fn a_host_whose_agents_are_all_past_the_cap_is_not_named() {
    let packet = assemble(
        &request(1),
        &[reg("a", "alpha"), reg("z", "beta")],
        &[
            answered(
                "alpha",
                vec![report("a", ActorState::Up, WorkState::default())],
            ),
            unreachable("beta"),
        ],
    );
    assert_eq!(agents(&packet), ["a"]);
    assert_eq!(
        packet.limitations,
        [
            Limitation::PresenceIsAdvisory,
            Limitation::RowsTruncatedAtCap { cap: 1 },
        ]
    );
}

#[test]
fn a_cap_of_zero_still_lists_one_row() {
    let packet = assemble(
        &request(0),
        &[reg("a", "alpha"), reg("b", "alpha")],
        &[unreachable("alpha")],
    );
    assert_eq!(agents(&packet), ["a"]);
    assert_eq!(packet.omitted_row_count, 1);
    assert!(
        packet
            .limitations
            .contains(&Limitation::RowsTruncatedAtCap { cap: 1 })
    );
}

#[test]
fn a_goal_with_no_registered_agent_has_no_rows() {
    let packet = assemble(
        &request(50),
        &[],
        &[answered(
            "alpha",
            vec![report("cmo", ActorState::Up, busy())],
        )],
    );
    assert!(packet.rows.is_empty());
    assert_eq!(packet.registered_agent_count, 0);
    assert_eq!(packet.omitted_row_count, 0);
    assert_eq!(packet.scope_gap, None);
    assert!(
        !packet
            .limitations
            .contains(&Limitation::PresenceProviderUnavailable)
    );
}

#[test]
fn an_agent_registered_twice_counts_once() {
    let packet = assemble(
        &request(50),
        &[
            reg("cmo", "beta"),
            reg("cfo", "alpha"),
            reg("cmo", "alpha"),
            reg("cmo", "beta"),
        ],
        &[
            answered(
                "alpha",
                vec![
                    report("cmo", ActorState::Up, busy()),
                    report("cfo", ActorState::Up, WorkState::default()),
                ],
            ),
            unreachable("beta"),
        ],
    );
    assert_eq!(agents(&packet), ["cfo", "cmo"]);
    assert_eq!(packet.registered_agent_count, 2);
    assert_eq!(packet.omitted_row_count, 0);
    // The same registration wins whatever the input order: the first host by name.
    assert_eq!(row(&packet, "cmo").host, "alpha");
}

#[test]
fn presence_never_changes_which_rows_are_listed_or_their_order() {
    let registered = [
        reg("d", "beta"),
        reg("a", "alpha"),
        reg("c", "gamma"),
        reg("b", "alpha"),
    ];
    let live = assemble(
        &request(3),
        &registered,
        &[
            answered(
                "alpha",
                vec![
                    report("a", ActorState::Up, busy()),
                    report("b", ActorState::Down, WorkState::default()),
                ],
            ),
            HostAnswer::Refused {
                host: "gamma".into(),
            },
            answered("beta", vec![report("d", ActorState::Up, busy())]),
        ],
    );
    let dark = assemble(&request(3), &registered, &[]);
    assert_eq!(agents(&live), ["a", "b", "c"]);
    assert_eq!(agents(&live), agents(&dark));
    assert_eq!(live.omitted_row_count, dark.omitted_row_count);
}

#[test]
fn an_unidentified_caller_gets_no_rows_and_is_told_why() {
    let packet = scope_gap_packet(ScopeGap::Unknown, NOW);
    assert_eq!(packet.schema_version, SCHEMA_VERSION);
    assert_eq!(packet.goal, None);
    assert_eq!(packet.collected_at_ms, NOW);
    assert!(packet.rows.is_empty());
    assert_eq!(packet.registered_agent_count, 0);
    assert_eq!(packet.omitted_row_count, 0);
    assert_eq!(packet.limitations, [Limitation::CallerIdentityNotSupplied]);
    assert_eq!(packet.scope_gap, Some(ScopeGap::Unknown));
}

#[test]
fn an_identified_caller_outside_the_goal_gets_no_rows_and_no_identity_limitation() {
    for gap in [
        ScopeGap::AudienceNotAuthorized,
        ScopeGap::GoalNotNamed {
            goals: vec!["launch".into(), "audit".into()],
        },
        ScopeGap::UnknownGoal {
            goal: "nope".into(),
        },
    ] {
        let packet = scope_gap_packet(gap.clone(), NOW);
        assert!(packet.rows.is_empty());
        assert_eq!(packet.registered_agent_count, 0);
        assert_eq!(packet.omitted_row_count, 0);
        assert_eq!(packet.goal, None);
        assert!(
            !packet
                .limitations
                .contains(&Limitation::CallerIdentityNotSupplied)
        );
        assert_eq!(packet.scope_gap, Some(gap));
    }
}

#[test]
fn a_packet_reads_as_the_documented_json() {
    let packet = assemble(
        &request(50),
        &[reg("cmo", "alpha"), reg("cfo", "beta")],
        &[
            answered("alpha", vec![report("cmo", ActorState::Up, busy())]),
            unreachable("beta"),
        ],
    );
    let value = serde_json::to_value(&packet).unwrap();
    assert_eq!(
        value,
        json!({
            "schema_version": "consort_peer_directory_v0",
            "goal": "launch",
            "collected_at_ms": NOW,
            "scope": "goal_registered_agents",
            "rows": [
                {
                    "agent": "cfo",
                    "host": "beta",
                    "registered": true,
                    "work": null,
                    "presence": {
                        "state": "unreachable",
                        "provider": "supervisor@beta",
                        "observed_at_ms": NOW,
                        "basis": "host_unreachable",
                    },
                    "incarnation": null,
                },
                {
                    "agent": "cmo",
                    "host": "alpha",
                    "registered": true,
                    "work": {
                        "queued": 0,
                        "running": 1,
                        "waiting": 2,
                        "blocked": 0,
                        "last_settled": {
                            "run": "run_0123456789abcdef0123456789abcdef",
                            "status": "succeeded",
                            "at_ms": NOW - 10_000,
                        },
                        "oldest_change_ms": null,
                        "blocked_since_ms": null,
                        "unread_since_ms": null,
                    },
                    "presence": {
                        "state": "working",
                        "provider": "supervisor@alpha",
                        "observed_at_ms": SEEN,
                        "basis": "supervisor_run_table",
                    },
                    "incarnation": "1-1",
                },
            ],
            "registered_agent_count": 2,
            "omitted_row_count": 0,
            "limitations": [
                {"code": "presence_is_advisory"},
                {"code": "host_unreachable", "host": "beta"},
            ],
            "scope_gap": null,
        })
    );
    assert_eq!(
        serde_json::from_value::<DirectoryPacket>(value).unwrap(),
        packet
    );

    let gap = serde_json::to_value(scope_gap_packet(ScopeGap::Unknown, NOW)).unwrap();
    assert_eq!(gap["rows"], json!([]));
    assert_eq!(gap["goal"], json!(null));
    assert_eq!(
        gap["limitations"],
        json!([{"code": "caller_identity_not_supplied"}])
    );
    assert_eq!(gap["scope_gap"], json!({"code": "unknown"}));
}

#[test]
fn every_limitation_serializes_with_its_code() {
    for (limitation, value) in [
        (
            Limitation::PresenceIsAdvisory,
            json!({"code": "presence_is_advisory"}),
        ),
        (
            Limitation::PresenceProviderUnavailable,
            json!({"code": "presence_provider_unavailable"}),
        ),
        (
            Limitation::CallerIdentityNotSupplied,
            json!({"code": "caller_identity_not_supplied"}),
        ),
        (
            Limitation::RowsTruncatedAtCap { cap: 7 },
            json!({"code": "rows_truncated_at_cap", "cap": 7}),
        ),
        (
            Limitation::HostUnreachable { host: "a".into() },
            json!({"code": "host_unreachable", "host": "a"}),
        ),
        (
            Limitation::HostNoAnswer { host: "a".into() },
            json!({"code": "host_no_answer", "host": "a"}),
        ),
        (
            Limitation::HostRefused { host: "a".into() },
            json!({"code": "host_refused", "host": "a"}),
        ),
        (
            Limitation::PresenceCoverageGap {
                agents: vec!["x".into(), "y".into()],
            },
            json!({"code": "presence_coverage_gap", "agents": ["x", "y"]}),
        ),
    ] {
        assert_eq!(serde_json::to_value(&limitation).unwrap(), value);
        assert_eq!(
            serde_json::from_value::<Limitation>(value).unwrap(),
            limitation
        );
    }
}

/// The hosts a random fleet places agents on.
const HOSTS: [&str; 4] = ["h0", "h1", "h2", "h3"];
/// The agent names a random fleet draws from (few, so that registrations repeat).
const NAMES: usize = 24;

fn name(n: usize) -> String {
    format!("a{n:02}")
}

/// 0..60 registrations over 1..4 hosts.
fn registrations() -> impl Strategy<Value = Vec<RegisteredAgent>> {
    (1..=HOSTS.len()).prop_flat_map(|hosts| {
        proptest::collection::vec((0..NAMES, 0..hosts), 0..60).prop_map(|pairs| {
            pairs
                .into_iter()
                .map(|(n, h)| reg(&name(n), HOSTS[h]))
                .collect()
        })
    })
}

fn actor() -> impl Strategy<Value = ActorState> {
    prop_oneof![
        4 => Just(ActorState::Up),
        1 => Just(ActorState::Down),
        1 => Just(ActorState::StoreNotWritable),
        1 => Just(ActorState::NotServed),
    ]
}

fn count() -> impl Strategy<Value = u32> {
    prop_oneof![8 => 0..3u32, 1 => Just(u32::MAX)]
}

fn work() -> impl Strategy<Value = WorkState> {
    (count(), count(), count(), count(), any::<bool>()).prop_map(
        |(queued, running, waiting, blocked, last)| WorkState {
            queued,
            running,
            waiting,
            blocked,
            last_settled: last.then(settled),
            ..WorkState::default()
        },
    )
}

/// What one host answered, if it was asked: reports for a random subset of the names (its own
/// agents or not), or no report at all.
fn answer(host: &'static str) -> impl Strategy<Value = Option<HostAnswer>> {
    let reports =
        proptest::collection::btree_map(0..NAMES, (actor(), work()), 0..NAMES).prop_map(|m| {
            m.into_iter()
                .map(|(n, (actor, work))| report(&name(n), actor, work))
                .collect::<Vec<_>>()
        });
    prop_oneof![
        4 => (reports, 0..NOW).prop_map(move |(reports, observed_at_ms)| {
            Some(HostAnswer::Answered { host: host.into(), observed_at_ms, reports })
        }),
        1 => Just(Some(HostAnswer::Unreachable { host: host.into() })),
        1 => Just(Some(HostAnswer::NoAnswer { host: host.into() })),
        1 => Just(Some(HostAnswer::Refused { host: host.into() })),
        1 => Just(None),
    ]
}

/// Every host's answer, in a shuffled order, with the hosts that were not asked left out.
fn answers() -> impl Strategy<Value = Vec<HostAnswer>> {
    (
        answer(HOSTS[0]),
        answer(HOSTS[1]),
        answer(HOSTS[2]),
        answer(HOSTS[3]),
    )
        .prop_map(|(a, b, c, d)| [a, b, c, d].into_iter().flatten().collect::<Vec<_>>())
        .prop_shuffle()
}

/// The limitation that must name a row's host or agent when its presence did not come from
/// its host's supervisor; `None` when it did.
fn limitation_for(row: &DirectoryRow) -> Option<Limitation> {
    let host = row.host.clone();
    match row.presence.basis {
        PresenceBasis::SupervisorRunTable
        | PresenceBasis::AgentDown
        | PresenceBasis::StoreNotWritable => None,
        PresenceBasis::HostUnreachable => Some(Limitation::HostUnreachable { host }),
        PresenceBasis::HostNoAnswer => Some(Limitation::HostNoAnswer { host }),
        PresenceBasis::HostRefused => Some(Limitation::HostRefused { host }),
        PresenceBasis::NotReported | PresenceBasis::NotServedByHost => None,
        PresenceBasis::HostNotRunning => Some(Limitation::HostNotRunning { host }),
        PresenceBasis::NotAsked => Some(Limitation::HostNotAsked { host }),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Over random fleets and random answers: rows + omitted = registered; the rows are the
    /// first `cap` distinct agents in name order whatever presence says; every row is
    /// registered, has work exactly when its host's supervisor classified it, takes presence
    /// from its own host, and has any gap in its presence named; limitations are sorted,
    /// unique, and carry the advisory note whenever there are rows.
    #[test]
    fn a_packet_holds_its_invariants_for_any_fleet_and_any_answers(
        registered in registrations(),
        answers in answers(),
        cap in 1..30usize,
    ) {
        let packet = assemble(&request(cap), &registered, &answers);
        let distinct: BTreeSet<&str> = registered.iter().map(|r| r.agent.as_str()).collect();

        // Counts.
        prop_assert_eq!(packet.registered_agent_count, distinct.len());
        prop_assert_eq!(packet.rows.len() + packet.omitted_row_count, distinct.len());
        prop_assert!(packet.rows.len() <= cap);
        prop_assert_eq!(packet.rows.len(), distinct.len().min(cap));
        prop_assert_eq!(
            packet.limitations.contains(&Limitation::RowsTruncatedAtCap { cap }),
            packet.omitted_row_count > 0
        );

        // The set and order: the first `cap` names, whatever presence says.
        let first: Vec<&str> = distinct.iter().copied().take(cap).collect();
        prop_assert_eq!(agents(&packet), first.clone());
        let all_unreachable: Vec<HostAnswer> = answers
            .iter()
            .map(|a| unreachable(a.host()))
            .collect();
        let dark = assemble(&request(cap), &registered, &all_unreachable);
        prop_assert_eq!(agents(&dark), first.clone());
        prop_assert_eq!(dark.omitted_row_count, packet.omitted_row_count);
        let unasked = assemble(&request(cap), &registered, &[]);
        prop_assert_eq!(agents(&unasked), first);

        // Each row.
        let by_host: BTreeMap<&str, &HostAnswer> =
            answers.iter().map(|a| (a.host(), a)).collect();
        for row in &packet.rows {
            prop_assert!(row.registered);
            prop_assert!(registered.iter().any(|r| r.agent == row.agent && r.host == row.host));
            prop_assert_eq!(&row.presence.provider, &format!("supervisor@{}", row.host));
            let supervised = matches!(
                row.presence.basis,
                PresenceBasis::SupervisorRunTable
                    | PresenceBasis::AgentDown
                    | PresenceBasis::StoreNotWritable
                    | PresenceBasis::HostNotRunning
            );
            prop_assert_eq!(row.work.is_some(), supervised, "{:?}", row);
            // Presence comes from the row's own host's report, as `presence_of` reads it.
            let own = match by_host.get(row.host.as_str()) {
                Some(HostAnswer::Answered { reports, observed_at_ms, .. }) => {
                    prop_assert_eq!(row.presence.observed_at_ms, *observed_at_ms);
                    reports.iter().find(|r| r.agent == row.agent)
                }
                _ => {
                    prop_assert_eq!(row.presence.observed_at_ms, NOW);
                    None
                }
            };
            match own {
                Some(report) => {
                    prop_assert_eq!(
                        (row.presence.state, row.presence.basis),
                        presence_of(report)
                    );
                    if supervised {
                        prop_assert_eq!(row.work.as_ref(), Some(&report.work));
                    }
                }
                None => prop_assert!(!supervised),
            }
            // A gap in presence is named, by host or by agent.
            if !supervised {
                let named = packet.limitations.iter().any(|l| match l {
                    Limitation::HostUnreachable { host }
                    | Limitation::HostNoAnswer { host }
                    | Limitation::HostRefused { host } => host == &row.host,
                    Limitation::PresenceCoverageGap { agents } => agents.contains(&row.agent),
                    Limitation::PresenceProviderUnavailable => true,
                    _ => false,
                });
                prop_assert!(named, "{:?} is not named in {:?}", row, packet.limitations);
                // And named precisely: its host's limitation, or the agent in the gap.
                match limitation_for(row) {
                    Some(l) => prop_assert!(packet.limitations.contains(&l), "{:?}", l),
                    None => {
                        let in_gap = packet.limitations.iter().any(|l| matches!(
                            l,
                            Limitation::PresenceCoverageGap { agents } if agents.contains(&row.agent)
                        ));
                        prop_assert!(in_gap, "{:?} is not in a coverage gap", row);
                    }
                }
            }
        }

        // Limitations name only what the rows need, and the provider when nobody provided.
        for l in &packet.limitations {
            match l {
                Limitation::HostUnreachable { host }
                | Limitation::HostNoAnswer { host }
                | Limitation::HostRefused { host } => {
                    prop_assert!(packet.rows.iter().any(|r| &r.host == host
                        && limitation_for(r).as_ref() == Some(l)));
                }
                Limitation::PresenceCoverageGap { agents } => {
                    prop_assert!(!agents.is_empty());
                    for agent in agents {
                        prop_assert!(packet.rows.iter().any(|r| &r.agent == agent
                            && matches!(
                                r.presence.basis,
                                PresenceBasis::NotReported | PresenceBasis::NotServedByHost
                            )));
                    }
                }
                Limitation::CallerIdentityNotSupplied => prop_assert!(false, "{:?}", l),
                _ => {}
            }
        }
        let none_provided = !packet.rows.is_empty()
            && packet.rows.iter().all(|r| r.work.is_none());
        prop_assert_eq!(
            packet.limitations.contains(&Limitation::PresenceProviderUnavailable),
            none_provided
        );
        if !packet.rows.is_empty() {
            prop_assert!(packet.limitations.contains(&Limitation::PresenceIsAdvisory));
        }
        prop_assert!(
            packet.limitations.windows(2).all(|w| w[0] < w[1]),
            "not sorted and unique: {:?}", packet.limitations
        );
        prop_assert_eq!(packet.scope_gap, None);
        prop_assert_eq!(packet.goal.as_deref(), Some("launch"));
    }

    /// The order of the registrations and of the answers changes nothing.
    #[test]
    fn a_packet_does_not_depend_on_input_order(
        (registered, shuffled) in registrations()
            .prop_flat_map(|r| (Just(r.clone()), Just(r).prop_shuffle())),
        answers in answers(),
        cap in 1..30usize,
    ) {
        let mut reversed = answers.clone();
        reversed.reverse();
        prop_assert_eq!(
            assemble(&request(cap), &registered, &answers),
            assemble(&request(cap), &shuffled, &reversed)
        );
    }
}

#[test]
fn a_directory_read_from_a_stopped_hosts_store_keeps_work_and_says_presence_is_unknown() {
    let offline = AgentReport {
        agent: "cmo".into(),
        actor: ActorState::Offline,
        work: busy(),
        incarnation: String::new(),
    };
    let packet = assemble(
        &request(50),
        &[reg("cmo", "alpha"), reg("cfo", "beta")],
        &[
            answered("alpha", vec![offline]),
            HostAnswer::NotAsked {
                host: "beta".into(),
            },
        ],
    );
    let cmo = packet.rows.iter().find(|r| r.agent == "cmo").unwrap();
    assert_eq!(cmo.work, Some(busy()));
    assert_eq!(cmo.presence.state, PresenceState::Unknown);
    assert_eq!(cmo.presence.basis, PresenceBasis::HostNotRunning);
    let cfo = packet.rows.iter().find(|r| r.agent == "cfo").unwrap();
    assert_eq!(cfo.work, None);
    assert_eq!(cfo.presence.basis, PresenceBasis::NotAsked);
    for expected in [
        Limitation::HostNotRunning {
            host: "alpha".into(),
        },
        Limitation::HostNotAsked {
            host: "beta".into(),
        },
        Limitation::PresenceProviderUnavailable,
    ] {
        assert!(
            packet.limitations.contains(&expected),
            "{:?}",
            packet.limitations
        );
    }
}
