//! One turn of a real model, whatever carries it: the system prompt, the offered tools, the
//! request, the check of the answer, and the repair loop.
//!
//! An adapter implements [`TurnTransport`] (send these messages and tools, get a [`Draft`] and
//! its usage back); [`ask`] does the rest, the same for every adapter: a malformed turn is sent
//! back with [`repair::feedback`] up to `repair_attempts` times, and the usage of every request
//! of the turn is summed into its cost.

use std::future::Future;

use tracing::{debug, warn};

use crate::repair::{self, Draft};
use crate::{Message, ModelError, ModelReply, ModelRequest, ToolSpec, prompt};

/// Token usage of one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub input: u64,
    /// Completion tokens.
    pub output: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.input += other.input;
        self.output += other.output;
    }
}

/// What an adapter carries: one request for a turn, answered with a draft.
pub trait TurnTransport: Sync {
    /// Sends `system`, `conversation` and `tools`; transient failures are the transport's to
    /// retry, so an error here fails the turn.
    fn send_turn(
        &self,
        request: &ModelRequest<'_>,
        system: &str,
        conversation: &[Message],
        tools: &[ToolSpec],
    ) -> impl Future<Output = Result<(Draft, Usage), ModelError>> + Send;
}

/// The settings of [`ask`] that come from agent.yaml.
#[derive(Clone, Copy, Debug)]
pub struct TurnSettings<'a> {
    /// The agent's description, for consort's system prompt.
    pub description: &'a str,
    /// `system:` from agent.yaml, replacing consort's prompt.
    pub system: Option<&'a str>,
    /// How many times a malformed turn is sent back.
    pub repair_attempts: u32,
    /// Offer `final_answer` and expect every turn to be a tool call.
    pub answer_tool: bool,
}

/// Asks for one turn until it is well-formed or the repairs are spent.
pub async fn ask<T: TurnTransport>(
    transport: &T,
    request: &ModelRequest<'_>,
    settings: TurnSettings<'_>,
) -> Result<ModelReply, ModelError> {
    let offered = prompt::offered_tools(request, settings.answer_tool);
    let system = prompt::system_prompt(
        request,
        settings.description,
        settings.system,
        settings.answer_tool,
    );
    let mut conversation = request.conversation.to_vec();
    let mut usage = Usage::default();
    let mut repairs = 0;
    loop {
        let (draft, used) = transport
            .send_turn(request, &system, &conversation, &offered)
            .await?;
        usage += used;
        match repair::check_turn(&draft, request, &offered, settings.answer_tool) {
            Ok(step) => {
                return Ok(ModelReply {
                    step,
                    input_tokens: usage.input,
                    output_tokens: usage.output,
                });
            }
            Err(problems) if repairs < settings.repair_attempts => {
                let text: String = draft
                    .text
                    .as_deref()
                    .unwrap_or_default()
                    .chars()
                    .take(500)
                    .collect();
                debug!(
                    agent = request.agent,
                    calls = draft.calls.len(),
                    "malformed turn as written: {text}"
                );
                warn!(
                    agent = request.agent,
                    repair = repairs + 1,
                    "malformed turn sent back to the model: {}",
                    repair::describe(&problems)
                );
                conversation.extend(repair::feedback(&draft, &problems, repairs));
                repairs += 1;
            }
            Err(problems) => {
                return Err(ModelError::MalformedToolCalls {
                    attempts: repairs + 1,
                    problem: repair::describe(&problems),
                });
            }
        }
    }
}
