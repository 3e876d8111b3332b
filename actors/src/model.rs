//! The model seam: what an agent's model is shown, and what it may answer.
//!
//! A [`Model`] gets the run's conversation (its input, its earlier tool uses and their
//! results, and `[reply from <agent>]` messages) and returns one [`ModelStep`]: a final answer,
//! tool uses, or "wait" while calls it placed are still out. The engine in `agent/drive.rs` records
//! every step in the run's event log *before* acting on it, so a host restarted mid-turn replays
//! the same tool-use ids and a replayed call finds the run it already created.
//!
//! This module defines the seam only; it never runs tools or places calls. consort ships the
//! deterministic [`crate::script::ScriptModel`]; adapters for real models implement the same
//! trait.

use std::future::Future;
use std::pin::Pin;

use serde::Serialize;
use serde_json::Value;

pub use consort_core::{Message, ModelStep, ToolUse};

/// A tool as a model is told about it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolSpec {
    /// The name the model uses to call the tool.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the tool's input object.
    pub input_schema: Value,
}

/// What a model is given for one turn.
#[derive(Clone, Copy, Debug)]
pub struct ModelRequest<'a> {
    /// The agent the turn is for.
    pub agent: &'a str,
    /// The run's conversation so far, oldest first.
    pub conversation: &'a [Message],
    /// Calls this run placed that have not replied yet.
    pub pending_calls: usize,
    /// The tools the model may use this turn.
    pub tools: &'a [ToolSpec],
}

/// A model's answer for one turn, with token usage when the model reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelReply {
    /// What the model decided.
    pub step: ModelStep,
    /// Prompt tokens billed for the turn (0 when not reported).
    pub input_tokens: u64,
    /// Completion tokens billed for the turn (0 when not reported).
    pub output_tokens: u64,
}

impl ModelReply {
    /// A reply with no token usage reported.
    pub fn new(step: ModelStep) -> Self {
        Self {
            step,
            input_tokens: 0,
            output_tokens: 0,
        }
    }
}

/// A model failure; the run fails with this text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("model error: {0}")]
pub struct ModelError(pub String);

/// The boxed future a [`Model`] returns (object-safe async).
pub type ModelFuture<'a> =
    Pin<Box<dyn Future<Output = Result<ModelReply, ModelError>> + Send + 'a>>;

/// An agent's model. Implementations must be deterministic enough that a replayed turn is
/// safe: consort records each step before acting, and replays the recorded step, never a new one.
pub trait Model: Send + Sync + 'static {
    /// Decides the next step of a run, given its conversation and tools.
    fn respond<'a>(&'a self, request: ModelRequest<'a>) -> ModelFuture<'a>;

    /// True when [`Model::respond`] answers at once without waiting on anything (the script
    /// model): the engine then runs the turn inline. Any other model is asked on a separate
    /// task, so a slow turn never blocks the agent's mailbox.
    fn is_immediate(&self) -> bool {
        false
    }
}
