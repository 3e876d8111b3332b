//! One directory packet, put together from the registered agents and every host's answer.
//!
//! [`assemble`] is the only place a packet is made. Its invariants, which the tests check over
//! random inputs: one row per registered agent up to the cap, in agent-name order (presence
//! never changes the order or the set); `rows.len() + omitted_row_count ==
//! registered_agent_count`; every row that lacks presence from its host's supervisor names why
//! in its basis and in a [`Limitation`]; a packet with rows always carries
//! [`Limitation::PresenceIsAdvisory`].

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::presence::{
    ActorState, AgentReport, Presence, PresenceBasis, PresenceState, WorkState, presence_of,
    provider_of,
};
use super::scope::ScopeGap;

/// The schema tag of a packet.
pub const SCHEMA_VERSION: &str = "consort_peer_directory_v0";

/// A registered agent of the goal and the host the fleet places it on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisteredAgent {
    /// The agent.
    pub agent: String,
    /// Its host.
    pub host: String,
}

/// What one host answered when asked for its agents' presence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostAnswer {
    /// It answered, with a report per agent it was asked about (signed, and verified by the
    /// asking host when the host is another one).
    Answered {
        /// The host.
        host: String,
        /// When it observed them, Unix milliseconds, its clock.
        observed_at_ms: u64,
        /// Its reports.
        reports: Vec<AgentReport>,
    },
    /// It could not be reached.
    Unreachable {
        /// The host.
        host: String,
    },
    /// It did not answer within the deadline.
    NoAnswer {
        /// The host.
        host: String,
    },
    /// It refused to report (or its answer did not verify).
    Refused {
        /// The host.
        host: String,
    },
    /// It was not asked (a directory read from another host's data folder).
    NotAsked {
        /// The host.
        host: String,
    },
}

impl HostAnswer {
    /// The host that answered (or did not).
    pub fn host(&self) -> &str {
        match self {
            Self::Answered { host, .. }
            | Self::Unreachable { host }
            | Self::NoAnswer { host }
            | Self::Refused { host }
            | Self::NotAsked { host } => host,
        }
    }
}

/// A limit of a packet that a reader must know of, so that a partial answer is never read as a
/// complete one.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Limitation {
    /// Presence is colour: it is not evidence of progress or of an outcome.
    PresenceIsAdvisory,
    /// No host's supervisor provided presence for any row.
    PresenceProviderUnavailable,
    /// The caller could not be identified.
    CallerIdentityNotSupplied,
    /// More agents are registered than the row cap; `omitted_row_count` says how many.
    RowsTruncatedAtCap {
        /// The cap.
        cap: usize,
    },
    /// A host could not be reached: its agents' presence is `unreachable`.
    HostUnreachable {
        /// The host.
        host: String,
    },
    /// A host did not answer within the deadline: its agents' presence is `unknown`.
    HostNoAnswer {
        /// The host.
        host: String,
    },
    /// A host refused to report presence, or its report did not verify.
    HostRefused {
        /// The host.
        host: String,
    },
    /// This host is not running: its rows' work was read from its store and their presence is
    /// unknown.
    HostNotRunning {
        /// The host.
        host: String,
    },
    /// This host was not asked: its rows' presence is unknown.
    HostNotAsked {
        /// The host.
        host: String,
    },
    /// These agents' hosts answered without classifying them.
    PresenceCoverageGap {
        /// The agents.
        agents: Vec<String>,
    },
}

/// One row: a registered agent, its typed work state when its host reported it, and its
/// presence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectoryRow {
    /// The agent.
    pub agent: String,
    /// The host the fleet places it on.
    pub host: String,
    /// Always true: a row exists because the agent is registered for the goal.
    pub registered: bool,
    /// Its open runs and last settled run, when its host reported them.
    pub work: Option<WorkState>,
    /// Its presence (advisory).
    pub presence: Presence,
    /// Who holds its seat, as its host reported (see [`AgentReport::incarnation`]).
    pub incarnation: Option<String>,
}

