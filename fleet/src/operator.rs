//! Fleet commands: an operator's signed requests to the hosts of a fleet over the QUIC links
//! (`consort fleet status|drain|resume|restart|reload|approve|jobs`), both ends.
//!
//! - `client`: [`FleetOperator`], the operator's side: reads fleet.yaml and the operator's
//!   key, signs one request per host and sends them in parallel over an
//!   [`consort_net::OperatorLink`], and gathers each host's answer or why there is none.
//! - `inbound`: `OperatorInbound`, the host's side: the link's
//!   [`consort_net::OperatorHandler`]; it verifies each request
//!   ([`consort_net::verify_operator_request`], then the replay window), logs every refusal,
//!   and runs the command inside a span naming the operator, the host and the command.
//! - `commands`: what each command does, through the [`consort_actors::Host`] handle only.
//! - this file: the answers' shapes (JSON on the wire, read back by the CLI).
//!
//! Nothing here decides whether a request is genuine (consort-net's pure checks do) or
//! anything about a run (the host's actors do); it gathers facts, asks and answers.

use serde::{Deserialize, Serialize};

use consort_actors::page::RunPage;
use consort_actors::{RunCounts, RunRecord};
use consort_net::RunId;

mod client;
mod commands;
mod inbound;

pub use client::{FleetOperator, HostAnswer, OperatorFailure, all_answered};
pub(crate) use inbound::OperatorInbound;

/// The answer to `status`: one host, as it stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostStatus {
    /// The host.
    pub host: String,
    /// Whether it refuses new root runs (an operator drained it).
    pub draining: bool,
    /// Its runs that have not settled, all agents together.
    pub unsettled: u64,
    /// Its runs by status, all agents together.
    pub runs: RunCounts,
    /// Each agent it serves, by name.
    pub agents: Vec<AgentLine>,
    /// Its link to each other host of the fleet, as its link endpoint knows it.
    pub links: Vec<LinkLine>,
    /// The run that failed last on this host, if any: the last error a status reports. The
    /// host's own errors (an agent past its restart budget, a store that failed) are in its
    /// log, and an agent that is down shows as down.
    pub last_failure: Option<LastFailure>,
}

/// One agent in a [`HostStatus`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentLine {
    /// The agent.
    pub name: String,
    /// Whether its actor is running.
    pub up: bool,
    /// How often its actor was restarted since the host started (crashes and operators).
    pub restarts: usize,
    /// Why it is down and since when; `None` while it is up.
    #[serde(default)]
    pub down: Option<DownLine>,
    /// Its runs by status.
    pub runs: RunCounts,
}

/// Why an agent of a [`HostStatus`] is down.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DownLine {
    /// `store_not_writable`, `restart_budget_spent` or `start_failed`.
    pub reason: String,
    /// Since when, Unix milliseconds.
    pub since_ms: u64,
    /// What its last failure said (absolute paths cut to their last two parts).
    pub detail: String,
}

/// One peer host's link in a [`HostStatus`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkLine {
    /// The peer host.
    pub host: String,
    /// `connected`, `dialing` or `not_connected`. A link is dialed when a request needs it,
    /// so `not_connected` without an error only says no request needed it yet.
    pub state: String,
    /// Why the last dial failed, or how the last connection ended, if known.
    pub last_error: Option<String>,
}

/// The failed run a [`HostStatus`] reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastFailure {
    /// The run.
    pub run: RunId,
    /// Its agent.
    pub agent: String,
    /// Its error (absolute paths cut to their last two parts).
    pub error: Option<String>,
    /// When it failed, Unix milliseconds.
    pub settled_at_ms: Option<u64>,
}

/// The answer to `drain` and `resume`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainState {
    /// The host.
    pub host: String,
    /// Whether it refuses new root runs now.
    pub draining: bool,
    /// Its runs that have not settled yet (what a drain waits for).
    pub unsettled: u64,
}

/// The answer to `restart`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restarted {
    /// The host.
    pub host: String,
    /// The agent after its restart.
    pub agent: AgentSeat,
}

/// An agent's actor after an operator's restart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSeat {
    /// The agent.
    pub name: String,
    /// Whether its actor is running.
    pub up: bool,
    /// How often its actor was restarted since the host started (this restart included).
    pub restarts: usize,
    /// Why it is down, if it did not start.
    #[serde(default)]
    pub down: Option<DownLine>,
}

/// The answer to `reload`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reloaded {
    /// The host.
    pub host: String,
    /// The agents whose config changed (empty when none did, or the file watcher already
    /// put the change in force).
    pub changed: Vec<String>,
    /// The agents that were down and were started again, with a fresh restart budget.
    #[serde(default)]
    pub revived: Vec<String>,
}

/// The answer to `approve`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decided {
    /// The host.
    pub host: String,
    /// Whether the gated tool was approved.
    pub approved: bool,
    /// The gate decided (absent from hosts that did not name gates).
    #[serde(default)]
    pub gate: String,
    /// The gate had this decision already: nothing was written.
    #[serde(default)]
    pub already_decided: bool,
    /// The run after the decision.
    pub run: RunRecord,
}

/// The answer to `jobs`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobsPage {
    /// The host.
    pub host: String,
    /// The page.
    #[serde(flatten)]
    pub page: RunPage,
}
