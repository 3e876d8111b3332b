//! The caller's side of a call: whether a `call_agent` use may be placed, what its placement's
//! end writes, and a blocking call's wait running out.
//!
//! A call is decided once, as the model turn naming it is recorded ([`decide_call`]: the
//! input's shape, then consent, depth and the call cap through [`guards::check_outbound`] with
//! the caller's current config, then the call's share of the tree budget,
//! [`budget::refused_call`]); a refusal is written with the turn. [`place_call`] then places
//! what was let through, again after a crash, without deciding it a second time: a placement
//! may have reached its callee before the crash, so deciding it again under a config reloaded
//! meanwhile could record as refused a call whose child runs.
//! [`call_ended`] records an accepted call (counting it in the run's cost) or a refused one.
//! This module must not take replies: a reply may beat its call's acceptance, and `reply`
//! alone decides what happens then.

use serde_json::{Value, json};

use super::effect::{Effect, Step};
use super::input::{CallOutcome, Policy};
use super::transition::{CostDelta, Transition};
use super::{CALL_AGENT, settled};
use crate::budget;
use crate::event::{CallPlaced, CallRefused};
use crate::guards::{self, OutboundFacts};
use crate::{ModelStep, Refusal, RunEvent, RunId, RunView, ToolUse};

/// What the caller decides about one `call_agent` use.
pub(super) enum CallDecision {
    Write(Transition),
    Place { callee: String, input: String },
}

