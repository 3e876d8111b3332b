//! Replies from callees: whether one answers a call this run placed, what taking it writes,
//! how much of its text the run keeps, and asking again for replies after a restart.
//!
//! [`take_reply`] gives every reply a [`Verdict`]: taken (or a duplicate of one taken), held
//! because it beat its call's acceptance, or dropped with the reason. Across hosts the link
//! glue answers the sender from that verdict, so a new case here is a protocol change. This
//! module must not decide anything about placing calls; it reads what `call` recorded.

use super::effect::{Effect, Step, Verdict};
use super::input::ReplyIn;
use super::transition::Transition;
use super::{CALL_AGENT, settled};
use crate::event::{ReplyOutcome, ReplyReceived};
use crate::{RunEvent, RunId, RunStatus, RunView};

/// Whether a reply answers a call this run placed, and what taking it writes.
pub(super) fn take_reply(view: &RunView, reply: ReplyIn, placing: bool, cap: usize) -> Step {
    let Some(call) = view.calls.get(&reply.child_run) else {
        let expected = view.call_uses.get(&reply.tool_use_id) == Some(&reply.callee)
            && RunId::child_of(&reply.parent_run, &reply.tool_use_id) == reply.child_run;
        if expected && settled(view) {
            // A call whose placement had not been recorded when the run settled (a cancel):
            // the run's log is final, so there is nothing to hold it for; the sender stops.
            return Step::verdict(Verdict::Taken);
        }
        if expected && placing {
            return Step::verdict(Verdict::Hold);
        }
        return Step::verdict(Verdict::Dropped("a call this run never placed"));
    };
    if call.agent != reply.callee {
        return Step::verdict(Verdict::Dropped("an agent the call was not placed to"));
    }
    if call.replied || settled(view) {
        return Step::verdict(Verdict::Taken);
    }
    let output = cap_output(&reply.output, cap);
    // A blocking call still inside its turn: the reply is that tool use's result.
    let in_turn = !view.resolved.contains(&call.tool_use_id);
    let mut write = Transition::empty().event(RunEvent::ReplyReceived(ReplyReceived {
        child_run: reply.child_run,
        agent: reply.callee,
        status: reply.outcome,
        output: output.clone(),
        in_turn,
        tree_cost: reply.tree_cost,
        tree_spent: reply.tree_spent,
    }));
    write.descendants = reply.tree_cost;
    if in_turn {
        let failed = reply.outcome == ReplyOutcome::Failed;
        write = write.event(RunEvent::tool_result(
            &call.tool_use_id,
            CALL_AGENT,
            &output,
            failed,
        ));
    }
    if view.status == Some(RunStatus::Waiting) {
        write = write.with_status(RunStatus::Running);
    }
    Step {
        write: Some(write),
        effects: vec![Effect::Advance],
        verdict: Verdict::Taken,
    }
}

/// After a restart: ask again for every reply the run still waits on (one may have been lost
/// with the host), then let the run move on.
pub(super) fn resume(view: &RunView) -> Step {
    if settled(view) {
        return Step::default();
    }
    let ask: Vec<(String, RunId)> = view
        .unreplied()
        .map(|(child, call)| (call.agent.clone(), child.clone()))
        .collect();
    let mut effects = Vec::new();
    if !ask.is_empty() {
        effects.push(Effect::AskReplies(ask));
    }
    effects.push(Effect::Advance);
    Step::effects(effects)
}

/// Room left for the truncation marker, so a text the callee's host already capped passes the
/// caller's host unchanged instead of being cut (and marked) twice.
const MARKER_ROOM: usize = 128;

/// Caps a reply's text at `cap` bytes (on a char boundary) with a visible marker.
pub fn cap_output(text: &str, cap: usize) -> String {
    if text.len() <= cap + MARKER_ROOM {
        return text.to_owned();
    }
    let mut end = cap.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[… output truncated: {} of {} bytes shown]",
        &text[..end],
        end,
        text.len()
    )
}
