//! The meta-tools every agent's model gets: `search_tools`, `load_tool`, `invoke_tool`, over an
//! agent's [`AgentCatalog`].
//!
//! [`AgentCatalog`] is one agent's tools as visibility sees them: each tool's auth descriptor
//! (T0 from its markers, the agent's fallback policy and its guards), the agent's named
//! policies, the roles it grants to peers, its probe budget and a catalog generation that the
//! engine bumps on every config reload. The engine and the `consort tools` CLI both answer
//! through it, so an operator sees exactly what a principal's runs would see.
//!
//! - `search_tools` and `load_tool` consult visibility ([`crate::visibility`]); T2 probes go
//!   through [`crate::tool_guard::probe`], which cannot reach a handler.
//! - `invoke_tool` never consults visibility: [`parse_invoke`] and [`validate_arguments`] check
//!   the request, then the engine runs the real authorization ([`AgentCatalog::authorize`],
//!   shared with direct tool use) and the handler.
//!
//! Every refusal is a typed JSON error, `{"error": {"code", "message"}}`. This module performs
//! no I/O and writes no run state: the engine records each answer as a `tool_result` event.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use tracing::warn;

use consort_config::AgentConfig;

use crate::model::ToolSpec;
use crate::tool_guard::{self, Access};
use crate::tools::{Tool, ToolError, declared_tool};
use crate::visibility::{
    Auth, Catalog, CatalogEntry, Identity, LoadToolAnswer, MAX_QUERY_CHARS, MAX_SEARCH_LIMIT,
    PolicyDefinition, PolicyRef, PolicyRegistry, Principal, Probe, ProbeCache, ProbeOutcome,
    RoleGrants, SearchRequest, Visibility, VisibilityError, evaluate_candidates, load_tool,
    search_tools,
};

pub(crate) const SEARCH_TOOLS: &str = "search_tools";
pub(crate) const LOAD_TOOL: &str = "load_tool";
pub(crate) const INVOKE_TOOL: &str = "invoke_tool";

/// A meta-tool's answer: the text the model reads, and whether it is an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaAnswer {
    /// The text the model reads.
    pub content: String,
    /// True when the answer reports an error to the model.
    pub is_error: bool,
}

impl MetaAnswer {
    /// A typed error: `{"error": {"code", "message"}}`.
    pub fn error(code: &str, message: impl Into<String>) -> Self {
        Self {
            content: json!({"error": {"code": code, "message": message.into()}}).to_string(),
            is_error: true,
        }
    }

    /// A tool refusal as a typed error (`forbidden`, `invalid_arguments`, `failed`).
    pub fn from_tool_error(error: &ToolError) -> Self {
        match error {
            ToolError::Forbidden(m) => Self::error("forbidden", m.clone()),
            ToolError::InvalidInput(m) => Self::error("invalid_arguments", m.clone()),
            ToolError::Failed(m) => Self::error("failed", m.clone()),
        }
    }
}

