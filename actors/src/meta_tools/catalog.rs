//! One agent's [`AgentCatalog`]: its tools as visibility and authorization see them, and the
//! answers of `search_tools` and `load_tool` over it.
//!
//! The catalog joins each tool's auth descriptor (T0 from its markers, the agent's fallback
//! policy and its guards), the agent's named policies, the roles it grants to peers, its probe
//! budget and a catalog generation that the engine bumps on every config reload. Listing goes
//! through visibility ([`crate::visibility`]), whose T2 probes run the tool's real pipeline
//! through [`tool_guard::probe`], which cannot reach a handler. A use goes through
//! [`AgentCatalog::authorize`] instead, which never consults visibility: what a caller is shown
//! and what it may run are decided apart, so a tool shown as uncertain is still refused by the
//! real check when it should be.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use tracing::warn;

use consort_config::AgentConfig;

use super::answer::{MetaAnswer, error_code};
use crate::model::ToolSpec;
use crate::tool_guard::{self, Access};
use crate::tools::{Tool, ToolError, declared_tool};
use crate::visibility::{
    Auth, Catalog, CatalogEntry, Identity, LoadToolAnswer, MAX_SEARCH_LIMIT, Origin,
    PolicyDefinition, PolicyRef, PolicyRegistry, Principal, Probe, ProbeCache, ProbeOutcome,
    RoleGrants, SearchRequest, Visibility, evaluate_candidates, load_tool, search_tools,
};

/// One agent's tools as visibility and authorization see them.
pub struct AgentCatalog {
    agent: String,
    tools: BTreeMap<String, Arc<dyn Tool>>,
    auths: BTreeMap<String, Auth>,
    catalog: Catalog,
    registry: PolicyRegistry,
    grants: RoleGrants,
    probe_budget: usize,
    /// The agent's `fallback_policy`, for a tool authorized outside the catalog.
    fallback: Option<PolicyRef>,
}

impl AgentCatalog {
    /// The catalog of `config`'s declared tools and an app's `extra` tools, at `generation`.
    pub fn build(config: &AgentConfig, extra: &[Arc<dyn Tool>], generation: u64) -> Self {
        Self::build_with_served(config, extra, &[], generation)
    }

    /// As [`AgentCatalog::build`], with the tools the agent's MCP servers listed (`served`).
    /// A served tool never replaces a declared or an app's tool of the same name.
    pub fn build_with_served(
        config: &AgentConfig,
        extra: &[Arc<dyn Tool>],
        served: &[Arc<dyn Tool>],
        generation: u64,
    ) -> Self {
        let mut tools: BTreeMap<String, Arc<dyn Tool>> = BTreeMap::new();
        for t in &config.tools {
            if let Some(tool) = declared_tool(t) {
                tools.insert(t.name.clone(), tool);
            }
        }
        for t in extra {
            tools.insert(t.spec().name, t.clone());
        }
        for t in served {
            let name = t.spec().name;
            if tools.contains_key(&name) {
                warn!(agent = %config.name, tool = %name, "a tool of an MCP server has the name of another tool; left out");
                continue;
            }
            tools.insert(name, t.clone());
        }
        let vis = &config.visibility;
        let mut registry = PolicyRegistry::new();
        for (name, policy) in &vis.policies {
            let principals = policy
                .principals
                .iter()
                .filter_map(|p| Principal::parse(p).ok())
                .collect();
            let definition = PolicyDefinition {
                roles: policy.roles.clone(),
                principals,
                origin_roles: policy.origin_roles.clone(),
                needs_resource: policy.needs_resource,
            };
            if let Err(e) = registry.define(name, definition) {
                // consort-config checked it; an undefined policy fails closed.
                warn!(agent = %config.name, policy = %name, error = %e, "policy left undefined");
            }
        }
        let fallback = vis.fallback_policy.as_deref().map(|p| {
            PolicyRef::parse(p).unwrap_or_else(|_| PolicyRef::Named("invalid-policy".into()))
        });
        let mut auths = BTreeMap::new();
        let mut entries = Vec::new();
        for (name, tool) in &tools {
            let auth = auth_of(tool.as_ref(), fallback.as_ref());
            let spec = tool.spec();
            entries.push(CatalogEntry {
                name: name.clone(),
                description: spec.description,
                input_schema: spec.input_schema,
                auth: auth.clone(),
            });
            auths.insert(name.clone(), auth);
        }
        let catalog = Catalog::new(generation, entries).unwrap_or_else(|e| {
            warn!(agent = %config.name, error = %e, "tool catalog refused; no tools listed");
            Catalog::empty(generation)
        });
        let mut grants = RoleGrants::new();
        for (agent, grant) in &vis.grants {
            let principal = Principal::Agent(agent.clone());
            grants.grant(principal.clone(), grant.roles.iter().cloned());
            if grant.on_behalf_of_any {
                grants.for_any_origin(principal);
            }
        }
        Self {
            agent: config.name.clone(),
            tools,
            auths,
            catalog,
            registry,
            grants,
            probe_budget: vis.probe_budget,
            fallback,
        }
    }

