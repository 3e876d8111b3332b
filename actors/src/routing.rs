//! What crosses agents: the messages the host supervisor takes, and the seam to other hosts.
//!
//! Agent actors send [`SupervisorMsg`]s up (place a call, report a settled run, ask for a
//! reply again); the HTTP API and embedding apps send them through [`crate::Host`]. Links to
//! other hosts plug in behind [`RemoteCalls`]. This module holds only these shapes, so that
//! the supervisor and the agent actors both depend on it and never on each other.

use std::future::Future;
use std::pin::Pin;

use ractor::RpcReplyPort;

use consort_core::directory::{
    AgentReport, AttentionRollup, Audience, DeliveryOutcome, DirectoryPacket, ExcerptSource,
    HostAnswer, Observation, Receipt, ScopeGap,
};

use crate::directory::{DeliveryRequest, WaitAnswer, WaitRequest};
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
    /// Asks `host` for the presence of `agents` it serves. The supervisor bounds the wait by
    /// the presence deadline; a seam without presence support answers that the host refused.
    fn presence(&self, host: String, agents: Vec<String>) -> BoxFuture<'_, HostAnswer> {
        let _unused = agents;
        Box::pin(async move { HostAnswer::Refused { host } })
    }
    /// Asks `host` to observe one of its agents for `asker` (an agent of this host, or `None`
    /// for this host's operator). `Err` says why there is no observation.
    fn observe(
        &self,
        host: String,
        asker: Option<String>,
        agent: String,
        run: Option<RunId>,
        source: ExcerptSource,
        lines: usize,
    ) -> BoxFuture<'_, Result<Observation, RemoteFailure>> {
        let _unused = (host, asker, agent, run, source, lines);
        Box::pin(async {
            Err(RemoteFailure::Unreachable(
                "this host has no links".to_owned(),
            ))
        })
    }
    /// Hands `host` a delivery from `asker` (an agent of this host, or `None` for this host's
    /// operator) and returns its receipt.
    fn deliver(
        &self,
        host: String,
        asker: Option<String>,
        agent: String,
        run: Option<RunId>,
        delivery_id: String,
        text: String,
    ) -> BoxFuture<'_, Result<Receipt, RemoteFailure>> {
        let _unused = (host, asker, agent, run, delivery_id, text);
        Box::pin(async {
            Err(RemoteFailure::Unreachable(
                "this host has no links".to_owned(),
            ))
        })
    }
    /// Asks `host` for the receipt of an earlier delivery from `asker`.
    fn delivery_status(
        &self,
        host: String,
        asker: Option<String>,
        agent: String,
        run: Option<RunId>,
        delivery_id: String,
    ) -> BoxFuture<'_, Result<Receipt, RemoteFailure>> {
        let _unused = (host, asker, agent, run, delivery_id);
        Box::pin(async {
            Err(RemoteFailure::Unreachable(
                "this host has no links".to_owned(),
            ))
        })
    }
    /// Asks `host` to wait up to `slice` on a run of one of its agents for `asker`.
    fn wait_run(
        &self,
        host: String,
        asker: Option<String>,
        request: WaitRequest,
        slice: std::time::Duration,
    ) -> BoxFuture<'_, Result<Result<WaitAnswer, ScopeGap>, RemoteFailure>> {
        let _unused = (host, asker, request, slice);
        Box::pin(async {
            Err(RemoteFailure::Unreachable(
                "this host has no links".to_owned(),
            ))
        })
    }
}

/// Why a request to another host got no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoteFailure {
    /// The host could not be reached.
    Unreachable(String),
    /// The host answered with a refusal (or with something this host cannot read).
    Refused(String),
}

impl std::fmt::Display for RemoteFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreachable(detail) | Self::Refused(detail) => f.write_str(detail),
        }
    }
}

