//! What a step is told: the [`Input`] that just happened to a run, with the facts it carries
//! (a model's answer, a call's outcome, a callee's reply) and the [`Policy`] of the agent's
//! current config.
//!
//! Plain data, built by whoever drives [`step`](super::step()): the agent actor on a host, the
//! fleet simulation in tests. Nothing here decides or reads the run's log; the decision is the
//! sibling modules' work, so these types must stay free of behaviour.

use std::collections::BTreeSet;

use consort_config::Limits;

use super::gate::Decision;
use super::transition::CostDelta;
use crate::event::ReplyOutcome;
use crate::{ModelStep, Refusal, RunId, TreeSpend};

/// What the agent's current config and host say, for one step.
#[derive(Clone, Copy, Debug)]
pub struct Policy<'a> {
    /// This agent.
    pub agent: &'a str,
    /// Its current `can_call`.
    pub can_call: &'a [String],
    /// Every agent of the fleet (local and remote), this one included.
    pub fleet_agents: &'a [String],
    /// Its current limits: the call guards, and the run's turn limit, token budget and loop
    /// guard.
    pub limits: Limits,
    /// Largest reply text taken into a run, in bytes.
    pub reply_cap: usize,
    /// The agent's model answers at once (the script model): its turns after a run's first
    /// are asked and answered within one drive, and record no `model_turn_started`.
    pub immediate_model: bool,
    /// The host's clock when the step is taken, Unix milliseconds: what a tree budget's
    /// deadline is compared with (this crate reads no clock).
    pub now_ms: u64,
}

/// What the engine knew when it asked the model for a turn; recorded with the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnAsked {
    /// Calls out when the model was asked.
    pub pending: usize,
    /// The last event the model's conversation included: anything newer (a reply that
    /// arrived while it thought) is news for the next turn.
    pub seen_seq: u64,
    /// Every tool-use id emitted before this turn (a new turn must not reuse one).
    pub seen_tool_uses: BTreeSet<String>,
}

/// A model's answer to one turn.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelAnswer {
    /// What it decided.
    pub step: ModelStep,
    /// Tokens it read, when it reports them.
    pub input_tokens: u64,
    /// Tokens it wrote, when it reports them.
    pub output_tokens: u64,
}

/// How a placed call ended on the callee's side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallOutcome {
    /// The callee stored the child run (`existing` when it already had it: a replay).
    Accepted {
        /// The child run.
        child_run: RunId,
        /// The callee already had it.
        existing: bool,
    },
    /// The call was refused (by either side, or by the link).
    Refused(Refusal),
}

/// A callee's reply, as it reaches the caller's agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyIn {
    /// The run that placed the call.
    pub parent_run: RunId,
    /// The child run that answers.
    pub child_run: RunId,
    /// The agent that answers.
    pub callee: String,
    /// The `call_agent` tool use the call was placed through.
    pub tool_use_id: String,
    /// How the child run ended.
    pub outcome: ReplyOutcome,
    /// Its answer or error.
    pub output: String,
    /// The child's tree cost (its own and its descendants').
    pub tree_cost: CostDelta,
    /// What the child's subtree spent of the tree budget it was handed (see
    /// [`budget`](crate::budget)); `None` when it ran without one.
    pub tree_spent: Option<TreeSpend>,
}

/// What just happened to a run.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// Move the run as far as it goes on its own (after it was stored, after a restart, after
    /// anything was written). `busy` names the tool uses that have a task out; `thinking` says
    /// a model turn is being asked.
    Advance {
        /// Tool uses of the last turn with a task out.
        busy: BTreeSet<String>,
        /// A model turn is being asked on another task.
        thinking: bool,
    },
    /// The model answered a turn (or failed).
    ModelAnswered {
        /// What the engine knew when it asked.
        asked: TurnAsked,
        /// The answer, or the model's error.
        answer: Result<ModelAnswer, String>,
    },
    /// A tool use (a declared tool, a meta-tool or `check_run`) has its result.
    ToolFinished {
        /// The tool use.
        tool_use_id: String,
        /// The name its result is recorded under.
        name: String,
        /// What the model reads.
        content: String,
        /// A refusal or failure.
        is_error: bool,
        /// Whether it counts as a tool call in the run's cost.
        counts: bool,
    },
    /// A call this run asked for was accepted or refused.
    CallEnded {
        /// The `call_agent` tool use.
        tool_use_id: String,
        /// The callee.
        callee: String,
        /// What happened.
        outcome: CallOutcome,
    },
    /// A callee replied. `placing` says the call's placement is still out (its acceptance
    /// may not have reached this run yet).
    Reply {
        /// The reply.
        reply: ReplyIn,
        /// The call's placement is still out.
        placing: bool,
    },
    /// An operator (or the run's requester, where the gate allows it) decided on a gate: the
    /// one named, or the one the run waits on.
    Decide {
        /// The run.
        run: RunId,
        /// The gate decided (its [`gate_id`](super::gate_id)); `None` decides the one waiting.
        gate: Option<String>,
        /// What was decided.
        decision: Decision,
        /// Who decided (a principal, or `operator` for a host's local operator): the gate's
        /// four-eyes rule compares it with the principal the run acts for.
        by: String,
    },
    /// Someone the host checked (the run's requester, or an operator) cancels the run: an
    /// unsettled run settles `failed` at once; a settled one refuses.
    Cancel {
        /// The run (named in a refusal, as [`Input::Decide`] names it).
        run: RunId,
        /// Who cancels (a principal, or `operator` for a host's local operator).
        by: String,
        /// Why, in the canceler's words.
        reason: Option<String>,
    },
    /// A blocking call's wait (its `wait_s`) is over.
    WaitElapsed {
        /// The `call_agent` tool use.
        tool_use_id: String,
    },
    /// The host restarted: ask again for every reply the run still waits on.
    Resume,
    /// The agent authorized a use of a declared tool (its guards and policies let the run's
    /// identity use it): the approval gate decides whether it runs now, waits for a decision,
    /// is recorded as started first, or was denied.
    ToolAuthorized {
        /// The run.
        run: RunId,
        /// The tool use.
        tool_use_id: String,
        /// The name its result is recorded under (`invoke_tool` for a use through it).
        result_name: String,
        /// The tool.
        tool: String,
        /// Its input.
        input: serde_json::Value,
        /// The tool's `approval:` gates it.
        gated: bool,
        /// The tool's `approval: requester`.
        requester_may_decide: bool,
        /// This incarnation recorded the use as started (the agent machine fills it in: only
        /// it knows).
        started_here: bool,
    },
    /// A peer delivered a message into this run. The runtime has checked consent and that
    /// the sender may deliver into this run before it builds this input.
    Deliver {
        /// The run delivered into (named in a refusal, as [`Input::Decide`] names it).
        run: RunId,
        /// The delivering agent.
        from: String,
        /// The sender's id for this delivery.
        delivery_id: String,
        /// The payload's digest (see [`payload_digest`](crate::directory::payload_digest)).
        digest: String,
        /// What the model reads.
        text: String,
    },
}
