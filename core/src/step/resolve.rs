//! The tool uses of a model turn: which are decided from the log at once, which go out as
//! effects, and what a finished one writes.
//!
//! [`resolve_tool_uses`] walks the last turn's open tool uses in order. A use the loop guard
//! stops (`repeat`) is answered with its refusal whatever the tool. A `call_agent` is
//! checked by `call` (placed or refused), a `check_run` goes out as [`Effect::CheckRun`] or,
//! naming a run this run never placed, is answered on the spot, and any other tool goes to the
//! agent as [`Effect::UseTool`]. This
//! module must not authorize or run a tool: the agent does that, then reports back with
//! [`tool_finished`].

use std::collections::BTreeSet;

use serde_json::Value;

use super::call::{CallDecision, place_call};
use super::effect::{Effect, Step};
use super::input::Policy;
use super::repeat::refused_repeat;
use super::transition::{CostDelta, Transition};
use super::{CALL_AGENT, CHECK_RUN, settled};
use crate::{RunId, RunView, ToolUse};

/// The last turn's tool uses that lack a result, resolved in order: what can be decided from
/// the log is written (in one transaction), the rest goes out as effects.
pub(super) fn resolve_tool_uses(
    view: &RunView,
    unresolved: &[ToolUse],
    busy: &BTreeSet<String>,
    policy: &Policy<'_>,
) -> Step {
    let mut write = Transition::empty();
    let mut effects = Vec::new();
    // Calls being placed count against the cap too: a turn may place many at once.
    let mut placing = busy
        .iter()
        .filter(|tu| view.call_uses.contains_key(*tu) && view.call_by_tool_use(tu).is_none())
        .count() as u64;
    let mut out = busy.iter().any(|tu| unresolved.iter().any(|u| &u.id == tu));
    for tool_use in unresolved {
        if busy.contains(&tool_use.id) {
            continue;
        }
        // A call of a turn that decided its calls was let through by the loop guard then.
        let decided = tool_use.name == CALL_AGENT && view.last_turn_decided_calls;
        if !decided && let Some(refused) = refused_repeat(view, tool_use, policy) {
            write.merge(refused);
            continue;
        }
        match tool_use.name.as_str() {
            CALL_AGENT => match place_call(view, tool_use, placing, policy) {
                CallDecision::Write(t) => write.merge(t),
                CallDecision::Place { callee, input } => {
                    placing += 1;
                    out = true;
                    effects.push(Effect::PlaceCall {
                        tool_use_id: tool_use.id.clone(),
                        callee,
                        input,
                        allowance: view.budget.and(view.allowances.get(&tool_use.id).copied()),
                    });
                }
            },
            CHECK_RUN => {
                let asked = tool_use
                    .input
                    .get("run_id")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let known = RunId::parse(asked)
                    .ok()
                    .and_then(|child| view.calls.get(&child).map(|c| (child, c.agent.clone())));
                match known {
                    Some((child, callee)) => {
                        out = true;
                        effects.push(Effect::CheckRun {
                            tool_use_id: tool_use.id.clone(),
                            child,
                            callee,
                        });
                    }
                    None => {
                        let text = format!(
                            "unknown run `{}`: check_run only knows runs this run placed",
                            asked.chars().take(80).collect::<String>()
                        );
                        write.merge(Transition::tool_result(
                            &tool_use.id,
                            CHECK_RUN,
                            &text,
                            true,
                        ));
                    }
                }
            }
            _ => {
                out = true;
                effects.push(Effect::UseTool(tool_use.clone()));
            }
        }
    }
    if !out {
        // Everything this turn asked is decided: the run moves on once it is written.
        effects.push(Effect::Advance);
    }
    if write.events.is_empty() {
        Step::effects(effects)
    } else {
        Step::write(write, effects)
    }
}

/// A tool use that went out has its result; `counts` says whether it adds to the run's tool
/// calls.
pub(super) fn tool_finished(
    view: &RunView,
    tool_use_id: &str,
    name: &str,
    content: &str,
    is_error: bool,
    counts: bool,
) -> Step {
    // A late result (the run settled, or the use was resolved meanwhile) writes nothing.
    if settled(view) || view.resolved.contains(tool_use_id) {
        return Step::default();
    }
    let cost = CostDelta {
        tool_calls: u64::from(counts),
        ..CostDelta::default()
    };
    Step::write(
        Transition::tool_result(tool_use_id, name, content, is_error).with_cost(cost),
        vec![Effect::Advance],
    )
}
