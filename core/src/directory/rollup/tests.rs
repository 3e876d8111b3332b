//! The attention rollup: which agents need a decision, from typed facts only. `needs_attention`
//! lists one item per (agent, reason) the rules give (blocked on approval, failed without a
//! follow-up, open work not advancing past the threshold), ordered by reason, then oldest
//! first, then agent, capped with an omitted count, presence attached as colour only and
//! taken from the item's own report; `rollup` builds its facts from the hosts' answers and
//! names every host and agent whose facts are missing. Checked on fixed cases and over random
//! facts and random answers.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::RunId;
use crate::directory::presence::{LastSettled, WorkState};

fn reg(agent: &str, host: &str) -> RegisteredAgent {
    RegisteredAgent {
        agent: agent.into(),
        host: host.into(),
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

fn fact(agent: &str, work: WorkState) -> (RegisteredAgent, Option<AgentReport>) {
    (reg(agent, "h"), Some(report(agent, ActorState::Up, work)))
}

fn last(status: RunStatus, at_ms: u64) -> Option<LastSettled> {
    Some(LastSettled {
        run: RunId::parse("run_0123456789abcdef0123456789abcdef").unwrap(),
        status,
        at_ms,
    })
}

fn failed(at_ms: u64) -> Option<LastSettled> {
    last(RunStatus::Failed, at_ms)
}

#[test]
fn typed_reasons_order_the_items_and_presence_only_annotates() {
    let facts = vec![
        fact(
            "slow",
            WorkState {
                running: 2,
                oldest_change_ms: Some(100),
                ..WorkState::default()
            },
        ),
        fact(
            "broke",
            WorkState {
                last_settled: failed(500),
                ..WorkState::default()
            },
        ),
        fact(
            "gated",
            WorkState {
                blocked: 1,
                running: 1,
                blocked_since_ms: Some(900),
                oldest_change_ms: Some(900),
                ..WorkState::default()
            },
        ),
        fact("calm", WorkState::default()),
    ];
    let (items, omitted) = needs_attention(&facts, 10_000, 1_000);
    let seen: Vec<(&str, AttentionReason)> =
        items.iter().map(|i| (i.agent.as_str(), i.reason)).collect();
    assert_eq!(
        seen,
        vec![
            ("gated", AttentionReason::BlockedOnApproval),
            ("broke", AttentionReason::FailedWithoutFollowUp),
            ("slow", AttentionReason::NoAdvancement),
            ("gated", AttentionReason::NoAdvancement),
        ]
    );
    assert_eq!(omitted, 0);
    assert_eq!(items[0].presence, Some(PresenceState::Blocked));
    assert_eq!(items[2].runs, 2);
}

#[test]
fn work_that_moved_recently_or_a_failure_followed_up_needs_nothing() {
    let facts = vec![
        fact(
            "busy",
            WorkState {
                running: 1,
                oldest_change_ms: Some(9_500),
                ..WorkState::default()
            },
        ),
        fact(
            "retrying",
            WorkState {
                running: 1,
                oldest_change_ms: Some(9_900),
                last_settled: failed(9_000),
                ..WorkState::default()
            },
        ),
    ];
    assert!(needs_attention(&facts, 10_000, 1_000).0.is_empty());
}

#[test]
fn the_rollup_is_capped_with_an_omitted_count_and_skips_unreported_agents() {
    let mut facts: Vec<_> = (0..12)
        .map(|i| {
            fact(
                &format!("a{i:02}"),
                WorkState {
                    blocked: 1,
                    blocked_since_ms: Some(1000 - i),
                    ..WorkState::default()
                },
            )
        })
        .collect();
    facts.push((reg("far", "down"), None));
    let (items, omitted) = needs_attention(&facts, 10_000, 1_000);
    assert_eq!(items.len(), ATTENTION_CAP);
    assert_eq!(omitted, 4);
    // Oldest first: a11 has waited longest.
    assert_eq!(items[0].agent, "a11");
}

#[test]
fn work_that_kept_its_status_exactly_the_threshold_is_not_yet_stuck() {
    // "Longer than the threshold": at the threshold it may still move.
    let at = |oldest| {
        vec![fact(
            "slow",
            WorkState {
                running: 1,
                oldest_change_ms: Some(oldest),
                ..WorkState::default()
            },
        )]
    };
    assert!(needs_attention(&at(9_000), 10_000, 1_000).0.is_empty());
    let (items, _) = needs_attention(&at(8_999), 10_000, 1_000);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].reason, AttentionReason::NoAdvancement);
    assert_eq!(items[0].since_ms, Some(8_999));
}

