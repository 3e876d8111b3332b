//! A model turn: asking the model (in place for an immediate model, on a task for any other)
//! with the tools the run's identity is shown ([`meta_tools::turn_specs`]), and listing the
//! agent's MCP servers before a turn that would miss their tools.
//!
//! It decides nothing about the run: the model's answer goes back to the agent machine as the
//! run's next input ([`model_input`]).

use std::time::Instant;

use consort_core::step::{Input, ModelAnswer, TurnAsked};
use ractor::ActorRef;

use super::{AgentActor, AgentMsg, AgentState};
use crate::ActorsError;
use crate::meta_tools;
use crate::model::{ModelError, ModelReply, ModelRequest};
use crate::run::RunRecord;
use crate::tools::{Listed, ListingWaiter};
use crate::visibility::Identity;

impl AgentActor {
    /// Starts listing the agent's MCP servers that are due and that a run acting for `identity`
    /// may start, on a task of its own; what they answer comes back as
    /// [`AgentMsg::ToolsListed`].
    pub(super) fn list_due_servers(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        identity: &Identity,
    ) {
        let due = state.tools.take_due_for(identity, Instant::now());
        if !due.is_empty() {
            state.spawn_then_tell(myself, async move {
                AgentMsg::ToolsListed(crate::tools::list_due(due).await)
            });
        }
    }

    /// Asks the model for a turn. An immediate model (the script) answers here and its answer
    /// is the next input; any other model answers on its own task (`ModelDone`), so one slow
    /// turn never holds up this agent's other runs and calls.
    pub(super) async fn ask_model(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        record: &RunRecord,
        asked: TurnAsked,
    ) -> Option<Input> {
        let id = record.id.clone();
        let identity =
            meta_tools::run_identity(record, &state.tools.catalog, &state.options.host_grants);
        // The agent's MCP servers are listed before a turn that would not see their tools: the
        // turn waits (the run counts as thinking) and is asked again once the answers are in.
        self.list_due_servers(myself, state, &identity);
        if state.tools.servers.asking() {
            state.machine.thinking(&id);
            let waiter = ListingWaiter::Turn(id, asked);
            state.tools.wait_for_listing(waiter);
            return None;
        }
        let tools = &mut state.tools;
        let specs = meta_tools::turn_specs(
            &tools.catalog,
            &identity,
            &mut tools.probe_cache,
            &state.config,
            &state.goals,
        );
        let conversation = state.machine.view(&id)?.conversation.clone();
        if !state.model.is_immediate() {
            state.machine.thinking(&id);
            let (model, agent) = (state.model.clone(), state.config.name.clone());
            state.spawn_then_tell(myself, async move {
                let request = ModelRequest {
                    agent: &agent,
                    conversation: &conversation,
                    pending_calls: asked.pending,
                    tools: &specs,
                };
                let result = model.respond(request).await;
                AgentMsg::ModelDone {
                    run: id,
                    asked: Box::new(asked),
                    result,
                }
            });
            return None;
        }
        let request = ModelRequest {
            agent: &state.config.name,
            conversation: &conversation,
            pending_calls: asked.pending,
            tools: &specs,
        };
        let result = state.model.respond(request).await;
        Some(model_input(asked, result))
    }

    /// What the agent's MCP servers listed: the catalog is built again with their tools, and
    /// once no listing is out, the turns and uses that waited go on.
    pub(super) async fn tools_listed(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        listings: Vec<Listed>,
    ) -> Result<(), ActorsError> {
        for waiter in state.tools.listed(&state.config, listings) {
            match waiter {
                ListingWaiter::Turn(run, asked) => {
                    state.machine.answered(&run);
                    if state.machine.view(&run).is_none() || !state.records.contains_key(&run) {
                        let view = state.load(&run).await?;
                        state.machine.loaded(&run, view);
                    }
                    if let Some(record) = state.records.get(&run).cloned()
                        && let Some(input) = self.ask_model(myself, state, &record, asked).await
                    {
                        self.drive(myself, state, &run, input).await?;
                    }
                }
                ListingWaiter::Use(run, tool_use_id) => {
                    state.machine.task_back(&run, &tool_use_id);
                    self.advance(myself, state, &run).await?;
                }
            }
        }
        Ok(())
    }
}

/// The input a model's answer makes.
pub(super) fn model_input(asked: TurnAsked, result: Result<ModelReply, ModelError>) -> Input {
    Input::ModelAnswered {
        asked,
        answer: result
            .map(|reply| ModelAnswer {
                step: reply.step,
                input_tokens: reply.input_tokens,
                output_tokens: reply.output_tokens,
            })
            .map_err(|e| e.to_string()),
    }
}
