//! A run's progress, folded from its event log as plain data.
//!
//! The event log is the only truth about a run: the engine never keeps progress only in
//! memory. [`RunView::apply`] folds one [`RunEvent`] into what the engine needs to decide the
//! next move (the conversation for the model, which tool uses still lack a result, which calls
//! are still out, which approvals were asked and decided, the run's status). A live run's view
//! is kept and updated with each event as it is appended; [`RunView::from_events`] rebuilds it
//! from a log after a restart, and the two always agree (a property test checks it).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::budget::{self, TreeBudget, TreeSpend};
use crate::event::{ReplyOutcome, RunEvent};
use crate::{Message, ModelStep, RunId, RunStatus, ToolUse};

/// A call this run placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacedCall {
    /// The callee.
    pub agent: String,
    /// The `call_agent` tool use that placed it.
    pub tool_use_id: String,
    /// Whether its reply was recorded.
    pub replied: bool,
}

/// What the log says about the approval gate of one gated tool use.
///
/// A use is asked once; it is asked again (a new gate, `asks` + 1) only when it was approved
/// and started and its host stopped before its result was recorded: that gate is *in doubt*.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GateView {
    /// How many times the use was asked (each ask is a gate of its own; see
    /// [`gate_id`](crate::step::gate_id)).
    pub asks: u32,
    /// The decision on the last ask: `None` while it waits.
    pub decision: Option<bool>,
    /// The tool was started under the last decision (a `tool_started` after it).
    pub started: bool,
    /// The last ask is in doubt (the tool may or may not have run).
    pub in_doubt: bool,
    /// The run's own requester may decide it, besides an operator.
    pub requester_may_decide: bool,
    /// The gated tool.
    pub tool: String,
    /// Where the last ask is in the log (its event's seq): of several gates waiting at once
    /// (a turn that used two gated tools), the one asked first is the run's waiting gate.
    pub asked_seq: u64,
    /// Every decision made, by ask (1-based): what a repeated decision is compared with.
    pub decided: BTreeMap<u32, GateDecided>,
}

/// How one gate was decided: what a decision sent again is compared with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GateDecided {
    /// Run the tool.
    Approved,
    /// Not run.
    Denied,
    /// Not run again; the decider recorded what happened (a gate in doubt).
    Recorded {
        /// The result recorded (empty until the `tool_result` that holds it is folded).
        content: String,
        /// It failed.
        is_error: bool,
    },
}

impl GateView {
    /// The last ask waits for a decision.
    pub fn waiting(&self) -> bool {
        self.asks > 0 && self.decision.is_none()
    }
}

/// What the log says about a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunView {
    /// The run's status (`queued` until an event says otherwise).
    pub status: Option<RunStatus>,
    /// Hops from the root run (0 for a run started by the API or CLI).
    pub hop_depth: u32,
    /// The principal the run acts for (its requester: `api:<name>`, `anonymous`, `agent:<name>`
    /// for a called run).
    pub principal: String,
    /// What the model reads.
    pub conversation: Vec<Message>,
    /// Model turns taken (waits included).
    pub model_turns: u64,
    /// Tokens the model turns used (read and written), as the models reported them.
    pub tokens: u64,
    /// The last turn's tool uses, by id: how many turns in a row, that one included, used the
    /// same tool with the same input (the loop guard's count).
    pub repeats: BTreeMap<String, u32>,
    /// Sequence number of the last model turn, and what it decided.
    pub last_turn: Option<(u64, ModelStep)>,
    /// The last event the last model turn had seen when it was asked.
    pub last_turn_seen: u64,
    /// The last turn's `call_agent` uses were decided as it was recorded
    /// ([`ModelTurn::calls_decided`](crate::event::ModelTurn)).
    pub last_turn_decided_calls: bool,
    /// Sequence number of the last event in the log (events are numbered from 1).
    pub last_seq: u64,
    /// Sequence number of the last reply or delivered message received (news for the model).
    pub last_reply_seq: u64,
    /// Tool uses that have a result.
    pub resolved: BTreeSet<String>,
    /// Every tool-use id the model has emitted.
    pub seen_tool_uses: BTreeSet<String>,
    /// The model's `call_agent` uses: tool-use id → the agent it asked to call.
    pub call_uses: BTreeMap<String, String>,
    /// Calls placed, by child run id.
    pub calls: BTreeMap<RunId, PlacedCall>,
    /// Calls placed, by the tool use that placed them.
    pub calls_by_tool_use: BTreeMap<String, RunId>,
    /// Approval gates, by the tool use they gate.
    pub approvals: BTreeMap<String, GateView>,
    /// `call_agent` uses whose placement ended unreachable: the callee may have stored the
    /// call all the same, so they count against the cap.
    pub unreachable_calls: BTreeSet<String>,
    /// Messages peers delivered: (sender, delivery id) → (payload digest, seq of the event),
    /// so a repeated delivery is answered from the first and a reused id is told apart.
    pub deliveries: BTreeMap<(String, String), (String, u64)>,
    /// The run's tree budget, if it has one (its `created` event).
    pub budget: Option<TreeBudget>,
    /// The allowance each `call_agent` use was handed, by tool-use id (its turn's record).
    pub allowances: BTreeMap<String, TreeBudget>,
    /// What each replied call charged the budget, by child run id.
    pub charges: BTreeMap<RunId, TreeSpend>,
}

