//! The approval gate: a gated tool's use runs only once an operator approved it.

use serde_json::Value;

use super::Transition;
use crate::event::ApprovalRequested;
use crate::view::ApprovalState;
use crate::{RunEvent, RunStatus, RunView};

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
pub fn approval_gate(
    view: &RunView,
    tool_use_id: &str,
    result_name: &str,
    tool: &str,
    input: &Value,
    gated: bool,
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
