//! consort-models: the model seam (what an agent's model is shown, and what it may answer) and
//! the adapters that reach real models.
//!
//! A [`Model`] gets the run's conversation (its input, its earlier tool uses and their
//! results, and `[reply from <agent>]` messages) and returns one [`ModelStep`]: a final answer,
//! tool uses, or "wait" while calls it placed are still out. The engine in consort-actors
//! (`agent/drive.rs`) records every step in the run's event log *before* acting on it, so a host
//! restarted mid-turn replays the same tool-use ids and a replayed call finds the run it
//! already created.
//!
//! This crate is the only one that talks to model servers and model programs. It never runs
//! tools, places calls or touches a run store: a model only decides. consort-actors ships the
//! deterministic script model (`consort_actors::script::ScriptModel`); this crate ships two
//! adapters for real models:
//!
//! - [`openai::OpenAiAdapter`] speaks the OpenAI-compatible chat-completions API (vLLM,
//!   llama.cpp's server, Ollama, hosted APIs), with tool calls, streaming and retries;
//! - [`command::CommandAdapter`] speaks JSON lines to a local program.
//!
//! Both share what a real model needs around the wire ([`turn`]): the system prompt and the
//! `wait_for_replies` tool ([`prompt`]), and the check of a turn's tool calls with the repair
//! loop that sends a malformed turn back to the model ([`repair`]). Neither keeps state about a
//! run between turns: everything comes from the conversation, so a replayed run needs nothing
//! but its log.

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

pub mod command;
pub mod openai;
pub mod prompt;
pub mod repair;
pub mod turn;

/// A model failure; the run fails with its text, which never holds an API key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The adapter cannot make a request as configured (an API key variable that is not set,
    /// a base URL the HTTP client refuses).
    #[error("model error: {0}")]
    Config(String),
    /// The server refused the credentials (401 or 403).
    #[error("model error: the server refused the API key ({status}): {detail}")]
    Unauthorized {
        /// The HTTP status.
        status: u16,
        /// What the server said, shortened, with the key redacted.
        detail: String,
    },
    /// The server does not serve the model named in `model:`.
    #[error("model error: the server does not know the model `{model}`: {detail}")]
    UnknownModel {
        /// The model asked for.
        model: String,
        /// What the server said, shortened.
        detail: String,
    },
    /// The server refused the request for another reason (a 4xx other than the above).
    #[error("model error: the server refused the request ({status}): {detail}")]
    Rejected {
        /// The HTTP status.
        status: u16,
        /// What the server said, shortened.
        detail: String,
    },
    /// The model could not be reached or kept failing (429, 5xx, timeouts, connection errors,
    /// a crashing program), after every retry.
    #[error("model error: no answer after {attempts} attempt(s): {last}")]
    Unavailable {
        /// Requests made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// The answer could not be read (not the API's shape).
    #[error("model error: unreadable answer: {0}")]
    Protocol(String),
    /// The model kept answering with malformed tool calls after being told what was wrong.
    #[error(
        "model error: the model sent malformed tool calls {attempts} time(s) in a row; last: {problem}"
    )]
    MalformedToolCalls {
        /// Turns asked for.
        attempts: u32,
        /// The last problem, as the model was told.
        problem: String,
    },
    /// Any other failure.
    #[error("model error: {0}")]
    Failed(String),
}

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

/// A model that could not be set up: every turn fails with why, so the agent's runs say it
/// rather than the agent failing to start.
#[derive(Debug)]
pub struct UnusableModel(pub ModelError);

impl Model for UnusableModel {
    fn respond<'a>(&'a self, _request: ModelRequest<'a>) -> ModelFuture<'a> {
        let error = self.0.clone();
        Box::pin(async move { Err(error) })
    }
}