/// The directory's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectoryPacket {
    /// [`SCHEMA_VERSION`].
    pub schema_version: String,
    /// The goal listed, when the caller's scope resolved to one.
    pub goal: Option<String>,
    /// When the packet was put together, Unix milliseconds (the answering host's clock).
    pub collected_at_ms: u64,
    /// `goal_registered_agents`.
    pub scope: String,
    /// The rows, in agent-name order, at most the cap.
    pub rows: Vec<DirectoryRow>,
    /// Agents registered for the goal.
    pub registered_agent_count: usize,
    /// Registered agents left out by the cap.
    pub omitted_row_count: usize,
    /// What the reader must know about this packet's limits.
    pub limitations: Vec<Limitation>,
    /// Why there are no rows, when the caller's scope could not be established.
    pub scope_gap: Option<ScopeGap>,
}

/// What a packet is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketRequest {
    /// The goal.
    pub goal: String,
    /// Now, Unix milliseconds.
    pub now_ms: u64,
    /// The most rows.
    pub row_cap: usize,
}

/// The packet for `request`, from the goal's registered agents and the answers of their hosts.
/// A registered agent whose host is missing from `answers` was not asked: its presence is
/// `unknown` on basis `host_no_answer`, and the packet names its host in
/// [`Limitation::HostNoAnswer`] (and says the provider was unavailable when no row has
/// presence from a supervisor).
pub fn assemble(
    request: &PacketRequest,
    registered: &[RegisteredAgent],
    answers: &[HostAnswer],
) -> DirectoryPacket {
    let by_host: BTreeMap<&str, &HostAnswer> = answers.iter().map(|a| (a.host(), a)).collect();
    let mut agents: Vec<&RegisteredAgent> = registered.iter().collect();
    agents.sort_by(|a, b| a.agent.cmp(&b.agent).then_with(|| a.host.cmp(&b.host)));
    agents.dedup_by(|a, b| a.agent == b.agent);
    let registered_agent_count = agents.len();
    let cap = request.row_cap.max(1);
    let mut limitations = vec![Limitation::PresenceIsAdvisory];
    let mut gaps: Vec<String> = Vec::new();
    let mut provided = false;
    let mut rows = Vec::new();
    for reg in agents.iter().take(cap) {
        let (work, presence) = row_facts(reg, by_host.get(reg.host.as_str()), request.now_ms);
        match presence.basis {
            PresenceBasis::SupervisorRunTable
            | PresenceBasis::AgentDown
            | PresenceBasis::StoreNotWritable => provided = true,
            PresenceBasis::NotServedByHost | PresenceBasis::NotReported => {
                gaps.push(reg.agent.clone());
            }
            PresenceBasis::HostUnreachable
            | PresenceBasis::HostNoAnswer
            | PresenceBasis::HostRefused
            | PresenceBasis::HostNotRunning
            | PresenceBasis::NotAsked => {}
        }
        let incarnation = match by_host.get(reg.host.as_str()) {
            Some(HostAnswer::Answered { reports, .. }) => reports
                .iter()
                .find(|r| r.agent == reg.agent && r.actor != ActorState::NotServed)
                .map(|r| r.incarnation.clone()),
            _ => None,
        };
        rows.push(DirectoryRow {
            agent: reg.agent.clone(),
            host: reg.host.clone(),
            registered: true,
            work,
            presence,
            incarnation,
        });
    }
    let row_hosts: BTreeSet<&str> = rows.iter().map(|r| r.host.as_str()).collect();
    for host in row_hosts {
        let host_owned = || host.to_owned();
        let limitation = match by_host.get(host) {
            Some(HostAnswer::Answered { reports, .. }) => {
                let offline = reports.iter().any(|r| {
                    r.actor == ActorState::Offline
                        && rows
                            .iter()
                            .any(|row| row.host == host && row.agent == r.agent)
                });
                if !offline {
                    continue;
                }
                Limitation::HostNotRunning { host: host_owned() }
            }
            Some(HostAnswer::NotAsked { .. }) => Limitation::HostNotAsked { host: host_owned() },
            Some(HostAnswer::Unreachable { .. }) => {
                Limitation::HostUnreachable { host: host_owned() }
            }
            // A host that was not asked did not answer either: its rows say `host_no_answer`.
            Some(HostAnswer::NoAnswer { .. }) | None => {
                Limitation::HostNoAnswer { host: host_owned() }
            }
            Some(HostAnswer::Refused { .. }) => Limitation::HostRefused { host: host_owned() },
        };
        limitations.push(limitation);
    }
    if !rows.is_empty() && !provided {
        limitations.push(Limitation::PresenceProviderUnavailable);
    }
    if !gaps.is_empty() {
        limitations.push(Limitation::PresenceCoverageGap { agents: gaps });
    }
    let omitted_row_count = registered_agent_count - rows.len();
    if omitted_row_count > 0 {
        limitations.push(Limitation::RowsTruncatedAtCap { cap });
    }
    limitations.sort();
    limitations.dedup();
    DirectoryPacket {
        schema_version: SCHEMA_VERSION.to_owned(),
        goal: Some(request.goal.clone()),
        collected_at_ms: request.now_ms,
        scope: "goal_registered_agents".to_owned(),
        rows,
        registered_agent_count,
        omitted_row_count,
        limitations,
        scope_gap: None,
    }
}

