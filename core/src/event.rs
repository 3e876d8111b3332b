//! What a run records: one typed event per thing that happened to it.
//!
//! A run's event log is the truth about the run; [`crate::RunView`] folds it. Each event is a
//! [`RunEvent`] variant, stored as a *kind* (a stable snake_case name, [`RunEvent::kind`]) and
//! JSON *data* (the variant's fields, [`RunEvent::data`]). [`RunEvent::decode`] reads both back
//! and is the only way an event is read: nothing reads event JSON with ad-hoc defaults.
//!
//! The encoding is versioned by [`EVENT_FORMAT`]. Format 1 is what every store written so far
//! holds; fields added later are optional with a documented meaning when absent (a model turn
//! without `seen_seq` saw everything before it, one without tokens reported none), and a kind
//! this version does not know is an error ([`crate::CoreError::UnknownEventKind`]), never
//! silently skipped.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::step::CostDelta;
use crate::{Channel, CoreError, ModelStep, Refusal, RunId, RunStatus, TreeBudget, TreeSpend};

/// The version of the event encoding this crate writes and reads.
pub const EVENT_FORMAT: u32 = 1;

/// One thing that happened to a run.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RunEvent {
    /// The run was stored (always its first event).
    Created(Created),
    /// The run moved from one status to another.
    Status(StatusChanged),
    /// The run's model was asked for a turn (its answer is the `model_turn` that follows).
    /// Recorded for a run's first turn and for every turn of a model that does not answer at
    /// once; see [`step`](mod@crate::step).
    ModelTurnStarted(ModelTurnStarted),
    /// The model answered one turn.
    ModelTurn(ModelTurn),
    /// A tool use got its result (a tool's output, a refusal, a call's acceptance).
    ToolResult(ToolResult),
    /// A call this run placed was accepted by its callee.
    CallPlaced(CallPlaced),
    /// A call this run asked for was refused.
    CallRefused(CallRefused),
    /// A callee's reply to a call this run placed.
    ReplyReceived(ReplyReceived),
    /// A gated tool use waits for an operator.
    ApprovalRequested(ApprovalRequested),
    /// An operator decided on a gated tool use.
    ApprovalDecided(ApprovalDecided),
    /// An approved gated tool is about to run: recorded before it runs, so a host that dies
    /// while it runs finds the gate in doubt instead of running it again.
    ToolStarted(ToolStarted),
    /// The run succeeded with this answer.
    Answer(Answer),
    /// The run failed.
    Failed(Failed),
    /// A peer delivered a message into this run.
    MessageReceived(MessageReceived),
    /// The run was canceled before it settled (its settling `failed` follows).
    Canceled(Canceled),
}

/// [`RunEvent::Created`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Created {
    /// Who started the run.
    pub channel: Channel,
    /// What it was asked.
    pub input: String,
    /// The run that placed it, for a delegated run.
    #[serde(default)]
    pub parent_run: Option<RunId>,
    /// Hops from the root run.
    #[serde(default)]
    pub hop_depth: u32,
    /// Who the run acts for.
    #[serde(default = "anonymous")]
    pub principal: String,
    /// The budget of the run's call tree it holds: a root run's own (its agent's
    /// `limits.tree` and its request's), a called run's the allowance its call carried.
    /// Absent: no tree budget (and in logs written before tree budgets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<TreeBudget>,
}

fn anonymous() -> String {
    "anonymous".to_owned()
}

/// [`RunEvent::Status`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusChanged {
    /// The status before.
    pub from: RunStatus,
    /// The status after.
    pub to: RunStatus,
    /// Why a run failed, on the move to `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// [`RunEvent::ModelTurnStarted`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelTurnStarted {
    /// Which of the run's turns the model is asked for (1 for its first); a turn asked again
    /// (its host restarted while the model thought) has the same number again.
    pub turn: u64,
}

/// [`RunEvent::ModelTurn`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelTurn {
    /// What the model decided.
    pub step: ModelStep,
    /// Calls out when the model was asked.
    #[serde(default)]
    pub pending_calls: usize,
    /// The last event the model's conversation included; absent in logs written before it
    /// was recorded, meaning "everything before this turn".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_seq: Option<u64>,
    /// Tokens the model read for this turn, as it reported them; absent (0) when it reported
    /// none and in logs written before turns carried them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub input_tokens: u64,
    /// Tokens the model wrote for this turn; absent (0) as `input_tokens`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub output_tokens: u64,
    /// For a run with a tree budget, the allowance each `call_agent` use of this turn is handed
    /// (see [`budget`](crate::budget)), by tool-use id: decided and recorded with the turn, so
    /// a call placed again after a crash carries the same. Absent for a run without one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allowances: BTreeMap<String, TreeBudget>,
    /// Whether this turn's `call_agent` uses were decided (consent, depth, cap, budget) as it
    /// was recorded, a refused one's refusal written with it: a call of such a turn that is
    /// not refused is placed (again, after a crash) without being decided again, under
    /// whatever config is in force by then. Absent (false) in logs written before calls were
    /// decided with their turn: those are decided when placed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub calls_decided: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// [`RunEvent::ToolResult`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The tool use it answers.
    pub tool_use_id: String,
    /// The tool's name as the model used it.
    pub name: String,
    /// What the model reads.
    pub content: String,
    /// True for refusals and failures.
    #[serde(default)]
    pub is_error: bool,
}

