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

mod gate;
mod transition;

use std::collections::BTreeSet;

use consort_config::Limits;
use serde_json::{Value, json};

use crate::event::{
    ApprovalDecided, CallPlaced, CallRefused, ModelTurn, ReplyOutcome, ReplyReceived,
};
use crate::guards::{self, OutboundFacts};
use crate::{ModelStep, Refusal, RunEvent, RunId, RunStatus, RunView, ToolUse};

pub use gate::{Gate, approval_gate};
pub use transition::{CostDelta, Transition};

/// The built-in tool that places a call.
pub const CALL_AGENT: &str = "call_agent";
/// The built-in tool that reads a call's run.
pub const CHECK_RUN: &str = "check_run";

/// What the agent's current config and host say, for one step.
#[derive(Clone, Copy, Debug)]
pub struct Policy<'a> {
    /// This agent.
    pub agent: &'a str,
    /// Its current `can_call`.
    pub can_call: &'a [String],
    /// Every agent of the fleet (local and remote), this one included.
    pub fleet_agents: &'a [String],
    /// Its current loop guards.
    pub limits: Limits,
    /// Most model turns one run may take.
    pub max_model_turns: u64,
    /// Largest reply text taken into a run, in bytes.
    pub reply_cap: usize,
}

/// What the engine knew when it asked the model for a turn; recorded with the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnAsked {
    /// The run is still `queued`: its move to `running` goes into the turn's transaction.
    pub starting: bool,
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
    /// An operator decided on the gated tool use the run waits on.
    Decide {
        /// The run.
        run: RunId,
        /// Approve (else deny).
        approve: bool,
    },
    /// A blocking call's wait (its `wait_s`) is over.
    WaitElapsed {
        /// The `call_agent` tool use.
        tool_use_id: String,
    },
    /// The host restarted: ask again for every reply the run still waits on.
    Resume,
}

/// What to do once a step's transition is durable.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Step the run again with [`Input::Advance`]: it can move further on its own.
    Advance,
    /// Ask the model for a turn.
    AskModel(TurnAsked),
    /// Place a call (build the envelope, hand it to the supervisor); answer with
    /// [`Input::CallEnded`].
    PlaceCall {
        /// The `call_agent` tool use.
        tool_use_id: String,
        /// The callee.
        callee: String,
        /// What the callee is asked.
        input: String,
    },
    /// Read a call's run; answer with [`Input::ToolFinished`].
    CheckRun {
        /// The `check_run` tool use.
        tool_use_id: String,
        /// The call's child run.
        child: RunId,
        /// The callee.
        callee: String,
    },
    /// Keep a blocking call's tool use open (it counts as busy) until its reply arrives or
    /// `wait_s` seconds pass; then answer with [`Input::WaitElapsed`].
    AwaitReply {
        /// The `call_agent` tool use.
        tool_use_id: String,
        /// How long to wait, in seconds.
        wait_s: u32,
    },
    /// A declared tool or a meta-tool: the agent authorizes and runs it (through
    /// [`approval_gate`] for a gated tool) and answers with [`Input::ToolFinished`].
    UseTool(ToolUse),
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
}

/// What [`step`] decided.
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
    fn write(transition: Transition, effects: Vec<Effect>) -> Self {
        Self {
            write: Some(transition),
            effects,
            verdict: Verdict::None,
        }
    }

    fn effects(effects: Vec<Effect>) -> Self {
        Self {
            effects,
            ..Self::default()
        }
    }

    fn verdict(verdict: Verdict) -> Self {
        Self {
            verdict,
            ..Self::default()
        }
    }
}