    /// Bumped on every rebuild (config reload), so cached answers can tell they are stale.
    pub fn generation(&self) -> u64 {
        self.catalog.generation()
    }

    /// Every tool of the agent, by name.
    pub fn tools(&self) -> &BTreeMap<String, Arc<dyn Tool>> {
        &self.tools
    }

    /// The tool with this name, if the agent has it.
    pub fn tool(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// How many policy probes one search may spend (`visibility.probe_budget`).
    pub fn probe_budget(&self) -> usize {
        self.probe_budget
    }

    /// The roles this agent grants to peers (`agent:<name>`).
    pub fn grants(&self) -> &RoleGrants {
        &self.grants
    }

    /// A peer run's identity: `agent:<caller>`, present, acting for `origin`, with the roles
    /// this agent grants it as far as the origin holds them (its roles here are what
    /// `host_grants` and this agent's grants give it), unless the grant holds for any origin.
    pub fn peer_identity(
        &self,
        caller_agent: &str,
        origin: &Origin,
        host_grants: &RoleGrants,
    ) -> Identity {
        Identity::peer(caller_agent, &self.grants, origin, host_grants)
    }

    /// The identity and origin of a new run a delivery from `from` makes. An operator's
    /// message acts for nobody. A peer's acts for that agent, for an origin the delivery does
    /// not carry: unknown, so the peer cannot lend the run roles that whoever started its own
    /// request may not hold.
    pub(crate) fn sender_identity(
        &self,
        from: &str,
        host_grants: &RoleGrants,
    ) -> (Identity, Origin) {
        if from == consort_core::directory::OPERATOR_SENDER {
            return (Identity::Absent, Origin::Absent);
        }
        let origin = Origin::Unknown;
        (self.peer_identity(from, &origin, host_grants), origin)
    }

    fn access<'a>(&'a self, identity: &'a Identity) -> Access<'a> {
        Access {
            agent: &self.agent,
            identity,
            registry: &self.registry,
        }
    }

    fn with_visibility<T>(&self, identity: &Identity, f: impl FnOnce(&Visibility<'_>) -> T) -> T {
        let probe = CatalogProbe {
            catalog: self,
            access: self.access(identity),
        };
        let visibility = Visibility {
            identity,
            registry: &self.registry,
            probe: Some(&probe),
            probe_budget: self.probe_budget,
        };
        f(&visibility)
    }

    /// `search_tools`.
    pub fn search(&self, identity: &Identity, cache: &mut ProbeCache, input: &Value) -> MetaAnswer {
        let request: SearchRequest = match serde_json::from_value(input.clone()) {
            Ok(request) => request,
            Err(e) => {
                return MetaAnswer::error(
                    "invalid_request",
                    format!(
                        "search_tools expects {{\"query\": <text>, \"limit\": 1 to {MAX_SEARCH_LIMIT}}}: {e}"
                    ),
                );
            }
        };
        let answer = self.with_visibility(identity, |v| {
            search_tools(&self.catalog, &request, v, cache)
        });
        match answer {
            Ok(answer) => MetaAnswer {
                content: serde_json::to_string(&answer)
                    .unwrap_or_else(|_| "{\"tools\": []}".to_owned()),
                is_error: false,
            },
            Err(e) => MetaAnswer::error(error_code(&e), e.to_string()),
        }
    }

    /// `load_tool`: a denied tool answers byte for byte as a missing one.
    pub fn load(&self, identity: &Identity, cache: &mut ProbeCache, input: &Value) -> MetaAnswer {
        let name = match input {
            Value::Object(map) if map.len() == 1 => map.get("name").and_then(Value::as_str),
            _ => None,
        };
        let Some(name) = name else {
            return MetaAnswer::error(
                "invalid_request",
                "load_tool expects {\"name\": <tool name>}",
            );
        };
        let answer = self.with_visibility(identity, |v| load_tool(&self.catalog, name, v, cache));
        let is_error = matches!(answer, LoadToolAnswer::NoSuchTool { .. });
        MetaAnswer {
            content: serde_json::to_string(&answer)
                .unwrap_or_else(|_| "{\"error\": \"no such tool\"}".to_owned()),
            is_error,
        }
    }

    /// The specs of the tools `identity` may see (allow or unknown), for the model's direct
    /// tool list; hidden tools are left out.
    pub fn visible_specs(&self, identity: &Identity, cache: &mut ProbeCache) -> Vec<ToolSpec> {
        let candidates: Vec<(&str, &Auth)> = self
            .catalog
            .entries()
            .iter()
            .map(|e| (e.name.as_str(), &e.auth))
            .collect();
        let verdicts = self.with_visibility(identity, |v| {
            evaluate_candidates(&candidates, self.catalog.generation(), v, cache)
        });
        candidates
            .iter()
            .zip(verdicts)
            .filter(|(_, verdict)| verdict.decision.is_shown())
            .filter_map(|((name, _), _)| self.tools.get(*name).map(|t| t.spec()))
            .collect()
    }

    /// The real authorization of one use of `name` with `input` (guards, then the tool's
    /// resource check). Shared by direct tool use and `invoke_tool`.
    pub fn authorize(
        &self,
        name: &str,
        identity: &Identity,
        input: &Value,
    ) -> Result<(), ToolError> {
        let (Some(tool), Some(auth)) = (self.tools.get(name), self.auths.get(name)) else {
            return Err(ToolError::Failed(format!("no tool named `{name}`")));
        };
        tool_guard::authorize(name, tool.as_ref(), auth, &self.access(identity), input)
    }

    /// The real authorization of one use of `tool`, which the catalog does not hold (a tool of
    /// an MCP server that could not be listed), exactly as if it did: a caller the tool's
    /// declaration refuses is refused before it learns anything about the server.
    pub(crate) fn authorize_unlisted(
        &self,
        name: &str,
        tool: &dyn Tool,
        identity: &Identity,
        input: &Value,
    ) -> Result<(), ToolError> {
        let auth = auth_of(tool, self.fallback.as_ref());
        tool_guard::authorize(name, tool, &auth, &self.access(identity), input)
    }

    /// Whether `identity` is refused outright every tool `stand_in` stands for (a server entry's
    /// declaration: its auth, policies and guards), so its server need not be started for it.
    pub(crate) fn refuses_all_of(&self, stand_in: &dyn Tool, identity: &Identity) -> bool {
        let auth = auth_of(stand_in, self.fallback.as_ref());
        let name = stand_in.spec().name;
        tool_guard::probe(&name, stand_in, &auth, &self.access(identity)) == ProbeOutcome::Refused
    }

    /// Tells `name`'s guards that an authorized use runs now.
    pub fn record_use(&self, name: &str, identity: &Identity) {
        if let Some(tool) = self.tools.get(name) {
            tool_guard::record_use(name, tool.as_ref(), &self.access(identity));
        }
    }
}

/// A tool's auth descriptor: its markers, the agent's fallback policy and its guards.
fn auth_of(tool: &dyn Tool, fallback: Option<&PolicyRef>) -> Auth {
    let mut markers = tool.auth_markers();
    markers.fallback_policy = fallback.cloned();
    markers.guard |= !tool.guards().is_empty();
    markers.derive_auth()
}

/// T2 for one catalog: the tool's real pipeline, cut before the handler.
struct CatalogProbe<'a> {
    catalog: &'a AgentCatalog,
    access: Access<'a>,
}

impl Probe for CatalogProbe<'_> {
    fn probe(&self, tool: &str, _principal: &Principal) -> ProbeOutcome {
        match (self.catalog.tools.get(tool), self.catalog.auths.get(tool)) {
            (Some(t), Some(auth)) => tool_guard::probe(tool, t.as_ref(), auth, &self.access),
            _ => ProbeOutcome::Other,
        }
    }
}
