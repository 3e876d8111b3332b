//! Tool uses the run state machine hands to the agent: declared tools, tools an embedding app
//! registered, and the meta-tools `search_tools`, `load_tool` and `invoke_tool`.
//!
//! A use by name and a use through `invoke_tool` go through one pipeline: the real
//! authorization (the catalog's guards and policies), then consort-core's approval gate, then
//! the handler on its own task. The meta-tools answer from the agent's catalog at once. This
//! module never decides a run's next move: it records one tool result (or the gate's block)
//! and lets the engine step again.

use ractor::ActorRef;
use serde_json::Value;
use tracing::{Instrument, info, warn};

use consort_config::Approval;
use consort_core::ToolUse;
use consort_core::step::Input;

use super::{AgentActor, AgentMsg, AgentState, tell, tool_error_text};
use crate::meta_tools::{self, AgentCatalog, INVOKE_TOOL, LOAD_TOOL, MetaAnswer, SEARCH_TOOLS};
use crate::run::{Channel, RunRecord};
use crate::tools::{ToolContext, ToolError};
use crate::visibility::{Identity, RoleGrants};

/// The identity a run acts for now: a peer run's roles (a call, or a peer's delivery) are
/// this agent's current grants to the agent the verified chain names, as far as the run's
/// origin holds them here ([`consort_core::visibility::acting_roles`]); any other run's are
/// what was stored.
pub(super) fn run_identity(
    record: &RunRecord,
    catalog: &AgentCatalog,
    host_grants: &RoleGrants,
) -> Identity {
    match (&record.channel, record.principal.strip_prefix("agent:")) {
        (Channel::Agent(peer) | Channel::Delivery(peer), Some(principal)) if peer == principal => {
            catalog.peer_identity(peer, &record.origin(), host_grants)
        }
        _ => record.identity(),
    }
}

/// A use of a tool of an MCP server this incarnation has not listed yet (a run resumed after a
/// restart uses it before any model turn listed the servers): the listing starts, and the use
/// waits for it, counted as in flight, instead of failing "not listed yet". The listing is
/// bounded by the entry's `connect_timeout_ms`; the use is stepped again once it is in
/// (`AgentMsg::UseAgain`). Returns whether the use waits.
fn wait_for_listing(
    myself: &ActorRef<AgentMsg>,
    state: &mut AgentState,
    run: &consort_net::RunId,
    tool_use_id: &str,
    name: &str,
) -> bool {
    if !state.servers.listing_pending(name) {
        return false;
    }
    let due = state.servers.take_due(std::time::Instant::now());
    if !due.is_empty() {
        super::model_turn::spawn_listing(state, myself, due);
    }
    if !state.servers.asking() {
        return false;
    }
    info!(
        tool = name,
        "the tool's MCP server is not listed yet: the use waits for its listing"
    );
    state.machine.task_out(run, tool_use_id);
    state
        .uses_awaiting_listing
        .push((run.clone(), tool_use_id.to_owned()));
    true
}

/// The input that records a use's result at once (a meta-tool's answer, a refusal): the
/// machine steps it next, as it would a tool's task coming back. It counts as no tool call.
fn recorded(tool_use_id: &str, name: &str, content: String, is_error: bool) -> Input {
    Input::ToolFinished {
        tool_use_id: tool_use_id.to_owned(),
        name: name.to_owned(),
        content,
        is_error,
        counts: false,
    }
}

impl AgentActor {
    /// Resolves one tool use: a meta-tool's answer or a refusal is recorded at once (an input
    /// to the machine); an authorized use of a declared tool goes through its approval gate in
    /// the machine (`Input::ToolAuthorized`); a directory tool or a use waiting for a listing
    /// has a task out.
    pub(super) fn use_tool(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        record: &RunRecord,
        tool_use: &ToolUse,
    ) {
        let id = &record.id;
        match tool_use.name.as_str() {
            SEARCH_TOOLS | LOAD_TOOL => {
                let identity = run_identity(record, &state.catalog, &state.options.host_grants);
                let answer = if tool_use.name == SEARCH_TOOLS {
                    state
                        .catalog
                        .search(&identity, &mut state.probe_cache, &tool_use.input)
                } else {
                    state
                        .catalog
                        .load(&identity, &mut state.probe_cache, &tool_use.input)
                };
                info!(
                    meta_tool = %tool_use.name, principal = %record.principal, origin = %record.origin,
                    generation = state.catalog.generation(), is_error = answer.is_error,
                    "meta-tool call"
                );
                let input = recorded(
                    &tool_use.id,
                    &tool_use.name,
                    answer.content,
                    answer.is_error,
                );
                state.machine.input(id, input, None);
            }
            INVOKE_TOOL => {
                if let Ok((name, _)) = meta_tools::parse_invoke(&tool_use.input)
                    && state.catalog.tool(&name).is_none()
                    && wait_for_listing(myself, state, id, &tool_use.id, &name)
                {
                    return;
                }
                let parsed = meta_tools::parse_invoke(&tool_use.input).and_then(|(name, args)| {
                    let Some(tool) = state.catalog.tool(&name) else {
                        if let Some((stand_in, error)) = state.servers.unlisted(&name) {
                            let identity = run_identity(record, &state.catalog, &state.options.host_grants);
                            let error = state
                                .catalog
                                .authorize_unlisted(&name, stand_in.as_ref(), &identity, &args)
                                .err()
                                .unwrap_or(error);
                            return Err(MetaAnswer::from_tool_error(&error));
                        }
                        return Err(MetaAnswer::error(
                            "no_such_tool",
                            format!("no tool named `{name}`; use search_tools to find the tools you can use"),
                        ));
                    };
                    meta_tools::validate_arguments(&tool.spec().input_schema, &args)
                        .map_err(|m| MetaAnswer::error("invalid_arguments", m))?;
                    Ok((name, args))
                });
                info!(
                    meta_tool = INVOKE_TOOL, principal = %record.principal, origin = %record.origin,
                    tool = parsed.as_ref().map(|(n, _)| n.as_str()).unwrap_or(""),
                    "meta-tool call"
                );
                match parsed {
                    Ok((name, args)) => {
                        self.authorize_tool(state, record, tool_use, INVOKE_TOOL, &name, args);
                    }
                    Err(answer) => {
                        let input = recorded(&tool_use.id, INVOKE_TOOL, answer.content, true);
                        state.machine.input(id, input, None);
                    }
                }
            }
            name if !state.goals.is_empty() && super::peers::is_directory_tool(name) => {
                super::peers::use_directory_tool(myself, state, record, tool_use);
            }
            name => {
                if state.catalog.tool(name).is_none()
                    && wait_for_listing(myself, state, id, &tool_use.id, name)
                {
                    return;
                }
                if state.catalog.tool(name).is_none() {
                    // A tool of an MCP server that could not be listed is told why, once the
                    // caller passed the authorization its entry declares.
                    let text = match state.servers.unlisted(name) {
                        None => format!(
                            "no tool named `{name}`; use search_tools to find the tools you can use"
                        ),
                        Some((stand_in, error)) => {
                            let identity =
                                run_identity(record, &state.catalog, &state.options.host_grants);
                            state
                                .catalog
                                .authorize_unlisted(
                                    name,
                                    stand_in.as_ref(),
                                    &identity,
                                    &tool_use.input,
                                )
                                .err()
                                .unwrap_or(error)
                                .to_string()
                        }
                    };
                    state
                        .machine
                        .input(id, recorded(&tool_use.id, name, text, true), None);
                    return;
                }
                let input = tool_use.input.clone();
                self.authorize_tool(state, record, tool_use, name, name, input);
            }
        }
    }

