//! Presence: is an agent runnable right now, as the host that serves it sees it.
//!
//! The host supervisor is the one presence provider of an agent: it knows whether the agent's
//! actor is up and what its runs are doing. It reports an [`AgentReport`] per agent; the one
//! mapping [`presence_of`] turns a report into a [`PresenceState`] and the [`PresenceBasis`] a
//! reader needs to tell "not running" from "this host cannot see it". A state says nothing
//! about whether work is done: `done` means the agent's last run settled and it is ready for
//! input, not that anything it was asked is finished.

use serde::{Deserialize, Serialize};

use crate::{RunId, RunStatus};

/// The presence vocabulary of the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PresenceState {
    /// The agent has runs in progress (a model turn, tools, or calls out).
    Working,
    /// A run of the agent is parked on an approval gate.
    Blocked,
    /// Ready for input; it has not settled a run since its host started.
    Idle,
    /// Ready for input; its last run settled.
    Done,
    /// Its host knows it and cannot run it now (actor down), or its host cannot be reached.
    Unreachable,
    /// Nobody could classify it.
    Unknown,
}

impl PresenceState {
    /// The text form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::Blocked => "blocked",
            Self::Idle => "idle",
            Self::Done => "done",
            Self::Unreachable => "unreachable",
            Self::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for PresenceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a presence state was concluded from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PresenceBasis {
    /// The owning host's supervisor: its actor table and the agent's open runs.
    SupervisorRunTable,
    /// The owning host's supervisor: the agent's actor is down (stopped after failures).
    AgentDown,
    /// The owning host's supervisor: the agent's actor is down because its store could not
    /// be written (a full disk, a file-size limit); its host restarts it once it can be.
    StoreNotWritable,
    /// The owning host answered but does not serve the agent (its config differs).
    NotServedByHost,
    /// The owning host answered without a report for the agent.
    NotReported,
    /// The owning host could not be reached.
    HostUnreachable,
    /// The owning host did not answer within the presence deadline.
    HostNoAnswer,
    /// The owning host refused to report presence to this host.
    HostRefused,
    /// The owning host is not running: the row's work was read from its store, and nobody
    /// can say whether the agent would take input.
    HostNotRunning,
    /// The owning host was not asked (a directory read from one host's data folder).
    NotAsked,
}

impl PresenceBasis {
    /// The text form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SupervisorRunTable => "supervisor_run_table",
            Self::AgentDown => "agent_down",
            Self::StoreNotWritable => "store_not_writable",
            Self::NotServedByHost => "not_served_by_host",
            Self::NotReported => "not_reported",
            Self::HostUnreachable => "host_unreachable",
            Self::HostNoAnswer => "host_no_answer",
            Self::HostRefused => "host_refused",
            Self::HostNotRunning => "host_not_running",
            Self::NotAsked => "not_asked",
        }
    }
}

/// One agent's presence: the state, who provided it, when, and on what basis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Presence {
    /// The state.
    pub state: PresenceState,
    /// Who provided it: `supervisor@<host>`.
    pub provider: String,
    /// When it was observed, Unix milliseconds (the provider's clock, or the asking host's when
    /// the provider could not answer).
    pub observed_at_ms: u64,
    /// What it was concluded from.
    pub basis: PresenceBasis,
}

/// The presence provider's name for a host.
pub fn provider_of(host: &str) -> String {
    format!("supervisor@{host}")
}

/// The last run an agent settled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastSettled {
    /// The run.
    pub run: RunId,
    /// How it settled.
    pub status: RunStatus,
    /// When, Unix milliseconds (the owning host's clock).
    pub at_ms: u64,
}

/// An agent's typed work state: its open runs by status and the last one it settled. This is
/// read from the agent's own runs, not observed: it is the fact, presence the colour.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkState {
    /// Runs stored and not yet picked up.
    pub queued: u32,
    /// Runs in a model turn or a tool.
    pub running: u32,
    /// Runs waiting for replies from peers.
    pub waiting: u32,
    /// Runs parked on an approval.
    pub blocked: u32,
    /// The last run it settled since its host started, if any.
    pub last_settled: Option<LastSettled>,
    /// Since when the open run (not blocked) that moved least recently has kept its status,
    /// Unix milliseconds (the owning host's clock); `None` without such runs. Blocked runs
    /// have `blocked_since_ms`: a gate is not a run that stopped advancing.
    pub oldest_change_ms: Option<u64>,
    /// Since when its longest-blocked run has waited on an approval, Unix milliseconds.
    pub blocked_since_ms: Option<u64>,
    /// Since when the oldest delivered message that no model turn has read yet waits in an
    /// open run, Unix milliseconds.
    #[serde(default)]
    pub unread_since_ms: Option<u64>,
}

impl WorkState {
    /// Runs not settled.
    pub fn open(&self) -> u32 {
        self.queued
            .saturating_add(self.running)
            .saturating_add(self.waiting)
            .saturating_add(self.blocked)
    }

    /// Counts one more open run of `status` (settled statuses count nothing).
    pub fn count(&mut self, status: RunStatus) {
        let slot = match status {
            RunStatus::Queued => &mut self.queued,
            RunStatus::Running => &mut self.running,
            RunStatus::Waiting => &mut self.waiting,
            RunStatus::Blocked => &mut self.blocked,
            RunStatus::Succeeded | RunStatus::Failed => return,
        };
        *slot = slot.saturating_add(1);
    }
}

/// What the owning host knows of its agent's actor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActorState {
    /// Running: it takes messages.
    Up,
    /// Stopped (its restart budget is spent, or it is being restarted).
    Down,
    /// Stopped because its store could not be written (a full disk, a file-size limit); its
    /// host restarts it once the store takes writes again.
    StoreNotWritable,
    /// This host does not serve the agent.
    NotServed,
    /// The host is not running; its work was read from its store.
    Offline,
}

/// What a host supervisor reports about one of its agents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentReport {
    /// The agent.
    pub agent: String,
    /// Its actor.
    pub actor: ActorState,
    /// Its runs.
    pub work: WorkState,
    /// Who holds the agent's seat now: changes when its host restarts, its config is
    /// reloaded or its actor is restarted (empty when the host does not serve it). A wait
    /// pinned to one incarnation is never satisfied by another.
    pub incarnation: String,
}

/// The presence state a report means, and its basis.
///
/// A run parked on an approval makes the agent `blocked` even when other runs work: a gate is
/// what a reader must notice first. Open runs otherwise make it `working`; with none it is
/// `done` if it settled a run since its host started, else `idle`.
pub fn presence_of(report: &AgentReport) -> (PresenceState, PresenceBasis) {
    match report.actor {
        ActorState::NotServed => (PresenceState::Unknown, PresenceBasis::NotServedByHost),
        ActorState::Down => (PresenceState::Unreachable, PresenceBasis::AgentDown),
        ActorState::StoreNotWritable => {
            (PresenceState::Unreachable, PresenceBasis::StoreNotWritable)
        }
        ActorState::Offline => (PresenceState::Unknown, PresenceBasis::HostNotRunning),
        ActorState::Up => {
            let w = &report.work;
            let state = if w.blocked > 0 {
                PresenceState::Blocked
            } else if w.open() > 0 {
                PresenceState::Working
            } else if w.last_settled.is_some() {
                PresenceState::Done
            } else {
                PresenceState::Idle
            };
            (state, PresenceBasis::SupervisorRunTable)
        }
    }
}

#[cfg(test)]
mod tests;
