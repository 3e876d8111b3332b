//! A run's own pace: whether it asks its model for a turn, waits, or settles, and what a
//! model's answer writes.
//!
//! [`advance`] is what a run does when nothing new arrived: it hands a turn's open tool uses to
//! `resolve` (or fails the run when one repeats a use the loop guard refused already,
//! `repeat`), waits while calls are out, and before asking the model again enforces the turn
//! limit (`limits.max_turns`), the token budget (`limits.max_tokens`) and the tree budget
//! (`budget::before_turn`). [`model_answered`] records a turn (with its cost, its tokens and,
//! under a tree budget, the allowance of each call it asks for), rejects one that reuses
//! tool-use ids, and has the turn's calls decided as it is recorded (by `call`, with the loop
//! guard first): a refused call's refusal is written with the turn, and a call let through is
//! placed as decided, after a crash too. Neither may place calls or take replies itself: those
//! belong to `call` and `reply`, so a rule about them lives in one place only.
//!
//! # A turn is recorded when it is asked
//!
//! The step that asks the model (`Effect::AskModel`) also writes the ask: a
//! `model_turn_started` event, with a `queued` run's move to `running` before it in the same
//! transaction. A run is therefore `running` from the moment its model is first asked, however
//! long that turn takes, and a slow turn shows in the log while the model thinks. The effect
//! does not wait for that write's commit: asking a model lets nothing out of the host that the
//! log would have to remember. The answer's `model_turn` never moves the status from `queued`:
//! the ask did.
//!
//! The write is left out where it would tell nobody anything: a model that answers at once
//! (`Policy::immediate_model`, the script model) is asked and answered within one drive of the
//! run (once the agent's MCP servers have listed their tools, when a listing is due), so its
//! started turn would hardly ever be seen before its answer. Such a turn after the run's first
//! writes only its `model_turn`: the benchmarks' script runs take several turns, and each keeps
//! one append. A run's first turn is recorded whatever the model: every run moves to `running`
//! in one place, and every log shows when its run began to think, at the cost of one more event
//! per run of an immediate model, committed in the same batch as its first `model_turn` when
//! the writer groups them.

use std::collections::BTreeSet;

use super::CALL_AGENT;
use super::call::decide_call;
use super::effect::{Effect, Step};
use super::input::{ModelAnswer, Policy, TurnAsked};
use super::repeat::{over_repeated, refused_repeat};
use super::resolve::resolve_tool_uses;
use super::settled;
use super::transition::{CostDelta, Transition};
use crate::budget::{self, BeforeTurn};
use crate::event::{ModelTurn, ModelTurnStarted};
use crate::{ModelStep, RunEvent, RunStatus, RunView, ToolUse};

/// Moves the run as far as it goes on its own; `busy` and `thinking` say what is already out.
pub(super) fn advance(
    view: &RunView,
    busy: &BTreeSet<String>,
    thinking: bool,
    policy: &Policy<'_>,
) -> Step {
    let status = view.status.unwrap_or(RunStatus::Queued);
    if status.is_settled() || status == RunStatus::Blocked {
        return Step::default();
    }
    let unresolved = view.unresolved_tool_uses();
    // A fresh run goes straight to its first model turn; its move to `running` is written with
    // that turn's ask rather than in a transaction of its own.
    if status == RunStatus::Queued && (!unresolved.is_empty() || !view.needs_model()) {
        return Step::write(
            Transition::empty().with_status(RunStatus::Running),
            vec![Effect::Advance],
        );
    }
    if !unresolved.is_empty() {
        if let Some(error) = over_repeated(view, &unresolved, policy) {
            return settle(Err(error));
        }
        return resolve_tool_uses(view, &unresolved, busy, policy);
    }
    let pending = view.pending_calls();
    if !view.needs_model() {
        if pending > 0 {
            if status == RunStatus::Waiting {
                return Step::default();
            }
            return Step::write(Transition::empty().with_status(RunStatus::Waiting), vec![]);
        }
        return settle(Err(
            "the model is waiting but no calls are outstanding".into()
        ));
    }
    if let Some(error) = spent(view, policy) {
        return settle(Err(error));
    }
    match budget::before_turn(view, policy.now_ms) {
        BeforeTurn::Ask => {}
        BeforeTurn::Spent(error) => return settle(Err(error)),
        // Its tokens are handed out to calls still out: their replies give back the rest.
        BeforeTurn::Wait if status == RunStatus::Waiting => return Step::default(),
        BeforeTurn::Wait => {
            return Step::write(Transition::empty().with_status(RunStatus::Waiting), vec![]);
        }
    }
    if thinking {
        // A turn is already being asked for; its answer will advance the run.
        return Step::default();
    }
    let ask = vec![Effect::AskModel(TurnAsked {
        pending,
        seen_seq: view.last_seq,
        seen_tool_uses: view.seen_tool_uses.clone(),
    })];
    // See the module docs: only a later turn of a model that answers at once goes unrecorded.
    if status != RunStatus::Queued && policy.immediate_model {
        return Step::effects(ask);
    }
    let started = Transition {
        start: true,
        ..Transition::empty()
    }
    .event(RunEvent::ModelTurnStarted(ModelTurnStarted {
        turn: view.model_turns + 1,
    }));
    Step::write(started, ask)
}