/// Messages the host supervisor handles (the crate's own: apps drive a host through
/// [`crate::Host`], links through [`crate::HostInbox`]).
pub(crate) enum SupervisorMsg {
    /// Start a root run on one of this host's agents.
    Start {
        /// The agent that runs it.
        agent: String,
        /// The run's input text.
        input: String,
        /// Where the request came from.
        channel: Channel,
        /// Who the run acts for.
        identity: crate::visibility::Identity,
        /// The starter's trace context (an HTTP `traceparent`), if any.
        trace: Option<consort_net::TraceContext>,
        /// The request's tree budget, which narrows the agent's `limits.tree`.
        budget: Option<consort_core::TreeLimits>,
        /// Answered with the new run, or why it was refused.
        reply: RpcReplyPort<Result<RunRecord, ActorsError>>,
    },
    /// Route a call to its callee (local actor or remote host).
    PlaceCall {
        /// The signed call.
        envelope: CallEnvelope,
        /// Answered with the callee's acceptance or refusal.
        reply: RpcReplyPort<CallOutcome>,
    },
    /// A run of a local agent settled; `reply` is set when it answers a caller.
    Settled {
        /// The run as settled.
        record: Box<RunRecord>,
        /// The signed reply for its caller, for a delegated run.
        reply: Option<ReplyEnvelope>,
    },
    /// A reply that arrived from another host; `taken` says whether the caller's agent took
    /// it (it answers a call one of its runs placed).
    OfferReply {
        /// The signed reply.
        reply: ReplyEnvelope,
        /// Answered true when the caller's agent took the reply.
        taken: RpcReplyPort<bool>,
    },
    /// Ask a callee (local or remote) to send a settled run's reply again.
    ResendReply {
        /// The agent that ran the child run.
        callee: String,
        /// The settled child run whose reply is asked for again.
        child_run: RunId,
    },
    /// Ask again for the reply of a call to a remote A2A agent (the caller resumed, or a reply
    /// may have been lost).
    ResendA2aReply(crate::a2a::A2aCallRef),
    /// Read a run of a given agent (for `check_run`), placed by `caller`'s run `parent_run`.
    RunSummary {
        /// The agent asking.
        caller: String,
        /// The asking agent's run that placed the call.
        parent_run: RunId,
        /// The callee agent that holds the run.
        agent: String,
        /// The run asked about.
        run: RunId,
        /// Answered with the run, or why it cannot be read.
        reply: RpcReplyPort<Result<RunRecord, ActorsError>>,
    },
    /// A decision on a gate of a run.
    Decide {
        /// The agent whose run waits for the decision.
        agent: String,
        /// The blocked run.
        run: RunId,
        /// The gate decided; `None` decides the one the run waits on.
        gate: Option<String>,
        /// What was decided.
        decision: consort_core::step::Decision,
        /// Who decided: the principal the host checked, or `operator` for its local operator.
        by: String,
        /// Answered with the run after the decision, and the gate it decided.
        reply: RpcReplyPort<Result<crate::Decided, ActorsError>>,
    },
    /// A cancel of a run, by someone the host checked.
    Cancel {
        /// The agent whose run is canceled.
        agent: String,
        /// The run.
        run: RunId,
        /// Who cancels: the principal the host checked, or `operator` for its local operator.
        by: String,
        /// Why, in the canceler's words.
        reason: Option<String>,
        /// Answered with the run after the cancel, or the refusal of a settled run.
        reply: RpcReplyPort<Result<RunRecord, ActorsError>>,
    },
    /// Re-read agent.yaml files: all of them, or only those whose file changed.
    Reload {
        /// Re-read only agent.yaml files whose modification time changed.
        only_changed: bool,
        /// Answered with the agents whose config changed and, for a reload on demand
        /// (`only_changed` false), the agents it revived (`None` for a timer-driven reload).
        reply: Option<RpcReplyPort<Result<Reloaded, ActorsError>>>,
    },
    /// The agents and whether each is up.
    Agents(RpcReplyPort<Vec<AgentStatus>>),
    /// The peer directory of a goal, for an audience the host established (never one the
    /// caller named).
    Directory {
        /// Who asks.
        audience: Audience,
        /// The goal asked for, if named.
        goal: Option<String>,
        /// Where the packet goes.
        reply: RpcReplyPort<DirectoryPacket>,
    },
    /// What the audience may see of one agent (and one of its runs).
    Observe {
        /// Who asks.
        audience: Audience,
        /// The agent.
        agent: String,
        /// One of its runs.
        run: Option<RunId>,
        /// Where an excerpt comes from.
        source: ExcerptSource,
        /// The most excerpt lines.
        lines: usize,
        /// Where the observation goes.
        reply: RpcReplyPort<Observation>,
    },
    /// A wait pinned to an agent's run.
    WaitRun {
        /// Who asks.
        audience: Audience,
        /// What to wait for.
        request: WaitRequest,
        /// The longest the wait may last.
        timeout: std::time::Duration,
        /// How it ended, or why the audience may not wait on it.
        reply: RpcReplyPort<Result<WaitAnswer, ScopeGap>>,
    },
    /// The attention rollup of a goal.
    Attention {
        /// Who asks.
        audience: Audience,
        /// The goal, if named.
        goal: Option<String>,
        /// Where the rollup goes.
        reply: RpcReplyPort<AttentionRollup>,
    },
    /// Deliver a message to an agent (sent by `audience`), then watch for activity.
    Deliver {
        /// Who sends.
        audience: Audience,
        /// What to deliver.
        request: DeliveryRequest,
        /// How it ended.
        reply: RpcReplyPort<DeliveryOutcome>,
    },
    /// Hand a delivery to one of this host's agents (`from`: the sending agent, proven by
    /// this host or the link, or the operator sender).
    DeliverHere {
        /// The sender.
        from: String,
        /// The agent.
        agent: String,
        /// Its run, or `None` for a new run.
        run: Option<RunId>,
        /// The sender's idempotency key.
        delivery_id: String,
        /// The message.
        text: String,
        /// The receipt.
        reply: RpcReplyPort<Receipt>,
    },
    /// The receipt of an earlier delivery of the audience's.
    DeliveryStatus {
        /// Who sent it.
        audience: Audience,
        /// The agent it went to.
        agent: String,
        /// The run it went into, or `None` for a new-run delivery.
        run: Option<RunId>,
        /// The sender's id for it.
        delivery_id: String,
        /// Where the receipt goes.
        reply: RpcReplyPort<Receipt>,
    },
    /// Another host asks for the presence of agents this host serves.
    Presence {
        /// The agents.
        agents: Vec<String>,
        /// This host's reports and when it observed them (Unix milliseconds).
        reply: RpcReplyPort<(u64, Vec<AgentReport>)>,
    },
    /// An operator's drain (`Some(true)`), resume (`Some(false)`) or question (`None`):
    /// whether the host admits new root runs. Answered with whether it is draining now.
    Drain {
        /// What to set, if anything.
        draining: Option<bool>,
        /// Whether the host is draining after the change.
        reply: RpcReplyPort<bool>,
    },
    /// An operator's restart of one agent's actor: stopped, then started again, so its runs
    /// resume from the store as after a crash. Answered with the agent as it stands then.
    RestartAgent {
        /// The agent.
        agent: String,
        /// The agent's status after the restart, or why there was none.
        reply: RpcReplyPort<Result<AgentStatus, ActorsError>>,
    },
    /// Timer: checkpoint stores, watch config files.
    Tick,
    /// An agent's actor has had nothing to do for its idle time: the supervisor may retire it
    /// (the agent sleeps until a message needs it again).
    Idle {
        /// The agent.
        agent: String,
        /// The actor that reported, so a report from an actor already replaced is ignored.
        actor: ractor::ActorId,
    },
    /// A probe of the store of an agent that is down because its store could not be written.
    StoreProbed {
        /// The agent.
        agent: String,
        /// Which down period of the agent the probe was made for (a later one makes it stale).
        down_period: u64,
        /// `Ok` when the store takes writes again, else why not.
        probed: Result<(), ActorsError>,
    },
}

