//! Tool uses the agent machine hands the driver: each is resolved by the catalog
//! ([`meta_tools::resolve`]) and acted on here. An answer known at once (a meta-tool's, a
//! refusal) goes back to the machine as the use's result; an authorized use goes to its
//! approval gate in the machine (`Input::ToolAuthorized`), which hands it back to be run
//! (`Effect::RunTool`) or parks it; a directory tool's answer and a tool's result come back
//! from tasks of their own as [`AgentMsg::TaskDone`].

use ractor::ActorRef;
use tracing::info;

use consort_config::Approval;
use consort_core::ToolUse;
use consort_core::step::Input;

use super::{AgentActor, AgentMsg, AgentState};
use crate::directory::tools as directory_tools;
use crate::meta_tools::{self, Resolution};
use crate::run::RunRecord;
use crate::tools::ListingWaiter;
use consort_core::directory::Audience;

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
    /// Resolves one tool use and acts on what it comes to.
    pub(super) fn use_tool(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        record: &RunRecord,
        tool_use: &ToolUse,
    ) {
        let id = &record.id;
        let directory = !state.goals.is_empty();
        if let Some(name) = meta_tools::listing_target(&state.tools.catalog, tool_use, directory)
            && self.wait_for_listing(myself, state, record, &tool_use.id, &name)
        {
            return;
        }
        let scope = state.tools.scope(&state.options.host_grants, directory);
        match meta_tools::resolve(scope, record, tool_use) {
            Resolution::Answer {
                name,
                content,
                is_error,
            } => {
                let input = recorded(&tool_use.id, &name, content, is_error);
                state.machine.input(id, input, None);
            }
            Resolution::Authorized {
                result_name,
                tool,
                input,
                approval,
            } => {
                let authorized = Input::ToolAuthorized {
                    run: id.clone(),
                    tool_use_id: tool_use.id.clone(),
                    result_name,
                    tool,
                    input,
                    gated: approval.is_gated(),
                    requester_may_decide: approval == Approval::Requester,
                    started_here: false,
                };
                state.machine.input(id, authorized, None);
            }
            Resolution::Directory => {
                // The asking run's agent is the audience, never what the model wrote.
                let audience = Audience::Agent(state.config.name.clone());
                let asked = directory_tools::parse(id, tool_use);
                let supervisor = state.supervisor.clone();
                let (run, tool_use_id, result_name) =
                    (id.clone(), tool_use.id.clone(), tool_use.name.clone());
                state.machine.task_out(id, &tool_use.id);
                state.spawn_then_tell(myself, async move {
                    let answer = match asked {
                        Err(message) => (message, true),
                        Ok(asked) => directory_tools::answer(&supervisor, audience, asked).await,
                    };
                    AgentMsg::tool_done(run, tool_use_id, result_name, answer)
                });
            }
        }
    }

    /// A use of a tool of an MCP server this incarnation has not listed yet (a run resumed
    /// after a restart uses it before any model turn listed the servers): the listing starts,
    /// and the use waits for it, counted as in flight, instead of failing "not listed yet".
    /// The listing is bounded by the entry's `connect_timeout_ms`; the use is stepped again
    /// once it is in (`AgentActor::tools_listed`). Returns whether the use waits.
    fn wait_for_listing(
        &self,
        myself: &ActorRef<AgentMsg>,
        state: &mut AgentState,
        record: &RunRecord,
        tool_use_id: &str,
        name: &str,
    ) -> bool {
        if !state.tools.servers.listing_pending(name) {
            return false;
        }
        let catalog = &state.tools.catalog;
        let identity = meta_tools::run_identity(record, catalog, &state.options.host_grants);
        self.list_due_servers(myself, state, &identity);
        if !state.tools.servers.asking() {
            return false;
        }
        info!(
            tool = name,
            "the tool's MCP server is not listed yet: the use waits for its listing"
        );
        let run = &record.id;
        state.machine.task_out(run, tool_use_id);
        let waiter = ListingWaiter::Use(run.clone(), tool_use_id.to_owned());
        state.tools.wait_for_listing(waiter);
        true
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
        input: serde_json::Value,
    ) {
        let id = &record.id;
        let Some(tool) = state.tools.catalog.tool(name).cloned() else {
            // The tool left the catalog (a reload) between its authorization and now.
            let text = format!(
                "no tool named `{name}` any more; use search_tools to find the tools you can use"
            );
            state
                .machine
                .input(id, recorded(tool_use_id, result_name, text, true), None);
            return;
        };
        let catalog = &state.tools.catalog;
        let identity = meta_tools::run_identity(record, catalog, &state.options.host_grants);
        catalog.record_use(name, &identity);
        state.machine.task_out(id, tool_use_id);
        let via_meta = result_name != name;
        let (run, tool_use_id) = (id.clone(), tool_use_id.to_owned());
        let caller = (state.config.name.clone(), run.clone(), record.input.clone());
        let (env, result_name) = (state.config.env.clone(), result_name.to_owned());
        state.spawn_then_tell(myself, async move {
            let answer = crate::tools::invoke_isolated(tool, caller, env, input, via_meta).await;
            AgentMsg::tool_done(run, tool_use_id, result_name, answer)
        });
    }
}
