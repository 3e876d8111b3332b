//! The approval gate: a gated tool's use runs only once an operator approved it.
//!
//! Both halves live here: [`approval_gate`], which parks the run on a gated use (the agent
//! asks it before running one), and the operator's decision that lets the run move again
//! (`decide`, reached through [`Input::Decide`](super::Input::Decide)). Which tools are gated
//! is the agent's config; this module only reads the flag it is handed.

use serde_json::Value;

use super::effect::{Effect, Step, Verdict};
use super::transition::Transition;
use crate::event::{ApprovalDecided, ApprovalRequested};
use crate::view::ApprovalState;
use crate::{Refusal, RunEvent, RunId, RunStatus, RunView};

/// What the approval gate of a gated tool says about one use.
#[derive(Clone, Debug, PartialEq)]
pub enum Gate {
    /// Approved (or not gated): run it.
    Proceed,
    /// Park the run until an operator decides (write this).
    Block(Transition),
    /// The operator denied it: the model reads this result (write this).
    Denied(Transition),
}

/// The approval gate: a gated tool's use runs only once an operator approved it.
/// `requester_may_decide` is recorded with the request (the tool's `approval: requester`): who
/// may decide is fixed when the run blocks, not when someone decides.
pub fn approval_gate(
    view: &RunView,
    tool_use_id: &str,
    result_name: &str,
    tool: &str,
    input: &Value,
    gated: bool,
    requester_may_decide: bool,
) -> Gate {
    if !gated {
        return Gate::Proceed;
    }
    match view.approvals.get(tool_use_id) {
        None => Gate::Block(
            Transition::default()
                .event(RunEvent::ApprovalRequested(ApprovalRequested {
                    tool_use_id: tool_use_id.to_owned(),
                    tool: tool.to_owned(),
                    input: input.clone(),
                    requester_may_decide,
                }))
                .status(RunStatus::Blocked),
        ),
        Some(ApprovalState::None) => Gate::Block(Transition::default().status(RunStatus::Blocked)),
        Some(Some(false)) => Gate::Denied(Transition::tool_result(
            tool_use_id,
            result_name,
            &format!("the operator denied the use of `{tool}`"),
            true,
        )),
        Some(Some(true)) => Gate::Proceed,
    }
}

/// A decision, made `by` someone the host checked, on the gated use a blocked run waits on;
/// a run that waits on none refuses it.
pub(super) fn decide(view: &RunView, run: &RunId, approve: bool, by: &str) -> Step {
    let asked = view
        .approvals
        .iter()
        .find(|(_, decision)| decision.is_none())
        .map(|(id, _)| id.clone());
    let status = view.status.unwrap_or(RunStatus::Queued);
    let (RunStatus::Blocked, Some(tool_use_id)) = (status, asked) else {
        return Step::verdict(Verdict::Refused(Refusal::NotAwaitingApproval {
            run: run.to_string(),
            status: status.to_string(),
        }));
    };
    Step::write(
        Transition::default()
            .event(RunEvent::ApprovalDecided(ApprovalDecided {
                tool_use_id,
                approved: approve,
                by: by.to_owned(),
            }))
            .status(RunStatus::Running),
        vec![Effect::Advance],
    )
}