/// The packet of a caller whose scope could not be established: zero rows, the gap, and
/// [`Limitation::CallerIdentityNotSupplied`] when nobody was identified.
pub fn scope_gap_packet(gap: ScopeGap, now_ms: u64) -> DirectoryPacket {
    let mut limitations = Vec::new();
    if gap == ScopeGap::Unknown {
        limitations.push(Limitation::CallerIdentityNotSupplied);
    }
    DirectoryPacket {
        schema_version: SCHEMA_VERSION.to_owned(),
        goal: None,
        collected_at_ms: now_ms,
        scope: "goal_registered_agents".to_owned(),
        rows: Vec::new(),
        registered_agent_count: 0,
        omitted_row_count: 0,
        limitations,
        scope_gap: Some(gap),
    }
}

/// A row's work state and presence, from its host's answer.
fn row_facts(
    reg: &RegisteredAgent,
    answer: Option<&&HostAnswer>,
    now_ms: u64,
) -> (Option<WorkState>, Presence) {
    let provider = provider_of(&reg.host);
    let unobserved = |state, basis| Presence {
        state,
        provider: provider.clone(),
        observed_at_ms: now_ms,
        basis,
    };
    match answer {
        None => (
            None,
            unobserved(PresenceState::Unknown, PresenceBasis::HostNoAnswer),
        ),
        Some(HostAnswer::Unreachable { .. }) => (
            None,
            unobserved(PresenceState::Unreachable, PresenceBasis::HostUnreachable),
        ),
        Some(HostAnswer::NoAnswer { .. }) => (
            None,
            unobserved(PresenceState::Unknown, PresenceBasis::HostNoAnswer),
        ),
        Some(HostAnswer::Refused { .. }) => (
            None,
            unobserved(PresenceState::Unknown, PresenceBasis::HostRefused),
        ),
        Some(HostAnswer::NotAsked { .. }) => (
            None,
            unobserved(PresenceState::Unknown, PresenceBasis::NotAsked),
        ),
        Some(HostAnswer::Answered {
            observed_at_ms,
            reports,
            ..
        }) => match reports.iter().find(|r| r.agent == reg.agent) {
            None => (
                None,
                Presence {
                    state: PresenceState::Unknown,
                    provider,
                    observed_at_ms: *observed_at_ms,
                    basis: PresenceBasis::NotReported,
                },
            ),
            Some(report) => {
                let (state, basis) = presence_of(report);
                // A host that does not serve the agent does not own its work: whatever it
                // counted is no fact about the agent.
                let work = (basis != PresenceBasis::NotServedByHost).then(|| report.work.clone());
                (
                    work,
                    Presence {
                        state,
                        provider,
                        observed_at_ms: *observed_at_ms,
                        basis,
                    },
                )
            }
        },
    }
}

#[cfg(test)]
mod tests;
