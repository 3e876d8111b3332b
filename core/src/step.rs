//! The run state machine: given what a run's log says and what just happened, what to write
//! and what to do.
//!
//! [`step`] is the one place that decides how a run moves: when its model is asked, how each
//! tool use of a turn is resolved (a call placed or refused, a `check_run` answered, a tool
//! handed to the agent), when it waits, settles or blocks, which replies it takes, and what an
//! operator's decision does. It reads a [`RunView`] and an [`Input`] and returns a [`Step`]:
//! at most one [`Transition`] to append (one transaction) and the [`Effect`]s to execute after
//! it is durable. Agent actors only execute steps; the fleet simulation drives the same
//! function with a seeded scheduler.
//!
//! Like the rest of this crate it performs no I/O and reads no clock; facts that live outside
//! the log (which tool uses have a task out, the fleet's agents, the limits) come in as
//! arguments.
//!
//! Each concern is a child module: what a step is told (`input`) and returns (`effect`,
//! `transition`), a run's own pace through model turns (`turn`), the tool uses of a turn
//! (`resolve`), the loop guard over repeated tool uses (`repeat`), placing calls (`call`),
//! taking replies (`reply`), taking a peer's delivered message (`deliver`), the approval gate
//! (`gate`) and canceling a run (`cancel`). This module only routes an [`Input`] to the one
//! that handles it; a rule added here instead of in its module would be a second place to
//! look for it.

mod call;
mod cancel;
mod deliver;
mod effect;
mod gate;
mod input;
mod repeat;
mod reply;
mod resolve;
mod transition;
mod turn;

use crate::event::MessageReceived;
use crate::{RunStatus, RunView};

pub use call::accepted_text;
pub use cancel::canceled_error;
pub use effect::{Effect, Step, Verdict};
pub use gate::{Decision, Gate, GatedUse, approval_gate, gate_id, waiting_request};
pub use input::{CallOutcome, Input, ModelAnswer, Policy, ReplyIn, TurnAsked};
pub use reply::cap_output;
pub use transition::{CostDelta, Transition};

/// The built-in tool that places a call.
pub const CALL_AGENT: &str = "call_agent";
/// The built-in tool that reads a call's run.
pub const CHECK_RUN: &str = "check_run";

/// Decides what a run does next. See the module docs.
pub fn step(view: &RunView, input: Input, policy: &Policy<'_>) -> Step {
    match input {
        Input::Advance { busy, thinking } => turn::advance(view, &busy, thinking, policy),
        Input::ModelAnswered { asked, answer } => turn::model_answered(view, asked, answer, policy),
        Input::ToolFinished {
            tool_use_id,
            name,
            content,
            is_error,
            counts,
        } => resolve::tool_finished(view, &tool_use_id, &name, &content, is_error, counts),
        Input::CallEnded {
            tool_use_id,
            callee,
            outcome,
        } => call::call_ended(view, &tool_use_id, &callee, outcome),
        Input::Reply { reply, placing } => {
            reply::take_reply(view, reply, placing, policy.reply_cap)
        }
        Input::Decide {
            run,
            gate,
            decision,
            by,
        } => gate::decide(view, &run, gate.as_deref(), decision, &by),
        Input::Cancel { run, by, reason } => cancel::cancel(view, &run, by, reason),
        Input::WaitElapsed { tool_use_id } => call::wait_elapsed(view, &tool_use_id),
        Input::Resume => reply::resume(view),
        Input::ToolAuthorized {
            run,
            tool_use_id,
            result_name,
            tool,
            input,
            gated,
            requester_may_decide,
            started_here,
        } => gate::authorized(
            view,
            &GatedUse {
                run: &run,
                tool_use_id: &tool_use_id,
                result_name: &result_name,
                tool: &tool,
                input: &input,
                gated,
                requester_may_decide,
                started_here,
            },
        ),
        Input::Deliver {
            run,
            from,
            delivery_id,
            digest,
            text,
        } => deliver::receive(
            view,
            &run,
            MessageReceived {
                from,
                delivery_id,
                digest,
                text,
            },
        ),
    }
}

/// Whether the run has settled: every handler checks it first, since a settled run's log is
/// final and a late input must write nothing.
fn settled(view: &RunView) -> bool {
    view.status.is_some_and(RunStatus::is_settled)
}

#[cfg(test)]
mod tests;