#[test]
fn work_dated_after_now_by_a_skewed_clock_is_not_stuck() {
    let facts = vec![fact(
        "ahead",
        WorkState {
            queued: 1,
            oldest_change_ms: Some(20_000),
            ..WorkState::default()
        },
    )];
    assert!(needs_attention(&facts, 10_000, 0).0.is_empty());
}

#[test]
fn the_runs_not_advancing_are_the_open_runs_that_are_not_blocked_at_any_count() {
    let facts = vec![fact(
        "flood",
        WorkState {
            queued: u32::MAX,
            blocked: 3,
            blocked_since_ms: Some(10),
            oldest_change_ms: Some(10),
            ..WorkState::default()
        },
    )];
    let (items, _) = needs_attention(&facts, 10_000, 1_000);
    let runs: Vec<(AttentionReason, u32)> = items.iter().map(|i| (i.reason, i.runs)).collect();
    assert_eq!(
        runs,
        [
            (AttentionReason::BlockedOnApproval, 3),
            (AttentionReason::NoAdvancement, u32::MAX),
        ]
    );
}

#[test]
fn a_blocked_agent_with_no_since_time_sorts_after_those_that_have_one() {
    let blocked = |since| WorkState {
        blocked: 1,
        blocked_since_ms: since,
        ..WorkState::default()
    };
    let facts = vec![
        fact("a", blocked(None)),
        fact("b", blocked(Some(500))),
        fact("c", blocked(Some(100))),
        fact("d", blocked(Some(100))),
    ];
    let (items, _) = needs_attention(&facts, 10_000, 1_000);
    let agents: Vec<&str> = items.iter().map(|i| i.agent.as_str()).collect();
    assert_eq!(agents, ["c", "d", "b", "a"]);
}

#[test]
fn an_agent_its_host_does_not_serve_never_appears_and_a_down_one_keeps_its_items() {
    let gated = WorkState {
        blocked: 1,
        blocked_since_ms: Some(5),
        ..WorkState::default()
    };
    let facts = vec![
        (
            reg("gone", "h"),
            Some(report("gone", ActorState::NotServed, gated.clone())),
        ),
        (
            reg("stopped", "h"),
            Some(report("stopped", ActorState::Down, gated)),
        ),
    ];
    let (items, omitted) = needs_attention(&facts, 10_000, 1_000);
    assert_eq!(omitted, 0);
    assert_eq!(items.len(), 1);
    // A down actor still has its typed facts; its presence says it cannot run now.
    assert_eq!(items[0].agent, "stopped");
    assert_eq!(items[0].presence, Some(PresenceState::Unreachable));
}

#[test]
fn each_item_takes_its_presence_from_its_own_report() {
    // The same name on two hosts (a fleet whose placement changed): each item is coloured by
    // the report it came from, not by the first fact of that name.
    let gated = WorkState {
        blocked: 1,
        blocked_since_ms: Some(5),
        ..WorkState::default()
    };
    let facts = vec![
        (reg("cfo", "alpha"), None),
        (
            reg("cfo", "beta"),
            Some(report("cfo", ActorState::Up, gated.clone())),
        ),
        (
            reg("cfo", "gamma"),
            Some(report("cfo", ActorState::Down, gated)),
        ),
    ];
    let (items, _) = needs_attention(&facts, 10_000, 1_000);
    let seen: Vec<(&str, Option<PresenceState>)> = items
        .iter()
        .map(|i| (i.host.as_str(), i.presence))
        .collect();
    assert_eq!(
        seen,
        [
            ("beta", Some(PresenceState::Blocked)),
            ("gamma", Some(PresenceState::Unreachable)),
        ]
    );
}