/// Decides what a run does next. See the module docs.
pub fn step(view: &RunView, input: Input, policy: &Policy<'_>) -> Step {
    match input {
        Input::Advance { busy, thinking } => advance(view, &busy, thinking, policy),
        Input::ModelAnswered { asked, answer } => model_answered(view, asked, answer),
        Input::ToolFinished {
            tool_use_id,
            name,
            content,
            is_error,
            counts,
        } => {
            if settled(view) || view.resolved.contains(&tool_use_id) {
                return Step::default();
            }
            let cost = CostDelta {
                tool_calls: u64::from(counts),
                ..CostDelta::default()
            };
            Step::write(
                Transition::tool_result(&tool_use_id, &name, &content, is_error).cost(cost),
                vec![Effect::Advance],
            )
        }
        Input::CallEnded {
            tool_use_id,
            callee,
            outcome,
        } => call_ended(view, &tool_use_id, &callee, outcome),
        Input::Reply { reply, placing } => take_reply(view, reply, placing, policy.reply_cap),
        Input::Decide { run, approve } => decide(view, &run, approve),
        Input::WaitElapsed { tool_use_id } => wait_elapsed(view, &tool_use_id),
        Input::Resume => {
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
    }
}

fn settled(view: &RunView) -> bool {
    view.status.is_some_and(RunStatus::is_settled)
}

fn advance(view: &RunView, busy: &BTreeSet<String>, thinking: bool, policy: &Policy<'_>) -> Step {
    let status = view.status.unwrap_or(RunStatus::Queued);
    if status.is_settled() || status == RunStatus::Blocked {
        return Step::default();
    }
    let unresolved = view.unresolved_tool_uses();
    // A fresh run goes straight to its first model turn; its move to `running` is written in
    // that turn's transaction rather than in one of its own.
    if status == RunStatus::Queued && (!unresolved.is_empty() || !view.needs_model()) {
        return Step::write(
            Transition::default().status(RunStatus::Running),
            vec![Effect::Advance],
        );
    }
    if !unresolved.is_empty() {
        return resolve_tool_uses(view, &unresolved, busy, policy);
    }
    let pending = view.pending_calls();
    if !view.needs_model() {
        if pending > 0 {
            if status == RunStatus::Waiting {
                return Step::default();
            }
            return Step::write(Transition::default().status(RunStatus::Waiting), vec![]);
        }
        return settle(Err(
            "the model is waiting but no calls are outstanding".into()
        ));
    }
    if view.model_turns >= policy.max_model_turns {
        let limit = policy.max_model_turns;
        return settle(Err(format!("model turn limit ({limit}) reached")));
    }
    if thinking {
        // A turn is already being asked for; its answer will advance the run.
        return Step::default();
    }
    Step::effects(vec![Effect::AskModel(TurnAsked {
        starting: status == RunStatus::Queued,
        pending,
        seen_seq: view.last_seq,
        seen_tool_uses: view.seen_tool_uses.clone(),
    })])
}

fn settle(outcome: Result<String, String>) -> Step {
    Step::write(Transition::default().settle(outcome), vec![Effect::Settled])
}

/// The last turn's tool uses that lack a result, resolved in order: what can be decided from
/// the log is written (in one transaction), the rest goes out as effects.
fn resolve_tool_uses(
    view: &RunView,
    unresolved: &[ToolUse],
    busy: &BTreeSet<String>,
    policy: &Policy<'_>,
) -> Step {
    let mut write = Transition::default();
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

enum CallDecision {
    Write(Transition),
    Place { callee: String, input: String },
}

/// The caller's side of a call: the input's shape, a call already recorded, then consent,
/// depth and the cap with the caller's own current config.
fn place_call(
    view: &RunView,
    tool_use: &ToolUse,
    placing: u64,
    policy: &Policy<'_>,
) -> CallDecision {
    let text = |key: &str| {
        tool_use
            .input
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let (callee, input) = (text("agent"), text("input"));
    if callee.is_empty() || input.trim().is_empty() {
        let refusal = Refusal::MalformedCall;
        return CallDecision::Write(Transition::tool_result(
            &tool_use.id,
            CALL_AGENT,
            &refusal.to_string(),
            true,
        ));
    }
    if let Some((child, _)) = view.call_by_tool_use(&tool_use.id) {
        // Placed and recorded already; only the tool result is missing.
        return CallDecision::Write(Transition::tool_result(
            &tool_use.id,
            CALL_AGENT,
            &accepted_text(child, &callee),
            false,
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
    match guards::check_outbound(&facts) {
        Ok(()) => CallDecision::Place { callee, input },
        Err(refusal) => CallDecision::Write(refused_call(&tool_use.id, &callee, refusal)),
    }
}

fn refused_call(tool_use_id: &str, callee: &str, refusal: Refusal) -> Transition {
    let text = refusal.to_string();
    Transition::default()
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

fn call_ended(view: &RunView, tool_use_id: &str, callee: &str, outcome: CallOutcome) -> Step {
    if settled(view) || view.resolved.contains(tool_use_id) {
        return Step::default();
    }
    match outcome {
        CallOutcome::Accepted {
            child_run,
            existing,
        } => {
            let wait_s = wait_of(view, tool_use_id);
            let mut write = Transition::default()
                .event(RunEvent::CallPlaced(CallPlaced {
                    tool_use_id: tool_use_id.to_owned(),
                    agent: callee.to_owned(),
                    child_run: child_run.clone(),
                    existing,
                }))
                .cost(CostDelta {
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

fn model_answered(view: &RunView, asked: TurnAsked, answer: Result<ModelAnswer, String>) -> Step {
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
        start: asked.starting,
        ..Transition::default()
    }
    .event(RunEvent::ModelTurn(ModelTurn {
        step: answer.step.clone(),
        pending_calls: asked.pending,
        seen_seq: Some(asked.seen_seq),
    }));
    match answer.step {
        // The turn and the settlement are one transaction.
        ModelStep::Answer(text) => Step::write(turn.settle(Ok(text)), vec![Effect::Settled]),
        ModelStep::ToolUses(_) => Step::write(turn, vec![Effect::Advance]),
        ModelStep::Wait if asked.pending > 0 => {
            Step::write(turn.status(RunStatus::Waiting), vec![])
        }
        ModelStep::Wait => Step::write(
            turn.settle(Err("the model waited with no calls outstanding".into())),
            vec![Effect::Settled],
        ),
    }
}

/// Whether a reply answers a call this run placed, and what taking it writes.
fn take_reply(view: &RunView, reply: ReplyIn, placing: bool, cap: usize) -> Step {
    let Some(call) = view.calls.get(&reply.child_run) else {
        let expected = view.call_uses.get(&reply.tool_use_id) == Some(&reply.callee)
            && RunId::child_of(&reply.parent_run, &reply.tool_use_id) == reply.child_run;
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
    let mut write = Transition::default().event(RunEvent::ReplyReceived(ReplyReceived {
        child_run: reply.child_run,
        agent: reply.callee,
        status: reply.outcome,
        output: output.clone(),
        in_turn,
        tree_cost: reply.tree_cost,
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
        write = write.status(RunStatus::Running);
    }
    Step {
        write: Some(write),
        effects: vec![Effect::Advance],
        verdict: Verdict::Taken,
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
fn wait_elapsed(view: &RunView, tool_use_id: &str) -> Step {
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

fn decide(view: &RunView, run: &RunId, approve: bool) -> Step {
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
                by: "operator".into(),
            }))
            .status(RunStatus::Running),
        vec![Effect::Advance],
    )
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

#[cfg(test)]
mod tests;