    /// The real authorization of one use of a declared tool, by name or through
    /// `invoke_tool` (`result_name` is what the result is recorded under): a refusal is
    /// recorded at once; an authorized use goes to its approval gate in the machine.
    fn authorize_tool(
        &self,
        state: &mut AgentState,
        record: &RunRecord,
        tool_use: &ToolUse,
        result_name: &str,
        name: &str,
        input: Value,
    ) {
        let id = &record.id;
        let via_meta = result_name != name;
        let Some(tool) = state.catalog.tool(name).cloned() else {
            return;
        };
        let identity = run_identity(record, &state.catalog, &state.options.host_grants);
        if let Err(refusal) = state.catalog.authorize(name, &identity, &input) {
            info!(tool = name, principal = %record.principal, origin = %record.origin, "tool use refused: {refusal}");
            let content = tool_error_text(&refusal, via_meta);
            state
                .machine
                .input(id, recorded(&tool_use.id, result_name, content, true), None);
            return;
        }
        let approval = tool.approval();
        let authorized = Input::ToolAuthorized {
            run: id.clone(),
            tool_use_id: tool_use.id.clone(),
            result_name: result_name.to_owned(),
            tool: name.to_owned(),
            input,
            gated: approval.is_gated(),
            requester_may_decide: approval == Approval::Requester,
            started_here: false,
        };
        state.machine.input(id, authorized, None);
    }

    /// Runs a use its gate let through, on its own task: a slow query or a remote API never
    /// blocks the agent's mailbox, and a tool that panics fails its own use, not the agent.
    pub(super) fn run_tool(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        record: &RunRecord,
        tool_use_id: &str,
        (name, result_name): (&str, &str),
        input: Value,
    ) {
        let id = &record.id;
        let via_meta = result_name != name;
        let Some(tool) = state.catalog.tool(name).cloned() else {
            // The tool left the catalog (a reload) between its authorization and now.
            let text = format!(
                "no tool named `{name}` any more; use search_tools to find the tools you can use"
            );
            state
                .machine
                .input(id, recorded(tool_use_id, result_name, text, true), None);
            return;
        };
        let identity = run_identity(record, &state.catalog, &state.options.host_grants);
        state.catalog.record_use(name, &identity);
        state.machine.task_out(id, tool_use_id);
        let (me, run, tool_use_id) = (myself.clone(), id.clone(), tool_use_id.to_owned());
        let depth = state.metrics.host().mailbox().clone();
        let (agent, run_input) = (state.config.name.clone(), record.input.clone());
        let (env, result_name) = (state.config.env.clone(), result_name.to_owned());
        let task_run = run.clone();
        tokio::spawn(
            async move {
                let invocation = tokio::spawn(async move {
                    let ctx = ToolContext {
                        agent: &agent,
                        run_id: &task_run,
                        input: &run_input,
                        env: &env,
                    };
                    tool.invoke(ctx, &input).await
                });
                let outcome = invocation.await.unwrap_or_else(|e| {
                    warn!("tool task ended abnormally: {e}");
                    Err(ToolError::Failed(
                        "the tool failed unexpectedly (it panicked); nothing was returned".into(),
                    ))
                });
                let (content, is_error) = match outcome {
                    Ok(text) => (text, false),
                    Err(e) => (tool_error_text(&e, via_meta), true),
                };
                tell(
                    &depth,
                    &me,
                    AgentMsg::ToolDone {
                        run,
                        tool_use_id,
                        result_name,
                        content,
                        is_error,
                    },
                );
            }
            .in_current_span(),
        );
    }
}