/// The callee and the input a `call_agent` use names (empty when missing).
fn call_of(tool_use: &ToolUse) -> (String, String) {
    let text = |key: &str| {
        tool_use
            .input
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    (text("agent"), text("input"))
}

/// Whether the caller may place a `call_agent` use of the turn just recorded (`view` includes
/// it): the input's shape, then consent, depth and the cap with the caller's own current
/// config, then the call's share of the tree budget. `placing` counts the calls of the turn
/// let through before this one. `None` lets it through; a refusal is what to write.
pub(super) fn decide_call(
    view: &RunView,
    tool_use: &ToolUse,
    placing: u64,
    policy: &Policy<'_>,
) -> Option<Transition> {
    let (callee, input) = call_of(tool_use);
    if callee.is_empty() || input.trim().is_empty() {
        let refusal = Refusal::MalformedCall;
        return Some(Transition::tool_result(
            &tool_use.id,
            CALL_AGENT,
            &refusal.to_string(),
            true,
        ));
    }
    let facts = OutboundFacts {
        caller: policy.agent,
        callee: &callee,
        can_call: policy.can_call,
        fleet_agents: policy.fleet_agents,
        caller_depth: view.hop_depth as usize,
        calls_placed: view.calls_counted() + placing,
        limits: policy.limits,
    };
    if let Err(refusal) = guards::check_outbound(&facts) {
        return Some(refused_call(&tool_use.id, &callee, refusal));
    }
    // The tree budget last: a call the guards refuse is refused for what it is.
    budget::refused_call(view, &tool_use.id, policy.now_ms)
        .map(|refusal| refused_call(&tool_use.id, &callee, refusal))
}

/// The caller's side of an open `call_agent` use: a call recorded already only lacks its
/// result; a call of a turn that decided its calls as it was recorded is placed (it was let
/// through then, and a placement lost with a crash must go out again as decided, whatever the
/// config says by now: its child may exist); a call of an older log is decided now.
pub(super) fn place_call(
    view: &RunView,
    tool_use: &ToolUse,
    placing: u64,
    policy: &Policy<'_>,
) -> CallDecision {
    let (callee, input) = call_of(tool_use);
    if let Some((child, _)) = view.call_by_tool_use(&tool_use.id) {
        // Placed and recorded already; only the tool result is missing.
        return CallDecision::Write(Transition::tool_result(
            &tool_use.id,
            CALL_AGENT,
            &accepted_text(child, &callee),
            false,
        ));
    }
    if !view.last_turn_decided_calls
        && let Some(refused) = decide_call(view, tool_use, placing, policy)
    {
        return CallDecision::Write(refused);
    }
    CallDecision::Place { callee, input }
}

pub(super) fn refused_call(tool_use_id: &str, callee: &str, refusal: Refusal) -> Transition {
    let text = refusal.to_string();
    Transition::empty()
        .event(RunEvent::CallRefused(CallRefused {
            tool_use_id: tool_use_id.to_owned(),
            agent: callee.to_owned(),
            code: refusal.code().to_owned(),
            reason: text.clone(),
            refusal: Some(refusal),
        }))
        .event(RunEvent::tool_result(tool_use_id, CALL_AGENT, &text, true))
}

/// What the model reads when its call was accepted.
pub fn accepted_text(child: &RunId, callee: &str) -> String {
    json!({
        "run_id": child, "agent": callee, "status": "accepted",
        "note": format!("the answer will arrive as a [reply from {callee}] message; check_run polls it meanwhile"),
    })
    .to_string()
}

pub(super) fn call_ended(
    view: &RunView,
    tool_use_id: &str,
    callee: &str,
    outcome: CallOutcome,
) -> Step {
    if settled(view) || view.resolved.contains(tool_use_id) {
        return Step::default();
    }
    match outcome {
        CallOutcome::Accepted {
            child_run,
            existing,
        } => {
            let wait_s = wait_of(view, tool_use_id);
            let mut write = Transition::empty()
                .event(RunEvent::CallPlaced(CallPlaced {
                    tool_use_id: tool_use_id.to_owned(),
                    agent: callee.to_owned(),
                    child_run: child_run.clone(),
                    existing,
                }))
                .with_cost(CostDelta {
                    calls_placed: 1,
                    ..CostDelta::default()
                });
            if wait_s.is_none() {
                write = write.event(RunEvent::tool_result(
                    tool_use_id,
                    CALL_AGENT,
                    &accepted_text(&child_run, callee),
                    false,
                ));
            }
            let mut effects = Vec::new();
            if existing {
                // A replayed call: its reply may have been sent (and lost) before.
                effects.push(Effect::AskReplies(vec![(callee.to_owned(), child_run)]));
            }
            if let Some(wait_s) = wait_s {
                // A blocking call: the turn stays open until the reply or the timeout.
                effects.push(Effect::AwaitReply {
                    tool_use_id: tool_use_id.to_owned(),
                    wait_s,
                });
            }
            effects.push(Effect::Advance);
            Step::write(write, effects)
        }
        CallOutcome::Refused(refusal) => Step::write(
            refused_call(tool_use_id, callee, refusal),
            vec![Effect::Advance],
        ),
    }
}

/// How long the `call_agent` use `tool_use_id` of the last turn keeps its turn open, if it
/// asked to (see [`ToolUse::wait_s`]).
fn wait_of(view: &RunView, tool_use_id: &str) -> Option<u32> {
    let Some((_, ModelStep::ToolUses(uses))) = &view.last_turn else {
        return None;
    };
    uses.iter().find(|u| u.id == tool_use_id)?.wait_s()
}

/// A blocking call's wait is over without a reply: the model reads that the run goes on.
pub(super) fn wait_elapsed(view: &RunView, tool_use_id: &str) -> Step {
    if settled(view) || view.resolved.contains(tool_use_id) {
        return Step::default();
    }
    let Some((child, call)) = view.call_by_tool_use(tool_use_id) else {
        return Step::default();
    };
    let text = json!({
        "run_id": child, "agent": call.agent, "status": "still_running",
        "note": format!("no answer within the wait; it will arrive as a [reply from {}] message; check_run polls it meanwhile", call.agent),
    })
    .to_string();
    Step::write(
        Transition::tool_result(tool_use_id, CALL_AGENT, &text, false),
        vec![Effect::Advance],
    )
}
