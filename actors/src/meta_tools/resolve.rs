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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use consort_config::AgentConfig;
    use consort_core::RunId;

    use super::*;
    use crate::model::ToolSpec;
    use crate::run::Channel;
    use crate::store::NewRun;
    use crate::tools::{Tool, ToolContext, ToolFuture};
    use crate::visibility::{AuthMarkers, Caller, Origin, PolicyRef, Principal};

    /// A tool with a schema, a policy and an approval of its own; it never runs here.
    struct Declared {
        name: &'static str,
        policy: Option<&'static str>,
        approval: Approval,
    }

    impl Tool for Declared {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: self.name.into(),
                description: format!("{} tool", self.name),
                input_schema: json!({"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"], "additionalProperties": false}),
            }
        }
        fn invoke<'a>(&'a self, _ctx: ToolContext<'a>, _input: &'a Value) -> ToolFuture<'a> {
            unreachable!("resolving a use never runs its tool")
        }
        fn approval(&self) -> Approval {
            self.approval
        }
        fn auth_markers(&self) -> AuthMarkers {
            AuthMarkers {
                policies: self
                    .policy
                    .and_then(|p| PolicyRef::parse(p).ok())
                    .into_iter()
                    .collect(),
                ..AuthMarkers::default()
            }
        }
    }

    fn catalog() -> AgentCatalog {
        let tools: Vec<Arc<dyn Tool>> = vec![
            Arc::new(Declared {
                name: "pay",
                policy: None,
                approval: Approval::Required,
            }),
            Arc::new(Declared {
                name: "payroll",
                policy: Some("roles:finance"),
                approval: Approval::None,
            }),
        ];
        let config = AgentConfig::builder("cfo").build().expect("a valid agent");
        AgentCatalog::build(&config, &tools, 1)
    }

    /// A root run started through the API by `alice` holding `roles`.
    fn run_of(roles: &[&str]) -> RunRecord {
        let identity = Identity::Present(Caller::new(
            Principal::Api("alice".into()),
            roles.iter().map(|r| r.to_string()).collect(),
        ));
        NewRun {
            id: RunId::random(),
            agent: "cfo".into(),
            channel: Channel::Api,
            parent_run: None,
            parent_agent: None,
            tool_use_id: None,
            chain: Vec::new(),
            input: "pay the invoice".into(),
            origin: Origin::of(&identity),
            identity,
            budget: None,
        }
        .record(0)
    }

    fn resolved(record: &RunRecord, name: &str, input: Value, directory: bool) -> Resolution {
        let catalog = catalog();
        let mut probe_cache = ProbeCache::new(catalog.generation());
        let scope = UseScope {
            catalog: &catalog,
            probe_cache: &mut probe_cache,
            servers: &ServerSlots::default(),
            host_grants: &RoleGrants::new(),
            directory,
        };
        let tool_use = ToolUse {
            id: "tu_1".into(),
            name: name.into(),
            input,
        };
        resolve(scope, record, &tool_use)
    }

    fn answer(resolution: Resolution) -> (String, String, bool) {
        match resolution {
            Resolution::Answer {
                name,
                content,
                is_error,
            } => (name, content, is_error),
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    #[test]
    fn a_declared_tool_by_name_is_authorized_with_its_approval() {
        let record = run_of(&[]);
        match resolved(&record, "pay", json!({"amount": 5}), false) {
            Resolution::Authorized {
                result_name,
                tool,
                input,
                approval,
            } => {
                assert_eq!((result_name.as_str(), tool.as_str()), ("pay", "pay"));
                assert_eq!(input, json!({"amount": 5}));
                assert_eq!(approval, Approval::Required);
            }
            other => panic!("expected an authorized use, got {other:?}"),
        }
    }

    #[test]
    fn a_use_through_invoke_tool_is_recorded_under_invoke_tool() {
        let record = run_of(&[]);
        let input = json!({"name": "pay", "arguments": {"amount": 5}});
        match resolved(&record, INVOKE_TOOL, input, false) {
            Resolution::Authorized {
                result_name, tool, ..
            } => assert_eq!((result_name.as_str(), tool.as_str()), (INVOKE_TOOL, "pay")),
            other => panic!("expected an authorized use, got {other:?}"),
        }
    }

    #[test]
    fn a_policy_the_run_fails_is_refused_as_the_models_result() {
        let record = run_of(&[]);
        let (name, text, is_error) = answer(resolved(&record, "payroll", json!({}), false));
        assert_eq!(name, "payroll");
        assert!(is_error);
        assert!(!text.is_empty());
        // Through invoke_tool the same refusal reads as the meta-tools' typed error.
        let input = json!({"name": "payroll", "arguments": {"amount": 1}});
        let (name, text, is_error) = answer(resolved(&record, INVOKE_TOOL, input, false));
        assert_eq!(name, INVOKE_TOOL);
        assert!(is_error);
        assert!(text.contains("\"forbidden\""), "{text}");
        // A run holding the role may use it.
        let finance = run_of(&["finance"]);
        assert!(matches!(
            resolved(&finance, "payroll", json!({"amount": 1}), false),
            Resolution::Authorized { .. }
        ));
    }

    #[test]
    fn unknown_tools_and_bad_arguments_are_typed_answers() {
        let record = run_of(&[]);
        let (_, text, is_error) = answer(resolved(&record, "wire", json!({}), false));
        assert!(is_error && text.contains("no tool named `wire`"), "{text}");
        let input = json!({"name": "wire", "arguments": {}});
        let (_, text, _) = answer(resolved(&record, INVOKE_TOOL, input, false));
        assert!(text.contains("\"no_such_tool\""), "{text}");
        let input = json!({"name": "pay", "arguments": {"amount": "five"}});
        let (_, text, is_error) = answer(resolved(&record, INVOKE_TOOL, input, false));
        assert!(is_error && text.contains("\"invalid_arguments\""), "{text}");
    }

    #[test]
    fn search_and_load_answer_at_once() {
        let record = run_of(&[]);
        let (name, text, is_error) = answer(resolved(
            &record,
            SEARCH_TOOLS,
            json!({"query": "pay"}),
            false,
        ));
        assert_eq!(name, SEARCH_TOOLS);
        assert!(!is_error && text.contains("\"pay\""), "{text}");
        let (name, _, is_error) =
            answer(resolved(&record, LOAD_TOOL, json!({"name": "pay"}), false));
        assert_eq!(name, LOAD_TOOL);
        assert!(!is_error);
    }

    #[test]
    fn directory_tools_are_the_directorys_only_for_an_agent_of_a_goal() {
        let record = run_of(&[]);
        assert!(matches!(
            resolved(&record, "list_peers", json!({}), true),
            Resolution::Directory
        ));
        let (_, text, _) = answer(resolved(&record, "list_peers", json!({}), false));
        assert!(text.contains("no tool named `list_peers`"), "{text}");
    }

    #[test]
    fn the_listing_target_is_the_tool_a_use_names_that_the_catalog_lacks() {
        let catalog = catalog();
        let use_of = |name: &str, input: Value| ToolUse {
            id: "tu".into(),
            name: name.into(),
            input,
        };
        let target = |u: &ToolUse, directory| listing_target(&catalog, u, directory);
        assert_eq!(
            target(&use_of("bank__pay", json!({})), false).as_deref(),
            Some("bank__pay")
        );
        assert_eq!(target(&use_of("pay", json!({})), false), None);
        let via = use_of(INVOKE_TOOL, json!({"name": "bank__pay", "arguments": {}}));
        assert_eq!(target(&via, false).as_deref(), Some("bank__pay"));
        assert_eq!(target(&use_of(SEARCH_TOOLS, json!({})), false), None);
        assert_eq!(target(&use_of("list_peers", json!({})), true), None);
        assert_eq!(
            target(&use_of("list_peers", json!({})), false).as_deref(),
            Some("list_peers")
        );
    }
}
