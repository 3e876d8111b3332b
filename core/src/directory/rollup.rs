//! The attention rollup: which agents of a goal need a decision now, from typed facts only.
//!
//! An item exists because of a typed fact of the agent's own runs, never because of presence:
//! a run parked on an approval, a last run that failed with nothing after it, or open work
//! that has not moved for longer than a threshold. Items are ordered by that reason (in the
//! order of [`AttentionReason`]), then oldest first, then by agent name (and host); presence
//! may only be attached to an item afterwards, as colour, from the item's own report. The
//! rollup is capped ([`ATTENTION_CAP`]) with an omitted count, and it is a reading: it assigns
//! nothing and changes nothing. An agent whose facts are missing cannot appear, so the rollup
//! names why: its host did not answer (or its answer is missing), or its host answered without
//! reporting it.

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
    /// A message delivered into a run has waited longer than the threshold for a model turn
    /// to read it.
    StalledDelivery,
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
    /// Hosts and agents whose facts are missing (those agents cannot appear): a host that did
    /// not answer (or whose answer is missing), agents their answering host did not report.
    pub limitations: Vec<Limitation>,
    /// Why there is nothing, when the caller's scope could not be established.
    pub scope_gap: Option<ScopeGap>,
}

/// The rollup of `goal` from its registered agents and their hosts' answers. A registered
/// agent whose host is missing from `answers` was not heard from: its host is named as
/// [`Limitation::HostNoAnswer`], as in a packet; agents an answering host did not report (or
/// does not serve) are named in [`Limitation::PresenceCoverageGap`].
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
    // A host whose answer is missing (its ask was lost) is one that did not answer.
    limitations.extend(
        registered
            .iter()
            .filter(|reg| !answers.iter().any(|a| a.host() == reg.host))
            .map(|reg| Limitation::HostNoAnswer {
                host: reg.host.clone(),
            }),
    );
    // Agents their host answered for without a report of an agent it serves.
    let mut unreported: Vec<String> = facts
        .iter()
        .filter(|(reg, report)| {
            answers
                .iter()
                .any(|a| matches!(a, HostAnswer::Answered { host, .. } if host == &reg.host))
                && report
                    .as_ref()
                    .is_none_or(|r| r.actor == ActorState::NotServed)
        })
        .map(|(reg, _)| reg.agent.clone())
        .collect();
    unreported.sort();
    unreported.dedup();
    if !unreported.is_empty() {
        limitations.push(Limitation::PresenceCoverageGap { agents: unreported });
    }
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
    // Each item with the index of the fact it came from, for its colour.
    let mut items: Vec<(AttentionItem, usize)> = Vec::new();
    for (at, (reg, report)) in facts.iter().enumerate() {
        let Some(report) = report else { continue };
        if report.actor == ActorState::NotServed {
            continue;
        }
        let w = &report.work;
        let item = |reason, runs, since_ms| {
            let item = AttentionItem {
                agent: reg.agent.clone(),
                host: reg.host.clone(),
                reason,
                runs,
                since_ms,
                presence: None,
            };
            (item, at)
        };
        if w.blocked > 0 {
            items.push(item(
                AttentionReason::BlockedOnApproval,
                w.blocked,
                w.blocked_since_ms,
            ));
        }
        // The same threshold as work that stopped advancing: a message no turn read.
        if let Some(since) = w.unread_since_ms
            && now_ms.saturating_sub(since) > no_advancement_after_ms
        {
            items.push(item(AttentionReason::StalledDelivery, 1, Some(since)));
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
        // The open runs not parked on an approval (counted without `open()`, whose saturated
        // total would lose the blocked ones).
        let moving = w.queued.saturating_add(w.running).saturating_add(w.waiting);
        if moving > 0
            && let Some(since) = w.oldest_change_ms
            && now_ms.saturating_sub(since) > no_advancement_after_ms
        {
            items.push(item(AttentionReason::NoAdvancement, moving, Some(since)));
        }
    }
    items.sort_by(|(a, _), (b, _)| {
        a.reason
            .cmp(&b.reason)
            .then_with(|| match (a.since_ms, b.since_ms) {
                (Some(x), Some(y)) => x.cmp(&y),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            })
            .then_with(|| a.agent.cmp(&b.agent))
            .then_with(|| a.host.cmp(&b.host))
    });
    let omitted = items.len().saturating_sub(ATTENTION_CAP);
    items.truncate(ATTENTION_CAP);
    // Colour, after the order is fixed, from the report the item came from.
    let items = items
        .into_iter()
        .map(|(mut item, at)| {
            item.presence = facts[at].1.as_ref().map(|report| presence_of(report).0);
            item
        })
        .collect();
    (items, omitted)
}

#[cfg(test)]
mod tests;