/// Why the run may not ask its model again, when it may not: it took its turns, or its turns
/// used its token budget.
fn spent(view: &RunView, policy: &Policy<'_>) -> Option<String> {
    let limits = &policy.limits;
    if view.model_turns >= u64::from(limits.max_turns) {
        return Some(turn_limit_error(limits.max_turns));
    }
    match limits.max_tokens {
        Some(budget) if view.tokens >= budget => Some(budget_error(view.tokens, budget)),
        _ => None,
    }
}

/// How a run that took its turns fails.
pub(super) fn turn_limit_error(limit: u32) -> String {
    format!(
        "model turn limit ({limit}) reached (limits.max_turns): the model took that many turns without answering; raise the limit in agent.yaml if the task needs more turns"
    )
}

/// How a run whose turns used its token budget fails (the error's stable code first).
pub(super) fn budget_error(used: u64, budget: u64) -> String {
    format!(
        "budget_exhausted: this run used {used} tokens of its {budget}-token budget (limits.max_tokens)"
    )
}

/// The `call_agent` uses of a turn being recorded (`turn`), decided now: what refuses them
/// (written with the turn). A call decided once is placed as decided, after a crash too (see
/// `call`). A use the loop guard refused already and the model repeated is left open: the
/// next step fails the run for it.
fn decide_calls(
    view: &RunView,
    turn: &Transition,
    uses: &[ToolUse],
    policy: &Policy<'_>,
) -> Transition {
    let mut refused = Transition::empty();
    if !uses.iter().any(|u| u.name == CALL_AGENT) {
        return refused;
    }
    // The calls are decided on the log the turn leaves (its allowances, its repeats).
    let mut after = view.clone();
    for event in turn.appended_events(view.status.unwrap_or(RunStatus::Queued)) {
        after.apply(&event);
    }
    let mut placing = 0;
    for tool_use in uses.iter().filter(|u| u.name == CALL_AGENT) {
        if after.repeats_of(&tool_use.id) > policy.limits.max_repeats {
            continue;
        }
        if let Some(t) = refused_repeat(&after, tool_use, policy) {
            refused.merge(t);
            continue;
        }
        match decide_call(&after, tool_use, placing, policy) {
            Some(t) => refused.merge(t),
            None => placing += 1,
        }
    }
    refused
}

fn settle(outcome: Result<String, String>) -> Step {
    Step::write(Transition::empty().settle(outcome), vec![Effect::Settled])
}

/// Records a model turn and what it decided. The run moved to `running` when the turn was
/// asked ([`advance`]), so the answer moves it only to where the turn leaves it.
pub(super) fn model_answered(
    view: &RunView,
    asked: TurnAsked,
    answer: Result<ModelAnswer, String>,
    policy: &Policy<'_>,
) -> Step {
    if settled(view) {
        return Step::default();
    }
    let answer = match answer {
        Ok(answer) => answer,
        Err(error) => return settle(Err(error)),
    };
    if let ModelStep::ToolUses(uses) = &answer.step {
        let mut fresh = BTreeSet::new();
        let reused = uses
            .iter()
            .any(|u| asked.seen_tool_uses.contains(&u.id) || !fresh.insert(u.id.as_str()));
        if uses.is_empty() || reused {
            return settle(Err(
                "the model emitted no tool uses or reused a tool-use id".into(),
            ));
        }
    }
    let turn = Transition {
        cost: CostDelta {
            model_turns: 1,
            input_tokens: answer.input_tokens,
            output_tokens: answer.output_tokens,
            ..CostDelta::default()
        },
        ..Transition::empty()
    }
    .event(RunEvent::ModelTurn(ModelTurn {
        allowances: budget::allowances(
            view,
            &answer.step,
            answer.input_tokens.saturating_add(answer.output_tokens),
        ),
        step: answer.step.clone(),
        pending_calls: asked.pending,
        seen_seq: Some(asked.seen_seq),
        input_tokens: answer.input_tokens,
        output_tokens: answer.output_tokens,
        calls_decided: true,
    }));
    match answer.step {
        // The turn and the settlement are one transaction.
        ModelStep::Answer(text) => Step::write(turn.settle(Ok(text)), vec![Effect::Settled]),
        ModelStep::ToolUses(uses) => {
            let refused = decide_calls(view, &turn, &uses, policy);
            let mut turn = turn;
            turn.merge(refused);
            Step::write(turn, vec![Effect::Advance])
        }
        // A reply (or a message) that arrived while the model thought is news it has not
        // read: `advance` asks again for it rather than wait on calls that may all be
        // answered by now.
        ModelStep::Wait if asked.pending > 0 => {
            Step::write(turn.with_status(RunStatus::Waiting), vec![Effect::Advance])
        }
        ModelStep::Wait => Step::write(
            turn.settle(Err("the model waited with no calls outstanding".into())),
            vec![Effect::Settled],
        ),
    }
}