#[test]
fn a_rollup_names_the_hosts_and_agents_whose_facts_are_missing() {
    let gated = WorkState {
        blocked: 1,
        blocked_since_ms: Some(5),
        ..WorkState::default()
    };
    let registered = [
        reg("cmo", "alpha"),
        reg("cfo", "alpha"),
        reg("hr", "alpha"),
        reg("ops", "beta"),
        reg("legal", "gamma"),
        reg("intern", "delta"),
    ];
    let answers = [
        HostAnswer::Answered {
            host: "alpha".into(),
            observed_at_ms: 9_000,
            reports: vec![
                report("cmo", ActorState::Up, gated.clone()),
                report("hr", ActorState::NotServed, gated),
            ],
        },
        HostAnswer::Unreachable {
            host: "beta".into(),
        },
        HostAnswer::Refused {
            host: "gamma".into(),
        },
        // delta's answer was lost (its ask panicked): it was never heard from.
    ];
    let rollup = rollup("launch", 10_000, &registered, &answers, 1_000);
    assert_eq!(rollup.schema_version, ATTENTION_SCHEMA);
    assert_eq!(rollup.goal.as_deref(), Some("launch"));
    assert_eq!(rollup.collected_at_ms, 10_000);
    assert_eq!(rollup.scope_gap, None);
    let items: Vec<&str> = rollup.items.iter().map(|i| i.agent.as_str()).collect();
    assert_eq!(items, ["cmo"]);
    assert_eq!(rollup.omitted_item_count, 0);
    assert_eq!(
        rollup.limitations,
        [
            Limitation::HostUnreachable {
                host: "beta".into()
            },
            Limitation::HostNoAnswer {
                host: "delta".into()
            },
            Limitation::HostRefused {
                host: "gamma".into()
            },
            Limitation::PresenceCoverageGap {
                agents: vec!["cfo".into(), "hr".into()]
            },
        ]
    );
}

#[test]
fn a_rollup_with_every_fact_present_has_no_limitations() {
    let rollup = rollup(
        "launch",
        10_000,
        &[reg("cmo", "alpha")],
        &[HostAnswer::Answered {
            host: "alpha".into(),
            observed_at_ms: 9_000,
            reports: vec![report("cmo", ActorState::Up, WorkState::default())],
        }],
        1_000,
    );
    assert!(rollup.items.is_empty());
    assert!(rollup.limitations.is_empty());
}

#[test]
fn a_rollup_reads_as_the_documented_json() {
    let rollup = rollup(
        "launch",
        10_000,
        &[reg("cmo", "alpha"), reg("cfo", "beta")],
        &[
            HostAnswer::Answered {
                host: "alpha".into(),
                observed_at_ms: 9_000,
                reports: vec![report(
                    "cmo",
                    ActorState::Up,
                    WorkState {
                        blocked: 2,
                        blocked_since_ms: Some(4_000),
                        ..WorkState::default()
                    },
                )],
            },
            HostAnswer::NoAnswer {
                host: "beta".into(),
            },
        ],
        1_000,
    );
    let value = serde_json::to_value(&rollup).unwrap();
    assert_eq!(
        value,
        json!({
            "schema_version": "consort_attention_rollup_v0",
            "goal": "launch",
            "collected_at_ms": 10_000,
            "items": [{
                "agent": "cmo",
                "host": "alpha",
                "reason": "blocked_on_approval",
                "runs": 2,
                "since_ms": 4_000,
                "presence": "blocked",
            }],
            "omitted_item_count": 0,
            "limitations": [{"code": "host_no_answer", "host": "beta"}],
            "scope_gap": null,
        })
    );
    assert_eq!(
        serde_json::from_value::<AttentionRollup>(value).unwrap(),
        rollup
    );
    for (reason, text) in [
        (AttentionReason::BlockedOnApproval, "blocked_on_approval"),
        (
            AttentionReason::FailedWithoutFollowUp,
            "failed_without_follow_up",
        ),
        (AttentionReason::NoAdvancement, "no_advancement"),
    ] {
        assert_eq!(serde_json::to_value(reason).unwrap(), json!(text));
    }
}

