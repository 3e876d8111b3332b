//! The host's side of the peer directory: the goals it knows, the reports its supervisor gives
//! about its own agents, and the gathering of one packet across hosts.
//!
//! A directory request arrives at the supervisor with an [`Audience`] the host established
//! (the agent a run belongs to, an operator). [`DirectorySpec::plan`] asks consort-core which
//! goal that audience may see ([`resolve_goal`]) and which rows the packet will show (the
//! first `row_cap` registered agents in name order: presence never changes the set, so only
//! those agents' hosts are asked). The supervisor reports its own agents at once from the
//! [`PresenceBoard`]; [`gather`] asks every other host in parallel, each inside the presence
//! deadline, and [`assemble`] makes the packet. A host that does not answer in time costs the
//! deadline, never a hang. Nothing here writes a store or decides presence: the mapping is
//! `consort_core::directory::presence_of`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use consort_core::directory::{
    ActorState, AgentReport, Audience, DirectoryPacket, Goal, HostAnswer, PacketRequest,
    RegisteredAgent, assemble, resolve_goal, scope_gap_packet,
};

use crate::presence::PresenceBoard;
use crate::routing::RemoteCalls;

/// One goal of the fleet: its name and member agents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoalMembers {
    /// The goal.
    pub name: String,
    /// Its member agents (on any host).
    pub agents: Vec<String>,
}

/// What a host knows of the fleet's goals and where each agent lives.
#[derive(Clone, Debug)]
pub struct DirectorySpec {
    /// The fleet's goals.
    pub goals: Vec<GoalMembers>,
    /// Agent -> the host serving it, for agents of other hosts (this host's agents are
    /// placed on it).
    pub placement: BTreeMap<String, String>,
    /// The most rows a packet shows.
    pub row_cap: usize,
    /// How long another host has to answer a presence query.
    pub presence_deadline: Duration,
}

impl Default for DirectorySpec {
    fn default() -> Self {
        Self {
            goals: Vec::new(),
            placement: BTreeMap::new(),
            row_cap: 24,
            presence_deadline: Duration::from_secs(2),
        }
    }
}

/// A directory request that passed its scope: what to show and whom to ask.
#[derive(Debug)]
pub(crate) struct Plan {
    request: PacketRequest,
    registered: Vec<RegisteredAgent>,
    /// The shown agents by the host serving them.
    pub(crate) by_host: BTreeMap<String, Vec<String>>,
}

impl DirectorySpec {
    /// The goal names `agent` is a member of.
    pub fn goals_of(&self, agent: &str) -> Vec<&str> {
        self.goals
            .iter()
            .filter(|g| g.agents.iter().any(|a| a == agent))
            .map(|g| g.name.as_str())
            .collect()
    }

    /// What to show `audience` asking for `goal`, or the packet of its scope gap.
    pub(crate) fn plan(
        &self,
        host: &str,
        audience: &Audience,
        goal: Option<&str>,
        now_ms: u64,
    ) -> Result<Plan, Box<DirectoryPacket>> {
        let goals: Vec<Goal<'_>> = self
            .goals
            .iter()
            .map(|g| Goal {
                name: &g.name,
                agents: &g.agents,
            })
            .collect();
        let goal = resolve_goal(&goals, audience, goal)
            .map_err(|gap| Box::new(scope_gap_packet(gap, now_ms)))?;
        let names: BTreeSet<&String> = goal.agents.iter().collect();
        let registered: Vec<RegisteredAgent> = names
            .iter()
            .map(|agent| RegisteredAgent {
                agent: (*agent).clone(),
                host: self
                    .placement
                    .get(*agent)
                    .cloned()
                    .unwrap_or_else(|| host.to_owned()),
            })
            .collect();
        let row_cap = self.row_cap.max(1);
        let mut by_host: BTreeMap<String, Vec<String>> = BTreeMap::new();
        // The same first rows `assemble` shows: registered agents in name order, capped.
        for reg in registered.iter().take(row_cap) {
            by_host
                .entry(reg.host.clone())
                .or_default()
                .push(reg.agent.clone());
        }
        Ok(Plan {
            request: PacketRequest {
                goal: goal.name.to_owned(),
                now_ms,
                row_cap,
            },
            registered,
            by_host,
        })
    }
}

/// This host's reports about `agents`: each agent's actor (up, down, or not served here) and
/// its work from the board.
pub(crate) fn local_reports(
    agents: &[String],
    actor_up: impl Fn(&str) -> Option<bool>,
    board: &PresenceBoard,
) -> Vec<AgentReport> {
    agents
        .iter()
        .map(|agent| {
            let actor = match actor_up(agent) {
                Some(true) => ActorState::Up,
                Some(false) => ActorState::Down,
                None => ActorState::NotServed,
            };
            let work = if actor == ActorState::NotServed {
                Default::default()
            } else {
                board.work(agent)
            };
            AgentReport {
                agent: agent.clone(),
                actor,
                work,
            }
        })
        .collect()
}

/// Asks every other host of `plan` for its agents' presence, each inside `deadline`, adds
/// `local` (this host's answer) and assembles the packet.
pub(crate) async fn gather(
    plan: Plan,
    host: &str,
    local: Option<HostAnswer>,
    remote: Option<Arc<dyn RemoteCalls>>,
    deadline: Duration,
) -> DirectoryPacket {
    let mut answers: Vec<HostAnswer> = local.into_iter().collect();
    let mut asks = tokio::task::JoinSet::new();
    for (peer, agents) in &plan.by_host {
        if peer == host {
            continue;
        }
        let peer = peer.clone();
        match &remote {
            None => answers.push(HostAnswer::Unreachable { host: peer }),
            Some(remote) => {
                let (remote, agents) = (remote.clone(), agents.clone());
                asks.spawn(async move {
                    match tokio::time::timeout(deadline, remote.presence(peer.clone(), agents))
                        .await
                    {
                        Ok(answer) => answer,
                        Err(_) => HostAnswer::NoAnswer { host: peer },
                    }
                });
            }
        }
    }
    while let Some(joined) = asks.join_next().await {
        // A task that panicked is a host whose answer is missing: its rows say unknown.
        if let Ok(answer) = joined {
            answers.push(answer);
        }
    }
    assemble(&plan.request, &plan.registered, &answers)
}