/// One agent as the supervisor sees it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AgentStatus {
    /// The agent's name.
    pub name: String,
    /// Whether it serves: its actor is running, or it sleeps until a message wakes it.
    pub up: bool,
    /// Whether its actor is running now (an agent with nothing to do sleeps without one).
    #[serde(default)]
    pub awake: bool,
    /// How many times its actor was restarted since the host started.
    pub restarts: usize,
    /// Why it is down and since when; `None` while it is up.
    #[serde(default)]
    pub down: Option<Down>,
}

/// Why an agent is down, since when, and what its last failure said.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Down {
    /// Why.
    pub reason: DownReason,
    /// Since when, Unix milliseconds.
    pub since_ms: u64,
    /// What the failure that took it down said (for `store_not_writable`, what the latest
    /// probe of the store found).
    pub detail: String,
}

/// Why an agent's actor is down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DownReason {
    /// Its store could not be written (a full disk, a file-size limit, a failed write). The
    /// host probes the store with a backoff and restarts the agent, with a fresh restart
    /// budget, as soon as the store takes writes again.
    StoreNotWritable,
    /// It failed more often than its restart budget allows, for another reason. A reload
    /// restarts it.
    RestartBudgetSpent,
    /// Its actor did not start again after a failure. A reload tries again.
    StartFailed,
}

impl DownReason {
    /// The text form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StoreNotWritable => "store_not_writable",
            Self::RestartBudgetSpent => "restart_budget_spent",
            Self::StartFailed => "start_failed",
        }
    }
}

impl std::fmt::Display for DownReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a reload did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Reloaded {
    /// The agents whose agent.yaml changed since the last reload that answered (the file
    /// watcher's changes included, once): their new config is in force.
    pub changed: Vec<String>,
    /// The agents that were down and were started again, with a fresh restart budget.
    pub revived: Vec<String>,
}
