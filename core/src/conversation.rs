//! What a model is shown and what it may answer, as plain data.
//!
//! A run's conversation ([`Message`]s) is rebuilt from its event log by [`crate::RunView`];
//! a model answers each turn with one [`ModelStep`]. The model seam itself (the trait, the
//! adapters) lives in consort-actors: this module only names the data both sides agree on.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::RunId;

/// One tool use emitted by a model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolUse {
    /// Unique within the run, and stable: the child run id of a call derives from it.
    pub id: String,
    /// The tool the model asked for.
    pub name: String,
    /// The tool's input, as the model wrote it.
    pub input: Value,
}

impl ToolUse {
    /// For a `call_agent` use that asked to block (`wait_s` of at least one second): how
    /// long it keeps the caller's turn open, capped at [`consort_config::MAX_WAIT_S`].
    pub fn wait_s(&self) -> Option<u32> {
        if self.name != "call_agent" {
            return None;
        }
        let wait = self.input.get("wait_s")?.as_f64()?;
        if !wait.is_finite() || wait < 1.0 {
            return None;
        }
        Some((wait.ceil() as u32).min(consort_config::MAX_WAIT_S))
    }
}

/// One message of a run's conversation, rebuilt from its event log.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// The run's input.
    User(String),
    /// A model turn that used tools.
    Assistant {
        /// The tool uses of that turn, in order.
        tool_uses: Vec<ToolUse>,
    },
    /// The result of one tool use (`is_error` for refusals and tool failures).
    ToolResult {
        /// The tool use it answers.
        tool_use_id: String,
        /// The tool's name.
        name: String,
        /// What the model reads.
        content: String,
        /// True for refusals and failures.
        is_error: bool,
    },
    /// A peer's answer to a call this run placed.
    Reply {
        /// The callee.
        from: String,
        /// The callee's run.
        run_id: RunId,
        /// Its (capped) answer or error.
        text: String,
        /// The callee's run failed.
        failed: bool,
    },
}

impl Message {
    /// The text a model reads for this message.
    pub fn render(&self) -> String {
        match self {
            Self::User(text) => text.clone(),
            Self::Assistant { tool_uses } => tool_uses
                .iter()
                .map(|t| format!("[tool use {} {}] {}", t.id, t.name, t.input))
                .collect::<Vec<_>>()
                .join("\n"),
            Self::ToolResult {
                tool_use_id,
                content,
                ..
            } => format!("[tool result {tool_use_id}] {content}"),
            Self::Reply {
                from, text, failed, ..
            } => {
                if *failed {
                    format!("[reply from {from}] (the run failed) {text}")
                } else {
                    format!("[reply from {from}] {text}")
                }
            }
        }
    }
}

/// What a model decided for one turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelStep {
    /// The run's final answer.
    Answer(String),
    /// Tools to use; the engine runs them and (unless calls are now out) asks again.
    ToolUses(Vec<ToolUse>),
    /// Nothing to do until a pending call replies.
    Wait,
}