/// The specs of the three meta-tools, as the model is told about them.
pub(crate) fn meta_specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: SEARCH_TOOLS.into(),
            description: format!(
                "Find tools you can use: ranked cards (name, description, inputs). A card with authUncertain: true may refuse when invoked. Query up to {MAX_QUERY_CHARS} characters, limit 1 to {MAX_SEARCH_LIMIT}."
            ),
            input_schema: json!({"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT}}, "required": ["query"], "additionalProperties": false}),
        },
        ToolSpec {
            name: LOAD_TOOL.into(),
            description: "The full definition of one tool (name, description, input schema)."
                .into(),
            input_schema: json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"], "additionalProperties": false}),
        },
        ToolSpec {
            name: INVOKE_TOOL.into(),
            description: "Use a tool by name with arguments that match its input schema.".into(),
            input_schema: json!({"type": "object", "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}}, "required": ["name", "arguments"], "additionalProperties": false}),
        },
    ]
}

/// One agent's tools as visibility and authorization see them.
pub struct AgentCatalog {
    agent: String,
    tools: BTreeMap<String, Arc<dyn Tool>>,
    auths: BTreeMap<String, Auth>,
    catalog: Catalog,
    registry: PolicyRegistry,
    grants: RoleGrants,
    probe_budget: usize,
}

impl AgentCatalog {
    /// The catalog of `config`'s declared tools and an app's `extra` tools, at `generation`.
    pub fn build(config: &AgentConfig, extra: &[Arc<dyn Tool>], generation: u64) -> Self {
        let mut tools: BTreeMap<String, Arc<dyn Tool>> = BTreeMap::new();
        for t in &config.tools {
            tools.insert(t.name.clone(), declared_tool(t));
        }
        for t in extra {
            tools.insert(t.spec().name, t.clone());
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
            let mut markers = tool.auth_markers();
            markers.fallback_policy = fallback.clone();
            markers.guard |= !tool.guards().is_empty();
            let auth = markers.derive_auth();
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
        for (agent, roles) in &vis.grants {
            grants.grant(Principal::Agent(agent.clone()), roles.iter().cloned());
        }
        Self {
            agent: config.name.clone(),
            tools,
            auths,
            catalog,
            registry,
            grants,
            probe_budget: vis.probe_budget,
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

    /// A peer run's identity: `agent:<caller>`, present, with the roles this agent grants it.
    pub fn peer_identity(&self, caller_agent: &str) -> Identity {
        Identity::peer(caller_agent, &self.grants)
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

    /// Tells `name`'s guards that an authorized use runs now.
    pub fn record_use(&self, name: &str, identity: &Identity) {
        if let Some(tool) = self.tools.get(name) {
            tool_guard::record_use(name, tool.as_ref(), &self.access(identity));
        }
    }
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

fn error_code(e: &VisibilityError) -> &'static str {
    match e {
        VisibilityError::QueryTooLong { .. } => "query_too_long",
        VisibilityError::LimitOutOfRange { .. } => "limit_out_of_range",
        _ => "invalid_request",
    }
}

/// Reads an `invoke_tool` request: `{"name": <text>, "arguments": <object>}`.
pub(crate) fn parse_invoke(input: &Value) -> Result<(String, Value), MetaAnswer> {
    let bad = || {
        MetaAnswer::error(
            "invalid_request",
            "invoke_tool expects {\"name\": <tool name>, \"arguments\": {...}}",
        )
    };
    let Value::Object(map) = input else {
        return Err(bad());
    };
    if map.keys().any(|k| k != "name" && k != "arguments") {
        return Err(bad());
    }
    let Some(name) = map.get("name").and_then(Value::as_str) else {
        return Err(bad());
    };
    let arguments = map.get("arguments").cloned().unwrap_or_else(|| json!({}));
    if !arguments.is_object() {
        return Err(MetaAnswer::error(
            "invalid_arguments",
            "`arguments` must be an object",
        ));
    }
    Ok((name.to_owned(), arguments))
}

fn type_matches(kind: &str, value: &Value) -> bool {
    match kind {
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => true,
    }
}

/// Checks `arguments` against a tool's input schema: an object, required keys present, no
/// extra keys when `additionalProperties` is false, and each declared property of its type.
pub(crate) fn validate_arguments(schema: &Value, arguments: &Value) -> Result<(), String> {
    let Value::Object(args) = arguments else {
        return Err("arguments must be an object".into());
    };
    let properties = schema.get("properties").and_then(Value::as_object);
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !args.contains_key(name) {
            return Err(format!("missing required argument `{name}`"));
        }
    }
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    for (key, value) in args {
        let property = properties.and_then(|p| p.get(key));
        let Some(property) = property else {
            if closed {
                return Err(format!("unknown argument `{key}`"));
            }
            continue;
        };
        let ok = match property.get("type") {
            Some(Value::String(kind)) => type_matches(kind, value),
            Some(Value::Array(kinds)) => kinds
                .iter()
                .filter_map(Value::as_str)
                .any(|kind| type_matches(kind, value)),
            _ => true,
        };
        if !ok {
            return Err(format!(
                "argument `{key}` must be of type {}",
                property
                    .get("type")
                    .map(Value::to_string)
                    .unwrap_or_default()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use consort_config::{ModelConfig, PolicyConfig, VisibilityConfig};

    use super::*;
    use crate::guard::{FeatureGuard, Guard, GuardContext, GuardVerdict};
    use crate::tools::{ToolContext, ToolFuture};
    use crate::visibility::{AuthMarkers, Caller};

    /// A tool whose handler has a side effect: it counts its runs.
    struct Counting {
        name: String,
        runs: Arc<AtomicUsize>,
        markers: AuthMarkers,
        guards: Vec<Arc<dyn Guard>>,
    }

    impl Tool for Counting {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: self.name.clone(),
                description: format!("{} tool", self.name),
                input_schema: json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"], "additionalProperties": false}),
            }
        }
        fn invoke<'a>(&'a self, _ctx: ToolContext<'a>, _input: &'a Value) -> ToolFuture<'a> {
            self.runs.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok("ran".to_owned()) })
        }
        fn auth_markers(&self) -> AuthMarkers {
            self.markers.clone()
        }
        fn guards(&self) -> Vec<Arc<dyn Guard>> {
            self.guards.clone()
        }
    }

    /// A guard that cannot tell.
    struct Flaky;
    impl Guard for Flaky {
        fn kind(&self) -> &str {
            "flaky"
        }
        fn check(&self, _ctx: &GuardContext<'_>) -> GuardVerdict {
            GuardVerdict::CannotTell("licence server down".into())
        }
    }

    fn config(probe_budget: usize) -> AgentConfig {
        let mut visibility = VisibilityConfig {
            probe_budget,
            ..VisibilityConfig::default()
        };
        visibility.policies.insert(
            "finance_team".into(),
            PolicyConfig {
                roles: vec!["finance".into()],
                ..PolicyConfig::default()
            },
        );
        visibility
            .grants
            .insert("cmo".into(), vec!["marketing".into()]);
        AgentConfig {
            name: "cfo".into(),
            description: String::new(),
            can_call: vec![],
            accept_from: vec!["cmo".into()],
            model: ModelConfig::Script { steps: vec![] },
            tools: vec![],
            env: BTreeMap::new(),
            dir: "cfo".into(),
            file: "cfo/agent.yaml".into(),
            visibility,
            limits: Default::default(),
        }
    }

    struct Fixture {
        catalog: AgentCatalog,
        runs: Arc<AtomicUsize>,
    }

    fn tool(
        name: &str,
        runs: &Arc<AtomicUsize>,
        policies: &[&str],
        guards: Vec<Arc<dyn Guard>>,
    ) -> Arc<dyn Tool> {
        Arc::new(Counting {
            name: name.into(),
            runs: runs.clone(),
            markers: AuthMarkers {
                policies: policies
                    .iter()
                    .filter_map(|p| PolicyRef::parse(p).ok())
                    .collect(),
                ..AuthMarkers::default()
            },
            guards,
        })
    }

    fn fixture(probe_budget: usize) -> Fixture {
        let runs = Arc::new(AtomicUsize::new(0));
        let off: Arc<dyn Guard> = Arc::new(FeatureGuard {
            enabled: false,
            message: "closed".into(),
        });
        let on: Arc<dyn Guard> = Arc::new(FeatureGuard {
            enabled: true,
            message: String::new(),
        });
        let tools = vec![
            tool("payroll", &runs, &["roles:finance"], vec![]),
            tool("budget", &runs, &["finance_team"], vec![]),
            tool("ledger", &runs, &[], vec![]),
            tool("gated_closed", &runs, &[], vec![off]),
            tool("gated_open", &runs, &[], vec![on]),
            tool("gated_flaky", &runs, &[], vec![Arc::new(Flaky)]),
        ];
        Fixture {
            catalog: AgentCatalog::build(&config(probe_budget), &tools, 7),
            runs,
        }
    }

    fn api(name: &str, roles: &[&str]) -> Identity {
        Identity::Present(Caller {
            principal: Principal::Api(name.into()),
            roles: roles.iter().map(|r| r.to_string()).collect(),
        })
    }

    fn shown(answer: &MetaAnswer) -> Vec<(String, bool)> {
        let v: Value = serde_json::from_str(&answer.content).unwrap();
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_owned(),
                    c["authUncertain"].as_bool().unwrap(),
                )
            })
            .collect()
    }

    fn search(f: &Fixture, who: &Identity, query: &str) -> MetaAnswer {
        let mut cache = ProbeCache::new(0);
        f.catalog
            .search(who, &mut cache, &json!({"query": query, "limit": 50}))
    }

    #[test]
    fn two_principals_of_one_agent_see_different_catalogs() {
        let f = fixture(25);
        let cmo = f.catalog.peer_identity("cmo");
        let alice = api("alice", &["finance"]);
        let cmo_sees: BTreeSet<String> = shown(&search(&f, &cmo, ""))
            .into_iter()
            .map(|c| c.0)
            .collect();
        let alice_sees: BTreeSet<String> = shown(&search(&f, &alice, ""))
            .into_iter()
            .map(|c| c.0)
            .collect();
        assert!(!cmo_sees.contains("payroll") && !cmo_sees.contains("budget"));
        assert!(alice_sees.contains("payroll") && alice_sees.contains("budget"));
        assert!(cmo_sees.contains("ledger"));
        let v: Value = serde_json::from_str(&search(&f, &cmo, "").content).unwrap();
        assert_eq!(v["generation"], 7);
        assert_eq!(v["total"], cmo_sees.len());
        let specs: Vec<String> = f
            .catalog
            .visible_specs(&cmo, &mut ProbeCache::new(0))
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert!(!specs.contains(&"payroll".to_owned()), "{specs:?}");
    }

    #[test]
    fn load_of_a_denied_tool_equals_a_missing_one_byte_for_byte() {
        let f = fixture(25);
        let cmo = f.catalog.peer_identity("cmo");
        let mut cache = ProbeCache::new(0);
        let denied = f
            .catalog
            .load(&cmo, &mut cache, &json!({"name": "payroll"}));
        let denied_other = f.catalog.load(&cmo, &mut cache, &json!({"name": "nope"}));
        // Same name, so compare with a tool that does not exist under that name elsewhere.
        let missing = fixture_without_payroll().load(&cmo, &mut cache, &json!({"name": "payroll"}));
        assert_eq!(denied.content.as_bytes(), missing.content.as_bytes());
        assert!(denied.is_error && missing.is_error && denied_other.is_error);
        let alice = f.catalog.load(
            &api("alice", &["finance"]),
            &mut cache,
            &json!({"name": "payroll"}),
        );
        assert!(!alice.is_error);
        assert!(!alice.content.contains("roles") && !alice.content.contains("finance_team"));
        assert!(alice.content.contains("inputSchema"), "{}", alice.content);
    }

    fn fixture_without_payroll() -> AgentCatalog {
        let runs = Arc::new(AtomicUsize::new(0));
        AgentCatalog::build(&config(25), &[tool("ledger", &runs, &[], vec![])], 7)
    }

    #[test]
    fn probes_decide_unknown_tools_and_never_run_a_handler() {
        let f = fixture(25);
        let cmo = f.catalog.peer_identity("cmo");
        let cards = shown(&search(&f, &cmo, "gated"));
        // closed: the guard refused the probe (deny, hidden); open: reached the cut (allow);
        // flaky: the guard could not tell (unknown, shown with authUncertain).
        assert_eq!(
            cards,
            vec![("gated_flaky".into(), true), ("gated_open".into(), false)]
        );
        assert_eq!(
            f.runs.load(Ordering::SeqCst),
            0,
            "no handler ran under a probe"
        );
        // Without an identity, a tool with declared policies is denied by rule 1 at once.
        let anon = shown(&search(&f, &Identity::Absent, ""));
        assert!(!anon.iter().any(|(n, _)| n == "payroll"));
        assert_eq!(f.runs.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn the_probe_budget_is_respected() {
        let f = fixture(1);
        let cmo = f.catalog.peer_identity("cmo");
        // Ranked by name among equal scores: gated_closed, gated_flaky, gated_open. Only the
        // first is probed (and hidden); the others stay unknown.
        let cards = shown(&search(&f, &cmo, "gated"));
        assert_eq!(
            cards,
            vec![("gated_flaky".into(), true), ("gated_open".into(), true)]
        );
        let none = fixture(0);
        let cards = shown(&search(&none, &cmo, "gated"));
        assert_eq!(cards.len(), 3);
        assert!(cards.iter().all(|(_, uncertain)| *uncertain));
    }

    #[test]
    fn invoking_a_hidden_tool_fails_in_the_real_check() {
        let f = fixture(25);
        let cmo = f.catalog.peer_identity("cmo");
        let args = json!({"query": "x"});
        for hidden in ["payroll", "budget", "gated_closed"] {
            let refusal = f.catalog.authorize(hidden, &cmo, &args).unwrap_err();
            assert!(
                matches!(refusal, ToolError::Forbidden(_)),
                "{hidden}: {refusal}"
            );
            let typed = MetaAnswer::from_tool_error(&refusal);
            assert!(typed.content.contains("\"forbidden\""));
            assert!(
                !typed.content.contains("finance"),
                "no policy names: {}",
                typed.content
            );
        }
        assert!(f.catalog.authorize("gated_flaky", &cmo, &args).is_err());
        assert!(f.catalog.authorize("ledger", &cmo, &args).is_ok());
        assert!(
            f.catalog
                .authorize("payroll", &api("alice", &["finance"]), &args)
                .is_ok()
        );
        assert!(
            f.catalog
                .authorize("payroll", &Identity::Absent, &args)
                .is_err()
        );
    }

    #[test]
    fn quota_guard_counts_real_uses_only() {
        let runs = Arc::new(AtomicUsize::new(0));
        let quota: Arc<dyn Guard> = Arc::new(crate::guard::QuotaGuard::new(1));
        let catalog = AgentCatalog::build(&config(25), &[tool("once", &runs, &[], vec![quota])], 1);
        let who = Identity::Absent;
        for _ in 0..3 {
            assert_eq!(
                shown(&catalog.search(&who, &mut ProbeCache::new(0), &json!({"query": "once"})))
                    .len(),
                1
            );
        }
        assert!(
            catalog
                .authorize("once", &who, &json!({"query": "x"}))
                .is_ok()
        );
        catalog.record_use("once", &who);
        assert!(matches!(
            catalog.authorize("once", &who, &json!({"query": "x"})),
            Err(ToolError::Forbidden(_))
        ));
        assert!(
            shown(&catalog.search(&who, &mut ProbeCache::new(0), &json!({"query": "once"})))
                .is_empty()
        );
    }

    #[test]
    fn bad_requests_are_typed_errors() {
        let f = fixture(25);
        let who = Identity::Absent;
        let mut cache = ProbeCache::new(0);
        let code = |a: &MetaAnswer| {
            assert!(a.is_error);
            let v: Value = serde_json::from_str(&a.content).unwrap();
            v["error"]["code"].as_str().unwrap().to_owned()
        };
        let long = "q".repeat(MAX_QUERY_CHARS + 1);
        assert_eq!(
            code(&f.catalog.search(&who, &mut cache, &json!({"query": long}))),
            "query_too_long"
        );
        for limit in [0, MAX_SEARCH_LIMIT + 1] {
            let a = f
                .catalog
                .search(&who, &mut cache, &json!({"query": "x", "limit": limit}));
            assert_eq!(code(&a), "limit_out_of_range");
        }
        for bad in [
            json!({"query": 3}),
            json!({"limit": 2}),
            json!({"query": "x", "limit": -1}),
            json!("x"),
        ] {
            assert_eq!(
                code(&f.catalog.search(&who, &mut cache, &bad)),
                "invalid_request"
            );
        }
        assert_eq!(
            code(&f.catalog.load(&who, &mut cache, &json!({"nam": "x"}))),
            "invalid_request"
        );
        assert!(parse_invoke(&json!({"name": "x", "arguments": 3})).is_err());
        assert!(parse_invoke(&json!({"name": "x", "args": {}})).is_err());
        assert!(parse_invoke(&json!({"arguments": {}})).is_err());
        let schema = json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"], "additionalProperties": false});
        assert!(validate_arguments(&schema, &json!({"query": "x"})).is_ok());
        assert!(
            validate_arguments(&schema, &json!({}))
                .unwrap_err()
                .contains("missing")
        );
        assert!(
            validate_arguments(&schema, &json!({"query": 1}))
                .unwrap_err()
                .contains("type")
        );
        assert!(
            validate_arguments(&schema, &json!({"query": "x", "x": 1}))
                .unwrap_err()
                .contains("unknown")
        );
    }
}