#[test]
fn a_caller_without_scope_gets_an_empty_rollup_and_why() {
    let gap = rollup_gap(ScopeGap::Unknown, 10_000);
    assert_eq!(gap.schema_version, ATTENTION_SCHEMA);
    assert_eq!(gap.goal, None);
    assert_eq!(gap.collected_at_ms, 10_000);
    assert!(gap.items.is_empty());
    assert_eq!(gap.omitted_item_count, 0);
    assert!(gap.limitations.is_empty());
    assert_eq!(gap.scope_gap, Some(ScopeGap::Unknown));
}

/// Now, for the random facts (their times fall on a coarse grid around it, so that since-times
/// tie and some lie ahead of now).
const NOW: u64 = 10_000;
/// The agent names random facts draw from.
const NAMES: usize = 10;
/// The hosts random facts place agents on.
const HOSTS: [&str; 3] = ["h0", "h1", "h2"];

fn name(n: usize) -> String {
    format!("a{n}")
}

fn status() -> impl Strategy<Value = RunStatus> {
    prop_oneof![
        Just(RunStatus::Queued),
        Just(RunStatus::Running),
        Just(RunStatus::Waiting),
        Just(RunStatus::Blocked),
        Just(RunStatus::Succeeded),
        Just(RunStatus::Failed),
    ]
}

fn actor() -> impl Strategy<Value = ActorState> {
    prop_oneof![
        4 => Just(ActorState::Up),
        2 => Just(ActorState::Down),
        1 => Just(ActorState::StoreNotWritable),
        1 => Just(ActorState::NotServed),
    ]
}

/// A run count: mostly none (so that agents with nothing open, whose last run failed, come
/// up often), a few, or the top of the range.
fn count() -> impl Strategy<Value = u32> {
    prop_oneof![6 => Just(0u32), 3 => 1..3u32, 1 => Just(u32::MAX)]
}

/// How the last run settled: failed as often as not.
fn settled_status() -> impl Strategy<Value = RunStatus> {
    prop_oneof![
        3 => Just(RunStatus::Failed),
        2 => Just(RunStatus::Succeeded),
        1 => status(),
    ]
}

fn time() -> impl Strategy<Value = Option<u64>> {
    proptest::option::weighted(0.8, (0..24u64).prop_map(|t| t * 500))
}

fn work() -> impl Strategy<Value = WorkState> {
    (
        (count(), count(), count(), count()),
        proptest::option::weighted(0.7, (settled_status(), 0..24u64)),
        time(),
        time(),
    )
        .prop_map(
            |((queued, running, waiting, blocked), settled, oldest, blocked_since)| WorkState {
                queued,
                running,
                waiting,
                blocked,
                last_settled: settled.and_then(|(status, t)| last(status, t * 500)),
                oldest_change_ms: oldest,
                blocked_since_ms: blocked_since,
                // Unread deliveries have their own unit test; the independent count below
                // covers the other reasons.
                unread_since_ms: None,
            },
        )
}

fn agent_report(agent: String) -> impl Strategy<Value = Option<AgentReport>> {
    proptest::option::weighted(0.85, (actor(), work()))
        .prop_map(move |r| r.map(|(actor, work)| report(&agent, actor, work)))
}

/// 0..24 facts, unique by (agent, host) but an agent name may sit on more than one host.
fn facts() -> impl Strategy<Value = Vec<(RegisteredAgent, Option<AgentReport>)>> {
    proptest::collection::btree_set((0..NAMES, 0..HOSTS.len()), 0..24)
        .prop_flat_map(|pairs| {
            pairs
                .into_iter()
                .map(|(n, h)| (Just(reg(&name(n), HOSTS[h])), agent_report(name(n))))
                .collect::<Vec<_>>()
        })
        .prop_shuffle()
}

fn threshold() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1_000),
        Just(2_500),
        (0..12u64).prop_map(|t| t * 500)
    ]
}

/// One (agent, host, reason, runs, since) the module's rules give, written out from its
/// documentation.
type Due = (String, String, AttentionReason, u32, Option<u64>);

