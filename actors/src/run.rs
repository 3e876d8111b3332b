//! What a run is, as plain data: its status, channel, cost roll-up and event log entries.
//!
//! These types are shared by the store (which persists them), the agent actor (which moves a
//! run through its statuses) and every surface that shows runs. They carry no behaviour beyond
//! conversions to and from their stored text forms.

use serde::{Deserialize, Serialize};

pub use consort_core::{Channel, RunEvent, RunStatus};
use consort_net::RunId;

use crate::visibility::{Caller, Identity, Origin, Principal};

/// A run's cost roll-up. Tokens are zero when the model does not report them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    /// Model turns taken.
    pub model_turns: u64,
    /// Tool uses executed.
    pub tool_calls: u64,
    /// Calls placed to other agents.
    pub calls_placed: u64,
    /// Prompt tokens over all turns (0 when the model does not report them).
    pub input_tokens: u64,
    /// Completion tokens over all turns (0 when the model does not report them).
    pub output_tokens: u64,
    /// From creation to settlement (or to now, for an unsettled run, when read).
    pub wall_ms: u64,
}

/// How many runs of one agent (or of a host) are in each status: what a store counts without
/// reading the runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCounts {
    /// Accepted, not picked up yet.
    pub queued: u64,
    /// Being worked on.
    pub running: u64,
    /// Waiting for replies.
    pub waiting: u64,
    /// Parked on an approval gate.
    pub blocked: u64,
    /// Settled with an answer.
    pub succeeded: u64,
    /// Settled with an error.
    pub failed: u64,
}

impl RunCounts {
    /// Adds `n` runs of `status`.
    pub fn add(&mut self, status: RunStatus, n: u64) {
        let count = match status {
            RunStatus::Queued => &mut self.queued,
            RunStatus::Running => &mut self.running,
            RunStatus::Waiting => &mut self.waiting,
            RunStatus::Blocked => &mut self.blocked,
            RunStatus::Succeeded => &mut self.succeeded,
            RunStatus::Failed => &mut self.failed,
        };
        *count = count.saturating_add(n);
    }

    /// The sum of both counts, status by status.
    pub fn plus(self, other: Self) -> Self {
        Self {
            queued: self.queued.saturating_add(other.queued),
            running: self.running.saturating_add(other.running),
            waiting: self.waiting.saturating_add(other.waiting),
            blocked: self.blocked.saturating_add(other.blocked),
            succeeded: self.succeeded.saturating_add(other.succeeded),
            failed: self.failed.saturating_add(other.failed),
        }
    }

    /// Runs that have not settled.
    pub fn unsettled(&self) -> u64 {
        self.queued
            .saturating_add(self.running)
            .saturating_add(self.waiting)
            .saturating_add(self.blocked)
    }
}

/// One run as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run's id.
    pub id: RunId,
    /// The agent that runs it.
    pub agent: String,
    /// Where the run stands.
    pub status: RunStatus,
    /// Where the run came from (API, CLI or a call).
    pub channel: Channel,
    /// The caller's run, for a delegated run.
    pub parent_run: Option<RunId>,
    /// The agent that placed this run, for a delegated run.
    pub parent_agent: Option<String>,
    /// The caller's tool-use id, for a delegated run.
    pub tool_use_id: Option<String>,
    /// Hops from the root run: 0 for a run started by the API or CLI.
    pub hop_depth: u32,
    /// The input text the run started with.
    pub input: String,
    /// The final answer, once succeeded.
    pub output: Option<String>,
    /// Why the run failed or was cancelled.
    pub error: Option<String>,
    /// Unix milliseconds.
    pub created_at_ms: u64,
    /// Unix milliseconds when it settled; `None` while unsettled.
    pub settled_at_ms: Option<u64>,
    /// The run's own work.
    pub cost: Cost,
    /// The run's own work and every descendant's whose reply it took (carried back with the
    /// replies, across hosts too). Its wall time is the run's own.
    #[serde(default)]
    pub tree_cost: Cost,
    /// Who the run acts for: `api:<token-name>`, `agent:<caller>` (from the verified chain),
    /// `anonymous` (no identity) or `unknown` (an identity hook could not answer).
    #[serde(default = "anonymous")]
    pub principal: String,
    /// The roles the host's token config gave an `api:` principal when the run started. A peer
    /// run's roles are read from the callee's current `grants` instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// Who started the run's call tree: a root run's own principal (`api:<token-name>`,
    /// `anonymous`, `unknown`), a called run's the origin its chain's first hop carries,
    /// across hosts too. A peer run's roles are the callee's grants as far as the origin
    /// holds them. `unknown` for a called run stored before origins were recorded.
    #[serde(default = "unknown")]
    pub origin: String,
}