/// [`RunEvent::CallPlaced`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallPlaced {
    /// The `call_agent` tool use that placed it.
    pub tool_use_id: String,
    /// The callee.
    pub agent: String,
    /// The child run the callee stored.
    pub child_run: RunId,
    /// The callee already had the run (a replay after a crash).
    #[serde(default)]
    pub existing: bool,
}

/// [`RunEvent::CallRefused`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallRefused {
    /// The `call_agent` tool use that asked.
    pub tool_use_id: String,
    /// The callee asked for.
    pub agent: String,
    /// The refusal's stable code.
    pub code: String,
    /// The sentence the model read.
    pub reason: String,
    /// The refusal itself (absent when a newer host sent a kind this version does not know).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<Refusal>,
}

/// How a callee's run ended, as its reply says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyOutcome {
    /// The callee's run succeeded; the text is its answer.
    Succeeded,
    /// The callee's run failed; the text is its error.
    Failed,
}

/// [`RunEvent::ReplyReceived`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplyReceived {
    /// The child run that answered.
    pub child_run: RunId,
    /// The callee.
    pub agent: String,
    /// How the child run ended.
    #[serde(default = "succeeded")]
    pub status: ReplyOutcome,
    /// Its (capped) answer or error.
    pub output: String,
    /// The reply answered a blocking `call_agent` (one with `wait_s`) inside the caller's
    /// turn: the model read it as that tool use's result, not as a `[reply from …]` message.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_turn: bool,
    /// The child's tree cost when it settled (its own and its descendants'); absent in logs
    /// written before tree costs were carried.
    #[serde(default, skip_serializing_if = "CostDelta::is_zero")]
    pub tree_cost: CostDelta,
    /// What the child's subtree spent of the tree budget it was handed, as it reported when it
    /// settled (what was still held by its own calls out included); absent when it ran without
    /// a budget. See [`budget::charge`](crate::budget::charge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree_spent: Option<TreeSpend>,
}

fn succeeded() -> ReplyOutcome {
    ReplyOutcome::Succeeded
}

/// [`RunEvent::ApprovalRequested`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequested {
    /// The gate's id (see [`gate_id`](crate::step::gate_id)): a decision names it. Absent in
    /// events written before gates had ids; readers derive it from the run and tool use.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gate: String,
    /// The gated tool use.
    pub tool_use_id: String,
    /// The tool.
    pub tool: String,
    /// The input the model gave it.
    #[serde(default)]
    pub input: Value,
    /// Whether the run's own requester may decide, besides an operator (the tool's
    /// `approval: requester`); absent in events written before it existed, which means no.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requester_may_decide: bool,
    /// The tool was approved and started before, and its host stopped before its result was
    /// recorded: it may or may not have run. The decision is whether to run it again, or what
    /// to record as its result.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_doubt: bool,
}

/// [`RunEvent::ApprovalDecided`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalDecided {
    /// The gate decided (absent in events written before gates had ids).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gate: String,
    /// The gated tool use.
    pub tool_use_id: String,
    /// The decision: run the tool (again, for a gate in doubt), or not.
    pub approved: bool,
    /// Who decided.
    #[serde(default)]
    pub by: String,
    /// For a gate in doubt: the decider recorded what happened instead (the `tool_result`
    /// that follows holds it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recorded: bool,
}

/// [`RunEvent::ToolStarted`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolStarted {
    /// The gate whose approval it runs under.
    pub gate: String,
    /// The gated tool use.
    pub tool_use_id: String,
    /// The tool.
    pub tool: String,
}

/// [`RunEvent::MessageReceived`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessageReceived {
    /// The agent that delivered it.
    pub from: String,
    /// The sender's id for this delivery: with `from`, what makes a repeat idempotent.
    pub delivery_id: String,
    /// The payload's digest, which tells a repeat from a conflicting reuse of the id.
    pub digest: String,
    /// What the model reads.
    pub text: String,
}