fn due(facts: &[(RegisteredAgent, Option<AgentReport>)], now_ms: u64, after_ms: u64) -> Vec<Due> {
    let mut due = Vec::new();
    for (reg, report) in facts {
        // No report, or a host that does not serve the agent: no facts to read.
        let Some(report) = report else { continue };
        if report.actor == ActorState::NotServed {
            continue;
        }
        let w = &report.work;
        let item = |reason, runs, since| (reg.agent.clone(), reg.host.clone(), reason, runs, since);
        // A run parked on an approval.
        if w.blocked > 0 {
            due.push(item(
                AttentionReason::BlockedOnApproval,
                w.blocked,
                w.blocked_since_ms,
            ));
        }
        // The last run failed and nothing is open after it.
        let nothing_open = w.queued == 0 && w.running == 0 && w.waiting == 0 && w.blocked == 0;
        if nothing_open
            && let Some(last) = &w.last_settled
            && last.status == RunStatus::Failed
        {
            due.push(item(
                AttentionReason::FailedWithoutFollowUp,
                1,
                Some(last.at_ms),
            ));
        }
        // Open runs that are not parked kept their status longer than the threshold.
        let moving = w.queued.saturating_add(w.running).saturating_add(w.waiting);
        if moving > 0
            && let Some(since) = w.oldest_change_ms
            && since < now_ms
            && now_ms - since > after_ms
        {
            due.push(item(AttentionReason::NoAdvancement, moving, Some(since)));
        }
    }
    due.sort_by_key(|(agent, host, reason, _, since)| {
        (
            *reason,
            since.is_none(),
            *since,
            agent.clone(),
            host.clone(),
        )
    });
    due
}

fn seen(items: &[AttentionItem]) -> Vec<Due> {
    items
        .iter()
        .map(|i| {
            (
                i.agent.clone(),
                i.host.clone(),
                i.reason,
                i.runs,
                i.since_ms,
            )
        })
        .collect()
}

/// Every report's actor flipped between up and down; a host that does not serve its agent
/// stays so.
fn flipped(
    facts: &[(RegisteredAgent, Option<AgentReport>)],
) -> Vec<(RegisteredAgent, Option<AgentReport>)> {
    facts
        .iter()
        .cloned()
        .map(|(reg, report)| {
            let report = report.map(|mut r| {
                r.actor = match r.actor {
                    ActorState::Up => ActorState::Down,
                    ActorState::Down | ActorState::StoreNotWritable => ActorState::Up,
                    other @ (ActorState::NotServed | ActorState::Offline) => other,
                };
                r
            });
            (reg, report)
        })
        .collect()
}

/// What one host answered, if it was asked: reports for a random subset of the names (its own
/// agents or not), or none at all.
fn answer(host: &'static str) -> impl Strategy<Value = Option<HostAnswer>> {
    let reports =
        proptest::collection::btree_map(0..NAMES, (actor(), work()), 0..NAMES).prop_map(|m| {
            m.into_iter()
                .map(|(n, (actor, work))| report(&name(n), actor, work))
                .collect::<Vec<_>>()
        });
    prop_oneof![
        4 => reports.prop_map(move |reports| Some(HostAnswer::Answered {
            host: host.into(),
            observed_at_ms: NOW - 100,
            reports,
        })),
        1 => Just(Some(HostAnswer::Unreachable { host: host.into() })),
        1 => Just(Some(HostAnswer::NoAnswer { host: host.into() })),
        1 => Just(Some(HostAnswer::Refused { host: host.into() })),
        1 => Just(None),
    ]
}

/// Every host's answer (one per host, plus one from a host no agent is placed on), shuffled,
/// the hosts whose answer was lost left out.
fn answers() -> impl Strategy<Value = Vec<HostAnswer>> {
    (
        answer(HOSTS[0]),
        answer(HOSTS[1]),
        answer(HOSTS[2]),
        answer("elsewhere"),
    )
        .prop_map(|(a, b, c, d)| [a, b, c, d].into_iter().flatten().collect::<Vec<_>>())
        .prop_shuffle()
}

