//! The loop guard: a model that uses the same tool with the same input turn after turn.
//!
//! A use whose turn is the `limits.max_repeats`-th in a row with an equal use (same name, equal
//! JSON input) is not run: [`refused_repeat`] answers it with [`Refusal::RepeatedToolUse`],
//! which the model reads. A turn past that (the model repeated it once more after reading the
//! refusal) fails the run ([`over_repeated`]). The count is the view's (`RunView::repeats`),
//! folded from the log, so a restarted host decides the same. Every tool use counts: declared
//! tools, meta-tools, `check_run` and `call_agent` alike; this module must not look at what a
//! tool is.

use super::CALL_AGENT;
use super::call::refused_call;
use super::input::Policy;
use super::transition::Transition;
use crate::{Refusal, RunView, ToolUse};

/// The refusal of a use the guard stops, with the transition that records it; `None` when
/// the use may go on.
pub(super) fn refused_repeat(
    view: &RunView,
    tool_use: &ToolUse,
    policy: &Policy<'_>,
) -> Option<Transition> {
    let times = view.repeats_of(&tool_use.id);
    // A call recorded already was let through when it was placed; only its result is missing.
    if times < policy.limits.max_repeats || view.call_by_tool_use(&tool_use.id).is_some() {
        return None;
    }
    let refusal = Refusal::RepeatedToolUse {
        tool: tool_use.name.clone(),
        times,
    };
    Some(if tool_use.name == CALL_AGENT {
        // A call's refusal is recorded as every refused call is, with its code.
        let callee = tool_use
            .input
            .get("agent")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        refused_call(&tool_use.id, callee, refusal)
    } else {
        Transition::tool_result(&tool_use.id, &tool_use.name, &refusal.to_string(), true)
    })
}

/// The run's error when one of the last turn's open uses repeats a use the guard already
/// refused: the model read the refusal and did it again.
pub(super) fn over_repeated(
    view: &RunView,
    unresolved: &[ToolUse],
    policy: &Policy<'_>,
) -> Option<String> {
    let (tool_use, times) = unresolved
        .iter()
        .map(|u| (u, view.repeats_of(&u.id)))
        .find(|(_, times)| *times > policy.limits.max_repeats)?;
    let refusal = Refusal::RepeatedToolUse {
        tool: tool_use.name.clone(),
        times,
    };
    Some(format!("{}: {refusal}", refusal.code()))
}