fn anonymous() -> String {
    "anonymous".to_owned()
}

fn unknown() -> String {
    "unknown".to_owned()
}

/// The stored text of an identity: the principal, `anonymous` or `unknown`, and its roles.
pub fn identity_text(identity: &Identity) -> (String, Vec<String>) {
    match identity {
        Identity::Present(caller) => (
            caller.principal.to_string(),
            caller.roles.iter().cloned().collect(),
        ),
        Identity::Absent => (anonymous(), Vec::new()),
        Identity::Unknown => ("unknown".to_owned(), Vec::new()),
    }
}

impl RunRecord {
    /// The tree cost as the counts a reply carries.
    pub fn tree_usage(&self) -> consort_core::step::CostDelta {
        let c = self.tree_cost;
        consort_core::step::CostDelta {
            model_turns: c.model_turns,
            tool_calls: c.tool_calls,
            calls_placed: c.calls_placed,
            input_tokens: c.input_tokens,
            output_tokens: c.output_tokens,
        }
    }

    /// The run's identity as stored. Text that is not a principal reads as unknown: nothing is
    /// invented.
    pub fn identity(&self) -> Identity {
        match self.principal.as_str() {
            "unknown" => Identity::Unknown,
            "anonymous" => Identity::Absent,
            text => match Principal::parse(text) {
                Ok(principal) => {
                    Identity::Present(Caller::new(principal, self.roles.iter().cloned().collect()))
                }
                Err(_) => Identity::Unknown,
            },
        }
    }

    /// The run's origin as stored. Text that is not an origin reads as unknown: nothing is
    /// invented.
    pub fn origin(&self) -> Origin {
        Origin::parse(&self.origin).unwrap_or(Origin::Unknown)
    }

    /// The run as the agent machine reads it once settled, to build its caller's reply
    /// ([`AgentMachine::reply_of`](consort_core::machine::AgentMachine::reply_of)).
    pub(crate) fn as_settled(&self) -> consort_core::machine::SettledRun<'_> {
        let call = match (&self.parent_run, &self.parent_agent, &self.tool_use_id) {
            (Some(parent), Some(caller), Some(tool_use_id)) => {
                Some((parent, caller.as_str(), tool_use_id.as_str()))
            }
            _ => None,
        };
        consort_core::machine::SettledRun {
            id: &self.id,
            agent: &self.agent,
            status: self.status,
            call,
            output: self.output.as_deref(),
            error: self.error.as_deref(),
            tree_cost: self.tree_usage(),
        }
    }

    /// What `check_run` tells the caller of this run: its status, and its answer capped at
    /// `cap` bytes (what the caller would get in its reply) or its error.
    pub(crate) fn check_run_answer(&self, cap: usize) -> String {
        serde_json::json!({
            "run_id": self.id, "agent": self.agent, "status": self.status,
            "output": self.output.as_deref().map(|o| consort_core::step::cap_output(o, cap)),
            "error": self.error,
        })
        .to_string()
    }
}

/// One entry of a run's append-only event log: a typed [`RunEvent`] with its place and time.
///
/// Serialized (API, CLI `--json`) as `{run_id, seq, at_ms, kind, data}`, the stored form.
#[derive(Clone, Debug, PartialEq)]
pub struct EventRecord {
    /// The run the event belongs to.
    pub run_id: RunId,
    /// 1-based position in the run's log.
    pub seq: u64,
    /// Unix milliseconds when it was recorded.
    pub at_ms: u64,
    /// The event itself.
    pub event: RunEvent,
}

impl EventRecord {
    /// The event's stable kind.
    pub fn kind(&self) -> &'static str {
        self.event.kind()
    }

    /// The event's data, as stored.
    pub fn data(&self) -> serde_json::Value {
        self.event.data()
    }
}

#[derive(Serialize, Deserialize)]
struct StoredEvent {
    run_id: RunId,
    seq: u64,
    at_ms: u64,
    kind: String,
    data: serde_json::Value,
}

impl Serialize for EventRecord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        StoredEvent {
            run_id: self.run_id.clone(),
            seq: self.seq,
            at_ms: self.at_ms,
            kind: self.kind().to_owned(),
            data: self.data(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for EventRecord {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let stored = StoredEvent::deserialize(d)?;
        let event =
            RunEvent::decode(&stored.kind, stored.data).map_err(serde::de::Error::custom)?;
        Ok(Self {
            run_id: stored.run_id,
            seq: stored.seq,
            at_ms: stored.at_ms,
            event,
        })
    }
}

/// Milliseconds since the Unix epoch, from the wall clock.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