/// A goal's registered agents, one host each, as the directory plans them.
fn registrations() -> impl Strategy<Value = Vec<RegisteredAgent>> {
    proptest::collection::btree_map(0..NAMES, 0..HOSTS.len(), 0..NAMES).prop_map(|m| {
        m.into_iter()
            .map(|(n, h)| reg(&name(n), HOSTS[h]))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Over random facts: the items are exactly the first [`ATTENTION_CAP`] of the (agent,
    /// reason) pairs the rules give, in reason, since (oldest first, none last) and agent
    /// order, and `items + omitted` is how many there are; each is coloured by its own report.
    #[test]
    fn items_are_the_due_pairs_in_order_capped_with_the_rest_counted(
        facts in facts(),
        threshold in threshold(),
    ) {
        let (items, omitted) = needs_attention(&facts, NOW, threshold);
        let due = due(&facts, NOW, threshold);

        prop_assert!(items.len() <= ATTENTION_CAP);
        prop_assert_eq!(items.len() + omitted, due.len());
        prop_assert_eq!(seen(&items), due[..items.len()].to_vec());

        // The order, read directly off the items.
        for pair in items.windows(2) {
            let key = |i: &AttentionItem| (i.reason, i.since_ms.is_none(), i.since_ms, i.agent.clone());
            prop_assert!(key(&pair[0]) <= key(&pair[1]), "{:?} before {:?}", pair[0], pair[1]);
        }

        // Colour from the item's own report, as `presence_of` reads it.
        for item in &items {
            let own = facts
                .iter()
                .find(|(r, _)| r.agent == item.agent && r.host == item.host)
                .and_then(|(_, report)| report.as_ref())
                .unwrap();
            prop_assert_eq!(item.presence, Some(presence_of(own).0), "{:?}", item);
        }
    }

    /// Presence is colour: flipping every actor between up and down (which changes presence
    /// and nothing typed) adds, drops and reorders nothing.
    #[test]
    fn presence_never_adds_drops_or_reorders_an_item(
        facts in facts(),
        threshold in threshold(),
    ) {
        let (items, omitted) = needs_attention(&facts, NOW, threshold);
        let (other, other_omitted) = needs_attention(&flipped(&facts), NOW, threshold);
        prop_assert_eq!(seen(&items), seen(&other));
        prop_assert_eq!(omitted, other_omitted);
    }

    /// An agent without a report, or whose host does not serve it, never appears (on that
    /// host); an item only ever names a fact given.
    #[test]
    fn an_agent_without_facts_never_appears(
        facts in facts(),
        threshold in threshold(),
    ) {
        let (items, _) = needs_attention(&facts, NOW, threshold);
        for item in &items {
            let fact = facts.iter().find(|(r, _)| r.agent == item.agent && r.host == item.host);
            prop_assert!(fact.is_some(), "{:?}", item);
            let report = fact.unwrap().1.as_ref();
            prop_assert!(
                report.is_some_and(|r| r.actor != ActorState::NotServed),
                "{:?} from {:?}",
                item,
                report
            );
        }
    }

    /// The order of the facts changes nothing.
    #[test]
    fn items_do_not_depend_on_the_order_of_the_facts(
        (facts, shuffled) in facts().prop_flat_map(|f| (Just(f.clone()), Just(f).prop_shuffle())),
        threshold in threshold(),
    ) {
        prop_assert_eq!(
            needs_attention(&facts, NOW, threshold),
            needs_attention(&shuffled, NOW, threshold)
        );
    }

    /// `rollup` names every host that did not answer (or whose answer is missing) once, by
    /// what happened, and every agent its answering host did not report, sorted and nothing
    /// else; its items are `needs_attention` over the facts the answers hold.
    #[test]
    fn a_rollup_names_every_missing_fact_and_lists_the_items_of_what_it_has(
        registered in registrations(),
        answers in answers(),
        threshold in threshold(),
    ) {
        let rollup = rollup("launch", NOW, &registered, &answers, threshold);
        prop_assert_eq!(rollup.schema_version.as_str(), ATTENTION_SCHEMA);
        prop_assert_eq!(rollup.goal.as_deref(), Some("launch"));
        prop_assert_eq!(rollup.collected_at_ms, NOW);
        prop_assert_eq!(&rollup.scope_gap, &None);

        // The facts, read independently from the answers.
        let by_host: BTreeMap<&str, &HostAnswer> =
            answers.iter().map(|a| (a.host(), a)).collect();
        let facts: Vec<(RegisteredAgent, Option<AgentReport>)> = registered
            .iter()
            .map(|r| {
                let report = match by_host.get(r.host.as_str()) {
                    Some(HostAnswer::Answered { reports, .. }) => {
                        reports.iter().find(|x| x.agent == r.agent).cloned()
                    }
                    _ => None,
                };
                (r.clone(), report)
            })
            .collect();
        let (items, omitted) = needs_attention(&facts, NOW, threshold);
        prop_assert_eq!(&rollup.items, &items);
        prop_assert_eq!(rollup.omitted_item_count, omitted);

        // The limitations.
        let mut expected: Vec<Limitation> = answers
            .iter()
            .filter_map(|a| match a {
                HostAnswer::Answered { .. } => None,
                HostAnswer::Unreachable { host } => {
                    Some(Limitation::HostUnreachable { host: host.clone() })
                }
                HostAnswer::NoAnswer { host } => Some(Limitation::HostNoAnswer { host: host.clone() }),
                HostAnswer::Refused { host } => Some(Limitation::HostRefused { host: host.clone() }),
                HostAnswer::NotAsked { host } => Some(Limitation::HostNotAsked { host: host.clone() }),
            })
            .collect();
        let lost: BTreeSet<&str> = registered
            .iter()
            .map(|r| r.host.as_str())
            .filter(|h| !by_host.contains_key(h))
            .collect();
        expected.extend(lost.iter().map(|h| Limitation::HostNoAnswer { host: (*h).to_owned() }));
        let unreported: Vec<String> = facts
            .iter()
            .filter(|(r, report)| {
                matches!(by_host.get(r.host.as_str()), Some(HostAnswer::Answered { .. }))
                    && report.as_ref().is_none_or(|x| x.actor == ActorState::NotServed)
            })
            .map(|(r, _)| r.agent.clone())
            .collect();
        if !unreported.is_empty() {
            expected.push(Limitation::PresenceCoverageGap { agents: unreported });
        }
        expected.sort();
        prop_assert_eq!(&rollup.limitations, &expected);
        prop_assert!(
            rollup.limitations.windows(2).all(|w| w[0] < w[1]),
            "not sorted and unique: {:?}", rollup.limitations
        );
        // Every host that did not answer is named exactly once.
        for host in answers
            .iter()
            .filter(|a| !matches!(a, HostAnswer::Answered { .. }))
            .map(HostAnswer::host)
            .chain(lost.iter().copied())
        {
            let named = rollup
                .limitations
                .iter()
                .filter(|l| matches!(
                    l,
                    Limitation::HostUnreachable { host: h }
                    | Limitation::HostNoAnswer { host: h }
                    | Limitation::HostRefused { host: h } if h == host
                ))
                .count();
            prop_assert_eq!(named, 1, "{} in {:?}", host, rollup.limitations);
        }
    }
}

#[test]
fn a_message_no_turn_has_read_past_the_threshold_is_a_stalled_delivery_after_a_gate() {
    let facts = vec![
        fact(
            "unread",
            WorkState {
                running: 1,
                unread_since_ms: Some(100),
                oldest_change_ms: Some(9_900),
                ..WorkState::default()
            },
        ),
        fact(
            "gated",
            WorkState {
                blocked: 1,
                blocked_since_ms: Some(9_000),
                ..WorkState::default()
            },
        ),
        fact(
            "fresh",
            WorkState {
                running: 1,
                unread_since_ms: Some(9_500),
                oldest_change_ms: Some(9_500),
                ..WorkState::default()
            },
        ),
    ];
    let (items, _) = needs_attention(&facts, 10_000, 1_000);
    let seen: Vec<(&str, AttentionReason)> =
        items.iter().map(|i| (i.agent.as_str(), i.reason)).collect();
    assert_eq!(
        seen,
        vec![
            ("gated", AttentionReason::BlockedOnApproval),
            ("unread", AttentionReason::StalledDelivery),
        ]
    );
    assert_eq!(items[1].since_ms, Some(100));
}
