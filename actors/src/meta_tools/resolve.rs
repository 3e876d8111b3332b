//! What one tool use of a run comes to, before anything runs: a meta-tool's answer, a refusal,
//! an authorized use of a declared tool (which goes to its approval gate in the agent machine),
//! or a directory tool.
//!
//! A use by name and a use through `invoke_tool` go through one pipeline: the request checks
//! of `invoke_tool`, then the real authorization (the catalog's guards and policies). Nothing
//! here runs a handler, asks a server or writes run state; the agent actor acts on the
//! [`Resolution`]. Whether a use must first wait for its MCP server's listing is the actor's
//! to decide ([`listing_target`] names the tool it would wait for).

use serde_json::Value;
use tracing::info;

use consort_config::Approval;
use consort_core::ToolUse;

use super::{AgentCatalog, INVOKE_TOOL, LOAD_TOOL, MetaAnswer, SEARCH_TOOLS};
use super::{parse_invoke, validate_arguments};
use crate::run::{Channel, RunRecord};
use crate::tools::{ServerSlots, ToolError};
use crate::visibility::{Identity, ProbeCache, RoleGrants};

/// What one tool use comes to.
#[derive(Debug)]
pub(crate) enum Resolution {
    /// Recorded at once as the use's result under `name` (a meta-tool's answer, a refusal):
    /// it counts as no tool call.
    Answer {
        name: String,
        content: String,
        is_error: bool,
    },
    /// A declared tool the run's identity may use: its approval gate decides whether it runs.
    Authorized {
        /// What the result is recorded under (`invoke_tool` for a use through it).
        result_name: String,
        tool: String,
        input: Value,
        approval: Approval,
    },
    /// One of the directory's tools (`list_peers`, `deliver`, …).
    Directory,
}

/// What resolving a use reads: the agent's catalog and servers as they are now.
pub(crate) struct UseScope<'a> {
    pub catalog: &'a AgentCatalog,
    pub probe_cache: &'a mut ProbeCache,
    pub servers: &'a ServerSlots,
    pub host_grants: &'a RoleGrants,
    /// Whether the agent is offered the directory's tools (it belongs to a goal).
    pub directory: bool,
}

/// The identity a run acts for now: a peer run's roles (a call, or a peer's delivery) are
/// this agent's current grants to the agent the verified chain names, as far as the run's
/// origin holds them here ([`consort_core::visibility::acting_roles`]); any other run's are
/// what was stored.
pub(crate) fn run_identity(
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

/// The tool a use names that the catalog does not hold (yet): the one whose MCP server's
/// listing it could wait for. `None` for meta-tools and directory tools.
pub(crate) fn listing_target(
    catalog: &AgentCatalog,
    tool_use: &ToolUse,
    directory: bool,
) -> Option<String> {
    let name = match tool_use.name.as_str() {
        SEARCH_TOOLS | LOAD_TOOL => return None,
        INVOKE_TOOL => parse_invoke(&tool_use.input).ok()?.0,
        name if directory && crate::directory::tools::is_directory_tool(name) => return None,
        name => name.to_owned(),
    };
    catalog.tool(&name).is_none().then_some(name)
}

/// A tool's failure, as the model reads it: a use through `invoke_tool` reads the meta-tools'
/// typed JSON error.
pub(crate) fn tool_error_text(error: &ToolError, via_meta: bool) -> String {
    if via_meta {
        MetaAnswer::from_tool_error(error).content
    } else {
        error.to_string()
    }
}

/// Resolves one use of run `record`.
pub(crate) fn resolve(scope: UseScope<'_>, record: &RunRecord, tool_use: &ToolUse) -> Resolution {
    let UseScope {
        catalog,
        probe_cache,
        servers,
        host_grants,
        directory,
    } = scope;
    let identity = || run_identity(record, catalog, host_grants);
    match tool_use.name.as_str() {
        SEARCH_TOOLS | LOAD_TOOL => {
            let answer = if tool_use.name == SEARCH_TOOLS {
                catalog.search(&identity(), probe_cache, &tool_use.input)
            } else {
                catalog.load(&identity(), probe_cache, &tool_use.input)
            };
            info!(
                meta_tool = %tool_use.name, principal = %record.principal, origin = %record.origin,
                generation = catalog.generation(), is_error = answer.is_error,
                "meta-tool call"
            );
            answer_of(&tool_use.name, answer.content, answer.is_error)
        }
        INVOKE_TOOL => {
            let parsed = parse_invoke(&tool_use.input).and_then(|(name, args)| {
                let Some(tool) = catalog.tool(&name) else {
                    return Err(match servers.unlisted(&name) {
                        Some((stand_in, error)) => MetaAnswer::from_tool_error(
                            &catalog
                                .authorize_unlisted(&name, stand_in.as_ref(), &identity(), &args)
                                .err()
                                .unwrap_or(error),
                        ),
                        None => MetaAnswer::error("no_such_tool", no_such_tool(&name)),
                    });
                };
                validate_arguments(&tool.spec().input_schema, &args)
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
                    authorize(catalog, &identity(), record, INVOKE_TOOL, name, args)
                }
                Err(answer) => answer_of(INVOKE_TOOL, answer.content, true),
            }
        }
        name if directory && crate::directory::tools::is_directory_tool(name) => {
            Resolution::Directory
        }
        name if catalog.tool(name).is_none() => {
            // A tool of an MCP server that could not be listed is told why, once the caller
            // passed the authorization its entry declares.
            let text = match servers.unlisted(name) {
                None => no_such_tool(name),
                Some((stand_in, error)) => catalog
                    .authorize_unlisted(name, stand_in.as_ref(), &identity(), &tool_use.input)
                    .err()
                    .unwrap_or(error)
                    .to_string(),
            };
            answer_of(name, text, true)
        }
        name => authorize(
            catalog,
            &identity(),
            record,
            name,
            name.to_owned(),
            tool_use.input.clone(),
        ),
    }
}

/// The real authorization of one use of a declared tool, by name or through `invoke_tool`
/// (`result_name` is what the result is recorded under).
fn authorize(
    catalog: &AgentCatalog,
    identity: &Identity,
    record: &RunRecord,
    result_name: &str,
    tool: String,
    input: Value,
) -> Resolution {
    let Some(declared) = catalog.tool(&tool) else {
        return answer_of(result_name, no_such_tool(&tool), true);
    };
    if let Err(refusal) = catalog.authorize(&tool, identity, &input) {
        info!(tool = %tool, principal = %record.principal, origin = %record.origin, "tool use refused: {refusal}");
        let content = tool_error_text(&refusal, result_name != tool);
        return answer_of(result_name, content, true);
    }
    Resolution::Authorized {
        result_name: result_name.to_owned(),
        approval: declared.approval(),
        tool,
        input,
    }
}

fn answer_of(name: &str, content: String, is_error: bool) -> Resolution {
    Resolution::Answer {
        name: name.to_owned(),
        content,
        is_error,
    }
}

fn no_such_tool(name: &str) -> String {
    format!("no tool named `{name}`; use search_tools to find the tools you can use")
}
