//! A run's progress, rebuilt from its event log as plain data.
//!
//! The event log is the only truth about a run: the engine never keeps progress only in
//! memory. [`RunView::from_events`] folds the log into what the engine needs to decide the next
//! move (the conversation for the model, which tool uses still lack a result, which calls are
//! still out, which approvals were asked and decided). It is a pure function, so a host
//! restarted after SIGKILL rebuilds exactly the view it had.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use consort_net::RunId;

use crate::model::{Message, ModelStep, ToolUse};
use crate::run::EventRecord;

/// Event kinds written by the engine (the `kind` column of the event log).
pub mod kinds {
    pub const CREATED: &str = "created";
    pub const STATUS: &str = "status";
    pub const MODEL_TURN: &str = "model_turn";
    pub const TOOL_RESULT: &str = "tool_result";
    pub const CALL_PLACED: &str = "call_placed";
    pub const CALL_REFUSED: &str = "call_refused";
    pub const REPLY_RECEIVED: &str = "reply_received";
    pub const APPROVAL_REQUESTED: &str = "approval_requested";
    pub const APPROVAL_DECIDED: &str = "approval_decided";
    pub const ANSWER: &str = "answer";
    pub const FAILED: &str = "failed";
}

/// A call this run placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacedCall {
    pub agent: String,
    pub tool_use_id: String,
    pub replied: bool,
}

/// An operator decision on a gated tool use: `None` while it is still asked.
pub type ApprovalState = Option<bool>;

/// What the log says about a run.
#[derive(Clone, Debug, Default)]
pub struct RunView {
    pub conversation: Vec<Message>,
    /// Model turns taken (waits included).
    pub model_turns: u64,
    /// Sequence number of the last model turn, and what it decided.
    pub last_turn: Option<(u64, ModelStep)>,
    /// The last event the last model turn had seen when it was asked.
    pub last_turn_seen: u64,
    /// Sequence number of the last event in the log.
    pub last_seq: u64,
    /// Sequence number of the last reply received.
    pub last_reply_seq: u64,
    /// Tool uses that have a result.
    pub resolved: BTreeSet<String>,
    /// Every tool-use id the model has emitted.
    pub seen_tool_uses: BTreeSet<String>,
    /// The model's `call_agent` uses: tool-use id → the agent it asked to call.
    pub call_uses: BTreeMap<String, String>,
    /// Calls placed, by child run id.
    pub calls: BTreeMap<RunId, PlacedCall>,
    /// Approvals asked, by tool-use id.
    pub approvals: BTreeMap<String, ApprovalState>,
}

impl RunView {
    pub fn from_events(events: &[EventRecord]) -> RunView {
        let mut view = RunView::default();
        for event in events {
            view.last_seq = view.last_seq.max(event.seq);
            let d = &event.data;
            match event.kind.as_str() {
                kinds::CREATED => {
                    let input = text(d, "input");
                    view.conversation.push(Message::User(input));
                }
                kinds::MODEL_TURN => {
                    view.model_turns += 1;
                    let step: Option<ModelStep> = d
                        .get("step")
                        .and_then(|s| serde_json::from_value(s.clone()).ok());
                    if let Some(step) = step {
                        if let ModelStep::ToolUses(uses) = &step {
                            for u in uses {
                                view.seen_tool_uses.insert(u.id.clone());
                                if u.name == "call_agent" {
                                    let agent = u.input.get("agent").and_then(Value::as_str);
                                    view.call_uses
                                        .insert(u.id.clone(), agent.unwrap_or_default().to_owned());
                                }
                            }
                            view.conversation.push(Message::Assistant {
                                tool_uses: uses.clone(),
                            });
                        }
                        view.last_turn = Some((event.seq, step));
                        // Logs written before `seen_seq` existed: the turn saw all before it.
                        view.last_turn_seen = d
                            .get("seen_seq")
                            .and_then(Value::as_u64)
                            .unwrap_or(event.seq.saturating_sub(1));
                    }
                }
                kinds::TOOL_RESULT => {
                    let id = text(d, "tool_use_id");
                    view.resolved.insert(id.clone());
                    view.conversation.push(Message::ToolResult {
                        tool_use_id: id,
                        name: text(d, "name"),
                        content: text(d, "content"),
                        is_error: d.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                    });
                }
                kinds::CALL_PLACED => {
                    if let Some(child) = run_id(d, "child_run") {
                        view.calls.insert(
                            child,
                            PlacedCall {
                                agent: text(d, "agent"),
                                tool_use_id: text(d, "tool_use_id"),
                                replied: false,
                            },
                        );
                    }
                }
                kinds::REPLY_RECEIVED => {
                    view.last_reply_seq = event.seq;
                    if let Some(child) = run_id(d, "child_run") {
                        if let Some(call) = view.calls.get_mut(&child) {
                            call.replied = true;
                        }
                        view.conversation.push(Message::Reply {
                            from: text(d, "agent"),
                            run_id: child,
                            text: text(d, "output"),
                            failed: d.get("status").and_then(Value::as_str) == Some("failed"),
                        });
                    }
                }
                kinds::APPROVAL_REQUESTED => {
                    view.approvals.entry(text(d, "tool_use_id")).or_insert(None);
                }
                kinds::APPROVAL_DECIDED => {
                    let approved = d.get("approved").and_then(Value::as_bool).unwrap_or(false);
                    view.approvals
                        .insert(text(d, "tool_use_id"), Some(approved));
                }
                _ => {}
            }
        }
        view
    }

    /// Calls placed whose reply has not arrived.
    pub fn pending_calls(&self) -> usize {
        self.calls.values().filter(|c| !c.replied).count()
    }

