//! What crosses agents: the messages the host supervisor takes, and the seam to other hosts.
//!
//! Agent actors send [`SupervisorMsg`]s up (place a call, report a settled run, ask for a
//! reply again); the HTTP API and embedding apps send them through [`crate::Host`]. Links to
//! other hosts plug in behind [`RemoteCalls`]. This module holds only these shapes, so that
//! the supervisor and the agent actors both depend on it and never on each other.

use std::future::Future;
use std::pin::Pin;

use ractor::RpcReplyPort;

use consort_core::step::CallOutcome;
use consort_net::{CallEnvelope, ReplyEnvelope, RunId};

use crate::ActorsError;
use crate::run::{Channel, RunRecord};

/// A boxed future, for the object-safe [`RemoteCalls`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How the supervisor reaches agents served by other hosts (implemented by the fleet's links).
pub trait RemoteCalls: Send + Sync + 'static {
    /// Whether `agent` lives on another host of the fleet.
    fn serves(&self, agent: &str) -> bool;
    /// Delivers a call to the callee's host and returns its answer.
    fn place_call(&self, envelope: CallEnvelope) -> BoxFuture<'_, CallOutcome>;
    /// Delivers a reply to the caller's host.
    fn send_reply(&self, reply: ReplyEnvelope) -> BoxFuture<'_, ()>;
    /// Reads a run on another host (for `check_run`): the child `run` of `agent`, placed by
    /// `caller`'s run `parent_run` (the callee's host answers only for its own caller).
    fn run_summary(
        &self,
        caller: String,
        parent_run: RunId,
        agent: String,
        run: RunId,
    ) -> BoxFuture<'_, Result<RunRecord, ActorsError>>;
    /// Asks the callee's host to send a settled run's reply again.
    fn resend_reply(&self, callee: String, child_run: RunId) -> BoxFuture<'_, ()>;
}

/// Messages the host supervisor handles.
pub enum SupervisorMsg {
    /// Start a root run on one of this host's agents.
    Start {
        agent: String,
        input: String,
        channel: Channel,
        /// Who the run acts for.
        identity: crate::visibility::Identity,
        reply: RpcReplyPort<Result<RunRecord, ActorsError>>,
    },
    /// Route a call to its callee (local actor or remote host).
    PlaceCall {
        envelope: CallEnvelope,
        reply: RpcReplyPort<CallOutcome>,
    },
    /// A run of a local agent settled; `reply` is set when it answers a caller.
    Settled {
        record: Box<RunRecord>,
        reply: Option<ReplyEnvelope>,
    },
    /// A reply that arrived from another host; `taken` says whether the caller's agent took
    /// it (it answers a call one of its runs placed).
    OfferReply {
        reply: ReplyEnvelope,
        taken: RpcReplyPort<bool>,
    },
    /// Ask a callee (local or remote) to send a settled run's reply again.
    ResendReply { callee: String, child_run: RunId },
    /// Read a run of a given agent (for `check_run`), placed by `caller`'s run `parent_run`.
    RunSummary {
        caller: String,
        parent_run: RunId,
        agent: String,
        run: RunId,
        reply: RpcReplyPort<Result<RunRecord, ActorsError>>,
    },
    /// An operator's approve or deny.
    Decide {
        agent: String,
        run: RunId,
        approve: bool,
        reply: RpcReplyPort<Result<RunRecord, ActorsError>>,
    },
    /// Re-read agent.yaml files: all of them, or only those whose file changed.
    Reload {
        only_changed: bool,
        reply: Option<RpcReplyPort<Result<Vec<String>, ActorsError>>>,
    },
    /// The agents and whether each is up.
    Agents(RpcReplyPort<Vec<AgentStatus>>),
    /// Timer: checkpoint stores, watch config files.
    Tick,
}

/// One agent as the supervisor sees it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AgentStatus {
    pub name: String,
    pub up: bool,
    pub restarts: usize,
}
