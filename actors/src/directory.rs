//! The host's side of the peer directory: the goals it knows, the reports its supervisor gives
//! about its own agents, and the gathering of one packet across hosts.
//!
//! A directory request arrives at the supervisor with an [`Audience`] the host established
//! (the agent a run belongs to, an operator). `DirectorySpec::plan` asks consort-core which
//! goal that audience may see ([`resolve_goal`]) and which rows the packet will show (the
//! first `row_cap` registered agents in name order: presence never changes the set, so only
//! those agents' hosts are asked). The supervisor reports its own agents at once from the
//! [`PresenceBoard`]; `gather` asks every other host in parallel, each inside the presence
//! deadline, and [`assemble`] makes the packet. A host that does not answer in time costs the
//! deadline, never a hang. Nothing here writes a store or decides presence: the mapping is
//! `consort_core::directory::presence_of`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use consort_core::directory::{
    ActorState, AgentReport, Audience, DirectoryPacket, Goal, HostAnswer, PacketRequest,
    RegisteredAgent, ScopeGap, assemble, resolve_goal, scope_gap_packet,
};

use crate::presence::PresenceBoard;
use crate::routing::RemoteCalls;

mod carry_schedule;
mod deliver;
mod observe;
mod outbox;
mod requests;
pub(crate) mod tools;
mod wait;

pub use deliver::{DeliveryRequest, MAX_MESSAGE_BYTES};

pub(crate) use outbox::{Outbox, carry};
pub(crate) use requests::{DirectoryHost, answer_on_task};

pub(crate) use observe::{Seat, observe_here};
pub(crate) use wait::wait_here;
pub use wait::{MAX_WAIT, WaitAnswer, WaitRequest};

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
    /// How long open work may keep its status before the rollup calls it stuck.
    pub no_advancement_after: Duration,
    /// How long after a delivery's receipt activity is watched for, unless the sender says.
    pub activity_window: Duration,
}

impl Default for DirectorySpec {
    fn default() -> Self {
        Self {
            goals: Vec::new(),
            placement: BTreeMap::new(),
            row_cap: 24,
            presence_deadline: Duration::from_secs(2),
            no_advancement_after: Duration::from_secs(300),
            activity_window: Duration::from_secs(5),
        }
    }
}

/// A directory request that passed its scope: what to show and whom to ask.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) request: PacketRequest,
    pub(crate) registered: Vec<RegisteredAgent>,
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

    /// The goals as consort-core reads them.
    pub(crate) fn goal_list(&self) -> Vec<Goal<'_>> {
        self.goals
            .iter()
            .map(|g| Goal {
                name: &g.name,
                agents: &g.agents,
            })
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
        self.plan_rows(host, audience, goal, now_ms, self.row_cap.max(1))
            .map_err(|gap| Box::new(scope_gap_packet(gap, now_ms)))
    }

    /// What the rollup of `goal` must ask: every registered agent (up to what one presence
    /// query may name per host), or the scope gap.
    pub(crate) fn plan_rollup(
        &self,
        host: &str,
        audience: &Audience,
        goal: Option<&str>,
        now_ms: u64,
    ) -> Result<Plan, ScopeGap> {
        self.plan_rows(host, audience, goal, now_ms, usize::MAX)
    }

    fn plan_rows(
        &self,
        host: &str,
        audience: &Audience,
        goal: Option<&str>,
        now_ms: u64,
        row_cap: usize,
    ) -> Result<Plan, ScopeGap> {
        let goals = self.goal_list();
        let goal = resolve_goal(&goals, audience, goal)?;
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
        let mut by_host: BTreeMap<String, Vec<String>> = BTreeMap::new();
        // The same first rows `assemble` shows: registered agents in name order, capped.
        for reg in registered.iter().take(row_cap) {
            let agents = by_host.entry(reg.host.clone()).or_default();
            if agents.len() < consort_net::MAX_PRESENCE_AGENTS {
                agents.push(reg.agent.clone());
            }
        }
        Ok(Plan {
            request: PacketRequest {
                goal: goal.name.to_owned(),
                now_ms,
                row_cap: row_cap.min(self.row_cap.max(1)),
            },
            registered,
            by_host,
        })
    }
}