impl RunView {
    /// Folds a whole log (a restart, an inspection).
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a RunEvent>) -> Self {
        let mut view = Self::default();
        for event in events {
            view.apply(event);
        }
        view
    }

    /// Folds one more event, the next in the log.
    pub fn apply(&mut self, event: &RunEvent) {
        self.last_seq += 1;
        let seq = self.last_seq;
        match event {
            RunEvent::Created(created) => {
                self.status.get_or_insert(RunStatus::Queued);
                self.hop_depth = created.hop_depth;
                self.principal.clone_from(&created.principal);
                self.budget = created.budget;
                self.conversation.push(Message::User(created.input.clone()));
            }
            RunEvent::Status(change) => self.status = Some(change.to),
            // Nothing the engine decides on: a first turn's move to `running` is the `status`
            // event beside it, and the turn counts once it is answered (`model_turn`).
            RunEvent::ModelTurnStarted(_) => {}
            RunEvent::ModelTurn(turn) => {
                self.model_turns += 1;
                self.last_turn_decided_calls = turn.calls_decided;
                self.tokens = self
                    .tokens
                    .saturating_add(turn.input_tokens)
                    .saturating_add(turn.output_tokens);
                self.repeats = self.repeats_in(&turn.step);
                self.allowances.extend(
                    turn.allowances
                        .iter()
                        .map(|(id, allowance)| (id.clone(), *allowance)),
                );
                if let ModelStep::ToolUses(uses) = &turn.step {
                    for u in uses {
                        self.seen_tool_uses.insert(u.id.clone());
                        if u.name == "call_agent" {
                            let agent = u.input.get("agent").and_then(Value::as_str);
                            self.call_uses
                                .insert(u.id.clone(), agent.unwrap_or_default().to_owned());
                        }
                    }
                    self.conversation.push(Message::Assistant {
                        tool_uses: uses.clone(),
                    });
                }
                self.last_turn = Some((seq, turn.step.clone()));
                // Logs written before `seen_seq` existed: the turn saw all before it.
                self.last_turn_seen = turn.seen_seq.unwrap_or(seq.saturating_sub(1));
            }
            RunEvent::ToolResult(result) => {
                self.resolved.insert(result.tool_use_id.clone());
                // A recorded decision's result follows it in its transaction.
                if let Some(gate) = self.approvals.get_mut(&result.tool_use_id)
                    && let Some(GateDecided::Recorded { content, is_error }) =
                        gate.decided.get_mut(&gate.asks)
                    && content.is_empty()
                {
                    content.clone_from(&result.content);
                    *is_error = result.is_error;
                }
                self.conversation.push(Message::ToolResult {
                    tool_use_id: result.tool_use_id.clone(),
                    name: result.name.clone(),
                    content: result.content.clone(),
                    is_error: result.is_error,
                });
            }
            RunEvent::CallPlaced(placed) => {
                self.calls.insert(
                    placed.child_run.clone(),
                    PlacedCall {
                        agent: placed.agent.clone(),
                        tool_use_id: placed.tool_use_id.clone(),
                        replied: false,
                    },
                );
                self.calls_by_tool_use
                    .insert(placed.tool_use_id.clone(), placed.child_run.clone());
            }
            RunEvent::CallRefused(refused) => {
                if refused.code == "unreachable" {
                    self.unreachable_calls.insert(refused.tool_use_id.clone());
                }
            }
            RunEvent::ReplyReceived(reply) => {
                if let Some(call) = self.calls.get_mut(&reply.child_run) {
                    call.replied = true;
                    self.charges.insert(
                        reply.child_run.clone(),
                        budget::charge(reply.tree_spent, &reply.tree_cost),
                    );
                }
                if reply.in_turn {
                    // Read as its tool use's result (the next event), not as news.
                    return;
                }
                self.last_reply_seq = seq;
                self.conversation.push(Message::Reply {
                    from: reply.agent.clone(),
                    run_id: reply.child_run.clone(),
                    text: reply.output.clone(),
                    failed: reply.status == ReplyOutcome::Failed,
                });
            }
            RunEvent::ApprovalRequested(asked) => {
                let gate = self.approvals.entry(asked.tool_use_id.clone()).or_default();
                gate.asks += 1;
                gate.decision = None;
                gate.started = false;
                gate.in_doubt = asked.in_doubt;
                gate.requester_may_decide = asked.requester_may_decide;
                gate.tool.clone_from(&asked.tool);
                gate.asked_seq = seq;
            }
            RunEvent::ApprovalDecided(decided) => {
                let gate = self
                    .approvals
                    .entry(decided.tool_use_id.clone())
                    .or_default();
                gate.asks = gate.asks.max(1);
                gate.decision = Some(decided.approved);
                gate.started = false;
                let how = match (decided.approved, decided.recorded) {
                    (true, _) => GateDecided::Approved,
                    (false, false) => GateDecided::Denied,
                    (false, true) => GateDecided::Recorded {
                        content: String::new(),
                        is_error: false,
                    },
                };
                gate.decided.insert(gate.asks, how);
            }
            RunEvent::ToolStarted(started) => {
                if let Some(gate) = self.approvals.get_mut(&started.tool_use_id) {
                    gate.started = true;
                }
            }
            RunEvent::MessageReceived(message) => {
                // The first record of a (sender, id) is the one a repeat is answered with; a
                // log never holds two, but a fold must not let a later one rewrite it.
                self.deliveries
                    .entry((message.from.clone(), message.delivery_id.clone()))
                    .or_insert_with(|| (message.digest.clone(), seq));
                // News for the model, as a reply is: the next advance asks it.
                self.last_reply_seq = seq;
                self.conversation.push(Message::User(format!(
                    "[message from {}] {}",
                    message.from, message.text
                )));
            }
            // A cancel settles the run: the status change that follows is what the view reads.
            RunEvent::Answer(_) | RunEvent::Failed(_) | RunEvent::Canceled(_) => {}
        }
    }

    /// Calls placed whose reply has not arrived.
    pub fn pending_calls(&self) -> usize {
        self.calls.values().filter(|c| !c.replied).count()
    }

    /// Calls placed whose reply has not arrived, with their child run ids.
    pub fn unreplied(&self) -> impl Iterator<Item = (&RunId, &PlacedCall)> {
        self.calls.iter().filter(|(_, c)| !c.replied)
    }

    /// Calls placed and recorded so far.
    pub fn calls_placed(&self) -> u64 {
        self.calls.len() as u64
    }

    /// What the per-run cap counts: calls recorded, and calls whose placement ended
    /// unreachable (their callee may hold a child all the same, so a retry must not push the
    /// run's children past the cap).
    pub fn calls_counted(&self) -> u64 {
        self.calls_placed() + self.unreachable_calls.len() as u64
    }

    /// The last turn's tool uses that have no result yet.
    pub fn unresolved_tool_uses(&self) -> Vec<ToolUse> {
        match &self.last_turn {
            Some((_, ModelStep::ToolUses(uses))) => uses
                .iter()
                .filter(|u| !self.resolved.contains(&u.id))
                .cloned()
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Whether the model has something new to read: no turn yet, a reply or a delivered
    /// message since its last turn, or a result of its last turn other than "call accepted"
    /// (tool output, a refusal).
    pub fn needs_model(&self) -> bool {
        let Some((_, step)) = &self.last_turn else {
            return true;
        };
        if self.last_reply_seq > self.last_turn_seen {
            return true;
        }
        match step {
            // A call's acceptance is no news; any other result is, including a blocking
            // call's (its reply, or word that the run goes on).
            ModelStep::ToolUses(uses) => uses
                .iter()
                .any(|u| !self.calls_by_tool_use.contains_key(&u.id) || u.wait_s().is_some()),
            ModelStep::Wait | ModelStep::Answer(_) => false,
        }
    }

    /// The gated tool use the run waits on, with its gate, if it waits on one: of several
    /// waiting at once, the one asked first.
    pub fn waiting_gate(&self) -> Option<(&str, &GateView)> {
        self.waiting_gates().next()
    }

    /// Every gate that waits for a decision, the one asked first first.
    pub fn waiting_gates(&self) -> impl Iterator<Item = (&str, &GateView)> {
        let mut waiting: Vec<(&str, &GateView)> = self
            .approvals
            .iter()
            .filter(|(_, gate)| gate.waiting())
            .map(|(tool_use_id, gate)| (tool_use_id.as_str(), gate))
            .collect();
        waiting.sort_by_key(|(_, gate)| gate.asked_seq);
        waiting.into_iter()
    }

    /// The call placed through `tool_use_id`, if any.
    pub fn call_by_tool_use(&self, tool_use_id: &str) -> Option<(&RunId, &PlacedCall)> {
        let child = self.calls_by_tool_use.get(tool_use_id)?;
        self.calls.get_key_value(child)
    }

    /// How many turns in a row, the last one included, used the same tool with the same input
    /// as the last turn's use `tool_use_id` (0 for a use of no turn but the last).
    pub fn repeats_of(&self, tool_use_id: &str) -> u32 {
        self.repeats.get(tool_use_id).copied().unwrap_or(0)
    }

    /// The loop guard's count of each tool use of `step`, a turn that follows the last one: one
    /// more than the count of an equal use (same name, equal input) in the last turn, else 1.
    fn repeats_in(&self, step: &ModelStep) -> BTreeMap<String, u32> {
        let ModelStep::ToolUses(uses) = step else {
            return BTreeMap::new();
        };
        let before: &[ToolUse] = match &self.last_turn {
            Some((_, ModelStep::ToolUses(before))) => before,
            _ => &[],
        };
        uses.iter()
            .map(|u| {
                let run = before
                    .iter()
                    .filter(|b| b.name == u.name && b.input == u.input)
                    .map(|b| self.repeats_of(&b.id))
                    .max()
                    .unwrap_or(0);
                (u.id.clone(), run.saturating_add(1))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
