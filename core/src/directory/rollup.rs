//! The attention rollup: which agents of a goal need a decision now, from typed facts only.
//!
//! An item exists because of a typed fact of the agent's own runs, never because of presence:
//! a run parked on an approval, a last run that failed with nothing after it, or open work
//! that has not moved for longer than a threshold. Items are ordered by that reason (in the
//! order of [`AttentionReason`]), then oldest first, then by agent name; presence may only be
//! attached to an item afterwards, as colour. The rollup is capped ([`ATTENTION_CAP`]) with an
//! omitted count, and it is a reading: it assigns nothing and changes nothing.

use serde::{Deserialize, Serialize};

use super::packet::{HostAnswer, Limitation, RegisteredAgent};
use super::presence::{ActorState, AgentReport, PresenceState, presence_of};
use super::scope::ScopeGap;
use crate::RunStatus;

/// The schema tag of a rollup.
pub const ATTENTION_SCHEMA: &str = "consort_attention_rollup_v0";

/// The most items a rollup shows.
pub const ATTENTION_CAP: usize = 8;

/// Why an agent needs attention, most urgent first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionReason {
    /// A run waits for an operator to approve or deny a gated tool.
    BlockedOnApproval,
    /// Its last run failed and nothing ran after it.
    FailedWithoutFollowUp,
    /// Open runs have kept their status longer than the threshold.
    NoAdvancement,
}

/// One item of the rollup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttentionItem {
    /// The agent.
    pub agent: String,
    /// Its host.
    pub host: String,
    /// Why.
    pub reason: AttentionReason,
    /// How many of its runs the reason covers.
    pub runs: u32,
    /// Since when, Unix milliseconds (its host's clock).
    pub since_ms: Option<u64>,
    /// Its presence, as colour only.
    pub presence: Option<PresenceState>,
}

/// A goal's rollup, as a caller reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttentionRollup {
    /// [`ATTENTION_SCHEMA`].
    pub schema_version: String,
    /// The goal, when the caller's scope resolved to one.
    pub goal: Option<String>,
    /// When it was put together, Unix milliseconds.
    pub collected_at_ms: u64,
    /// The items, most urgent first, at most [`ATTENTION_CAP`].
    pub items: Vec<AttentionItem>,
    /// Items left out by the cap.
    pub omitted_item_count: usize,
    /// Hosts whose agents' facts are missing (their agents cannot appear).
    pub limitations: Vec<Limitation>,
    /// Why there is nothing, when the caller's scope could not be established.
    pub scope_gap: Option<ScopeGap>,
}

/// The rollup of `goal` from its registered agents and their hosts' answers.
pub fn rollup(
    goal: &str,
    now_ms: u64,
    registered: &[RegisteredAgent],
    answers: &[HostAnswer],
    no_advancement_after_ms: u64,
) -> AttentionRollup {
    let facts: Vec<(RegisteredAgent, Option<AgentReport>)> = registered
        .iter()
        .map(|reg| {
            let report = answers.iter().find_map(|a| match a {
                HostAnswer::Answered { host, reports, .. } if host == &reg.host => {
                    reports.iter().find(|r| r.agent == reg.agent).cloned()
                }
                _ => None,
            });
            (reg.clone(), report)
        })
        .collect();
    let (items, omitted_item_count) = needs_attention(&facts, now_ms, no_advancement_after_ms);
    let mut limitations: Vec<Limitation> = answers
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
    limitations.sort();
    limitations.dedup();
    AttentionRollup {
        schema_version: ATTENTION_SCHEMA.to_owned(),
        goal: Some(goal.to_owned()),
        collected_at_ms: now_ms,
        items,
        omitted_item_count,
        limitations,
        scope_gap: None,
    }
}

/// The rollup of a caller whose scope could not be established: nothing, and why.
pub fn rollup_gap(gap: ScopeGap, now_ms: u64) -> AttentionRollup {
    AttentionRollup {
        schema_version: ATTENTION_SCHEMA.to_owned(),
        goal: None,
        collected_at_ms: now_ms,
        items: Vec::new(),
        omitted_item_count: 0,
        limitations: Vec::new(),
        scope_gap: Some(gap),
    }
}

/// The items of a goal's rollup: every typed reason of every agent with a report, ordered,
/// capped at [`ATTENTION_CAP`]; the second value is how many were left out.
pub fn needs_attention(
    facts: &[(RegisteredAgent, Option<AgentReport>)],
    now_ms: u64,
    no_advancement_after_ms: u64,
) -> (Vec<AttentionItem>, usize) {
    let mut items = Vec::new();
    for (reg, report) in facts {
        let Some(report) = report else { continue };
        if report.actor == ActorState::NotServed {
            continue;
        }
        let w = &report.work;
        let item = |reason, runs, since_ms| AttentionItem {
            agent: reg.agent.clone(),
            host: reg.host.clone(),
            reason,
            runs,
            since_ms,
            presence: None,
        };
        if w.blocked > 0 {
            items.push(item(
                AttentionReason::BlockedOnApproval,
                w.blocked,
                w.blocked_since_ms,
            ));
        }
        if w.open() == 0
            && let Some(last) = &w.last_settled
            && last.status == RunStatus::Failed
        {
            items.push(item(
                AttentionReason::FailedWithoutFollowUp,
                1,
                Some(last.at_ms),
            ));
        }
        let moving = w.open().saturating_sub(w.blocked);
        if moving > 0
            && let Some(since) = w.oldest_change_ms
            && now_ms.saturating_sub(since) >= no_advancement_after_ms
        {
            items.push(item(AttentionReason::NoAdvancement, moving, Some(since)));
        }
    }
    items.sort_by(|a, b| {
        a.reason
            .cmp(&b.reason)
            .then_with(|| match (a.since_ms, b.since_ms) {
                (Some(x), Some(y)) => x.cmp(&y),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            })
            .then_with(|| a.agent.cmp(&b.agent))
    });
    let omitted = items.len().saturating_sub(ATTENTION_CAP);
    items.truncate(ATTENTION_CAP);
    // Colour, after the order is fixed.
    for item in &mut items {
        item.presence = facts
            .iter()
            .find(|(reg, _)| reg.agent == item.agent)
            .and_then(|(_, report)| report.as_ref())
            .map(|report| presence_of(report).0);
    }
    (items, omitted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RunId;
    use crate::directory::presence::{LastSettled, WorkState};

    fn fact(agent: &str, work: WorkState) -> (RegisteredAgent, Option<AgentReport>) {
        (
            RegisteredAgent {
                agent: agent.into(),
                host: "h".into(),
            },
            Some(AgentReport {
                agent: agent.into(),
                actor: ActorState::Up,
                work,
                incarnation: "1-1".into(),
            }),
        )
    }

    fn failed(at_ms: u64) -> Option<LastSettled> {
        Some(LastSettled {
            run: RunId::parse("run_0123456789abcdef0123456789abcdef").unwrap(),
            status: RunStatus::Failed,
            at_ms,
        })
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
        facts.push((
            RegisteredAgent {
                agent: "far".into(),
                host: "down".into(),
            },
            None,
        ));
        let (items, omitted) = needs_attention(&facts, 10_000, 1_000);
        assert_eq!(items.len(), ATTENTION_CAP);
        assert_eq!(omitted, 4);
        // Oldest first: a11 has waited longest.
        assert_eq!(items[0].agent, "a11");
    }
}