/// [`RunEvent::Canceled`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Canceled {
    /// Who canceled: the principal the host checked, or `operator` for its local operator.
    pub by: String,
    /// Why, in the canceler's words, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// [`RunEvent::Answer`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// The run's answer.
    pub text: String,
}

/// [`RunEvent::Failed`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Failed {
    /// Why the run failed.
    pub error: String,
}

impl RunEvent {
    /// Every kind this version reads and writes.
    pub const KINDS: [&'static str; 15] = [
        "created",
        "status",
        "model_turn_started",
        "model_turn",
        "tool_result",
        "call_placed",
        "call_refused",
        "reply_received",
        "approval_requested",
        "approval_decided",
        "tool_started",
        "answer",
        "failed",
        "message_received",
        "canceled",
    ];

    /// The event's stable kind (the store's `kind` column).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Created(_) => "created",
            Self::Status(_) => "status",
            Self::ModelTurnStarted(_) => "model_turn_started",
            Self::ModelTurn(_) => "model_turn",
            Self::ToolResult(_) => "tool_result",
            Self::CallPlaced(_) => "call_placed",
            Self::CallRefused(_) => "call_refused",
            Self::ReplyReceived(_) => "reply_received",
            Self::ApprovalRequested(_) => "approval_requested",
            Self::ApprovalDecided(_) => "approval_decided",
            Self::ToolStarted(_) => "tool_started",
            Self::Answer(_) => "answer",
            Self::Failed(_) => "failed",
            Self::MessageReceived(_) => "message_received",
            Self::Canceled(_) => "canceled",
        }
    }

    /// The event's data (the store's `data` column), as JSON.
    pub fn data(&self) -> Value {
        let encoded = match self {
            Self::Created(e) => serde_json::to_value(e),
            Self::Status(e) => serde_json::to_value(e),
            Self::ModelTurnStarted(e) => serde_json::to_value(e),
            Self::ModelTurn(e) => serde_json::to_value(e),
            Self::ToolResult(e) => serde_json::to_value(e),
            Self::CallPlaced(e) => serde_json::to_value(e),
            Self::CallRefused(e) => serde_json::to_value(e),
            Self::ReplyReceived(e) => serde_json::to_value(e),
            Self::ApprovalRequested(e) => serde_json::to_value(e),
            Self::ApprovalDecided(e) => serde_json::to_value(e),
            Self::ToolStarted(e) => serde_json::to_value(e),
            Self::Answer(e) => serde_json::to_value(e),
            Self::Failed(e) => serde_json::to_value(e),
            Self::MessageReceived(e) => serde_json::to_value(e),
            Self::Canceled(e) => serde_json::to_value(e),
        };
        // Plain structs of strings, numbers and JSON values always encode.
        encoded.unwrap_or(Value::Null)
    }

    /// Reads an event back from its kind and data.
    pub fn decode(kind: &str, data: Value) -> Result<Self, CoreError> {
        fn read<T: DeserializeOwned>(kind: &str, data: Value) -> Result<T, CoreError> {
            serde_json::from_value(data).map_err(|e| CoreError::MalformedEvent {
                kind: kind.to_owned(),
                detail: e.to_string(),
            })
        }
        Ok(match kind {
            "created" => Self::Created(read(kind, data)?),
            "status" => Self::Status(read(kind, data)?),
            "model_turn_started" => Self::ModelTurnStarted(read(kind, data)?),
            "model_turn" => Self::ModelTurn(read(kind, data)?),
            "tool_result" => Self::ToolResult(read(kind, data)?),
            "call_placed" => Self::CallPlaced(read(kind, data)?),
            "call_refused" => Self::CallRefused(read(kind, data)?),
            "reply_received" => Self::ReplyReceived(read(kind, data)?),
            "approval_requested" => Self::ApprovalRequested(read(kind, data)?),
            "approval_decided" => Self::ApprovalDecided(read(kind, data)?),
            "tool_started" => Self::ToolStarted(read(kind, data)?),
            "answer" => Self::Answer(read(kind, data)?),
            "failed" => Self::Failed(read(kind, data)?),
            "message_received" => Self::MessageReceived(read(kind, data)?),
            "canceled" => Self::Canceled(read(kind, data)?),
            other => {
                return Err(CoreError::UnknownEventKind(
                    other.chars().take(64).collect(),
                ));
            }
        })
    }

    /// A tool result, as the engine records one.
    pub fn tool_result(tool_use_id: &str, name: &str, content: &str, is_error: bool) -> Self {
        Self::ToolResult(ToolResult {
            tool_use_id: tool_use_id.to_owned(),
            name: name.to_owned(),
            content: content.to_owned(),
            is_error,
        })
    }
}

#[cfg(test)]
mod tests;
