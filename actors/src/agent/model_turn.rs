//! A model turn: what the model is shown (the tools the run's identity may see, the built-in
//! and directory tools), asking it (in place for an immediate model, on a task for any
//! other), and listing the agent's MCP servers before a turn that would miss their tools.
//!
//! It decides nothing about the run: the model's answer goes back to the agent machine as the
//! run's next input ([`model_input`]).

use std::time::Instant;

use consort_core::step::{self, Input, ModelAnswer, TurnAsked};
use ractor::ActorRef;
use serde_json::json;
use tracing::{Instrument, info, warn};

use super::{AgentActor, AgentMsg, AgentState, tell};
use crate::model::{ModelError, ModelReply, ModelRequest, ToolSpec};
use crate::run::RunRecord;
use crate::tools::{ListedTool, ToolError};

/// What one MCP server listed (or why it could not): its entry, which opening, the answer.
pub(super) type Listed = (String, u64, Result<Vec<ListedTool>, ToolError>);

impl AgentActor {
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
        // The agent's MCP servers are listed before a turn that would not see their tools: the
        // turn waits (the run counts as thinking) and is asked again once the answers are in.
        let due = state.servers.take_due(Instant::now());
        if !due.is_empty() {
            spawn_listing(state, myself, due);
        }
        if state.servers.asking() {
            state.machine.thinking(&id);
            state.awaiting_listing.push((id, asked));
            return None;
        }
        let identity =
            super::tool_use::run_identity(record, &state.catalog, &state.options.host_grants);
        let mut specs: Vec<ToolSpec> = state
            .catalog
            .visible_specs(&identity, &mut state.probe_cache);
        specs.extend(builtin_specs(&state.config));
        specs.extend(super::peers::specs(&state.goals));
        specs.extend(crate::meta_tools::meta_specs());
        let conversation = state.machine.view(&id)?.conversation.clone();
        if !state.model.is_immediate() {
            state.machine.thinking(&id);
            let depth = state.metrics.host().mailbox().clone();
            let (model, me, agent) = (
                state.model.clone(),
                myself.clone(),
                state.config.name.clone(),
            );
            tokio::spawn(
                async move {
                    let request = ModelRequest {
                        agent: &agent,
                        conversation: &conversation,
                        pending_calls: asked.pending,
                        tools: &specs,
                    };
                    let result = model.respond(request).await;
                    tell(
                        &depth,
                        &me,
                        AgentMsg::ModelDone {
                            run: id,
                            asked: Box::new(asked),
                            result,
                        },
                    );
                }
                .in_current_span(),
            );
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
    /// once no listing is out, the turns that waited are asked again.
    pub(super) fn tools_listed(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        listings: Vec<Listed>,
    ) {
        let now = Instant::now();
        for (server, opened, result) in listings {
            match &result {
                Ok(tools) => {
                    info!(agent = %state.config.name, %server, tools = tools.len(), "MCP server listed its tools");
                }
                Err(e) => {
                    warn!(agent = %state.config.name, %server, error = %e, "MCP server could not be listed; its tools are left out until a later turn asks again");
                }
            }
            for why in state.servers.listed(&server, opened, result, now) {
                warn!(agent = %state.config.name, %server, "an MCP tool is left out: {why}");
            }
        }
        state.rebuild_catalog();
        if state.servers.asking() {
            return;
        }
        let depth = state.metrics.host().mailbox().clone();
        for (run, asked) in std::mem::take(&mut state.awaiting_listing) {
            tell(
                &depth,
                myself,
                AgentMsg::AskAgain {
                    run,
                    asked: Box::new(asked),
                },
            );
        }
        for (run, tool_use_id) in std::mem::take(&mut state.uses_awaiting_listing) {
            state.machine.task_back(&run, &tool_use_id);
            tell(&depth, myself, AgentMsg::UseAgain(run));
        }
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

/// `call_agent` and `check_run`, as the model is told about them.
fn builtin_specs(config: &consort_config::AgentConfig) -> Vec<ToolSpec> {
    if config.can_call.is_empty() {
        return Vec::new();
    }
    vec![
        ToolSpec {
            name: step::CALL_AGENT.into(),
            description: format!(
                "Start a run on a peer agent ({}) and return its run id at once; the answer arrives later as a [reply from <agent>] message. With `wait_s` (1 to {}), wait up to that many seconds and get the answer as this tool's result instead. The peer sees only `input`.",
                config.can_call.join(", "),
                consort_config::MAX_WAIT_S
            ),
            input_schema: json!({"type": "object", "properties": {"agent": {"type": "string"}, "input": {"type": "string"}, "wait_s": {"type": "integer", "minimum": 1, "maximum": consort_config::MAX_WAIT_S}}, "required": ["agent", "input"]}),
        },
        ToolSpec {
            name: step::CHECK_RUN.into(),
            description: "Status and output of a run this run placed.".into(),
            input_schema: json!({"type": "object", "properties": {"run_id": {"type": "string"}}, "required": ["run_id"]}),
        },
    ]
}

/// Lists the `due` MCP servers on a task of their own, each within its bound, and tells the
/// actor what they answered.
pub(super) fn spawn_listing(
    state: &AgentState,
    myself: &ActorRef<AgentMsg>,
    due: Vec<crate::tools::DueListing>,
) {
    let depth = state.metrics.host().mailbox().clone();
    let me = myself.clone();
    tokio::spawn(
        async move {
            let mut tasks = tokio::task::JoinSet::new();
            for d in due {
                tasks.spawn(async move {
                    let result = match tokio::time::timeout(d.bound, d.server.list()).await {
                        Ok(result) => result,
                        Err(_) => Err(ToolError::ServerTimedOut {
                            server: d.name.clone(),
                            limit_ms: d.bound.as_millis() as u64,
                        }),
                    };
                    (d.name, d.opened, result)
                });
            }
            let mut listings = Vec::new();
            while let Some(joined) = tasks.join_next().await {
                match joined {
                    Ok(listing) => listings.push(listing),
                    Err(e) => warn!("an MCP listing task ended abnormally: {e}"),
                }
            }
            tell(&depth, &me, AgentMsg::ToolsListed(listings));
        }
        .in_current_span(),
    );
}