    /// Calls placed so far (what the per-run cap counts).
    pub fn calls_placed(&self) -> u64 {
        self.calls.len() as u64
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

    /// Whether the model has something new to read: no turn yet, a reply since its last turn,
    /// or a result of its last turn other than "call accepted" (tool output, a refusal).
    pub fn needs_model(&self) -> bool {
        let Some((_, step)) = &self.last_turn else {
            return true;
        };
        if self.last_reply_seq > self.last_turn_seen {
            return true;
        }
        match step {
            ModelStep::ToolUses(uses) => {
                let accepted: BTreeSet<&str> = self
                    .calls
                    .values()
                    .map(|c| c.tool_use_id.as_str())
                    .collect();
                uses.iter().any(|u| !accepted.contains(u.id.as_str()))
            }
            ModelStep::Wait | ModelStep::Answer(_) => false,
        }
    }

    /// The call placed through `tool_use_id`, if any.
    pub fn call_by_tool_use(&self, tool_use_id: &str) -> Option<(&RunId, &PlacedCall)> {
        self.calls
            .iter()
            .find(|(_, c)| c.tool_use_id == tool_use_id)
    }
}

fn text(d: &Value, key: &str) -> String {
    d.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn run_id(d: &Value, key: &str) -> Option<RunId> {
    d.get(key)
        .and_then(Value::as_str)
        .and_then(|s| RunId::parse(s).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(seq: u64, kind: &str, data: Value) -> EventRecord {
        EventRecord {
            run_id: RunId::random(),
            seq,
            at_ms: 0,
            kind: kind.into(),
            data,
        }
    }

    #[test]
    fn folds_a_call_and_its_reply() {
        let child = RunId::random();
        let uses = json!({"tool_uses": [{"id": "tu_0_0", "name": "call_agent", "input": {"agent": "cfo", "input": "x"}}]});
        let mut events = vec![
            ev(1, kinds::CREATED, json!({"input": "August"})),
            ev(2, kinds::MODEL_TURN, json!({"step": uses})),
        ];
        let view = RunView::from_events(&events);
        assert!(view.needs_model() || !view.unresolved_tool_uses().is_empty());
        assert_eq!(view.unresolved_tool_uses().len(), 1);
        events.push(ev(
            3,
            kinds::CALL_PLACED,
            json!({"tool_use_id": "tu_0_0", "agent": "cfo", "child_run": child.as_str()}),
        ));
        events.push(ev(
            4,
            kinds::TOOL_RESULT,
            json!({"tool_use_id": "tu_0_0", "name": "call_agent", "content": "{}"}),
        ));
        let view = RunView::from_events(&events);
        assert!(view.unresolved_tool_uses().is_empty());
        assert_eq!(view.pending_calls(), 1);
        assert!(!view.needs_model(), "an accepted call waits for its reply");
        events.push(ev(5, kinds::REPLY_RECEIVED, json!({"child_run": child.as_str(), "agent": "cfo", "output": "42", "status": "succeeded"})));
        let view = RunView::from_events(&events);
        assert_eq!(view.pending_calls(), 0);
        assert!(view.needs_model());
        assert_eq!(
            view.conversation.last().unwrap().render(),
            "[reply from cfo] 42"
        );
    }

    #[test]
    fn a_refused_call_needs_the_model_again() {
        let uses = json!({"tool_uses": [{"id": "tu_0_0", "name": "call_agent", "input": {}}]});
        let events = vec![
            ev(1, kinds::CREATED, json!({"input": "x"})),
            ev(2, kinds::MODEL_TURN, json!({"step": uses})),
            ev(3, kinds::CALL_REFUSED, json!({"tool_use_id": "tu_0_0"})),
            ev(
                4,
                kinds::TOOL_RESULT,
                json!({"tool_use_id": "tu_0_0", "name": "call_agent", "content": "no", "is_error": true}),
            ),
        ];
        let view = RunView::from_events(&events);
        assert!(view.needs_model());
        assert_eq!(view.pending_calls(), 0);
    }

    #[test]
    fn a_reply_that_came_while_the_model_thought_is_news() {
        let child = RunId::random();
        let uses = json!({"tool_uses": [{"id": "tu_0_0", "name": "call_agent", "input": {}}]});
        let events = vec![
            ev(1, kinds::CREATED, json!({"input": "x"})),
            ev(2, kinds::MODEL_TURN, json!({"step": uses, "seen_seq": 1})),
            ev(
                3,
                kinds::CALL_PLACED,
                json!({"tool_use_id": "tu_0_0", "agent": "cfo", "child_run": child.as_str()}),
            ),
            ev(
                4,
                kinds::TOOL_RESULT,
                json!({"tool_use_id": "tu_0_0", "name": "call_agent", "content": "{}"}),
            ),
            // The model was asked after event 4; the reply landed before its answer was written.
            ev(
                5,
                kinds::REPLY_RECEIVED,
                json!({"child_run": child.as_str(), "agent": "cfo", "output": "42"}),
            ),
            ev(6, kinds::MODEL_TURN, json!({"step": "wait", "seen_seq": 4})),
        ];
        let view = RunView::from_events(&events);
        assert_eq!(view.last_seq, 6);
        assert!(view.needs_model(), "the model has not seen the reply yet");
        let mut seen = events.clone();
        seen[5].data = json!({"step": "wait", "seen_seq": 5});
        assert!(!RunView::from_events(&seen).needs_model());
    }

    #[test]
    fn waiting_without_news_does_not_need_the_model() {
        let events = vec![
            ev(1, kinds::CREATED, json!({"input": "x"})),
            ev(2, kinds::MODEL_TURN, json!({"step": "wait"})),
        ];
        let view = RunView::from_events(&events);
        assert!(!view.needs_model());
        assert_eq!(view.model_turns, 1);
    }
}
