//! What a step returns: the [`Step`] with its one [`Transition`] to append, the [`Effect`]s to
//! execute once that is durable, and the [`Verdict`] for whoever asked.
//!
//! Plain data: the sibling modules decide what goes in, and the agent actor (or the
//! simulation) executes it. An effect names work to do; its result comes back as a new
//! [`Input`](super::Input), never by changing a step already returned, so nothing here may
//! hold behaviour.

use super::input::TurnAsked;
use super::transition::Transition;
use crate::{Refusal, RunId, ToolUse, TreeBudget};

/// What to do once a step's transition is durable.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Step the run again with [`Input::Advance`](super::Input::Advance): it can move further
    /// on its own.
    Advance,
    /// Ask the model for a turn.
    AskModel(TurnAsked),
    /// Place a call (build the envelope, hand it to the supervisor); answer with
    /// [`Input::CallEnded`](super::Input::CallEnded).
    PlaceCall {
        /// The `call_agent` tool use.
        tool_use_id: String,
        /// The callee.
        callee: String,
        /// What the callee is asked.
        input: String,
        /// The call's share of the run's tree budget, for its hop (`None`: the run has none).
        allowance: Option<TreeBudget>,
    },
    /// Read a call's run; answer with [`Input::ToolFinished`](super::Input::ToolFinished).
    CheckRun {
        /// The `check_run` tool use.
        tool_use_id: String,
        /// The call's child run.
        child: RunId,
        /// The callee.
        callee: String,
    },
    /// Keep a blocking call's tool use open (it counts as busy) until its reply arrives or
    /// `wait_s` seconds pass; then answer with
    /// [`Input::WaitElapsed`](super::Input::WaitElapsed).
    AwaitReply {
        /// The `call_agent` tool use.
        tool_use_id: String,
        /// How long to wait, in seconds.
        wait_s: u32,
    },
    /// A declared tool or a meta-tool: the agent authorizes and runs it (through
    /// [`approval_gate`](super::approval_gate) for a gated tool) and answers with
    /// [`Input::ToolFinished`](super::Input::ToolFinished).
    UseTool(ToolUse),
    /// Run an authorized tool use that its gate let through (a task of its own); answer with
    /// [`Input::ToolFinished`](super::Input::ToolFinished).
    RunTool {
        /// The tool use.
        tool_use_id: String,
        /// The tool.
        tool: String,
        /// The name its result is recorded under.
        result_name: String,
        /// Its input.
        input: serde_json::Value,
    },
    /// Ask each callee to send the reply of a settled child again.
    AskReplies(Vec<(String, RunId)>),
    /// The run settled: tell whoever waits (a delegated run's reply goes back to its caller).
    Settled,
}

/// A decision that answers the one who asked, beside what is written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to answer.
    #[default]
    None,
    /// A reply was taken (or was a duplicate of one taken before).
    Taken,
    /// A reply beat its call's acceptance: hold it, and offer it again once the call ends.
    Hold,
    /// A reply this run does not wait on, and why.
    Dropped(&'static str),
    /// The request was refused.
    Refused(Refusal),
    /// A decision decided `gate` (`already` when that gate had this decision before: a
    /// repeat, nothing written).
    Decided {
        /// The gate's id.
        gate: String,
        /// A repeat of the decision the gate already had.
        already: bool,
    },
    /// A delivered message is in the run's log at `seq` (`existing` when it was there
    /// already: a repeat of the same delivery, nothing written).
    Delivered {
        /// The seq of its `message_received` event.
        seq: u64,
        /// The delivery was taken before.
        existing: bool,
    },
}

/// What [`step`](super::step()) decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    /// What to append, in one transaction.
    pub write: Option<Transition>,
    /// What to do after it is durable, in order.
    pub effects: Vec<Effect>,
    /// The answer to whoever asked (a reply's sender, an operator).
    pub verdict: Verdict,
}

impl Step {
    pub(super) fn write(transition: Transition, effects: Vec<Effect>) -> Self {
        Self {
            write: Some(transition),
            effects,
            verdict: Verdict::None,
        }
    }

    pub(super) fn effects(effects: Vec<Effect>) -> Self {
        Self {
            effects,
            ..Self::default()
        }
    }

    pub(super) fn verdict(verdict: Verdict) -> Self {
        Self {
            verdict,
            ..Self::default()
        }
    }
}