/// This host's reports about `agents`: each agent's actor (up, down and why, or not served
/// here), who holds its seat, and its work from the board.
pub(crate) fn local_reports(
    agents: &[String],
    seat: impl Fn(&str) -> Option<(ActorState, String)>,
    board: &PresenceBoard,
) -> Vec<AgentReport> {
    agents
        .iter()
        .map(|agent| {
            let (actor, incarnation) =
                seat(agent).unwrap_or_else(|| (ActorState::NotServed, String::new()));
            let work = if actor == ActorState::NotServed {
                Default::default()
            } else {
                board.work(agent)
            };
            AgentReport {
                agent: agent.clone(),
                actor,
                work,
                incarnation,
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
    let answers = ask_hosts(&plan, host, local, remote, deadline).await;
    assemble(&plan.request, &plan.registered, &answers)
}

/// Every host's answer for `plan`: `local` for this host, the others asked in parallel, each
/// inside `deadline`.
pub(crate) async fn ask_hosts(
    plan: &Plan,
    host: &str,
    local: Option<HostAnswer>,
    remote: Option<Arc<dyn RemoteCalls>>,
    deadline: Duration,
) -> Vec<HostAnswer> {
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
    answers
}

/// What a host writes to `<data>/directory.json` when it starts, so that the directory can be
/// read from its data folder while it is stopped (`consort directory --data`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DirectorySnapshot {
    /// The host's name.
    pub host: String,
    /// The fleet's goals.
    pub goals: Vec<(String, Vec<String>)>,
    /// Agent -> host, for agents of other hosts.
    pub placement: BTreeMap<String, String>,
    /// The most rows a packet shows.
    pub row_cap: usize,
}

/// The file name of the snapshot in a data folder.
pub const SNAPSHOT_FILE: &str = "directory.json";

impl DirectorySpec {
    /// The snapshot of this spec for host `host`.
    pub fn snapshot(&self, host: &str) -> DirectorySnapshot {
        DirectorySnapshot {
            host: host.to_owned(),
            goals: self
                .goals
                .iter()
                .map(|g| (g.name.clone(), g.agents.clone()))
                .collect(),
            placement: self.placement.clone(),
            row_cap: self.row_cap,
        }
    }
}

/// The directory of `goal` read from a stopped host's data folder, as an operator sees it:
/// the host's own agents with the work its stores hold (presence unknown: the host is not
/// running), the other hosts' agents listed but not asked.
pub fn offline_packet(
    data: &crate::DataFolder,
    goal: Option<&str>,
    now_ms: u64,
) -> Result<DirectoryPacket, crate::ActorsError> {
    let path = data.root().join(SNAPSHOT_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        crate::ActorsError::Actor(format!(
            "{} cannot be read ({e}); a host writes it when it starts",
            path.display()
        ))
    })?;
    let snapshot: DirectorySnapshot = serde_json::from_str(&text).map_err(|e| {
        crate::ActorsError::Actor(format!(
            "{} is not a directory snapshot: {e}",
            path.display()
        ))
    })?;
    let spec = DirectorySpec {
        goals: snapshot
            .goals
            .into_iter()
            .map(|(name, agents)| GoalMembers { name, agents })
            .collect(),
        placement: snapshot.placement,
        row_cap: snapshot.row_cap,
        ..DirectorySpec::default()
    };
    let plan = match spec.plan(&snapshot.host, &Audience::Operator, goal, now_ms) {
        Ok(plan) => plan,
        Err(gap) => return Ok(*gap),
    };
    let mut answers = Vec::new();
    for (host, agents) in &plan.by_host {
        if host != &snapshot.host {
            answers.push(HostAnswer::NotAsked { host: host.clone() });
            continue;
        }
        let mut reports = Vec::new();
        for agent in agents {
            let mut work = consort_core::directory::WorkState::default();
            if data.has_store(agent)? {
                for run in data.runs(Some(agent))? {
                    if run.status.is_settled() {
                        if work.last_settled.is_none() {
                            work.last_settled = Some(consort_core::directory::LastSettled {
                                run: run.id.clone(),
                                status: run.status,
                                at_ms: run.settled_at_ms.unwrap_or(run.created_at_ms),
                            });
                        }
                    } else {
                        work.count(run.status);
                    }
                }
            }
            reports.push(AgentReport {
                agent: agent.clone(),
                actor: ActorState::Offline,
                work,
                incarnation: String::new(),
            });
        }
        answers.push(HostAnswer::Answered {
            host: host.clone(),
            observed_at_ms: now_ms,
            reports,
        });
    }
    Ok(assemble(&plan.request, &plan.registered, &answers))
}
