//! What an agent actor is told: requests from the API and the supervisor, the call protocol
//! between agents, and the completions of the tasks it spawned. Plain data: what each message
//! does is the handler's (`agent/mod.rs`).

use ractor::RpcReplyPort;

use consort_config::AgentConfig;
use consort_core::step::{CallOutcome, Decision, Input, TurnAsked};
use consort_net::{CallEnvelope, ReplyEnvelope, RunId};

use crate::asker::Asker;
use crate::model::{ModelError, ModelReply};
use crate::run::{Channel, RunRecord};
use crate::visibility::Identity;
use crate::{ActorsError, Decided};

/// Messages an agent actor handles: requests from the API and the supervisor, the call
/// protocol between agents, and completions of the tasks the actor spawned.
pub(crate) enum AgentMsg {
    // --- requests ---------------------------------------------------------------------------
    /// Start a root run (API, CLI, embedding app).
    Start {
        input: String,
        channel: Channel,
        /// Who the run acts for (the HTTP layer's bearer check, or absent).
        identity: Identity,
        /// The starter's trace (an HTTP `traceparent`): the run's span becomes its child.
        trace: Option<consort_net::TraceContext>,
        /// The request's tree budget (it narrows the agent's `limits.tree`).
        budget: Option<consort_core::TreeLimits>,
        reply: RpcReplyPort<Result<RunRecord, ActorsError>>,
    },
    /// A request someone the host checked made of run `run` (a decision on a gate, a
    /// cancel: see [`AgentMsg::decide`], [`AgentMsg::cancel`]): the machine's input, and who
    /// waits for its verdict.
    Request {
        run: RunId,
        input: Box<Input>,
        asker: Asker,
    },
    /// A peer's (or an operator's) message: into one of this agent's runs, or a new run.
    Deliver {
        /// The sending agent, or `operator`.
        from: String,
        /// The run it goes into; `None` for a new run with channel `delivery:<from>`.
        run: Option<RunId>,
        /// The sender's idempotency key.
        delivery_id: String,
        /// The message.
        text: String,
        /// The receipt, once what it wrote is committed.
        reply: RpcReplyPort<consort_core::directory::Receipt>,
    },
    /// The agent's config changed (re-read agent.yaml).
    Config(Box<AgentConfig>),
    /// Fold the WAL into the database (timer); report to the supervisor if the agent has
    /// been idle for its idle time.
    Checkpoint,
    /// The supervisor retires the actor if it is still idle: answered `true`, the actor has
    /// let its store go and stops; `false`, it has work again and stays.
    Retire(RpcReplyPort<bool>),

    // --- the call protocol --------------------------------------------------------------------
    /// A call from a peer, already routed by the supervisor.
    Accept {
        envelope: CallEnvelope,
        reply: RpcReplyPort<CallOutcome>,
    },
    /// A peer's reply to a call one of this agent's runs placed.
    Reply(ReplyEnvelope),
    /// A reply from another host; `taken` says whether it answers a call a run placed.
    OfferReply {
        reply: ReplyEnvelope,
        taken: RpcReplyPort<bool>,
    },
    /// Send the reply of a settled child run again (a caller recovering after a restart).
    ResendReply(RunId),

    // --- the engine -----------------------------------------------------------------------------
    /// Resume a run after a restart: ask again for its lost replies, then move it forward.
    Resume(RunId),
    /// An input for run `run` from a task this actor spawned: a placed call's outcome
    /// (`Input::CallEnded`), a tool use's result (`Input::ToolFinished`: a tool, `check_run`, a
    /// directory tool).
    TaskDone { run: RunId, input: Box<Input> },
    /// A blocking call's wait is over.
    WaitElapsed { run: RunId, tool_use_id: String },
    /// A model's answer for a turn asked for on a separate task.
    ModelDone {
        run: RunId,
        asked: Box<TurnAsked>,
        result: Result<ModelReply, ModelError>,
    },
    /// The store writer committed a job of this actor (or failed to).
    Committed(Box<crate::store::Committed>),
    /// What the agent's MCP servers listed (or why they could not), by entry name.
    ToolsListed(Vec<crate::tools::Listed>),
}

impl AgentMsg {
    /// A decision on a gate of run `run` (the one named, else the one waiting), and who made
    /// it; `reply` gets the run as committed with the gate decided, or the refusal.
    pub(crate) fn decide(
        run: RunId,
        (gate, decision, by): (Option<String>, Decision, String),
        reply: RpcReplyPort<Result<Decided, ActorsError>>,
    ) -> Self {
        let input = Input::Decide {
            run: run.clone(),
            gate,
            decision,
            by,
        };
        let asker = Asker::Decide(reply);
        Self::Request {
            run,
            input: Box::new(input),
            asker,
        }
    }

    /// A cancel of run `run` by `by`, and why; `reply` gets the run as committed, or the
    /// refusal.
    pub(crate) fn cancel(
        run: RunId,
        (by, reason): (String, Option<String>),
        reply: RpcReplyPort<Result<RunRecord, ActorsError>>,
    ) -> Self {
        let input = Input::Cancel {
            run: run.clone(),
            by,
            reason,
        };
        let asker = Asker::Run(reply);
        Self::Request {
            run,
            input: Box::new(input),
            asker,
        }
    }

    /// A tool use's result from its task: `content` is what the model reads, recorded under
    /// `name` (`invoke_tool` for a use through it); it counts as a tool call.
    pub(super) fn tool_done(
        run: RunId,
        tool_use_id: String,
        name: String,
        (content, is_error): (String, bool),
    ) -> Self {
        let input = Input::ToolFinished {
            tool_use_id,
            name,
            content,
            is_error,
            counts: true,
        };
        Self::TaskDone {
            run,
            input: Box::new(input),
        }
    }
}
